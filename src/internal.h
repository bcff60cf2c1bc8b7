/* Types and functions shared between the engine's files. Nothing here is public API.
 *
 * The pieces and who owns what:
 *   cb_server_t    server.c   config, worker threads, start/stop handshake, stats sum
 *   cb__worker_t   worker.c   one thread, one loop, one SO_REUSEPORT listener, a command queue, the Date cache
 *   cb__conn_t     conn.c     one socket: read, timers, close; hands bytes to the protocol in c->ops
 *   cb__outq_t     outq.c     a connection's output: copied bytes, referenced payloads and file ranges, in order
 *   http1.c / http2.c         protocols; each fills a cb__conn_ops_t (connection side) and a cb__proto_t (the
 *                             response API that handlers call)
 *   cmdq.c                    a worker's command queue, and calls that wait for every worker
 *   route.c                   one route: its compiled match, its kind, its refcount; dispatch of a request
 *   route_table.c             the immutable route table (sorted, indexed), its lifetime, the route registry
 *                             (stubs in order, counter slots) shared by a server's tables
 *   handlers.c                the fixture handlers and the fixture routes (the default table)
 *   stub.c                    the stub route kind and the public cb_server_route_* API
 *   journal.c                 the request journal: per-worker rings, reads through the queues
 *   fixture.c                 the fixture files and static payloads, made once and shared read-only
 *   pool.c                    per-worker caches of the blocks a connection holds only while it is busy
 */
#ifndef CB_INTERNAL_H
#define CB_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>
#include <uv.h>
#include "cbench.h"

#define CB__READ_BUF_SIZE (64 * 1024)
/* A connection stops reading and its generators pause while more than this is queued for the socket. */
#define CB__OUT_HIGH_WATER (256 * 1024)
#define CB__OUT_LOW_WATER (64 * 1024)
/* Data up to this size is copied into the connection's arena: cheaper than one more iovec. */
#define CB__COPY_MAX 1024
/* HTTP/1.1 sends files up to this size from their mapping with writev, bigger ones with sendfile. */
#define CB__FILE_INLINE_MAX (16 * 1024)
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
typedef struct cb__scenarios_s cb__scenarios_t;
typedef struct cb__scenario_s cb__scenario_t;
typedef struct cb__route_s cb__route_t;
typedef struct cb__handler_s cb__handler_t;
typedef struct cb__rtable_s cb__rtable_t;
typedef struct cb__routes_s cb__routes_t;
typedef struct cb__cmd_s cb__cmd_t;
typedef struct cb__journal_s cb__journal_t;
typedef struct cb__fixed_s cb__fixed_t;
typedef struct cb__body_match_s cb__body_match_t;

/* Counters have one writer (the worker's thread) and are read by cb_server_stats() from any thread: relaxed
 * atomic stores and loads keep that defined without a locked instruction on the hot path. */
#define CB__STAT_ADD(w, field, n) \
  __atomic_store_n(&(w)->stats.field, (w)->stats.field + (uint64_t)(n), __ATOMIC_RELAXED)
#define CB__STAT_INC(w, field) CB__STAT_ADD(w, field, 1)

/* ---- fixture.c: files and static payloads ---- */

enum { CB__FILE_TINY, CB__FILE_SMALL, CB__FILE_BIG, CB__FILE_COUNT };

typedef struct {
  int fd[CB__FILE_COUNT];
  uint64_t size[CB__FILE_COUNT];
  /* The same bytes mapped read-only: HTTP/2 sends a file as many DATA frames, and a frame header plus a
   * reference into the mapping batches into one writev where sendfile would cost a call per frame. */
  const char *map[CB__FILE_COUNT];
  char dir[512]; /* empty: the files are in memory (memfd) */
} cb__fixtures_t;

int cb__fixtures_open(cb__fixtures_t *fx, const char *dir);
void cb__fixtures_close(cb__fixtures_t *fx);

typedef struct {
  const char *ptr;
  size_t len;
} cb__slice_t;

/* Payloads built once per process and never freed; safe to reference from any thread. */
typedef struct {
  cb__slice_t line;      /* LINE: 64 bytes */
  cb__slice_t bigline;   /* BIGLINE: 16384 bytes */
  cb__slice_t sse_line;  /* one SSE event carrying LINE */
  cb__slice_t sse_big;   /* one SSE event carrying BIGLINE */
} cb__payloads_t;

const cb__payloads_t *cb__payloads(void);

/* Generated content (byte i is i % 251) as one read-only buffer of CB__GEN_SPAN + 251 bytes: any run of up to
 * CB__GEN_SPAN bytes starting at content offset `off` is gen + off % 251. Made on first use, never freed. */
#define CB__GEN_SPAN (1u << 20)
/* GET /large: the first CB__LARGE_LEN bytes of the generated content. */
#define CB__LARGE_LEN 65536
const char *cb__generated(void);

