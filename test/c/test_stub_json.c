/* Stub files for cbench-server --stubs (c_src/stub_json.c): a valid file in both forms, and errors that name
 * the file, the line and the field. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "stub_json.h"

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fputs(text, f);
  fclose(f);
}

static const char *tmp_path(const char *name) {
  static char p[512];
  const char *t = getenv("TMPDIR");
  snprintf(p, sizeof p, "%s/cbench-%d-%s", t && *t ? t : "/tmp", (int)getpid(), name);
  return p;
}

static void get(int port, const char *req, const buf_t *exp) {
  int fd = cl_connect(port);
  cl_sends(fd, req);
  buf_t got = {0};
  ASSERT_EQ(cl_read_n(fd, &got, exp->len, 10000), CL_OK);
  mask_dates(got.p, got.len);
  ASSERT_MEM_EQ(got.p, got.len, exp->p, exp->len);
  close(fd);
  buf_free(&got);
}

TEST(stub_json_valid) {
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *srv = test_start(&cfg);
  char body_path[512], json_path[512];
  snprintf(body_path, sizeof body_path, "%s", tmp_path("body.txt"));
  write_text(body_path, "from a file");
  snprintf(json_path, sizeof json_path, "%s", tmp_path("stubs.json"));
  char json[2048];
  const char *base = strrchr(body_path, '/') + 1; /* relative to the stub file's directory */
  snprintf(json, sizeof json,
           "[\n"
           "  {\"name\": \"user\", \"match\": {\"method\": \"GET\", \"path\": \"/users/{id}\"},\n"
           "   \"response\": {\"status\": 201, \"headers\": {\"content-type\": \"application/json\"},\n"
           "                \"body\": {\"json\": {\"id\": 1}}}},\n"
           "  {\"match\": {\"method\": [\"PUT\", \"POST\"], \"path\": \"/f\", \"headers\": {\"x-k\": true},\n"
           "             \"query\": {\"a\": \"1\"}, \"priority\": 3},\n"
           "   \"response\": {\"headers\": [[\"x-r\", \"1\"], [\"x-r\", \"2\"]], \"body\": {\"file\": \"%s\"}}},\n"
           "  {\"match\": {\"path\": \"/gen/*\"}, \"response\": {\"body\": {\"bytes\": 5}, \"chunks\": 2,\n"
           "   \"times\": 1, \"delay_ms\": 1, \"interval_ms\": 1}}\n"
           "]\n",
           base);
  write_text(json_path, json);
  char msg[1024] = "";
  int n = cb_stubs_json_load(srv, json_path, msg, sizeof msg);
  if (n < 0) FAIL("%s", msg);
  ASSERT_EQ(n, 3);
  int port = cb_server_port(srv);
  buf_t exp = {0};
  exp_head(&exp, 201, NULL, "content-type: application/json\r\n", 8, CONN_NONE);
  buf_adds(&exp, "{\"id\":1}");
  get(port, "GET /users/9 HTTP/1.1\r\nHost: x\r\n\r\n", &exp);
  buf_reset(&exp);
  exp_head(&exp, 200, NULL, "x-r: 1\r\nx-r: 2\r\n", 11, CONN_NONE);
  buf_adds(&exp, "from a file");
  get(port, "POST /f?a=1 HTTP/1.1\r\nHost: x\r\nx-k: y\r\ncontent-length: 0\r\n\r\n", &exp);
  buf_reset(&exp);
  exp_head(&exp, 200, NULL, NULL, CL_CHUNKED, CONN_NONE);
  exp_chunk(&exp, "\x00\x01", 2);
  exp_chunk(&exp, "\x02\x03\x04", 3);
  exp_last_chunk(&exp);
  get(port, "DELETE /gen/x HTTP/1.1\r\nHost: x\r\n\r\n", &exp);
  /* A fault (docs/faults.md). */
  write_text(json_path, "[{\"match\": {\"path\": \"/lf\"}, \"response\": {\"fault\": \"raw?preset=bare_lf\"}}]");
  ASSERT_EQ(cb_stubs_json_load(srv, json_path, msg, sizeof msg), 1);
  buf_reset(&exp);
  buf_adds(&exp, "HTTP/1.1 200 OK\ncontent-length: 2\n\nok");
  get(port, "GET /lf HTTP/1.1\r\nHost: x\r\n\r\n", &exp);
  /* The object form. */
  write_text(json_path, "{\"stubs\": [{\"name\": \"x\", \"match\": {\"path\": \"/x\"}}]}");
  ASSERT_EQ(cb_stubs_json_load(srv, json_path, msg, sizeof msg), 1);
  ASSERT_EQ(route_count(srv, "x"), 0);
  unlink(json_path);
  unlink(body_path);
  buf_free(&exp);
  test_stop(srv);
}

