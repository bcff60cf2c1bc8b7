/* The fixed-seed samples behind the exact-merge test of erl/cbench_hist.erl (test/cbench_cluster_SUITE.erl,
 * hist_merge_exact): N pseudo-random latencies from a seeded generator (splitmix64), a heavy tail included, are
 * recorded into PARTS histograms in turn (sample k into part k mod PARTS, as the nodes of a cluster run would each
 * see some) and all of them into one more, the union. Prints one Erlang term (file:consult/1) on stdout:
 *
 *   #{parts => [H, ...], union => H, percentiles => #{p50 => Ns, ...}}.
 *
 * Each H is written by cbench-load's own writer (cbl_report_hist_erl, the `hist' entries of an --erl file), and
 * the percentiles are hist.c's of the union, in nanoseconds. The suite merges the parts in Erlang and asserts
 * the same buckets and the same percentiles, exactly.
 *
 * Usage: cbench-load-histdump SEED N PARTS */
#include <stdio.h>
#include <stdlib.h>

#include "load.h"

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Mostly 20 µs - 2 ms, one in a hundred up to 300 ms, one in ten thousand up to 100 s (past the clamp). */
static uint64_t sample(uint64_t *s) {
  uint64_t r = splitmix64(s), tail = r % 10000;
  uint64_t v = splitmix64(s);
  if (tail == 0) return v % 100000000000ull;
  if (tail < 100) return v % 300000000ull;
  return 20000 + v % 1980000;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: cbench-load-histdump SEED N PARTS\n");
    return 2;
  }
  uint64_t seed = strtoull(argv[1], NULL, 10);
  long n = strtol(argv[2], NULL, 10), parts = strtol(argv[3], NULL, 10);
  if (n < 0 || parts < 1 || parts > 64) return 2;
  cbl_hist_t *h = calloc((size_t)parts + 1, sizeof *h);
  if (!h) return 1;
  for (long p = 0; p <= parts; p++) cbl_hist_init(&h[p]);
  for (long k = 0; k < n; k++) {
    uint64_t v = sample(&seed);
    cbl_hist_record(&h[k % parts], v);
    cbl_hist_record(&h[parts], v);
  }
  fputs("#{parts => [", stdout);
  for (long p = 0; p < parts; p++) {
    if (p) fputs(", ", stdout);
    cbl_report_hist_erl(&h[p], stdout);
  }
  fputs("], union => ", stdout);
  cbl_report_hist_erl(&h[parts], stdout);
  const double ps[] = {0.001, 1, 50, 90, 99, 99.9, 99.99, 100};
  const char *names[] = {"p0_001", "p1", "p50", "p90", "p99", "p999", "p9999", "p100"};
  fputs(", percentiles => #{", stdout);
  for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
    printf("%s%s => %llu", i ? ", " : "", names[i], (unsigned long long)cbl_hist_percentile(&h[parts], ps[i]));
  printf("}}.\n");
  free(h);
  return 0;
}
