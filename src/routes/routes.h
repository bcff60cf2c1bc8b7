/* routes/: what a request is matched against. A route (its compiled match, its kind, its handler), body
 * matchers, the immutable route table and its publishing to the workers, the registry of a server's routes and
 * its scenarios. The core reaches the table only through cb__router; route kinds (kinds/) fill a
 * cb__route_kind_t. (docs/architecture.md) */
#ifndef CB_ROUTES_H
#define CB_ROUTES_H

#include "core/core.h"

typedef struct cb__route_s cb__route_t;
typedef struct cb__rtable_s cb__rtable_t;
typedef struct cb__routes_s cb__routes_t;
typedef struct cb__body_match_s cb__body_match_t;
typedef struct cb__scenarios_s cb__scenarios_t;
typedef struct cb__scenario_s cb__scenario_t;

/* ---- route.c: routes ----
 * A route is {name, match, kind, arg}: the match is compiled from the public cb_match_t (one code path for the
 * fixture routes and for stubs); the kind is a table of callbacks (the core knows no kind by name: a new kind
 * is a new file that fills a cb__route_kind_t); arg is the kind's. Routes are immutable and shared by every
 * table that lists them (reference counted); each has a counter slot. */

typedef struct {
  /* Optional: whether the route may answer this request now (a stub whose times are used up may not). Called
   * once the route matched in every other way; a route that says no is passed over. It may note in r what it
   * claimed (a sequence's response: cb__req_t.stub). */
  int (*claim)(const cb__route_t *rt, cb__req_t *r);
  /* Optional: frees arg when the route is freed (on whichever thread lets go of it last). */
  void (*free_arg)(void *arg);
} cb__route_kind_t;

enum { CB__PATH_EXACT, CB__PATH_PREFIX, CB__PATH_PARAMS };

typedef struct {
  char *name; /* lowercased for headers, percent-decoded for query */
  size_t name_len;
  char *value; /* NULL: present */
  size_t value_len;
} cb__matcher_t;

typedef struct {
  uint16_t off, len; /* in the pattern */
  uint8_t param;     /* "{name}": any one non-empty segment */
} cb__seg_t;

struct cb__route_s {
  int refs; /* atomic: the registry's and each table's */
  char *name;
  size_t name_len;
  uint64_t stub_id; /* 0 for fixture routes */
  uint64_t seq;     /* order of addition: newer first among equal priorities */
  int priority;
  uint8_t fixture;
  uint8_t path_kind;  /* CB__PATH_* */
  unsigned methods;   /* CB_METHOD_* as given, 0 = any */
  unsigned mmask;     /* what matches: methods, with HEAD when GET; CB_METHOD_ALL when any */
  char *pattern;      /* as given */
  size_t pattern_len;
  const char *path;   /* EXACT: the path; PREFIX: the prefix; PARAMS: the pattern */
  size_t path_len;
  cb__seg_t *segs;
  int nsegs;
  cb__matcher_t *headers;
  int nheaders;
  cb__matcher_t *query;
  int nquery;
  cb__body_match_t *body; /* NULL: the route does not look at the body (body_match.c) */
  uint32_t slot; /* counter slot: counters 2*slot (answered) and 2*slot+1 (405 on its path) */
  const cb__route_kind_t *kind;
  const cb__handler_t *handler;
  void *arg;
  int iarg; /* a fixture handler's parameter (which file, which stream) */
};

/* Compiles a route from a public match (validated here: UV_EINVAL). name is copied. The route starts with one
 * reference, and no slot (route_table.c gives it one). */
int cb__route_new(const cb_match_t *m, const char *name, size_t name_len, const cb__route_kind_t *kind,
                  const cb__handler_t *handler, void *arg, cb__route_t **out);
void cb__route_ref(cb__route_t *rt);

/* body_match.c: a route's body matcher, compiled from cb_match_t.body (UV_EINVAL with the detail, UV_ENOMEM; *out
 * stays NULL for CB_MATCH_BODY_ANY), matched against the request's held body (r->mbody), freed with the route. */