/* ---- http_status.c ---- */

/* The reason phrase of docs/wire.md for a status code ("Unknown" when it has none). */
const char *cb__reason(int status);

/* ---- pool.c: per-worker block caches ---- */

#define CB__CACHE_MAX 64

typedef struct {
  uint32_t n;
  size_t size;
  void *free[CB__CACHE_MAX];
} cb__cache_t;

/* A worker's caches: output-queue storage (entries and arena in one block), 4 KiB blocks (held HTTP/1.1
 * input), HTTP/1.1 request states. */
typedef struct {
  cb__cache_t outq, b4k, h1;
  struct cb__h2_small_s *h2_small; /* nghttp2's small blocks (h2_mem.c), made with the first session */
} cb__caches_t;

/* Frees the worker's nghttp2 small-block cache and the blocks it keeps (h2_mem.c). */
void cb__h2_small_free(struct cb__h2_small_s *small);

#define CB__BLOCK_4K 4096

void cb__cache_init(cb__cache_t *k, size_t size);
/* A block of k->size bytes (not zeroed), or NULL. */
void *cb__cache_get(cb__cache_t *k);
/* Gives a block of k->size bytes back (NULL is ignored). */
void cb__cache_put(cb__cache_t *k, void *p);
void cb__cache_drain(cb__cache_t *k);
void cb__caches_init(cb__caches_t *cs);
void cb__caches_drain(cb__caches_t *cs);

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
  uint8_t stalled; /* test connections only (testing.h): the sink takes nothing, like a peer that does not read */
  char *arena;
  size_t alen, acap;
  size_t bytes; /* queued, not yet written */
  size_t released; /* echo-budget bytes of buffers freed since the owner last looked (see cb__out_t.held) */
  uint64_t written; /* bytes written since the queue was made */
} cb__outq_t;

typedef void (*cb__sink_fn_t)(void *arg, const char *data, size_t len);

/* read(2) and write(2) on a connection's socket, as system calls without glibc's wrappers: those are
 * cancellation points, which in a threaded process cost about 25 instructions each way per call to arm and
 * disarm; the engine's threads are never cancelled. Same return value and errno. */
static inline ssize_t cb__sys_read(int fd, void *buf, size_t n) { return syscall(SYS_read, fd, buf, n); }
static inline ssize_t cb__sys_write(int fd, const void *buf, size_t n) { return syscall(SYS_write, fd, buf, n); }

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
/* Writes what the socket takes: writev for bytes, sendfile for file ranges. Returns the number of bytes
 * written (>= 0) or a negative UV_E* error. With fd < 0 everything goes to sink (tests). */
ssize_t cb__outq_flush(cb__outq_t *q, int fd, cb__sink_fn_t sink, void *arg);

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
  uv_poll_t poll; /* first member: callbacks cast back */
  uv_timer_t timer;
  cb__worker_t *w;
  cb__conn_t *prev, *next; /* the worker's list */
  int fd;                  /* -1 for a test connection: output goes to sink */
  cb__sink_fn_t sink;
  void *sink_arg;
  const cb__conn_ops_t *ops;
  void *proto_state; /* the protocol's own state (http1.c / http2.c) */
  cb__outq_t out;
  uint8_t proto;       /* CB__PROTO_* */
  uint8_t timer_mode;  /* armed mode */
  uint8_t poll_events; /* events the poll handle is started with */
  uint8_t closing;     /* uv_close has been called */
  uint8_t close_after_flush;
  uint8_t lingering;   /* sending side shut down, draining input */
  uint8_t read_paused; /* by the protocol (input buffer full) */
  uint8_t write_blocked; /* the last flush left bytes queued */
  uint8_t eof;         /* the peer closed its sending side */
  uint8_t pending_close; /* handles to wait for before freeing */
  uint8_t abort_after_flush; /* a fault: reset (RST) once what is queued has been written (fault.c) */
  uint8_t rested;        /* the rest step ran since the last event */
  uint8_t rest_flags;    /* what the protocol keeps of itself while its state is given back (HTTP/1.1) */
  char rest_byte;
  uint8_t *freed_flag;   /* set to 1 when the connection is freed (test connections watch it) */
  uint64_t head_start;   /* loop time when the current head began (header timeout) */
  uint64_t last_activity; /* loop time of the last event (idle mode) or progress (stall mode) */
  size_t echo_held;      /* request-body bytes held for echo on this connection (cb__echo_hold) */
  size_t detect_len;
  char detect[24];       /* bytes held back while telling HTTP/1.1 from the HTTP/2 preface */
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

