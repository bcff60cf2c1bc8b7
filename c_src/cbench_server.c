/* cbench-server: the engine as a standalone program. Prints one ready line, serves until SIGINT or SIGTERM,
 * then stops gracefully, prints the stats and exits 0. SIGINT or SIGTERM before the ready line (while a stub
 * file is read, say from a FIFO nobody writes) ends it at once with 128 + the signal's number. */
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cbench.h"

/* " A|B|C (default A)": the names an ENUM flag takes. */
static void enum_arg(const cb_option_t *o, char *arg, size_t cap) {
  size_t n = 0;
  for (int i = 0; o->names[i] != NULL && n < cap; i++)
    n += (size_t)snprintf(arg + n, cap - n, "%s%s", i == 0 ? " " : "|", o->names[i]);
  if (n < cap) snprintf(arg + n, cap - n, " (default %s)", o->names[o->def]);
}

/* Flags, their defaults and their ranges all come from the option table (cb_config_options()). */
static void usage(FILE *f) {
  int n;
  const cb_option_t *opts = cb_config_options(&n);
  fprintf(f, "usage: cbench-server [options]\n");
  for (int i = 0; i < n; i++) {
    const cb_option_t *o = &opts[i];
    if (o->flag == NULL) continue;
    char arg[48];
    switch (o->type) {
      case CB_OPT_BOOL: snprintf(arg, sizeof arg, " (%s: %s)", o->name, o->def ? "off" : "on"); break;
      case CB_OPT_UINT:
        if (o->flags & CB_OPT_F_UNSET)
          snprintf(arg, sizeof arg, " N (%llu..%llu, default none)", (unsigned long long)o->min,
                   (unsigned long long)o->max);
        else
          snprintf(arg, sizeof arg, " N (%llu..%llu, default %llu)", (unsigned long long)o->min,
                   (unsigned long long)o->max, (unsigned long long)o->def);
        break;
      case CB_OPT_CPUS: snprintf(arg, sizeof arg, " C,C,... (0..%llu)", (unsigned long long)o->max); break;
      case CB_OPT_HOST: snprintf(arg, sizeof arg, " HOST (default %s)", o->def_str); break;
      case CB_OPT_STRING:
        snprintf(arg, sizeof arg, strstr(o->name, "file") || strcmp(o->name, "record_to") == 0 ||
                                          strcmp(o->name, "proxy_ca") == 0 ? " FILE"
                                  : strcmp(o->name, "proxy_to") == 0 ? " URL" : " DIR");
        break;
      case CB_OPT_ENUM: enum_arg(o, arg, sizeof arg); break;
    }
    fprintf(f, "  %s%s\n      %s\n", o->flag, arg, o->doc);
  }
  fprintf(f, "  --stubs FILE\n      routes to add before serving, as JSON (docs/routes.md); given several times, "
             "every file is added, in the order given\n");
  fprintf(f, "  --version\n  --help\n");
}

/* An argument as a message may quote it: a control byte, DEL or a byte above 0x7f becomes \xNN, so that what
 * was typed (or generated) cannot act on the terminal. Cut to fit buf. */
static const char *quoted(const char *s, char *buf, size_t cap) {
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p != '\0' && o + 5 < cap; p++) {
    if (*p < 0x20 || *p >= 0x7f)
      o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", *p);
    else
      buf[o++] = (char)*p;
  }
  buf[o] = '\0';
  return buf;
}

static const cb_option_t *find_flag(const char *flag) {
  int n;
  const cb_option_t *opts = cb_config_options(&n);
  for (int i = 0; i < n; i++)
    if (opts[i].flag != NULL && strcmp(opts[i].flag, flag) == 0) return &opts[i];
  return NULL;
}

/* A decimal number, all of s. */
static int parse_num(const char *s, unsigned long long *out) {
  if (*s < '0' || *s > '9') return -1;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || *end != '\0') return -1;
  *out = v;
  return 0;
}

static int parse_cpus(const char *s, const cb_option_t *o, int *cpus, int *n) {
  *n = 0;
  while (*s) {
    char *end;
    if (*s < '0' || *s > '9') return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || v < o->min || v > o->max || *n == CB_MAX_THREADS) return -1;
    cpus[(*n)++] = (int)v;
    if (*end == ',' && end[1] != '\0') end++;
    else if (*end != '\0') return -1;
    s = end;
  }
  return *n > 0 ? 0 : -1;
}

