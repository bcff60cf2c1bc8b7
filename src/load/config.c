/* cbench-load's command line: the URL, the options, the body file. Every bad value gets a message naming it;
 * the caller prints the usage and exits 2. */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <llhttp.h>
#include <nghttp2/nghttp2.h>
#include <openssl/crypto.h>
#include <unistd.h>

#include "load.h"

void cbl_usage(void *file) {
  fprintf((FILE *)file,
          "usage: cbench-load [options] URL\n"
          "  URL                     http://HOST[:PORT][/PATH] (ws://... for --proto ws); https:// and\n"
          "                          wss:// for TLS\n"
          "  -p, --proto P           h1 (default), h2c (prior knowledge; over https://, h2 by ALPN; h2 is\n"
          "                          the same option) or ws (WebSocket echo)\n"
          "  -c, --connections N     connections in all (default 10)\n"
          "  -m, --depth N           per connection: HTTP/1.1 pipelining depth, h2c streams, WebSocket\n"
          "                          messages in flight (default 1)\n"
          "      --new-conn          HTTP/1.1, h2c and h2: a new connection for every request (over\n"
          "                          https://, a TLS handshake per request: resumed unless --no-resume)\n"
          "  -t, --threads N         threads, each with its own loop (default 1; at most one per connection)\n"
          "      --cpus LIST         pin thread i to the i-th CPU of LIST (0,1 or 0-3), round robin; each\n"
          "                          one this process may run on, below 1024 (CPU_SETSIZE)\n"
          "  -d, --duration S        measured seconds (default 10; decimals allowed)\n"
          "  -w, --warmup S          seconds before the measured window (default 0)\n"
          "  -r, --rate R            open loop: R requests per second in all, on a schedule spread evenly\n"
          "                          over the connections; latency is measured from the intended send time\n"
          "                          (corrected) and from the actual send (uncorrected). Without -r: closed\n"
          "                          loop (every connection keeps its depth of requests in flight)\n"
          "  -X, --method M          request method (default GET, or POST with a body)\n"
          "      --path P            a path to request; repeat for a list used round robin (default: the\n"
          "                          URL's path); visible ASCII only, as in the URL: percent-encode the rest\n"
          "  -H, --header 'N: V'     an extra request header (repeatable)\n"
          "  -b, --body-file FILE    the request body\n"
          "      --timeout S         an answer later than this is a timeout error (default 10)\n"
          "      --spin-us N         open loop: poll instead of sleeping when the next send is due within\n"
          "                          N microseconds (default 100; 0: always sleep on the timer)\n"
          "      --ws-size N         WebSocket message size in bytes (default 1024)\n"
          "TLS (https://, wss://): ALPN offers h2 for -p h2, http/1.1 otherwise; SNI is the URL's host\n"
          "      --cacert FILE       verify the server with the CA certificates (PEM) in FILE (default: the\n"
          "                          system's); the server's name is checked against the URL's host\n"
          "  -k, --insecure          do not verify the server's certificate\n"
          "      --no-resume         never resume a TLS session: every handshake a full one (default: each\n"
          "                          connection offers the last session the server gave it)\n"
          "      --tls-version V     1.2 or 1.3 only (default: either)\n"
          "      --ciphers LIST      TLS 1.2 ciphers (OpenSSL's list format)\n"
          "      --tls13-ciphers L   TLS 1.3 cipher suites (e.g. TLS_AES_128_GCM_SHA256)\n"
          "      --connect-to H[:P]  connect to H (and P) instead of the URL's host; the URL's host is still\n"
          "                          the SNI, the name verified and the Host header\n"
          "      --json FILE         write the results as JSON\n"
          "      --erl FILE          write the results as an Erlang term (file:consult/1)\n"
          "  -q, --quiet             no summary on stdout\n"
          "  -V, --version           the version and the libraries'\n"
          "  -h, --help              this text\n"
          "Exit status: 0 after a run with at least one request answered 2xx (or echoed), 3 after a run\n"
          "with none (the results are written all the same), 1 when it could not run, 2 for bad arguments.\n");
}

