/* A small test runner in the style of libuv's: every test runs in its own forked process with a timeout, and
 * the assertions print both values with file and line.
 *
 * A test is declared anywhere in any file of test/c/ with
 *
 *     TEST(name) { ASSERT_EQ(1 + 1, 2); }
 *     TEST_T(slow_name, 60000) { ... }     (own timeout in milliseconds)
 *
 * and registers itself before main() runs, so adding a test file (for example the HTTP/2 tests) needs no list
 * to edit: the Makefile compiles every .c file of test/c into the one test binary. Names must be unique; the runner
 * refuses to start otherwise. Tests run in the order of their file names, then of their lines.
 *
 * A test passes when its process exits 0 (returning from the test function). An assertion that fails prints
 * its message and ends the process with _exit(1), so nothing else (LeakSanitizer included) runs after it.
 */
#ifndef CBT_RUNNER_H
#define CBT_RUNNER_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct cbt_test_s {
  const char *name;
  void (*fn)(void);
  unsigned timeout_ms; /* 0: the runner's default (30 s, -t or CBT_TIMEOUT) */
  const char *file;
  int line;
  struct cbt_test_s *next;
} cbt_test_t;

void cbt__register(cbt_test_t *t);
__attribute__((noreturn, format(printf, 3, 4))) void cbt__fail(const char *file, int line, const char *fmt, ...);
void cbt__assert_str(const char *file, int line, const char *ea, const char *eb, const char *a, const char *b);
void cbt__assert_mem(const char *file, int line, const char *ea, const char *eb, const void *a, size_t alen,
                     const void *b, size_t blen);
/* Prints a progress note from inside a test (shown on failure, or always with -v). */
__attribute__((format(printf, 1, 2))) void cbt_log(const char *fmt, ...);

#define TEST_T(tname, ms)                                                                                    \
  static void cbt_fn_##tname(void);                                                                          \
  static cbt_test_t cbt_t_##tname = {#tname, cbt_fn_##tname, (ms), __FILE__, __LINE__, NULL};                \
  __attribute__((constructor)) static void cbt_reg_##tname(void) { cbt__register(&cbt_t_##tname); }          \
  static void cbt_fn_##tname(void)

#define TEST(tname) TEST_T(tname, 0)

#define CBT_CMP_(a, op, b)                                                                                   \
  do {                                                                                                       \
    intmax_t cbt_a_ = (intmax_t)(a);                                                                         \
    intmax_t cbt_b_ = (intmax_t)(b);                                                                         \
    if (!(cbt_a_ op cbt_b_))                                                                                 \
      cbt__fail(__FILE__, __LINE__, "ASSERT(%s %s %s) failed: %jd %s %jd", #a, #op, #b, cbt_a_, #op, cbt_b_); \
  } while (0)

#define ASSERT_EQ(a, b) CBT_CMP_(a, ==, b)
#define ASSERT_NE(a, b) CBT_CMP_(a, !=, b)
#define ASSERT_LT(a, b) CBT_CMP_(a, <, b)
#define ASSERT_LE(a, b) CBT_CMP_(a, <=, b)
#define ASSERT_GT(a, b) CBT_CMP_(a, >, b)
#define ASSERT_GE(a, b) CBT_CMP_(a, >=, b)

#define ASSERT(cond)                                                                                         \
  do {                                                                                                       \
    if (!(cond)) cbt__fail(__FILE__, __LINE__, "ASSERT(%s) failed", #cond);                                  \
  } while (0)

#define ASSERT_NULL(p)                                                                                       \
  do {                                                                                                       \
    const void *cbt_p_ = (const void *)(p);                                                                  \
    if (cbt_p_ != NULL) cbt__fail(__FILE__, __LINE__, "ASSERT_NULL(%s) failed: %p", #p, cbt_p_);             \
  } while (0)

#define ASSERT_NOT_NULL(p)                                                                                   \
  do {                                                                                                       \
    if ((const void *)(p) == NULL) cbt__fail(__FILE__, __LINE__, "ASSERT_NOT_NULL(%s) failed", #p);          \
  } while (0)

#define ASSERT_STR_EQ(a, b) cbt__assert_str(__FILE__, __LINE__, #a, #b, (a), (b))

/* Compares two byte ranges; on a difference prints both lengths, the first differing offset and an escaped
 * window of both sides around it. */
#define ASSERT_MEM_EQ(a, alen, b, blen) cbt__assert_mem(__FILE__, __LINE__, #a, #b, (a), (alen), (b), (blen))

#define FAIL(...) cbt__fail(__FILE__, __LINE__, __VA_ARGS__)

#endif
