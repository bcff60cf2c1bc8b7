/* core/: the engine's moving parts, whatever protocol or route kind is above them. One worker (its loop, its
 * command queue, its Date line), one connection (the read and write path over its transport, timers, close),
 * a connection's output queue, a request's life (dispatch, timers, release, 405) and the journal. The server's
 * shared state is here too; its wiring (start, stop) is server.c's.
 *
 * The layers above reach the core by call; the core reaches them only through what they register: a
 * connection's protocol (cb__conn_ops_t, first_ops), a request's response API (cb__proto_t), a route's handler
 * (cb__handler_t), the router (cb__router_t) and per-worker parts (cb__part_t). It may hold a pointer to an
 * upper layer's struct (a request's route and table), never look inside it. (docs/architecture.md) */
#ifndef CB_CORE_H
#define CB_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <uv.h>
#include "base/base.h"
#include "transport/transport.h"

#define CB__READ_BUF_SIZE (64 * 1024)
/* A connection stops reading and its generators pause while more than this is queued for the socket. */
#define CB__OUT_HIGH_WATER (256 * 1024)
#define CB__OUT_LOW_WATER (64 * 1024)
/* Data up to this size is copied into the connection's arena: cheaper than one more iovec. */
#define CB__COPY_MAX 1024
/* How long a lingering close waits for the peer's EOF after an error response. */
#define CB__LINGER_MS 2000
/* A connection with a rest step (HTTP/2) gives back what an idle connection need not hold after this long
 * without an event (conn.c): long enough that a busy connection, even one slowed down by valgrind, keeps it
 * from one request to the next. */
#define CB__REST_MS 1000
/* How long accept(2) backs off after EMFILE or ENFILE. */
#define CB__ACCEPT_BACKOFF_MS 50

typedef struct cb__worker_s cb__worker_t;
typedef struct cb__conn_s cb__conn_t;
typedef struct cb__req_s cb__req_t;
typedef struct cb__handler_s cb__handler_t;
typedef struct cb__cmd_s cb__cmd_t;
typedef struct cb__journal_s cb__journal_t;
typedef struct cb__fixed_s cb__fixed_t;

/* Counters have one writer (the worker's thread) and are read by cb_server_stats() from any thread: relaxed
 * atomic stores and loads keep that defined without a locked instruction on the hot path. */
#define CB__STAT_ADD(w, field, n) \
  __atomic_store_n(&(w)->stats.field, (w)->stats.field + (uint64_t)(n), __ATOMIC_RELAXED)
#define CB__STAT_INC(w, field) CB__STAT_ADD(w, field, 1)

/* ---- the router: how a request reaches the route table (routes/ fills it; server.c gives it to every worker) */
typedef struct {
  /* Matches r under w's table: sets r->route, r->handler (the route's; the 405 handler when r->allow is set; a
   * body wait when a body matcher must see the body first) and r->table (the use of the table r holds). */
  void (*dispatch)(cb__worker_t *w, cb__req_t *r);
  /* r is released: the JSON of its held body, and its use of the table once the output queued so far left. */
  void (*release)(cb__req_t *r);
  /* The name and stub id (0 for a fixture route) of the route r was dispatched to: the journal's. */
  uint64_t (*identify)(const cb__req_t *r, const char **name, size_t *name_len);
  /* The worker's loop has ended: it lets go of its table. */
  void (*retire)(cb__worker_t *w);
} cb__router_t;

/* ---- worker parts: state an upper layer keeps per worker ----
 * Made by its owner on first use (a protocol's caches, the parked requests of deferred routes) in the slot its
 * header numbers (CB__PART_*, each below CB__WORKER_PARTS). The worker closes parts with its handles (stop),
 * frees them after its loop, and trims them when its last connection has closed (the owner may free all then).
 * A part that asked for it (cb__worker_part_due) has its turn_end run once the loop's events are through, with
 * the connections' after-steps: what it gathered during the turn goes out together (the proxy's h2c upstream
 * connections write the streams of many client requests in one write). */
#define CB__WORKER_PARTS 4
typedef struct {
  void (*close)(cb__worker_t *w, void *state); /* optional */
  void (*free)(cb__worker_t *w, void *state);
  int (*trim)(cb__worker_t *w, void *state);   /* optional; returns 1 when it freed the state */
  void (*turn_end)(cb__worker_t *w, void *state); /* optional: run at the end of a turn that asked for it */
} cb__part_ops_t;
typedef struct {
  void *state;
  const cb__part_ops_t *ops;
} cb__part_t;

/* ---- outq.c: a connection's ordered output ---- */

enum { CB__OUT_ARENA, CB__OUT_REF, CB__OUT_FREE, CB__OUT_FILE, CB__OUT_CALL };

typedef void (*cb__release_fn)(void *arg, uint32_t n);

typedef struct {
  uint8_t kind;
  int fd;        /* CB__OUT_FILE; CALL: n */
  union {
    uint64_t off;      /* arena offset (ARENA), file offset (FILE), or bytes already sent of ptr (REF, FREE) */
    cb__release_fn fn; /* CALL */
  };
  const char *ptr; /* REF and FREE; CALL: the argument */
  size_t len;
  size_t held;   /* FREE: echo-budget bytes that ptr holds, given back when it is freed (cb__echo_hold) */
} cb__out_t;

