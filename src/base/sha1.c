/* SHA-1 (FIPS 180-4, section 6.1), written here for one purpose: the WebSocket handshake's
 * Sec-WebSocket-Accept (RFC 6455 4.2.2), which is SHA-1 by definition. None of the Debian libraries cbench
 * links (libuv, nghttp2, zlib) exports a hash, and pulling a crypto library in for 60 bytes per handshake
 * would be the larger risk. Not for anything that needs collision resistance. */
#include <string.h>

#include "base/base.h"

static uint32_t rol(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

static void block(uint32_t h[5], const uint8_t *p) {
  uint32_t w[80];
  for (int t = 0; t < 16; t++)
    w[t] = (uint32_t)p[4 * t] << 24 | (uint32_t)p[4 * t + 1] << 16 | (uint32_t)p[4 * t + 2] << 8 | p[4 * t + 3];
  for (int t = 16; t < 80; t++) w[t] = rol(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1);
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
  for (int t = 0; t < 80; t++) {
    uint32_t f, k;
    if (t < 20) f = (b & c) | (~b & d), k = 0x5a827999;
    else if (t < 40) f = b ^ c ^ d, k = 0x6ed9eba1;
    else if (t < 60) f = (b & c) | (b & d) | (c & d), k = 0x8f1bbcdc;
    else f = b ^ c ^ d, k = 0xca62c1d6;
    uint32_t tmp = rol(a, 5) + f + e + k + w[t];
    e = d;
    d = c;
    c = rol(b, 30);
    b = a;
    a = tmp;
  }
  h[0] += a;
  h[1] += b;
  h[2] += c;
  h[3] += d;
  h[4] += e;
}

void cb__sha1(const void *data, size_t len, uint8_t out[20]) {
  uint32_t h[5] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0};
  const uint8_t *p = data;
  size_t n = len;
  for (; n >= 64; p += 64, n -= 64) block(h, p);
  /* The last block(s): the rest, 0x80, zeros, and the length in bits as a 64-bit big-endian number. */
  uint8_t tail[128] = {0};
  memcpy(tail, p, n);
  tail[n] = 0x80;
  size_t tlen = n + 1 + 8 <= 64 ? 64 : 128;
  uint64_t bits = (uint64_t)len * 8;
  for (int i = 0; i < 8; i++) tail[tlen - 1 - i] = (uint8_t)(bits >> (8 * i));
  block(h, tail);
  if (tlen == 128) block(h, tail + 64);
  for (int i = 0; i < 5; i++) {
    out[4 * i] = (uint8_t)(h[i] >> 24);
    out[4 * i + 1] = (uint8_t)(h[i] >> 16);
    out[4 * i + 2] = (uint8_t)(h[i] >> 8);
    out[4 * i + 3] = (uint8_t)h[i];
  }
}