const char *cbl_proto_label(const cbl_config_t *cfg) {
  return cfg->tls && cfg->proto == CBL_H2C ? "h2" : cbl_proto_name(cfg->proto);
}

const char *cbl_proto_name(cbl_proto_id_t p) {
  switch (p) {
    case CBL_H1: return "h1";
    case CBL_H2C: return "h2c";
    case CBL_WS: return "ws";
  }
  return "?";
}

static int bad(const char *fmt, const char *arg) {
  fprintf(stderr, "cbench-load: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n");
  return -1;
}

static int parse_int(const char *s, long min, long max, int *out) {
  if (s == NULL || *s == '\0') return -1;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || v < min || v > max) return -1;
  *out = (int)v;
  return 0;
}

/* Seconds with decimals, as nanoseconds. */
static int parse_secs(const char *s, double min, double max, uint64_t *out) {
  if (s == NULL || *s == '\0') return -1;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || *end || !isfinite(v) || v < min || v > max) return -1;
  *out = (uint64_t)llround(v * 1e9);
  return 0;
}

static int parse_cpus(const char *s, int *cpus, int *n) {
  *n = 0;
  while (*s) {
    char *end;
    if (!isdigit((unsigned char)*s)) return -1;
    long a = strtol(s, &end, 10), b = a;
    if (*end == '-') {
      if (!isdigit((unsigned char)end[1])) return -1;
      b = strtol(end + 1, &end, 10);
    }
    if (a < 0 || b < a || b > INT_MAX) return -1; /* the CPUs themselves: cpus_pinnable */
    for (long v = a; v <= b; v++) {
      if (*n == CBL_MAX_THREADS) return -1;
      cpus[(*n)++] = (int)v;
    }
    if (*end == ',') end++;
    else if (*end != '\0') return -1;
    s = end;
  }
  return *n > 0 ? 0 : -1;
}

/* Every CPU of --cpus must be one a thread can be pinned to, on the machine the program runs on (cbench:load/2
 * over several nodes runs it on each, so this is where the list can be judged): one a CPU set can hold (below
 * CPU_SETSIZE, on any machine) and one this process may run on (its affinity, as taskset or a cgroup set it).
 * Anything else is a bad argument, named with the reason, rather than a thread left unpinned after a warning. */
static int cpus_pinnable(const cbl_config_t *cfg, const char *arg) {
  cpu_set_t allowed;
  bool known = sched_getaffinity(0, sizeof allowed, &allowed) == 0;
  for (int i = 0; i < cfg->ncpus; i++) {
    int cpu = cfg->cpus[i];
    if (cpu >= CPU_SETSIZE) {
      fprintf(stderr, "cbench-load: bad --cpus '%s': CPU %d is over %d, the highest a CPU set holds\n", arg, cpu,
              CPU_SETSIZE - 1);
      return -1;
    }
    if (known && !CPU_ISSET(cpu, &allowed)) {
      fprintf(stderr, "cbench-load: bad --cpus '%s': CPU %d is not one this process may run on (CPUs", arg, cpu);
      for (int c = 0, first = 1; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &allowed)) continue;
        fprintf(stderr, "%c%d", first ? ' ' : ',', c);
        first = 0;
      }
      fprintf(stderr, ")\n");
      return -1;
    }
  }
  return 0;
}

static bool is_token(const char *s, size_t n) {
  if (n == 0) return false;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)s[i]) && !strchr("!#$%&'*+-.^_`|~", s[i])) return false;
  return true;
}

/* A request target as it goes on the request line (RFC 9112 3.2, RFC 3986: visible US-ASCII, so no space or
 * control to end the line early or add a field, and what the results files name is valid UTF-8). */
static bool is_target(const char *s) {
  if (*s != '/') return false;
  for (; *s; s++)
    if ((unsigned char)*s <= 0x20 || (unsigned char)*s >= 0x7f) return false;
  return true;
}

