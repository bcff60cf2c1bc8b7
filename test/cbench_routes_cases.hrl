%% The cases every engine shares, exported from each engine's suite (Common Test runs only functions of the
%% suite module) and delegated: the route table of cbench_routes and the routes as data of cbench_stubs.
%% Included by cbench_{ehttpd,nif,port}_SUITE.
-export([routes_raw/1, routes_httpc/1, head/1, not_found_and_405/1, params_400/1, headers_json/1,
         http10/1, connection_close/1, keepalive/1, pipelining/1, get_with_body/1, echo_bodies/1,
         expect_continue/1, limit_431/1, limit_413/1, malformed_400/1, header_timeout/1,
         idle_timeout/1, stats_keys/1, trailers/1, chunk_framing/1, bad_targets/1,
         request_line/1, host_header/1]).
-export([stub_paths/1, stub_methods_405/1, stub_fields/1, stub_priority/1, stub_responses/1,
         stub_chunks/1, stub_head_http10/1, stub_times/1, stub_httpc/1, unstub_and_reset/1,
         hostile_ids/1, stubs_listed/1, stats_by_route/1, swaps_while_requests/1, journal_entries/1,
         journal_filters/1, journal_bounds/1, journal_disabled/1, expect_verify/1,
         await_other_process/1, down_up/1, stub_h2/1]).
-export([rr_large/1, rr_cookies/1, rr_gzip/1, rr_headers_heavy/1, rr_ws/1, rr_ws_errors/1]).

routes_raw(C) -> cbench_routes:routes_raw(C).
routes_httpc(C) -> cbench_routes:routes_httpc(C).
head(C) -> cbench_routes:head(C).
not_found_and_405(C) -> cbench_routes:not_found_and_405(C).
params_400(C) -> cbench_routes:params_400(C).
headers_json(C) -> cbench_routes:headers_json(C).
http10(C) -> cbench_routes:http10(C).
connection_close(C) -> cbench_routes:connection_close(C).
keepalive(C) -> cbench_routes:keepalive(C).
pipelining(C) -> cbench_routes:pipelining(C).
get_with_body(C) -> cbench_routes:get_with_body(C).
echo_bodies(C) -> cbench_routes:echo_bodies(C).
expect_continue(C) -> cbench_routes:expect_continue(C).
limit_431(C) -> cbench_routes:limit_431(C).
limit_413(C) -> cbench_routes:limit_413(C).
malformed_400(C) -> cbench_routes:malformed_400(C).
header_timeout(C) -> cbench_routes:header_timeout(C).
idle_timeout(C) -> cbench_routes:idle_timeout(C).
stats_keys(C) -> cbench_routes:stats_keys(C).
trailers(C) -> cbench_routes:trailers(C).
chunk_framing(C) -> cbench_routes:chunk_framing(C).
bad_targets(C) -> cbench_routes:bad_targets(C).
request_line(C) -> cbench_routes:request_line(C).
host_header(C) -> cbench_routes:host_header(C).

stub_paths(C) -> cbench_stubs:stub_paths(C).
stub_methods_405(C) -> cbench_stubs:stub_methods_405(C).
stub_fields(C) -> cbench_stubs:stub_fields(C).
stub_priority(C) -> cbench_stubs:stub_priority(C).
stub_responses(C) -> cbench_stubs:stub_responses(C).
stub_chunks(C) -> cbench_stubs:stub_chunks(C).
stub_head_http10(C) -> cbench_stubs:stub_head_http10(C).
stub_times(C) -> cbench_stubs:stub_times(C).
stub_httpc(C) -> cbench_stubs:stub_httpc(C).
unstub_and_reset(C) -> cbench_stubs:unstub_and_reset(C).
hostile_ids(C) -> cbench_stubs:hostile_ids(C).
stubs_listed(C) -> cbench_stubs:stubs_listed(C).
stats_by_route(C) -> cbench_stubs:stats_by_route(C).
swaps_while_requests(C) -> cbench_stubs:swaps_while_requests(C).
journal_entries(C) -> cbench_stubs:journal_entries(C).
journal_filters(C) -> cbench_stubs:journal_filters(C).
journal_bounds(C) -> cbench_stubs:journal_bounds(C).
journal_disabled(C) -> cbench_stubs:journal_disabled(C).
expect_verify(C) -> cbench_stubs:expect_verify(C).
await_other_process(C) -> cbench_stubs:await_other_process(C).
down_up(C) -> cbench_stubs:down_up(C).
stub_h2(C) -> cbench_stubs:stub_h2(C).

rr_large(C) -> cbench_roadrunner_wire:rr_large(C).
rr_cookies(C) -> cbench_roadrunner_wire:rr_cookies(C).
rr_gzip(C) -> cbench_roadrunner_wire:rr_gzip(C).
rr_headers_heavy(C) -> cbench_roadrunner_wire:rr_headers_heavy(C).
rr_ws(C) -> cbench_roadrunner_wire:rr_ws(C).
rr_ws_errors(C) -> cbench_roadrunner_wire:rr_ws_errors(C).
