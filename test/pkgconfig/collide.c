/* A program with its own llhttp and its own functions named like cbench's internals, linked against the
 * installed static libcbench: the shipped archive exports only the public cb_* API, so this links (before, it
 * failed with "multiple definition of `llhttp_init'") and both copies work. Exit status 0 when they do. */
#include <stdio.h>
#include <string.h>

#include <cbench.h>

/* Names that libcbench.a uses internally: llhttp's and cbench's own cb__ ones. */
int llhttp_init(void *parser, int type, const void *settings);
int llhttp_init(void *parser, int type, const void *settings) {
  (void)parser;
  (void)settings;
  return type + 41;
}
const char *cb__reason(int status);
const char *cb__reason(int status) { return status == 200 ? "mine" : "?"; }

int main(void) {
  cb_config_t cfg;
  cb_server_t *srv;
  int r;
  cb_config_init(&cfg);
  cfg.port = 0;
  cfg.threads = 1;
  if ((r = cb_server_start(&cfg, &srv)) != 0) {
    fprintf(stderr, "collide: cb_server_start: %s\n", cb_strerror(r));
    return 1;
  }
  cb_server_stop(srv);
  if (llhttp_init(NULL, 1, NULL) != 42 || strcmp(cb__reason(200), "mine") != 0) {
    fprintf(stderr, "collide: the program's own functions were not called\n");
    return 1;
  }
  printf("collide: own llhttp_init and cb__reason beside libcbench.a: ok\n");
  return 0;
}
