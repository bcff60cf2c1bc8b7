/* The text a stub's {"json": ...} body is served as: one canonical compact form, so that every engine serves the
 * same bytes for the same stub file (ehttpd writes the same form with cbench_json:encode/1; docs/routes.md). */
#ifndef CB_JSON_TEXT_H
#define CB_JSON_TEXT_H

#include <jansson.h>

/* v as compact JSON text: object members sorted bytewise by key, no white space, strings with jansson's escapes
 * (\" \\ \b \f \n \r \t, \u00XX in upper case for the other bytes below 0x20, UTF-8 as it is), integers in
 * decimal, reals as the shortest text that reads back to the same double, written as Erlang's
 * float_to_binary(F, [short]) writes it ("0.1", "100.0", "1.0e-7", "-0.0"). Returns a NUL-terminated string the
 * caller frees with free(), or NULL when out of memory. */
char *cb__json_text(const json_t *v);

#endif