/* A {"json": ...} body is served as ehttpd serves it (cbench_json:encode/1): members sorted bytewise by key, no
 * white space, jansson's string escapes, each real as the shortest text that reads back to it in Erlang's
 * float_to_binary(F, [short]) form. json_dumps kept the file's member order and wrote 0.1 as 0.10000000000000001.
 * cbench_record_SUITE:stub_json_body_bytes compares the three engines on 2,000 random doubles too. */
TEST(stub_json_json_body_canonical) {
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *srv = test_start(&cfg);
  char json_path[512];
  snprintf(json_path, sizeof json_path, "%s", tmp_path("jb.json"));
  write_text(json_path,
             "[{\"match\": {\"path\": \"/j\"}, \"response\": {\"body\": {\"json\": "
             "{\"z\": [0.1, 1.5e300, -0.0, 100.0, 1e-7, 1E2, 1000.0, 0.0001, 0.000123, 9007199254740992.0, "
             "1234567890123456.0, -7.120236347223045e-307, 5e-324],\n"
             " \"a\": {\"y\": 1, \"b\": [true, null, -9223372036854775808, -0]}, \"\\u00e9\": \"\\n\\u0001/\\\"\", "
             "\"B\": {}}}}}]");
  char msg[1024] = "";
  ASSERT_EQ(cb_stubs_json_load(srv, json_path, msg, sizeof msg), 1);
  const char *want = "{\"B\":{},\"a\":{\"b\":[true,null,-9223372036854775808,0],\"y\":1},"
                     "\"z\":[0.1,1.5e300,-0.0,100.0,1.0e-7,100.0,1.0e3,0.0001,1.23e-4,9.007199254740992e15,"
                     "1234567890123456.0,-7.120236347223045e-307,5.0e-324],\"\xc3\xa9\":\"\\n\\u0001/\\\"\"}";
  buf_t exp = {0};
  exp_head(&exp, 200, NULL, NULL, (long)strlen(want), CONN_NONE);
  buf_adds(&exp, want);
  get(cb_server_port(srv), "GET /j HTTP/1.1\r\nHost: x\r\n\r\n", &exp);
  unlink(json_path);
  buf_free(&exp);
  test_stop(srv);
}

/* Body matchers in a stub file (docs/routes.md, "Body matchers"): json_subset given as any JSON value, regex,
 * equal, contains; the first that matches answers; a body none matches gets 405 here (the POST stub). */
TEST(stub_json_body_match) {
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *srv = test_start(&cfg);
  char json_path[512];
  snprintf(json_path, sizeof json_path, "%s", tmp_path("bm.json"));
  write_text(json_path,
             "[{\"match\": {\"method\": \"POST\", \"path\": \"/o\", \"body\": {\"json_subset\": {\"kind\": \"book\"}},\n"
             "   \"priority\": 3}, \"response\": {\"body\": \"book\"}},\n"
             " {\"match\": {\"path\": \"/o\", \"body\": {\"regex\": \"^[a-z]+=[0-9]+$\"}, \"priority\": 2},\n"
             "  \"response\": {\"body\": \"form\"}},\n"
             " {\"match\": {\"path\": \"/o\", \"body\": {\"equal\": \"ping\"}, \"priority\": 1},\n"
             "  \"response\": {\"body\": \"pong\"}},\n"
             " {\"match\": {\"path\": \"/o\", \"body\": {\"contains\": \"x\"}}, \"response\": {\"body\": \"has x\"}}]\n");
  char msg[1024] = "";
  int n = cb_stubs_json_load(srv, json_path, msg, sizeof msg);
  if (n < 0) FAIL("%s", msg);
  ASSERT_EQ(n, 4);
  int port = cb_server_port(srv);
  static const struct {
    const char *req, *answer;
  } cs[] = {
      {"POST /o HTTP/1.1\r\nHost: x\r\ncontent-length: 27\r\n\r\n{\"id\": 1, \"kind\": \"book\"}  ", "book"},
      {"PUT /o HTTP/1.1\r\nHost: x\r\ncontent-length: 4\r\n\r\nid=7", "form"},
      {"PUT /o HTTP/1.1\r\nHost: x\r\ncontent-length: 4\r\n\r\nping", "pong"},
      {"PUT /o HTTP/1.1\r\nHost: x\r\ncontent-length: 3\r\n\r\naxb", "has x"},
      {"PUT /o HTTP/1.1\r\nHost: x\r\ncontent-length: 3\r\n\r\nabc", NULL},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    buf_t exp = {0};
    if (cs[i].answer) {
      exp_head(&exp, 200, NULL, NULL, (long)strlen(cs[i].answer), CONN_NONE);
      buf_adds(&exp, cs[i].answer);
    } else { /* the POST stub's path matched, not its method: 405 (its body matcher is not looked at) */
      exp_head(&exp, 405, NULL, "allow: POST\r\n", 0, CONN_NONE);
    }
    get(port, cs[i].req, &exp);
    buf_free(&exp);
  }
  unlink(json_path);
  test_stop(srv);
}