static bool is_field_value(const char *s) {
  for (; *s; s++)
    if (*s == '\r' || *s == '\n' || *s == '\0') return false;
  return true;
}

/* "http://host[:port][/path]" (https, ws, wss): host (IPv6 in brackets), port, path; the address to connect to
 * is the URL's host and port's, or connect_to's ("host[:port]", a port 0 keeping the URL's). */
static int parse_url(cbl_config_t *cfg, const char *url, const char **path, const char *connect_to) {
  if (strlen(url) >= sizeof cfg->url) return bad("URL too long", "");
  snprintf(cfg->url, sizeof cfg->url, "%s", url);
  const char *p;
  int def_port = 80;
  if (strncmp(url, "http://", 7) == 0) {
    p = url + 7;
  } else if (strncmp(url, "https://", 8) == 0) {
    p = url + 8;
    cfg->tls = true;
    def_port = 443;
  } else if (strncmp(url, "ws://", 5) == 0) {
    p = url + 5;
    cfg->proto = CBL_WS;
  } else if (strncmp(url, "wss://", 6) == 0) {
    p = url + 6;
    cfg->proto = CBL_WS;
    cfg->tls = true;
    def_port = 443;
  } else {
    return bad("unsupported URL '%s' (http://HOST[:PORT]/PATH, https://, ws:// or wss://...)", url);
  }
  const char *hend;
  if (*p == '[') {
    const char *rb = strchr(p, ']');
    if (!rb) return bad("bad IPv6 host in '%s'", url);
    if ((size_t)(rb - p - 1) >= sizeof cfg->host) return bad("host too long in '%s'", url);
    memcpy(cfg->host, p + 1, (size_t)(rb - p - 1));
    cfg->host[rb - p - 1] = '\0';
    hend = rb + 1;
  } else {
    hend = p + strcspn(p, ":/");
    if (hend == p || (size_t)(hend - p) >= sizeof cfg->host) return bad("no host in '%s'", url);
    memcpy(cfg->host, p, (size_t)(hend - p));
    cfg->host[hend - p] = '\0';
  }
  cfg->port = def_port;
  const char *rest = hend;
  if (*rest == ':') {
    char port[8];
    size_t n = strcspn(rest + 1, "/");
    if (n == 0 || n >= sizeof port) return bad("bad port in '%s'", url);
    memcpy(port, rest + 1, n);
    port[n] = '\0';
    if (parse_int(port, 1, 65535, &cfg->port)) return bad("bad port in '%s'", url);
    rest += 1 + n;
  }
  if (*rest != '\0' && *rest != '/') return bad("bad URL '%s'", url);
  if (*rest && !is_target(rest))
    return bad("bad path in '%s' (visible ASCII characters only: percent-encode the others)", url);
  *path = *rest ? rest : "/";
  /* The authority as sent: the URL's, so a name-based server sees what it expects. */
  snprintf(cfg->authority, sizeof cfg->authority, "%.*s", (int)(rest - p), p);
  char chost[256];
  int cport = cfg->port;
  snprintf(chost, sizeof chost, "%s", cfg->host);
  if (connect_to) {
    /* host, host:port, [v6] or [v6]:port */
    const char *h = connect_to, *colon;
    size_t hl;
    if (*h == '[') {
      const char *rb = strchr(h, ']');
      if (!rb) return bad("bad --connect-to '%s' (HOST[:PORT])", connect_to);
      h++;
      hl = (size_t)(rb - h);
      colon = rb[1] == ':' ? rb + 1 : rb[1] ? NULL : rb + 1;
      if (!colon) return bad("bad --connect-to '%s' (HOST[:PORT])", connect_to);
    } else {
      colon = strchr(h, ':');
      hl = colon ? (size_t)(colon - h) : strlen(h);
    }
    if (hl == 0 || hl >= sizeof chost) return bad("bad --connect-to '%s' (HOST[:PORT])", connect_to);
    memcpy(chost, h, hl);
    chost[hl] = '\0';
    if (colon && *colon == ':' && parse_int(colon + 1, 1, 65535, &cport))
      return bad("bad --connect-to '%s' (HOST[:PORT])", connect_to);
  }
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
  char port_s[8];
  snprintf(port_s, sizeof port_s, "%d", cport);
  int e = getaddrinfo(chost, port_s, &hints, &ai);
  if (e != 0 || ai == NULL) {
    fprintf(stderr, "cbench-load: cannot resolve '%s': %s\n", chost, gai_strerror(e));
    return -1;
  }
  memcpy(&cfg->addr, ai->ai_addr, ai->ai_addrlen);
  freeaddrinfo(ai);
  return 0;
}