/* The entry array and the arena are taken from the worker's caches when output is queued and given back once
 * everything is written, so an idle connection's queue holds no storage. */
typedef struct {
  cb__caches_t *caches;
  char *block; /* the cached block, NULL when none is held: CB__OUTQ_ENTRIES entries, then CB__OUTQ_ARENA bytes */
  cb__out_t *q;
  uint32_t head, tail, cap;
  char *arena;
  size_t alen, acap;
  size_t bytes; /* queued, not yet written */
  size_t released; /* echo-budget bytes of buffers freed since the owner last looked (see cb__out_t.held) */
  uint64_t written; /* bytes written since the queue was made */
} cb__outq_t;

/* A queue's first entries and arena are one cached block; each moves to the heap and doubles past that. */
#define CB__OUTQ_ENTRIES 16
#define CB__OUTQ_ARENA 4096
#define CB__OUTQ_BLOCK (CB__OUTQ_ENTRIES * sizeof(cb__out_t) + CB__OUTQ_ARENA)

void cb__outq_init(cb__outq_t *q, cb__caches_t *caches);
void cb__outq_free(cb__outq_t *q);
/* When nothing is queued, gives the storage back to the worker's caches (the connection is idle). */
void cb__outq_rest(cb__outq_t *q);
/* Room for n bytes at the end of the arena; write them, then cb__outq_commit(q, n). NULL on ENOMEM. */
char *cb__outq_reserve(cb__outq_t *q, size_t n);
void cb__outq_commit(cb__outq_t *q, size_t n);
int cb__outq_copy(cb__outq_t *q, const void *p, size_t n);
/* References bytes that outlive the write (static payloads); with free_after the queue frees them once sent. */
int cb__outq_ref(cb__outq_t *q, const char *p, size_t n, int free_after);
/* References base[off, off + n). With free_after, base is freed once this entry is written; with n == 0 that is
 * a release ordered after every entry queued before it (earlier references into base stay valid). held: the
 * echo-budget bytes base holds (0 if none), added to q->released when it is freed. */
int cb__outq_ref_range(cb__outq_t *q, const char *base, size_t off, size_t n, int free_after, size_t held);
int cb__outq_file(cb__outq_t *q, int fd, uint64_t off, size_t n);
/* Runs fn(arg, n) once every entry queued before it has been written, or when the queue is freed (the
 * connection closed); at once when nothing is queued. The release of what earlier entries reference. */
void cb__outq_call(cb__outq_t *q, cb__release_fn fn, void *arg, uint32_t n);
/* Writes what the transport takes: its writev for bytes, its sendfile for file ranges (or a read and a write
 * where it has none). Returns the number of bytes written (>= 0) or a negative UV_E* error. */
ssize_t cb__outq_flush(cb__outq_t *q, cb__tport_t *t);

/* ---- conn.c: one connection ---- */

/* HEADER: a head must complete within header_timeout_ms of c->head_start. IDLE: any event moves the
 * deadline (idle_timeout_ms). STALL: only progress the protocol reports (cb__conn_progress) moves it, so a
 * peer that keeps a connection busy with frames but lets no request or response advance is still cut.
 * HELD: a handler's own timer decides (/delay). LINGER: the close after an error answer. */
enum { CB__TIMER_NONE, CB__TIMER_HEADER, CB__TIMER_IDLE, CB__TIMER_LINGER, CB__TIMER_HELD, CB__TIMER_STALL };

/* What a protocol does for a connection. All run on the worker's thread. */
typedef struct {
  /* Consume input. Return 0, or -1 when the connection must close now. */
  int (*read)(cb__conn_t *c, const char *data, size_t len);
  /* The peer closed its sending side. */
  void (*eof)(cb__conn_t *c);
  /* The output queue is below the low-water mark. With produce set, generators that waited for room produce
   * again. Returns whether a generator was waiting (and so may have produced). */
  int (*writable)(cb__conn_t *c, int produce);
  /* Runs after every event, before the flush: deferred work (resuming a paused parser). */
  void (*after)(cb__conn_t *c);
  /* Which timeout applies now: CB__TIMER_HEADER, CB__TIMER_IDLE (re-armed on activity), CB__TIMER_STALL
   * (re-armed on progress) or CB__TIMER_HELD. */
  int (*timer_mode)(const cb__conn_t *c);
  /* The timeout fired in the given mode. */
  void (*timeout)(cb__conn_t *c, int mode);
  /* Graceful stop: finish what is in flight, accept nothing new. */
  void (*stop)(cb__conn_t *c);
  /* The connection is closing: release requests (handlers' on_free) and protocol state. */
  void (*destroy)(cb__conn_t *c);
  /* Optional: the connection has been idle (no event) for CB__REST_MS: give back what an idle connection need
   * not hold (it is made again when the next bytes arrive). */
  void (*rest)(cb__conn_t *c);
  /* Optional: the connection is to end (cb__conn_close_linger): nothing more is produced for the requests it
   * still holds, so they go into the journal now, before the bytes and the FIN that end them can reach the
   * peer (the journal's promise, docs/routes.md). A request recorded here is released later as usual. */
  void (*record)(cb__conn_t *c);
} cb__conn_ops_t;

enum { CB__PROTO_DETECT, CB__PROTO_H1, CB__PROTO_H2 };