int cb__body_match_new(const cb_body_match_t *in, cb__body_match_t **out);
int cb__body_match(const cb__body_match_t *m, cb__req_t *r);
void cb__body_match_free(cb__body_match_t *m);
int cb__regex_subset_ok(const char *p, size_t n);
/* The regex matcher's bounds (docs/routes.md, "Body matchers"): the steps one request's regex matchers may take
 * in all, CB__REGEX_STEPS and CB__REGEX_STEPS_PER_BYTE of the body (past them a regex does not match; about 6 ns
 * a step: 0.6 s for a 10 MB body at most), and the instructions of a compiled regex (past them: bad_regex). */
#define CB__REGEX_STEPS 10000000u
#define CB__REGEX_STEPS_PER_BYTE 8u
#define CB__REGEX_PROG 16384
/* Whether p[0..n) has a match of m's regex (a CB_MATCH_BODY_REGEX matcher); *steps: the request's steps so far,
 * added to. */
int cb__regex_run(const cb__body_match_t *m, const char *p, size_t n, uint64_t *steps);
void cb__req_body_json_free(cb__req_t *r);
/* Frees the held body and its JSON (cb__req_release, when r->mbody or r->mjson is set). */
void cb__req_body_free(cb__req_t *r);
/* The handler of a request that waits for its body before the lookup can choose a route: it holds the body (from
 * the echo budget), then cb__rtable_dispatch_body() chooses, and the chosen handler gets on_head, the held body
 * and on_end in turn. */
extern const cb__handler_t cb__h_body_wait;
/* route_table.c: the lookup again, under the table r was dispatched under, with the body known. */
void cb__rtable_dispatch_body(cb__req_t *r);
/* Drops a reference; the last frees the route (its kind's free_arg, its slot through reg). */
void cb__route_unref(cb__routes_t *reg, cb__route_t *rt);
void cb__routes_slot_free(cb__routes_t *reg, uint32_t slot);



/* A parsed request as the matchers see it. */
typedef struct {
  const char *path;
  size_t path_len;
  const char *query; /* after '?', NULL when none */
  size_t query_len;
  unsigned mbit; /* CB_METHOD_* of the method, 0 for another */
} cb__match_in_t;

/* The request as the matchers see it. */
void cb__match_in(const cb__req_t *r, cb__match_in_t *in);

/* Whether rt's path matches (fills r->params on a PARAMS match); whether its headers and query do. */
int cb__route_match_path(const cb__route_t *rt, cb__req_t *r, const cb__match_in_t *in);
int cb__route_match_rest(const cb__route_t *rt, cb__req_t *r, const cb__match_in_t *in);
/* One header (query) matcher of rt, i < rt->nheaders (rt->nquery), against the request (near_miss.c). */
int cb__route_header_ok(const cb__route_t *rt, int i, const cb__req_t *r);
int cb__route_query_ok(const cb__route_t *rt, int i, const cb__match_in_t *in);
/* The routes of a built table in matching order (none for a stand-in). */
cb__route_t *const *cb__rtable_routes(const cb__rtable_t *t, int *n);

/* ---- route_table.c: tables and the registry ---- */

/* The registry of a server (or of a test worker): the fixture routes, the stubs in order of addition, the
 * counter slots and every worker's counter chunks. fixtures makes the fixture routes (kinds/, given by the
 * wiring above): the default table. */
typedef int (*cb__fixtures_fn)(cb__routes_t *reg, cb__route_t ***out, int *n, cb__route_t **not_found);
int cb__routes_new(int nworkers, cb__fixtures_fn fixtures, cb__routes_t **out);
void cb__routes_free(cb__routes_t *reg);
/* The server's scenarios (scenario.c): made and freed with the registry. */
cb__scenarios_t *cb__routes_scenarios(cb__routes_t *reg);