/* Each bad file: the message must be exactly this (with FILE for the path). */
TEST(stub_json_errors) {
  static const struct {
    const char *text, *msg;
  } cases[] = {
      {"[\n  {\"match\": {\"path\": \"/a\"}},\n  {\"match\": {\"path\": \"/b\"},\n   \"response\": {\"status\": 99}}\n]",
       "FILE:4: stubs[1].response.status: out_of_range: must be an integer from 200 to 599"},
      {"[{\"match\": {\"path\": \"/a\"}},\n{\"match\": {\"path\": \"/a\", \"methd\": \"GET\"}}]",
       "FILE:2: stubs[1].match.methd: unknown_key: unknown field"},
      {"[\n{\"match\": {\"path\": \"a\"}}]", "FILE:2: stubs[0].match.path: no_leading_slash: \"a\" (docs/routes.md)"},
      {"[\n{\"match\": {\"path\": 7}}]", "FILE:2: stubs[0].match.path: wrong_type: must be a path pattern starting with /"},
      {"[\n{\"match\":\n {\"path\": \"/a\", \"method\": [\"GET\", \"FETCH\"]}}]",
       "FILE:3: stubs[0].match.method[1]: unknown_method: must be a method name"},
      {"[{\"match\": {\"path\": \"/a\"},\n \"response\": {\"headers\": {\"x\": 1}}}]",
       "FILE:2: stubs[0].response.headers.x: wrong_type: must be a string"},
      {"[{\"match\": {\"path\": \"/a\"}, \"response\": {\n\"body\": {\"bytes\": -1}}}]",
       "FILE:2: stubs[0].response.body.bytes: out_of_range: must be a non-negative integer"},
      {"{\"stubs\": [\n\n{\"match\": {\"path\": \"/a\"}, \"response\": {\"chunks\": \"2\"}}]}",
       "FILE:3: stubs[0].response.chunks: wrong_type: must be an integer from 0 to 1000000"},
      {"[\n{\"match\": {\"path\": \"/a/{id\"}}]", "FILE:2: stubs[0].match.path: unclosed_brace: \"/a/{id\" (docs/routes.md)"},
      {"[{\"match\": {\"path\": \"/{a}/{b}/{c}/{d}/{e}/{f}/{g}/{h}/{i}\"}}]",
       "FILE:1: stubs[0].match.path: too_many_params: \"/{a}/{b}/{c}/{d}/{e}/{f}/{g}/{h}/{i}\" (docs/routes.md)"},
      {"[{\"match\": {\"path\": \"/a\"},\n \"response\": {\"headers\": {\"x-a\": \"1\",\n \"x-b\": \"a\\r\\nb\"}}}]",
       "FILE:3: stubs[0].response.headers.x-b: control_char: \"a\\r\\nb\" (docs/routes.md)"},
      {"[{\"match\": {\"path\": \"/a\"},\n \"response\": {\"headers\": [[\"x-a\", \"1\"], [\"Date\", \"x\"]]}}]",
       "FILE:2: stubs[0].response.headers[1]: forbidden_header: \"Date\" (docs/routes.md)"},
      {"[{\"match\": {\"path\": \"/a\", \"headers\": {\"a b\": true}}}]",
       "FILE:1: stubs[0].match.headers.a b: not_a_token: \"a b\" (docs/routes.md)"},
      {"[{\"match\": {\"path\": \"/a\"}},\n {\"match\": {\"path\": \"/a\"}, \"response\": {\"status\": 204, \"body\": \"x\"}}]",
       "FILE:2: stubs[1].response.status: body_not_allowed: \"204\" (docs/routes.md)"},
      {"[{\"name\": \"a b\", \"match\": {\"path\": \"/a\"}}]", "FILE:1: stubs[0].name: bad_char: \"a b\" (docs/routes.md)"},
      {"[\n{\"match\": {\"path\": \"/a\"}, \"response\": {\"body\": {\"file\": \"/nonexistent/x\"}}}]",
       "FILE:2: stubs[0]: response.body.file: no such file or directory (ENOENT): see docs/routes.md for the rules "
       "of match.path, headers and body"},
      {"[\n  {\"match\": {\"path\": \"/a\"}},\n  {\"match\": {\"path\": \"/a\"},}\n]",
       "FILE:3: column 28: string or '}' expected near '}'"},
      {"{\"routes\": []}", "FILE:1: stubs: wrong_type: must be a list of stubs (or an object with a \"stubs\" list)"},
      {"[{\"response\": {}}]", "FILE:1: stubs[0].match: missing: must be an object with at least a path"},
      {"[{\"match\": {\"path\": \"/a\"},\n \"response\": {\"fault\": 1}}]",
       "FILE:2: stubs[0].response.fault: wrong_type: must be a fault spec string such as \"reset?at=head\" (docs/faults.md)"},
      {"[\n{\"match\": {\"path\": \"/a\"}, \"response\": {\"fault\": \"reset?at=x\"}}]",
       "FILE:2: stubs[0].response.fault: bad_fault: \"reset?at=x\" (docs/routes.md, docs/faults.md)"},
      /* A key twice in one object: refused with its line (jansson would keep the last). */
      {"[{\"match\": {\"path\": \"/a\"}},\n {\"match\": {\"path\": \"/b\", \"path\": \"/c\"}}]",
       "FILE:2: column 32: duplicate object key near '\"path\"'"},
      /* Bytes a terminal acts on, quoted from the input, are written as \xNN. */
      {"[{\"match\": {\"path\": \"/a\", \"pa\\u001b[2Jth\\u0007\\u00e9\": 1}}]",
       "FILE:1: stubs[0].match.pa\\x1b[2Jth\\x07\\xc3\\xa9: unknown_key: unknown field"},
      {"[{\"match\": {\"path\": \"/a\", \"method\": \"G\\u001bT\"}}]",
       "FILE:1: stubs[0].match.method: unknown_method: unknown method \"G\\x1bT\" (GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS, "
       "CONNECT, TRACE, or \"any\")"},
      {"[{\"match\": {\"path\": \"/a\"}}, {\"match\": {\"path\": \"/b\"}, \"response\": {\"body\": {\"file\": "
       "\"/dev/zero\"}}}]",
       "FILE:1: stubs[1].response.body.file: not_regular: /dev/zero is a device: a body file must be a regular file"},
      {"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"body\": {\"file\": \"/\"}}}]",
       "FILE:1: stubs[0].response.body.file: eisdir: / is a directory: a body file must be a regular file"},
      {"[{\"match\": {\"path\": \"/a\", \"body\": {\"regex\": \"\\\\d+\"}}}]",
       "FILE:1: stubs[0].match.body: bad_regex: \"\\\\d+\" (docs/routes.md)"},
      {"[{\"match\": {\"path\": \"/a\",\n \"body\": {\"regex\": 1}}}]",
       "FILE:2: stubs[0].match.body.regex: wrong_type: must be a string"},
      {"[{\"match\": {\"path\": \"/a\", \"body\": {\"xml\": \"<a/>\"}}}]",
       "FILE:1: stubs[0].match.body: unknown_key: must be an object with one of equal, contains, regex, json, json_subset"},
      {"[{\"match\": {\"path\": \"/a\", \"body\": \"x\"}}]",
       "FILE:1: stubs[0].match.body: wrong_type: must be an object with one of equal, contains, regex, json, json_subset"},
      /* The base64 body form (docs/record.md): the reason names what is wrong and where. */
      {"[{\"match\": {\"path\": \"/a\"},\n \"response\": {\"body\": {\"base64\": \"AAH\"}}}]",
       "FILE:2: stubs[0].response.body.base64: bad_char: not base64: 3 characters, not a multiple of 4 (pad with =)"},
      {"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"body\": {\"base64\": \"AA-/\"}}}]",
       "FILE:1: stubs[0].response.body.base64: bad_char: not base64: byte 2 is not one of A-Z a-z 0-9 + / (or = "
       "padding at the end)"},
      {"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"body\": {\"base64\": \"A===\"}}}]",
       "FILE:1: stubs[0].response.body.base64: bad_char: not base64: byte 1 is not one of A-Z a-z 0-9 + / (or = "
       "padding at the end)"},
      {"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"body\": {\"base64\": \"AA H\"}}}]",
       "FILE:1: stubs[0].response.body.base64: bad_char: not base64: byte 2 is not one of A-Z a-z 0-9 + / (or = "
       "padding at the end)"},
      {"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"body\": {\"base64\": 7}}}]",
       "FILE:1: stubs[0].response.body.base64: wrong_type: must be a string of base64 (RFC 4648)"},
      {"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"body\": {\"hex\": \"00\"}}}]",
       "FILE:1: stubs[0].response.body: unknown_key: must be a string, or an object with one of bytes, file, json, "
       "base64"},
      /* A proxy's pipeline: its type and bound here; above 1 with h2c or https:// the engine's conflict (the value
       * reaches it), named response.proxy as the engine's other refusals of a proxy but `to' are. */
      {"[{\"match\": {\"path\": \"/a\"},\n \"response\": {\"proxy\": "
       "{\"to\": \"http://127.0.0.1:1\", \"pipeline\": 65}}}]",
       "FILE:2: stubs[0].response.proxy.pipeline: out_of_range: must be an integer from 0 to 64"},
      {"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"proxy\": "
       "{\"to\": \"http://127.0.0.1:1\", \"pipeline\": -1}}}]",
       "FILE:1: stubs[0].response.proxy.pipeline: out_of_range: must be an integer from 0 to 64"},
      {"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"proxy\": "
       "{\"to\": \"http://127.0.0.1:1\", \"pipeline\": \"4\"}}}]",
       "FILE:1: stubs[0].response.proxy.pipeline: wrong_type: must be an integer from 0 to 64"},
      {"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"proxy\": "
       "{\"to\": \"http://127.0.0.1:1\", \"pipeline\": 2.0}}}]",
       "FILE:1: stubs[0].response.proxy.pipeline: wrong_type: must be an integer from 0 to 64"},
      {"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"proxy\": "
       "{\"to\": \"http://127.0.0.1:1\", \"protocol\": \"h2c\", \"pipeline\": 2}}}]",
       "FILE:1: stubs[0].response.proxy: conflict: \"2\" (docs/routes.md)"},
      {"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"proxy\": "
       "{\"to\": \"https://127.0.0.1:1\", \"pipeline\": 64}}}]",
       "FILE:1: stubs[0].response.proxy: conflict: \"64\" (docs/routes.md)"},
  };
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *srv = test_start(&cfg);
  char path[512];
  snprintf(path, sizeof path, "%s", tmp_path("bad.json"));
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char msg[1024] = "", want[1024];
    write_text(path, cases[i].text);
    ASSERT_EQ(cb_stubs_json_load(srv, path, msg, sizeof msg), -1);
    const char *f = strstr(cases[i].msg, "FILE");
    snprintf(want, sizeof want, "%s%s", path, f + 4);
    ASSERT_STR_EQ(msg, want);
  }
  char msg[1024];
  ASSERT_EQ(cb_stubs_json_load(srv, "/nonexistent/stubs.json", msg, sizeof msg), -1);
  ASSERT_STR_EQ(msg, "/nonexistent/stubs.json: No such file or directory");
  ASSERT_EQ(cb_stubs_json_load(srv, "/", msg, sizeof msg), -1);
  ASSERT_STR_EQ(msg, "/: is a directory");
  /* A FIFO as a body file: refused at once with the stub named (open(2) would wait for a writer forever). */
  char fifo[512], want[1600], text[1600];
  snprintf(fifo, sizeof fifo, "%s", tmp_path("body.fifo"));
  unlink(fifo);
  ASSERT_EQ(mkfifo(fifo, 0600), 0);
  snprintf(text, sizeof text, "[{\"match\": {\"path\": \"/a\"}},\n{\"match\": {\"path\": \"/b\"},\n"
           "\"response\": {\"body\": {\"file\": \"%s\"}}}]", fifo);
  write_text(path, text);
  ASSERT_EQ(cb_stubs_json_load(srv, path, msg, sizeof msg), -1);
  snprintf(want, sizeof want, "%s:3: stubs[1].response.body.file: not_regular: %s is a FIFO: a body file must be a regular file",
           path, fifo);
  ASSERT_STR_EQ(msg, want);
  unlink(fifo);
  /* Nothing of a file with an error was added. */
  cb_stub_list_t *list;
  ASSERT_EQ(cb_server_stubs(srv, &list), 0);
  ASSERT_EQ(list->count, 0);
  cb_stub_list_free(list);
  unlink(path);
  test_stop(srv);
}

