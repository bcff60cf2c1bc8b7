/* cbench-server: the engine as a standalone program. Prints one ready line, serves until SIGINT or SIGTERM,
 * then prints the stats and exits 0 after a graceful stop. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cbench.h"
#include "stub_json.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: cbench-server [--host H] [--port P] [--threads N] [--cpus 0,1,...]\n"
          "                     [--max-header-bytes N] [--max-body-bytes N]\n"
          "                     [--header-timeout-ms N] [--idle-timeout-ms N] [--stop-timeout-ms N]\n"
          "                     [--max-concurrent-streams N] [--no-h2] [--fixture-dir DIR]\n"
          "                     [--stubs FILE] [--journal N] [--journal-body-bytes N]\n"
          "defaults: --host 127.0.0.1 --port 8080 --threads <online CPUs> --max-header-bytes 16384\n"
          "          --max-body-bytes 10000000 --header-timeout-ms 10000 --idle-timeout-ms 60000\n"
          "          --stop-timeout-ms 5000 --max-concurrent-streams 128 --journal 10000\n"
          "          --journal-body-bytes 65536\n"
          "--stubs FILE: routes to add before serving, as JSON (docs/routes.md)\n");
}

/* A non-negative decimal number up to max, all of s. */
static int parse_num(const char *s, unsigned long long max, unsigned long long *out) {
  if (s == NULL || *s < '0' || *s > '9') return -1;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || *end != '\0' || v > max) return -1;
  *out = v;
  return 0;
}

static int parse_cpus(const char *s, int *cpus, int *n) {
  *n = 0;
  while (*s) {
    char *end;
    if (*s < '0' || *s > '9') return -1;
    long v = strtol(s, &end, 10);
    if (v < 0 || v > 4095 || *n == CB_MAX_THREADS) return -1;
    cpus[(*n)++] = (int)v;
    if (*end == ',') end++;
    else if (*end != '\0') return -1;
    s = end;
  }
  return *n > 0 ? 0 : -1;
}


static void print_stats(const cb_stats_t *s, const cb_route_counts_t *rc) {
  printf("cbench-server stats: conns accepted %llu open %llu closed %llu, requests %llu, bytes read %llu "
         "written %llu\n",
         (unsigned long long)s->conns_accepted, (unsigned long long)s->conns_open,
         (unsigned long long)s->conns_closed, (unsigned long long)s->requests,
         (unsigned long long)s->bytes_read, (unsigned long long)s->bytes_written);
  printf("  by route:");
  for (size_t i = 0; rc != NULL && i < rc->count; i++)
    if (rc->items[i].requests) printf(" %s %llu", rc->items[i].name.ptr, (unsigned long long)rc->items[i].requests);
  printf("\n  by protocol:");
  for (int i = 0; i < CB_PROTO_COUNT; i++)
    printf(" %s %llu/%llu", cb_proto_name(i), (unsigned long long)s->conns_by_proto[i],
           (unsigned long long)s->requests_by_proto[i]);
  printf(" (connections/requests)\n");
  printf("  errors: 400 %llu, 404 %llu, 405 %llu, 413 %llu, 431 %llu, timeouts %llu, resets %llu, h2 %llu, "
         "accept backoffs %llu\n",
         (unsigned long long)s->status_400, (unsigned long long)s->status_404,
         (unsigned long long)s->status_405, (unsigned long long)s->status_413,
         (unsigned long long)s->status_431, (unsigned long long)s->timeouts, (unsigned long long)s->resets,
         (unsigned long long)s->h2_errors, (unsigned long long)s->accept_backoffs);
}

