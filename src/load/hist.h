/* A latency histogram with log-linear buckets, after HdrHistogram's layout (written here; nothing suitable is
 * packaged for Debian).
 *
 * Values are nanoseconds. Values below 256 ns each have a bucket of their own; above that every power of two
 * [2^n, 2^(n+1)) is cut into 128 equal buckets, so a bucket is at most 1/128 of its lowest value wide and a
 * value read back as its bucket's midpoint is within 0.4% of the recorded one (well inside the 1% the issue
 * asks for, from 1 µs to 60 s). Values from 2^36 ns (68.7 s) up are clamped into the last bucket; the exact
 * maximum is kept beside the counts. 3,840 counters: 30 KiB per histogram.
 *
 * One writer per histogram (its thread); merged by the main thread after the threads have joined.
 */
#ifndef CBL_HIST_H
#define CBL_HIST_H

#include <stdint.h>

#define CBL_HIST_SUB_BITS 7                            /* 128 buckets per power of two */
#define CBL_HIST_LINEAR (2u << CBL_HIST_SUB_BITS)      /* 0..255: one bucket per value */
#define CBL_HIST_MAX_BITS 36                           /* 2^36 ns = 68.7 s */
#define CBL_HIST_BUCKETS \
  (CBL_HIST_LINEAR + (CBL_HIST_MAX_BITS - CBL_HIST_SUB_BITS - 1) * (1u << CBL_HIST_SUB_BITS))

typedef struct {
  uint64_t counts[CBL_HIST_BUCKETS];
  uint64_t total;
  uint64_t min; /* exact; UINT64_MAX while empty */
  uint64_t max; /* exact */
  double sum;   /* for the mean */
} cbl_hist_t;

void cbl_hist_init(cbl_hist_t *h);
void cbl_hist_record(cbl_hist_t *h, uint64_t ns);
/* Adds src's counts into dst. */
void cbl_hist_merge(cbl_hist_t *dst, const cbl_hist_t *src);
/* The value at percentile p (0 < p <= 100) by nearest rank: the midpoint of the bucket holding the
 * ceil(p * total / 100)-th smallest value, kept within the exact [min, max]. 0 for an empty histogram. */
uint64_t cbl_hist_percentile(const cbl_hist_t *h, double p);
double cbl_hist_mean(const cbl_hist_t *h);

/* The bucket of a value and the range [low, low + width) of a bucket: exposed for the unit tests. */
uint32_t cbl_hist_index(uint64_t ns);
void cbl_hist_range(uint32_t index, uint64_t *low, uint64_t *width);

#endif