int cb__conn_accept(cb__worker_t *w, int fd, const struct sockaddr *peer);
cb__conn_t *cb__conn_new(cb__worker_t *w, int fd, cb__sink_fn_t sink, void *arg);
/* Feeds bytes as if read from the socket, then runs the after-event work (flush, timers). */
void cb__conn_input(cb__conn_t *c, const char *data, size_t len);
void cb__conn_input_eof(cb__conn_t *c);
/* Runs after any event that may have produced output (handler timers): deferred work, flush, timers. */
void cb__conn_after(cb__conn_t *c);
/* Closes now, dropping what is queued. The memory is freed later, from the handles' close callbacks. */
void cb__conn_close(cb__conn_t *c);
/* Closes after what is queued is written: shuts down the sending side, then drains the peer's input for at
 * most CB__LINGER_MS, so the peer reads our last response instead of a reset. The requests the connection
 * still holds are journaled at once (c->ops->record), before anything queued leaves. */
void cb__conn_close_linger(cb__conn_t *c);
/* Closes now with a reset: SO_LINGER 0, so the peer gets RST instead of FIN (fault.c). */
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

/* ---- worker.c ---- */

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

/* http1.c's per-worker memos: response heads it made, kept so that the next head with the same status,
 * content type, length, connection header and head key (a stub's fixed headers), written under the same Date
 * line, is one copy instead of being formatted again; and the last Host value it found valid (most clients
 * send the same one every time). */
#define CB__H1_MEMOS 4
typedef struct {
  const char *ctype; /* the address of the content type string (always a static string), NULL for none */
  uint64_t key;      /* the request's head_key: 0 for a head without extra headers */
  int64_t content_length;
  int16_t status;      /* 0: the slot is empty */
  uint8_t conn_hdr;    /* the connection header it ends with (http1.c) */
  uint8_t chunked;     /* transfer-encoding: chunked (a streamed body to an HTTP/1.1 client) */
  uint8_t len;         /* bytes of the head */
  uint32_t date_gen;   /* the worker's date_gen when it was made */
  char bytes[232];
} cb__h1_memo_t;

/* A whole fixed response (cb__res_fixed) as HTTP/1.1 sends it, kept under its description's address and memo_id
 * for the Date line and connection header it was made with: the next one is a single copy. A slot is 1 KiB:
 * room for a stub's few headers and a body of several hundred bytes. */
#define CB__H1_WHOLES 4
typedef struct {
  uintptr_t src;          /* the description's address, only ever compared (it may be gone); 0: empty */
  uint64_t memo_id;
  uint64_t tag;           /* the worker's date_gen and what makes the connection header (http1.c) */
  uint16_t len;           /* bytes of head and body */
  char bytes[1024 - 26];
} cb__h1_whole_t;

typedef struct {
  cb__h1_memo_t heads[CB__H1_MEMOS];
  cb__h1_whole_t wholes[CB__H1_WHOLES];
  uint8_t host_len;
  char host[63];
} cb__h1_worker_t;

/* a[0..n) == b[0..n). Keys of 4 to 16 bytes (paths, header values) with two overlapping loads, no call. */
static inline int cb__same_bytes(const char *a, const char *b, size_t n) {
  if (n >= 8 && n <= 16) {
    uint64_t x0, x1, y0, y1;
    __builtin_memcpy(&x0, a, 8);
    __builtin_memcpy(&x1, a + n - 8, 8);
    __builtin_memcpy(&y0, b, 8);
    __builtin_memcpy(&y1, b + n - 8, 8);
    return ((x0 ^ y0) | (x1 ^ y1)) == 0;
  }
  if (n >= 4 && n < 8) {
    uint32_t x0, x1, y0, y1;
    __builtin_memcpy(&x0, a, 4);
    __builtin_memcpy(&x1, a + n - 4, 4);
    __builtin_memcpy(&y0, b, 4);
    __builtin_memcpy(&y1, b + n - 4, 4);
    return ((x0 ^ y0) | (x1 ^ y1)) == 0;
  }
  return __builtin_memcmp(a, b, n) == 0;
}

struct cb__worker_s {
  uv_loop_t loop;
  uv_poll_t listener;
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
  int lfd;      /* listening socket, -1 for a test worker */
  const cb_config_t *cfg; /* the server's copy */
  const cb__fixtures_t *fx;
  cb_server_t *srv;
  cb__conn_t *conns; /* every open connection */
  uint64_t nconns;
  int stopping;
  int listening; /* the listener handle is open (not after cb_server_down()) */
  int listener_closing; /* its close callback has not run yet */
  uv_mutex_t cmd_mutex;
  cb__cmd_t *cmd_head, *cmd_tail; /* the command queue, under cmd_mutex */
  cb__cmd_t stop_cmd;
  cb__call_t *down_call;          /* a cb_server_down() waiting for the last connection to close */
  char date_line[64]; /* "date: <IMF-fixdate>\r\n" */
  size_t date_len;
  uint32_t date_gen;  /* counts the refreshes of date_line (memos of what holds it compare it) */
  cb_stats_t stats;
  uint64_t pace_wakes;  /* timer wake-ups of paced answers (faults, stub intervals): tests count them */
  uint64_t *echo_total; /* the server's echo bytes (or echo_own for a test worker), see cb__echo_hold */
  uint64_t echo_own;
  int trim_pending;     /* the last connection closed: return free memory to the system (worker.c) */
  cb__rtable_t *table;   /* the route table requests are dispatched under */
  uint64_t **counters;   /* the worker's counter chunks, indexed by route slot (route_table.c) */
  uint64_t *conn_ids;    /* the server's connection counter (atomic) */
  cb__journal_t *journal; /* NULL when disabled */
  struct cb__defer_w_s *deferred; /* parked requests of deferred routes (deferred.c); NULL until the first */
  cb__caches_t caches;    /* pool.c */
  cb__h1_worker_t h1;     /* http1.c */
  char rbuf[CB__READ_BUF_SIZE]; /* one read buffer for every connection of the worker */
};