/* The worker's counter chunks (cb__worker_t.counters). */
uint64_t **cb__routes_counters(cb__routes_t *reg, int worker);
/* Sums counter `idx` over the workers (lock-free). */
uint64_t cb__routes_count(cb__routes_t *reg, uint32_t idx);
/* Gives rt a counter slot (zeroed). UV_ENOMEM, CB_ELIMIT. */
int cb__routes_slot(cb__routes_t *reg, cb__route_t *rt);
/* Locks the registry's lists (never held while waiting for a worker). */
void cb__routes_lock(cb__routes_t *reg);
void cb__routes_unlock(cb__routes_t *reg);
/* The stubs in order of addition, under the lock; the fixtures and not_found. */
cb__route_t **cb__routes_stubs(cb__routes_t *reg, int *n);
cb__route_t **cb__routes_fixtures(cb__routes_t *reg, int *n);
cb__route_t *cb__routes_not_found(cb__routes_t *reg);
/* Under the lock: appends a stub (the registry takes over its reference) / removes one by id (the registry's
 * reference is dropped once the lock is released: returned in *gone) / removes every stub. */
int cb__routes_append(cb__routes_t *reg, cb__route_t *rt);
cb__route_t *cb__routes_take(cb__routes_t *reg, uint64_t id);
cb__route_t **cb__routes_take_all(cb__routes_t *reg, int *n); /* the caller frees the array */
/* Puts stubs in matching order, as a table holds them: priority first, then the newest. */
void cb__routes_sort(cb__route_t **routes, int n);
uint64_t cb__routes_next_id(cb__routes_t *reg);

/* Builds a table of the registry's routes now (under its lock). nworkers as the registry's. */
int cb__rtable_build(cb__routes_t *reg, cb__rtable_t **out);
/* The worker lets go of a table it no longer dispatches under (once its requests are done with it). */
void cb__rtable_retire(cb__rtable_t *t, int worker);
/* The request's use of its table ends once the output queued so far has left. */
void cb__rtable_release(cb__req_t *r);
/* Makes the registry's change visible to every worker and waits until all see it: every worker holds a stand-in
 * built from the registry at its first dispatch (route_table.c), so that N changes in a row cost one build.
 * Callers hold srv->api_mu. */
int cb__routes_publish(cb_server_t *srv);
/* The same with the table built now, on the calling thread: after a batch (cb_server_route_add_many), so that the
 * first request does not pay for the build. */
int cb__routes_publish_now(cb_server_t *srv);

/* The router every worker is given (core.h, cb__router_t): dispatch matches r against w's table and sets
 * r->route (not_found when nothing matched), r->allow (405 when non-zero and no route matched) and r->handler;
 * it takes a use of the table for r (r->table, released through the router's release) unless its route is a
 * fixture route (the registry's for the server's life). */
extern const cb__router_t cb__router;


/* ---- scenario.c: scenario states (cb_stub_t.scenario) ---- */
struct cb__scenario_s {
  uint32_t state; /* atomic: the state's number (0: "started"); loaded and swapped by the workers */
  char *name;
  uint64_t *moves; /* the server's count of state changes (cb__scenarios_moves), shared by its scenarios */
};
int cb__scenarios_new(cb__scenarios_t **out);
void cb__scenarios_free(cb__scenarios_t *s);
/* The scenario of this name (made in state "started" when new), or the number of a state name (0 for
 * "started"; made when new). Errors: CB_ELIMIT past CB_MAX_SCENARIOS, UV_ENOMEM. */
int cb__scenario_find(cb__scenarios_t *s, cb_str_t name, cb__scenario_t **out);
int cb__scenario_state_id(cb__scenarios_t *s, cb_str_t state, uint32_t *id);
/* The server's count of scenario state changes (atomic; a claim that moves a state adds one, as do
 * cb_server_scenario_set and cb_server_scenarios_reset): a lookup that found nothing looks again when it moved
 * meanwhile (route_table.c), so that a request is judged against one state, not some stubs against the old one
 * and the rest against the new one. */
uint64_t *cb__scenarios_moves(cb__scenarios_t *s);

#endif
