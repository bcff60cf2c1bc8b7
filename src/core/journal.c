/* The request journal: what every request looked like and how it was answered.
 *
 * Each worker records its own requests in its own rings, so recording takes no lock shared between workers;
 * the only shared write is one atomic increment of the server's sequence counter per request, at arrival
 * (which orders the workers' entries when they are merged). An entry is recorded when its request is released
 * (response complete, or the connection gone), or earlier, when its connection is to end (conn.c's
 * cb__conn_close_linger and the protocols' record op): always before the socket call that ends the response,
 * so that a client that has seen the end and then reads the journal finds the entry.
 *
 * Layout, per worker: a ring of fixed entries (growing by doubling up to cfg.journal) and a byte ring that
 * holds each entry's variable part contiguously: method, path, query, route name, headers (lengths then
 * bytes), body. HTTP/1.1 header names are kept as received and lowercased when an entry is read (recording is
 * hot, reading rare), or at once while a listener is set (its views point into the ring). No allocation per
 * request once the rings have grown, except a buffer for a request that has a body. A request recorded when it
 * can no longer be among the newest cfg.journal of the server (answered after that many newer ones) is not
 * recorded. A worker drops its oldest
 * entries when they cannot be among the newest cfg.journal of the server (seq <= newest - journal), or to make
 * room in the byte ring (which grows on demand up to about cfg.journal KiB, plus room for two largest entries,
 * rounded up to a power of two).
 *
 * Requests answered out of order. The ring is in the order of recording, and a request answered after newer
 * ones (a handler, a delay) is recorded late, behind them. Requests recorded in order never fill a ring of
 * cfg.journal slots: the head, the smallest seq, goes as soon as it is no longer among the newest. Only late
 * entries can fill it: one that falls out of the newest keeps its slot behind newer ones. A full ring is
 * therefore the slow path that drops every entry no read would list (drop_stale(): one walk of the ring), and
 * never a valid one. So that this walk stays rare under a steady stream of late entries (a handler answering
 * in any order), a ring that is still more than half full afterwards grows to 2 * cfg.journal slots: of those,
 * at most cfg.journal are among the newest, so each walk then frees at least half the ring. In-order recording
 * pays nothing for this.
 *
 * Reads and clears go through the command queues: each worker copies out what matches into one block, and
 * the caller's thread merges the blocks in sequence order. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"

typedef struct {
  uint64_t seq;
  int64_t time_us;
  uint64_t conn_id, body_len, bytes_out, duration_us, stub_id;
  uint64_t dpos; /* the variable part: [dpos, dpos + dlen) in the byte ring (positions only grow) */
  uint32_t dlen;
  uint32_t stream_id, nheaders, path_len, query_len, body_kept, delay_ms;
  uint16_t method_len, route_len, status, peer_port;
  uint16_t up_to_len, up_status; /* a proxied request: its upstream's `to` (bytes after the body), its answer */
  uint8_t up_error;
  uint16_t method; /* a known method's CB_METHOD_* bit: its name is cb__method_name()'s, and its method_len bytes
                      in the ring are left unwritten (still counted, so that the rings fill as before); 0: the
                      bytes are there */
  uint8_t proto, peer_family, fault;
  uint8_t peer_addr[16];
} jent_t;

struct cb__journal_s {
  uint64_t *seq, *floor; /* the server's */
  uint32_t max_entries;
  size_t body_max;
  jent_t *ents;
  uint32_t ecap, ehead, ecount;
  uint64_t evict_seq; /* the head's seq + max_entries (UINT64_MAX when empty): a newer seq drops the head */
  char *data;
  uint64_t dcap, dmax, dhead, dtail; /* dcap and dmax are powers of two: a position's offset is pos & (dcap - 1) */
  uint64_t room_end; /* [dtail, room_end) is free and within one dcap-aligned block: a lower bound (dropping
                        entries only adds room), set again whenever reserve() runs; 0 before the first */
  cb_journal_fn fn;
  void *ud;
};

int cb__journal_new(const cb_config_t *cfg, uint64_t *seq, uint64_t *floor, cb__journal_t **out) {
  cb__journal_t *j = calloc(1, sizeof *j);
  if (j == NULL) return UV_ENOMEM;
  j->seq = seq;
  j->floor = floor;
  j->evict_seq = UINT64_MAX;
  j->max_entries = cfg->journal;
  j->body_max = cfg->journal_body_bytes;
  uint64_t largest = 3 * (uint64_t)cfg->max_header_bytes + cfg->journal_body_bytes + 4096;
  uint64_t dmax = (uint64_t)(cfg->journal < 64 ? 64 : cfg->journal) * 1024 + 2 * largest;
  j->dmax = 64 * 1024;
  while (j->dmax < dmax) j->dmax *= 2; /* a power of two, as every capacity the ring grows through */
  *out = j;
  return 0;
}

void cb__journal_free(cb__journal_t *j) {
  if (j == NULL) return;
  free(j->ents);
  free(j->data);
  free(j);
}

