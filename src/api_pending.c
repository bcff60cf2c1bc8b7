/* Placeholders of the issue-9 API while it is being built: every call answers UV_ENOSYS. */
#include "internal.h"

unsigned cb_method_bit(cb_str_t name) { (void)name; return 0; }
int cb_server_route_add(cb_server_t *srv, const cb_stub_t *stub, uint64_t *id) { (void)srv; (void)stub; (void)id; return UV_ENOSYS; }
int cb_server_route_remove(cb_server_t *srv, uint64_t id) { (void)srv; (void)id; return UV_ENOSYS; }
int cb_server_route_reset(cb_server_t *srv) { (void)srv; return UV_ENOSYS; }
int cb_server_stubs(cb_server_t *srv, cb_stub_list_t **out) { (void)srv; (void)out; return UV_ENOSYS; }
void cb_stub_list_free(cb_stub_list_t *list) { (void)list; }
int cb_server_route_counts(cb_server_t *srv, cb_route_counts_t **out) { (void)srv; (void)out; return UV_ENOSYS; }
void cb_route_counts_free(cb_route_counts_t *counts) { (void)counts; }
int cb_server_requests(cb_server_t *srv, const cb_request_filter_t *filter, cb_request_list_t **out) { (void)srv; (void)filter; (void)out; return UV_ENOSYS; }
void cb_request_list_free(cb_request_list_t *list) { (void)list; }
int cb_server_requests_clear(cb_server_t *srv) { (void)srv; return UV_ENOSYS; }
int cb_server_set_journal_listener(cb_server_t *srv, cb_journal_fn fn, void *ud) { (void)srv; (void)fn; (void)ud; return UV_ENOSYS; }
int cb_server_down(cb_server_t *srv) { (void)srv; return UV_ENOSYS; }
int cb_server_up(cb_server_t *srv) { (void)srv; return UV_ENOSYS; }
#include "testing.h"
uint64_t cb__testconn_route_count(cb__testconn_t *tc, const char *name) { (void)tc; (void)name; return 0; }
