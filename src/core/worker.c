/* One worker: a thread with its own loop and its own SO_REUSEPORT listening sockets (the cleartext port, and the
 * TLS one with cfg.tls_port). The kernel spreads new connections over the workers' sockets, so no lock or hand-off
 * is on the accept path; each socket knows the transport of what it accepts. */
#include <errno.h>
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"

#define ACCEPTS_PER_EVENT 64

/* ---- the Date cache ---- */

void cb__date_refresh(cb__worker_t *w) {
  static const char days[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                     "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  /* IMF-fixdate written by hand: strftime's %a and %b follow the locale. */
  int n = snprintf(w->date_line, sizeof w->date_line, "date: %s, %02d %s %04d %02d:%02d:%02d GMT\r\n",
                   days[tm.tm_wday], tm.tm_mday, months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min,
                   tm.tm_sec);
  w->date_len = n > 0 ? (size_t)n : 0;
  w->date_gen++;
}

/* AddressSanitizer brings its own allocator and does not intercept malloc_trim, so the call would reach glibc's
 * heap, which nothing in such a build allocates from: the first call would set that heap up, and two workers going
 * idle in the same second did so at once and crashed in glibc's mtrim (a clean-clone CI run, h2-asan). Nothing to
 * give back there, so nothing is called. */
#if defined(__SANITIZE_ADDRESS__)
#define CB__SYSTEM_ALLOCATOR 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CB__SYSTEM_ALLOCATOR 0
#endif
#endif
#ifndef CB__SYSTEM_ALLOCATOR
#define CB__SYSTEM_ALLOCATOR 1
#endif

/* Once a second. The allocator keeps what closed connections freed (291 MB after 9,500 h2c connections): when
 * the worker's last connection has closed since the last tick and none is open now, the free memory goes back
 * to the system. From this timer, so that a client opening and closing connections one by one does not pay a
 * malloc_trim each. */
static void on_date_timer(uv_timer_t *t) {
  cb__worker_t *w = t->data;
  cb__date_refresh(w);
  if (w->trim_pending && w->nconns == 0) {
    w->trim_pending = 0;
    cb__caches_drain(&w->caches);
    for (int i = 0; i < CB__WORKER_PARTS; i++) {
      cb__part_t *p = &w->parts[i];
      if (p->state != NULL && p->ops->trim != NULL && p->ops->trim(w, p->state)) p->state = NULL;
    }
    if (CB__SYSTEM_ALLOCATOR) malloc_trim(0);
  }
}

/* ---- accept ---- */

static void on_listener(uv_poll_t *h, int status, int events);

static void on_accept_backoff(uv_timer_t *t) {
  cb__worker_t *w = t->data;
  if (w->stopping) return;
  for (int k = 0; k < w->nlst; k++)
    if (w->lst[k].open) uv_poll_start(&w->lst[k].poll, UV_READABLE, on_listener);
}

/* A TLS connection the worker will not take: its handshakes in progress are at cfg.tls_max_handshakes. It is
 * closed at once, before a byte of it is read, so a client that floods handshakes costs a worker an accept and a
 * close each, and no memory. */
static __attribute__((noinline)) void refuse(cb__worker_t *w, int fd) {
  CB__STAT_INC(w, tls_handshakes_refused);
  close(fd);
}

static void on_listener(uv_poll_t *h, int status, int events) {
  cb__listener_t *l = (cb__listener_t *)h;
  cb__worker_t *w = l->w;
  (void)events;
  if (status < 0 || w->stopping || !l->open) return;
  for (int i = 0; i < ACCEPTS_PER_EVENT; i++) {
    struct sockaddr_storage peer;
    socklen_t plen = sizeof peer;
    int fd = accept4(l->fd, (struct sockaddr *)&peer, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        /* Out of descriptors: stop polling the listener (it would report readable in a tight loop) and try
         * again shortly; connections wait in the backlog meanwhile. */
        CB__STAT_INC(w, accept_backoffs);
        uv_poll_stop(&l->poll);
        uv_timer_start(&w->aux_timer, on_accept_backoff, CB__ACCEPT_BACKOFF_MS, 0);
      }
      return; /* EAGAIN, or an aborted connection: nothing more to take now */
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    cb__tport_t tr;
    if (l->tls == NULL) {
      tr = cb__tport_plain(fd);
    } else {
      int err = cb__tport_tls(fd, l->tls, &w->tls_hs, &tr);
      if (err == UV_EBUSY) refuse(w, fd);
      if (err) {
        if (err != UV_EBUSY) close(fd);
        continue;
      }
    }
    tr.loop = &w->loop; /* a paced handshake's timer (transport/tls_fault.c); unused by plain */
    if (cb__conn_accept(w, &tr, (const struct sockaddr *)&peer) != 0) tr.ops->close(&tr, 0);
  }
}

/* ---- commands from other threads ---- */

static void stop_now(uv_timer_t *t);
static void close_worker_handles(cb__worker_t *w);

static void on_listener_closed(uv_handle_t *h);

/* Stops polling listener l; with close_fd, closes its socket too (else it is the caller's). */
static void close_listener(cb__listener_t *l, int close_fd) {
  if (!l->open) return;
  l->open = 0;
  l->closing = 1;
  l->w->lst_closing++;
  uv_close((uv_handle_t *)&l->poll, on_listener_closed); /* stops polling: the socket can be closed now */
  if (close_fd) close(l->fd);
  l->fd = -1;
}

/* Closes every listening socket (stop, down). */
static void close_listeners(cb__worker_t *w) {
  for (int k = 0; k < w->nlst; k++) close_listener(&w->lst[k], 1);
}

static void down_check(cb__worker_t *w) {
  if (w->down_call != NULL && w->nconns == 0 && w->lst_closing == 0) {
    cb__call_t *call = w->down_call;
    w->down_call = NULL;
    cb__call_done(call);
  }
}

static void on_listener_closed(uv_handle_t *h) {
  cb__listener_t *l = (cb__listener_t *)h;
  l->closing = 0;
  l->w->lst_closing--;
  down_check(l->w);
}

static void begin_stop(cb__worker_t *w) {
  if (w->stopping) return;
  w->stopping = 1;
  close_listeners(w);
  uv_timer_stop(&w->aux_timer);
  /* Each connection finishes what is in flight, or closes now when idle. */
  cb__conn_t *c = w->conns;
  while (c != NULL) {
    cb__conn_t *next = c->next;
    cb__conn_stop(c);
    c = next;
  }
  if (w->nconns == 0) {
    close_worker_handles(w);
  } else {
    uv_timer_start(&w->aux_timer, stop_now, w->cfg->stop_timeout_ms, 0);
  }
}

/* The stop bound passed: whatever is still open is closed. */
static void stop_now(uv_timer_t *t) {
  cb__worker_t *w = t->data;
  cb__conn_t *c = w->conns;
  while (c != NULL) {
    cb__conn_t *next = c->next;
    cb__conn_close(c);
    c = next;
  }
}

/* The parts' handles close with the worker's (stop); their memory goes after the loop (free_parts). */
static void close_parts(cb__worker_t *w) {
  for (int i = 0; i < CB__WORKER_PARTS; i++)
    if (w->parts[i].state != NULL && w->parts[i].ops->close != NULL) w->parts[i].ops->close(w, w->parts[i].state);
}

static void free_parts(cb__worker_t *w) {
  for (int i = 0; i < CB__WORKER_PARTS; i++) {
    cb__part_t *p = &w->parts[i];
    if (p->state != NULL) p->ops->free(w, p->state);
    p->state = NULL;
  }
}

static void close_worker_handles(cb__worker_t *w) {
  close_parts(w);
  if (!uv_is_closing((uv_handle_t *)&w->async)) uv_close((uv_handle_t *)&w->async, NULL);
  if (!uv_is_closing((uv_handle_t *)&w->date_timer)) uv_close((uv_handle_t *)&w->date_timer, NULL);
  if (!uv_is_closing((uv_handle_t *)&w->aux_timer)) uv_close((uv_handle_t *)&w->aux_timer, NULL);
  if (!uv_is_closing((uv_handle_t *)&w->clock_check)) uv_close((uv_handle_t *)&w->clock_check, NULL);
}

void cb__worker_conn_gone(cb__worker_t *w) {
  if (w->nconns == 0) w->trim_pending = 1; /* see on_date_timer */
  if (w->srv == NULL) return; /* a test worker: its owner closes it */
  down_check(w);
  if (w->stopping && w->nconns == 0) close_worker_handles(w);
}

static void on_async(uv_async_t *a) { cb__worker_run_commands(a->data); }

static void stop_cmd(cb__worker_t *w, cb__cmd_t *cmd) {
  (void)cmd; /* w->stop_cmd: nothing to free */
  begin_stop(w);
}

void cb__worker_post_stop(cb__worker_t *w) {
  w->stop_cmd.fn = stop_cmd;
  cb__worker_post(w, &w->stop_cmd);
}

/* ---- down and up ---- */

void cb__worker_down(cb__worker_t *w, cb__call_t *call) {
  close_listeners(w);
  uv_timer_stop(&w->aux_timer); /* an accept back-off would poll a closed socket */
  for (cb__conn_t *c = w->conns; c != NULL;) {
    cb__conn_t *next = c->next;
    cb__conn_close(c);
    c = next;
  }
  w->down_call = call; /* done when the last connection and the listener are freed */
  down_check(w);
}

/* Polls the sockets of ls that are this worker's, as its listeners 0..ls->n-1. On error every listener opened here
 * is closed again without its socket: the caller closes them all. */
static int listen_all(cb__worker_t *w, const cb__lsocks_t *ls) {
  if (w->lst_closing > 0 || ls->n > CB__LISTENERS) return UV_EBUSY;
  int err = 0, k;
  for (k = 0; k < ls->n; k++) {
    cb__listener_t *l = &w->lst[k];
    l->w = w;
    l->tls = ls->tls[k];
    err = uv_poll_init(&w->loop, &l->poll, ls->fd[k][w->index]);
    if (err) break;
    l->fd = ls->fd[k][w->index];
    l->open = 1;
    err = uv_poll_start(&l->poll, UV_READABLE, on_listener);
    if (err) {
      k++;
      break;
    }
  }
  if (err)
    while (k-- > 0) close_listener(&w->lst[k], 0);
  else
    w->nlst = ls->n;
  return err;
}

int cb__worker_listen(cb__worker_t *w, const cb__lsocks_t *ls) { return listen_all(w, ls); }

void cb__worker_up(cb__worker_t *w, cb__call_t *call) {
  call->err = listen_all(w, call->arg);
  cb__call_done(call);
}

/* ---- the thread ---- */

static void init_budget(cb__worker_t *w, const cb_config_t *cfg) {
  w->tls_hs.max = cfg->tls_max_handshakes;
  w->tls_hs.failed = &w->stats.tls_handshakes_failed;
  w->tls_hs.ktls = &w->stats.tls_ktls;
}

/* The end of a loop iteration: the after-steps asked for during it run (cb__conn_after_soon), and the journal's
 * clock is stale (journal.c, worker_now_us). */
static void end_of_turn(cb__worker_t *w);
static void on_clock_check(uv_check_t *h) { end_of_turn(h->data); }

static int init_loop(cb__worker_t *w) {
  w->epfd = epoll_create1(EPOLL_CLOEXEC);
  if (w->epfd < 0) return uv_translate_sys_error(errno);
  int err = uv_loop_init(&w->loop);
  if (err) {
    close(w->epfd);
    w->epfd = -1;
    return err;
  }
  /* libuv's own descriptor (its listeners, the command queue's wake-up) is one member of the worker's set, with
   * no data: cb__worker_turn runs libuv's phases when it is readable. */
  struct epoll_event e = {.events = EPOLLIN, .data.ptr = NULL};
  if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, uv_backend_fd(&w->loop), &e) != 0) {
    err = uv_translate_sys_error(errno);
    uv_loop_close(&w->loop);
    close(w->epfd);
    w->epfd = -1;
    return err;
  }
  w->loop.data = w;
  cb__caches_init(&w->caches, CB__OUTQ_BLOCK);
  uv_timer_init(&w->loop, &w->date_timer);
  uv_timer_init(&w->loop, &w->aux_timer);
  w->date_timer.data = w;
  w->aux_timer.data = w;
  uv_check_init(&w->loop, &w->clock_check);
  w->clock_check.data = w;
  uv_check_start(&w->clock_check, on_clock_check);
  uv_unref((uv_handle_t *)&w->clock_check);
  cb__date_refresh(w);
  uv_timer_start(&w->date_timer, on_date_timer, 1000, 1000);
  uv_unref((uv_handle_t *)&w->date_timer);
  return 0;
}

