/* Names for error codes and protocols. (Route names live in the route table.) */
#include <uv.h>

#include "internal.h"

const char *cb_strerror(int err) {
  switch (err) {
    case 0: return "success";
    case CB_EFIXTURE: return "the fixture files could not be written or opened";
    case CB_ESTOPPED: return "the server is stopping or stopped";
    case CB_ETHREADS: return "the number of threads or a CPU number is out of range";
    case CB_ELIMIT: return "a size limit or timeout is out of range";
    case CB_EGONE: return "the request was answered already or its client is gone";
    case CB_ENOTSTREAMING: return "the request's streamed answer has not begun";
    default: break;
  }
  /* libuv allocates (and never frees) a string for codes it does not know: format those here instead. */
  static __thread char buf[64];
  uv_strerror_r(err, buf, sizeof buf);
  return buf;
}

const char *cb_err_name(int err) {
  switch (err) {
    case 0: return "OK";
    case CB_EFIXTURE: return "CB_EFIXTURE";
    case CB_ESTOPPED: return "CB_ESTOPPED";
    case CB_ETHREADS: return "CB_ETHREADS";
    case CB_ELIMIT: return "CB_ELIMIT";
    case CB_EGONE: return "CB_EGONE";
    case CB_ENOTSTREAMING: return "CB_ENOTSTREAMING";
    default: break;
  }
  static __thread char buf[64];
  uv_err_name_r(err, buf, sizeof buf);
  return buf;
}

const char *cb_proto_name(int proto) {
  static const char *const names[CB_PROTO_COUNT] = {"http1", "h2c_prior", "h2c_upgrade"};
  return proto >= 0 && proto < CB_PROTO_COUNT ? names[proto] : NULL;
}

const char *cb_version(void) { return "0.1.0"; }
