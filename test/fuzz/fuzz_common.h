/* What the fuzz targets share: the output sink and where the fixture files are kept between inputs. */
#ifndef CB_FUZZ_COMMON_H
#define CB_FUZZ_COMMON_H

#include <stdlib.h>
#include <string.h>

#include "testing.h"

static size_t out_bytes;

static void sink(void *arg, const char *p, size_t len) {
  (void)arg;
  /* Touch both ends so that ASan checks the whole range the engine hands out. */
  if (len > 0) out_bytes += (size_t)(unsigned char)p[0] + (size_t)(unsigned char)p[len - 1];
  out_bytes += len;
}

/* A directory, so that the 5 MiB of fixture files are written once, not once per input (memfd). */
static const char *fixture_dir(void) {
  const char *env = getenv("CBT_FIXTURE_DIR");
  return env && *env ? env : "/tmp/cbench-fuzz-fixtures";
}

/* Stubs of issue 25 (a fuzzer's bytes reach their per-request work): a template inserting the path parameter,
 * a decoded query parameter and a header into a header value and the body, with {{body}} kept from the request;
 * a cycling sequence; two stubs of a scenario that moves back and forth; a seeded drawn delay of at most 1 ms. */
static void add_issue25_stubs(cb__testconn_t *tc) {
  static const cb_header_t tpl_hdr[] = {{CB_S("x-t"), CB_S("{{query.q}}|{{header.x-key}}|{{seq}}")}};
  static const cb_response_t seq[] = {{.status = 503, .body = CB_S("a")}, {.status = 200, .body = CB_S("b")}};
  cb_stub_t st[4];
  memset(st, 0, sizeof st);
  st[0].match = (cb_match_t){.path = CB_S("/t/{id}")};
  st[0].response = (cb_response_t){.status = 200, .headers = tpl_hdr, .nheaders = 1, .templated = 1,
                                   .body = CB_S("{{method}} {{path.id}} {{query.q}} {{header.x-key}} {{body}}")};
  st[1].match = (cb_match_t){.path = CB_S("/seq")};
  st[1].responses = seq;
  st[1].nresponses = 2;
  st[1].after = CB_AFTER_CYCLE;
  st[2].match = (cb_match_t){.path = CB_S("/scen")};
  st[2].response = (cb_response_t){.status = 200, .body = CB_S("one"), .delay_dist = CB_DELAY_UNIFORM,
                                   .delay_max_ms = 1, .delay_seed = 7};
  st[2].scenario = CB_S("s");
  st[2].when = CB_S("started");
  st[2].then = CB_S("two");
  st[3].match = (cb_match_t){.path = CB_S("/scen")};
  st[3].response = (cb_response_t){.status = 200, .body = CB_S("two")};
  st[3].scenario = CB_S("s");
  st[3].when = CB_S("two");
  st[3].then = CB_S("started");
  for (int i = 0; i < 4; i++) {
    uint64_t id;
    if (cb__testconn_route_add(tc, &st[i], &id) != 0) abort();
  }
}

/* Stubs in front of the fixture routes, so that inputs reach every matcher kind (params, prefix, header and
 * query matchers, methods), the stub answers (bytes, generated, pieces) and 405s over several routes. */
static void add_stubs(cb__testconn_t *tc) {
  static const cb_matcher_t hdr[] = {{CB_S("x-key"), CB_S("v1")}, {CB_S("host"), {NULL, 0}}};
  static const cb_matcher_t query[] = {{CB_S("a"), CB_S("1 2")}, {CB_S("flag"), {NULL, 0}}};
  static const cb_header_t out[] = {{CB_S("content-type"), CB_S("text/plain")}, {CB_S("x-a"), CB_S("1")}};
  cb_stub_t st[7];
  memset(st, 0, sizeof st);
  st[0].match = (cb_match_t){.methods = CB_METHOD_GET, .path = CB_S("/users/{id}/x"), .headers = hdr, .nheaders = 2};
  st[0].response = (cb_response_t){.status = 200, .headers = out, .nheaders = 2, .body = CB_S("matched")};
  st[1].match = (cb_match_t){.methods = CB_METHOD_PUT | CB_METHOD_DELETE, .path = CB_S("/users/*"), .query = query,
                             .nquery = 2};
  st[1].response = (cb_response_t){.status = 201, .body_kind = CB_BODY_GENERATED, .body_size = 3000, .chunks = 3};
  st[2].match = (cb_match_t){.methods = 0, .path = CB_S("/any/{a}/{b}"), .priority = 2};
  st[2].response = (cb_response_t){.status = 204};
  st[3].match = (cb_match_t){.methods = CB_METHOD_POST, .path = CB_S("/hello")};
  st[3].response = (cb_response_t){.status = 200, .body = CB_S("posted"), .chunks = 2, .times = 3};
  /* Body matchers (issue 25): the body held, then the lookup again; a miss falls through to /echo or 404. */
  st[4].match = (cb_match_t){.methods = CB_METHOD_POST, .path = CB_S("/bm"),
                             .body = {CB_MATCH_BODY_JSON_SUBSET, CB_S("{\"a\":{\"b\":[1,\"x\"]}}")}};
  st[4].response = (cb_response_t){.status = 200, .body = CB_S("json")};
  st[5].match = (cb_match_t){.methods = 0, .path = CB_S("/bm"), .body = {CB_MATCH_BODY_REGEX, CB_S("^k=(v|w)+$")}};
  st[5].response = (cb_response_t){.status = 201, .body = CB_S("regex")};
  st[6].match = (cb_match_t){.methods = CB_METHOD_POST, .path = CB_S("/echo"), .priority = 1,
                             .body = {CB_MATCH_BODY_CONTAINS, CB_S("stub")}};
  st[6].response = (cb_response_t){.status = 200, .body = CB_S("not echoed"), .times = 2};
  for (int i = 0; i < 7; i++) {
    uint64_t id;
    if (cb__testconn_route_add(tc, &st[i], &id) != 0) abort(); /* a fuzz run must not go on without them */
  }
  add_issue25_stubs(tc);
}

#endif
