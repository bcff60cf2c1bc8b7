/* Stubs from a JSON file (cbench-server --stubs FILE): the format is in docs/routes.md. */
#ifndef CB_STUB_JSON_H
#define CB_STUB_JSON_H

#include <stddef.h>

#include "cbench.h"

/* At most this many bytes of JSON in a stub file (CB_MAX_ROUTES stubs of 2 KiB each). */
#define CB_STUBS_FILE_MAX (256u << 20)

/* Reads `path` and adds every stub in it to srv, in file order, in one cb_server_route_add_many call (one route
 * table for the whole file). Returns the number of stubs added, or -1 with a message in msg: "FILE:LINE: FIELD:
 * what is wrong" (FIELD like stubs[2].response.status), bytes of the input that a terminal would act on written
 * as \xNN. On an error no stub of the file was added. */
int cb_stubs_json_load(cb_server_t *srv, const char *path, char *msg, size_t msgcap);

#endif
