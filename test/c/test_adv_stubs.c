/* Stubs in bulk and stub body files (issue 22, findings 3 and 5): cb_server_route_add_many adds all or
 * nothing, with ids and matching order as N single adds would give; thousands of stubs added one by one (the
 * route table is published lazily) or in a batch all answer; every add and remove is seen by the next request
 * on any connection; a body file must be a regular file of at most CB_MAX_BODY_FILE bytes, and a FIFO is
 * refused without blocking. Timings are never asserted: the figures are in the closing note of issue 22. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <uv.h>

#include "common.h"

static cb_server_t *start_threads(int threads) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.threads = threads;
  return test_start(&cfg);
}

static cb_stub_t plain(const char *path, const char *body, int priority) {
  cb_stub_t st;
  memset(&st, 0, sizeof st);
  st.match.methods = CB_METHOD_GET;
  st.match.path = (cb_str_t){path, strlen(path)};
  st.match.priority = priority;
  st.response.status = 200;
  st.response.body_kind = CB_BODY_BYTES;
  st.response.body = (cb_str_t){body, strlen(body)};
  return st;
}

/* GET target on fd (keep-alive): the answer must be 200 with `body`, or, when body is NULL, a 404: empty when no
 * stub is left, else with a near-miss body that names the request (which stubs it lists: test_near_miss.c and
 * test_routes.c). */
static void expect_body(int fd, const char *target, const char *body) {
  buf_t e = {0}, req = {0};
  buf_addf(&req, "GET %s HTTP/1.1\r\nhost: x\r\n\r\n", target);
  if (body != NULL) {
    exp_head(&e, 200, NULL, NULL, (long)strlen(body), CONN_NONE);
    buf_adds(&e, body);
    ROUNDTRIP(fd, req.p, req.len, &e);
  } else {
    buf_t first = {0}, got = {0};
    buf_addf(&first, "No stub matched GET %s\nClosest stubs:\n", target);
    cl_send(fd, req.p, req.len);
    const char *sep = NULL;
    while (sep == NULL) { /* the head, a byte at a time (the body's length is in it) */
      ASSERT_EQ(cl_read_n(fd, &got, got.len + 1, 15000), CL_OK);
      sep = got.len >= 4 ? memmem(got.p, got.len, "\r\n\r\n", 4) : NULL;
    }
    size_t head_len = (size_t)(sep - got.p) + 4;
    const char *cl = memmem(got.p, head_len, "content-length: ", 16);
    ASSERT_NOT_NULL(cl);
    ASSERT_EQ(cl_read_n(fd, &got, head_len + strtoul(cl + 16, NULL, 10), 15000), CL_OK);
    mask_dates(got.p, got.len);
    sep = got.p + head_len - 4;
    buf_t empty = {0};
    exp_route(&empty, "GET", target, CONN_NONE);
    if (got.len == empty.len && memcmp(got.p, empty.p, empty.len) == 0) { /* no stub left: the empty 404 */
      buf_free(&empty);
      buf_free(&first);
      buf_free(&got);
      buf_free(&e);
      buf_free(&req);
      return;
    }
    buf_free(&empty);
    const char *head404 = "HTTP/1.1 404 Not Found\r\ndate: " DATE_MASK "\r\ncontent-type: text/plain\r\n";
    ASSERT_MEM_EQ(got.p, strlen(head404), head404, strlen(head404));
    const char *b = sep + 4;
    ASSERT_GE((size_t)(got.p + got.len - b), first.len);
    ASSERT_MEM_EQ(b, first.len, first.p, first.len);
    buf_free(&first);
    buf_free(&got);
  }
  buf_free(&e);
  buf_free(&req);
}

/* Paths and bodies of stub i: exact, prefix and {param} paths, so every index of the table is used. */
static void path_of(int i, char *path, size_t cap, char *target, size_t tcap) {
  switch (i % 3) {
    case 0:
      snprintf(path, cap, "/e%d", i);
      snprintf(target, tcap, "/e%d", i);
      break;
    case 1:
      snprintf(path, cap, "/p%d/*", i);
      snprintf(target, tcap, "/p%d/any/thing", i);
      break;
    default:
      snprintf(path, cap, "/u/{id}/s%d", i);
      snprintf(target, tcap, "/u/42/s%d", i);
  }
}

