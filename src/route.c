/* The route table: path and method to a handler. Exact paths first, then the two prefix routes. */
#include <string.h>

#include "internal.h"

#define GET_HEAD (CB__M_GET | CB__M_HEAD)
#define ROUTE(p, pre, m, id, allow, h, arg) {p, sizeof(p) - 1, pre, m, id, allow, &h, arg}

static const cb__route_t routes[] = {
    ROUTE("/", 0, GET_HEAD, 0, "GET, HEAD", cb__h_root, 0),
    ROUTE("/hello", 0, GET_HEAD, 0, "GET, HEAD", cb__h_hello, 0),
    ROUTE("/json", 0, GET_HEAD, 0, "GET, HEAD", cb__h_json, 0),
    ROUTE("/echo", 0, CB__M_POST, 0, "POST", cb__h_echo, 0),
    ROUTE("/echo/chunked", 0, CB__M_POST, 0, "POST", cb__h_echo_chunked, 0),
    ROUTE("/file/tiny", 0, GET_HEAD, 0, "GET, HEAD", cb__h_file, CB__FILE_TINY),
    ROUTE("/file/small", 0, GET_HEAD, 0, "GET, HEAD", cb__h_file, CB__FILE_SMALL),
    ROUTE("/file/big", 0, GET_HEAD, 0, "GET, HEAD", cb__h_file, CB__FILE_BIG),
    ROUTE("/stream", 0, GET_HEAD, 0, "GET, HEAD", cb__h_stream, 0),
    ROUTE("/stream/small", 0, GET_HEAD, 0, "GET, HEAD", cb__h_stream, 1),
    ROUTE("/stream/big", 0, GET_HEAD, 0, "GET, HEAD", cb__h_stream, 2),
    ROUTE("/sse", 0, GET_HEAD, 0, "GET, HEAD", cb__h_sse, 0),
    ROUTE("/sse/small", 0, GET_HEAD, 0, "GET, HEAD", cb__h_sse, 1),
    ROUTE("/sse/big", 0, GET_HEAD, 0, "GET, HEAD", cb__h_sse, 2),
    ROUTE("/headers", 0, GET_HEAD, 0, "GET, HEAD", cb__h_headers, 0),
    ROUTE("/delay/", 1, GET_HEAD, 0, "GET, HEAD", cb__h_delay, 0),
    ROUTE("/status/", 1, GET_HEAD, 0, "GET, HEAD", cb__h_status, 0),
};

static const cb__route_t not_found = {"", 0, 0, 0, 0, NULL, &cb__h_not_found, 0};

static const cb__route_t *route_find(const char *path, size_t len) {
  /* A linear scan of 17 entries, most rejected on the length: cheaper than hashing the path. */
  for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
    const cb__route_t *r = &routes[i];
    if (r->prefix) {
      if (len >= r->path_len && memcmp(path, r->path, r->path_len) == 0) return r;
    } else if (len == r->path_len && memcmp(path, r->path, len) == 0) {
      return r;
    }
  }
  return NULL;
}

void cb__req_dispatch(cb__req_t *r) {
  cb__worker_t *w = r->conn->w;
  const cb__route_t *route = route_find(r->path, r->path_len);
  if (route == NULL) route = &not_found;
  r->route = route;
  CB__STAT_INC(w, requests);
  if (route != &not_found && (route->methods & r->method) == 0) {
    r->handler = &cb__h_method_not_allowed;
  } else {
    r->handler = route->handler;
  }
  if (r->handler->on_head) r->handler->on_head(r);
}