/* Sets the option of one flag from its value. Returns 0, or -1 after printing what the flag accepts. */
static int set_flag(cb_config_t *cfg, const cb_option_t *o, const char *v, int *cpus) {
  unsigned long long n;
  char q[256];
  switch (o->type) {
    case CB_OPT_BOOL: return cb_config_set_uint(cfg, o, !o->def);
    case CB_OPT_UINT:
      if (parse_num(v, &n) == 0 && cb_config_set_uint(cfg, o, n) == 0) return 0;
      fprintf(stderr, "cbench-server: %s takes an integer from %llu to %llu, not '%s'\n", o->flag,
              (unsigned long long)o->min, (unsigned long long)o->max, quoted(v, q, sizeof q));
      return -1;
    case CB_OPT_CPUS:
      if (parse_cpus(v, o, cpus, &cfg->ncpus) == 0) {
        cfg->cpus = cpus;
        return 0;
      }
      fprintf(stderr, "cbench-server: %s takes a comma-separated list of 1 to %d CPU numbers from %llu to %llu, "
              "not '%s'\n", o->flag, CB_MAX_THREADS, (unsigned long long)o->min, (unsigned long long)o->max,
              quoted(v, q, sizeof q));
      return -1;
    case CB_OPT_HOST:
    case CB_OPT_STRING:
      if (strlen(v) >= o->min && strlen(v) <= o->max) {
        memcpy((char *)cfg + o->offset, &v, sizeof v);
        return 0;
      }
      fprintf(stderr, "cbench-server: %s takes %llu to %llu characters\n", o->flag, (unsigned long long)o->min,
              (unsigned long long)o->max);
      return -1;
    case CB_OPT_ENUM: {
      for (int i = 0; o->names[i] != NULL; i++)
        if (strcmp(v, o->names[i]) == 0) return cb_config_set_uint(cfg, o, (uint64_t)i);
      char names[64];
      enum_arg(o, names, sizeof names);
      fprintf(stderr, "cbench-server: %s takes one of%s, not '%s'\n", o->flag, names, quoted(v, q, sizeof q));
      return -1;
    }
  }
  return -1;
}

/* Whether the engine can bind host: an address literal or a name the resolver knows (as the engine resolves it:
 * getaddrinfo(3) with no family). */
static int resolves(const char *host) {
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
  if (getaddrinfo(host, NULL, &hints, &res) != 0) return 0;
  freeaddrinfo(res);
  return 1;
}

/* Why the start failed, in the words of the flag that caused it. Returns the exit status: 2 for an argument
 * that cannot work on this machine, 1 otherwise. */
