/* What goes on the wire, made once per run and shared read-only by every thread: the HTTP/1.1 request bytes of
 * each path, the h2 header list of each path, the WebSocket upgrade request and the message every echo carries.
 * Per request the connections only copy or reference these. */
#include <ctype.h>
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "load.h"

static bool has_header(const cbl_config_t *cfg, const char *name) {
  for (int i = 0; i < cfg->nheaders; i++)
    if (strcasecmp(cfg->headers[i].name, name) == 0) return true;
  return false;
}

static int build_h1(cbl_wire_t *w, const cbl_config_t *cfg, int i) {
  cbl_buf_t b = {0};
  char line[512];
  int ok = 0;
  ok |= cbl_buf_append(&b, cfg->method, strlen(cfg->method));
  ok |= cbl_buf_append(&b, " ", 1);
  ok |= cbl_buf_append(&b, cfg->paths[i], strlen(cfg->paths[i]));
  ok |= cbl_buf_append(&b, " HTTP/1.1\r\n", 11);
  if (!has_header(cfg, "host")) {
    int n = snprintf(line, sizeof line, "host: %s\r\n", cfg->authority);
    ok |= cbl_buf_append(&b, line, (size_t)n);
  }
  for (int h = 0; h < cfg->nheaders; h++) {
    ok |= cbl_buf_append(&b, cfg->headers[h].name, strlen(cfg->headers[h].name));
    ok |= cbl_buf_append(&b, ": ", 2);
    ok |= cbl_buf_append(&b, cfg->headers[h].value, strlen(cfg->headers[h].value));
    ok |= cbl_buf_append(&b, "\r\n", 2);
  }
  if (cfg->new_conn && !has_header(cfg, "connection")) ok |= cbl_buf_append(&b, "connection: close\r\n", 19);
  if (cfg->body && !has_header(cfg, "content-length")) {
    int n = snprintf(line, sizeof line, "content-length: %zu\r\n", cfg->body_len);
    ok |= cbl_buf_append(&b, line, (size_t)n);
  }
  ok |= cbl_buf_append(&b, "\r\n", 2);
  if (cfg->body) ok |= cbl_buf_append(&b, cfg->body, cfg->body_len);
  if (ok) {
    free(b.p);
    return -1;
  }
  w->h1[i] = b.p;
  w->h1_len[i] = b.len;
  return 0;
}

static nghttp2_nv nv(const char *name, const char *value) {
  return (nghttp2_nv){(uint8_t *)name, (uint8_t *)value, strlen(name), strlen(value),
                      NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE};
}

static int build_h2(cbl_wire_t *w, const cbl_config_t *cfg, int i, char *content_length) {
  nghttp2_nv *a = calloc((size_t)cfg->nheaders + 5, sizeof *a);
  if (!a) return -1;
  size_t n = 0;
  const char *authority = cfg->authority;
  for (int h = 0; h < cfg->nheaders; h++)
    if (strcasecmp(cfg->headers[h].name, "host") == 0) authority = cfg->headers[h].value;
  a[n++] = nv(":method", cfg->method);
  a[n++] = nv(":scheme", "http");
  a[n++] = nv(":authority", authority);
  a[n++] = nv(":path", cfg->paths[i]);
  /* HTTP/2 field names are lowercase (RFC 9113 8.2.1); config.c keeps the names as given, lowercased here in
   * place (they were strdup'ed for this). Host and connection-specific fields do not travel over h2. */
  for (int h = 0; h < cfg->nheaders; h++) {
    char *name = (char *)cfg->headers[h].name;
    for (char *p = name; *p; p++) *p = (char)tolower((unsigned char)*p);
    if (!strcmp(name, "host") || !strcmp(name, "connection") || !strcmp(name, "keep-alive") ||
        !strcmp(name, "transfer-encoding") || !strcmp(name, "upgrade"))
      continue;
    a[n++] = nv(name, cfg->headers[h].value);
  }
  if (cfg->body && !has_header(cfg, "content-length")) a[n++] = nv("content-length", content_length);
  w->h2_nva[i] = a;
  w->h2_nvlen = n;
  return 0;
}

int cbl_wire_build(cbl_wire_t *w, const cbl_config_t *cfg) {
  memset(w, 0, sizeof *w);
  w->head = strcmp(cfg->method, "HEAD") == 0;
  int np = cfg->npaths;
  w->h1 = calloc((size_t)np, sizeof *w->h1);
  w->h1_len = calloc((size_t)np, sizeof *w->h1_len);
  w->h2_nva = calloc((size_t)np, sizeof *w->h2_nva);
  if (!w->h1 || !w->h1_len || !w->h2_nva) return -1;
  static char content_length[24];
  snprintf(content_length, sizeof content_length, "%zu", cfg->body_len);
  for (int i = 0; i < np; i++) {
    if (cfg->proto == CBL_H2C ? build_h2(w, cfg, i, content_length) : build_h1(w, cfg, i)) return -1;
  }
  if (cfg->proto == CBL_WS) {
    /* The key is fixed: a load generator has nothing to prove with a fresh nonce, and the accept value is not
     * checked (that would need SHA-1, which no library cbench already uses offers). */
    char buf[2048];
    int n = snprintf(buf, sizeof buf,
                     "GET %s HTTP/1.1\r\nhost: %s\r\nupgrade: websocket\r\nconnection: Upgrade\r\n"
                     "sec-websocket-key: Y2JlbmNoLWxvYWQta2V5IQ==\r\nsec-websocket-version: 13\r\n",
                     cfg->paths[0], cfg->authority);
    cbl_buf_t b = {0};
    int bad = cbl_buf_append(&b, buf, (size_t)n);
    for (int h = 0; h < cfg->nheaders; h++) {
      bad |= cbl_buf_append(&b, cfg->headers[h].name, strlen(cfg->headers[h].name));
      bad |= cbl_buf_append(&b, ": ", 2);
      bad |= cbl_buf_append(&b, cfg->headers[h].value, strlen(cfg->headers[h].value));
      bad |= cbl_buf_append(&b, "\r\n", 2);
    }
    bad |= cbl_buf_append(&b, "\r\n", 2);
    if (bad) return -1;
    w->ws_handshake = b.p;
    w->ws_handshake_len = b.len;
    /* Printable text (the frames are text frames, so it must be valid UTF-8): a repeating line. */
    w->ws_msg = malloc(cfg->ws_size);
    if (!w->ws_msg) return -1;
    static const char line[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_\n";
    for (size_t i = 0; i < cfg->ws_size; i++) w->ws_msg[i] = line[i % (sizeof line - 1)];
  }
  return 0;
}

void cbl_wire_free(cbl_wire_t *w, const cbl_config_t *cfg) {
  for (int i = 0; i < cfg->npaths; i++) {
    if (w->h1) free(w->h1[i]);
    if (w->h2_nva) free(w->h2_nva[i]);
  }
  free(w->h1);
  free(w->h1_len);
  free(w->h2_nva);
  free(w->ws_handshake);
  free(w->ws_msg);
}