struct cb__conn_s {
  uv_timer_t timer;
  cb__worker_t *w;
  cb__conn_t *prev, *next; /* the worker's list */
  cb__conn_t *after_next;  /* the worker's after_soon list */
  cb__tport_t tr;          /* the socket under it (transport/): plain, or a sink for a test connection */
  const cb__conn_ops_t *ops; /* the protocol: detection first (the worker's first_ops), then HTTP/1.1 or HTTP/2 */
  void *proto_state; /* the protocol's own state (http1.c / http2.c) */
  cb__outq_t out;
  uint8_t proto;       /* CB__PROTO_* */
  uint8_t proto_id;    /* cb_proto_id, set by the protocol when it takes the connection (the journal's proto) */
  uint8_t timer_mode;  /* armed mode */
  uint8_t poll_events; /* UV_READABLE | UV_WRITABLE: what the worker's epoll set watches for (0: not in it) */
  uint8_t closing;     /* uv_close has been called */
  uint8_t close_after_flush;
  uint8_t lingering;   /* sending side shut down, draining input */
  uint8_t read_paused; /* by the protocol (input buffer full) */
  uint8_t write_blocked; /* the last flush left bytes queued */
  uint8_t eof;         /* the peer closed its sending side */
  uint8_t abort_after_flush; /* a fault: reset (RST) once what is queued has been written (fault.c) */
  uint8_t reset_on_close;    /* cb__conn_abort: the transport's close sends RST */
  uint8_t rested;        /* the rest step ran since the last event */
  uint8_t rest_flags;    /* what the protocol keeps of itself while its state is given back (HTTP/1.1) */
  char rest_byte;
  uint8_t after_queued;  /* on the worker's after_soon list (cb__conn_after_soon) */
  uint8_t afters;        /* cb__conn_after runs, modulo 256: what was queued since the last has not been offered to
                          * the socket yet (deferred.c's bound on a streamed answer) */
  uint8_t *freed_flag;   /* set to 1 when the connection is freed (test connections watch it) */
  uint64_t head_start;   /* loop time when the current head began (header timeout) */
  uint64_t last_activity; /* loop time of the last event (idle mode) or progress (stall mode) */
  size_t echo_held;      /* request-body bytes held for echo on this connection (cb__echo_hold) */
  size_t detect_len;
  char detect[24];       /* bytes held back while telling HTTP/1.1 from the HTTP/2 preface (proto/detect.c) */
  uint64_t id;           /* server-wide connection number, from 1 (the journal's conn_id) */
  uint16_t peer_port;
  uint8_t peer_family;   /* AF_INET, AF_INET6, or 0 (test connections) */
  uint8_t peer_addr[16];
  /* Releases waiting for the output queued before them (cb__conn_release_after): n calls of fn(arg) once
   * out.written reaches mark. One pending (fn, arg) at a time; another goes into the queue as a CALL entry. */
  cb__release_fn rel_fn;
  void *rel_arg;
  uint32_t rel_n;
  uint64_t rel_mark;
};

/* A connection over transport tr (copied) on an accepted socket. */
int cb__conn_accept(cb__worker_t *w, const cb__tport_t *tr, const struct sockaddr *peer);
/* A connection over transport tr (copied); it starts with the worker's first_ops. */
cb__conn_t *cb__conn_new(cb__worker_t *w, const cb__tport_t *tr);
/* Feeds bytes as if read from the socket, then runs the after-event work (flush, timers). */
void cb__conn_input(cb__conn_t *c, const char *data, size_t len);
void cb__conn_input_eof(cb__conn_t *c);
/* An event of the worker's epoll set for c (EPOLLIN, EPOLLOUT, EPOLLERR, EPOLLHUP): reads, writes or closes
 * (conn.c, "Readiness"). */
void cb__conn_ready(cb__conn_t *c, uint32_t events);
/* One turn of the worker's loop (worker.c): waits for the connections' sockets and libuv's own descriptors (not
 * at all with nowait), runs what is ready, then libuv's phases when something of libuv's is due. 0 once nothing
 * is left to wait for (no active libuv handle and no connection), else 1. */
int cb__worker_turn(cb__worker_t *w, int nowait);
/* A prepare handle was started on w's loop (kinds/deferred.c): libuv's phases run before the worker's next wait,
 * as they would in uv_run's next iteration. */
void cb__worker_want_uv_turn(cb__worker_t *w);
/* Part `part` (a CB__PART_*, its ops with turn_end) asks for its turn_end at the end of this turn. */
void cb__worker_part_due(cb__worker_t *w, int part);
/* Runs after any event that may have produced output (handler timers): deferred work, flush, timers. */
void cb__conn_after(cb__conn_t *c);
/* cb__conn_after, once, when the worker has run the commands it was woken for or at the end of the loop's
 * iteration: for work that touches one connection many times in one event (the replies to a batch of HTTP/2
 * streams), so that its protocol serializes and writes them together. */
void cb__conn_after_soon(cb__conn_t *c);
/* The rest step now, as after CB__REST_MS without an event, then the after-event step (tests and fuzz targets:
 * testing.c). */