static int start_error(const cb_config_t *cfg, int err) {
  char q[256];
  if (err == CB_EADDRINUSE && cfg->admin) {
    char qa[256];
    fprintf(stderr, "cbench-server: %s:%d or the admin API's %s:%d is already in use\n",
            quoted(cfg->host, q, sizeof q), cfg->port, quoted(cfg->admin_host, qa, sizeof qa), cfg->admin_port);
    return 1;
  }
  if (err == CB_EADDRINUSE && cfg->tls_port >= 0) {
    fprintf(stderr, "cbench-server: %s:%d or the TLS port %d is already in use\n", quoted(cfg->host, q, sizeof q),
            cfg->port, cfg->tls_port);
    return 1;
  }
  if (err == CB_EADDRINUSE) {
    fprintf(stderr, "cbench-server: %s:%d is already in use\n", quoted(cfg->host, q, sizeof q), cfg->port);
    return 1;
  }
  if ((cfg->tls || cfg->tls_port >= 0) && (cfg->tls_cert_file != NULL || cfg->tls_key_file != NULL) &&
      (err == CB_ENOENT || err == CB_EACCES || err == CB_EINVAL || err == -EISDIR)) {
    char qk[256];
    fprintf(stderr, "cbench-server: --tls-cert-file %s with --tls-key-file %s: %s (both PEM: the certificate "
            "and its chain, and its unencrypted key)\n", quoted(cfg->tls_cert_file ? cfg->tls_cert_file : "", q,
            sizeof q), quoted(cfg->tls_key_file ? cfg->tls_key_file : "", qk, sizeof qk), cb_strerror(err));
    return 2;
  }
  if (cfg->proxy_to != NULL && err == CB_EINVAL && cb_error_detail()->field != CB_FIELD_NONE) {
    const cb_error_detail_t *d = cb_error_detail();
    fprintf(stderr, "cbench-server: --proxy-to %s: %s: %s \"%s\" (docs/record.md)\n", quoted(cfg->proxy_to, q, sizeof q),
            d->field_name, d->why_name, d->text);
    return 2;
  }
  if (err == CB_EAI_NONAME) {
    /* The engine says only that a name did not resolve. The admin listener starts after the data listener, so
     * with --admin on either host may be the one: the data host is to blame only when it does not resolve. */
    int admin = cfg->admin && resolves(cfg->host);
    fprintf(stderr, "cbench-server: %s %s does not resolve: give an address literal (127.0.0.1, ::1) "
            "or a name the resolver knows\n", admin ? "--admin-host" : "--host",
            quoted(admin ? cfg->admin_host : cfg->host, q, sizeof q));
    return 2;
  }
  if (err == CB_ETHREADS && cfg->ncpus > 0) {
    int allowed[CB_MAX_THREADS];
    int n = cb_cpus_allowed(allowed, CB_MAX_THREADS);
    fprintf(stderr, "cbench-server: cannot pin the workers to --cpus");
    for (int i = 0; i < cfg->ncpus; i++) fprintf(stderr, "%c%d", i ? ',' : ' ', cfg->cpus[i]);
    fprintf(stderr, ": this process may run on CPUs");
    for (int i = 0; i < n && i < CB_MAX_THREADS; i++) fprintf(stderr, "%c%d", i ? ',' : ' ', allowed[i]);
    fprintf(stderr, "\n");
    return 2;
  }
  fprintf(stderr, "cbench-server: cannot start: %s (%s)\n", cb_strerror(err), cb_err_name(err));
  return 1;
}

/* The signals: one thread waits for SIGINT and SIGTERM from the first line of main on (every other thread has
 * them blocked, the workers included, since they inherit the mask). Before the ready line a signal ends the
 * process at once, whatever main is blocked in (open(2) of a FIFO, a start that takes long); after it, main is
 * woken to stop gracefully. */
static pthread_mutex_t sig_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sig_cv = PTHREAD_COND_INITIALIZER;
static int serving, got_signal;

static void *signal_thread(void *arg) {
  const sigset_t *set = arg;
  for (;;) {
    int sig = 0;
    if (sigwait(set, &sig) != 0) continue;
    pthread_mutex_lock(&sig_mu);
    if (!serving) {
      static const char msg[] = "cbench-server: stopped by a signal before it was ready\n";
      ssize_t w = write(2, msg, sizeof msg - 1);
      (void)w;
      _exit(128 + sig);
    }
    got_signal = sig;
    pthread_cond_signal(&sig_cv);
    pthread_mutex_unlock(&sig_mu);
  }
  return NULL;
}

/* Blocks SIGINT and SIGTERM in this thread (and so in every thread it starts) and starts the thread that
 * waits for them. Returns 0, or -1 (the signals then keep their default action: they end the process). */