/* Stubs from memory (the admin API's POST /stubs): a lone object is a list of one; "expect" comes back with each
 * stub's id; an error is given in parts too (field, why, value, line), and a file may carry expectations. */
TEST(stub_json_add_text) {
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *srv = test_start(&cfg);
  cb_stubs_json_error_t err;
  cb_stub_added_t *added = NULL;
  const char *one = "{\"match\": {\"path\": \"/one\"}, \"expect\": {\"times\": 2}}";
  ASSERT_EQ(cb_stubs_json_add(srv, "body", NULL, one, strlen(one), &added, &err), 1);
  ASSERT_EQ(added[0].id, 1);
  ASSERT_EQ(added[0].expect, CB_STUB_EXPECT_TIMES);
  ASSERT_EQ(added[0].expect_n, 2);
  free(added);
  const char *two = "[{\"match\": {\"path\": \"/a\"}}, {\"match\": {\"path\": \"/b\"}, \"expect\": {\"at_least\": 0}}]";
  ASSERT_EQ(cb_stubs_json_add(srv, "body", NULL, two, strlen(two), &added, &err), 2);
  ASSERT_EQ(added[0].id, 2);
  ASSERT_EQ(added[0].expect, CB_STUB_EXPECT_NONE);
  ASSERT_EQ(added[1].id, 3);
  ASSERT_EQ(added[1].expect, CB_STUB_EXPECT_AT_LEAST);
  ASSERT_EQ(added[1].expect_n, 0);
  free(added);
  static const struct {
    const char *text, *field, *why, *value, *msg;
    int line, column;
  } bad[] = {
      {"{\"match\": ", "", "bad_json", "", "body:1: column 10: unexpected token near end of file", 1, 10},
      {"{\"match\": {\"path\": \"/x\"},\n \"expect\": {\"times\": 1, \"at_least\": 1}}", "stubs[0].expect", "wrong_type",
       "", "body:2: stubs[0].expect: wrong_type: must be {\"times\": N} or {\"at_least\": N}", 2, 0},
      {"{\"match\": {\"path\": \"/x\"}, \"expect\": {\"once\": 1}}", "stubs[0].expect.once", "unknown_key", "",
       "body:1: stubs[0].expect.once: unknown_key: unknown field", 1, 0},
      {"[{\"match\": {\"path\": \"/x\"}},\n {\"match\": {\"path\": \"/x\", \"headers\": {\"x-a\": \"a\\u0001\"}}}]",
       "stubs[1].match.headers.x-a", "control_char", "a\\x01",
       "body:2: stubs[1].match.headers.x-a: control_char: \"a\\x01\" (docs/routes.md)", 2, 0},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    added = (cb_stub_added_t *)&err; /* overwritten with NULL on failure */
    ASSERT_EQ(cb_stubs_json_add(srv, "body", NULL, bad[i].text, strlen(bad[i].text), &added, &err), -1);
    ASSERT_NULL(added);
    ASSERT_STR_EQ(err.msg, bad[i].msg);
    ASSERT_STR_EQ(err.field, bad[i].field);
    ASSERT_STR_EQ(err.why, bad[i].why);
    ASSERT_STR_EQ(err.value, bad[i].value);
    ASSERT_EQ(err.line, bad[i].line);
    ASSERT_EQ(err.column, bad[i].column);
  }
  /* Nothing of a refused text was added: the three stubs of before. */
  cb_stub_list_t *list;
  ASSERT_EQ(cb_server_stubs(srv, &list), 0);
  ASSERT_EQ(list->count, 3);
  cb_stub_list_free(list);
  /* A file's expectations. */
  char path[512];
  snprintf(path, sizeof path, "%s", tmp_path("expect.json"));
  write_text(path, "{\"stubs\": [{\"match\": {\"path\": \"/f\"}, \"expect\": {\"at_least\": 3}}]}");
  char msg[1024];
  ASSERT_EQ(cb_stubs_json_load_added(srv, path, &added, msg, sizeof msg), 1);
  ASSERT(added[0].id > 3); /* a refused batch may have used ids up (cb_server_route_add_many) */
  ASSERT_EQ(added[0].expect, CB_STUB_EXPECT_AT_LEAST);
  ASSERT_EQ(added[0].expect_n, 3);
  free(added);
  unlink(path);
  test_stop(srv);
}