void cb__conn_rest_now(cb__conn_t *c);
/* Runs the after-steps cb__conn_after_soon asked for (the worker's command drain and its check handle). */
void cb__worker_run_afters(cb__worker_t *w);
/* Closes now, dropping what is queued. The memory is freed later, from the handles' close callbacks. */
void cb__conn_close(cb__conn_t *c);
/* Closes after what is queued is written: shuts down the sending side, then drains the peer's input for at
 * most CB__LINGER_MS, so the peer reads our last response instead of a reset. The requests the connection
 * still holds are journaled at once (c->ops->record), before anything queued leaves. */
void cb__conn_close_linger(cb__conn_t *c);
/* Closes now with a reset: the peer gets RST instead of FIN (faults, the protocols' abort). */
void cb__conn_abort(cb__conn_t *c);
/* Graceful stop of one connection (the worker is stopping): the protocol finishes what is in flight. */
void cb__conn_stop(cb__conn_t *c);
/* A new request head begins: the header timeout counts from now (a protocol that is already in header mode,
 * with pipelined heads or HTTP/2 header blocks, would otherwise keep the first head's deadline). */
void cb__conn_head_begin(cb__conn_t *c);
/* A request or response advanced (stall mode's deadline counts from the last call). */
void cb__conn_progress(cb__conn_t *c);
/* Calls fn(arg, 1) once everything queued for the socket so far has been written (or the connection is gone):
 * a response's references into a route table end there. A counter and a mark, not a queue entry per call. */
void cb__conn_release_after(cb__conn_t *c, cb__release_fn fn, void *arg);

/* Request-body bytes a handler keeps for its answer (the /echo body) are bounded per connection and per server:
 * CB__ECHO_CONN_BODIES and CB__ECHO_SERVER_BODIES times max_body_bytes. cb__echo_hold() takes n bytes from
 * both budgets and returns 0, or UV_ENOBUFS (nothing taken) when either would go over; cb__echo_release()
 * gives them back. The server-wide count is one atomic add per body buffer, never per request. */
#define CB__ECHO_CONN_BODIES 2
#define CB__ECHO_SERVER_BODIES 32
int cb__echo_hold(cb__conn_t *c, size_t n);
void cb__echo_release(cb__conn_t *c, size_t n);

/* ---- cmdq.c: commands from other threads ----
 * A command is posted to a worker's queue and runs on the worker's thread; a burst of commands costs one
 * wake-up (the queue is swapped out whole and run in order). */

typedef void (*cb__cmd_fn)(cb__worker_t *w, cb__cmd_t *cmd);

struct cb__cmd_s {
  cb__cmd_t *next;
  cb__cmd_fn fn; /* owns cmd from here on (frees it, or signals whoever waits for it) */
};

/* Appends cmd to w's queue and wakes the worker. */
void cb__worker_post(cb__worker_t *w, cb__cmd_t *cmd);

/* A call that runs on every worker and is waited for. fn runs on each worker's thread with that worker's
 * cb__call_t and must end with cb__call_done() (then or later, from that worker's thread). */
typedef struct cb__call_s cb__call_t;
typedef void (*cb__call_fn)(cb__worker_t *w, cb__call_t *call);
typedef struct cb__wait_s cb__wait_t;
struct cb__call_s {
  cb__cmd_t cmd;
  cb__call_fn fn;
  cb__wait_t *wait;
  void *arg;  /* the caller's, shared by every worker */
  void *out;  /* the worker's result */
  int err;
};
void cb__call_done(cb__call_t *call);
/* Runs fn on every worker of srv and waits for all of them. calls: one per worker (srv->nworkers), filled
 * here; each worker's result is left in calls[i].out / .err. Returns UV_EBUSY on a worker thread. */
int cb__call_all(cb_server_t *srv, cb__call_fn fn, void *arg, cb__call_t *calls);
/* Whether the calling thread is one of the engine's workers (of any server); workers mark themselves. */
int cb__on_worker_thread(void);
void cb__worker_mark_thread(void);

/* ---- worker.c: one thread, one loop, its listeners ---- */

/* The most listeners a worker polls: the cleartext port and the TLS one (cfg.tls_port). */
#define CB__LISTENERS 2

/* One listening socket of a worker and the transport of what it accepts. */
typedef struct {
  uv_poll_t poll;      /* first member: the accept callback casts back */
  cb__worker_t *w;
  cb__tls_ctx_t *tls;  /* accepted connections speak TLS with a session of it; NULL: plain TCP. Kept across down
                          and up */
  int fd;              /* the socket, -1 while down */
  uint8_t open;        /* the poll handle is open (not after cb_server_down()) */
  uint8_t closing;     /* its close callback has not run yet */
} cb__listener_t;

/* The listening sockets a server hands its workers (start, up): fd[k][i] is worker i's socket of listener k, and
 * tls[k] the TLS context of listener k (NULL: cleartext). The workers take the sockets they listen on; the caller
 * closes the others (a worker that failed leaves its own with the caller). */
typedef struct {
  int n;
  cb__tls_ctx_t *tls[CB__LISTENERS];
  int fd[CB__LISTENERS][CB_MAX_THREADS];
} cb__lsocks_t;

