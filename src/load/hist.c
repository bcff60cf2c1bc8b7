/* The log-linear latency histogram: see hist.h for the layout and its error bound. */
#include "hist.h"

#include <string.h>

#define HALF (1u << CBL_HIST_SUB_BITS)
#define MAX_VALUE ((1ull << CBL_HIST_MAX_BITS) - 1)

void cbl_hist_init(cbl_hist_t *h) {
  memset(h, 0, sizeof *h);
  h->min = UINT64_MAX;
}

uint32_t cbl_hist_index(uint64_t ns) {
  if (ns > MAX_VALUE) ns = MAX_VALUE;
  if (ns < CBL_HIST_LINEAR) return (uint32_t)ns;
  /* ns lies in [2^msb, 2^(msb+1)); shifting it right by msb - SUB_BITS leaves a value in [HALF, 2 * HALF). */
  unsigned msb = 63u - (unsigned)__builtin_clzll(ns);
  unsigned shift = msb - CBL_HIST_SUB_BITS;
  return CBL_HIST_LINEAR + (shift - 1) * HALF + (uint32_t)((ns >> shift) - HALF);
}

void cbl_hist_range(uint32_t index, uint64_t *low, uint64_t *width) {
  if (index < CBL_HIST_LINEAR) {
    *low = index;
    *width = 1;
    return;
  }
  uint32_t i = index - CBL_HIST_LINEAR;
  unsigned shift = i / HALF + 1;
  *low = (uint64_t)(HALF + i % HALF) << shift;
  *width = 1ull << shift;
}

void cbl_hist_record(cbl_hist_t *h, uint64_t ns) {
  h->counts[cbl_hist_index(ns)]++;
  h->total++;
  h->sum += (double)ns;
  if (ns < h->min) h->min = ns;
  if (ns > h->max) h->max = ns;
}

void cbl_hist_merge(cbl_hist_t *dst, const cbl_hist_t *src) {
  if (src->total == 0) return;
  for (uint32_t i = 0; i < CBL_HIST_BUCKETS; i++) dst->counts[i] += src->counts[i];
  dst->total += src->total;
  dst->sum += src->sum;
  if (src->min < dst->min) dst->min = src->min;
  if (src->max > dst->max) dst->max = src->max;
}

uint64_t cbl_hist_percentile(const cbl_hist_t *h, double p) {
  if (h->total == 0) return 0;
  if (p >= 100.0) return h->max;
  /* Nearest rank, computed in integers where the float product would round up a whole rank (99.9% of 1000
   * is 999.0000000000001 in doubles). */
  double exact = p / 100.0 * (double)h->total;
  uint64_t rank = (uint64_t)exact;
  if ((double)rank < exact - 1e-9 * (double)h->total) rank++;
  if (rank == 0) rank = 1;
  uint64_t seen = 0;
  for (uint32_t i = 0; i < CBL_HIST_BUCKETS; i++) {
    seen += h->counts[i];
    if (seen >= rank) {
      uint64_t low, width;
      cbl_hist_range(i, &low, &width);
      uint64_t v = low + width / 2;
      if (v < h->min) v = h->min;
      if (v > h->max) v = h->max;
      return v;
    }
  }
  return h->max;
}

double cbl_hist_mean(const cbl_hist_t *h) { return h->total ? h->sum / (double)h->total : 0.0; }