int cb__worker_init(cb__worker_t *w, cb_server_t *srv, const cb_config_t *cfg, const cb__fixtures_t *fx,
                    int index, int cpu, const cb__conn_ops_t *first_ops, const cb__router_t *router) {
  memset(w, 0, sizeof *w);
  w->epfd = -1;
  w->first_ops = first_ops;
  w->router = router;
  w->srv = srv;
  w->echo_total = &srv->echo_total;
  w->cfg = cfg;
  w->fx = fx;
  w->index = index;
  w->cpu = cpu;
  init_budget(w, cfg);
  int err = uv_mutex_init(&w->cmd_mutex);
  if (err) return err;
  err = uv_sem_init(&w->ready, 0);
  if (err) {
    uv_mutex_destroy(&w->cmd_mutex);
    return err;
  }
  err = init_loop(w);
  if (err) {
    cb__worker_destroy_sync(w);
    return err;
  }
  uv_async_init(&w->loop, &w->async, on_async);
  w->async.data = w;
  return 0;
}

void cb__worker_destroy_sync(cb__worker_t *w) {
  if (w->epfd >= 0) close(w->epfd); /* the loop's wait set goes with the loop's last use (join, or a failed start) */
  w->epfd = -1;
  uv_sem_destroy(&w->ready);
  uv_mutex_destroy(&w->cmd_mutex);
}