static int read_file(const char *path, char **out, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  size_t cap = 4096, n = 0;
  char *b = malloc(cap);
  size_t r;
  while (b && (r = fread(b + n, 1, cap - n, f)) > 0) {
    n += r;
    if (n == cap) {
      char *nb = realloc(b, cap *= 2);
      if (!nb) {
        free(b);
        b = NULL;
      }
      b = nb;
    }
  }
  int err = ferror(f) || !b;
  fclose(f);
  if (err) {
    free(b);
    return -1;
  }
  *out = b;
  *len = n;
  return 0;
}

enum {
  OPT_NEW_CONN = 256, OPT_CPUS, OPT_PATH, OPT_TIMEOUT, OPT_WS_SIZE, OPT_JSON, OPT_ERL, OPT_SPIN,
  OPT_CACERT, OPT_NO_RESUME, OPT_TLS_VERSION, OPT_CIPHERS, OPT_TLS13_CIPHERS, OPT_CONNECT_TO,
};

static const struct option long_opts[] = {
  {"proto", required_argument, NULL, 'p'},
  {"connections", required_argument, NULL, 'c'},
  {"depth", required_argument, NULL, 'm'},
  {"new-conn", no_argument, NULL, OPT_NEW_CONN},
  {"threads", required_argument, NULL, 't'},
  {"cpus", required_argument, NULL, OPT_CPUS},
  {"duration", required_argument, NULL, 'd'},
  {"warmup", required_argument, NULL, 'w'},
  {"rate", required_argument, NULL, 'r'},
  {"method", required_argument, NULL, 'X'},
  {"path", required_argument, NULL, OPT_PATH},
  {"header", required_argument, NULL, 'H'},
  {"body-file", required_argument, NULL, 'b'},
  {"timeout", required_argument, NULL, OPT_TIMEOUT},
  {"ws-size", required_argument, NULL, OPT_WS_SIZE},
  {"spin-us", required_argument, NULL, OPT_SPIN},
  {"cacert", required_argument, NULL, OPT_CACERT},
  {"insecure", no_argument, NULL, 'k'},
  {"no-resume", no_argument, NULL, OPT_NO_RESUME},
  {"tls-version", required_argument, NULL, OPT_TLS_VERSION},
  {"ciphers", required_argument, NULL, OPT_CIPHERS},
  {"tls13-ciphers", required_argument, NULL, OPT_TLS13_CIPHERS},
  {"connect-to", required_argument, NULL, OPT_CONNECT_TO},
  {"json", required_argument, NULL, OPT_JSON},
  {"erl", required_argument, NULL, OPT_ERL},
  {"quiet", no_argument, NULL, 'q'},
  {"help", no_argument, NULL, 'h'},
  {"version", no_argument, NULL, 'V'},
  {NULL, 0, NULL, 0},
};

