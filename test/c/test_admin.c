/* The admin API as the library serves it (cfg.admin, src/admin.c): off by default; on, a listener of its own
 * whose answers are exact bytes; cb_server_stubs_file() keeps a stub's "expect" for POST /verify; the admin
 * thread and its engine stop with the server (the runner checks for threads and descriptors left). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "h2client.h"
#include "testing.h"

/* One request on a new connection (closed by the client's "connection: close"); the whole answer, dates masked,
 * must be `status` with a JSON body `json` (NULL: none). */
static void admin_call(int port, const char *method, const char *path, const char *body, int status,
                       const char *json) {
  char req[1024];
  snprintf(req, sizeof req, "%s %s HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: %zu\r\n\r\n%s", method,
           path, body ? strlen(body) : 0, body ? body : "");
  int fd = cl_connect(port);
  cl_sends(fd, req);
  buf_t got = {0}, exp = {0};
  ASSERT_EQ(cl_read_close(fd, &got, 10000), CL_EOF);
  mask_dates(got.p, got.len);
  exp_head(&exp, status, json ? "application/json" : NULL, NULL, json ? (long)strlen(json) : CL_NONE, CONN_CLOSE);
  if (json) buf_adds(&exp, json);
  ASSERT_MEM_EQ(got.p, got.len, exp.p, exp.len);
  close(fd);
  buf_free(&got);
  buf_free(&exp);
}

TEST(admin_off_by_default) {
  cb_config_t cfg;
  test_config(&cfg);
  ASSERT_EQ(cfg.admin, 0);
  cb_server_t *srv = test_start(&cfg);
  ASSERT_EQ(cb_server_admin_port(srv), 0);
  test_stop(srv);
}

/* A server with the admin API on an ephemeral port (cb_server_admin_port() says which), with cfg's settings. */
static cb_server_t *admin_server(cb_config_t *cfg) {
  cfg->admin = 1;
  cfg->admin_port = 0;
  return test_start(cfg);
}

TEST(admin_verify_and_stubs_file) {
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *srv = admin_server(&cfg);
  int admin = cb_server_admin_port(srv);
  ASSERT(admin > 0);
  ASSERT(admin != cb_server_port(srv));
  char path[512], msg[1024];
  const char *t = getenv("TMPDIR");
  snprintf(path, sizeof path, "%s/cbench-%d-admin.json", t && *t ? t : "/tmp", (int)getpid());
  FILE *f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fputs("[{\"match\": {\"method\": \"GET\", \"path\": \"/p\"}, \"response\": {\"body\": \"q\"}, "
        "\"expect\": {\"times\": 1}}]",
        f);
  fclose(f);
  ASSERT_EQ(cb_server_stubs_file(srv, path, msg, sizeof msg), 1);
  admin_call(admin, "POST", "/verify", NULL, 409,
             "{\"ok\":false,\"problems\":[{\"problem\":\"no_request_arrived\",\"stub\":\"GET /p\",\"id\":1,"
             "\"expected\":{\"times\":1},\"got\":0}]}");
  buf_t exp = {0};
  exp_head(&exp, 200, NULL, NULL, 1, CONN_NONE);
  buf_adds(&exp, "q");
  int fd = cl_connect(cb_server_port(srv));
  cl_sends(fd, "GET /p HTTP/1.1\r\nhost: x\r\n\r\n");
  buf_t got = {0};
  ASSERT_EQ(cl_read_n(fd, &got, exp.len, 10000), CL_OK);
  mask_dates(got.p, got.len);
  ASSERT_MEM_EQ(got.p, got.len, exp.p, exp.len);
  close(fd);
  buf_free(&got);
  buf_free(&exp);
  /* The journal records the request when its response is complete, before the client sees the end. */
  admin_call(admin, "POST", "/verify", NULL, 200, "{\"ok\":true,\"problems\":[]}");
  admin_call(admin, "POST", "/stubs", "{\"match\": {\"path\": \"/r\"}, \"expect\": {\"at_least\": 1}}", 201,
             "{\"ids\":[2]}");
  admin_call(admin, "DELETE", "/stubs/2", NULL, 204, NULL);
  admin_call(admin, "POST", "/verify", NULL, 200, "{\"ok\":true,\"problems\":[]}");
  admin_call(admin, "POST", "/stubs", "[1]", 400,
             "{\"field\":\"stubs[0]\",\"why\":\"wrong_type\",\"message\":\"body:1: stubs[0]: wrong_type: must be an "
             "object with match and response\"}");
  /* A file with an error: UV_EINVAL and the message, nothing added. */
  f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fputs("[{\"match\": {\"path\": \"/x\"}, \"expect\": {\"times\": \"1\"}}]", f);
  fclose(f);
  ASSERT_EQ(cb_server_stubs_file(srv, path, msg, sizeof msg), CB_EINVAL);
  char want[1200];
  snprintf(want, sizeof want, "%s:1: stubs[0].expect.times: wrong_type: must be an integer from 0 to %llu", path,
           (unsigned long long)(UINT64_MAX >> 1));
  ASSERT_STR_EQ(msg, want);
  unlink(path);
  test_stop(srv);
}

