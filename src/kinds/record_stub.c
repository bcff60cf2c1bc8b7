/* TEMPORARY, for the i26-proxy branch only (see record_stub.h): a weak stand-in for the recorder, so that the
 * proxy builds and its tests run before the record branch is merged. It counts the exchanges it is given (the
 * proxy's tests read the count) and keeps nothing. The record branch's strong definition replaces it; the lead
 * drops this file at merge. */
#include "kinds/record_stub.h"

uint64_t cb__record_stub_calls; /* atomic */

__attribute__((weak)) int cb__record_exchange(cb_server_t *srv, const cb__exchange_t *x) {
  (void)srv;
  (void)x;
  __atomic_add_fetch(&cb__record_stub_calls, 1, __ATOMIC_RELAXED);
  return 0;
}
