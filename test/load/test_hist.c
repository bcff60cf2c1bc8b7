/* Unit tests of cbench-load's histogram (src/load/hist.c): the layout's error bound over the whole range, exact
 * small values, percentiles on known data, merging, and the empty and clamped cases. Run by `make load-unit`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "hist.h"

static int failures;

#define CHECK(cond, ...)                                         \
  do {                                                           \
    if (!(cond)) {                                               \
      fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                              \
      fprintf(stderr, "\n");                                     \
      failures++;                                                \
    }                                                            \
  } while (0)

static cbl_hist_t *new_hist(void) {
  cbl_hist_t *h = malloc(sizeof *h);
  cbl_hist_init(h);
  return h;
}

/* Every value from 1 µs to 60 s (a geometric walk with a step of 0.01%, and every value up to 4096 ns) lies in
 * its bucket, the bucket is at most 1/128 of its low end wide, and one value read back as a percentile is within
 * 1% of itself (0.4% by the layout). */
static void error_bound(void) {
  uint32_t last = 0;
  int checked = 0;
  for (double v = 1.0; v <= 60e9; v = v < 4096 ? v + 1 : v * 1.0001) {
    uint64_t ns = (uint64_t)v, low, width;
    uint32_t i = cbl_hist_index(ns);
    CHECK(i < CBL_HIST_BUCKETS, "index %u of %llu", i, (unsigned long long)ns);
    CHECK(i >= last, "index went down at %llu", (unsigned long long)ns);
    last = i;
    cbl_hist_range(i, &low, &width);
    CHECK(ns >= low && ns < low + width, "%llu not in [%llu, +%llu)", (unsigned long long)ns,
          (unsigned long long)low, (unsigned long long)width);
    CHECK(width == 1 || (double)width / (double)low <= 1.0 / 128, "bucket of %llu is %llu wide",
          (unsigned long long)ns, (unsigned long long)width);
    checked++;
  }
  CHECK(checked > 100000, "only %d values", checked);
  /* A bucket per value below 256 ns: exact. */
  for (uint64_t ns = 0; ns < 256; ns++) CHECK(cbl_hist_index(ns) == ns, "%llu", (unsigned long long)ns);
  /* One value alone: every percentile is that value (kept within min and max). */
  cbl_hist_t *h = new_hist();
  for (double v = 1000; v <= 60e9; v *= 1.37) {
    cbl_hist_init(h);
    cbl_hist_record(h, (uint64_t)v);
    CHECK(cbl_hist_percentile(h, 50) == (uint64_t)v, "%f", v);
  }
  /* Two values in one bucket: the midpoint stands for both, within 1%. */
  for (double v = 1000; v <= 60e9; v *= 1.37) {
    cbl_hist_init(h);
    cbl_hist_record(h, (uint64_t)v);
    cbl_hist_record(h, (uint64_t)v);
    cbl_hist_record(h, 1);
    cbl_hist_record(h, 100000000000ull);
    double got = (double)cbl_hist_percentile(h, 50);
    CHECK(fabs(got - v) / v <= 0.01, "p50 %f for %f", got, v);
  }
  free(h);
}

/* 1..100,000 µs once each: the percentiles by nearest rank, within 1%. */
static void known_percentiles(void) {
  cbl_hist_t *h = new_hist();
  for (uint64_t us = 1; us <= 100000; us++) cbl_hist_record(h, us * 1000);
  struct {
    double p;
    double want_us;
  } cases[] = {{50, 50000}, {90, 90000}, {99, 99000}, {99.9, 99900}, {99.99, 99990}, {0.001, 1}, {100, 100000}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    double got = (double)cbl_hist_percentile(h, cases[i].p) / 1000.0;
    CHECK(fabs(got - cases[i].want_us) / cases[i].want_us <= 0.01, "p%g: %f us, want %f", cases[i].p, got,
          cases[i].want_us);
  }
  CHECK(h->total == 100000, "%llu", (unsigned long long)h->total);
  CHECK(h->min == 1000 && h->max == 100000000, "min %llu max %llu", (unsigned long long)h->min,
        (unsigned long long)h->max);
  CHECK(fabs(cbl_hist_mean(h) - 50000.5 * 1000) < 1, "mean %f", cbl_hist_mean(h));
  /* 999 fast answers and one 300 ms stall: p99.9 is the fast ones, max the stall; one more stall moves p99.9. */
  cbl_hist_init(h);
  for (int i = 0; i < 999; i++) cbl_hist_record(h, 50000);
  cbl_hist_record(h, 300000000);
  CHECK(cbl_hist_percentile(h, 99.9) < 51000, "%llu", (unsigned long long)cbl_hist_percentile(h, 99.9));
  CHECK(cbl_hist_percentile(h, 99.99) == 300000000, "%llu", (unsigned long long)cbl_hist_percentile(h, 99.99));
  cbl_hist_record(h, 300000000);
  CHECK(cbl_hist_percentile(h, 99.9) > 297000000, "%llu", (unsigned long long)cbl_hist_percentile(h, 99.9));
  free(h);
}

/* Merging per-thread histograms gives the histogram of all the values. */
static void merge(void) {
  cbl_hist_t *a = new_hist(), *b = new_hist(), *all = new_hist(), *empty = new_hist();
  for (uint64_t i = 1; i <= 5000; i++) {
    uint64_t v = i * i * 37 % 9000000007ull + 1;
    cbl_hist_record(i % 3 ? a : b, v);
    cbl_hist_record(all, v);
  }
  cbl_hist_merge(a, empty);
  cbl_hist_merge(empty, b);
  cbl_hist_merge(a, b);
  CHECK(a->total == all->total && a->min == all->min && a->max == all->max, "totals differ");
  int same = 1;
  for (uint32_t i = 0; i < CBL_HIST_BUCKETS; i++) same &= a->counts[i] == all->counts[i];
  CHECK(same, "counts differ");
  CHECK(cbl_hist_percentile(a, 99) == cbl_hist_percentile(all, 99), "p99 differs");
  CHECK(empty->total == b->total && empty->min == b->min, "merge into empty");
  free(a);
  free(b);
  free(all);
  free(empty);
}

static void edges(void) {
  cbl_hist_t *h = new_hist();
  CHECK(cbl_hist_percentile(h, 50) == 0 && cbl_hist_mean(h) == 0, "empty");
  /* Beyond 68.7 s: counted in the last bucket, the exact max kept. */
  cbl_hist_record(h, 1000ull * 1000000000ull);
  CHECK(cbl_hist_index(1000ull * 1000000000ull) == CBL_HIST_BUCKETS - 1, "clamp");
  CHECK(cbl_hist_percentile(h, 50) == 1000ull * 1000000000ull, "max kept");
  free(h);
}

int main(void) {
  error_bound();
  known_percentiles();
  merge();
  edges();
  if (failures) {
    fprintf(stderr, "test_hist: %d failed\n", failures);
    return 1;
  }
  printf("test_hist: 4 passed, 0 failed\n");
  return 0;
}