struct cb__worker_s {
  uv_loop_t loop;
  uv_async_t async;
  uv_timer_t date_timer;
  uv_timer_t aux_timer; /* accept backoff, then the stop deadline */
  /* The journal's clock (cb__worker_now_us): the wall clock read once per loop iteration, at its first use; the
   * check handle, run at the end of every iteration, marks it stale. */
  uv_check_t clock_check;
  int64_t now_us;
  uint8_t now_valid;
  uv_thread_t thread;
  int index;
  int cpu;      /* -1: not pinned; else the CPU the kernel confirmed (read back after pinning) */
  int pin_err;  /* set by the thread before it posts ready: 0 or CB_ETHREADS */
  uv_sem_t ready; /* posted once by the thread when it is pinned (the start handshake) */
  cb__listener_t lst[CB__LISTENERS]; /* nlst of them: the cleartext one first (a test worker has none) */
  int nlst;
  int lst_closing; /* listener handles whose close callback has not run yet */
  const cb_config_t *cfg; /* the server's copy */
  const cb__fixtures_t *fx;
  cb__tls_budget_t tls_hs; /* TLS handshakes in progress on this worker, bounded by cfg.tls_max_handshakes */
  cb_server_t *srv;
  cb__conn_t *conns; /* every open connection */
  cb__conn_t *after_soon; /* connections waiting for their after-step (cb__conn_after_soon) */
  uint64_t nconns;
  int stopping;
  uv_mutex_t cmd_mutex;
  cb__cmd_t *cmd_head, *cmd_tail; /* the command queue, under cmd_mutex */
  cb__cmd_t stop_cmd;
  cb__call_t *down_call;          /* a cb_server_down() waiting for the last connection to close */
  char date_line[64]; /* "date: <IMF-fixdate>\r\n" */
  size_t date_len;
  uint32_t date_gen;  /* counts the refreshes of date_line (memos of what holds it compare it) */
  cb_stats_t stats;
  uint64_t pace_wakes;  /* timer wake-ups of paced answers (faults, stub intervals): tests count them */
  uint64_t flushes;     /* connections' output queues written (conn.c flush): tests count them */
  uint64_t *echo_total; /* the server's echo bytes (or echo_own for a test worker), see cb__echo_hold */
  uint64_t echo_own;
  int trim_pending;     /* the last connection closed: return free memory to the system (worker.c) */
  struct cb__rtable_s *table; /* the route table requests are dispatched under (routes/: only looked into there) */
  uint64_t **counters;   /* the worker's counter chunks, indexed by route slot (routes/route_table.c) */
  uint64_t *conn_ids;    /* the server's connection counter (atomic) */
  cb__journal_t *journal; /* NULL when disabled */
  const cb__conn_ops_t *first_ops; /* what a new connection starts with: protocol detection (proto/detect.c) */
  const cb__router_t *router;       /* the route table's side of dispatch (routes/) */
  cb__caches_t caches;    /* base/pool.c */
  cb__part_t parts[CB__WORKER_PARTS]; /* upper layers' per-worker state (CB__PART_*) */
  /* The connections' sockets are watched in an epoll set of the worker's own, which also holds libuv's own
   * epoll descriptor (worker.c, cb__worker_turn): a uv_poll_t per connection cost four more system calls per
   * connection (libuv probes each descriptor with an ADD and a DEL, sets it non-blocking again, and deletes it
   * before its first ADD) and 160 bytes. */
  int epfd;
  uint8_t uv_turn_wanted; /* cb__worker_want_uv_turn */
  uint8_t parts_due;      /* a bit per part whose turn_end this turn asked for (cb__worker_part_due) */
  char rbuf[CB__READ_BUF_SIZE]; /* one read buffer for every connection of the worker */
};

/* first_ops and router are what the layers above give every worker (server.c: the engine's wiring). */
int cb__worker_init(cb__worker_t *w, cb_server_t *srv, const cb_config_t *cfg, const cb__fixtures_t *fx,
                    int index, int cpu, const cb__conn_ops_t *first_ops, const cb__router_t *router);
/* Before the worker's thread starts: polls its socket of each of ls's listeners (worker w->index's). 0, or the
 * first error with no socket taken (the caller closes them; the worker's loop is stopped as usual). */
int cb__worker_listen(cb__worker_t *w, const cb__lsocks_t *ls);
/* Starts the worker's thread; then cb__worker_wait_ready() waits until it is pinned and returns 0, or
 * CB_ETHREADS when the pin did not happen (the thread runs its loop either way: stop and join it). */
int cb__worker_start(cb__worker_t *w);
int cb__worker_wait_ready(cb__worker_t *w);
/* Destroys the mutex and semaphore of a worker whose thread never ran (cb__worker_join does it otherwise). */
void cb__worker_destroy_sync(cb__worker_t *w);
void cb__worker_post_stop(cb__worker_t *w);
void cb__worker_join(cb__worker_t *w);
/* Runs the commands posted to w (the async callback; also after the loop ends). */
void cb__worker_run_commands(cb__worker_t *w);
/* cb_server_down / up on the worker's thread: close the listeners and every connection (done when the last one
 * is freed), or start listening again on the sockets of call->arg (a cb__lsocks_t; on error none is taken). */
void cb__worker_down(cb__worker_t *w, cb__call_t *call);
void cb__worker_up(cb__worker_t *w, cb__call_t *call);
/* A test worker: loop and date cache only, driven by the caller's thread. */
int cb__worker_init_test(cb__worker_t *w, const cb_config_t *cfg, const cb__fixtures_t *fx,
                         const cb__conn_ops_t *first_ops, const cb__router_t *router);
