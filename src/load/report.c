/* cbench-load's results: the summary on stdout, --json FILE (jansson) and --erl FILE (the same tree written as
 * an Erlang term that file:consult/1 reads: objects become maps with atom keys, numeric keys become integers,
 * strings binaries, null `undefined'). Latencies are in microseconds with nanosecond decimals. The term file also
 * carries the histograms themselves (`hist'), which the JSON leaves out, so that runs on several nodes can be
 * merged exactly (erl/cbench_hist.erl). */
#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "load.h"

static const char *const err_names[CBL_ERR_KINDS] = {"connect", "reset", "timeout", "protocol", "unsolicited",
                                                     "upgrade", "tls"};

static double us(uint64_t ns) { return (double)ns / 1000.0; }

static json_t *percentiles(const cbl_hist_t *h) {
  return json_pack("{s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "count", (json_int_t)h->total, "min",
                   h->total ? us(h->min) : 0.0, "mean", cbl_hist_mean(h) / 1000.0, "p50",
                   us(cbl_hist_percentile(h, 50)), "p90", us(cbl_hist_percentile(h, 90)), "p99",
                   us(cbl_hist_percentile(h, 99)), "p999", us(cbl_hist_percentile(h, 99.9)), "p9999",
                   us(cbl_hist_percentile(h, 99.99)), "max", us(h->max));
}

