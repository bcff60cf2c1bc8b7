/* The recorder (src/kinds/record.c, docs/record.md), driven through its seam cb__record_exchange() as the proxy
 * kind calls it: what becomes a recording, the exact stub file it writes, the round trip through
 * cb_server_stubs_file() answered byte for byte over HTTP/1.1 and h2c, and memory proportional to what is kept. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <pthread.h>
#include <unistd.h>

#include "common.h"
#include "engine.h"
#include "h2client.h"
#include "stub_json.h"

#define H(n, v) {n, sizeof(n) - 1, v, sizeof(v) - 1}

static const char *tmp_path(const char *name) {
  static char p[512];
  const char *t = getenv("TMPDIR");
  snprintf(p, sizeof p, "%s/cbench-rec-%d-%s", t && *t ? t : "/tmp", (int)getpid(), name);
  return p;
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fputs(text, f);
  fclose(f);
}

static char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) FAIL("cannot open %s", path);
  buf_t b = {0};
  char chunk[65536];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) buf_add(&b, chunk, n);
  fclose(f);
  buf_add(&b, "", 1);
  *len = b.len - 1;
  return b.p;
}

/* One exchange as the proxy hands it over. */
typedef struct {
  const char *method, *target;
  const cb__hdr_t *req;
  int nreq;
  int status;
  const cb__hdr_t *res;
  int nres;
  const char *body;
  size_t body_len;
} ex_t;

static void record(cb_server_t *srv, const cb_proxy_t *opts, const ex_t *e) {
  cb__exchange_t x = {.opts = opts, .method = e->method, .method_len = strlen(e->method), .target = e->target,
                      .target_len = strlen(e->target), .req_headers = e->req, .nreq_headers = e->nreq,
                      .status = e->status, .res_headers = e->res, .nres_headers = e->nres, .body = e->body,
                      .body_len = e->body_len};
  ASSERT_EQ(cb__record_exchange(srv, &x), 0);
}

static const cb_str_t accept_name[] = {CB_S("accept")};
static const cb__hdr_t h_ctype[] = {H("content-type", "text/plain")};
static const cb__hdr_t h_xq[] = {H("x-q", "1")};
static const cb__hdr_t h_cookies[] = {H("set-cookie", "a=1"), H("set-cookie", "b=2"), H("content-length", "9"),
                                      H("X-Mixed", "Case")};
static const cb__hdr_t r_accept[] = {H("host", "up"), H("Accept", "application/json")};
static const cb__hdr_t r_host[] = {H("host", "up")};
static const char bin[] = "\x00\x01\xff\xfe abc";

/* The fixed exchanges of the exact-text test, and their stub file. */
static void record_fixed(cb_server_t *srv, const cb_proxy_t *opts) {
  const ex_t es[] = {
      {"GET", "/a", r_host, 1, 200, h_ctype, 1, "hello a", 7},
      {"GET", "/a?y=two&x=1", r_host, 1, 200, h_xq, 1, "with query", 10},
      {"GET", "/a", r_accept, 2, 200, NULL, 0, "{\"json\":1}", 10},
      {"POST", "/bin", r_host, 1, 201, NULL, 0, bin, sizeof bin - 1},
      {"GET", "/a", r_host, 1, 200, h_ctype, 1, "a later answer", 14},      /* a duplicate of rec_1 */
      {"GET", "/a?x=1&y=two", r_host, 1, 500, NULL, 0, "", 0},              /* of rec_2: the query's order is not */
      {"DELETE", "/gone", NULL, 0, 404, h_cookies, 4, "", 0},
      {"GET", "/utf?q=%C3%A9+x", NULL, 0, 200, NULL, 0, "h\xc3\xa9llo \xe2\x9c\x93", 10},
  };
  for (size_t i = 0; i < sizeof es / sizeof es[0]; i++) record(srv, opts, &es[i]);
}