/* Pins the calling thread to w->cpu and reads back what the kernel applied: w->cpu becomes that CPU, and a pin
 * that did not happen (an offline CPU, one outside the process's allowed set) is CB_ETHREADS. */
static int pin(cb__worker_t *w) {
  if (w->cpu < 0) return 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(w->cpu, &set);
  if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) return CB_ETHREADS;
  CPU_ZERO(&set);
  if (pthread_getaffinity_np(pthread_self(), sizeof set, &set) != 0 || CPU_COUNT(&set) != 1 ||
      !CPU_ISSET(w->cpu, &set))
    return CB_ETHREADS;
  return 0;
}

/* ---- the loop ----
 * The worker's loop is an epoll wait of its own, on the set of its connections' sockets, which holds libuv's
 * descriptor too (init_loop). A wait that reports only connections runs them and the end-of-iteration step, and
 * nothing of libuv's: one epoll_wait per turn, as uv_run made, and no handle per connection (conn.c,
 * "Readiness"). libuv's phases (timers, the command queue, listeners, close callbacks) run when its descriptor
 * is readable, when the wait ended at libuv's next timer, or when libuv has work that is due at once: a closed
 * handle's callback, a pending callback, a prepare handle a kind started (cb__worker_want_uv_turn), or changes
 * to its own set that it makes only in its poll phase (uv_changes_pending). */