static int64_t realtime_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  /* tv_nsec is in [0, 1e9): an unsigned division by 1000 is the same and cheaper than a signed one. */
  return (int64_t)ts.tv_sec * 1000000 + (int64_t)((uint64_t)ts.tv_nsec / 1000);
}

/* The wall clock as the journal sees it: read once per iteration of the worker's loop, when first asked for, as
 * nginx caches its time. A read costs about 20 ns on the benchmark VM: two per request were about a third of
 * the journal's CPU per request (0.14 us, measured with and without it). The requests of one iteration arrived
 * together: they share the time, and a response complete in the iteration its request arrived in lasted 0 us
 * by this clock. The check handle (worker.c) marks the time stale at the end of each iteration. */
static inline int64_t worker_now_us(cb__worker_t *w) {
  if (!w->now_valid) {
    w->now_us = realtime_us();
    w->now_valid = 1;
  }
  return w->now_us;
}

void cb__journal_arrive(cb__worker_t *w, cb__req_t *r) {
  r->jseq = __atomic_add_fetch(w->journal->seq, 1, __ATOMIC_RELAXED);
  r->time_us = worker_now_us(w);
}

void cb__journal_body(cb__req_t *r, const char *p, size_t n) {
  cb__journal_t *j = r->conn->w->journal;
  size_t room = j->body_max - r->jbody_len;
  if (n > room) n = room;
  if (n == 0) return;
  if (r->jbody == NULL) {
    /* The declared length when known (bounded by the body limit already), else as it comes. */
    size_t cap = r->content_length > 0 && (uint64_t)r->content_length < j->body_max ? (size_t)r->content_length
                                                                                    : j->body_max;
    r->jbody = malloc(cap);
    if (r->jbody == NULL) return;
    r->jbody_cap = cap;
  }
  if (r->jbody_len + n > r->jbody_cap) {
    size_t cap = r->jbody_cap * 2;
    if (cap < r->jbody_len + n) cap = r->jbody_len + n;
    if (cap > j->body_max) cap = j->body_max;
    char *b = realloc(r->jbody, cap);
    if (b == NULL) return;
    r->jbody = b;
    r->jbody_cap = cap;
  }
  memcpy(r->jbody + r->jbody_len, p, n);
  r->jbody_len += n;
}

/* ---- the rings ---- */

/* The i-th live entry (i < ecount <= ecap), and a byte position's address: no division on the request path. */
static inline jent_t *entry(const cb__journal_t *j, uint32_t i) {
  uint32_t s = j->ehead + i;
  return &j->ents[s >= j->ecap ? s - j->ecap : s];
}

static inline char *at(const cb__journal_t *j, uint64_t pos) { return j->data + (pos & (j->dcap - 1)); }

/* The ring's head changed (evict_one, drop_stale): the byte ring starts at its entry, and it goes when the
 * server's seq passes it by max_entries. */
static inline void head_moved(cb__journal_t *j) {
  if (j->ecount > 0) {
    const jent_t *h = &j->ents[j->ehead];
    j->dhead = h->dpos;
    j->evict_seq = h->seq + j->max_entries;
  } else {
    j->dhead = j->dtail;
    j->evict_seq = UINT64_MAX;
  }
}

static inline void evict_one(cb__journal_t *j) {
  j->ehead = j->ehead + 1 == j->ecap ? 0 : j->ehead + 1;
  j->ecount--;
  head_moved(j);
}

/* Called when the ring is full (ecount == ecap). realloc, which can often extend or remap the block rather than
 * copy it; then, if the ring had wrapped, the smaller of its two runs moves so that they follow each other: the
 * front run [0, ehead) to just after the old end when it fits there, else the back run [ehead, old end) to the
 * new end. */
static int grow_entries(cb__journal_t *j, uint32_t limit) {
  uint32_t old = j->ecap, cap = old ? 2 * old : 64;
  if (cap > limit) cap = limit;
  jent_t *e = realloc(j->ents, (size_t)cap * sizeof *e);
  if (e == NULL) return -1;
  uint32_t front = j->ehead, back = old - j->ehead;
  if (front > 0 && front <= back && front <= cap - old) {
    memcpy(e + old, e, (size_t)front * sizeof *e);
  } else if (front > 0) {
    memmove(e + cap - back, e + front, (size_t)back * sizeof *e);
    j->ehead = cap - back;
  }
  j->ents = e;
  j->ecap = cap;
  return 0;
}

/* The slow path of a full ring that may not grow (ecap >= max_entries), or could not: drops, in one walk, every
 * entry that no read would list (seq <= the server's newest - max_entries, or cleared), keeping the others in
 * their order, so that the byte ring's positions still only grow from the head. With ecap >= max_entries there
 * is always one (see the top: only late entries fill such a ring). Then, if the ring is still more than half
 * full, it grows to twice max_entries (see the top). When nothing could be dropped (a ring that failed to grow
 * earlier), the head goes, as before. */