int main(int argc, char **argv) {
  cb_config_t cfg;
  cb_config_init(&cfg);
  static int cpus[CB_MAX_THREADS];
  const char *a = NULL, *stubs = NULL;
  for (int i = 1; i < argc; i++) {
    a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    unsigned long long n;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(a, "--no-h2") == 0) {
      cfg.enable_h2 = 0;
      continue;
    } else if (v == NULL) {
      goto bad;
    } else if (strcmp(a, "--host") == 0) {
      cfg.host = v;
    } else if (strcmp(a, "--fixture-dir") == 0) {
      cfg.fixture_dir = v;
    } else if (strcmp(a, "--stubs") == 0) {
      stubs = v;
    } else if (strcmp(a, "--journal") == 0) {
      if (parse_num(v, CB_JOURNAL_MAX, &n)) goto bad;
      cfg.journal = (unsigned)n;
    } else if (strcmp(a, "--journal-body-bytes") == 0) {
      if (parse_num(v, CB_JOURNAL_BODY_MAX, &n)) goto bad;
      cfg.journal_body_bytes = (size_t)n;
    } else if (strcmp(a, "--cpus") == 0) {
      if (parse_cpus(v, cpus, &cfg.ncpus) != 0) goto bad;
      cfg.cpus = cpus;
    } else if (strcmp(a, "--port") == 0) {
      if (parse_num(v, 65535, &n)) goto bad;
      cfg.port = (int)n;
    } else if (strcmp(a, "--threads") == 0) {
      if (parse_num(v, CB_MAX_THREADS, &n) || n == 0) goto bad;
      cfg.threads = (int)n;
    } else if (strcmp(a, "--max-header-bytes") == 0) {
      if (parse_num(v, 1u << 24, &n) || n < 64) goto bad;
      cfg.max_header_bytes = (size_t)n;
    } else if (strcmp(a, "--max-body-bytes") == 0) {
      if (parse_num(v, SIZE_MAX, &n) || n == 0) goto bad;
      cfg.max_body_bytes = (size_t)n;
    } else if (strcmp(a, "--header-timeout-ms") == 0) {
      if (parse_num(v, UINT_MAX, &n) || n == 0) goto bad;
      cfg.header_timeout_ms = (unsigned)n;
    } else if (strcmp(a, "--idle-timeout-ms") == 0) {
      if (parse_num(v, UINT_MAX, &n) || n == 0) goto bad;
      cfg.idle_timeout_ms = (unsigned)n;
    } else if (strcmp(a, "--stop-timeout-ms") == 0) {
      if (parse_num(v, UINT_MAX, &n)) goto bad;
      cfg.stop_timeout_ms = (unsigned)n;
    } else if (strcmp(a, "--max-concurrent-streams") == 0) {
      if (parse_num(v, 1u << 20, &n) || n == 0) goto bad;
      cfg.h2_max_concurrent_streams = (unsigned)n;
    } else {
      goto bad;
    }
    i++;
  }

  /* Signals are taken before the workers start so that they inherit the mask and only main sees them. */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  signal(SIGPIPE, SIG_IGN);

  cb_server_t *srv;
  int err = cb_server_start(&cfg, &srv);
  if (err) {
    if (err == CB_EADDRINUSE)
      fprintf(stderr, "cbench-server: %s:%d is already in use\n", cfg.host, cfg.port);
    else
      fprintf(stderr, "cbench-server: cannot start: %s (%s)\n", cb_strerror(err), cb_err_name(err));
    return 1;
  }
  if (stubs != NULL) {
    char msg[1024];
    if (cb_stubs_json_load(srv, stubs, msg, sizeof msg) < 0) {
      fprintf(stderr, "cbench-server: %s\n", msg);
      cb_server_stop(srv);
      return 2;
    }
  }
  const char *host = cfg.host;
  int v6 = strchr(host, ':') != NULL;
  printf("cbench-server listening on http://%s%s%s:%d with %d threads\n", v6 ? "[" : "", host, v6 ? "]" : "",
         cb_server_port(srv), cb_server_threads(srv));
  fflush(stdout);

  int sig = 0;
  sigwait(&set, &sig);
  cb_stats_t stats;
  cb_route_counts_t *counts = NULL;
  cb_server_stats(srv, &stats);
  if (cb_server_route_counts(srv, &counts) != 0) counts = NULL;
  cb_server_stop(srv);
  print_stats(&stats, counts);
  cb_route_counts_free(counts);
  return 0;

bad:
  fprintf(stderr, "cbench-server: bad or incomplete argument: %s\n", a);
  usage(stderr);
  return 2;
}