#define NBATCH 5000

/* 5,000 stubs in one call: ids consecutive in array order, every stub answers over connections on both
 * workers, and cb_server_stubs lists them all. */
TEST_T(adv_stubs_batch_all_answer, 120000) {
  cb_server_t *srv = start_threads(2);
  int port = cb_server_port(srv);
  static char paths[NBATCH][48], targets[NBATCH][48], bodies[NBATCH][24];
  cb_stub_t *stubs = calloc(NBATCH, sizeof *stubs);
  uint64_t *ids = calloc(NBATCH, sizeof *ids);
  ASSERT_NOT_NULL(stubs);
  ASSERT_NOT_NULL(ids);
  for (int i = 0; i < NBATCH; i++) {
    path_of(i, paths[i], sizeof paths[i], targets[i], sizeof targets[i]);
    snprintf(bodies[i], sizeof bodies[i], "stub %d", i);
    stubs[i] = plain(paths[i], bodies[i], 0);
  }
  size_t failed = 0;
  ASSERT_ERR(cb_server_route_add_many(srv, stubs, NBATCH, ids, &failed), 0);
  ASSERT_EQ(failed, NBATCH);
  for (int i = 1; i < NBATCH; i++) ASSERT_EQ(ids[i], ids[i - 1] + 1);
  int fds[4];
  for (int k = 0; k < 4; k++) fds[k] = cl_connect(port);
  for (int i = 0; i < NBATCH; i++) expect_body(fds[i % 4], targets[i], bodies[i]);
  for (int k = 0; k < 4; k++) close(fds[k]);
  cb_stub_list_t *list;
  ASSERT_ERR(cb_server_stubs(srv, &list), 0);
  ASSERT_EQ(list->count, NBATCH);
  ASSERT_EQ(list->items[0].id, ids[NBATCH - 1]); /* newest first */
  ASSERT_EQ(list->items[NBATCH - 1].id, ids[0]);
  cb_stub_list_free(list);
  free(stubs);
  free(ids);
  test_stop(srv);
}

/* Matching order in a batch is that of single adds: priority first, then the newest (the later in the array). */
TEST(adv_stubs_batch_order) {
  cb_server_t *srv = start_threads(2);
  int port = cb_server_port(srv);
  cb_stub_t stubs[4] = {plain("/o", "a", 0), plain("/o", "b", 0), plain("/o", "c", 5), plain("/o", "d", 5)};
  uint64_t ids[4];
  ASSERT_ERR(cb_server_route_add_many(srv, stubs, 4, ids, NULL), 0);
  int fd = cl_connect(port);
  const char *want[4] = {"d", "c", "b", "a"};
  const int remove[4] = {3, 2, 1, 0};
  for (int k = 0; k < 4; k++) {
    expect_body(fd, "/o", want[k]);
    ASSERT_ERR(cb_server_route_remove(srv, ids[remove[k]]), 0);
  }
  expect_body(fd, "/o", NULL);
  close(fd);
  ASSERT_ERR(cb_server_route_add_many(srv, stubs, 0, NULL, NULL), 0); /* nothing to add */
  test_stop(srv);
}