static __attribute__((noinline)) void drop_stale(cb__journal_t *j) {
  uint64_t newest = __atomic_load_n(j->seq, __ATOMIC_RELAXED);
  uint64_t bound = newest > j->max_entries ? newest - j->max_entries : 0;
  uint64_t floor = __atomic_load_n(j->floor, __ATOMIC_RELAXED);
  if (floor > bound) bound = floor;
  uint32_t kept = 0;
  for (uint32_t i = 0; i < j->ecount; i++) {
    const jent_t *e = entry(j, i);
    if (e->seq <= bound) continue;
    if (kept != i) *entry(j, kept) = *e;
    kept++;
  }
  if (kept == j->ecount) {
    evict_one(j);
    return;
  }
  j->ecount = kept;
  head_moved(j);
  if (kept > j->ecap / 2 && j->ecap < 2 * j->max_entries) (void)grow_entries(j, 2 * j->max_entries);
}

/* Grows the byte ring to `cap` bytes (a larger power of two) keeping every position: a live byte at position p
 * moves from p & (dcap - 1) to p & (cap - 1). The live bytes, [dhead, dtail), span at most dcap positions, so at
 * most two pieces, each within one dcap-aligned block (an entry's bytes never cross one: reserve() pads) and so
 * within one cap-aligned block. realloc keeps the old bytes at the front; a piece that moves lands at or after
 * dcap, so no move overwrites bytes still to move. */
static int grow_data(cb__journal_t *j, uint64_t cap) {
  char *d = realloc(j->data, cap);
  if (d == NULL) return -1;
  for (uint64_t p = j->dhead; p < j->dtail;) {
    uint64_t end = (p | (j->dcap - 1)) + 1; /* the end of p's dcap-aligned block */
    if (end > j->dtail) end = j->dtail;
    uint64_t from = p & (j->dcap - 1), to = p & (cap - 1);
    if (to != from) memcpy(d + to, d + from, end - p);
    p = end;
  }
  j->data = d;
  j->dcap = cap;
  return 0;
}

/* Takes `need` contiguous bytes at the tail if they fit; returns their position, or -1. */
static inline int64_t take(cb__journal_t *j, uint64_t need) {
  if (j->dcap > 0) {
    uint64_t off = j->dtail & (j->dcap - 1);
    uint64_t pad = off + need > j->dcap ? j->dcap - off : 0;
    if (j->dtail - j->dhead + pad + need <= j->dcap) {
      uint64_t pos = j->dtail + pad;
      j->dtail = pos + need;
      return (int64_t)pos;
    }
  }
  return -1;
}

/* Room for `need` contiguous bytes, growing the ring or dropping the oldest entries; returns their position,
 * or -1. */
static int64_t make_room(cb__journal_t *j, uint64_t need) {
  if (need > j->dmax) return -1;
  for (;;) {
    int64_t pos = take(j, need);
    if (pos >= 0) return pos;
    if (j->dcap < j->dmax) {
      uint64_t cap = j->dcap ? 2 * j->dcap : 64 * 1024;
      while (cap < 2 * need) cap *= 2;
      if (cap > j->dmax) cap = j->dmax;
      if (grow_data(j, cap) == 0) continue;
    }
    if (j->ecount == 0) {
      if (j->dcap == 0) return -1;
      j->dhead = j->dtail = 0; /* empty: start over at the front */
      if (need > j->dcap) return -1;
      continue;
    }
    evict_one(j);
  }
}

/* make_room(), then where the free bytes after the tail end now: the end of the tail's dcap-aligned block (an
 * entry's bytes never wrap) or the oldest live byte a lap later, whichever comes first. Out of line: most
 * requests fit below room_end. */
static __attribute__((noinline)) int64_t reserve(cb__journal_t *j, uint64_t need) {
  int64_t pos = make_room(j, need);
  if (j->dcap > 0) {
    uint64_t block_end = (j->dtail | (j->dcap - 1)) + 1, lap = j->dhead + j->dcap;
    j->room_end = block_end < lap ? block_end : lap;
  }
  return pos;
}

/* Copies n bytes; the short strings of a request (method, names, most values) without a call to memcpy, as
 * two overlapping fixed-size moves. Sixteen bytes or fewer are asked about first: most strings are. */
static inline char *put(char *o, const void *p, size_t n) {
  const char *s = p;
  if (n <= 16) {
    if (n >= 8) {
      uint64_t a, b;
      memcpy(&a, s, 8);
      memcpy(&b, s + n - 8, 8);
      memcpy(o, &a, 8);
      memcpy(o + n - 8, &b, 8);
    } else if (n >= 4) {
      uint32_t a, b;
      memcpy(&a, s, 4);
      memcpy(&b, s + n - 4, 4);
      memcpy(o, &a, 4);
      memcpy(o + n - 4, &b, 4);
    } else if (n >= 2) {
      uint16_t a, b;
      memcpy(&a, s, 2);
      memcpy(&b, s + n - 2, 2);
      memcpy(o, &a, 2);
      memcpy(o + n - 2, &b, 2);
    } else if (n == 1) {
      o[0] = s[0];
    }
  } else if (n <= 32) {
    char a[16], b[16];
    memcpy(a, s, 16);
    memcpy(b, s + n - 16, 16);
    memcpy(o, a, 16);
    memcpy(o + n - 16, b, 16);
  } else {
    memcpy(o, s, n);
  }
  return o + n;
}

