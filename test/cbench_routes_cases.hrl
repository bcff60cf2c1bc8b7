%% The shared route-table cases of cbench_routes, exported from each engine's suite (Common Test runs only
%% functions of the suite module). Included by cbench_{ehttpd,nif,port}_SUITE.
-export([routes_raw/1, routes_httpc/1, head/1, not_found_and_405/1, params_400/1, headers_json/1,
         http10/1, connection_close/1, keepalive/1, pipelining/1, get_with_body/1, echo_bodies/1,
         expect_continue/1, limit_431/1, limit_413/1, malformed_400/1, header_timeout/1,
         idle_timeout/1, stats_keys/1, trailers/1, chunk_framing/1, bad_targets/1,
         request_line/1, host_header/1]).


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