/* GET /near-misses: the journal's 404s with their closest stubs (cb_server_near_misses), the items as a 404's
 * JSON body writes them: a matcher's name as one code point per byte, as its \u00HH escapes decode. */
TEST(admin_near_misses) {
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *srv = admin_server(&cfg);
  int admin = cb_server_admin_port(srv);
  admin_call(admin, "GET", "/near-misses", NULL, 200, "[]");
  admin_call(admin, "POST", "/stubs",
             "{\"name\": \"q\", \"match\": {\"method\": \"POST\", \"path\": \"/a\", \"query\": {\"\xc3\xa9\": \"1\"}}}",
             201, "{\"ids\":[1]}");
  int fd = cl_connect(cb_server_port(srv));
  cl_sends(fd, "GET /a?x=1 HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
  buf_t got = {0};
  ASSERT_EQ(cl_read_close(fd, &got, 10000), CL_EOF);
  ASSERT(got.len > 12 && memcmp(got.p, "HTTP/1.1 404", 12) == 0);
  close(fd);
  buf_free(&got);
  admin_call(admin, "GET", "/near-misses", NULL, 200,
             "[{\"seq\":1,\"method\":\"GET\",\"path\":\"/a\",\"query\":\"x=1\",\"near_misses\":[{\"name\":\"q\",\"id\":1,"
             "\"differs\":[\"method\",\"query \xc3\x83\xc2\xa9\"]}]}]");
  test_stop(srv);
}

/* GET /requests with a bad parameter: the answer names the parameter and quotes its value whatever their bytes.
 * A name or value that percent-decodes to bytes that are not UTF-8 cannot be a JSON string as it is (jansson
 * refuses it), so such bytes are written \xNN, as the stub loader quotes a field; the control bytes too. */
TEST(admin_requests_bad_parameter) {
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *srv = admin_server(&cfg);
  int admin = cb_server_admin_port(srv);
  admin_call(admin, "GET", "/requests?%ff=1", NULL, 400,
             "{\"field\":\"\\\\xff\",\"why\":\"unknown_key\",\"message\":\"GET /requests takes path, method, route, stub, "
             "since and limit\"}");
  admin_call(admin, "GET", "/requests?x%1b=1", NULL, 400,
             "{\"field\":\"x\\\\x1b\",\"why\":\"unknown_key\",\"message\":\"GET /requests takes path, method, route, "
             "stub, since and limit\"}");
  admin_call(admin, "GET", "/requests?limit=%ff", NULL, 400,
             "{\"field\":\"limit\",\"why\":\"wrong_type\",\"value\":\"\\\\xff\",\"message\":\"must be a non-negative "
             "integer\"}");
  admin_call(admin, "GET", "/requests?since=1%c3%a9", NULL, 400,
             "{\"field\":\"since\",\"why\":\"wrong_type\",\"value\":\"1\\\\xc3\\\\xa9\",\"message\":\"must be a "
             "non-negative integer\"}");
  admin_call(admin, "GET", "/requests?limit=x", NULL, 400,
             "{\"field\":\"limit\",\"why\":\"wrong_type\",\"value\":\"x\",\"message\":\"must be a non-negative "
             "integer\"}");
  test_stop(srv);
}

/* A %00 in a GET /requests parameter is a byte of it like any other: the name or number does not end there.
 * "limit=1%00x" is not a limit of 1, and "limit%00x" is not "limit". */
TEST(admin_requests_nul_in_parameter) {
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *srv = admin_server(&cfg);
  int admin = cb_server_admin_port(srv);
  admin_call(admin, "GET", "/requests?limit=1%00x", NULL, 400,
             "{\"field\":\"limit\",\"why\":\"wrong_type\",\"value\":\"1\\\\x00x\",\"message\":\"must be a non-negative "
             "integer\"}");
  admin_call(admin, "GET", "/requests?since%00=1", NULL, 400,
             "{\"field\":\"since\\\\x00\",\"why\":\"unknown_key\",\"message\":\"GET /requests takes path, method, "
             "route, stub, since and limit\"}");
  admin_call(admin, "GET", "/requests?path%00x=/a", NULL, 400,
             "{\"field\":\"path\\\\x00x\",\"why\":\"unknown_key\",\"message\":\"GET /requests takes path, method, "
             "route, stub, since and limit\"}");
  admin_call(admin, "GET", "/requests?limit=1", NULL, 200, "[]");
  test_stop(srv);
}

/* POST /recorded/save with a --record-to file whose name is not UTF-8 (a path is bytes): the answer still says
 * what was saved where, the name as "file_base64" (the admin API's rule for such bytes); and when the save
 * fails, the message quotes it with \xNN. jansson refuses such a string, and the answer was a bare 200 with no
 * body (or a 500 without its message). */
TEST(admin_recorded_save_non_utf8_file) {
  const char *t = getenv("TMPDIR");
  char file[512], want[1400], b64[700];
  snprintf(file, sizeof file, "%s/cbench-%d-rec-\xff.json", t && *t ? t : "/tmp", (int)getpid());
  cb_config_t cfg;
  test_config(&cfg);
  cfg.record_to = file;
  cb_server_t *srv = admin_server(&cfg);
  int admin = cb_server_admin_port(srv);
  EVP_EncodeBlock((unsigned char *)b64, (const unsigned char *)file, (int)strlen(file));
  snprintf(want, sizeof want, "{\"saved\":0,\"file_base64\":\"%s\"}", b64);
  admin_call(admin, "POST", "/recorded/save", NULL, 200, want);
  ASSERT_EQ(access(file, F_OK), 0);
  unlink(file);
  test_stop(srv);

  cfg.record_to = "/nonexistent-cbench-dir/r\xff.json";
  srv = test_start(&cfg);
  admin = cb_server_admin_port(srv);
  admin_call(admin, "POST", "/recorded/save", NULL, 500,
             "{\"why\":\"save_failed\",\"message\":\"/nonexistent-cbench-dir/r\\\\xff.json.tmp: No such file or "
             "directory\"}");
  test_stop(srv);
}

/* DELETE /stubs/{id} with an id that is not a number: the 400 quotes it. HTTP/1.1's parser refuses a path byte
 * above 0x7e, but an h2 :path may carry one, which no JSON string holds as it is: written \xNN. */
TEST(admin_delete_stub_bad_id_bytes) {
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *srv = admin_server(&cfg);
  h2cl_t *cl = h2_open(cb_server_admin_port(srv));
  h2_handshake(cl);
  h2resp_t *r = h2_request(cl, 1, "DELETE", "/stubs/1\xff", NULL, 0, NULL, 0);
  h2_wait1(cl, r, 10000);
  ASSERT_EQ(r->status, 400);
  const char *want = "{\"field\":\"id\",\"why\":\"wrong_type\",\"value\":\"1\\\\xff\",\"message\":\"a stub id is a "
                     "positive integer\"}";
  ASSERT_MEM_EQ(r->body.p, r->body.len, want, strlen(want));
  h2_free(cl);
  test_stop(srv);
}

/* The whole answer to one request on a new connection (closed by the client), dates masked. */
static void admin_raw(int port, const char *method, const char *path, buf_t *got) {
  char req[512];
  snprintf(req, sizeof req, "%s %s HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n", method, path);
  int fd = cl_connect(port);
  cl_sends(fd, req);
  ASSERT_EQ(cl_read_close(fd, got, 10000), CL_EOF);
  mask_dates(got->p, got->len);
  close(fd);
}

/* HEAD on an endpoint that takes GET is answered as GET without the body (RFC 9110 9.3.2): the same status and
 * headers, content-length the GET answer's. HEAD on one that does not take GET is still 405, with no body. */
TEST(admin_head_as_get) {
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *srv = admin_server(&cfg);
  int admin = cb_server_admin_port(srv);
  admin_call(admin, "POST", "/stubs", "{\"match\": {\"path\": \"/h\"}, \"expect\": {\"times\": 1}}", 201,
             "{\"ids\":[1]}");
  static const char *const paths[] = {"/stubs", "/requests", "/requests?limit=1", "/near-misses", "/stats",
                                      "/recorded"};
  for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
    buf_t get = {0}, head = {0};
    admin_raw(admin, "GET", paths[i], &get);
    admin_raw(admin, "HEAD", paths[i], &head);
    const char *end = memmem(get.p, get.len, "\r\n\r\n", 4);
    ASSERT_NOT_NULL(end);
    ASSERT(get.len > 12 && memcmp(get.p, "HTTP/1.1 200", 12) == 0);
    ASSERT_MEM_EQ(head.p, head.len, get.p, (size_t)(end + 4 - get.p));
    buf_free(&get);
    buf_free(&head);
  }
  buf_t got = {0}, exp = {0};
  admin_raw(admin, "HEAD", "/verify", &got);
  const char *json = "{\"why\":\"method_not_allowed\",\"message\":\"see docs/routes.md, \\\"The admin API\\\"\"}";
  exp_head(&exp, 405, "application/json", "allow: POST\r\n", (long)strlen(json), CONN_CLOSE);
  ASSERT_MEM_EQ(got.p, got.len, exp.p, exp.len);
  buf_free(&got);
  buf_free(&exp);
  test_stop(srv);
}