static const char fixed_json[] =
    "{\"stubs\": [\n"
    "{\"name\": \"rec_1\", \"match\": {\"method\": \"GET\", \"path\": \"/a\"}, \"response\": {\"status\": 200, "
    "\"headers\": [[\"content-type\", \"text/plain\"]], \"body\": \"hello a\"}},\n"
    "{\"name\": \"rec_2\", \"match\": {\"method\": \"GET\", \"path\": \"/a\", \"query\": {\"x\": \"1\", \"y\": \"two\"}, "
    "\"priority\": 2}, \"response\": {\"status\": 200, \"headers\": [[\"x-q\", \"1\"]], \"body\": \"with query\"}},\n"
    "{\"name\": \"rec_3\", \"match\": {\"method\": \"GET\", \"path\": \"/a\", \"headers\": {\"accept\": "
    "\"application/json\"}, \"priority\": 1}, \"response\": {\"status\": 200, \"body\": \"{\\\"json\\\":1}\"}},\n"
    "{\"name\": \"rec_4\", \"match\": {\"method\": \"POST\", \"path\": \"/bin\"}, \"response\": {\"status\": 201, "
    "\"body\": {\"base64\": \"AAH//iBhYmM=\"}}},\n"
    "{\"name\": \"rec_5\", \"match\": {\"method\": \"DELETE\", \"path\": \"/gone\"}, \"response\": {\"status\": 404, "
    "\"headers\": [[\"set-cookie\", \"a=1\"], [\"set-cookie\", \"b=2\"], [\"X-Mixed\", \"Case\"]]}},\n"
    "{\"name\": \"rec_6\", \"match\": {\"method\": \"GET\", \"path\": \"/utf\", \"query\": {\"q\": \"\xc3\xa9 x\"}, "
    "\"priority\": 1}, \"response\": {\"status\": 200, \"body\": \"h\xc3\xa9llo \xe2\x9c\x93\"}}\n"
    "]}\n";

/* The stub file's text is exactly this for these exchanges: names by place, duplicates left out (the first
 * answer kept), the query sorted and decoded, chosen headers lowercased, priority the matcher count, content-length
 * dropped, bytes that are not UTF-8 as base64. */
TEST(record_json_exact) {
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *srv = test_start(&cfg);
  cb_proxy_t opts = {.record = 1, .record_headers = accept_name, .nrecord_headers = 1};
  char *json = NULL;
  size_t len = 0;
  ASSERT_EQ(cb_server_recorded_json(srv, &json, &len), 0);
  ASSERT_STR_EQ(json, "{\"stubs\": [\n\n]}\n");
  free(json);
  record_fixed(srv, &opts);
  ASSERT_EQ(cb_server_recorded_json(srv, &json, &len), 0);
  ASSERT_MEM_EQ(json, len, fixed_json, sizeof fixed_json - 1);
  free(json);
  cb_stats_t st;
  ASSERT_EQ(cb_server_stats(srv, &st), 0);
  ASSERT_EQ(st.recorded, 6);
  ASSERT_EQ(st.recorded_duplicates, 2);
  ASSERT_EQ(st.record_skipped, 0);
  /* Saved without body files, the file holds the same text; saved again, the same bytes. */
  char path[512], msg[512] = "";
  snprintf(path, sizeof path, "%s", tmp_path("exact.json"));
  ASSERT_EQ(cb_server_save_stubs(srv, path, msg, sizeof msg), 6);
  char *text = read_all(path, &len);
  ASSERT_MEM_EQ(text, len, fixed_json, sizeof fixed_json - 1);
  free(text);
  ASSERT_EQ(cb_server_save_stubs(srv, path, msg, sizeof msg), 6);
  text = read_all(path, &len);
  ASSERT_MEM_EQ(text, len, fixed_json, sizeof fixed_json - 1);
  free(text);
  /* Cleared: nothing kept, the counts zero, names from rec_1 again. */
  cb_server_recorded_clear(srv);
  ASSERT_EQ(cb_server_stats(srv, &st), 0);
  ASSERT_EQ(st.recorded + st.recorded_duplicates + st.record_skipped, 0);
  cb__record_counts_t rc;
  cb__record_counts(srv, &rc);
  ASSERT_EQ(rc.bytes, 0);
  record_fixed(srv, &opts);
  ASSERT_EQ(cb_server_recorded_json(srv, &json, &len), 0);
  ASSERT_MEM_EQ(json, len, fixed_json, sizeof fixed_json - 1);
  free(json);
  unlink(path);
  test_stop(srv);
}

