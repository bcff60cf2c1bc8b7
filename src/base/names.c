/* Names for error codes and protocols, and the error detail of a refused stub with the names of its fields (the
 * one field table, in every language a stub is given in) and reasons. (Route names live in the route table.) */
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "base/base.h"

const char *cb_strerror(int err) {
  switch (err) {
    case 0: return "success";
    case CB_EFIXTURE: return "the fixture files could not be written or opened";
    case CB_ESTOPPED: return "the server is stopping or stopped";
    case CB_ETHREADS: return "the number of threads or a CPU number is out of range";
    case CB_ELIMIT: return "a size limit or timeout is out of range";
    case CB_EGONE: return "the request was answered already or its client is gone";
    case CB_ENOTSTREAMING: return "the request's streamed answer has not begun";
    default: break;
  }
  /* libuv allocates (and never frees) a string for codes it does not know: format those here instead. */
  static __thread char buf[64];
  uv_strerror_r(err, buf, sizeof buf);
  return buf;
}

const char *cb_err_name(int err) {
  switch (err) {
    case 0: return "OK";
    case CB_EFIXTURE: return "CB_EFIXTURE";
    case CB_ESTOPPED: return "CB_ESTOPPED";
    case CB_ETHREADS: return "CB_ETHREADS";
    case CB_ELIMIT: return "CB_ELIMIT";
    case CB_EGONE: return "CB_EGONE";
    case CB_ENOTSTREAMING: return "CB_ENOTSTREAMING";
    default: break;
  }
  static __thread char buf[64];
  uv_err_name_r(err, buf, sizeof buf);
  return buf;
}

const char *cb_proto_name(int proto) {
  static const char *const names[CB_PROTO_COUNT] = {"http1", "h2c_prior", "h2c_upgrade", "h1_tls", "h2_tls"};
  return proto >= 0 && proto < CB_PROTO_COUNT ? names[proto] : NULL;
}

const char *cb_version(void) { return "0.1.0"; }

static const char *const uperr_names[CB__UPERR_COUNT][2] = {
    [CB__UPERR_NONE] = {"none", ""},
    [CB__UPERR_REFUSED] = {"refused", "connection refused"},
    [CB__UPERR_RESET] = {"reset", "connection reset"},
    [CB__UPERR_TIMEOUT] = {"timeout", "timeout"},
    [CB__UPERR_BAD_RESPONSE] = {"bad_response", "bad response"},
    [CB__UPERR_HEAD_TOO_BIG] = {"head_too_big", "response head too big"},
    [CB__UPERR_BODY_TOO_BIG] = {"body_too_big", "response body too big"},
    [CB__UPERR_TRUNCATED] = {"truncated", "connection closed before the answer ended"},
    [CB__UPERR_CONNECT] = {"connect_failed", "connect failed"},
    [CB__UPERR_NO_MEMORY] = {"no_memory", "out of memory"},
    [CB__UPERR_TLS] = {"tls", "tls handshake failed"},
};

const char *cb__uperr_name(int e) { return e >= 0 && e < CB__UPERR_COUNT ? uperr_names[e][0] : "none"; }
const char *cb__uperr_text(int e) { return e >= 0 && e < CB__UPERR_COUNT ? uperr_names[e][1] : ""; }

/* ---- the error detail (include/cbench.h) ---- */

/* The one field table (include/cbench.h, cb_field_names_t): a field's C name, its Erlang {Term, Key}, its JSON
 * key path. Erlang gives chunks and their interval as one {N, Ms}, so both are its {response, chunks}; a JSON
 * stub's name is a key of the stub itself. */
