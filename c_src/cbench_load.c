/* cbench-load: the load generator (src/load/, docs/bench.md). Exit status: 0 after a run with at least one
 * measured request answered 2xx (or echoed), whatever else the server did: errors are in the results; 3 after a
 * run that had none (the results are written all the same), so that a script cannot take a hostile or missing
 * server for a clean one; 1 when the run could not be made; 2 for bad arguments (usage on stderr). */
#include <signal.h>
#include <stdio.h>
#include <string.h>

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
  int status = 1;
  if (rc == -2) { /* an option the TLS library refused: a bad argument too */
    cbl_usage(stderr);
    status = 2;
  }
  if (rc == 0) {
    if (!cfg.quiet) cbl_report_text(&run, stdout);
    rc = cbl_report_files(&run);
  }
  /* A failed handshake is said on stderr whatever else happened: a verification that fails is a setting to fix. */
  if (rc == 0 && run.total.counts.errors[CBL_ERR_TLS]) {
    const char *why = run.total.tls_error;
    fprintf(stderr, "cbench-load: %llu TLS handshake%s failed; the first: %s%s\n",
            (unsigned long long)run.total.counts.errors[CBL_ERR_TLS],
            run.total.counts.errors[CBL_ERR_TLS] == 1 ? "" : "s", why[0] ? why : "(no reason)",
            strstr(why, "hostname mismatch") ? " (the name checked is the URL's host; --insecure skips the check)"
            : strncmp(why, "no application protocol negotiated", 34) == 0
              ? " (the server speaks no h2 over TLS; -p h1 speaks HTTP/1.1 to it)"
            : strncmp(why, "certificate verify failed", 25) == 0
              ? " (--cacert FILE names the CA to trust, --insecure skips the check)" : "");
  }
  if (rc == 0) {
    status = run.total.counts.ok ? 0 : 3;
    if (status == 3) fprintf(stderr, "cbench-load: no request succeeded (exit 3)\n");
  }
  cbl_run_free(&run);
  cbl_config_free(&cfg);
  return status;
}