/* What a stub cannot replay is skipped and counted, what record_status leaves out is neither kept nor counted. */
TEST(record_skips_and_filters) {
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *srv = test_start(&cfg);
  static const cb__hdr_t bad_value[] = {H("x-a", "a\x01b")};
  static const cb__hdr_t latin1[] = {H("x-a", "caf\xe9")};
  static const cb__hdr_t bad_accept[] = {H("accept", "\xff")};
  cb_proxy_t opts = {.record = 1, .record_headers = accept_name, .nrecord_headers = 1};
  const ex_t skipped[] = {
      {"GET", "/files/*", NULL, 0, 200, NULL, 0, "x", 1},         /* a pattern would read it as a prefix */
      {"GET", "/u/{id}", NULL, 0, 200, NULL, 0, "x", 1},          /* as a parameter */
      {"GET", "/a", NULL, 0, 101, NULL, 0, "", 0},                /* not a stub's status */
      {"GET", "/a", NULL, 0, 200, bad_value, 1, "", 0},           /* a control byte in a header value */
      {"GET", "/a", NULL, 0, 200, latin1, 1, "", 0},              /* not UTF-8: a JSON string cannot hold it */
      {"GET", "/a?q=%FF", NULL, 0, 200, NULL, 0, "", 0},          /* the decoded query value is not UTF-8 */
      {"GET", "/a?q=%00", NULL, 0, 200, NULL, 0, "", 0},          /* NUL: the stub loader refuses \u0000 */
      {"GET", "/a", bad_accept, 1, 200, NULL, 0, "", 0},          /* a chosen header that is not UTF-8 */
      {"GET", "/a", NULL, 0, 204, NULL, 0, "x", 1},               /* 204 with a body */
      {"FETCH", "/a", NULL, 0, 200, NULL, 0, "", 0},              /* not one of the nine methods */
  };
  for (size_t i = 0; i < sizeof skipped / sizeof skipped[0]; i++) record(srv, &opts, &skipped[i]);
  cb_stats_t st;
  ASSERT_EQ(cb_server_stats(srv, &st), 0);
  ASSERT_EQ(st.recorded, 0);
  ASSERT_EQ(st.record_skipped, sizeof skipped / sizeof skipped[0]);
  static const int only_200[] = {200};
  cb_proxy_t filtered = {.record = 1, .record_status = only_200, .nrecord_status = 1};
  const ex_t es[] = {{"GET", "/ok", NULL, 0, 200, NULL, 0, "ok", 2}, {"GET", "/err", NULL, 0, 503, NULL, 0, "no", 2},
                     {"GET", "/a?&=x&b", NULL, 0, 200, NULL, 0, "", 0}};
  for (size_t i = 0; i < 3; i++) record(srv, &filtered, &es[i]);
  ASSERT_EQ(cb_server_stats(srv, &st), 0);
  ASSERT_EQ(st.recorded, 2);
  ASSERT_EQ(st.record_skipped, sizeof skipped / sizeof skipped[0]);
  ASSERT_EQ(st.recorded_duplicates, 0);
  char *json;
  size_t len;
  ASSERT_EQ(cb_server_recorded_json(srv, &json, &len), 0);
  /* Parameters without a name are left out; "b" without '=' matches as an empty value. */
  ASSERT_STR_EQ(json, "{\"stubs\": [\n"
                      "{\"name\": \"rec_1\", \"match\": {\"method\": \"GET\", \"path\": \"/ok\"}, \"response\": "
                      "{\"status\": 200, \"body\": \"ok\"}},\n"
                      "{\"name\": \"rec_2\", \"match\": {\"method\": \"GET\", \"path\": \"/a\", \"query\": {\"b\": "
                      "\"\"}, \"priority\": 1}, \"response\": {\"status\": 200}}\n]}\n");
  free(json);
  /* Bad arguments. */
  cb__exchange_t x = {0};
  ASSERT_ERR(cb__record_exchange(NULL, &x), CB_EINVAL);
  ASSERT_ERR(cb__record_exchange(srv, NULL), CB_EINVAL);
  ASSERT_ERR(cb_server_recorded_json(NULL, &json, &len), CB_EINVAL);
  char msg[256];
  ASSERT_ERR(cb_server_save_stubs(srv, "", msg, sizeof msg), CB_EINVAL);
  ASSERT_ERR(cb_server_save_stubs(srv, "/nonexistent/dir/x.json", msg, sizeof msg), CB_ENOENT);
  ASSERT_STR_EQ(msg, "/nonexistent/dir/x.json.tmp: No such file or directory");
  test_stop(srv);
}

