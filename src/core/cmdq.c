/* A worker's command queue: the one way into a loop from another thread (h2o's per-thread message queue is
 * the model). Senders append under a short lock and wake the worker with uv_async_send; the worker swaps the
 * whole list out and runs it in order, so a burst of commands costs one wake-up. On top of it, calls that run
 * on every worker and are waited for (route table swaps, journal reads, down/up). */
#include <stdlib.h>

#include "core/core.h"

static __thread int on_worker; /* set on the engine's worker threads */

void cb__worker_mark_thread(void) { on_worker = 1; }
int cb__on_worker_thread(void) { return on_worker; }

void cb__worker_post(cb__worker_t *w, cb__cmd_t *cmd) {
  cmd->next = NULL;
  uv_mutex_lock(&w->cmd_mutex);
  if (w->cmd_tail)
    w->cmd_tail->next = cmd;
  else
    w->cmd_head = cmd;
  w->cmd_tail = cmd;
  uv_mutex_unlock(&w->cmd_mutex);
  uv_async_send(&w->async);
}

void cb__worker_run_commands(cb__worker_t *w) {
  for (;;) {
    uv_mutex_lock(&w->cmd_mutex);
    cb__cmd_t *cmd = w->cmd_head;
    w->cmd_head = w->cmd_tail = NULL;
    uv_mutex_unlock(&w->cmd_mutex);
    if (cmd == NULL) {
      cb__worker_run_afters(w); /* the replies of this wake-up, written together per connection */
      return;
    }
    while (cmd != NULL) {
      cb__cmd_t *next = cmd->next; /* fn owns cmd: read next first */
      cmd->fn(w, cmd);
      cmd = next;
    }
  }
}

/* ---- calls waited for ---- */

struct cb__wait_s {
  uv_mutex_t mu;
  uv_cond_t cv;
  int pending;
};

void cb__call_done(cb__call_t *call) {
  cb__wait_t *wt = call->wait;
  uv_mutex_lock(&wt->mu);
  if (--wt->pending == 0) uv_cond_signal(&wt->cv);
  uv_mutex_unlock(&wt->mu);
}

static void run_call(cb__worker_t *w, cb__cmd_t *cmd) {
  cb__call_t *call = (cb__call_t *)cmd;
  call->fn(w, call);
}

int cb__call_all(cb_server_t *srv, cb__call_fn fn, void *arg, cb__call_t *calls) {
  if (cb__on_worker_thread()) return UV_EBUSY; /* it would wait for itself */
  cb__wait_t wt;
  if (uv_mutex_init(&wt.mu) != 0) return UV_ENOMEM;
  if (uv_cond_init(&wt.cv) != 0) {
    uv_mutex_destroy(&wt.mu);
    return UV_ENOMEM;
  }
  wt.pending = srv->nworkers;
  for (int i = 0; i < srv->nworkers; i++) {
    calls[i] = (cb__call_t){.cmd = {.next = NULL, .fn = run_call}, .fn = fn, .wait = &wt, .arg = arg};
    cb__worker_post(srv->workers[i], &calls[i].cmd);
  }
  uv_mutex_lock(&wt.mu);
  while (wt.pending > 0) uv_cond_wait(&wt.cv, &wt.mu);
  uv_mutex_unlock(&wt.mu);
  uv_cond_destroy(&wt.cv);
  uv_mutex_destroy(&wt.mu);
  return 0;
}