/* A header's name and value lengths, as the two u32 that view() reads. */
static inline char *put_lens(char *o, size_t name_len, size_t value_len) {
  uint32_t l[2] = {(uint32_t)name_len, (uint32_t)value_len};
  memcpy(o, l, 8);
  return o + 8;
}

/* Eight bytes with their ASCII capitals lowercased, without a branch per byte. */
static inline uint64_t lower8(uint64_t v) {
  const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
  uint64_t low7 = v & ~high;
  uint64_t ge_a = low7 + (0x80 - 'A') * ones; /* high bit set where the byte >= 'A' */
  uint64_t gt_z = low7 + (0x80 - 'Z' - 1) * ones; /* ... where it > 'Z' */
  uint64_t upper = (ge_a ^ gt_z) & ~v & high;
  return v | upper >> 2; /* 0x80 >> 2 is 0x20, the case bit */
}

/* Copies n bytes lowercasing ASCII letters, eight at a time (header names are mostly short tokens); the last
 * eight overlap the previous ones, which is harmless since lowercasing twice is lowercasing once. */
static char *put_lower(char *o, const char *p, size_t n) {
  if (n < 8) {
    if (n < 4) {
      for (size_t k = 0; k < n; k++) o[k] = (char)(p[k] >= 'A' && p[k] <= 'Z' ? p[k] + 32 : p[k]);
      return o + n;
    }
    uint32_t a, b;
    memcpy(&a, p, 4);
    memcpy(&b, p + n - 4, 4);
    a = (uint32_t)lower8(a);
    b = (uint32_t)lower8(b);
    memcpy(o, &a, 4);
    memcpy(o + n - 4, &b, 4);
    return o + n;
  }
  uint64_t v;
  for (size_t k = 0; k + 8 <= n; k += 8) {
    memcpy(&v, p + k, 8);
    v = lower8(v);
    memcpy(o + k, &v, 8);
  }
  memcpy(&v, p + n - 8, 8);
  v = lower8(v);
  memcpy(o + n - 8, &v, 8);
  return o + n;
}

static int has_host(const cb__req_t *r) {
  for (int i = 0; i < r->nheaders; i++) {
    const cb__hdr_t *h = &r->headers[i];
    if (h->name_len == 4 && (h->name[0] | 32) == 'h' && (h->name[1] | 32) == 'o' && (h->name[2] | 32) == 's' &&
        (h->name[3] | 32) == 't')
      return 1;
  }
  return 0;
}

static void notify(cb__journal_t *j, const jent_t *e);

/* ---- a TLS connection's details ----
 * An entry of a TLS connection (proto h1_tls or h2_tls) ends its variable part with what the handshake settled
 * (cb__tls_info, taken once per connection by the transport): eight bytes (present, alpn, resumed, and the lengths
 * of the version, the cipher, the SNI name, the client certificate's subject and its fingerprint), then those five
 * strings. A subject is kept up to 255 bytes (the client CA's certificates have a common name of at most 64). A cleartext entry has none of it, so
 * its recording costs one test of the connection's transport. */
#define TLS_HEAD 8
#define TLS_SNI_MAX 255 /* a host name's longest (RFC 1035); OpenSSL refuses longer ones */

static inline int is_tls_proto(int proto) { return proto == CB_PROTO_H1_TLS || proto == CB_PROTO_H2_TLS; }

static size_t short_len(const char *s, size_t max) {
  size_t n = s != NULL ? strlen(s) : 0;
  return n < max ? n : max;
}

/* The bytes the details take, with *ti filled (ti->version NULL when the transport has none to give). */
static __attribute__((noinline)) uint64_t tls_need(const cb__conn_t *c, cb__tls_info_t *ti) {
  if (cb__tls_info(&c->tr, ti) != 0) {
    *ti = (cb__tls_info_t){0};
    return TLS_HEAD;
  }
  return TLS_HEAD + short_len(ti->version, 255) + short_len(ti->cipher, 255) + short_len(ti->sni, TLS_SNI_MAX) +
         short_len(ti->client_subject, 255) + short_len(ti->client_sha256, 64);
}

static char *put_tls(char *o, const cb__tls_info_t *ti) {
  size_t vl = short_len(ti->version, 255), cl = short_len(ti->cipher, 255), sl = short_len(ti->sni, TLS_SNI_MAX);
  size_t ul = short_len(ti->client_subject, 255), fl = short_len(ti->client_sha256, 64);
  o[0] = ti->version != NULL;
  o[1] = (char)ti->alpn;
  o[2] = (char)ti->resumed;
  o[3] = (char)vl;
  o[4] = (char)cl;
  o[5] = (char)sl;
  o[6] = (char)ul;
  o[7] = (char)fl;
  o += TLS_HEAD;
  o = put(o, ti->version, vl);
  o = put(o, ti->cipher, cl);
  o = put(o, ti->sni, sl);
  o = put(o, ti->client_subject, ul);
  return put(o, ti->client_sha256, fl);
}

