/* The test runner: see runner.h. Usage:
 *
 *   cbench-tests [-l] [-v] [-j JOBS] [-t SECONDS] [NAME | PREFIX* ...]
 *
 * With no name every test runs. Each test runs in a forked child (its own process group) whose output goes to a
 * temporary file; the parent prints one line per test, the captured output of failures (of every test with -v),
 * and `N passed, N failed` as the last line. A test that outlives its timeout is killed with its whole process
 * group. Exit status: 0 when every selected test passed, 1 otherwise.
 */
#include "runner.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static cbt_test_t *registered;
static size_t nregistered;

void cbt__register(cbt_test_t *t) {
  t->next = registered;
  registered = t;
  nregistered++;
}

static int verbose;

void cbt_log(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("  # ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

void cbt__fail(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s:%d: ", file, line);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  fflush(stdout);
  fflush(stderr);
  _exit(1);
}

/* Writes up to `max` bytes of p as a C string literal, escaping everything that is not printable ASCII. */
static void put_escaped(const unsigned char *p, size_t len, size_t max) {
  size_t i;
  fputc('"', stderr);
  for (i = 0; i < len && i < max; i++) {
    unsigned char c = p[i];
    if (c == '\r') fputs("\\r", stderr);
    else if (c == '\n') fputs("\\n", stderr);
    else if (c == '\t') fputs("\\t", stderr);
    else if (c == '"' || c == '\\') fprintf(stderr, "\\%c", c);
    else if (c < 0x20 || c >= 0x7f) fprintf(stderr, "\\x%02x", c);
    else fputc(c, stderr);
  }
  fputc('"', stderr);
  if (len > max) fprintf(stderr, "... (%zu more)", len - max);
}

void cbt__assert_str(const char *file, int line, const char *ea, const char *eb, const char *a, const char *b) {
  if (a != NULL && b != NULL && strcmp(a, b) == 0) return;
  if (a == NULL && b == NULL) return;
  fprintf(stderr, "%s:%d: ASSERT_STR_EQ(%s, %s) failed:\n  left:  ", file, line, ea, eb);
  if (a) put_escaped((const unsigned char *)a, strlen(a), 400);
  else fputs("NULL", stderr);
  fputs("\n  right: ", stderr);
  if (b) put_escaped((const unsigned char *)b, strlen(b), 400);
  else fputs("NULL", stderr);
  fputc('\n', stderr);
  fflush(stderr);
  _exit(1);
}

void cbt__assert_mem(const char *file, int line, const char *ea, const char *eb, const void *a, size_t alen,
                     const void *b, size_t blen) {
  const unsigned char *pa = a, *pb = b;
  size_t i, n = alen < blen ? alen : blen, from;
  for (i = 0; i < n; i++)
    if (pa[i] != pb[i]) break;
  if (i == n && alen == blen) return;
  from = i > 120 ? i - 120 : 0;
  fprintf(stderr, "%s:%d: ASSERT_MEM_EQ(%s, %s) failed: lengths %zu and %zu, first difference at offset %zu\n",
          file, line, ea, eb, alen, blen, i);
  fprintf(stderr, "  left  [%zu..]: ", from);
  put_escaped(pa + from, alen - from, i - from + 200);
  fprintf(stderr, "\n  right [%zu..]: ", from);
  put_escaped(pb + from, blen - from, i - from + 200);
  fputc('\n', stderr);
  fflush(stderr);
  _exit(1);
}

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

typedef struct {
  cbt_test_t *t;
  pid_t pid;
  FILE *out;
  uint64_t start, deadline;
  int timed_out;
} job_t;

static int test_order(const void *a, const void *b) {
  const cbt_test_t *x = *(cbt_test_t *const *)a, *y = *(cbt_test_t *const *)b;
  int c = strcmp(x->file, y->file);
  return c ? c : x->line - y->line;
}

static int matches(const char *pattern, const char *name) {
  size_t n = strlen(pattern);
  if (n > 0 && pattern[n - 1] == '*') return strncmp(pattern, name, n - 1) == 0;
  return strcmp(pattern, name) == 0;
}

static void start_job(job_t *j, cbt_test_t *t, unsigned default_timeout_ms) {
  j->t = t;
  j->timed_out = 0;
  j->out = tmpfile();
  if (j->out == NULL) {
    perror("tmpfile");
    exit(2);
  }
  fflush(stdout);
  fflush(stderr);
  j->start = now_ms();
  j->deadline = j->start + (t->timeout_ms ? t->timeout_ms : default_timeout_ms);
  j->pid = fork();
  if (j->pid < 0) {
    perror("fork");
    exit(2);
  }
  if (j->pid == 0) {
    int fd = fileno(j->out);
    setpgid(0, 0);
    signal(SIGPIPE, SIG_IGN);
    dup2(fd, 1);
    dup2(fd, 2);
    setvbuf(stdout, NULL, _IONBF, 0);
    t->fn();
    fflush(stdout);
    exit(0);
  }
  setpgid(j->pid, j->pid);
}

/* Prints the result line of a finished job (and its output when it failed); returns 1 when it passed. */
static int finish_job(job_t *j, int status) {
  uint64_t ms = now_ms() - j->start;
  int ok = !j->timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  char buf[4096];
  size_t n;
  if (ok) {
    printf("ok      %s (%llu ms)\n", j->t->name, (unsigned long long)ms);
  } else if (j->timed_out) {
    printf("FAILED  %s: timed out after %llu ms (%s:%d)\n", j->t->name, (unsigned long long)ms, j->t->file,
           j->t->line);
  } else if (WIFSIGNALED(status)) {
    printf("FAILED  %s: killed by signal %d (%s) after %llu ms (%s:%d)\n", j->t->name, WTERMSIG(status),
           strsignal(WTERMSIG(status)), (unsigned long long)ms, j->t->file, j->t->line);
  } else {
    printf("FAILED  %s: exit status %d after %llu ms (%s:%d)\n", j->t->name, WEXITSTATUS(status),
           (unsigned long long)ms, j->t->file, j->t->line);
  }
  if (!ok || verbose) {
    fflush(stdout);
    rewind(j->out);
    while ((n = fread(buf, 1, sizeof buf, j->out)) > 0) fwrite(buf, 1, n, stdout);
  }
  fflush(stdout);
  fclose(j->out);
  j->out = NULL;
  j->pid = 0;
  return ok;
}

static void usage(const char *argv0) {
  fprintf(stderr,
          "usage: %s [-l] [-v] [-j JOBS] [-t SECONDS] [NAME | PREFIX* ...]\n"
          "  -l  list the tests and exit\n"
          "  -v  show the output of passing tests too\n"
          "  -j  run this many tests at once (default 1, or $CBT_JOBS)\n"
          "  -t  default timeout per test in seconds (default 30, or $CBT_TIMEOUT)\n",
          argv0);
}

int main(int argc, char **argv) {
  cbt_test_t **tests, *t;
  size_t ntests = 0, i, k, nsel = 0, next = 0;
  unsigned timeout_ms = 30000;
  int jobs = 1, list = 0, opt, passed = 0, failed = 0, running = 0;
  job_t *pool;
  char *selected;
  const char *env;

  if ((env = getenv("CBT_TIMEOUT")) != NULL && atoi(env) > 0) timeout_ms = (unsigned)atoi(env) * 1000;
  if ((env = getenv("CBT_JOBS")) != NULL && atoi(env) > 0) jobs = atoi(env);
  while ((opt = getopt(argc, argv, "lvj:t:h")) != -1) {
    switch (opt) {
    case 'l': list = 1; break;
    case 'v': verbose = 1; break;
    case 'j': jobs = atoi(optarg); break;
    case 't': timeout_ms = (unsigned)atoi(optarg) * 1000; break;
    default: usage(argv[0]); return 2;
    }
  }
  if (jobs < 1 || timeout_ms == 0) {
    usage(argv[0]);
    return 2;
  }

  tests = calloc(nregistered + 1, sizeof *tests);
  for (t = registered; t; t = t->next) tests[ntests++] = t;
  qsort(tests, ntests, sizeof *tests, test_order);
  for (i = 0; i < ntests; i++)
    for (k = i + 1; k < ntests; k++)
      if (strcmp(tests[i]->name, tests[k]->name) == 0) {
        fprintf(stderr, "duplicate test name %s (%s:%d and %s:%d)\n", tests[i]->name, tests[i]->file,
                tests[i]->line, tests[k]->file, tests[k]->line);
        free(tests);
        return 2;
      }
  if (list) {
    for (i = 0; i < ntests; i++) printf("%s\n", tests[i]->name);
    free(tests);
    return 0;
  }

  selected = calloc(ntests + 1, 1);
  if (optind == argc) {
    memset(selected, 1, ntests);
  } else {
    for (k = (size_t)optind; k < (size_t)argc; k++) {
      int found = 0;
      for (i = 0; i < ntests; i++)
        if (matches(argv[k], tests[i]->name)) selected[i] = 1, found = 1;
      if (!found) {
        printf("FAILED  %s: no such test\n", argv[k]);
        failed++;
      }
    }
  }
  for (i = 0; i < ntests; i++) nsel += selected[i];

  pool = calloc((size_t)jobs, sizeof *pool);
  signal(SIGPIPE, SIG_IGN);
  for (;;) {
    /* Fill the free slots. */
    for (k = 0; k < (size_t)jobs && next < ntests; k++) {
      if (pool[k].pid) continue;
      while (next < ntests && !selected[next]) next++;
      if (next == ntests) break;
      start_job(&pool[k], tests[next++], timeout_ms);
      running++;
    }
    if (running == 0) break;
    /* Reap the finished ones; kill the overdue ones. */
    for (k = 0; k < (size_t)jobs; k++) {
      int status;
      pid_t r;
      if (!pool[k].pid) continue;
      r = waitpid(pool[k].pid, &status, WNOHANG);
      if (r == pool[k].pid) {
        kill(-pool[k].pid, SIGKILL); /* whatever the test left running in its group */
        if (finish_job(&pool[k], status)) passed++;
        else failed++;
        running--;
      } else if (r == 0 && now_ms() > pool[k].deadline) {
        pool[k].timed_out = 1;
        kill(-pool[k].pid, SIGKILL);
        kill(pool[k].pid, SIGKILL);
        while (waitpid(pool[k].pid, &status, 0) < 0 && errno == EINTR) {
        }
        finish_job(&pool[k], status);
        failed++;
        running--;
      }
    }
    {
      struct timespec ts = {0, 2 * 1000 * 1000};
      nanosleep(&ts, NULL);
    }
  }
  if (nsel == 0 && failed == 0) printf("no tests selected\n");
  printf("%d passed, %d failed\n", passed, failed);
  free(pool);
  free(selected);
  free(tests);
  return failed ? 1 : 0;
}