/* "after" says what a sequence does once its responses are spent: without "responses" it has nothing to act on,
 * and a value that is not even one of its three (or not a string) was taken in silence. Refused as the Erlang
 * API refuses it ({response, after} is not a single response's key), whatever its value. */
TEST(stub_json_after_without_responses) {
  static const struct {
    const char *text, *msg;
  } cases[] = {
      {"[{\"match\": {\"path\": \"/a\"},\n \"response\": {\"status\": 201, \"after\": \"cycle\"}}]",
       "FILE:2: stubs[0].response.after: unknown_key: after goes with responses (a sequence)"},
      {"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"after\": \"zzz\"}}]",
       "FILE:1: stubs[0].response.after: unknown_key: after goes with responses (a sequence)"},
      {"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"after\": 7, \"times\": 2}}]",
       "FILE:1: stubs[0].response.after: unknown_key: after goes with responses (a sequence)"},
      /* Beside a proxy it is a key a proxy cannot go with: a conflict, as cbench_spec and docs/proxy.md say. */
      {"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"proxy\": {\"to\": \"http://127.0.0.1:1\"}, \"after\": \"last\"}}]",
       "FILE:1: stubs[0].response.after: conflict: after goes with responses (a sequence), not with proxy"},
  };
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *srv = test_start(&cfg);
  char path[512];
  snprintf(path, sizeof path, "%s", tmp_path("after.json"));
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char msg[1024] = "", want[1024];
    write_text(path, cases[i].text);
    ASSERT_EQ(cb_stubs_json_load(srv, path, msg, sizeof msg), -1);
    snprintf(want, sizeof want, "%s%s", path, strstr(cases[i].msg, "FILE") + 4);
    ASSERT_STR_EQ(msg, want);
  }
  /* With its responses, "after" is taken as before. */
  write_text(path, "[{\"match\": {\"path\": \"/a\"}, \"response\": {\"responses\": [{\"status\": 201}], \"after\": "
                   "\"cycle\"}}]");
  char msg[1024] = "";
  ASSERT_EQ(cb_stubs_json_load(srv, path, msg, sizeof msg), 1);
  cb_stub_list_t *list;
  ASSERT_EQ(cb_server_stubs(srv, &list), 0);
  ASSERT_EQ(list->count, 1);
  cb_stub_list_free(list);
  unlink(path);
  test_stop(srv);
}