#define READY_BATCH 256

/* Whether libuv holds changes to its own epoll set that it makes only in its poll phase: a watcher started or
 * stopped since (a proxy's upstream stream read or written, a listener paused), kept in loop->watcher_queue. That
 * list is a field of uv.h's uv_loop_t (UV_LOOP_PRIVATE_FIELDS): two pointers, the next one first, whose head
 * points to itself when the list is empty, in every libuv 1.x (an array before 1.46, a struct uv__queue since).
 * Without this, a socket libuv was asked to watch during a turn would not be in the set the worker then waits
 * on. */
static int uv_changes_pending(const uv_loop_t *loop) {
  _Static_assert(sizeof loop->watcher_queue == 2 * sizeof(void *), "libuv's watcher queue: two pointers");
  void *const *head = (void *const *)&loop->watcher_queue;
  return head[0] != (const void *)head;
}

/* What libuv's check phase does at the end of each iteration (on_clock_check), for a turn without libuv: the
 * parts' end-of-turn steps asked for (their output, which may end exchanges and so ask for after-steps), then
 * the connections' after-steps (which may give a part more to send), until neither has anything left. */
static void end_of_turn(cb__worker_t *w) {
  _Static_assert(CB__WORKER_PARTS <= 8, "parts_due: a bit per part");
  while (w->parts_due != 0 || w->after_soon != NULL) {
    unsigned due = w->parts_due;
    w->parts_due = 0;
    for (int i = 0; i < CB__WORKER_PARTS; i++)
      if ((due & (1u << i)) && w->parts[i].state != NULL && w->parts[i].ops->turn_end != NULL)
        w->parts[i].ops->turn_end(w, w->parts[i].state);
    if (w->after_soon != NULL) cb__worker_run_afters(w);
  }
  w->now_valid = 0;
}