/* The replayed answer of one exchange, as HTTP/1.1 bytes: date first, the recorded headers in order, then the
 * content-length the engine writes. */
static void exp_answer(buf_t *b, const ex_t *e) {
  buf_t extra = {0};
  buf_adds(&extra, "");
  for (int i = 0; i < e->nres; i++) {
    if (strcasecmp(e->res[i].name, "content-length") == 0) continue;
    for (size_t k = 0; k < e->res[i].name_len; k++) {
      char c = e->res[i].name[k];
      buf_add(&extra, &(char){c >= 'A' && c <= 'Z' ? (char)(c + 32) : c}, 1);
    }
    buf_adds(&extra, ": ");
    buf_add(&extra, e->res[i].value, e->res[i].value_len);
    buf_adds(&extra, "\r\n");
  }
  exp_head(b, e->status, NULL, extra.p, (long)e->body_len, CONN_NONE);
  buf_add(b, e->body, e->body_len);
  buf_free(&extra);
}

/* Record, save (a body above record_body_file_bytes to a file), load into a fresh server, and get every answer
 * back byte for byte over HTTP/1.1 and h2c. */
TEST(record_roundtrip) {
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *rec = test_start(&cfg);
  size_t big_len = 100000;
  char *big = malloc(big_len);
  for (size_t i = 0; i < big_len; i++) big[i] = (char)(i * 7 + (i >> 8));
  cb_proxy_t opts = {.record = 1, .record_headers = accept_name, .nrecord_headers = 1,
                     .record_body_file_bytes = 65536};
  const ex_t es[] = {
      {"GET", "/a", r_host, 1, 200, h_ctype, 1, "hello a", 7},
      {"GET", "/a?y=two&x=1", r_host, 1, 200, h_xq, 1, "with query", 10},
      {"GET", "/a", r_accept, 2, 200, NULL, 0, "{\"json\":1}", 10},
      {"POST", "/bin", r_host, 1, 201, NULL, 0, bin, sizeof bin - 1},
      {"GET", "/big", NULL, 0, 200, h_ctype, 1, big, big_len},
      {"DELETE", "/gone", NULL, 0, 404, h_cookies, 4, "", 0},
      {"GET", "/utf?q=%C3%A9+x", NULL, 0, 200, NULL, 0, "h\xc3\xa9llo \xe2\x9c\x93", 10},
  };
  size_t n = sizeof es / sizeof es[0];
  for (size_t i = 0; i < n; i++) record(rec, &opts, &es[i]);
  const ex_t dup = {"GET", "/a?x=1&y=two", r_host, 1, 500, NULL, 0, "other", 5};
  record(rec, &opts, &dup);
  char path[512], msg[512] = "", bodies[600];
  snprintf(path, sizeof path, "%s", tmp_path("round.json"));
  snprintf(bodies, sizeof bodies, "%s.bodies/5.bin", path);
  ASSERT_EQ(cb_server_save_stubs(rec, path, msg, sizeof msg), (int)n);
  size_t len;
  char *file = read_all(bodies, &len);
  ASSERT_MEM_EQ(file, len, big, big_len);
  free(file);
  char *text = read_all(path, &len);
  char want[600];
  snprintf(want, sizeof want, "\"body\": {\"file\": \"%s.bodies/5.bin\"}", strrchr(path, '/') + 1);
  if (strstr(text, want) == NULL) FAIL("no %s in %s", want, text);
  free(text);
  test_stop(rec);

  cb_server_t *srv = test_start(&cfg);
  ASSERT_EQ(cb_server_stubs_file(srv, path, msg, sizeof msg), (int)n);
  int port = cb_server_port(srv);
  /* The requests: each exchange's own, and the query in another order. */
  static const char *const reqs[] = {
      "GET /a HTTP/1.1\r\nHost: x\r\n\r\n",
      "GET /a?x=1&y=two HTTP/1.1\r\nHost: x\r\n\r\n",
      "GET /a HTTP/1.1\r\nHost: x\r\naccept: application/json\r\n\r\n",
      "POST /bin HTTP/1.1\r\nHost: x\r\ncontent-length: 0\r\n\r\n",
      "GET /big HTTP/1.1\r\nHost: x\r\n\r\n",
      "DELETE /gone HTTP/1.1\r\nHost: x\r\n\r\n",
      "GET /utf?q=%c3%a9+x HTTP/1.1\r\nHost: x\r\n\r\n",
  };
  int fd = cl_connect(port);
  for (size_t i = 0; i < n; i++) {
    buf_t exp = {0};
    exp_answer(&exp, &es[i]);
    ROUNDTRIP(fd, reqs[i], strlen(reqs[i]), &exp);
    buf_free(&exp);
  }
  close(fd);
  /* h2c: the same answers in HTTP/2 form. */
  static const struct {
    const char *method, *path;
    const char *extra[2];
    size_t nextra;
  } h2reqs[] = {{"GET", "/a", {0}, 0},      {"GET", "/a?y=two&x=1", {0}, 0},
                {"GET", "/a", {"accept", "application/json"}, 1}, {"POST", "/bin", {0}, 0},
                {"GET", "/big", {0}, 0},    {"DELETE", "/gone", {0}, 0},
                {"GET", "/utf?q=%C3%A9%20x", {0}, 0}};
  h2cl_t *cl = h2_open(port);
  h2_handshake(cl);
  for (size_t i = 0; i < n; i++) {
    buf_t h1 = {0}, head = {0}, body = {0};
    exp_answer(&h1, &es[i]);
    h2_expect_from_h1(&h1, &head, &body);
    int32_t sid = (int32_t)(2 * i + 1);
    h2resp_t *r = h2_request(cl, sid, h2reqs[i].method, h2reqs[i].path, h2reqs[i].extra, h2reqs[i].nextra, NULL, 0);
    h2_wait1(cl, r, 10000);
    h2_assert_resp(r, &head, &body, h2reqs[i].path);
    buf_free(&h1);
    buf_free(&head);
    buf_free(&body);
  }
  h2_free(cl);
  test_stop(srv);
  unlink(bodies);
  snprintf(bodies, sizeof bodies, "%s.bodies", path);
  rmdir(bodies);
  unlink(path);
  free(big);
}