/* How far ahead add_entry() prefetches: 64 entries (requests), and 4 KiB of the byte ring (a /hello takes about
 * 100 bytes: some 40 requests). With 8 entries ahead, the load below still took two thirds of the recording's
 * samples (perf). */
#define PREFETCH_ENTRIES 64
#define PREFETCH_BYTES 4096

/* A new entry for `need` bytes at the end of the rings, dropping or growing as the rules say (see the top);
 * NULL when there is no room. */
static inline jent_t *add_entry(cb__journal_t *j, uint64_t seq, uint64_t need, uint64_t *pos) {
  /* Once the rings are full, each request evicts the oldest entry (reading its seq and position) and writes where
   * the oldest ones were: lines last touched a whole journal ago (10,000 requests), long gone from the caches. A
   * load that waited on memory there took most of the recording's time (perf: 80% of cb__journal_record's samples
   * on evict_one's read). The lines that the next requests read and write are asked for now, so that they are in
   * the cache when used. Read prefetches, written here and not in a function of their own: GCC drops a write
   * prefetch for a target without PREFETCHW, and a call to a function that only prefetches (it looks pure). */
  if (j->ecap > PREFETCH_ENTRIES) {
    uint32_t s = j->ehead + PREFETCH_ENTRIES;
    const char *ahead = (const char *)&j->ents[s >= j->ecap ? s - j->ecap : s];
    __builtin_prefetch(ahead);
    __builtin_prefetch(ahead + sizeof(jent_t) - 1);
  }
  if (j->dcap > 2 * PREFETCH_BYTES) {
    __builtin_prefetch(at(j, j->dtail + PREFETCH_BYTES));
    __builtin_prefetch(at(j, j->dtail + PREFETCH_BYTES + 64));
  }
  /* The oldest entries that can no longer be among the server's newest go first. */
  while (seq >= j->evict_seq) evict_one(j);
  if (j->ecount == j->ecap && (j->ecap >= j->max_entries || grow_entries(j, j->max_entries) != 0)) {
    if (j->ecount == 0) return NULL;
    drop_stale(j);
  }
  /* Below room_end the bytes fit without padding, where take() would put them too. */
  uint64_t p = j->dtail;
  if (p + need <= j->room_end && j->room_end != 0) {
    j->dtail = p + need;
  } else {
    int64_t q = reserve(j, need);
    if (q < 0) return NULL;
    p = (uint64_t)q;
  }
  *pos = p;
  jent_t *e = entry(j, j->ecount);
  if (j->ecount++ == 0) j->evict_seq = seq + j->max_entries;
  return e;
}

