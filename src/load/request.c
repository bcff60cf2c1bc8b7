/* What goes on the wire, made once per run and shared read-only by every thread: the HTTP/1.1 request bytes of
 * each path, the h2 header block of each path (HPACK that touches no table: sent as it is on every stream), the WebSocket upgrade request and the message every echo carries.
 * Per request the connections only copy or reference these. */
#include <ctype.h>
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

/* HPACK (RFC 7541) without the dynamic table: every field a literal "without indexing" (section 6.2.2), its
 * name by static-table index where it has one, strings without Huffman coding, and :method GET or POST, :scheme
 * and :path "/" fully indexed. Such a block changes no table on either side, so one made here is sent as it is
 * on every stream of every connection. */
static int hp_int(cbl_buf_t *b, uint8_t first, int prefix, size_t v) {
  size_t max = ((size_t)1 << prefix) - 1;
  uint8_t out[12];
  size_t n = 0;
  if (v < max) {
    out[n++] = (uint8_t)(first | v);
  } else {
    out[n++] = (uint8_t)(first | max);
    v -= max;
    while (v >= 128) {
      out[n++] = (uint8_t)(0x80 | (v & 0x7f));
      v >>= 7;
    }
    out[n++] = (uint8_t)v;
  }
  return cbl_buf_append(b, out, n);
}

static int hp_str(cbl_buf_t *b, const char *s) {
  size_t n = strlen(s);
  return hp_int(b, 0x00, 7, n) | cbl_buf_append(b, s, n);
}

/* A literal without indexing: the name by static index (1..61), or given (index 0). */
static int hp_literal(cbl_buf_t *b, int name_index, const char *name, const char *value) {
  int bad = hp_int(b, 0x00, 4, (size_t)name_index);
  if (name_index == 0) bad |= hp_str(b, name);
  return bad | hp_str(b, value);
}

static int hp_indexed(cbl_buf_t *b, int index) { return hp_int(b, 0x80, 7, (size_t)index); }

static int build_h2(cbl_wire_t *w, const cbl_config_t *cfg, int i, const char *content_length) {
  const char *authority = cfg->authority;
  for (int h = 0; h < cfg->nheaders; h++)
    if (strcasecmp(cfg->headers[h].name, "host") == 0) authority = cfg->headers[h].value;
  cbl_buf_t b = {0};
  int bad = 0;
  /* Static table: 1 :authority, 2 :method GET, 3 :method POST, 4 :path /, 6 :scheme http. */
  if (!strcmp(cfg->method, "GET")) bad |= hp_indexed(&b, 2);
  else if (!strcmp(cfg->method, "POST")) bad |= hp_indexed(&b, 3);
  else bad |= hp_literal(&b, 2, NULL, cfg->method);
  bad |= hp_indexed(&b, 6);
  bad |= hp_literal(&b, 1, NULL, authority);
  if (!strcmp(cfg->paths[i], "/")) bad |= hp_indexed(&b, 4);
  else bad |= hp_literal(&b, 4, NULL, cfg->paths[i]);
  /* HTTP/2 field names are lowercase (RFC 9113 8.2.1); config.c keeps the names as given, lowercased here in
   * place (they were strdup'ed for this). Host and connection-specific fields do not travel over h2. */
  for (int h = 0; h < cfg->nheaders; h++) {
    char *name = (char *)cfg->headers[h].name;
    for (char *p = name; *p; p++) *p = (char)tolower((unsigned char)*p);
    if (!strcmp(name, "host") || !strcmp(name, "connection") || !strcmp(name, "keep-alive") ||
        !strcmp(name, "transfer-encoding") || !strcmp(name, "upgrade"))
      continue;
    bad |= hp_literal(&b, 0, name, cfg->headers[h].value);
  }
  if (cfg->body && !has_header(cfg, "content-length")) bad |= hp_literal(&b, 28, NULL, content_length);
  if (bad) {
    free(b.p);
    return -1;
  }
  w->h2_block[i] = b.p;
  w->h2_block_len[i] = b.len;
  return 0;
}

int cbl_wire_build(cbl_wire_t *w, const cbl_config_t *cfg) {
  memset(w, 0, sizeof *w);
  w->head = strcmp(cfg->method, "HEAD") == 0;
  int np = cfg->npaths;
  w->h1 = calloc((size_t)np, sizeof *w->h1);
  w->h1_len = calloc((size_t)np, sizeof *w->h1_len);
  w->h2_block = calloc((size_t)np, sizeof *w->h2_block);
  w->h2_block_len = calloc((size_t)np, sizeof *w->h2_block_len);
  if (!w->h1 || !w->h1_len || !w->h2_block || !w->h2_block_len) return -1;
  static char content_length[24];
  snprintf(content_length, sizeof content_length, "%zu", cfg->body_len);
  for (int i = 0; i < np; i++) {
    if (cfg->proto == CBL_H2C ? build_h2(w, cfg, i, content_length) : build_h1(w, cfg, i)) return -1;
  }
  if (cfg->proto == CBL_WS) {
    /* The key is fixed: a load generator has nothing to prove with a fresh nonce, and the accept value is not
     * checked (that would need SHA-1, which no library cbench already uses offers). */
    static const char fields[] = "\r\nupgrade: websocket\r\nconnection: Upgrade\r\n"
                                 "sec-websocket-key: Y2JlbmNoLWxvYWQta2V5IQ==\r\nsec-websocket-version: 13\r\n";
    /* Appended piece by piece, as the HTTP/1.1 requests are: a path (--path) has no length limit. */
    cbl_buf_t b = {0};
    int bad = cbl_buf_append(&b, "GET ", 4);
    bad |= cbl_buf_append(&b, cfg->paths[0], strlen(cfg->paths[0]));
    bad |= cbl_buf_append(&b, " HTTP/1.1", 9);
    /* -H host replaces the URL's authority (as in build_h1): two host fields are a 400 (RFC 9112 3.2). */
    if (!has_header(cfg, "host")) {
      bad |= cbl_buf_append(&b, "\r\nhost: ", 8);
      bad |= cbl_buf_append(&b, cfg->authority, strlen(cfg->authority));
    }
    bad |= cbl_buf_append(&b, fields, sizeof fields - 1);
    for (int h = 0; h < cfg->nheaders; h++) {
      bad |= cbl_buf_append(&b, cfg->headers[h].name, strlen(cfg->headers[h].name));
      bad |= cbl_buf_append(&b, ": ", 2);
      bad |= cbl_buf_append(&b, cfg->headers[h].value, strlen(cfg->headers[h].value));
      bad |= cbl_buf_append(&b, "\r\n", 2);
    }
    bad |= cbl_buf_append(&b, "\r\n", 2);
    if (bad) {
      free(b.p);
      return -1;
    }
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
    if (w->h2_block) free(w->h2_block[i]);
  }
  free(w->h1);
  free(w->h1_len);
  free(w->h2_block);
  free(w->h2_block_len);
  free(w->ws_handshake);
  free(w->ws_msg);
}
