/* Stubs from a JSON file (cbench-server --stubs FILE): the format is in docs/routes.md. */
#ifndef CB_STUB_JSON_H
#define CB_STUB_JSON_H

#include <stddef.h>

#include "cbench.h"

/* Reads `path` and adds every stub in it to srv, in file order. Returns the number of stubs added, or -1 with a
 * message in msg: "FILE:LINE: FIELD: what is wrong" (FIELD like stubs[2].response.status). Stubs added before
 * an error stay added (the caller stops the server). */
int cb_stubs_json_load(cb_server_t *srv, const char *path, char *msg, size_t msgcap);

#endif
