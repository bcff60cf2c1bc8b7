/* The option schema: one row per option, the single source of every bound and default.
 *
 * cb_config_init() fills the defaults from it, cb_server_start() checks a configuration against it, and the
 * programs around the library read it through cb_config_options(): cbench-server builds its flags, usage and
 * error messages from it, the NIF and the port program decode an options map by walking it, and
 * erl/cbench_schema.erl is generated from it (c_src/cbench_schema_gen.c), so the Erlang API validates with the
 * same bounds without loading the NIF. Adding an option: a field in cb_config_t, a row here, `make schema`. */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stddef.h>
#include <string.h>

#include "engine.h"

/* The names of tls_client_auth's values, in CB_TLS_CLIENT_AUTH_* order. */
static const char *const client_auth_names[] = {"none", "request", "require", NULL};
static const char *const proxy_protocol_names[] = {"http1", "h2c", NULL}; /* CB_PROXY_* */

#define FIELD(f) .offset = offsetof(cb_config_t, f), .size = sizeof(((cb_config_t *)0)->f)

static const cb_option_t options[] = {
    {.name = "host", .erl_key = "ip", .flag = "--host", .type = CB_OPT_HOST, .min = 1, .max = 63,
     .def_str = "127.0.0.1", .err = UV_EINVAL, FIELD(host),
     .doc = "address to bind: an IPv4 or IPv6 literal, or a host name (its first IPv4 address)"},
    {.name = "port", .flag = "--port", .type = CB_OPT_UINT, .min = 0, .max = 65535, .def = 8080,
     .err = UV_EINVAL, FIELD(port), .doc = "TCP port; 0 binds an ephemeral one"},
    {.name = "threads", .flag = "--threads", .type = CB_OPT_UINT, .min = 0, .max = CB_MAX_THREADS, .def = 0,
     .err = CB_ETHREADS, FIELD(threads), .doc = "worker threads; 0 = the online CPUs"},
    {.name = "cpus", .flag = "--cpus", .type = CB_OPT_CPUS, .min = 0, .max = CPU_SETSIZE - 1,
     .err = CB_ETHREADS, FIELD(cpus), .doc = "worker i is pinned to the (i mod n)-th CPU of the list"},
    {.name = "backlog", .flag = "--backlog", .type = CB_OPT_UINT, .min = 1, .max = 65535, .def = 1024,
     .err = UV_EINVAL, FIELD(backlog), .doc = "listen(2) backlog per worker"},
    {.name = "max_header_bytes", .flag = "--max-header-bytes", .type = CB_OPT_UINT, .min = 64,
     .max = 1u << 24, .def = 16384, .err = CB_ELIMIT, FIELD(max_header_bytes),
     .doc = "request line plus headers; over it: 431"},
    {.name = "max_body_bytes", .flag = "--max-body-bytes", .type = CB_OPT_UINT, .min = 1,
     .max = (uint64_t)1 << 62, .def = 10000000, .err = CB_ELIMIT, FIELD(max_body_bytes),
     .doc = "declared or received request body; over it: 413"},
    {.name = "header_timeout_ms", .flag = "--header-timeout-ms", .type = CB_OPT_UINT, .min = 1,
     .max = UINT32_MAX, .def = 10000, .err = CB_ELIMIT, FIELD(header_timeout_ms),
     .doc = "time allowed for a whole request head; then 408"},
    {.name = "idle_timeout_ms", .flag = "--idle-timeout-ms", .type = CB_OPT_UINT, .min = 1, .max = UINT32_MAX,
     .def = 60000, .err = CB_ELIMIT, FIELD(idle_timeout_ms),
     .doc = "time allowed between requests, or without progress"},
    {.name = "stop_timeout_ms", .flag = "--stop-timeout-ms", .type = CB_OPT_UINT, .min = 0, .max = UINT32_MAX,
     .def = 5000, .err = CB_ELIMIT, FIELD(stop_timeout_ms),
     .doc = "a graceful stop lets in-flight responses finish this long"},
    {.name = "enable_h2", .flag = "--no-h2", .type = CB_OPT_BOOL, .min = 0, .max = 1, .def = 1,
     .err = UV_EINVAL, FIELD(enable_h2), .doc = "serve h2c (prior knowledge and Upgrade)"},
    {.name = "enable_h1", .flag = "--no-h1", .type = CB_OPT_BOOL, .min = 0, .max = 1, .def = 1,
     .err = UV_EINVAL, FIELD(enable_h1),
     .doc = "serve HTTP/1.x; off (with h2c on): an h2c-only listener, anything but the preface gets GOAWAY"},
    {.name = "h2_max_concurrent_streams", .flag = "--max-concurrent-streams", .type = CB_OPT_UINT, .min = 1,
     .max = 1u << 20, .def = 128, .err = CB_ELIMIT, FIELD(h2_max_concurrent_streams),
     .doc = "SETTINGS_MAX_CONCURRENT_STREAMS"},
    {.name = "fixture_dir", .flag = "--fixture-dir", .type = CB_OPT_STRING, .min = 0, .max = 511,
     .err = CB_EFIXTURE, .flags = CB_OPT_F_C_ONLY, FIELD(fixture_dir),
     .doc = "write the fixture files into this directory instead of keeping them in memory"},
    {.name = "journal", .flag = "--journal", .type = CB_OPT_UINT, .min = 0, .max = CB_JOURNAL_MAX, .def = 10000,
     .err = CB_ELIMIT, FIELD(journal), .doc = "requests kept in the request journal (the newest); 0 disables it"},
    {.name = "journal_body_bytes", .flag = "--journal-body-bytes", .type = CB_OPT_UINT, .min = 0,
     .max = CB_JOURNAL_BODY_MAX, .def = 65536, .err = CB_ELIMIT, FIELD(journal_body_bytes),
     .doc = "request body bytes kept per journaled request"},
    {.name = "admin", .flag = "--admin", .type = CB_OPT_BOOL, .min = 0, .max = 1, .def = 0, .err = UV_EINVAL,
     .flags = CB_OPT_F_C_ENGINES, FIELD(admin),
     .doc = "serve the admin API (JSON: stubs, journal, verify, reset, stats) on a listener of its own"},
    {.name = "admin_port", .flag = "--admin-port", .type = CB_OPT_UINT, .min = 0, .max = 65535, .def = 0,
     .err = UV_EINVAL, .flags = CB_OPT_F_C_ENGINES, FIELD(admin_port),
     .doc = "the admin API's TCP port; 0 binds an ephemeral one"},
    {.name = "admin_host", .flag = "--admin-host", .type = CB_OPT_HOST, .min = 1, .max = 63,
     .def_str = "127.0.0.1", .err = UV_EINVAL, .flags = CB_OPT_F_C_ONLY, FIELD(admin_host),
     .doc = "address the admin API binds (anything but loopback lets other machines change the stubs)"},
    {.name = "tls", .flag = "--tls", .type = CB_OPT_BOOL, .min = 0, .max = 1, .def = 0, .err = UV_EINVAL,
     FIELD(tls),
     .doc = "the listener speaks TLS (ALPN h2 and http/1.1); certificates made at start unless given"},
    {.name = "tls_cert_file", .flag = "--tls-cert-file", .type = CB_OPT_STRING, .min = 0, .max = 4095,
     .err = UV_EINVAL, FIELD(tls_cert_file),
     .doc = "with --tls: the certificate (PEM) and its chain, instead of the made ones"},
    {.name = "tls_key_file", .flag = "--tls-key-file", .type = CB_OPT_STRING, .min = 0, .max = 4095,
     .err = UV_EINVAL, FIELD(tls_key_file),
     .doc = "with --tls-cert-file: its private key (PEM)"},
    {.name = "tls_port", .flag = "--tls-port", .type = CB_OPT_UINT, .min = 0, .max = 65535, .err = UV_EINVAL,
     .flags = CB_OPT_F_UNSET, FIELD(tls_port),
     .doc = "a TLS listener on this port beside the cleartext one (TLS on); 0 binds an ephemeral one"},
    {.name = "tls_max_handshakes", .flag = "--tls-max-handshakes", .type = CB_OPT_UINT, .min = 1, .max = 65535,
     .def = 256, .err = CB_ELIMIT, FIELD(tls_max_handshakes),
     .doc = "TLS handshakes in progress per worker; a TLS connection accepted over it is closed at once"},
    {.name = "tls_client_auth", .erl_key = "client_auth", .flag = "--tls-client-auth", .type = CB_OPT_ENUM,
     .min = 0, .max = 2, .def = CB_TLS_CLIENT_AUTH_NONE, .err = UV_EINVAL, .names = client_auth_names,
     FIELD(tls_client_auth),
     .doc = "with TLS: none, request (verify a client certificate when one is sent) or require one"},
    {.name = "close", .type = CB_OPT_BOOL, .min = 0, .max = 1, .def = 0, .err = UV_EINVAL,
     .flags = CB_OPT_F_EHTTPD_ONLY, .doc = "ehttpd only: the original ehttpd (one canned answer, then close)"},
    {.name = "proxy_to", .flag = "--proxy-to", .type = CB_OPT_STRING, .min = 8, .max = 4095, .err = UV_EINVAL,
     .flags = CB_OPT_F_C_ONLY, FIELD(proxy_to),
     .doc = "proxy every request no other stub answers to this http[s]://HOST:PORT (docs/record.md)"},
    {.name = "record_to", .flag = "--record-to", .type = CB_OPT_STRING, .min = 1, .max = 4095, .err = UV_EINVAL,
     .flags = CB_OPT_F_C_ONLY, FIELD(record_to),
     .doc = "with --proxy-to: record the exchanges as stubs, written to this file at stop (docs/record.md)"},
    {.name = "proxy_ca", .flag = "--proxy-ca", .type = CB_OPT_STRING, .min = 1, .max = 4095, .err = UV_EINVAL,
     .flags = CB_OPT_F_C_ONLY, FIELD(proxy_ca),
     .doc = "with an https:// --proxy-to: the CA file (PEM) its certificate is verified against (docs/proxy.md)"},
    {.name = "proxy_insecure", .flag = "--proxy-insecure", .type = CB_OPT_BOOL, .min = 0, .max = 1, .def = 0,
     .err = UV_EINVAL, .flags = CB_OPT_F_C_ONLY, FIELD(proxy_insecure),
     .doc = "with an https:// --proxy-to: its certificate is not verified (docs/proxy.md)"},
    {.name = "proxy_protocol", .flag = "--proxy-protocol", .type = CB_OPT_ENUM, .min = 0, .max = 1,
     .def = CB_PROXY_HTTP1, .err = UV_EINVAL, .names = proxy_protocol_names, .flags = CB_OPT_F_C_ONLY,
     FIELD(proxy_protocol),
     .doc = "with --proxy-to: the upstream's protocol, http1 or h2c (prior knowledge; docs/proxy.md)"},
    {.name = "proxy_pipeline", .flag = "--proxy-pipeline", .type = CB_OPT_UINT, .min = 0,
     .max = CB_PROXY_MAX_PIPELINE, .def = 0, .err = UV_EINVAL, .flags = CB_OPT_F_C_ONLY, FIELD(proxy_pipeline),
     .doc = "with an http:// --proxy-to over http1: the most GET and HEAD requests in flight on one upstream "
            "connection; 0 or 1: one at a time (docs/proxy.md)"},
    {.name = "max_queued_reply_bytes", .flag = "--max-queued-reply-bytes", .type = CB_OPT_UINT, .min = 1,
     .max = (uint64_t)1 << 62, .def = 16u << 20, .err = CB_ELIMIT,
     FIELD(max_queued_reply_bytes),
     .doc = "a handler's streamed answer is cut when this many of its bytes wait for a client that does not read"},
};

