/* cbench-load: the load generator (src/load/, docs/bench.md). Exit status: 0 after a run (whatever the server
 * answered: errors are in the results), 1 when the run could not be made, 2 for bad arguments (usage on
 * stderr). */
#include <signal.h>
#include <stdio.h>

#include "load.h"

int main(int argc, char **argv) {
  cbl_config_t cfg;
  int rc = cbl_config_parse(&cfg, argc, argv);
  if (rc != 0) {
    if (rc < 0) cbl_usage(stderr);
    cbl_config_free(&cfg);
    return rc < 0 ? 2 : 0;
  }
  /* A peer that closes while we write must be an error on that socket, not the end of the process. */
  signal(SIGPIPE, SIG_IGN);
  cbl_run_t run;
  rc = cbl_run(&run, &cfg);
  if (rc == 0) {
    if (!cfg.quiet) cbl_report_text(&run, stdout);
    rc = cbl_report_files(&run);
  }
  cbl_run_free(&run);
  cbl_config_free(&cfg);
  return rc == 0 ? 0 : 1;
}