/* The program's own CPU time (all threads, the set-up included): what the load cost the machine it ran on. */
static json_t *cpu_used(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return json_null();
  return json_pack("{s:f, s:f}", "user", (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6, "system",
                   (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6);
}

static uint64_t non2xx(const cbl_counts_t *c) {
  uint64_t n = 0;
  for (int s = 0; s < CBL_MAX_STATUS; s++)
    if (c->status[s] && (s < 200 || s >= 300)) n += c->status[s];
  return n;
}

static json_t *str_or_null(const char *s) { return s[0] ? json_string(s) : json_null(); }

/* null without TLS; else what the first handshake negotiated, the handshakes in the window, the settings and the
 * first failure's reason. */
static json_t *tls_json(const cbl_run_t *run) {
  const cbl_config_t *cfg = run->cfg;
  const cbl_result_t *r = &run->total;
  if (!cfg->tls) return json_null();
  json_t *t = json_object();
  json_object_set_new(t, "version", str_or_null(r->tls_version));
  json_object_set_new(t, "cipher", str_or_null(r->tls_cipher));
  json_object_set_new(t, "alpn", str_or_null(r->tls_alpn));
  json_object_set_new(t, "handshakes", json_pack("{s:I, s:I, s:I}", "full", (json_int_t)r->counts.tls_full,
                                                 "resumed", (json_int_t)r->counts.tls_resumed, "failed",
                                                 (json_int_t)r->counts.errors[CBL_ERR_TLS]));
  json_object_set_new(t, "handshakes_per_s", json_real((double)(r->counts.tls_full + r->counts.tls_resumed) /
                                                       run->elapsed_s));
  json_object_set_new(t, "resume", json_boolean(cfg->resume));
  json_object_set_new(t, "verify", json_boolean(!cfg->insecure));
  json_object_set_new(t, "error", str_or_null(r->tls_error));
  return t;
}

static json_t *build(const cbl_run_t *run) {
  const cbl_config_t *cfg = run->cfg;
  const cbl_result_t *r = &run->total;
  const cbl_counts_t *c = &r->counts;
  json_t *root = json_object();
  json_object_set_new(root, "tool", json_string("cbench-load"));
  json_object_set_new(root, "version", json_string(CBL_VERSION));
  json_object_set_new(root, "url", json_string(cfg->url));
  json_object_set_new(root, "proto", json_string(cbl_proto_label(cfg)));
  json_object_set_new(root, "mode", json_string(cfg->rate > 0 ? "open" : "closed"));
  json_object_set_new(root, "connections", json_integer(cfg->connections));
  json_object_set_new(root, "depth", json_integer(cfg->depth));
  json_object_set_new(root, "new_conn", json_boolean(cfg->new_conn));
  json_object_set_new(root, "threads", json_integer(cfg->threads));
  json_object_set_new(root, "duration_s", json_real((double)cfg->duration_ns / 1e9));
  json_object_set_new(root, "warmup_s", json_real((double)cfg->warmup_ns / 1e9));
  json_object_set_new(root, "timeout_s", json_real((double)cfg->timeout_ns / 1e9));
  json_object_set_new(root, "offered_rps", cfg->rate > 0 ? json_real(cfg->rate) : json_null());
  json_object_set_new(root, "achieved_rps", json_real((double)c->completed / run->elapsed_s));
  json_object_set_new(root, "ok_rps", json_real((double)c->ok / run->elapsed_s));
  json_object_set_new(root, "requests", json_pack("{s:I, s:I, s:I, s:I, s:I}", "sent", (json_int_t)c->sent,
                                                  "completed", (json_int_t)c->completed, "ok",
                                                  (json_int_t)c->ok, "unsent", (json_int_t)c->unsent, "late",
                                                  (json_int_t)c->late));
  json_t *errors = json_object(), *bad = json_object(), *all = json_object();
  uint64_t total = 0;
  for (int k = 0; k < CBL_ERR_KINDS; k++) {
    json_object_set_new(errors, err_names[k], json_integer((json_int_t)c->errors[k]));
    total += c->errors[k];
  }
  for (int s = 0; s < CBL_MAX_STATUS; s++) {
    if (!c->status[s]) continue;
    char key[12]; /* any int: gcc -O1 checks the bound */
    snprintf(key, sizeof key, "%d", s);
    json_object_set_new(all, key, json_integer((json_int_t)c->status[s]));
    if (s < 200 || s >= 300) json_object_set_new(bad, key, json_integer((json_int_t)c->status[s]));
  }
  total += non2xx(c);
  json_object_set_new(errors, "status", bad);
  json_object_set_new(errors, "total", json_integer((json_int_t)total));
  json_object_set_new(root, "errors", errors);
  json_object_set_new(root, "status", all);
  json_object_set_new(root, "bytes", json_pack("{s:I, s:I, s:I}", "read", (json_int_t)c->bytes_read, "written",
                                               (json_int_t)c->bytes_written, "body", (json_int_t)c->body_bytes));
  json_object_set_new(root, "connects", json_integer((json_int_t)c->connects));
  json_object_set_new(root, "tls", tls_json(run));
  json_object_set_new(root, "latency_us", json_pack("{s:o, s:o, s:o}", "corrected", percentiles(&r->corrected),
                                                    "uncorrected", percentiles(&r->uncorrected), "send_lag",
                                                    percentiles(&r->send_lag)));
  json_t *tl = json_array();
  for (uint32_t i = 0; i < r->nsec; i++) {
    /* The last second may be partial (a fractional duration): its rate is over its own length. Answers after
     * the window are in no second (requests.late). */
    double len = (double)cfg->duration_ns / 1e9 - i;
    if (len > 1.0) len = 1.0;
    json_array_append_new(tl, json_pack("{s:i, s:f, s:f}", "second", (int)i + 1, "rps",
                                        (double)r->second_done[i] / len, "p99_us",
                                        us(cbl_hist_percentile(&r->second[i], 99))));
  }
  json_object_set_new(root, "timeline", tl);
  json_object_set_new(root, "cpu_s", cpu_used());
  return root;
}

/* ---- the histograms themselves (the --erl file only) ---- */

static void erl_term(FILE *f, const json_t *v);

/* A histogram as a caller merges it (erl/cbench_hist.erl, for cbench:load/2 over several nodes): the non-empty
 * buckets as a flat list [index, count, index, count, ...] in index order, with the exact total, min, max and sum
 * (an integer: the sum of integer nanoseconds, exact below 2^53). Sparse because a run at one latency fills a few
 * dozen of the 3,840 buckets. */
static json_t *hist_json(const cbl_hist_t *h) {
  json_t *b = json_array();
  for (uint32_t i = 0; i < CBL_HIST_BUCKETS; i++) {
    if (!h->counts[i]) continue;
    json_array_append_new(b, json_integer((json_int_t)i));
    json_array_append_new(b, json_integer((json_int_t)h->counts[i]));
  }
  return json_pack("{s:I, s:I, s:I, s:I, s:o}", "total", (json_int_t)h->total, "min",
                   (json_int_t)(h->total ? h->min : 0), "max", (json_int_t)h->max, "sum", (json_int_t)h->sum,
                   "buckets", b);
}

/* The layout the indexes refer to, so that a reader built for another layout refuses instead of misreading. */
static json_t *hists_json(const cbl_run_t *run) {
  const cbl_result_t *r = &run->total;
  json_t *seconds = json_array();
  for (uint32_t i = 0; i < r->nsec; i++) json_array_append_new(seconds, hist_json(&r->second[i]));
  return json_pack("{s:{s:i, s:i, s:i, s:i}, s:o, s:o, s:o, s:o}", "layout", "sub_bits", CBL_HIST_SUB_BITS,
                   "linear", (int)CBL_HIST_LINEAR, "max_bits", CBL_HIST_MAX_BITS, "buckets", (int)CBL_HIST_BUCKETS,
                   "corrected", hist_json(&r->corrected), "uncorrected", hist_json(&r->uncorrected), "send_lag",
                   hist_json(&r->send_lag), "seconds", seconds);
}

void cbl_report_hist_erl(const cbl_hist_t *h, void *file) {
  json_t *t = hist_json(h);
  erl_term(file, t);
  json_decref(t);
}

/* ---- the Erlang term ---- */

static bool atom_safe(const char *k) {
  if (!islower((unsigned char)*k)) return false;
  for (; *k; k++)
    if (!islower((unsigned char)*k) && !isdigit((unsigned char)*k) && *k != '_') return false;
  return true;
}

static bool all_digits(const char *k) {
  if (!*k) return false;
  for (; *k; k++)
    if (!isdigit((unsigned char)*k)) return false;
  return true;
}

static void erl_string(FILE *f, const char *s) {
  fputs("<<\"", f);
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
    else if (ch < 0x20 || ch >= 0x7f) fprintf(f, "\\%03o", ch);
    else fputc(ch, f);
  }
  fputs("\">>", f);
}

static void erl_term(FILE *f, const json_t *v) {
  switch (json_typeof(v)) {
    case JSON_OBJECT: {
      const char *k;
      json_t *x;
      bool first = true;
      fputs("#{", f);
      json_object_foreach((json_t *)v, k, x) {
        if (!first) fputs(", ", f);
        first = false;
        if (atom_safe(k) || all_digits(k)) fputs(k, f);
        else erl_string(f, k);
        fputs(" => ", f);
        erl_term(f, x);
      }
      fputs("}", f);
      break;
    }
    case JSON_ARRAY: {
      fputs("[", f);
      for (size_t i = 0; i < json_array_size(v); i++) {
        if (i) fputs(", ", f);
        erl_term(f, json_array_get(v, i));
      }
      fputs("]", f);
      break;
    }
    case JSON_STRING: erl_string(f, json_string_value(v)); break;
    case JSON_INTEGER: fprintf(f, "%lld", (long long)json_integer_value(v)); break;
    case JSON_REAL: {
      /* Erlang floats need a digit on both sides of the point: 3.0, not 3 or 3e5. Three decimals keep a
       * latency's nanoseconds; a value below 0.001 (a --rate of 1e-7) keeps its digits in %e's form
       * (1.000000e-07), which Erlang reads too, rather than becoming 0.000. */
      char b[64];
      double x = json_real_value(v);
      snprintf(b, sizeof b, x != 0.0 && fabs(x) < 0.001 ? "%.6e" : "%.3f", x);
      fputs(b, f);
      break;
    }
    case JSON_TRUE: fputs("true", f); break;
    case JSON_FALSE: fputs("false", f); break;
    case JSON_NULL: fputs("undefined", f); break;
  }
}

int cbl_report_files(const cbl_run_t *run) {
  const cbl_config_t *cfg = run->cfg;
  if (!cfg->json_path && !cfg->erl_path) return 0;
  json_t *root = build(run);
  int rc = 0;
  if (cfg->json_path && json_dump_file(root, cfg->json_path, JSON_INDENT(1) | JSON_REAL_PRECISION(10)) != 0) {
    fprintf(stderr, "cbench-load: cannot write %s\n", cfg->json_path);
    rc = -1;
  }
  if (cfg->erl_path) {
    /* The histograms go to the term file only: the JSON stays a summary a person reads. */
    json_object_set_new(root, "hist", hists_json(run));
    FILE *f = fopen(cfg->erl_path, "w");
    if (f) {
      erl_term(f, root);
      fputs(".\n", f);
    }
    if (!f || fclose(f) != 0) {
      fprintf(stderr, "cbench-load: cannot write %s\n", cfg->erl_path);
      rc = -1;
    }
  }
  json_decref(root);
  return rc;
}

/* ---- the summary ---- */

static void row(FILE *f, const char *name, const cbl_hist_t *h) {
  fprintf(f, "  %-12s", name);
  const double ps[] = {50, 90, 99, 99.9, 99.99};
  for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) fprintf(f, " %10.1f", us(cbl_hist_percentile(h, ps[i])));
  fprintf(f, " %10.1f %10.1f\n", us(h->max), cbl_hist_mean(h) / 1000.0);
}