/* A batch with one bad stub adds nothing, says which stub, and leaves the table as it was. */
TEST(adv_stubs_batch_all_or_nothing) {
  cb_server_t *srv = start_threads(2);
  int port = cb_server_port(srv);
  uint64_t before;
  cb_stub_t first = plain("/keep", "kept", 0);
  ASSERT_ERR(cb_server_route_add(srv, &first, &before), 0);
  cb_stub_t stubs[4] = {plain("/g0", "0", 0), plain("/g1", "1", 0), plain("no-slash", "2", 0), plain("/g3", "3", 0)};
  uint64_t ids[4];
  size_t failed = 99;
  ASSERT_ERR(cb_server_route_add_many(srv, stubs, 4, ids, &failed), UV_EINVAL);
  ASSERT_EQ(failed, 2);
  stubs[2] = plain("/g2", "2", 0);
  stubs[3].response.status = 99;
  ASSERT_ERR(cb_server_route_add_many(srv, stubs, 4, ids, &failed), UV_EINVAL);
  ASSERT_EQ(failed, 3);
  cb_stub_list_t *list;
  ASSERT_ERR(cb_server_stubs(srv, &list), 0);
  ASSERT_EQ(list->count, 1);
  ASSERT_EQ(list->items[0].id, before);
  cb_stub_list_free(list);
  int fd = cl_connect(port);
  expect_body(fd, "/g0", NULL);
  expect_body(fd, "/g1", NULL);
  expect_body(fd, "/keep", "kept");
  /* Ids used by a failed batch are not given again. */
  stubs[3].response.status = 200;
  ASSERT_ERR(cb_server_route_add_many(srv, stubs, 4, ids, &failed), 0);
  ASSERT_GT(ids[0], before + 1);
  for (int i = 0; i < 4; i++) {
    char target[16], body[2] = {(char)('0' + i), 0};
    snprintf(target, sizeof target, "/g%d", i);
    expect_body(fd, target, body);
  }
  close(fd);
  ASSERT_ERR(cb_server_route_add_many(NULL, stubs, 4, ids, &failed), UV_EINVAL);
  ASSERT_ERR(cb_server_route_add_many(srv, NULL, 4, ids, &failed), UV_EINVAL);
  ASSERT_ERR(cb_server_route_add_many(srv, stubs, 4, NULL, &failed), UV_EINVAL);
  test_stop(srv);
}

#define NLOOP 3000

/* 3,000 single adds in a row (the table is built once, at the first request after them), then every stub
 * answers; then add-request and remove-request pairs: each change is seen by the very next request, on any of
 * four connections spread over the two workers, while the workers hold a table not built yet. */
TEST_T(adv_stubs_single_adds_seen_at_once, 120000) {
  cb_server_t *srv = start_threads(2);
  int port = cb_server_port(srv);
  static char paths[NLOOP][48], targets[NLOOP][48], bodies[NLOOP][24];
  uint64_t *ids = calloc(NLOOP, sizeof *ids);
  ASSERT_NOT_NULL(ids);
  for (int i = 0; i < NLOOP; i++) {
    path_of(i, paths[i], sizeof paths[i], targets[i], sizeof targets[i]);
    snprintf(bodies[i], sizeof bodies[i], "one %d", i);
    cb_stub_t st = plain(paths[i], bodies[i], 0);
    ASSERT_ERR(cb_server_route_add(srv, &st, &ids[i]), 0);
    if (i > 0) ASSERT_EQ(ids[i], ids[i - 1] + 1);
  }
  int fds[4];
  for (int k = 0; k < 4; k++) fds[k] = cl_connect(port);
  for (int i = 0; i < NLOOP; i++) expect_body(fds[i % 4], targets[i], bodies[i]);
  for (int i = 0; i < 200; i++) {
    char target[32], body[32];
    snprintf(target, sizeof target, "/late%d", i);
    snprintf(body, sizeof body, "late %d", i);
    cb_stub_t st = plain(target, body, 0);
    uint64_t id;
    ASSERT_ERR(cb_server_route_add(srv, &st, &id), 0);
    expect_body(fds[i % 4], target, body);
    expect_body(fds[(i + 1) % 4], target, body);
    ASSERT_ERR(cb_server_route_remove(srv, ids[i]), 0);
    expect_body(fds[(i + 2) % 4], targets[i], NULL);
    expect_body(fds[(i + 3) % 4], targets[i + 1], bodies[i + 1]);
  }
  /* A new connection too, and after a reset the fixture table. */
  int fd = cl_connect(port);
  expect_body(fd, targets[NLOOP - 1], bodies[NLOOP - 1]);
  ASSERT_ERR(cb_server_route_reset(srv), 0);
  expect_body(fd, targets[NLOOP - 1], NULL);
  for (int k = 0; k < 4; k++) expect_body(fds[k], "/late0", NULL);
  close(fd);
  for (int k = 0; k < 4; k++) close(fds[k]);
  free(ids);
  test_stop(srv);
}

static const char *tmp_path(const char *name) {
  static char p[512];
  const char *t = getenv("TMPDIR");
  snprintf(p, sizeof p, "%s/cbench-%d-%s", t && *t ? t : "/tmp", (int)getpid(), name);
  return p;
}

