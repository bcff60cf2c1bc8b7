/* Fixture files and static payloads: deterministic content, made once, shared read-only by every worker. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"

static const char *const file_names[CB__FILE_COUNT] = {"tiny", "small", "big"};
static const uint64_t file_sizes[CB__FILE_COUNT] = {1024, 102400, 5242880};

/* Writes size bytes of fixture content (byte i is i % 251) to fd. */
static int fill(int fd, uint64_t size) {
  /* Whole periods of 251 bytes plus one spare period, so a write can start at any phase (pos % 251). */
  static const size_t chunk = 251 * 32;
  char block[251 * 33];
  for (size_t i = 0; i < sizeof block; i++) block[i] = (char)(i % 251);
  uint64_t pos = 0;
  while (pos < size) {
    size_t n = size - pos < chunk ? (size_t)(size - pos) : chunk;
    ssize_t w = write(fd, block + pos % 251, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    pos += (uint64_t)w;
  }
  return 0;
}

/* A file in a directory the caller named: reused when a regular file of the right size is there (a
 * fixture_dir shared by several servers); otherwise written under a temporary name and renamed, so no reader
 * sees half. Nothing there can make the start block: the temporary file is created afresh (O_EXCL, so a FIFO
 * left under its name is an error, not a wait for a reader), and the file is opened with O_NONBLOCK and
 * checked through its descriptor (a FIFO or a device put in its place meanwhile is refused). */
static int open_in_dir(const char *dir, const char *name, uint64_t size) {
  char path[600], tmp[640];
  struct stat st;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != size) {
    snprintf(tmp, sizeof tmp, "%s/.%s.%ld.tmp", dir, name, (long)getpid());
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    if (fill(fd, size) != 0 || close(fd) != 0 || rename(tmp, path) != 0) {
      unlink(tmp);
      return -1;
    }
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return -1;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != size) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Without a directory the files live in memory (memfd): nothing on disk to leak when a process is killed,
 * and sendfile(2) reads them from the page cache like any file. */
static int open_in_memory(const char *name, uint64_t size) {
  char label[32];
  snprintf(label, sizeof label, "cbench-%s", name);
  int fd = memfd_create(label, MFD_CLOEXEC);
  if (fd < 0) return -1;
  if (fill(fd, size) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

int cb__fixtures_open(cb__fixtures_t *fx, const char *dir) {
  memset(fx, 0, sizeof *fx);
  for (int i = 0; i < CB__FILE_COUNT; i++) fx->fd[i] = -1;
  if (dir != NULL) {
    if (strlen(dir) >= sizeof fx->dir - 16) return CB_EFIXTURE;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return CB_EFIXTURE;
    snprintf(fx->dir, sizeof fx->dir, "%s", dir);
  }
  for (int i = 0; i < CB__FILE_COUNT; i++) {
    fx->fd[i] = dir ? open_in_dir(dir, file_names[i], file_sizes[i]) : open_in_memory(file_names[i], file_sizes[i]);
    if (fx->fd[i] < 0) {
      cb__fixtures_close(fx);
      return CB_EFIXTURE;
    }
    fx->size[i] = file_sizes[i];
    void *m = mmap(NULL, (size_t)file_sizes[i], PROT_READ, MAP_SHARED, fx->fd[i], 0);
    fx->map[i] = m == MAP_FAILED ? NULL : m; /* without it HTTP/2 falls back to sendfile */
  }
  return 0;
}

void cb__fixtures_close(cb__fixtures_t *fx) {
  for (int i = 0; i < CB__FILE_COUNT; i++) {
    if (fx->map[i] != NULL) munmap((void *)fx->map[i], (size_t)fx->size[i]);
    fx->map[i] = NULL;
    if (fx->fd[i] >= 0) close(fx->fd[i]);
    fx->fd[i] = -1;
  }
}

/* ---- static payloads ---- */

static cb__payloads_t payloads;
static pthread_once_t payloads_once = PTHREAD_ONCE_INIT;
static char line_buf[64];
static char bigline_buf[64 * 256];
static char sse_line_buf[18 + 64 + 2];
static char sse_big_buf[18 + 64 * 256 + 2];

static size_t make_event(char *dst, const char *data, size_t n) {
  static const char prefix[] = "event: tick\ndata: ";
  memcpy(dst, prefix, sizeof prefix - 1);
  memcpy(dst + sizeof prefix - 1, data, n);
  memcpy(dst + sizeof prefix - 1 + n, "\n\n", 2);
  return sizeof prefix - 1 + n + 2;
}

static void build_payloads(void) {
  for (int i = 0; i < 4; i++) memcpy(line_buf + 16 * i, "0123456789abcdef", 16);
  for (int i = 0; i < 256; i++) memcpy(bigline_buf + 64 * i, line_buf, 64);
  payloads.line = (cb__slice_t){line_buf, sizeof line_buf};
  payloads.bigline = (cb__slice_t){bigline_buf, sizeof bigline_buf};
  payloads.sse_line = (cb__slice_t){sse_line_buf, make_event(sse_line_buf, line_buf, sizeof line_buf)};
  payloads.sse_big = (cb__slice_t){sse_big_buf, make_event(sse_big_buf, bigline_buf, sizeof bigline_buf)};
}

const cb__payloads_t *cb__payloads(void) {
  pthread_once(&payloads_once, build_payloads);
  return &payloads;
}

/* ---- generated content ---- */

static char *generated;
static pthread_once_t generated_once = PTHREAD_ONCE_INIT;

static void build_generated(void) {
  generated = malloc(CB__GEN_SPAN + 251);
  if (generated == NULL) return;
  for (size_t i = 0; i < CB__GEN_SPAN + 251; i++) generated[i] = (char)(i % 251);
}

const char *cb__generated(void) {
  pthread_once(&generated_once, build_generated);
  return generated;
}
