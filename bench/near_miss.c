/* The cost of near-miss scoring (issue 25, src/kinds/near_miss.c): one request that matched nothing scored against
 * 100 stubs, each with a {param} path, a method, two header matchers and a query matcher (about the worst a
 * test suite's table looks like), repeated N times on one socket-less worker. Prints nanoseconds per 404's
 * scoring (CPU time of this thread); under valgrind --tool=callgrind the instruction count per scoring is the
 * total divided by N (the set-up is a fixed few hundred thousand).
 *
 *   make bench-near-miss [NEAR_ARGS=N]   (default N 20000) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testing.h"

static void sink(void *arg, const char *data, size_t len) {
  (void)arg;
  (void)data;
  (void)len;
}

int main(int argc, char **argv) {
  long iters = argc > 1 ? atol(argv[1]) : 20000;
  cb__testconn_t *tc = cb__testconn_new(NULL, sink, NULL);
  if (tc == NULL) return 1;
  static const cb_matcher_t hdr[] = {{CB_S("x-tenant"), CB_S("acme")}, {CB_S("authorization"), {NULL, 0}}};
  static const cb_matcher_t q[] = {{CB_S("verbose"), CB_S("1")}};
  char paths[100][64], names[100][32];
  for (int i = 0; i < 100; i++) {
    snprintf(paths[i], sizeof paths[i], "/api/v%d/orders/{id}", i);
    snprintf(names[i], sizeof names[i], "stub%d", i);
    cb_stub_t st;
    memset(&st, 0, sizeof st);
    st.name = (cb_str_t){names[i], strlen(names[i])};
    st.match = (cb_match_t){.methods = CB_METHOD_POST, .path = {paths[i], strlen(paths[i])}, .headers = hdr,
                            .nheaders = 2, .query = q, .nquery = 1};
    st.response.status = 200;
    uint64_t id;
    if (cb__testconn_route_add(tc, &st, &id) != 0) return 1;
  }
  static const char *const h[] = {"host:x", "x-tenant:other", "user-agent:bench", "accept:*/*"};
  char out[3][256];
  struct timespec a, b;
  int n = 0;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
  for (long i = 0; i < iters; i++) n += cb__testconn_near(tc, "GET", "/api/v7/orders/12?verbose=0", h, 4, out, 3);
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
  double ns = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / (double)iters;
  printf("near-miss scoring, 100 stubs: %.0f ns per 404 (%ld runs; closest: %s)\n", ns, iters, out[0]);
  cb__testconn_free(tc);
  return n == 3 * iters ? 0 : 1;
}