int cb__worker_turn(cb__worker_t *w, int nowait) {
  uv_loop_t *loop = &w->loop;
  int alive = uv_loop_alive(loop);
  if (!alive && w->nconns == 0) return 0;
  /* libuv's work that is due now first: close callbacks, timers, its callbacks pending, changes to its set. */
  if (alive && !nowait && (w->uv_turn_wanted || uv_backend_timeout(loop) == 0 || uv_changes_pending(loop))) {
    w->uv_turn_wanted = 0;
    uv_run(loop, UV_RUN_NOWAIT);
    alive = uv_loop_alive(loop);
    if (!alive && w->nconns == 0) return 0;
  }
  /* Connections with no libuv handle left active (a held request whose timer ran out, while the worker stops)
   * are waited for a second at a time, so that libuv's unreferenced timers (the Date line) still run. */
  int timeout = nowait ? 0 : alive ? uv_backend_timeout(loop) : 1000;
  struct epoll_event evs[READY_BATCH];
  int n = epoll_wait(w->epfd, evs, READY_BATCH, timeout);
  if (n < 0) n = 0; /* EINTR: a signal for another thread of the process */
  uv_update_time(loop);
  int uv_due = nowait || (n == 0 && timeout != 0); /* the wait ran to libuv's next timer */
  for (int i = 0; i < n; i++) {
    if (evs[i].data.ptr == NULL)
      uv_due = 1;
    else
      cb__conn_ready(evs[i].data.ptr, evs[i].events);
  }
  if (uv_due) {
    w->uv_turn_wanted = 0; /* this run has its prepare phase */
    uv_run(loop, UV_RUN_NOWAIT); /* its check phase ends the iteration (on_clock_check) */
  } else {
    end_of_turn(w);
  }
  return 1;
}

void cb__worker_want_uv_turn(cb__worker_t *w) { w->uv_turn_wanted = 1; }

void cb__worker_part_due(cb__worker_t *w, int part) { w->parts_due |= (uint8_t)(1u << part); }

static void worker_main(void *arg) {
  cb__worker_t *w = arg;
  cb__worker_mark_thread();
  w->pin_err = pin(w);
  uv_sem_post(&w->ready);
  /* After a failed pin the starter posts a stop, which this loop runs like any other. */
  while (cb__worker_turn(w, 0)) {
  }
  /* Every handle was closed by the stop sequence; a non-zero result here would be a leaked handle. */
  int rc = uv_loop_close(&w->loop);
  (void)rc;
  free_parts(w);
  cb__caches_drain(&w->caches);
  /* Every connection is gone, and with it every use of a table: let go of the current one. */
  w->router->retire(w);
}

int cb__worker_start(cb__worker_t *w) {
  /* The loop was built on the caller's thread; from here on only the worker's thread touches it. */
  uv_thread_options_t opts = {.flags = UV_THREAD_HAS_STACK_SIZE, .stack_size = 256 * 1024};
  return uv_thread_create_ex(&w->thread, &opts, worker_main, w);
}

int cb__worker_wait_ready(cb__worker_t *w) {
  uv_sem_wait(&w->ready);
  return w->pin_err;
}

void cb__worker_join(cb__worker_t *w) {
  uv_thread_join(&w->thread);
  cb__worker_destroy_sync(w);
}

/* ---- test workers: no thread, no listener ---- */

int cb__worker_init_test(cb__worker_t *w, const cb_config_t *cfg, const cb__fixtures_t *fx,
                         const cb__conn_ops_t *first_ops, const cb__router_t *router) {
  memset(w, 0, sizeof *w);
  w->epfd = -1;
  w->first_ops = first_ops;
  w->router = router;
  w->echo_total = &w->echo_own;
  w->cfg = cfg;
  w->fx = fx;
  w->cpu = -1;
  init_budget(w, cfg);
  return init_loop(w);
}

int cb__worker_close_test(cb__worker_t *w) {
  w->stopping = 1;
  cb__conn_t *c = w->conns;
  while (c != NULL) {
    cb__conn_t *next = c->next;
    cb__conn_close(c);
    c = next;
  }
  uv_close((uv_handle_t *)&w->date_timer, NULL);
  uv_close((uv_handle_t *)&w->aux_timer, NULL);
  uv_close((uv_handle_t *)&w->clock_check, NULL);
  close_parts(w);
  uv_run(&w->loop, UV_RUN_DEFAULT);
  int rc = uv_loop_close(&w->loop);
  close(w->epfd);
  w->epfd = -1;
  free_parts(w);
  cb__caches_drain(&w->caches);
  return rc;
}