#define NOPTIONS ((int)(sizeof options / sizeof options[0]))

const cb_option_t *cb_config_options(int *count) {
  if (count != NULL) *count = NOPTIONS;
  return options;
}

const cb_option_t *cb_config_option(const char *name) {
  if (name == NULL) return NULL;
  for (int i = 0; i < NOPTIONS; i++)
    if (strcmp(options[i].name, name) == 0 || (options[i].erl_key && strcmp(options[i].erl_key, name) == 0))
      return &options[i];
  return NULL;
}

static int has_field(const cb_option_t *o) { return (o->flags & CB_OPT_F_EHTTPD_ONLY) == 0; }

/* A UINT, BOOL or ENUM: an integer field. */
static int is_int(const cb_option_t *o) {
  return o->type == CB_OPT_UINT || o->type == CB_OPT_BOOL || o->type == CB_OPT_ENUM;
}

/* A UINT or BOOL field as a signed value. 4-byte fields are int or unsigned; those whose bound fits an int are
 * read as int, so a negative int is seen as negative (and an unsigned over INT_MAX as negative too, which is
 * out of range either way); the others (timeouts up to UINT32_MAX) are unsigned. */
static int64_t get_field(const cb_config_t *cfg, const cb_option_t *o) {
  const char *p = (const char *)cfg + o->offset;
  if (o->size == sizeof(uint64_t)) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v > INT64_MAX ? -1 : (int64_t)v;
  }
  if (o->max <= INT_MAX) {
    int v;
    memcpy(&v, p, sizeof v);
    return v;
  }
  unsigned v;
  memcpy(&v, p, sizeof v);
  return v;
}

