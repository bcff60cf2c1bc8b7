/* A run of cbench-load: the wire bytes, the threads (connections dealt round robin: thread i gets connections
 * i, i + T, i + 2T, ...), the common start time they all schedule from, and the results merged once they have
 * joined. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "load.h"

void cbl_result_init(cbl_result_t *r, uint32_t nsec) {
  memset(r, 0, sizeof *r);
  cbl_hist_init(&r->corrected);
  cbl_hist_init(&r->uncorrected);
  cbl_hist_init(&r->send_lag);
  if (nsec == 0) return;
  r->second = malloc(nsec * sizeof *r->second);
  r->second_done = calloc(nsec, sizeof *r->second_done);
  if (!r->second || !r->second_done) {
    free(r->second);
    free(r->second_done);
    r->second = NULL;
    r->second_done = NULL;
    return;
  }
  r->nsec = nsec;
  for (uint32_t i = 0; i < nsec; i++) cbl_hist_init(&r->second[i]);
}

void cbl_result_merge(cbl_result_t *dst, const cbl_result_t *src) {
  cbl_counts_t *d = &dst->counts;
  const cbl_counts_t *s = &src->counts;
  d->sent += s->sent;
  d->completed += s->completed;
  d->ok += s->ok;
  d->unsent += s->unsent;
  d->late += s->late;
  for (int k = 0; k < CBL_ERR_KINDS; k++) d->errors[k] += s->errors[k];
  for (int k = 0; k < CBL_MAX_STATUS; k++) d->status[k] += s->status[k];
  d->bytes_read += s->bytes_read;
  d->bytes_written += s->bytes_written;
  d->body_bytes += s->body_bytes;
  d->connects += s->connects;
  d->tls_full += s->tls_full;
  d->tls_resumed += s->tls_resumed;
  /* The first thread's TLS parameters (they are the same for every connection), and the first failure. */
  if (!dst->tls_version[0]) {
    memcpy(dst->tls_version, src->tls_version, sizeof dst->tls_version);
    memcpy(dst->tls_cipher, src->tls_cipher, sizeof dst->tls_cipher);
    memcpy(dst->tls_alpn, src->tls_alpn, sizeof dst->tls_alpn);
  }
  if (!dst->tls_error[0]) memcpy(dst->tls_error, src->tls_error, sizeof dst->tls_error);
  cbl_hist_merge(&dst->corrected, &src->corrected);
  cbl_hist_merge(&dst->uncorrected, &src->uncorrected);
  cbl_hist_merge(&dst->send_lag, &src->send_lag);
  for (uint32_t i = 0; i < dst->nsec && i < src->nsec; i++) {
    cbl_hist_merge(&dst->second[i], &src->second[i]);
    dst->second_done[i] += src->second_done[i];
  }
}

void cbl_result_free(cbl_result_t *r) {
  free(r->second);
  free(r->second_done);
  r->second = NULL;
  r->second_done = NULL;
}

int cbl_run(cbl_run_t *run, const cbl_config_t *cfg) {
  memset(run, 0, sizeof *run);
  run->cfg = cfg;
  if (cbl_wire_build(&run->wire, cfg)) {
    fprintf(stderr, "cbench-load: out of memory\n");
    return -1;
  }
  int tls_rc = cbl_tls_ctx_new(run);
  if (tls_rc) return tls_rc;
  const cbl_proto_t *proto = cfg->proto == CBL_H2C ? &cbl_h2_proto : cfg->proto == CBL_WS ? &cbl_ws_proto
                                                                                          : &cbl_h1_proto;
  int T = cfg->threads;
  run->threads = calloc((size_t)T, sizeof *run->threads);
  if (!run->threads) return -1;
  pthread_barrier_init(&run->ready, NULL, (unsigned)T + 1);
  pthread_barrier_init(&run->go, NULL, (unsigned)T + 1);
  int rc = 0;
  for (int i = 0; i < T; i++) {
    cbl_thread_t *t = &run->threads[i];
    t->index = i;
    t->cfg = cfg;
    t->wire = &run->wire;
    t->proto = proto;
    t->run = run;
    t->nconns = cfg->connections / T + (i < cfg->connections % T ? 1 : 0);
    if (pthread_create(&t->tid, NULL, cbl_thread_main, t)) {
      /* The threads already started wait on barriers counted for all of them: nothing to unwind but exit. */
      fprintf(stderr, "cbench-load: cannot start thread %d\n", i);
      exit(1);
    }
  }
  pthread_barrier_wait(&run->ready);
  /* Open loop: a common origin a little ahead, so that no thread starts behind its schedule. Closed loop:
   * now, so that every request is sent after it. */
  run->t_start = cbl_now() + (cfg->rate > 0 ? 5000000ull : 0);
  run->t_measure = run->t_start + cfg->warmup_ns;
  run->t_end = run->t_measure + cfg->duration_ns;
  run->t_drain = run->t_end + cfg->timeout_ns;
  pthread_barrier_wait(&run->go);
  uint32_t nsec = (uint32_t)((cfg->duration_ns + 999999999ull) / 1000000000ull);
  cbl_result_init(&run->total, nsec > CBL_MAX_TIMELINE ? 0 : nsec);
  for (int i = 0; i < T; i++) {
    void *ret;
    pthread_join(run->threads[i].tid, &ret);
    if (ret) rc = -1;
    cbl_result_merge(&run->total, &run->threads[i].res);
    cbl_result_free(&run->threads[i].res);
  }
  run->elapsed_s = (double)cfg->duration_ns / 1e9;
  pthread_barrier_destroy(&run->ready);
  pthread_barrier_destroy(&run->go);
  return rc;
}

void cbl_run_free(cbl_run_t *run) {
  cbl_result_free(&run->total);
  cbl_wire_free(&run->wire, run->cfg);
  cbl_tls_ctx_free(run);
  free(run->threads);
}