static const cb_field_names_t field_names[CB_FIELD_COUNT] = {
    [CB_FIELD_NONE] = {"none", {NULL, NULL}, {NULL, NULL}},
    [CB_FIELD_NAME] = {"name", {"match", "name"}, {"name", NULL}},
    [CB_FIELD_METHODS] = {"match.methods", {"match", "method"}, {"match", "method"}},
    [CB_FIELD_PATH] = {"match.path", {"match", "path"}, {"match", "path"}},
    [CB_FIELD_MATCH_HEADERS] = {"match.headers", {"match", "headers"}, {"match", "headers"}},
    [CB_FIELD_MATCH_QUERY] = {"match.query", {"match", "query"}, {"match", "query"}},
    [CB_FIELD_STATUS] = {"response.status", {"response", "status"}, {"response", "status"}},
    [CB_FIELD_HEADERS] = {"response.headers", {"response", "headers"}, {"response", "headers"}},
    [CB_FIELD_BODY] = {"response.body", {"response", "body"}, {"response", "body"}},
    [CB_FIELD_DELAY_MS] = {"response.delay_ms", {"response", "delay_ms"}, {"response", "delay_ms"}},
    [CB_FIELD_CHUNKS] = {"response.chunks", {"response", "chunks"}, {"response", "chunks"}},
    [CB_FIELD_INTERVAL_MS] = {"response.interval_ms", {"response", "chunks"}, {"response", "interval_ms"}},
    [CB_FIELD_FAULT] = {"response.fault", {"response", "fault"}, {"response", "fault"}},
    [CB_FIELD_TIMEOUT_MS] = {"timeout_ms", {"handler", "timeout_ms"}, {NULL, NULL}},
    [CB_FIELD_DELIVER] = {"deliver", {NULL, NULL}, {NULL, NULL}},
    [CB_FIELD_RESPONSES] = {"responses", {"response", "responses"}, {"response", "responses"}},
    [CB_FIELD_AFTER] = {"after", {"response", "after"}, {"response", "after"}},
    [CB_FIELD_SCENARIO] = {"scenario", {"match", "scenario"}, {"match", "scenario"}},
    [CB_FIELD_WHEN] = {"when", {"match", "when"}, {"match", "when"}},
    [CB_FIELD_THEN] = {"then", {"match", "then"}, {"match", "then"}},
    [CB_FIELD_DELAY] = {"response.delay", {"response", "delay"}, {"response", "delay"}},
    [CB_FIELD_TEMPLATE] = {"response.template", {"response", "template"}, {"response", "template"}},
    [CB_FIELD_MATCH_BODY] = {"match.body", {"match", "body"}, {"match", "body"}},
    [CB_FIELD_PROXY] = {"response.proxy", {"response", "proxy"}, {"response", "proxy"}},
};

/* The Erlang atoms are these names: cbench_spec:whys() lists them in this order (a suite checks). */
static const char *const why_names[CB_WHY_COUNT] = {
    [CB_WHY_NONE] = "none",
    [CB_WHY_UNKNOWN_KEY] = "unknown_key",
    [CB_WHY_MISSING] = "missing",
    [CB_WHY_WRONG_TYPE] = "wrong_type",
    [CB_WHY_NULL_POINTER] = "null_pointer",
    [CB_WHY_OUT_OF_RANGE] = "out_of_range",
    [CB_WHY_EMPTY] = "empty",
    [CB_WHY_TOO_LONG] = "too_long",
    [CB_WHY_TOO_MANY] = "too_many",
    [CB_WHY_NOT_A_TOKEN] = "not_a_token",
    [CB_WHY_CONTROL_CHAR] = "control_char",
    [CB_WHY_EDGE_SPACE] = "edge_space",
    [CB_WHY_BAD_CHAR] = "bad_char",
    [CB_WHY_NO_LEADING_SLASH] = "no_leading_slash",
    [CB_WHY_MISPLACED_STAR] = "misplaced_star",
    [CB_WHY_STAR_WITH_PARAM] = "star_with_param",
    [CB_WHY_UNCLOSED_BRACE] = "unclosed_brace",
    [CB_WHY_STRAY_BRACE] = "stray_brace",
    [CB_WHY_PARAM_NOT_SEGMENT] = "param_not_segment",
    [CB_WHY_EMPTY_PARAM_NAME] = "empty_param_name",
    [CB_WHY_BAD_PARAM_NAME] = "bad_param_name",
    [CB_WHY_TOO_MANY_PARAMS] = "too_many_params",
    [CB_WHY_UNKNOWN_METHOD] = "unknown_method",
    [CB_WHY_FORBIDDEN_HEADER] = "forbidden_header",
    [CB_WHY_BODY_NOT_ALLOWED] = "body_not_allowed",
    [CB_WHY_CHUNKS_EXCEED_BODY] = "chunks_exceed_body",
    [CB_WHY_BAD_FAULT] = "bad_fault",
    [CB_WHY_NOT_REGULAR] = "not_regular",
    [CB_WHY_FAULT_EXCEEDS_BODY] = "fault_exceeds_body",
    [CB_WHY_NEEDS_SCENARIO] = "needs_scenario",
    [CB_WHY_MIN_ABOVE_MAX] = "min_above_max",
    [CB_WHY_CONFLICT] = "conflict",
    [CB_WHY_BAD_TEMPLATE] = "bad_template",
    [CB_WHY_BAD_REGEX] = "bad_regex",
    [CB_WHY_BAD_JSON] = "bad_json",
    [CB_WHY_BAD_URL] = "bad_url",
    [CB_WHY_BAD_CA] = "bad_ca",
};