int cb__worker_init(cb__worker_t *w, cb_server_t *srv, const cb_config_t *cfg, const cb__fixtures_t *fx,
                    int index, int lfd, int cpu);
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
/* cb_server_down / up on the worker's thread: close the listener and every connection (done when the last one
 * is freed), or start listening on lfd. */
void cb__worker_down(cb__worker_t *w, cb__call_t *call);
void cb__worker_up(cb__worker_t *w, cb__call_t *call);
/* A test worker: loop and date cache only, driven by the caller's thread. */
int cb__worker_init_test(cb__worker_t *w, const cb_config_t *cfg, const cb__fixtures_t *fx);
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

typedef struct {
  const char *name;
  size_t name_len;
  const char *value;
  size_t value_len;
} cb__hdr_t;

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
  /* Optional: the whole response f in one step, with the same bytes as head (content length f->len), data and
   * end. NULL: cb__res_fixed() makes those three calls. */
  void (*fixed)(cb__req_t *r, const cb__fixed_t *f);
} cb__proto_t;

/* A fixture handler. Callbacks run on the worker's thread; each is optional except on_end. */
struct cb__handler_s {
  void (*on_head)(cb__req_t *r);                             /* request head complete, route matched */
  void (*on_body)(cb__req_t *r, const char *p, size_t n);   /* a piece of request body (NULL: dropped) */
  void (*on_end)(cb__req_t *r);                              /* request complete */
  void (*on_writable)(cb__req_t *r);                         /* room to produce more (generators) */
  void (*on_free)(cb__req_t *r);                             /* release the handler's state (once) */
};

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
/* RFC 9110 token / a field value with no control character but HTAB. */
int cb__is_token(const char *p, size_t n);

/* The error detail of a refused stub (names.c; include/cbench.h, cb_error_detail()): cleared at the start of each
 * route add, filled by the check that refuses a field. Both setters return UV_EINVAL, so a check reads
 * `return cb__bad_bytes(CB_FIELD_PATH, -1, CB_WHY_EMPTY, p, n);`. p may be NULL (then n is taken as 0). */
void cb__detail_clear(void);
int cb__bad_bytes(cb_field_id field, long index, cb_why_id why, const char *p, size_t n);
int cb__bad_number(cb_field_id field, long index, cb_why_id why, long long number);
/* Why a header name or value is refused (route.c): 0 when it is good, else a CB_WHY_*. Shared by stub matchers,
 * stub response headers and deferred replies. */
int cb__header_name_why(const char *p, size_t n);
int cb__header_value_why(const char *p, size_t n);
/* A route's name (stub.c): 0, or UV_EINVAL with the detail filled. {NULL, 0} is good (the default name). */
int cb__check_name(cb_str_t name);
int cb__bad_value(const char *p, size_t n);

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

/* ---- near_miss.c: the stubs closest to a request that matched none (the 404 path only) ----
 * Each stub is scored by the parts of its match the request fails: the path counts 4, the method 2, each header
 * or query matcher and the body matcher 1 (a body matcher on a request whose body was not held cannot be judged:
 * it counts 1 and is flagged unchecked). The best CB__NEAR_MAX (lowest score, then matching order) are kept. */
#define CB__NEAR_MAX 3
/* CB__NEAR_SPENT: every part matched, so the stub was passed over: its `times` or its sequence used up, or its
 * scenario in another state. */