int cb__worker_close_test(cb__worker_t *w);
/* Called by conn.c when a connection is freed, so a stopping worker knows when it is done. */
void cb__worker_conn_gone(cb__worker_t *w);
void cb__date_refresh(cb__worker_t *w);

/* ---- the request and the response API (protocol-neutral) ---- */

#define CB__STREAMED (-1) /* body of unknown length: chunked over HTTP/1.1 */
#define CB__NO_BODY (-2)  /* 204 and 304: neither a length nor a body */

enum {
  CB__DATA_STATIC = 0, /* outlives the response (the process's payloads, a route table's bytes): referenced */
  CB__DATA_COPY = 1,   /* valid only during the call: copied */
  CB__DATA_FREE = 2,   /* malloc'd: the protocol owns it and frees it once sent or dropped */
  CB__DATA_HELD = 3,   /* as FREE, and its n bytes were taken with cb__echo_hold(): given back when freed */
  CB__DATA_OWNERSHIP = 3, /* the mask of the four kinds above */
  CB__DATA_PIECE_END = 4 /* flag: no DATA frame carries bytes of this piece and of the next one (h2c) */
};

/* A whole response whose body is known in full and outlives it (a fixture's, a stub's): cb__res_fixed(). */
struct cb__fixed_s {
  int status;
  const char *ctype; /* a static string, or NULL */
  const cb__hdr_t *extra;
  int nextra;
  const char *body;
  size_t len;
  int flags; /* how data() takes the body: CB__DATA_STATIC, with CB__DATA_PIECE_END or not */
  /* Non-zero: every response made from this description is the same but for the Date line and the connection
   * header, for as long as it lives, so that a protocol may keep what it made of it under its address and this
   * id: 1 for a static description, a stub's id for a stub's (ids are never reused: a description made where a
   * freed one was is never taken for it). 0: a description made on the spot, on the stack. */
  uint64_t memo_id;
};

enum { CB__CUT_STREAM = 1, CB__CUT_RESET, CB__CUT_CLOSE }; /* cb__proto_faults_t.cut */

/* The faults a protocol can carry (kinds/fault.c, docs/faults.md): a NULL entry means it cannot carry that
 * fault, and a request that asks for it is answered 501. */
typedef struct {
  /* Bytes written as they are, outside the protocol's framing (raw, malformed_chunk, missing_last_chunk,
   * slow_head, HTTP/1.1's trailers): HTTP/1.1. A protocol without it frames every body itself, so a body
   * shorter than declared ends the stream instead of the connection. */
  void (*raw)(cb__req_t *r, const char *p, size_t n);
  /* RST_STREAM(code) on r's stream. */
  void (*rst_stream)(cb__req_t *r, uint32_t code);
  /* Ends r's answer once its head and the body queued so far have been sent, however long flow control holds
   * them: how is CB__CUT_STREAM (RST_STREAM(code) on r's stream), CB__CUT_RESET (a reset of the connection) or
   * CB__CUT_CLOSE (cb__conn_close_linger: the transport's end, a TLS fault's). Called in the step that queued
   * the head, before it is sent. NULL: the protocol puts what it is given into the connection's output at once
   * (HTTP/1.1), so the connection's abort_after_flush or close_after_flush is the cut. */
  void (*cut)(cb__req_t *r, uint32_t code, int how);
  /* GOAWAY(code, last), then the connection ends: at once (cut), or once the streams up to last are done. */
  void (*goaway)(cb__req_t *r, uint32_t code, int32_t last, int graceful);
  /* SETTINGS with the values >= 0 (max frame size, initial window). Returns 0, or UV_ENOBUFS when the peer
   * has left too many unacknowledged: the connection then ends (GOAWAY) and r is not to be answered. */
  int (*settings)(cb__req_t *r, int64_t max_frame, int64_t window);
  /* A frame that breaks the protocol (DATA on stream 0) right after what the session sends next. */
  void (*violation)(cb__req_t *r);
  /* r's body ends with the trailer block `x-trailer: cbench` (NULL: the fault writes it with raw). */
  void (*trailers)(cb__req_t *r);
  /* Whether r is an HTTP/1.0 request, to which no answer may be chunked (RFC 9112 7), so none carries trailers.
   * NULL: the protocol has no HTTP/1.0 (HTTP/2). */
  int (*http10)(const cb__req_t *r);
} cb__proto_faults_t;