void cb__journal_record(cb__worker_t *w, cb__req_t *r) {
  cb__journal_t *j = w->journal;
  uint64_t seq = r->jseq;
  r->jseq = 0;
  if (j == NULL || seq <= __atomic_load_n(j->floor, __ATOMIC_RELAXED)) goto done; /* cleared meanwhile */
  /* Answered after newer requests (a handler, a delay, a body that came late) and no longer among the server's
   * newest: no read would list it, and in the ring, which is in the order of recording, it would take the slot
   * of one that is (a full ring drops its head, not the smallest seq). */
  if (seq + j->max_entries <= __atomic_load_n(j->seq, __ATOMIC_RELAXED)) goto done;
  int64_t now = worker_now_us(w);
  cb__conn_t *c = r->conn;
  const char *route_name;
  size_t route_len;
  uint64_t stub_id = w->router->identify(r, &route_name, &route_len);
  int add_host = r->authority != NULL && !has_host(r);
  size_t query_len = r->target_len > r->path_len ? r->target_len - r->path_len - 1 : 0;
  const cb__hdr_t *hs = r->headers;
  int nh = r->nheaders;
  uint64_t need = r->method_len + r->path_len + query_len + route_len + r->jbody_len + r->up_to_len;
  need += 8 * (uint64_t)(nh + add_host); /* each header's two lengths */
  for (int i = 0; i < nh; i++) need += hs[i].name_len + hs[i].value_len;
  if (add_host) need += 4 + r->authority_len;
  cb__tls_info_t ti;
  if (c->tr.tls) need += tls_need(c, &ti);
  uint64_t pos;
  jent_t *e = add_entry(j, seq, need, &pos);
  if (e == NULL) goto done;
  /* Every field is set one by one: no zeroing of the whole entry first. */
  e->seq = seq;
  e->time_us = r->time_us;
  e->conn_id = c->id;
  e->body_len = r->body_received;
  e->bytes_out = r->bytes_out;
  e->duration_us = now > r->time_us ? (uint64_t)(now - r->time_us) : 0;
  e->stub_id = r->allow ? 0 : stub_id; /* a 405 is the rule's answer, not the stub's (cbench.h) */
  e->dpos = pos;
  e->dlen = (uint32_t)need;
  e->nheaders = (uint32_t)(nh + add_host);
  e->path_len = (uint32_t)r->path_len;
  e->query_len = (uint32_t)query_len;
  e->body_kept = (uint32_t)r->jbody_len;
  e->method_len = (uint16_t)r->method_len;
  e->method = r->method; /* r->method_str is then that method's name (http1.c, http2.c) */
  e->route_len = (uint16_t)route_len;
  e->status = (uint16_t)r->status;
  e->peer_port = c->peer_port;
  e->peer_family = c->peer_family;
  e->fault = r->fault;
  e->delay_ms = r->delay_ms;
  e->up_to_len = r->up_to_len;
  e->up_status = r->up_status;
  e->up_error = r->up_error;
  memcpy(e->peer_addr, c->peer_addr, sizeof e->peer_addr);
  e->stream_id = r->stream_id;
  e->proto = c->proto_id;
  char *o = at(j, pos);
  o = r->method ? o + r->method_len : put(o, r->method_str, r->method_len);
  o = put(o, r->path, r->path_len);
  if (query_len > 0) o = put(o, r->path + r->path_len + 1, query_len);
  o = put(o, route_name, route_len);
  if (add_host) {
    o = put_lens(o, 4, r->authority_len);
    o = put(o, "host", 4);
    o = put(o, r->authority, r->authority_len);
  }
  /* HTTP/1.1 names go in as received, lowercased when read; but a listener's views point into the ring, so
   * while one is set they are lowercased now. HTTP/2 field names are lowercase already (nghttp2 checks). Two
   * loops rather than a test per header: one loop with the test costs 9 more instructions per /hello. */
  if (j->fn != NULL && (c->proto_id == CB_PROTO_HTTP1 || c->proto_id == CB_PROTO_H1_TLS)) {
    for (int i = 0; i < nh; i++) {
      o = put_lens(o, hs[i].name_len, hs[i].value_len);
      o = put_lower(o, hs[i].name, hs[i].name_len);
      o = put(o, hs[i].value, hs[i].value_len);
    }
  } else {
    for (int i = 0; i < nh; i++) {
      o = put_lens(o, hs[i].name_len, hs[i].value_len);
      o = put(o, hs[i].name, hs[i].name_len);
      o = put(o, hs[i].value, hs[i].value_len);
    }
  }
  if (r->jbody_len > 0) o = put(o, r->jbody, r->jbody_len);
  if (r->up_to_len > 0) o = put(o, r->up_to, r->up_to_len);
  if (c->tr.tls) put_tls(o, &ti);
  if (j->fn != NULL) notify(j, e);
done:
  if (r->jbody != NULL) { /* most requests have no body */
    free(r->jbody);
    r->jbody = NULL;
    r->jbody_len = r->jbody_cap = 0;
  }
}

/* ---- views: an entry as a cb_request_t ---- */

static size_t format_peer(const jent_t *e, char *buf) {
  char addr[INET6_ADDRSTRLEN];
  if (e->peer_family == AF_INET) {
    inet_ntop(AF_INET, e->peer_addr, addr, sizeof addr);
    return (size_t)snprintf(buf, 64, "%s:%u", addr, e->peer_port);
  }
  if (e->peer_family == AF_INET6) {
    inet_ntop(AF_INET6, e->peer_addr, addr, sizeof addr);
    return (size_t)snprintf(buf, 64, "[%s]:%u", addr, e->peer_port);
  }
  buf[0] = '\0';
  return 0;
}