/* The file's own object ({"stubs": [...]}) takes no other key: one was skipped in silence, so a misspelt second
 * list ("stub", "stubs2") or a stub's key written beside "stubs" added nothing and said nothing. */
TEST(stub_json_root_unknown_key) {
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *srv = test_start(&cfg);
  char path[512], msg[1024] = "", want[1200];
  snprintf(path, sizeof path, "%s", tmp_path("root.json"));
  write_text(path, "{\"stubs\": [{\"match\": {\"path\": \"/a\"}}],\n \"stub\": [{\"match\": {\"path\": \"/b\"}}]}");
  ASSERT_EQ(cb_stubs_json_load(srv, path, msg, sizeof msg), -1);
  snprintf(want, sizeof want, "%s:2: stub: unknown_key: unknown field", path);
  ASSERT_STR_EQ(msg, want);
  /* The admin API's text: the same, in parts. */
  const char *text = "{\"stubs\": [],\n \"match\": {\"path\": \"/x\"}}";
  cb_stubs_json_error_t err;
  cb_stub_added_t *added = NULL;
  ASSERT_EQ(cb_stubs_json_add(srv, "body", NULL, text, strlen(text), &added, &err), -1);
  ASSERT_STR_EQ(err.msg, "body:2: match: unknown_key: unknown field");
  ASSERT_STR_EQ(err.field, "match");
  ASSERT_STR_EQ(err.why, "unknown_key");
  ASSERT_EQ(err.line, 2);
  cb_stub_list_t *list;
  ASSERT_EQ(cb_server_stubs(srv, &list), 0);
  ASSERT_EQ(list->count, 0);
  cb_stub_list_free(list);
  /* "stubs" alone is the file's form as before. */
  write_text(path, "{\"stubs\": [{\"match\": {\"path\": \"/a\"}}]}");
  ASSERT_EQ(cb_stubs_json_load(srv, path, msg, sizeof msg), 1);
  unlink(path);
  test_stop(srv);
}

