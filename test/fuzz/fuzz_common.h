/* What the fuzz targets share: the output sink and where the fixture files are kept between inputs. */
#ifndef CB_FUZZ_COMMON_H
#define CB_FUZZ_COMMON_H

#include <stdlib.h>

static size_t out_bytes;

static void sink(void *arg, const char *p, size_t len) {
  (void)arg;
  /* Touch both ends so that ASan checks the whole range the engine hands out. */
  if (len > 0) out_bytes += (size_t)(unsigned char)p[0] + (size_t)(unsigned char)p[len - 1];
  out_bytes += len;
}

/* A directory, so that the 5 MiB of fixture files are written once, not once per input (memfd). */
static const char *fixture_dir(void) {
  const char *env = getenv("CBT_FIXTURE_DIR");
  return env && *env ? env : "/tmp/cbench-fuzz-fixtures";
}

#endif