enum { CB__NEAR_METHOD = 1, CB__NEAR_PATH = 2, CB__NEAR_BODY = 4, CB__NEAR_BODY_UNCHECKED = 8, CB__NEAR_SPENT = 16 };
typedef struct {
  const cb__route_t *route;
  unsigned score;
  unsigned flags;    /* CB__NEAR_*: the parts that differ */
  uint32_t headers;  /* bit i: header matcher i differs */
  uint32_t query;    /* bit i: query matcher i differs */
} cb__near_t;
/* Scores every stub of t (fixture routes are not stubs) against r; fills out[] best first, returns how many. */
int cb__near_misses(const cb__rtable_t *t, cb__req_t *r, cb__near_t out[CB__NEAR_MAX]);
/* The same over routes[0..nroutes) in matching order (cb_server_near_misses scores a snapshot of the stubs). */
int cb__near_misses_of(cb__route_t *const *routes, int nroutes, cb__req_t *r, cb__near_t out[CB__NEAR_MAX]);
/* The differing parts as text, "method, path, header x-k, query a, body": at most cap bytes with the NUL. */
size_t cb__near_text(const cb__near_t *n, char *buf, size_t cap);
/* The body of a 404 with near misses under r->table, malloc'd (*len bytes), JSON when the request accepts
 * application/json (*json set), or NULL when no stub is near (an empty 404) or memory runs out. */
char *cb__near_body(cb__req_t *r, size_t *len, int *json);

/* The name of one CB_METHOD_* bit ("GET"), NULL for another value. */
const char *cb__method_name(unsigned bit);
/* The allow header value for a method mask, in the fixed order. Returns its length; buf has 80 bytes. */
size_t cb__allow_string(unsigned mask, char *buf);

/* ---- route_table.c: tables and the registry ---- */

/* The registry of a server (or of a test worker): the fixture routes, the stubs in order of addition, the
 * counter slots and every worker's counter chunks. */
int cb__routes_new(int nworkers, cb__routes_t **out);
void cb__routes_free(cb__routes_t *reg);
/* The server's scenarios (scenario.c): made and freed with the registry. */
cb__scenarios_t *cb__routes_scenarios(cb__routes_t *reg);

/* ---- template.c: response templates (cb_response_t.templated) ---- */
enum { CB__TPL_LIT, CB__TPL_METHOD, CB__TPL_BODY, CB__TPL_SEQ, CB__TPL_PATH, CB__TPL_QUERY, CB__TPL_HEADER };
typedef struct {
  uint8_t kind;    /* CB__TPL_* */
  unsigned arg;    /* PATH: the parameter's index in the pattern */
  const char *str; /* LIT: the bytes; QUERY: the name; HEADER: the name, lowercased (in the template's text) */
  size_t len;
} cb__tpl_piece_t;
typedef struct {
  cb__tpl_piece_t *p;
  int n;
  char *text;        /* the template's own copy, which the pieces point into */
  uint8_t uses_body; /* {{body}}: the request's body is kept for it */
} cb__tpl_t;
/* Compiles text[0..n) against the path pattern (whose {params} {{path.NAME}} may name). 0, UV_EINVAL (an unknown
 * or unclosed placeholder, a parameter the pattern does not have) or UV_ENOMEM. */
int cb__tpl_compile(const char *text, size_t n, cb_str_t pattern, cb__tpl_t *t);
void cb__tpl_free(cb__tpl_t *t);
/* Writes the template for r into dst (NULL: only measures) and returns the length. header: a header value, from
 * whose inserted values the bytes a field value cannot hold are left out. */
size_t cb__tpl_render(const cb__tpl_t *t, const cb__req_t *r, const char *body, size_t body_len, uint64_t seq,
                      int header, char *dst);

/* ---- scenario.c: scenario states (cb_stub_t.scenario) ---- */
struct cb__scenario_s {
  uint32_t state; /* atomic: the state's number (0: "started"); loaded and swapped by the workers */
  char *name;
};
int cb__scenarios_new(cb__scenarios_t **out);
void cb__scenarios_free(cb__scenarios_t *s);
/* The scenario of this name (made in state "started" when new), or the number of a state name (0 for
 * "started"; made when new). Errors: CB_ELIMIT past CB_MAX_SCENARIOS, UV_ENOMEM. */
int cb__scenario_find(cb__scenarios_t *s, cb_str_t name, cb__scenario_t **out);
int cb__scenario_state_id(cb__scenarios_t *s, cb_str_t state, uint32_t *id);
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

/* Matches r against w's table: sets r->route (not_found when nothing matched), r->allow (405 when non-zero and
 * no route matched). Takes a use of the table for r (r->table, released by cb__req_release) unless its route is
 * a fixture route (the registry's for the server's life). */
void cb__rtable_dispatch(cb__worker_t *w, cb__req_t *r);


/* ---- fault.c: faults, one more kind of answer (docs/faults.md) ---- */

enum {
  CB__FAULT_NONE,
  CB__FAULT_RESET,
  CB__FAULT_EMPTY,
  CB__FAULT_HANG,
  CB__FAULT_GARBAGE,
  CB__FAULT_TRUNCATED,
  CB__FAULT_OVERLONG,
  CB__FAULT_MALFORMED_CHUNK,
  CB__FAULT_MISSING_LAST_CHUNK,
  CB__FAULT_RAW,
  CB__FAULT_DELAY,
  CB__FAULT_DRIBBLE,
  CB__FAULT_RST_STREAM,
  CB__FAULT_GOAWAY,
  CB__FAULT_SETTINGS,
  CB__FAULT_VIOLATION,
  CB__FAULT_TRAILERS,
  CB__FAULT_SLOW_HEAD,
  CB__FAULT_DRIP,
  CB__FAULT_COUNT
};