void cbl_report_text(const cbl_run_t *run, void *file) {
  FILE *f = file;
  const cbl_config_t *cfg = run->cfg;
  const cbl_result_t *r = &run->total;
  const cbl_counts_t *c = &r->counts;
  fprintf(f, "cbench-load %s: %s, %d connection%s x depth %d%s, %d thread%s, ", cfg->url, cbl_proto_label(cfg),
          cfg->connections, cfg->connections == 1 ? "" : "s", cfg->depth, cfg->new_conn ? " (new connection per request)" : "",
          cfg->threads, cfg->threads == 1 ? "" : "s");
  if (cfg->rate > 0) fprintf(f, "open loop at %.1f req/s", cfg->rate);
  else fprintf(f, "closed loop");
  fprintf(f, ", %.2f s after a %.2f s warm-up\n", (double)cfg->duration_ns / 1e9, (double)cfg->warmup_ns / 1e9);
  fprintf(f, "  requests    %llu sent, %llu answered (%llu 2xx, %llu after the window), %llu unsent\n",
          (unsigned long long)c->sent, (unsigned long long)c->completed, (unsigned long long)c->ok,
          (unsigned long long)c->late, (unsigned long long)c->unsent);
  fprintf(f, "  rate        %.1f req/s achieved", (double)c->completed / run->elapsed_s);
  if (cfg->rate > 0) fprintf(f, " of %.1f offered (%.1f%%)", cfg->rate, 100.0 * (double)c->completed / run->elapsed_s / cfg->rate);
  fprintf(f, "\n  errors     ");
  for (int k = 0; k < CBL_ERR_KINDS; k++)
    fprintf(f, " %s %llu,", err_names[k], (unsigned long long)c->errors[k]);
  fprintf(f, " non-2xx %llu", (unsigned long long)non2xx(c));
  for (int s = 0; s < CBL_MAX_STATUS; s++)
    if (c->status[s] && (s < 200 || s >= 300)) fprintf(f, " [%d: %llu]", s, (unsigned long long)c->status[s]);
  fprintf(f, "\n  bytes       read %llu, written %llu, body %llu; %llu connections opened\n",
          (unsigned long long)c->bytes_read, (unsigned long long)c->bytes_written, (unsigned long long)c->body_bytes,
          (unsigned long long)c->connects);
  if (cfg->tls) {
    fprintf(f, "  tls         %s %s, ALPN %s; handshakes %llu full, %llu resumed (%.1f/s), %llu failed; resumption %s, "
            "verification %s\n", r->tls_version[0] ? r->tls_version : "-", r->tls_cipher[0] ? r->tls_cipher : "-",
            r->tls_alpn[0] ? r->tls_alpn : "none", (unsigned long long)c->tls_full, (unsigned long long)c->tls_resumed,
            (double)(c->tls_full + c->tls_resumed) / run->elapsed_s, (unsigned long long)c->errors[CBL_ERR_TLS],
            cfg->resume ? "on" : "off", cfg->insecure ? "off" : "on");
    if (r->tls_error[0]) fprintf(f, "  tls error   %s\n", r->tls_error);
  }
  fprintf(f, "  latency us         p50        p90        p99      p99.9     p99.99        max       mean\n");
  row(f, "corrected", &r->corrected);
  row(f, "uncorrected", &r->uncorrected);
  if (cfg->rate > 0) row(f, "send lag", &r->send_lag);
}
