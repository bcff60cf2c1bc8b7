/* The one term codec of the NIF and the port program: the Erlang terms of the control plane decoded into the
 * library's structs and encoded from them, written once against the reader and writer of term.h (enif backend:
 * term_enif.c, ei backend: term_ei.c). The term shapes are those erl/cbench_c_terms.erl, erl/cbench_spec.erl
 * (canonical forms) and erl/cbench_handler.erl build; docs/erlang.md ("One codec for the NIF and the port") says
 * what a term that does not decode gets.
 *
 * Decoders return 0, or -1 when the term does not decode (the NIF answers badarg, the port program
 * {error, badarg}); they check every part, so any term is safe to give them. Maps are decoded strictly: a key
 * the term does not take, or a required key missing, does not decode. Strings point into the terms (or the
 * reader's flattened iodata) and live while they do; the engine copies what it keeps.
 *
 * The names of keys live here once (the key tables below); the names of refused fields live in the library's
 * field table (cb_field_names(), src/base/names.c), which the JSON loader reads too. make fields-check compares both
 * with test/cbench_fields.erl, which the Erlang suites hold the three engines to.
 */
#ifndef CB_CODEC_H
#define CB_CODEC_H

#include "term.h"

/* ---- key tables ---- */

/* The keys of one term (a map): NULL-terminated, required ones first. */
typedef struct cb_codec_keys_s {
  const char *term;            /* "match", "response", "sequence", "filter", "entry", "stub_info", "handler" */
  const char *const *keys;
  int required;                /* keys[0..required) must be there */
} cb_codec_keys_t;

/* Every key table, NULL-terminated (for the generator of test/cbench_fields.erl). */
const cb_codec_keys_t *const *cb_codec_key_tables(void);

/* ---- stubs ---- */

/* A proxy's record_headers and record_status as decoded (the engine's limits: docs/proxy.md). */
#define CB_CODEC_MAX_RECORD_HEADERS 32
#define CB_CODEC_MAX_RECORD_STATUS 64

/* A stub decoded from Match and Response: what cb_server_route_add() takes, and the arrays it points into. */
typedef struct cb_codec_stub_s {
  cb_stub_t st;
  cb_matcher_t headers[CB_MAX_MATCHERS];
  cb_matcher_t query[CB_MAX_MATCHERS];
  cb_header_t res_headers[CB_MAX_HEADERS];
  cb_proxy_t proxy; /* a proxy response's options (st.response.proxy points here) */
  cb_str_t record_headers[CB_CODEC_MAX_RECORD_HEADERS];
  int record_status[CB_CODEC_MAX_RECORD_STATUS];
  void *mem; /* a sequence's responses and their header arrays: one block, freed by cb_codec_stub_free() */
} cb_codec_stub_t;

/* Match: #{name, methods, path (the pattern text), headers, query, priority, body} and optionally scenario, into
 * s->st's name, match and scenario (s is zeroed first). */
int cb_codec_match(cb_term_in_t *in, cb_term_t t, cb_codec_stub_t *s);

/* Response: #{status, headers, body, delay_ms, chunks, times} and optionally fault, delay and template; or a
 * sequence #{responses => [Response], after, times}. Into s->st after cb_codec_match(); free with
 * cb_codec_stub_free() whether it decoded or not. */
int cb_codec_response(cb_term_in_t *in, cb_term_t t, cb_codec_stub_t *s);
void cb_codec_stub_free(cb_codec_stub_t *s);

/* A handler route's options as the NIF takes them: #{timeout_ms, batch, body => whole | stream}. */
int cb_codec_handler_opts(cb_term_in_t *in, cb_term_t t, unsigned *timeout_ms, int *batch, int *stream);
/* A handler route's timeout alone (the port program's {handler_add, Match, TimeoutMs, Stream}): 1..3600000. */
int cb_codec_timeout(cb_term_in_t *in, cb_term_t t, unsigned *timeout_ms);

/* ---- small terms ---- */

/* true or false. */
int cb_codec_bool(cb_term_in_t *in, cb_term_t t, int *b);
/* Whether t is the atom `name`. */
int cb_codec_is_atom(cb_term_in_t *in, cb_term_t t, const char *name);
/* A binary (a scenario's name or state). */
int cb_codec_binary(cb_term_in_t *in, cb_term_t t, cb_str_t *out);
/* An id: an integer; one that cannot be an id (negative, 2^64 and more) is 0, which names nothing (no route,
 * stub or journal entry has id 0), so that the caller answers "not found" rather than badarg. */