/* POST /reset against cb_server_stubs_file() from another thread. The reset hook runs inside the reset, once the
 * stubs are removed; the other thread's add starts there, and the hook gives it a second to finish. When the
 * reset is one step the add waits for it and keeps its stub and its expectation; when the add could finish
 * meanwhile, the reset's clearing of the expectations came after it: the stub stayed, its expectation was lost,
 * and POST /verify answered ok for a stub expected once and never asked. */
static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int in_reset, added, n;
  cb_server_t *srv;
  char path[512], msg[1024];
} race = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void reset_hook(void *arg) {
  (void)arg;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 1;
  pthread_mutex_lock(&race.mu);
  race.in_reset = 1;
  pthread_cond_broadcast(&race.cv);
  int r = 0;
  while (!race.added && r != ETIMEDOUT) r = pthread_cond_timedwait(&race.cv, &race.mu, &until);
  pthread_mutex_unlock(&race.mu);
}

static void *add_during_reset(void *arg) {
  (void)arg;
  pthread_mutex_lock(&race.mu);
  while (!race.in_reset) pthread_cond_wait(&race.cv, &race.mu);
  pthread_mutex_unlock(&race.mu);
  int n = cb_server_stubs_file(race.srv, race.path, race.msg, sizeof race.msg);
  pthread_mutex_lock(&race.mu);
  race.n = n;
  race.added = 1;
  pthread_cond_broadcast(&race.cv);
  pthread_mutex_unlock(&race.mu);
  return NULL;
}