static int take_signals(void) {
  static sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0) return -1;
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int err = pthread_create(&t, &attr, signal_thread, &set);
  pthread_attr_destroy(&attr);
  if (err != 0) {
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    return -1;
  }
  return 0;
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
  if (s->h2_parked + s->h2_woken > 0)
    printf("  h2 sessions: parked %llu, woken %llu\n", (unsigned long long)s->h2_parked,
           (unsigned long long)s->h2_woken);
  printf("  errors: 400 %llu, 404 %llu, 405 %llu, 413 %llu, 431 %llu, timeouts %llu, resets %llu, h2 %llu, "
         "accept backoffs %llu, faults %llu, handler 503 %llu, handler 504 %llu, handler overflows %llu\n",
         (unsigned long long)s->status_400, (unsigned long long)s->status_404,
         (unsigned long long)s->status_405, (unsigned long long)s->status_413,
         (unsigned long long)s->status_431, (unsigned long long)s->timeouts, (unsigned long long)s->resets,
         (unsigned long long)s->h2_errors, (unsigned long long)s->accept_backoffs, (unsigned long long)s->faults,
         (unsigned long long)s->handler_unavailable, (unsigned long long)s->handler_timeouts,
         (unsigned long long)s->handler_overflows);
  if (s->recorded + s->recorded_duplicates + s->record_skipped > 0)
    printf("  recorded: %llu stubs, %llu duplicates, %llu skipped\n", (unsigned long long)s->recorded,
           (unsigned long long)s->recorded_duplicates, (unsigned long long)s->record_skipped);
  printf("  tls: handshakes failed %llu, refused %llu; kernel TLS %llu\n",
         (unsigned long long)s->tls_handshakes_failed, (unsigned long long)s->tls_handshakes_refused,
         (unsigned long long)s->tls_ktls);
  if (s->tls_handshakes_full + s->tls_handshakes_resumed > 0)
    printf("  tls handshakes: full %llu, resumed %llu\n", (unsigned long long)s->tls_handshakes_full,
           (unsigned long long)s->tls_handshakes_resumed);
  if (s->proxy_requests > 0) /* proxy stubs (docs/proxy.md) */
    printf("  proxy: requests %llu, upstream connects %llu, reused %llu, 502 %llu, 504 %llu\n",
           (unsigned long long)s->proxy_requests, (unsigned long long)s->proxy_upstream_connects,
           (unsigned long long)s->proxy_upstream_reused, (unsigned long long)s->proxy_502,
           (unsigned long long)s->proxy_504);
}

/* Writes n bytes of data to $TMPDIR/cbench-WHAT-PID.pem; path gets the name. 0, or -1 with errno. */
static int write_tmp(const char *what, const char *data, size_t n, char *path, size_t cap) {
  const char *tmp = getenv("TMPDIR");
  snprintf(path, cap, "%s/cbench-%s-%d.pem", tmp && *tmp ? tmp : "/tmp", what, (int)getpid());
  FILE *f = fopen(path, "w");
  if (f == NULL) return -1;
  int ok = fwrite(data, 1, n, f) == n;
  if (fclose(f) != 0) ok = 0;
  return ok ? 0 : -1;
}

/* Writes the server's made CA (cb_server_tls_ca) to $TMPDIR/cbench-ca-PID.pem: path gets the name (empty when the
 * server made none: the user's certificate). 0, or -1 with errno. */
static int write_ca(cb_server_t *srv, char *path, size_t cap) {
  char pem[16384];
  int n = cb_server_tls_ca(srv, pem, sizeof pem);
  if (n < 0) return 0;
  return write_tmp("ca", pem, (size_t)n, path, cap);
}

/* With --tls-client-auth: a client certificate issued by the server's client CA (CN "cbench client") and its key,
 * in $TMPDIR/cbench-client-PID.pem and $TMPDIR/cbench-client-key-PID.pem, for curl --cert and --key. 0, or -1
 * with errno (the path that failed in cert_path or key_path). */
static int write_client_cert(cb_server_t *srv, char *cert_path, char *key_path, size_t cap) {
  char cert[8192], key[8192];
  if (cb_server_tls_client_cert(srv, "cbench client", cert, sizeof cert, key, sizeof key) != 0) {
    errno = ENOMEM;
    return -1;
  }
  if (write_tmp("client", cert, strlen(cert), cert_path, cap) != 0) return -1;
  return write_tmp("client-key", key, strlen(key), key_path, cap);
}