/* The stub file's {"base64": "..."} body form: the decoded bytes are served. */
TEST(record_base64_body) {
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *srv = test_start(&cfg);
  char path[512], msg[512] = "";
  snprintf(path, sizeof path, "%s", tmp_path("b64.json"));
  write_text(path, "[{\"match\": {\"path\": \"/b\"}, \"response\": {\"body\": {\"base64\": \"AAH//iBhYmM=\"}}},\n"
                   " {\"match\": {\"path\": \"/one\"}, \"response\": {\"body\": {\"base64\": \"QQ==\"}}},\n"
                   " {\"match\": {\"path\": \"/two\"}, \"response\": {\"body\": {\"base64\": \"QUI=\"}}},\n"
                   " {\"match\": {\"path\": \"/none\"}, \"response\": {\"body\": {\"base64\": \"\"}}}]\n");
  ASSERT_EQ(cb_stubs_json_load(srv, path, msg, sizeof msg), 4);
  int fd = cl_connect(cb_server_port(srv));
  static const struct {
    const char *req, *body;
    size_t len;
  } cs[] = {{"GET /b HTTP/1.1\r\nHost: x\r\n\r\n", bin, sizeof bin - 1},
            {"GET /one HTTP/1.1\r\nHost: x\r\n\r\n", "A", 1},
            {"GET /two HTTP/1.1\r\nHost: x\r\n\r\n", "AB", 2},
            {"GET /none HTTP/1.1\r\nHost: x\r\n\r\n", "", 0}};
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    buf_t exp = {0};
    exp_head(&exp, 200, NULL, NULL, (long)cs[i].len, CONN_NONE);
    buf_add(&exp, cs[i].body, cs[i].len);
    ROUNDTRIP(fd, cs[i].req, strlen(cs[i].req), &exp);
    buf_free(&exp);
  }
  close(fd);
  unlink(path);
  test_stop(srv);
}