static uint32_t get_u32(const char *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

/* Bytes a copied-out entry needs beyond its cb_request_t: strings with their NULs, headers, peer. */
static size_t copy_size(const jent_t *e) {
  return e->dlen + 12 + 2 * (size_t)e->nheaders + (size_t)e->nheaders * sizeof(cb_header_t) + 64 + 16;
}

/* Fills *out from entry e, copying its bytes to *bytes (advanced) and its header list to hdrs when copy is set,
 * header names lowercased; otherwise pointing into the ring (names and values are then not NUL-terminated:
 * views for the listener, whose entries were recorded with lowercased names). */
static void view(const cb__journal_t *j, const jent_t *e, cb_request_t *out, cb_header_t *hdrs, char **bytes,
                 int copy) {
  const char *p = at(j, e->dpos);
  char *b = copy ? *bytes : NULL;
/* The next n bytes of the entry (p advances), or n bytes read from src in their place. */
#define TAKE_FROM(dst, src, n, copy_fn)     \
  do {                                      \
    size_t n_ = (n);                        \
    const char *s_ = (src);                 \
    if (copy) {                             \
      copy_fn(b, s_, n_);                   \
      b[n_] = '\0';                         \
      (dst) = (cb_str_t){b, n_};            \
      b += n_ + 1;                          \
    } else {                                \
      (dst) = (cb_str_t){s_, n_};           \
    }                                       \
    p += n_;                                \
  } while (0)
#define TAKE(dst, n) TAKE_FROM(dst, p, n, memcpy)
  memset(out, 0, sizeof *out);
  out->seq = e->seq;
  out->time_us = e->time_us;
  out->proto = e->proto;
  out->conn_id = e->conn_id;
  out->stream_id = e->stream_id;
  /* A known method's bytes were left unwritten: its name is cb__method_name()'s (jent_t.method). */
  TAKE_FROM(out->method, e->method ? cb__method_name(e->method) : p, e->method_len, memcpy);
  TAKE(out->path, e->path_len);
  TAKE(out->query, e->query_len);
  TAKE(out->route, e->route_len);
  for (uint32_t i = 0; i < e->nheaders; i++) {
    uint32_t nl = get_u32(p), vl = get_u32(p + 4);
    p += 8;
    TAKE_FROM(hdrs[i].name, p, nl, put_lower);
    TAKE(hdrs[i].value, vl);
  }
  out->headers = hdrs;
  out->nheaders = e->nheaders;
  TAKE(out->body, e->body_kept);
  TAKE(out->upstream_to, e->up_to_len);
  if (is_tls_proto(e->proto)) {
    unsigned char h[TLS_HEAD];
    memcpy(h, p, TLS_HEAD);
    p += TLS_HEAD;
    out->tls = h[0];
    out->tls_resumed = h[2];
    out->tls_alpn = h[1] == CB__ALPN_H2      ? CB_S("h2")
                    : h[1] == CB__ALPN_HTTP1 ? CB_S("http/1.1")
                                             : (cb_str_t){"", 0};
    TAKE(out->tls_version, h[3]);
    TAKE(out->tls_cipher, h[4]);
    TAKE(out->tls_sni, h[5]);
    TAKE(out->tls_client_subject, h[6]);
    TAKE(out->tls_client_sha256, h[7]);
  }
#undef TAKE
#undef TAKE_FROM
  out->body_len = e->body_len;
  out->stub_id = e->stub_id;
  out->status = e->status;
  out->bytes_out = e->bytes_out;
  out->duration_us = e->duration_us;
  out->delay_ms = e->delay_ms;
  const char *fname = cb__fault_name(e->fault);
  out->fault = (cb_str_t){fname, strlen(fname)};
  out->upstream_status = e->up_status;
  const char *uerr = cb__uperr_name(e->up_error);
  out->upstream_error = (cb_str_t){uerr, strlen(uerr)};
  if (copy) {
    size_t n = format_peer(e, b);
    out->peer = (cb_str_t){b, n};
    b += n + 1;
    *bytes = b;
  }
}

static void notify(cb__journal_t *j, const jent_t *e) {
  cb_header_t stack[32], *hdrs = stack;
  if (e->nheaders > 32) {
    hdrs = malloc(e->nheaders * sizeof *hdrs);
    if (hdrs == NULL) return;
  }
  cb_request_t req;
  char peer[64];
  view(j, e, &req, hdrs, NULL, 0);
  req.peer = (cb_str_t){peer, format_peer(e, peer)};
  j->fn(j->ud, &req);
  if (hdrs != stack) free(hdrs);
}

/* ---- reads through the queues ---- */

typedef struct {
  const cb_request_filter_t *f;
  uint64_t low; /* only seq > low */
} read_arg_t;

typedef struct {
  size_t n;
  cb_request_t *items;
} block_t;

static int str_eq(cb_str_t want, const char *p, size_t n) {
  return want.ptr == NULL || (want.len == n && memcmp(want.ptr, p, n) == 0);
}

static int matches(const cb__journal_t *j, const jent_t *e, const read_arg_t *a) {
  if (e->seq <= a->low) return 0;
  const cb_request_filter_t *f = a->f;
  if (f->stub_id && e->stub_id != f->stub_id) return 0;
  const char *p = at(j, e->dpos);
  if (!str_eq(f->method, e->method ? cb__method_name(e->method) : p, e->method_len)) return 0;
  if (!str_eq(f->path, p + e->method_len, e->path_len)) return 0;
  if (!str_eq(f->route, p + e->method_len + e->path_len + e->query_len, e->route_len)) return 0;
  return 1;
}

static void read_call(cb__worker_t *w, cb__call_t *call) {
  const read_arg_t *a = call->arg;
  cb__journal_t *j = w->journal;
  size_t n = 0, bytes = 0, nh = 0;
  for (uint32_t i = 0; i < j->ecount; i++) {
    const jent_t *e = entry(j, i);
    if (!matches(j, e, a)) continue;
    n++;
    nh += e->nheaders;
    bytes += copy_size(e);
  }
  block_t *blk = malloc(sizeof *blk + n * sizeof(cb_request_t) + nh * sizeof(cb_header_t) + bytes);
  if (blk == NULL) {
    call->err = UV_ENOMEM;
    cb__call_done(call);
    return;
  }
  blk->n = n;
  blk->items = (cb_request_t *)(blk + 1);
  cb_header_t *hdrs = (cb_header_t *)(blk->items + n);
  char *b = (char *)(hdrs + nh);
  size_t k = 0;
  for (uint32_t i = 0; i < j->ecount && k < n; i++) {
    const jent_t *e = entry(j, i);
    if (!matches(j, e, a)) continue;
    view(j, e, &blk->items[k++], hdrs, &b, 1);
    hdrs += e->nheaders;
  }
  call->out = blk;
  cb__call_done(call);
}

typedef struct {
  int nblocks;
  block_t *blocks[];
} priv_t;

static int by_seq(const void *a, const void *b) {
  const cb_request_t *x = a, *y = b;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

int cb_server_requests(cb_server_t *srv, const cb_request_filter_t *filter, cb_request_list_t **out) {
  if (srv == NULL || out == NULL) return UV_EINVAL;
  if (cb__on_worker_thread()) return UV_EBUSY;
  *out = NULL;
  static const cb_request_filter_t all;
  if (filter == NULL) filter = &all;
  cb_request_list_t *list = calloc(1, sizeof *list);
  priv_t *priv = calloc(1, sizeof *priv + (size_t)srv->nworkers * sizeof(block_t *));
  if (list == NULL || priv == NULL) {
    free(list);
    free(priv);
    return UV_ENOMEM;
  }
  list->priv_ = priv;
  if (srv->cfg.journal == 0) {
    *out = list;
    return 0;
  }
  read_arg_t a = {.f = filter, .low = filter->since};
  uint64_t floor = __atomic_load_n(&srv->jfloor, __ATOMIC_RELAXED);
  uint64_t now = __atomic_load_n(&srv->jseq, __ATOMIC_RELAXED);
  if (floor > a.low) a.low = floor;
  if (now > srv->cfg.journal && now - srv->cfg.journal > a.low) a.low = now - srv->cfg.journal;
  cb__call_t *calls = calloc((size_t)srv->nworkers, sizeof *calls);
  int err = calls ? cb__call_all(srv, read_call, &a, calls) : UV_ENOMEM;
  size_t total = 0;
  for (int i = 0; calls && i < srv->nworkers; i++) {
    if (calls[i].err && err == 0) err = calls[i].err;
    block_t *blk = calls[i].out;
    if (blk == NULL) continue;
    priv->blocks[priv->nblocks++] = blk;
    total += blk->n;
  }
  free(calls);
  if (err == 0 && total > 0) {
    list->items = malloc(total * sizeof *list->items);
    if (list->items == NULL) err = UV_ENOMEM;
  }
  if (err) {
    cb_request_list_free(list);
    return err;
  }
  size_t k = 0;
  for (int i = 0; i < priv->nblocks && total > 0; i++) {
    if (priv->blocks[i]->n == 0) continue;
    memcpy(list->items + k, priv->blocks[i]->items, priv->blocks[i]->n * sizeof *list->items);
    k += priv->blocks[i]->n;
  }
  if (total > 1) qsort(list->items, total, sizeof *list->items, by_seq);
  list->count = filter->limit && filter->limit < total ? filter->limit : total;
  *out = list;
  return 0;
}

void cb_request_list_free(cb_request_list_t *list) {
  if (list == NULL) return;
  priv_t *priv = list->priv_;
  for (int i = 0; priv && i < priv->nblocks; i++) free(priv->blocks[i]);
  free(priv);
  free(list->items);
  free(list);
}

static void clear_call(cb__worker_t *w, cb__call_t *call) {
  cb__journal_t *j = w->journal;
  uint64_t floor = *(const uint64_t *)call->arg;
  while (j->ecount > 0 && j->ents[j->ehead].seq <= floor) evict_one(j);
  cb__call_done(call);
}

int cb_server_requests_clear(cb_server_t *srv) {
  if (srv == NULL) return UV_EINVAL;
  if (cb__on_worker_thread()) return UV_EBUSY;
  if (srv->cfg.journal == 0) return 0;
  uint64_t floor = __atomic_load_n(&srv->jseq, __ATOMIC_RELAXED);
  __atomic_store_n(&srv->jfloor, floor, __ATOMIC_RELAXED);
  cb__call_t *calls = calloc((size_t)srv->nworkers, sizeof *calls);
  int err = calls ? cb__call_all(srv, clear_call, &floor, calls) : UV_ENOMEM;
  free(calls);
  return err;
}

typedef struct {
  cb_journal_fn fn;
  void *ud;
} listener_t;

static void listener_call(cb__worker_t *w, cb__call_t *call) {
  const listener_t *l = call->arg;
  w->journal->fn = l->fn;
  w->journal->ud = l->ud;
  cb__call_done(call);
}

int cb_server_set_journal_listener(cb_server_t *srv, cb_journal_fn fn, void *ud) {
  if (srv == NULL) return UV_EINVAL;
  if (cb__on_worker_thread()) return UV_EBUSY;
  if (srv->cfg.journal == 0) return 0; /* nothing is recorded, so nothing is ever announced */
  listener_t l = {fn, fn ? ud : NULL};
  uv_mutex_lock(&srv->api_mu);
  cb__call_t *calls = calloc((size_t)srv->nworkers, sizeof *calls);
  int err = calls ? cb__call_all(srv, listener_call, &l, calls) : UV_ENOMEM;
  free(calls);
  uv_mutex_unlock(&srv->api_mu);
  return err;
}