/* A parsed fault: what cb__fault_parse() makes of "KIND?name=value&...". Immutable once parsed. */
typedef struct {
  uint8_t kind;     /* CB__FAULT_* */
  uint8_t at;       /* reset, rst_stream: 0 before the head, 1 after the head, 2 after `bytes` body bytes */
  uint8_t close;    /* raw: close after the bytes (1) or keep the connection (0) */
  uint8_t dist;     /* delay: 0 fixed, 1 uniform [ms, max], 2 lognormal (median ms, sigma) */
  uint64_t length;  /* the declared body length */
  uint64_t bytes;   /* body bytes before the fault; garbage bytes */
  uint64_t seed;
  uint32_t ms, max_ms; /* hang, delay, dribble */
  uint32_t pieces;     /* dribble */
  double sigma;        /* delay=lognormal */
  uint32_t code;       /* rst_stream, goaway: the HTTP/2 error code */
  int64_t last;        /* goaway: last-stream-id; -1: the stream before this one (this one is cut) */
  int64_t max_frame, window; /* settings: SETTINGS_MAX_FRAME_SIZE, SETTINGS_INITIAL_WINDOW_SIZE; -1: unchanged */
  uint32_t rate_ppb;   /* the chance it applies, in parts per billion (1e9: always) */
  int raw_status;      /* raw: the status the journal records (from the bytes' status line, 0 if none) */
  const char *data;    /* raw: the bytes (a preset's, or owned) */
  size_t data_len;
  char *owned;
} cb__fault_t;

#define CB__FAULT_ALWAYS 1000000000u

/* The answer a fault departs from: the head it sends (a stub's status and headers; 200 and
 * application/octet-stream for /fault/) and the answer without the fault (a stub's, which delay, settings and
 * a graceful goaway send; NULL: /fault/'s declared one). Lives as long as the route. */
typedef struct {
  int status;
  const cb__hdr_t *hdrs;
  int nhdrs;
  void (*normal)(cb__req_t *r);
  /* The answer's own body, which the pacing faults (dribble, drip, slow_head) pace: body_len bytes, of which
   * body(r, from, to) hands [from, to) to the response API as one piece, returning what cb__res_data returns.
   * body NULL: none (/fault/, a stub without a body): `length` bytes of generated content instead. */
  uint64_t body_len;
  int (*body)(cb__req_t *r, uint64_t from, uint64_t to);
  uint32_t max_delay_ms; /* the bound of a drawn delay: the path's bound of `ms` (60,000 for /fault/) */
} cb__fault_answer_t;

/* Parses a fault spec (KIND, or KIND?name=value&... with the parameters of docs/faults.md, values
 * percent-decoded). Returns 0, or UV_EINVAL for an unknown kind or parameter, or a value out of its bound;
 * UV_ENOMEM. Free with cb__fault_free (the owned raw bytes). */
int cb__fault_parse(const char *spec, size_t n, cb__fault_t *f);
void cb__fault_free(cb__fault_t *f);
/* Whether the fault applies to this request: the n-th draw (n from *counter, atomically) of its rate. */
int cb__fault_fires(const cb__fault_t *f, uint64_t *counter);
/* Answers r with fault f (on_end time), departing from answer. Both must outlive the request. */
void cb__fault_start(cb__req_t *r, const cb__fault_t *f, const cb__fault_answer_t *answer);
/* The name of a fault kind ("reset"), "" for none. */
const char *cb__fault_name(int kind);
/* A stub's fault paces the stub's own body when it has one (body_len > 0): drip sends it a byte per piece, so
 * body_len must be at most 100,000; dribble's pieces at most body_len. Returns 0 or UV_EINVAL. */
int cb__fault_fit(cb__fault_t *f, uint64_t body_len);
/* Whether r's answer is being paced by its fault (dribble, drip, slow_head): its handler's on_writable then
 * calls cb__fault_writable(r). */
int cb__fault_pacing(const cb__req_t *r);
void cb__fault_writable(cb__req_t *r);
/* Delay's n-th seeded draw of f, at most bound_ms (exposed for the tests of the bound). */
uint32_t cb__fault_delay_ms(const cb__fault_t *f, uint64_t n, uint32_t bound_ms);
/* The /fault/{kind} fixture handler. */
extern const cb__handler_t cb__h_fault;

/* http2.c: faults that only HTTP/2 can express. Submit RST_STREAM(code) on r's stream; GOAWAY(code, last)
 * then end the connection (cut: at once after it; graceful: once the streams up to last are done). */