/* 10,000 distinct recordings: the recorder holds what was recorded plus a bounded overhead each (its own byte
 * count, not the process's RSS), a duplicate adds nothing, the saved file loads back into a fresh server, and
 * clear gives it all back. */
TEST_T(record_memory_proportional, 60000) {
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *srv = test_start(&cfg);
  cb_proxy_t opts = {.record = 1};
  char body[100];
  memset(body, 'b', sizeof body);
  uint64_t payload = 0;
  enum { N = 10000 };
  for (int i = 0; i < N; i++) {
    char target[32];
    snprintf(target, sizeof target, "/item/%05d", i);
    ex_t e = {"GET", target, NULL, 0, 200, h_ctype, 1, body, sizeof body};
    record(srv, &opts, &e);
    payload += 3 + strlen(target) + 12 + 10 + sizeof body;
  }
  cb__record_counts_t rc;
  cb__record_counts(srv, &rc);
  ASSERT_EQ(rc.recorded, N);
  /* Per recording: its rec_t and spans (under 160 bytes), the key's length fields, a pointer in the order array
   * and two table slots, both at most doubled past what they hold. */
  uint64_t bound = payload + (uint64_t)N * 256;
  if (rc.bytes < payload || rc.bytes > bound)
    FAIL("the recorder holds %llu bytes for %llu bytes recorded (%d recordings); bound %llu: %llu a recording",
         (unsigned long long)rc.bytes, (unsigned long long)payload, N, (unsigned long long)bound,
         (unsigned long long)(rc.bytes / N));
  cbt_log("%d recordings: %llu bytes held for %llu bytes recorded", N, (unsigned long long)rc.bytes,
          (unsigned long long)payload);
  uint64_t before = rc.bytes;
  ex_t again = {"GET", "/item/00007", NULL, 0, 200, h_ctype, 1, body, sizeof body};
  record(srv, &opts, &again);
  cb__record_counts(srv, &rc);
  ASSERT_EQ(rc.bytes, before);
  ASSERT_EQ(rc.duplicates, 1);
  /* Saved, the 10,000 load back into a fresh server in one table and answer. */
  char path[512], msg[512] = "";
  snprintf(path, sizeof path, "%s", tmp_path("many.json"));
  ASSERT_EQ(cb_server_save_stubs(srv, path, msg, sizeof msg), N);
  cb_server_t *replay = test_start(&cfg);
  ASSERT_EQ(cb_server_stubs_file(replay, path, msg, sizeof msg), N);
  buf_t exp = {0};
  exp_head(&exp, 200, "text/plain", NULL, sizeof body, CONN_NONE);
  buf_add(&exp, body, sizeof body);
  int fd = cl_connect(cb_server_port(replay));
  ROUNDTRIP_S(fd, "GET /item/09999 HTTP/1.1\r\nhost: x\r\n\r\n", &exp);
  ROUNDTRIP_S(fd, "GET /item/00000 HTTP/1.1\r\nhost: x\r\n\r\n", &exp);
  close(fd);
  buf_free(&exp);
  test_stop(replay);
  unlink(path);
  cb_server_recorded_clear(srv);
  cb__record_counts(srv, &rc);
  ASSERT_EQ(rc.bytes, 0);
  ASSERT_EQ(rc.recorded, 0);
  test_stop(srv);
}

/* Workers record at once: every distinct exchange is kept once, whichever thread saw it first, and every other
 * sighting is a duplicate (4 threads, each recording the same 500 paths in its own order). */