static int in_range(const cb_option_t *o, int64_t v) {
  if (v == -1 && (o->flags & CB_OPT_F_UNSET)) return 1;
  return v >= 0 && (uint64_t)v >= o->min && (uint64_t)v <= o->max;
}

uint64_t cb_config_get_uint(const cb_config_t *cfg, const cb_option_t *o) {
  if (cfg == NULL || o == NULL || !has_field(o) || !is_int(o)) return 0;
  int64_t v = get_field(cfg, o);
  return v < 0 ? 0 : (uint64_t)v;
}

int cb_config_set_uint(cb_config_t *cfg, const cb_option_t *o, uint64_t value) {
  if (cfg == NULL || o == NULL || !has_field(o) || !is_int(o)) return UV_EINVAL;
  if (value < o->min || value > o->max) return o->err;
  char *p = (char *)cfg + o->offset;
  if (o->size == sizeof(uint64_t)) {
    memcpy(p, &value, sizeof value);
  } else { /* int or unsigned: within bounds, the low 32 bits are the same value in both */
    uint32_t v = (uint32_t)value;
    memcpy(p, &v, sizeof v);
  }
  return 0;
}

void cb_config_init(cb_config_t *cfg) {
  memset(cfg, 0, sizeof *cfg);
  for (int i = 0; i < NOPTIONS; i++) {
    const cb_option_t *o = &options[i];
    if (!has_field(o)) continue;
    if (o->flags & CB_OPT_F_UNSET) { /* an int field: -1 */
      int unset = -1;
      memcpy((char *)cfg + o->offset, &unset, sizeof unset);
    } else if (is_int(o))
      cb_config_set_uint(cfg, o, o->def);
    else if (o->type == CB_OPT_HOST || o->type == CB_OPT_STRING)
      memcpy((char *)cfg + o->offset, &o->def_str, sizeof o->def_str);
  }
}