void cb__h2_rst_stream(cb__req_t *r, uint32_t code);
void cb__h2_goaway(cb__conn_t *c, uint32_t code, int32_t last, int graceful);
/* The response body of r ends with the trailer block `x-trailer: cbench` (instead of END_STREAM on DATA). */
void cb__h2_trailers(cb__req_t *r);
/* Writes a DATA frame on stream 0 (a connection error for the peer) right after the frames the session sends
 * next, so that it follows the response HEADERS submitted now. */
void cb__h2_violation(cb__conn_t *c);
/* Submits SETTINGS with the values >= 0 (max frame size, initial window). */
void cb__h2_settings(cb__conn_t *c, int64_t max_frame, int64_t window);

typedef void (*cb__timer_fn)(cb__req_t *r);

enum { CB__RES_NONE, CB__RES_HEAD, CB__RES_ENDED };

struct cb__req_s {
  cb__conn_t *conn;
  const cb__proto_t *proto;
  void *stream; /* the protocol's per-request state (HTTP/2 stream) */
  const cb__route_t *route;
  uint64_t head_key; /* non-zero: the head's extra headers are the same for every head made with this key (a
                        hash of a stub's fixed headers), so a protocol may reuse the head it made for it */
  const cb__handler_t *handler;
  cb__rtable_t *table; /* the table it was dispatched under, whose use it holds until release; NULL for a
                          fixture route (route_table.c) */
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
  const void *stub;  /* stub.c: the response answering (a sequence's item, claimed at dispatch) */
  uint8_t body_wait;  /* the lookup met a route with a body matcher: choose once the body is complete */
  uint8_t body_known; /* the lookup runs with the body (cb__rtable_dispatch_body): body matchers are tried */
  uint8_t mjson_state; /* mjson: 0 not parsed yet, 1 parsed, 2 the body is not JSON */
  uint8_t mbody_refused; /* the held body went over the echo budget: answered 503 */
  char *mbody;        /* the body held for body matchers (cb__h_body_wait), mbody_cap bytes from the echo budget
                         and a NUL after mbody_len (for sanitizers' regexec interceptors) */
  size_t mbody_len, mbody_cap;
  void *mjson;        /* the held body as JSON (a json_t), parsed by the first JSON matcher tried */
  int64_t content_length; /* declared request body length, -1 when unknown */
  uint64_t body_received;
  /* The handler's state. */
  union {
    struct {
      char *buf;
      size_t len, cap; /* cap bytes are held from the echo budget while buf is the handler's */
      int refused;     /* over the echo budget: answered 503, the rest of the body is dropped */
    } echo;
    struct {
      unsigned next;
    } gen;
    struct {
      uint64_t off;   /* body bytes emitted */
      unsigned piece; /* the piece being emitted */
      uint8_t due;    /* interval_ms: the timer fired for this piece (on_writable alone does not start one) */
      uint8_t refused; /* a template's {{body}}: over the echo budget, answered 503 */
      char *body;     /* a template's {{body}}: the request body, held from the echo budget (cap bytes) */
      size_t len, cap;
    } stub;
    struct {
      char *buf;     /* the request body, held from the echo budget (cap bytes) */
      size_t len, cap;
      uint32_t slot; /* the parked request's slot + 1; 0 before it is parked */
      uint8_t refused; /* over the echo budget: answered 503 */
      uint8_t stream, ended, end_sent, dirty; /* a streamed body (deferred.c): parked at the head, pieces
                                                 handed over once per loop iteration */
    } deferred;
    struct {
      char *json;
      size_t len;
    } headers;
    struct {
      const cb__fault_t *f;
      const cb__fault_answer_t *answer;
      unsigned piece; /* dribble, drip, slow_head: the next piece; hang: ms left */
      unsigned wake;  /* dribble, drip, slow_head: the wake-up whose pieces go next (see fault.c, pacing) */
      uint8_t own;    /* /fault/{kind}: f was parsed for this request and is freed with it */
    } fault;
    unsigned ms;
    int status;
  } u;
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
 * cb__res_fixed_steps (handlers.c), where it has none. */
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

/* route.c: matches the request (r->path, r->method...), counts it, journals its arrival, sets r->route and
 * r->handler (404 and 405 have handlers too) and runs on_head. */
void cb__req_dispatch(cb__req_t *r);

/* handlers.c: the fixture routes (built into reg) and the 404 and 405 handlers. */
int cb__fixture_routes(cb__routes_t *reg, cb__route_t ***out, int *n, cb__route_t **not_found);
extern const cb__handler_t cb__h_method_not_allowed;

/* ---- the roadrunner routes: cookies.c (GET /cookies), gzip_body.c (GET /gzip) ---- */
extern const cb__handler_t cb__h_cookies;
extern const cb__handler_t cb__h_gzip;
/* At most this many distinct cookie names are answered; later pairs are ignored (browsers send fewer). */
#define CB__COOKIES_MAX 256
/* The bytes cb__cookies_json() may write for these headers, and the JSON object of their cookie fields. */
size_t cb__cookies_json_cap(const cb__hdr_t *hs, int n);
size_t cb__cookies_json(const cb__hdr_t *hs, int n, char *out);
/* The same, adding to *compared the comparisons of a pair's name with a name already kept (for the tests: a
 * repeated name costs a few, not one per name kept). */
size_t cb__cookies_json_counted(const cb__hdr_t *hs, int n, char *out, uint64_t *compared);
#define CB__GZIP_PLAIN_LEN 16384
/* The /gzip body as sent: plain and gzip-coded, made once per process. 0, or UV_ENOMEM. */
int cb__gzip_bodies(cb__slice_t *identity, cb__slice_t *gzip);
/* Whether the accept-encoding fields of these headers make gzip the answer (1) or identity (0). */
int cb__accepts_gzip(const cb__hdr_t *hs, int n);

/* ---- ws.c: GET /ws, WebSocket echo (RFC 6455) over HTTP/1.1; sha1.c ---- */
extern const cb__handler_t cb__h_ws;
/* 0 when the request is a valid WebSocket handshake; otherwise the status it gets: 426 (a version other than
 * 13) or 400. */
int cb__ws_check(const cb__req_t *r);
/* Sec-WebSocket-Accept for a key: base64(SHA-1(key + the RFC's GUID)), 28 characters (not terminated). */
void cb__ws_accept(const char *key, size_t key_len, char out[28]);
/* Answers the checked handshake r with 101, records r, and makes c a WebSocket connection (c->ops, state). */
int cb__ws_upgrade(cb__conn_t *c, cb__req_t *r);
void cb__sha1(const void *data, size_t len, uint8_t out[20]);

/* stub.c: validates and copies a stub, and appends it to the registry (not published yet). */
int cb__stub_append(cb__routes_t *reg, const cb_stub_t *stub, uint64_t *id);

/* deferred.c: the worker's parked requests are closed with its handles and freed after its loop. */
void cb__deferred_close(cb__worker_t *w);
void cb__deferred_free(cb__worker_t *w);
/* stub.c: whether a response header name is one the engine writes itself (content-length...). */
int cb__forbidden_header(const char *name, size_t n);
/* http2.c: cuts a stream whose answer cannot end well (RST_STREAM INTERNAL_ERROR); the connection goes on. */
void cb__h2_reset(cb__req_t *r);

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

/* ---- http1.c / http2.c ---- */

/* Makes c an HTTP/1.1 connection. */
int cb__h1_attach(cb__conn_t *c);
/* The size of HTTP/1.1's per-request state (the worker caches it, pool.c). */
size_t cb__h1_state_size(void);
/* Makes c an HTTP/2 connection; data starts with the client preface. */
int cb__h2_attach_prior(cb__conn_t *c);
/* Upgrades an HTTP/1.1 connection (Upgrade: h2c) once `101 Switching Protocols` is queued: the request r
 * (method, path and headers; no body) becomes stream 1. settings is the HTTP2-Settings header value
 * (base64url). On success c->ops is HTTP/2's and the bytes after the request go to c->ops->read. On failure
 * nothing changed and the request is answered over HTTP/1.1. */
int cb__h2_upgrade(cb__conn_t *c, const cb__req_t *r, const char *settings, size_t settings_len);
/* Whether an HTTP2-Settings header value decodes to a SETTINGS payload. */
int cb__h2_settings_valid(const char *settings, size_t len);
/* Whether this build serves HTTP/2. */
int cb__h2_available(void);
/* The cb_proto_id of an HTTP/2 connection (prior knowledge or upgrade), and a request's stream id. */
int cb__h2_proto_id(const cb__conn_t *c);
uint32_t cb__h2_stream_id(const cb__req_t *r);

/* ---- server.c ---- */
struct cb_server_s {
  cb_config_t cfg;
  uint64_t echo_total; /* request-body bytes held for echo by every worker (atomic) */
  char host[64];
  int cpus[CB_MAX_THREADS];
  int port;
  int nworkers;
  cb__fixtures_t fx;
  cb__worker_t **workers;
  cb__routes_t *routes;
  uv_mutex_t api_mu;  /* serialises the calls that change or read through the workers */
  int api_mu_ok;
  int down;           /* cb_server_down() is in force (under api_mu) */
  uint64_t conn_ids;  /* connections accepted, server-wide (atomic) */
  uint64_t jseq;      /* journal sequence numbers given (atomic) */
  uint64_t jfloor;    /* entries with seq <= this were cleared (atomic) */
  struct cb__admin_s *admin; /* the admin API (cfg.admin), or NULL: src/admin.c */
  char admin_host[64];
};

#endif
