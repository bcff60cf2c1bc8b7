/* Scenario states (issue 25), as the NIF answers them (nif/nif_scenario.c):
 *   {scenario, Name}               ->  {ok, State} | {error, Reason}
 *   {scenario_set, Name, State}    ->  ok | {error, Reason}
 *   scenarios_reset                ->  ok */
#include "port.h"

void port_scenario(const char *buf, int *idx) {
  cb_str_t name;
  if (port_get_bin(buf, idx, &name) != 0) {
    port_reply_error_atom("badarg");
    return;
  }
  char state[CB_MAX_NAME + 1];
  int n = cb_server_scenario(port_server, name, state, sizeof state);
  if (n < 0) {
    port_reply_error(n);
    return;
  }
  ei_x_buff x;
  port_new(&x);
  ei_x_encode_tuple_header(&x, 2);
  ei_x_encode_atom(&x, "ok");
  ei_x_encode_binary(&x, state, n);
  port_send(&x);
}

void port_scenario_set(const char *buf, int *idx) {
  cb_str_t name, state;
  if (port_get_bin(buf, idx, &name) != 0 || port_get_bin(buf, idx, &state) != 0) {
    port_reply_error_atom("badarg");
    return;
  }
  port_reply_result(cb_server_scenario_set(port_server, name, state));
}

void port_scenarios_reset(void) { port_reply_result(cb_server_scenarios_reset(port_server)); }
