%%% @doc The ehttpd engine: the shared route-table checks, plus its `close => true' mode.
-module(cbench_ehttpd_SUITE).

-include_lib("stdlib/include/assert.hrl").

-export([all/0, init_per_suite/1, end_per_suite/1]).
-export([routes_raw/1, routes_httpc/1, head/1, not_found_and_405/1, params_400/1, headers_json/1,
         http10/1, connection_close/1, keepalive/1, pipelining/1, get_with_body/1, echo_bodies/1,
         expect_continue/1, limit_431/1, limit_413/1, malformed_400/1, header_timeout/1,
         idle_timeout/1, stats_keys/1]).
-export([close_mode/1, acceptors_on_schedulers/1]).

all() -> cbench_routes:cases() ++ [close_mode, acceptors_on_schedulers].

init_per_suite(Config) -> cbench_routes:start(ehttpd, Config).

end_per_suite(Config) -> cbench:stop_server(proplists:get_value(server, Config)).

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

%% The original ehttpd: every request gets the same 12-byte answer, then the connection closes.
close_mode(_Config) ->
    {ok, S} = cbench:start_server(ehttpd, #{port => 0, close => true}),
    P = cbench:port(S),
    [begin
         {ok, C} = gen_tcp:connect({127, 0, 0, 1}, P, [binary, {active, false}]),
         ok = gen_tcp:send(C, Req),
         ?assertEqual({ok, <<"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\nhello world!">>},
                      gen_tcp:recv(C, 51, 5000)),
         ?assertEqual({error, closed}, gen_tcp:recv(C, 0, 5000))
     end || Req <- ["GET / HTTP/1.1\r\nHost: x\r\n\r\n", "GET /hello HTTP/1.0\r\n\r\n"]],
    ok = cbench:stop_server(S).

%% One acceptor per scheduler by default.
acceptors_on_schedulers(_Config) ->
    {ok, S} = cbench:start_server(ehttpd, #{port => 0}),
    [#{threads := T, schedulers := Scheds}] =
        [I || I = #{server := Srv} <- cbench:servers(), Srv =:= S],
    Online = erlang:system_info(schedulers_online),
    ?assertEqual(Online, T),
    ?assertEqual(lists:seq(1, Online), Scheds),
    ok = cbench:stop_server(S).