int cbl_config_parse(cbl_config_t *cfg, int argc, char **argv) {
  memset(cfg, 0, sizeof *cfg);
  cfg->connections = 10;
  cfg->threads = 1;
  cfg->depth = 1;
  cfg->duration_ns = 10ull * 1000000000;
  cfg->timeout_ns = 10ull * 1000000000;
  cfg->ws_size = 1024;
  cfg->spin_ns = 100000;
  cfg->resume = true;
  int proto = -1;
  bool tls_opt = false; /* a TLS option was given: the URL must be https:// or wss:// */
  const char *connect_to = NULL;
  const char *body_file = NULL;
  cfg->paths = calloc((size_t)argc + 1, sizeof *cfg->paths);
  cfg->headers = calloc((size_t)argc + 1, sizeof *cfg->headers);
  if (!cfg->paths || !cfg->headers) return bad("out of memory%s", "");
  optind = 1;
  int o;
  while ((o = getopt_long(argc, argv, "p:c:m:t:d:w:r:X:H:b:kqhV", long_opts, NULL)) != -1) {
    switch (o) {
      case 'p':
        if (!strcmp(optarg, "h1") || !strcmp(optarg, "http1")) proto = CBL_H1;
        else if (!strcmp(optarg, "h2c") || !strcmp(optarg, "h2")) proto = CBL_H2C;
        else if (!strcmp(optarg, "ws")) proto = CBL_WS;
        else return bad("unknown protocol '%s' (h1, h2c, ws)", optarg);
        break;
      case 'c':
        if (parse_int(optarg, 1, CBL_MAX_CONNECTIONS, &cfg->connections)) return bad("bad --connections '%s'", optarg);
        break;
      case 'm':
        if (parse_int(optarg, 1, CBL_MAX_DEPTH, &cfg->depth)) return bad("bad --depth '%s'", optarg);
        break;
      case OPT_NEW_CONN: cfg->new_conn = true; break;
      case 't':
        if (parse_int(optarg, 1, CBL_MAX_THREADS, &cfg->threads)) return bad("bad --threads '%s'", optarg);
        break;
      case OPT_CPUS:
        if (parse_cpus(optarg, cfg->cpus, &cfg->ncpus)) return bad("bad --cpus '%s' (0,1 or 0-3)", optarg);
        if (cpus_pinnable(cfg, optarg)) return -1;
        break;
      case 'd':
        if (parse_secs(optarg, 0.001, 86400, &cfg->duration_ns)) return bad("bad --duration '%s'", optarg);
        break;
      case 'w':
        if (parse_secs(optarg, 0, 86400, &cfg->warmup_ns)) return bad("bad --warmup '%s'", optarg);
        break;
      case 'r': {
        char *end;
        errno = 0;
        cfg->rate = strtod(optarg, &end);
        if (errno || *end || *optarg == '\0' || !isfinite(cfg->rate) || cfg->rate < 0 || cfg->rate > 1e9)
          return bad("bad --rate '%s'", optarg);
        break;
      }
      case 'X':
        if (!is_token(optarg, strlen(optarg))) return bad("bad --method '%s'", optarg);
        cfg->method = optarg;
        break;
      case OPT_PATH:
        if (!is_target(optarg))
          return bad("bad --path '%s' (an absolute path of visible ASCII characters: percent-encode the others)",
                     optarg);
        cfg->paths[cfg->npaths++] = optarg;
        break;
      case 'H': {
        const char *colon = strchr(optarg, ':');
        if (!colon || !is_token(optarg, (size_t)(colon - optarg)) || !is_field_value(colon + 1))
          return bad("bad --header '%s' (expected 'Name: value')", optarg);
        char *name = strndup(optarg, (size_t)(colon - optarg));
        const char *v = colon + 1;
        while (*v == ' ' || *v == '\t') v++;
        cfg->headers[cfg->nheaders].name = name;
        cfg->headers[cfg->nheaders++].value = v;
        break;
      }
      case 'b': body_file = optarg; break;
      case OPT_TIMEOUT:
        if (parse_secs(optarg, 0.001, 3600, &cfg->timeout_ns)) return bad("bad --timeout '%s'", optarg);
        break;
      case OPT_WS_SIZE: {
        int n;
        if (parse_int(optarg, 1, 16 * 1024 * 1024, &n)) return bad("bad --ws-size '%s'", optarg);
        cfg->ws_size = (size_t)n;
        break;
      }
      case OPT_SPIN: {
        int n;
        if (parse_int(optarg, 0, 1000000, &n)) return bad("bad --spin-us '%s'", optarg);
        cfg->spin_ns = (uint64_t)n * 1000;
        break;
      }
      case OPT_CACERT:
        if (access(optarg, R_OK) != 0) return bad("cannot read --cacert '%s'", optarg);
        cfg->cacert = optarg;
        tls_opt = true;
        break;
      case 'k': cfg->insecure = true; tls_opt = true; break;
      case OPT_NO_RESUME: cfg->resume = false; tls_opt = true; break;
      case OPT_TLS_VERSION:
        if (!strcmp(optarg, "1.2")) cfg->tls_version = 12;
        else if (!strcmp(optarg, "1.3")) cfg->tls_version = 13;
        else return bad("bad --tls-version '%s' (1.2 or 1.3)", optarg);
        tls_opt = true;
        break;
      case OPT_CIPHERS: cfg->ciphers = optarg; tls_opt = true; break;
      case OPT_TLS13_CIPHERS: cfg->tls13_ciphers = optarg; tls_opt = true; break;
      case OPT_CONNECT_TO: connect_to = optarg; break;
      case OPT_JSON: cfg->json_path = optarg; break;
      case OPT_ERL: cfg->erl_path = optarg; break;
      case 'q': cfg->quiet = true; break;
      case 'h': cbl_usage(stdout); return 1;
      case 'V':
        printf("cbench-load %s (libuv %s, nghttp2 %s, llhttp %d.%d.%d, wslay, jansson %s, %s)\n", CBL_VERSION,
               uv_version_string(), nghttp2_version(0)->version_str, LLHTTP_VERSION_MAJOR, LLHTTP_VERSION_MINOR,
               LLHTTP_VERSION_PATCH, JANSSON_VERSION, OpenSSL_version(OPENSSL_VERSION));
        return 1;
      default: return -1; /* getopt printed what was wrong */
    }
  }
  if (optind != argc - 1) return bad(optind >= argc ? "no URL given%s" : "more than one URL ('%s')",
                                     optind >= argc ? "" : argv[optind + 1]);
  const char *url_path;
  if (parse_url(cfg, argv[optind], &url_path, connect_to)) return -1;
  if (tls_opt && !cfg->tls)
    return bad("--cacert, --insecure, --no-resume, --tls-version and the cipher lists need an https:// or wss:// URL%s", "");
  if (cfg->cacert && cfg->insecure) return bad("--cacert and --insecure: choose one%s", "");
  if (proto >= 0) {
    if (cfg->proto == CBL_WS && proto != CBL_WS) return bad("a ws:// URL needs --proto ws%s", "");
    cfg->proto = (cbl_proto_id_t)proto;
  }
  if (cfg->npaths == 0) cfg->paths[cfg->npaths++] = url_path;
  if (cfg->new_conn && cfg->proto == CBL_WS) return bad("--new-conn is for HTTP/1.1, h2c and h2, not ws%s", "");
  if (cfg->new_conn && cfg->depth != 1) return bad("--new-conn sends one request per connection: no --depth%s", "");
  if (cfg->proto == CBL_WS && (body_file || cfg->method || cfg->npaths > 1))
    return bad("--proto ws sends --ws-size messages on one path: no --body-file, --method or second --path%s", "");
  if (cfg->threads > cfg->connections) cfg->threads = cfg->connections;
  if (body_file) {
    if (read_file(body_file, &cfg->body, &cfg->body_len)) return bad("cannot read --body-file '%s'", body_file);
  }
  if (!cfg->method) cfg->method = cfg->body ? "POST" : "GET";
  return 0;
}

void cbl_config_free(cbl_config_t *cfg) {
  for (int i = 0; i < cfg->nheaders; i++) free((char *)cfg->headers[i].name);
  free(cfg->headers);
  free(cfg->paths);
  free(cfg->body);
}
