%%% @doc The ehttpd engine: the shared route-table checks, plus its `close => true' mode.
-module(cbench_ehttpd_SUITE).

-include_lib("stdlib/include/assert.hrl").

-export([all/0, init_per_suite/1, end_per_suite/1]).
-export([close_mode/1, acceptors_on_schedulers/1]).

-include("cbench_routes_cases.hrl").

all() -> cbench_routes:cases() ++ cbench_roadrunner_wire:cases() ++ cbench_stubs:cases() ++ [close_mode, acceptors_on_schedulers].

init_per_suite(Config) -> cbench_routes:start(ehttpd, Config).

end_per_suite(Config) -> cbench:stop_server(proplists:get_value(server, Config)).

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