const char *cb_field_name(int field) {
  return field >= 0 && field < CB_FIELD_COUNT && field_names[field].c ? field_names[field].c : "?";
}

const cb_field_names_t *cb_field_names(int field) {
  return field >= 0 && field < CB_FIELD_COUNT && field_names[field].c ? &field_names[field] : NULL;
}

const char *cb_why_name(int why) { return why >= 0 && why < CB_WHY_COUNT && why_names[why] ? why_names[why] : "?"; }

/* Per thread, like errno: the NIF adds stubs from dirty schedulers and reads the detail right after, on the same
 * thread, without a lock. */
static __thread cb_error_detail_t detail;

const cb_error_detail_t *cb_error_detail(void) {
  if (detail.field_name == NULL) cb__detail_clear(); /* a thread that never added a stub */
  return &detail;
}

void cb__detail_clear(void) {
  detail = (cb_error_detail_t){.field_name = field_names[0].c, .index = -1, .why_name = why_names[0]};
}

static void set_head(cb_field_id field, long index, cb_why_id why) {
  cb__detail_clear();
  detail.err = UV_EINVAL;
  detail.field = field;
  detail.field_name = cb_field_name((int)field);
  detail.index = index;
  detail.why = why;
  detail.why_name = cb_why_name((int)why);
}

int cb__bad_bytes(cb_field_id field, long index, cb_why_id why, const char *p, size_t n) {
  set_head(field, index, why);
  if (p == NULL) n = 0;
  detail.value = (cb_str_t){p, n};
  /* Escaped so that the text is safe on any terminal or log line: the value may hold CR, LF or worse. */
  size_t o = 0, cap = sizeof detail.text;
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)p[i];
    char esc[8];
    int k;
    if (i == 64) {
      memcpy(detail.text + o, "...", 3);
      o += 3;
      break;
    }
    if (ch == '\r') k = snprintf(esc, sizeof esc, "\\r");
    else if (ch == '\n') k = snprintf(esc, sizeof esc, "\\n");
    else if (ch == '\t') k = snprintf(esc, sizeof esc, "\\t");
    else if (ch == '\\' || ch == '"') k = snprintf(esc, sizeof esc, "\\%c", ch);
    else if (ch < 0x20 || ch >= 0x7f) k = snprintf(esc, sizeof esc, "\\x%02x", ch);
    else k = snprintf(esc, sizeof esc, "%c", ch);
    memcpy(detail.text + o, esc, (size_t)k); /* 64 bytes of at most 4 each, "..." and the NUL fit in cap */
    o += (size_t)k;
  }
  detail.text[o < cap ? o : cap - 1] = '\0';
  return UV_EINVAL;
}

int cb__bad_number(cb_field_id field, long index, cb_why_id why, long long number) {
  set_head(field, index, why);
  detail.numeric = 1;
  detail.number = number;
  snprintf(detail.text, sizeof detail.text, "%lld", number);
  return UV_EINVAL;
}

static const char *const kind_names[CB__FAULT_COUNT] = {
    "",          "reset",   "empty",   "hang",    "garbage", "truncated", "overlong", "malformed_chunk",
    "missing_last_chunk", "raw", "delay", "dribble", "rst_stream", "goaway", "settings", "violation", "trailers",
    "slow_head", "drip", "tls_bad_record", "tls_truncate"};

const char *cb__fault_name(int kind) { return kind > 0 && kind < CB__FAULT_COUNT ? kind_names[kind] : ""; }