/* A body file must be a regular file: a FIFO without a writer is refused at once (open(2) would wait for a
 * writer: the test's timeout would end it), a device and a directory too, and the size is bounded. */
TEST_T(adv_stubs_body_file_kinds, 30000) {
  cb_server_t *srv = start_threads(1);
  uint64_t id;
  cb_stub_t st = plain("/f", "", 0);
  st.response.body_kind = CB_BODY_FILE;
  char fifo[512];
  snprintf(fifo, sizeof fifo, "%s", tmp_path("fifo"));
  unlink(fifo);
  ASSERT_EQ(mkfifo(fifo, 0600), 0);
  st.response.body = (cb_str_t){fifo, strlen(fifo)};
  ASSERT_ERR(cb_server_route_add(srv, &st, &id), UV_EINVAL);
  unlink(fifo);
  st.response.body = CB_S("/dev/zero");
  ASSERT_ERR(cb_server_route_add(srv, &st, &id), UV_EINVAL);
  st.response.body = CB_S("/dev/null");
  ASSERT_ERR(cb_server_route_add(srv, &st, &id), UV_EINVAL);
  st.response.body = CB_S("/");
  ASSERT_ERR(cb_server_route_add(srv, &st, &id), UV_EISDIR);
  /* Sparse files: the bound itself is taken, one byte more is not. */
  char big[512];
  snprintf(big, sizeof big, "%s", tmp_path("big"));
  int fd = open(big, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, (off_t)CB_MAX_BODY_FILE + 1), 0);
  st.response.body = (cb_str_t){big, strlen(big)};
  ASSERT_ERR(cb_server_route_add(srv, &st, &id), UV_EFBIG);
  ASSERT_EQ(ftruncate(fd, (off_t)CB_MAX_BODY_FILE), 0);
  close(fd);
  ASSERT_ERR(cb_server_route_add(srv, &st, &id), 0);
  int c = cl_connect(cb_server_port(srv));
  buf_t e = {0};
  exp_head(&e, 200, NULL, NULL, (long)CB_MAX_BODY_FILE, CONN_NONE);
  ROUNDTRIP_S(c, "HEAD /f HTTP/1.1\r\nhost: x\r\n\r\n", &e);
  close(c);
  buf_free(&e);
  unlink(big);
  cb_stub_list_t *list;
  ASSERT_ERR(cb_server_stubs(srv, &list), 0);
  ASSERT_EQ(list->count, 1); /* only the one that was taken */
  cb_stub_list_free(list);
  test_stop(srv);
}

/* A fixture_dir holding a FIFO where a fixture file goes, and another under the name of the temporary file the
 * server writes (this process's pid): the start neither blocks on them nor serves them; the files are written
 * afresh and served. */
TEST_T(adv_stubs_fixture_dir_fifos, 30000) {
  char dir[512], p[600];
  snprintf(dir, sizeof dir, "%s", tmp_path("fxdir"));
  mkdir(dir, 0700);
  snprintf(p, sizeof p, "%s/tiny", dir);
  unlink(p);
  ASSERT_EQ(mkfifo(p, 0600), 0);
  snprintf(p, sizeof p, "%s/.small.%ld.tmp", dir, (long)getpid());
  unlink(p);
  ASSERT_EQ(mkfifo(p, 0600), 0);
  cb_config_t cfg;
  test_config(&cfg);
  cfg.threads = 1;
  cfg.fixture_dir = dir;
  cb_server_t *srv = test_start(&cfg);
  int fd = cl_connect(cb_server_port(srv));
  const char *paths[] = {"/file/tiny", "/file/small"};
  for (int i = 0; i < 2; i++) {
    buf_t e = {0}, req = {0};
    exp_route(&e, "GET", paths[i], CONN_NONE);
    buf_addf(&req, "GET %s HTTP/1.1\r\nhost: x\r\n\r\n", paths[i]);
    ROUNDTRIP(fd, req.p, req.len, &e);
    buf_free(&e);
    buf_free(&req);
  }
  close(fd);
  test_stop(srv);
  const char *names[] = {"tiny", "small", "big"};
  for (int i = 0; i < 3; i++) {
    snprintf(p, sizeof p, "%s/%s", dir, names[i]);
    unlink(p);
  }
  rmdir(dir);
}