static int check_one(const cb_config_t *cfg, const cb_option_t *o) {
  const char *p = (const char *)cfg + o->offset;
  switch (o->type) {
    case CB_OPT_UINT:
    case CB_OPT_BOOL:
    case CB_OPT_ENUM:
      return in_range(o, get_field(cfg, o));
    case CB_OPT_HOST:
    case CB_OPT_STRING: {
      const char *s;
      memcpy(&s, p, sizeof s);
      if (s == NULL) return o->type == CB_OPT_STRING;
      size_t n = strnlen(s, o->max + 1);
      return n >= o->min && n <= o->max;
    }
    case CB_OPT_CPUS:
      if (cfg->ncpus < 0 || cfg->ncpus > CB_MAX_THREADS || (cfg->ncpus > 0 && cfg->cpus == NULL)) return 0;
      for (int i = 0; i < cfg->ncpus; i++)
        if (!in_range(o, cfg->cpus[i])) return 0;
      return 1;
  }
  return 0;
}

int cb_config_check(const cb_config_t *cfg, const cb_option_t **bad) {
  if (cfg == NULL) return UV_EINVAL;
  for (int i = 0; i < NOPTIONS; i++) {
    const cb_option_t *o = &options[i];
    if (!has_field(o) || check_one(cfg, o)) continue;
    if (bad != NULL) *bad = o;
    return o->err;
  }
  if (!cfg->enable_h1 && !cfg->enable_h2) { /* nothing left to serve */
    if (bad != NULL) *bad = cb_config_option("enable_h1");
    return UV_EINVAL;
  }
  return 0;
}

int cb_cpus_allowed(int *out, int max) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return uv_translate_sys_error(errno);
  int n = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
    if (!CPU_ISSET(cpu, &set)) continue;
    if (out != NULL && n < max) out[n] = cpu;
    n++;
  }
  return n;
}