/* Response headers given as an object are sent sorted by name (docs/routes.md, "The stub file"): JSON objects are
 * unordered, and ehttpd decodes one into a map, so file order could not be kept on every engine. The key is the
 * name as sent, lowercased, bytewise (a name that is a prefix of another first); two names equal but for case
 * go in the byte order of their names as written. A sequence's responses alike; a list of pairs keeps its order.
 * Before this the C engines sent the object's members in file order. */
TEST(stub_json_headers_object_sorted) {
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *srv = test_start(&cfg);
  char path[512], msg[1024] = "";
  snprintf(path, sizeof path, "%s", tmp_path("sorted.json"));
  write_text(path,
             "[{\"match\": {\"path\": \"/o\"}, \"response\": {\"headers\": {\"x-b\": \"1\", \"X-C\": \"2\", "
             "\"x-a-b\": \"3\", \"x-a\": \"4\", \"X-A\": \"5\", \"x-\": \"6\"}, \"body\": \"o\"}},\n"
             " {\"match\": {\"path\": \"/s\"}, \"response\": {\"responses\": [{\"headers\": "
             "{\"z\": \"1\", \"a\": \"2\"}, \"body\": \"s\"}]}},\n"
             " {\"match\": {\"path\": \"/l\"}, \"response\": {\"headers\": [[\"z\", \"1\"], [\"a\", \"2\"]], "
             "\"body\": \"l\"}}]\n");
  int n = cb_stubs_json_load(srv, path, msg, sizeof msg);
  if (n < 0) FAIL("%s", msg);
  ASSERT_EQ(n, 3);
  int port = cb_server_port(srv);
  buf_t exp = {0};
  exp_head(&exp, 200, NULL, "x-: 6\r\nx-a: 5\r\nx-a: 4\r\nx-a-b: 3\r\nx-b: 1\r\nx-c: 2\r\n", 1, CONN_NONE);
  buf_adds(&exp, "o");
  get(port, "GET /o HTTP/1.1\r\nHost: x\r\n\r\n", &exp);
  buf_reset(&exp);
  exp_head(&exp, 200, NULL, "a: 2\r\nz: 1\r\n", 1, CONN_NONE);
  buf_adds(&exp, "s");
  get(port, "GET /s HTTP/1.1\r\nHost: x\r\n\r\n", &exp);
  buf_reset(&exp);
  exp_head(&exp, 200, NULL, "z: 1\r\na: 2\r\n", 1, CONN_NONE);
  buf_adds(&exp, "l");
  get(port, "GET /l HTTP/1.1\r\nHost: x\r\n\r\n", &exp);
  /* A refused member is named by its key whatever its place after sorting. */
  write_text(path, "[{\"match\": {\"path\": \"/e\"},\n \"response\": {\"headers\": {\"x-b\": \"1\", \"x-c\": \"2\",\n"
                   " \"x-a\": \"a\\r\\nb\"}}}]");
  ASSERT_EQ(cb_stubs_json_load(srv, path, msg, sizeof msg), -1);
  char want[1200];
  snprintf(want, sizeof want, "%s:3: stubs[0].response.headers.x-a: control_char: \"a\\r\\nb\" (docs/routes.md)", path);
  ASSERT_STR_EQ(msg, want);
  unlink(path);
  buf_free(&exp);
  test_stop(srv);
}