TEST(admin_reset_one_step_against_stubs_file) {
  cb_config_t cfg;
  test_config(&cfg);
  race.srv = admin_server(&cfg);
  int admin = cb_server_admin_port(race.srv);
  const char *t = getenv("TMPDIR");
  snprintf(race.path, sizeof race.path, "%s/cbench-%d-reset.json", t && *t ? t : "/tmp", (int)getpid());
  FILE *f = fopen(race.path, "w");
  ASSERT_NOT_NULL(f);
  fputs("[{\"match\": {\"path\": \"/p\"}, \"expect\": {\"times\": 1}}]", f);
  fclose(f);
  cb__test_admin_reset_hook(reset_hook, NULL);
  pthread_t th;
  ASSERT_EQ(pthread_create(&th, NULL, add_during_reset, NULL), 0);
  admin_call(admin, "POST", "/reset", NULL, 204, NULL);
  ASSERT_EQ(pthread_join(th, NULL), 0);
  cb__test_admin_reset_hook(NULL, NULL);
  unlink(race.path);
  ASSERT_EQ(race.n, 1);
  admin_call(admin, "POST", "/verify", NULL, 409,
             "{\"ok\":false,\"problems\":[{\"problem\":\"no_request_arrived\",\"stub\":\"* /p\",\"id\":1,"
             "\"expected\":{\"times\":1},\"got\":0}]}");
  test_stop(race.srv);
}