int main(int argc, char **argv) {
  if (take_signals() != 0) {
    fprintf(stderr, "cbench-server: cannot start the signal thread\n");
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);
  cb_config_t cfg;
  cb_config_init(&cfg);
  static int cpus[CB_MAX_THREADS];
  /* Every --stubs file, in the order given: each is added whole or not at all, and a later file's stubs are
   * newer (they win a tie, docs/routes.md). They are kept at the front of argv's own array, which the loop below reads left to
   * right: a --stubs takes two slots and keeps one, so a slot is written only after it was read. */
  char **stubs = argv + 1;
  int nstubs = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    }
    if (strcmp(a, "--stubs") == 0) { /* not an engine option: the CLI adds the stubs after the start */
      if (i + 1 == argc) {
        fprintf(stderr, "cbench-server: %s needs a value\n", a);
        usage(stderr);
        return 2;
      }
      stubs[nstubs++] = argv[++i];
      continue;
    }
    if (strcmp(a, "--version") == 0) {
      printf("cbench-server %s\n", cb_version());
      return 0;
    }
    const cb_option_t *o = find_flag(a);
    if (o == NULL) {
      char q[256];
      fprintf(stderr, "cbench-server: unknown argument: %s\n", quoted(a, q, sizeof q));
      usage(stderr);
      return 2;
    }
    const char *v = NULL;
    if (o->type != CB_OPT_BOOL) {
      if (i + 1 == argc) {
        fprintf(stderr, "cbench-server: %s needs a value\n", a);
        usage(stderr);
        return 2;
      }
      v = argv[++i];
    }
    if (set_flag(&cfg, o, v, cpus) != 0) {
      usage(stderr);
      return 2;
    }
    /* --admin-port and --admin-host turn the admin API on as --admin does. */
    if (strncmp(o->name, "admin_", 6) == 0) cfg.admin = 1;
  }

  /* The proxy's own checks come at start; the scheme is the CLI's to say (docs/record.md). */
  int https = cfg.proxy_to != NULL && strncmp(cfg.proxy_to, "https://", 8) == 0;
  if (cfg.proxy_to != NULL && strncmp(cfg.proxy_to, "http://", 7) != 0 && !https) {
    char q[256];
    fprintf(stderr, "cbench-server: --proxy-to takes http[s]://HOST:PORT[/prefix], not '%s'\n",
            quoted(cfg.proxy_to, q, sizeof q));
    usage(stderr);
    return 2;
  }
  if (!https && (cfg.proxy_ca != NULL || cfg.proxy_insecure)) {
    fprintf(stderr, "cbench-server: --proxy-ca and --proxy-insecure go with an https:// --proxy-to\n");
    usage(stderr);
    return 2;
  }
  if (cfg.proxy_to == NULL && cfg.proxy_protocol != CB_PROXY_HTTP1) {
    fprintf(stderr, "cbench-server: --proxy-protocol goes with --proxy-to\n");
    usage(stderr);
    return 2;
  }
  /* Pipelining is HTTP/1.1's in cleartext (the engine refuses the rest as a conflict; said here as usage). */
  if (cfg.proxy_pipeline > 1 && (cfg.proxy_to == NULL || https || cfg.proxy_protocol != CB_PROXY_HTTP1)) {
    fprintf(stderr, "cbench-server: --proxy-pipeline above 1 goes with an http:// --proxy-to and --proxy-protocol "
            "http1\n");
    usage(stderr);
    return 2;
  }
  /* A certificate or a client-auth mode for a server without TLS would be ignored by the engine: the user meant
   * TLS and would get a cleartext listener. (--tls-client-auth none is the default, so it goes anywhere.) */
  if (!cfg.tls && cfg.tls_port < 0 &&
      (cfg.tls_cert_file != NULL || cfg.tls_key_file != NULL || cfg.tls_client_auth != CB_TLS_CLIENT_AUTH_NONE)) {
    fprintf(stderr, "cbench-server: --tls-cert-file, --tls-key-file and --tls-client-auth go with --tls or "
            "--tls-port\n");
    usage(stderr);
    return 2;
  }
  if (cfg.proxy_ca != NULL && cfg.proxy_insecure) {
    fprintf(stderr, "cbench-server: --proxy-ca or --proxy-insecure, not both\n");
    usage(stderr);
    return 2;
  }

  /* Combinations no single flag can judge (--no-h1 with --no-h2: nothing left to serve) are usage errors too. */
  const cb_option_t *bad = NULL;
  if (cb_config_check(&cfg, &bad) != 0 && bad != NULL && bad->type == CB_OPT_BOOL) {
    fprintf(stderr, "cbench-server: %s leaves nothing to serve with the other protocol off\n", bad->flag);
    usage(stderr);
    return 2;
  }

  cb_server_t *srv;
  int err = cb_server_start(&cfg, &srv);
  if (err) return start_error(&cfg, err);
  for (int k = 0; k < nstubs; k++) {
    char msg[1024];
    if (cb_server_stubs_file(srv, stubs[k], msg, sizeof msg) < 0) {
      fprintf(stderr, "cbench-server: %s\n", msg);
      cb_server_stop(srv);
      return 2;
    }
  }
  /* The test CA a TLS server made, in a file a client can be given (curl --cacert), removed at exit. */
  char ca_path[4096] = "";
  int tls_port = cb_server_tls_port(srv);
  if (tls_port > 0 && write_ca(srv, ca_path, sizeof ca_path) != 0) {
    fprintf(stderr, "cbench-server: cannot write the TLS CA to %s: %s\n", ca_path, strerror(errno));
    cb_server_stop(srv);
    return 1;
  }
  char client_path[4096] = "", client_key_path[4096] = "";
  if (cfg.tls && cfg.tls_client_auth != CB_TLS_CLIENT_AUTH_NONE &&
      write_client_cert(srv, client_path, client_key_path, sizeof client_path) != 0) {
    fprintf(stderr, "cbench-server: cannot write a TLS client certificate to %s: %s\n",
            client_key_path[0] ? client_key_path : client_path, strerror(errno));
    if (ca_path[0]) unlink(ca_path);
    if (client_path[0]) unlink(client_path);
    cb_server_stop(srv);
    return 1;
  }
  const char *host = cfg.host;
  int v6 = strchr(host, ':') != NULL;
  int threads = cb_server_threads(srv);
  /* From the ready line on, a signal is a graceful stop (a signal that came before has ended the process). */
  pthread_mutex_lock(&sig_mu);
  serving = 1;
  pthread_mutex_unlock(&sig_mu);
  /* The first URL keeps the line's old shape (scripts read the port before " with"); a TLS port of its own follows
   * on the same line. */
  int tls_only = cfg.tls && cfg.tls_port < 0;
  printf("cbench-server listening on %s://%s%s%s:%d with %d thread%s", tls_only ? "https" : "http", v6 ? "[" : "",
         host, v6 ? "]" : "", cb_server_port(srv), threads, threads == 1 ? "" : "s");
  if (cfg.tls_port >= 0) printf(", TLS on https://%s%s%s:%d", v6 ? "[" : "", host, v6 ? "]" : "", tls_port);
  printf("\n");
  if (ca_path[0]) printf("cbench-server TLS CA in %s\n", ca_path);
  if (tls_port > 0) {
    char why[256];
    if (cb_server_ktls(srv, why, sizeof why) == 1)
      printf("cbench-server kernel TLS tried after each handshake (the kernel offers the tls ULP)\n");
    else
      printf("cbench-server kernel TLS off: %s\n", why);
  }
  if (client_path[0])
    printf("cbench-server TLS client certificate in %s, its key in %s\n", client_path, client_key_path);
  if (cfg.admin) {
    int a6 = strchr(cfg.admin_host, ':') != NULL;
    printf("cbench-server admin API on http://%s%s%s:%d\n", a6 ? "[" : "", cfg.admin_host, a6 ? "]" : "",
           cb_server_admin_port(srv));
  }
  if (cfg.proxy_to != NULL) {
    char q[256], qr[256];
    printf("cbench-server proxies what no stub answers to %s%s%s\n", quoted(cfg.proxy_to, q, sizeof q),
           cfg.record_to ? ", recording to " : "", cfg.record_to ? quoted(cfg.record_to, qr, sizeof qr) : "");
  }
  fflush(stdout);
  pthread_mutex_lock(&sig_mu);
  while (got_signal == 0) pthread_cond_wait(&sig_cv, &sig_mu);
  pthread_mutex_unlock(&sig_mu);
  /* --record-to: the recordings are written before the stop (an exchange still in flight then is not in them). */
  int status = 0;
  if (cfg.record_to != NULL) {
    char msg[1024], q[256];
    int n = cb_server_save_stubs(srv, cfg.record_to, msg, sizeof msg);
    if (n >= 0) {
      printf("cbench-server recorded %d stub%s to %s\n", n, n == 1 ? "" : "s", quoted(cfg.record_to, q, sizeof q));
    } else {
      fprintf(stderr, "cbench-server: cannot save the recordings: %s\n", quoted(msg, q, sizeof q));
      status = 1;
    }
  }
  /* The stats once the graceful stop is over, so that what finished while draining is counted. */
  cb_stats_t stats;
  cb_route_counts_t *counts = NULL;
  if (cb_server_route_counts(srv, &counts) != 0) counts = NULL;
  cb_server_stop_stats(srv, &stats);
  if (ca_path[0]) unlink(ca_path);
  if (client_path[0]) unlink(client_path);
  if (client_key_path[0]) unlink(client_key_path);
  print_stats(&stats, counts);
  cb_route_counts_free(counts);
  return status;
}
