/* Stubs as JSON (the stub file of cbench-server --stubs and cb_server_stubs_file(), the admin API's POST /stubs):
 * the format is in docs/routes.md. The library's own (not exported); the C tests call it directly. */
#ifndef CB_STUB_JSON_H
#define CB_STUB_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "cbench.h"

/* At most this many bytes of JSON in a stub file (CB_MAX_ROUTES stubs of 2 KiB each). */
#define CB_STUBS_FILE_MAX (256u << 20)

/* Reads `path` and adds every stub in it to srv, in file order, in one cb_server_route_add_many call (one route
 * table for the whole file). Returns the number of stubs added, or -1 with a message in msg: "FILE:LINE: FIELD:
 * what is wrong" (FIELD like stubs[2].response.status), bytes of the input that a terminal would act on written
 * as \xNN. On an error no stub of the file was added. */
int cb_stubs_json_load(cb_server_t *srv, const char *path, char *msg, size_t msgcap);

/* What a stub asks of verification: "expect": {"times": N} (exactly N requests) or {"at_least": N}. The engine
 * does not verify; the admin API's POST /verify does (src/admin.c, docs/routes.md). */
typedef enum { CB_STUB_EXPECT_NONE = 0, CB_STUB_EXPECT_TIMES, CB_STUB_EXPECT_AT_LEAST } cb_stub_expect_kind;

typedef struct cb_stub_added_s {
  uint64_t id;
  cb_stub_expect_kind expect;
  uint64_t expect_n;
} cb_stub_added_t;

/* Why JSON stubs were refused, as the message and in parts (for the admin API's 400 answers). */
typedef struct cb_stubs_json_error_s {
  char msg[1024];             /* as cb_stubs_json_load's, LABEL in place of the file */
  char field[256];            /* "stubs[0].match.path"; "" when the JSON did not parse */
  char why[40];               /* "unknown_key", "wrong_type", ... (the reasons of cb_error_detail()); "bad_json" */
  char value[CB_DETAIL_TEXT]; /* the value refused, escaped, when the engine named it; else "" */
  int line, column;           /* of the field, or of the JSON syntax error; column 0 when unknown */
} cb_stubs_json_error_t;

/* As cb_stubs_json_load, for stubs in memory: text (len bytes, one stub object, a list, or {"stubs": [...]}),
 * named `label` in messages, relative body files under `dir` (NULL: the working directory). On success returns
 * the number added and, when added is not NULL, *added (malloc'd, free() it; NULL for 0 stubs) holds each
 * stub's id and expectation in order. On error returns -1 with err filled and nothing added. */
int cb_stubs_json_add(cb_server_t *srv, const char *label, const char *dir, const char *text, size_t len,
                      cb_stub_added_t **added, cb_stubs_json_error_t *err);

/* cb_stubs_json_load that also returns what cb_stubs_json_add's `added` does. */
int cb_stubs_json_load_added(cb_server_t *srv, const char *path, cb_stub_added_t **added, char *msg,
                             size_t msgcap);

#endif