int cb_codec_id(cb_term_in_t *in, cb_term_t t, uint64_t *id);

/* ---- the journal ---- */

/* Filter: #{since, method, path, stub}, what the engine applies itself (cbench_journal filters the rest). *none
 * is 1 for a stub id that cannot exist: the answer is [] without asking the engine. */
int cb_codec_filter(cb_term_in_t *in, cb_term_t t, cb_request_filter_t *f, int *none);

/* The names of the fixture routes (and not_found) of a started server: journal entries and counters give these
 * as atoms, a stub's (the user's) as binaries, so no atom is ever made from user data. */
#define CB_CODEC_MAX_FIXTURE 64
typedef struct cb_codec_fixture_s {
  size_t n;
  char names[CB_CODEC_MAX_FIXTURE][CB_MAX_NAME + 1];
} cb_codec_fixture_t;

/* From a started server's counts, which list the fixture routes, then not_found, before any stub. */
void cb_codec_fixture_take(cb_codec_fixture_t *fx, const cb_route_counts_t *rc);

/* A route name: an atom when fx (may be NULL) lists it, else a binary. */
void cb_codec_route_name(cb_term_out_t *out, const cb_codec_fixture_t *fx, cb_str_t name);

/* [Entry]: each request as the map of cbench_journal:entry(). */
void cb_codec_entries(cb_term_out_t *out, const cb_codec_fixture_t *fx, const cb_request_list_t *list);

/* ---- answers ---- */

/* ok | {error, Name}: Name the engine's error name lowercased without CB_ (eaddrinuse, efixture, stopped). */
void cb_codec_result(cb_term_out_t *out, int err);
void cb_codec_error(cb_term_out_t *out, int err);
/* {error, Atom} */
void cb_codec_error_atom(cb_term_out_t *out, const char *atom);
/* The lowercased error name into buf. */
void cb_codec_error_name(int err, char *buf, size_t cap);

/* The answer to a route or handler add: {ok, Id}, or for a refused field {error, {bad_stub | bad_handler,
 * {Field, Value, Why}}} from cb_error_detail() named by the field table, or {error, Name}. m and res (NULL for
 * a handler route) are what was added, still pointing into the terms: a list item is named by its name. */
void cb_codec_add_result(cb_term_out_t *out, int err, uint64_t id, const cb_match_t *m, const cb_response_t *res);

/* [#{id, name, hits, left}], left being infinity or the uses left. */
void cb_codec_stub_list(cb_term_out_t *out, const cb_stub_list_t *list);

/* {ok, State} for a scenario's state. */
void cb_codec_scenario_state(cb_term_out_t *out, const char *state, size_t len);

/* The counters as a map: cb_stats_t's fields, requests_by_route (names that repeat added up), conns_by_proto
 * and requests_by_proto. */
void cb_codec_stats(cb_term_out_t *out, const cb_codec_fixture_t *fx, const cb_stats_t *st,
                    const cb_route_counts_t *rc);

/* ---- handler replies ---- */

/* Items decoded from [Item]: Item {Ref, reply, Status, Headers, Body} | {Ref, stream, Status, Headers} |
 * {Ref, send, Data} | {Ref, finish} | {Ref, unavailable}, Body, Data, header names and values iodata. */
typedef struct cb_codec_replies_s {
  cb_reply_t *items;
  size_t n;
  cb_header_t *headers;
  cb_reply_t items_here[4]; /* room for a small burst without an allocation */
  cb_header_t headers_here[32];
} cb_codec_replies_t;

/* Decodes a non-empty list of items into r; free with cb_codec_replies_free() whether it decoded or not. */
int cb_codec_replies(cb_term_in_t *in, cb_term_t t, cb_codec_replies_t *r);
void cb_codec_replies_free(cb_codec_replies_t *r);

/* [ok | {error, gone} | {error, not_streaming} | {error, badarg}]: each item's result, in order. */
void cb_codec_reply_results(cb_term_out_t *out, const cb_reply_t *items, size_t n);

#endif