typedef struct {
  cb_server_t *srv;
  int seed;
} racer_t;

static void *racer(void *arg) {
  racer_t *r = arg;
  static const cb_str_t names[] = {CB_S("accept"), CB_S("Accept")}; /* one name twice: one matcher */
  cb_proxy_t opts = {.record = 1, .record_headers = names, .nrecord_headers = 2};
  for (int k = 0; k < 500; k++) {
    int i = (k * 7 + r->seed * 131) % 500;
    char target[32];
    size_t len = (size_t)snprintf(target, sizeof target, "/p/%d", i);
    cb__exchange_t x = {.opts = &opts, .method = "GET", .method_len = 3, .target = target, .target_len = len,
                        .req_headers = r_accept, .nreq_headers = 2, .status = 200, .body = target,
                        .body_len = 3};
    if (cb__record_exchange(r->srv, &x) != 0) return (void *)1;
  }
  return NULL;
}

TEST(record_threads) {
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *srv = test_start(&cfg);
  pthread_t t[4];
  racer_t rs[4];
  for (int i = 0; i < 4; i++) {
    rs[i] = (racer_t){srv, i};
    ASSERT_EQ(pthread_create(&t[i], NULL, racer, &rs[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    void *ret;
    ASSERT_EQ(pthread_join(t[i], &ret), 0);
    ASSERT_NULL(ret);
  }
  cb_stats_t st;
  ASSERT_EQ(cb_server_stats(srv, &st), 0);
  ASSERT_EQ(st.recorded, 500);
  ASSERT_EQ(st.recorded_duplicates, 1500);
  char *json;
  size_t len;
  ASSERT_EQ(cb_server_recorded_json(srv, &json, &len), 0);
  ASSERT_NOT_NULL(strstr(json, "\"headers\": {\"accept\": \"application/json\"}, \"priority\": 1}"));
  free(json);
  test_stop(srv);
}

/* One admin request on a new connection; the whole answer, dates masked, must be `status` with the JSON body
 * `json` (NULL: none). */
static void admin_req(int port, const char *method, const char *path, int status, const char *json) {
  char req[512];
  snprintf(req, sizeof req, "%s %s HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: 0\r\n\r\n", method,
           path);
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

/* The admin API's recordings (docs/record.md): GET /recorded is the stub file's text, POST /recorded/save writes
 * cfg.record_to, DELETE /recorded clears; without cfg.record_to the save is 409. */
TEST(record_admin) {
  char path[512], want[1024];
  snprintf(path, sizeof path, "%s", tmp_path("admin.json"));
  unlink(path);
  cb_config_t cfg;
  test_config(&cfg);
  cfg.admin = 1;
  cfg.record_to = path;
  cb_server_t *srv = test_start(&cfg);
  int admin = cb_server_admin_port(srv);
  cb_proxy_t opts = {.record = 1, .record_headers = accept_name, .nrecord_headers = 1};
  record_fixed(srv, &opts);
  admin_req(admin, "GET", "/recorded", 200, fixed_json);
  snprintf(want, sizeof want, "{\"saved\":6,\"file\":\"%s\"}", path);
  admin_req(admin, "POST", "/recorded/save", 200, want);
  size_t len;
  char *text = read_all(path, &len);
  ASSERT_MEM_EQ(text, len, fixed_json, sizeof fixed_json - 1);
  free(text);
  admin_req(admin, "DELETE", "/recorded", 204, NULL);
  admin_req(admin, "GET", "/recorded", 200, "{\"stubs\": [\n\n]}\n");
  cb_stats_t st;
  ASSERT_EQ(cb_server_stats(srv, &st), 0);
  ASSERT_EQ(st.recorded + st.recorded_duplicates, 0);
  test_stop(srv);
  unlink(path);

  cfg.record_to = NULL;
  srv = test_start(&cfg);
  admin_req(cb_server_admin_port(srv), "POST", "/recorded/save", 409,
            "{\"why\":\"no_record_file\",\"message\":\"the server has no file to save to: start it with --record-to "
            "FILE (cfg.record_to)\"}");
  test_stop(srv);
}