/* The response API, implemented once per protocol. Handlers call it through cb__res_*(). */
typedef struct {
  /* Status line and headers. content_length >= 0, or CB__STREAMED for a body of unknown size. ctype is a
   * static string (HTTP/1.1 keys its memo of recent heads on its address). */
  void (*head)(cb__req_t *r, int status, const char *ctype, const cb__hdr_t *extra, int nextra,
               int64_t content_length);
  /* A piece of body. Returns 1 when the connection's output is above the high-water mark: a generator should
   * stop producing until its on_writable runs; 0 otherwise. */
  int (*data)(cb__req_t *r, const char *p, size_t n, int flags);
  /* A file range, sent without copying through user space: map is the file mapped read-only (or NULL), used
   * where a reference is cheaper than sendfile. Ends a piece like CB__DATA_PIECE_END. */
  int (*file)(cb__req_t *r, int fd, const char *map, uint64_t off, size_t n);
  /* The response is complete. */
  void (*end)(cb__req_t *r);
  /* Optional: the response is complete, with trailer fields after its body (RFC 9110 6.5): HTTP/1.1 writes them
   * after a chunked body's last chunk, h2 as a HEADERS block that ends the stream. A response that cannot carry
   * them (a content-length, HTTP/1.0, HEAD) drops them and ends as end() does; so does a NULL entry (the caller
   * then calls end()). Valid during the call only; names are lowercased where the protocol needs it. */
  void (*end_trailers)(cb__req_t *r, const cb__hdr_t *t, int n);
  /* Optional: the whole response f in one step, with the same bytes as head (content length f->len), data and
   * end. NULL: cb__res_fixed() makes those three calls. */
  void (*fixed)(cb__req_t *r, const cb__fixed_t *f);
  /* Ends an answer that cannot end well, the connection going on where the protocol allows: HTTP/2 resets the
   * stream (RST_STREAM code), HTTP/1.1 closes the connection. */
  void (*abort)(cb__req_t *r, uint32_t code);
  const cb__proto_faults_t *faults;
  /* Bytes of r's answer the server holds, not written yet: what a peer that does not read makes it keep
   * (HTTP/1.1: the connection's output queue; HTTP/2: the stream's pieces waiting for the flow-control window
   * or the socket). A producer that is not paced by the peer (a deferred stream) bounds itself with it. */
  size_t (*queued)(const cb__req_t *r);
} cb__proto_t;

/* A fixture handler. Callbacks run on the worker's thread; each is optional except on_end. */
struct cb__handler_s {
  void (*on_head)(cb__req_t *r);                             /* request head complete, route matched */
  void (*on_body)(cb__req_t *r, const char *p, size_t n);   /* a piece of request body (NULL: dropped) */
  void (*on_end)(cb__req_t *r);                              /* request complete */
  void (*on_writable)(cb__req_t *r);                         /* room to produce more (generators) */
  void (*on_free)(cb__req_t *r);                             /* release the handler's state (once) */
};

typedef void (*cb__timer_fn)(cb__req_t *r);

enum { CB__RES_NONE, CB__RES_HEAD, CB__RES_ENDED };

/* Bytes a route kind keeps in a request while it answers (its own struct, cast from r->kind: CB__KIND_STATE). */
#define CB__KIND_STATE_SIZE 40

struct cb__req_s {
  cb__conn_t *conn;
  const cb__proto_t *proto;
  void *stream; /* the protocol's per-request state (HTTP/2 stream) */
  uint32_t stream_id; /* the HTTP/2 stream's id, 0 over HTTP/1.1 (the journal's, a deferred request's) */
  const struct cb__route_s *route; /* the route it was dispatched to (routes/: only looked into there and above) */
  uint64_t head_key; /* non-zero: the head's extra headers are the same for every head made with this key (a
                        hash of a stub's fixed headers), so a protocol may reuse the head it made for it */
  const cb__handler_t *handler;
  struct cb__rtable_s *table; /* the table it was dispatched under, whose use it holds until release; NULL for
                                 a fixture route (routes/route_table.c) */
  /* Request head: valid until the request is released */
  const char *path;  /* the target: path, then '?' and the query when target_len > path_len */
  size_t path_len;
  size_t target_len;
  const char *method_str;
  size_t method_len;
  const char *authority; /* HTTP/2 :authority, NULL when none */
  size_t authority_len;
  const cb__hdr_t *headers;
  int nheaders;
  uint16_t params[CB_MAX_PATH_PARAMS][2]; /* path parameters of a {name} pattern: offset and length in path */
  uint16_t method;   /* CB_METHOD_* bit, 0 for another method */
  uint16_t allow;    /* 405: the methods the path allows */
  int status;        /* the status of the response head, 0 before */
  uint64_t bytes_out; /* body bytes handed to the protocol */
  uint64_t jseq;     /* journal sequence number, 0 when not journaled */
  int64_t time_us;   /* arrival (journaled requests) */
  char *jbody;       /* the journaled start of the body */
  size_t jbody_len, jbody_cap;
  uint8_t res_state; /* CB__RES_* */
  uint8_t req_done;  /* the whole request (body included) was received */
  uint8_t blocked;   /* a generator was told to wait for on_writable */
  uint8_t fault;     /* the CB__FAULT_* applied to this request (journal), 0 for none */
  uint32_t delay_ms; /* the delay a stub waited before answering (journal), 0 for none */
  /* A proxied request (kinds/proxy.c): its upstream's `to` (the stub's bytes, alive until the request is
   * released), the status of the upstream's answer (0: none) and why it failed (CB__UPERR_*): the journal's. */
  const char *up_to;
  uint16_t up_to_len;
  uint16_t up_status;
  uint8_t up_error;
  const void *stub;  /* stub.c: the response answering (a sequence's item, claimed at dispatch) */
  uint8_t body_wait;  /* the lookup met a route with a body matcher: choose once the body is complete */
  uint8_t body_known; /* the lookup runs with the body (cb__rtable_dispatch_body): body matchers are tried */
  uint8_t mjson_state; /* mjson: 0 not parsed yet, 1 parsed, 2 the body is not JSON */
  uint64_t mre_steps;  /* steps the regex matchers took on this body so far (body_match.c bounds them) */
  uint8_t mbody_refused; /* the held body went over the echo budget: answered 503 */
  char *mbody;        /* the body held for body matchers (cb__h_body_wait), mbody_cap bytes from the echo budget
                         and a NUL after mbody_len (for sanitizers' regexec interceptors) */
  size_t mbody_len, mbody_cap;
  void *mjson;        /* the held body as JSON (a json_t), parsed by the first JSON matcher tried */
  int64_t content_length; /* declared request body length, -1 when unknown */
  uint64_t body_received;
  /* The route kind's state while it answers (fixture handlers, stub, fault, deferred: each its own struct). */
  union {
    uint64_t u64[CB__KIND_STATE_SIZE / 8];
    void *ptr;
  } kind;
  uv_timer_t *timer; /* cb__req_timer(); freed in its close callback */
  cb__timer_fn timer_fn;
};

