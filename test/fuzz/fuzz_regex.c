/* libFuzzer target: the body regex matcher (src/routes/body_match.c), the one matcher that runs a stub author's
 * pattern over a client's bytes. The input is a pattern and a body: its first byte is the pattern's length (the
 * rest of the input when shorter), the rest is the body. A pattern that the subset check and regcomp(3) accept
 * is compiled for the matcher and run on the body; ASan and UBSan check the parse, the program's size bound and
 * the run. The result must be glibc's regexec(3)'s (the matcher's language is glibc's in the C locale), except
 * where the matcher is documented to differ: a '^' or '$' inside the pattern (glibc matches them beside a
 * newline or again in a counted repetition: docs/routes.md, "Body matchers"), and a run that spent the step
 * budget (no match, by rule). A disagreement aborts with both answers.
 *
 * Which patterns are refused must be glibc's too: the engine's regcomp(3) sees a pattern without its counted
 * repetitions (glibc writes them out: seconds for a few bytes), so the engine's answer is compared with
 * regcomp's on the whole pattern. Both comparisons are made only for patterns glibc compiles at once: at most
 * 40 bytes, counts of at most 3 (which also keeps them under the program's size bound); every pattern still
 * goes through the engine's own compiler and matcher under the sanitizers.
 *
 * Seeds: test/fuzz/corpus/regex/. Build and run: make fuzz-regex (FUZZ_SECONDS=N). */
#include <regex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "routes/routes.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Anchors only at the pattern's two ends (escaped ones and those in brackets count too: skipping more is safe). */
static int anchors_inside(const char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if ((p[i] == '^' && i != 0) || (p[i] == '$' && (i != n - 1 || (i > 0 && p[i - 1] == '\\')))) return 1;
  return 0;
}

/* At most 40 bytes, and every number in it at most 3 (a count's, or a digit elsewhere: skipping more is safe). */
static int small(const char *p, size_t n) {
  if (n > 40) return 0;
  for (size_t i = 0; i < n; i++)
    if (p[i] >= '4' && p[i] <= '9') return 0;
    else if (p[i] >= '0' && p[i] <= '3' && i + 1 < n && p[i + 1] >= '0' && p[i + 1] <= '9') return 0;
  return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  size_t pl = data[0];
  if (pl > size - 1) pl = size - 1;
  const char *pat = (const char *)data + 1, *body = pat + pl;
  size_t bl = size - 1 - pl;
  char cpat[CB_MAX_BODY_REGEX + 1];
  if (pl > CB_MAX_BODY_REGEX) return 0;
  memcpy(cpat, pat, pl);
  cpat[pl] = '\0';
  cb_body_match_t in = {CB_MATCH_BODY_REGEX, {pat, pl}};
  cb__body_match_t *m = NULL;
  int taken = cb__body_match_new(&in, &m) == 0;
  if (cb__regex_subset_ok(pat, pl) && small(pat, pl)) {
    regex_t whole;
    int glibc = regcomp(&whole, cpat, REG_EXTENDED | REG_NOSUB) == 0;
    if (glibc) regfree(&whole);
    if (glibc != taken) {
      fprintf(stderr, "pattern \"%s\": the engine %s it, regcomp %s it\n", cpat, taken ? "took" : "refused",
              glibc ? "takes" : "refuses");
      abort();
    }
  }
  if (!taken) return 0;
  uint64_t steps = 0;
  int got = cb__regex_run(m, body, bl, &steps);
  cb__body_match_free(m);
  if (steps == UINT64_MAX || anchors_inside(pat, pl) || !small(pat, pl)) return 0;
  regex_t re;
  if (regcomp(&re, cpat, REG_EXTENDED | REG_NOSUB) != 0) abort(); /* cb__body_match_new took it */
  /* A copy with a NUL after it: ASan's regexec interceptor reads the string to its NUL, REG_STARTEND or not. */
  char *cbody = malloc(bl + 1);
  if (cbody == NULL) abort();
  memcpy(cbody, body, bl);
  cbody[bl] = '\0';
  regmatch_t pm[1] = {{.rm_so = 0, .rm_eo = (regoff_t)bl}};
  int want = regexec(&re, cbody, 1, pm, REG_STARTEND) == 0;
  free(cbody);
  regfree(&re);
  if (got != want) {
    fprintf(stderr, "pattern \"%s\" (%zu bytes), body of %zu bytes: the matcher %d, glibc %d\n", cpat, pl, bl, got,
            want);
    abort();
  }
  return 0;
}