static inline void cb__res_head(cb__req_t *r, int status, const char *ctype, const cb__hdr_t *extra,
                                int nextra, int64_t content_length) {
  r->status = status;
  r->proto->head(r, status, ctype, extra, nextra, content_length);
}
static inline int cb__res_data(cb__req_t *r, const char *p, size_t n, int flags) {
  if (r->method != CB_METHOD_HEAD) r->bytes_out += n;
  return r->proto->data(r, p, n, flags);
}
static inline int cb__res_file(cb__req_t *r, int fd, const char *map, uint64_t off, size_t n) {
  if (r->method != CB_METHOD_HEAD) r->bytes_out += n;
  return r->proto->file(r, fd, map, off, n);
}
static inline void cb__res_end(cb__req_t *r) { r->proto->end(r); }
/* Head, body and end of a whole response, in one step where the protocol has one (cb__proto_t.fixed); in three,
 * cb__res_fixed_steps (req.c), where it has none. */
void cb__res_fixed_steps(cb__req_t *r, const cb__fixed_t *f);
static inline void cb__res_fixed(cb__req_t *r, const cb__fixed_t *f) {
  r->status = f->status;
  if (r->method != CB_METHOD_HEAD) r->bytes_out += f->len;
  if (r->proto->fixed != NULL)
    r->proto->fixed(r, f);
  else
    cb__res_fixed_steps(r, f);
}

/* Calls fn(r) after ms milliseconds on the worker's loop. One timer per request. Returns 0 or UV_ENOMEM. */
int cb__req_timer(cb__req_t *r, unsigned ms, cb__timer_fn fn);
/* Releases the request's handler state and timer, records it in the journal, and lets go of its route table
 * once the output queued so far has left. Called by the protocol once the response is complete or the
 * request is dropped; calling it again does nothing. */
void cb__req_release(cb__req_t *r);
/* Counts the request, matches it through the worker's router (which sets r->route and r->handler: 404, 405 and
 * a body wait have handlers too), journals its arrival and runs on_head. */
void cb__req_dispatch(cb__req_t *r);
/* The 405 answer, with its allow header from r->allow. */
extern const cb__handler_t cb__h_method_not_allowed;

/* ---- journal.c ---- */
/* A worker's journal: seq and floor are the server's sequence counter and clear mark (atomics). */
int cb__journal_new(const cb_config_t *cfg, uint64_t *seq, uint64_t *floor, cb__journal_t **out);
void cb__journal_free(cb__journal_t *j);
/* The request arrived (dispatch): its sequence number and time. */
void cb__journal_arrive(cb__worker_t *w, cb__req_t *r);
/* A piece of its body arrived. */
void cb__journal_body(cb__req_t *r, const char *p, size_t n);
/* It is done: record it (and tell the listener). */
void cb__journal_record(cb__worker_t *w, cb__req_t *r);

/* ---- the server's shared state (its wiring is server.c's) ---- */
struct cb_server_s {
  cb_config_t cfg;
  uint64_t echo_total; /* request-body bytes held for echo by every worker (atomic) */
  char host[64];
  int cpus[CB_MAX_THREADS];
  int port;
  int nworkers;
  cb__fixtures_t fx;
  cb__worker_t **workers;
  struct cb__routes_s *routes; /* the route registry (routes/) */
  uv_mutex_t api_mu;  /* serialises the calls that change or read through the workers */
  int api_mu_ok;
  int down;           /* cb_server_down() is in force (under api_mu) */
  uint64_t conn_ids;  /* connections accepted, server-wide (atomic) */
  uint64_t jseq;      /* journal sequence numbers given (atomic) */
  uint64_t jfloor;    /* entries with seq <= this were cleared (atomic) */
  struct cb__admin_s *admin; /* the admin API (cfg.admin), or NULL: src/admin.c */
  cb__tls_ctx_t *tls;        /* cfg.tls: the context of every connection's session (src/tls_server.c) */
  int tls_port;              /* the TLS listener's bound port (cfg.tls_port), or 0: none of its own */
  int ktls;                  /* TLS sessions ask for kernel TLS (the kernel offers it: cb__ktls_probe) */
  char ktls_why[160];        /* why not, when not */
  cb__certs_t *certs;        /* the certificates made at start for TLS (base/certs.c), or NULL */
  int tls_user_cert;         /* the default identity is the user's (cfg.tls_cert_file), not signed by certs' CA */
  char admin_host[64];
  struct cb__recorder_s *recorder; /* the proxied exchanges recorded as stubs (kinds/record.c): made at start */
};

#endif
