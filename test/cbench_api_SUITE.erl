%%% @doc The cbench API: every function with good and bad input, settings, the `erl -s cbench'
%%% entry point and the application's stop.
-module(cbench_api_SUITE).

-include_lib("stdlib/include/assert.hrl").

-export([all/0, init_per_suite/1, end_per_suite/1]).
-export([start_bad_input/1, other_calls_bad_input/1, url_and_port/1, servers_list/1,
         stop_twice/1, settings_map/1, start_banner/1, app_stop_stops_servers/1,
         same_stats_keys/1]).

all() ->
    [start_bad_input, other_calls_bad_input, url_and_port, servers_list, stop_twice,
     settings_map, same_stats_keys, start_banner, app_stop_stops_servers].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(inets),
    {ok, _} = application:ensure_all_started(cbench),
    Config.

end_per_suite(_Config) ->
    application:stop(cbench).

%% Wrong types raise badarg; wrong values are {error, ...}.
start_bad_input(_Config) ->
    ?assertError(badarg, cbench:start_server("nif", #{})),
    ?assertError(badarg, cbench:start_server(nif, [])),
    ?assertError(badarg, cbench:start_server(nif, [{port, 0}])),
    ?assertEqual({error, {bad_engine, nginx}}, cbench:start_server(nginx, #{})),
    Bad = [{port, -1}, {port, 65536}, {port, "80"}, {ip, "not an ip"}, {ip, {1, 2, 3}},
           {ip, 42}, {threads, 0}, {threads, 257}, {threads, two}, {cpus, [a]}, {cpus, [-1]},
           {cpus, x}, {max_header_bytes, 0}, {max_body_bytes, 0}, {header_timeout_ms, 0},
           {idle_timeout_ms, -5}, {stop_timeout_ms, infinity}, {enable_h2, yes},
           {h2_max_concurrent_streams, 0}, {backlog, 0}, {bogus, 1}, {"port", 1},
           {journal, -1}, {journal, 10000001}, {journal, off}, {journal_body_bytes, -1},
           {journal_body_bytes, 1 bsl 31}],
    [?assertEqual({{error, {bad_option, K}}, E}, {cbench:start_server(E, #{K => V}), E})
     || {K, V} <- Bad, E <- [nif, port, ehttpd]],
    ?assertEqual({error, {bad_option, close}}, cbench:start_server(nif, #{close => true})),
    ?assertEqual({error, {bad_option, close}}, cbench:start_server(port, #{close => false})),
    ?assertEqual({error, {bad_option, close}}, cbench:start_server(ehttpd, #{close => 1})),
    ?assertEqual([], cbench:servers()).

other_calls_bad_input(_Config) ->
    [?assertError(badarg, F(X)) || F <- [fun cbench:stop_server/1, fun cbench:port/1,
                                         fun cbench:stats/1],
                                   X <- [foo, "pid", 1, make_ref()]],
    ?assertError(badarg, cbench:url(foo, "/")),
    {ok, S} = cbench:start_server(ehttpd, #{port => 0}),
    ?assertError(badarg, cbench:url(S, 42)),
    ?assertError(badarg, cbench:url(S, [<<"x">>])),
    %% A pid that is not a server.
    ?assertEqual({error, not_running}, cbench:port(self())),
    ?assertEqual({error, not_running}, cbench:stats(self())),
    ?assertEqual({error, not_running}, cbench:url(self(), "/")),
    ?assertEqual(ok, cbench:stop_server(self())),
    ok = cbench:stop_server(S).

url_and_port(_Config) ->
    [begin
         {ok, S} = cbench:start_server(E, #{port => 0, threads => 1}),
         P = cbench:port(S),
         ?assert(is_integer(P) andalso P > 0),
         Url = "http://127.0.0.1:" ++ integer_to_list(P) ++ "/hello",
         ?assertEqual(Url, cbench:url(S, "/hello")),
         ?assertEqual(list_to_binary(Url), cbench:url(S, <<"/hello">>)),
         ok = cbench:stop_server(S),
         ?assertEqual({error, not_running}, cbench:port(S))
     end || E <- [nif, port, ehttpd]],
    %% IPv6 literals are bracketed.
    {ok, S6} = cbench:start_server(ehttpd, #{port => 0, ip => "::1"}),
    ?assertMatch("http://[::1]:" ++ _, cbench:url(S6, "/")),
    ok = cbench:stop_server(S6).

servers_list(_Config) ->
    {ok, A} = cbench:start_server(ehttpd, #{port => 0, threads => 1}),
    {ok, B} = cbench:start_server(nif, #{port => 0, threads => 1}),
    Servers = cbench:servers(),
    ?assertEqual([{A, ehttpd}, {B, nif}],
                 lists:sort([{S, E} || #{server := S, engine := E} <- Servers])),
    [?assertMatch(#{port := P, url := "http://127.0.0.1:" ++ _} when is_integer(P), I)
     || I <- Servers],
    ok = cbench:stop_server(A),
    ok = cbench:stop_server(B),
    ?assertEqual([], cbench:servers()).

stop_twice(_Config) ->
    [begin
         {ok, S} = cbench:start_server(E, #{port => 0, threads => 1}),
         ok = cbench:stop_server(S),
         ok = cbench:stop_server(S)
     end || E <- [nif, port, ehttpd]],
    ok.

settings_map(_Config) ->
    S = cbench:settings(),
    ?assertMatch(#{schedulers := N, schedulers_online := N, bound := false,
                   busy_wait := _, bindings := _, engines := #{nif := #{threads := N},
                                                              port := #{threads := N},
                                                              ehttpd := #{threads := N}}}
                   when is_integer(N), S),
    %% Unbound schedulers: no pinning by default.
    ?assertMatch(#{engines := #{nif := #{cpus := []}}}, S).

%% The counters have the same keys whatever the engine.
same_stats_keys(_Config) ->
    Keys = [begin
                {ok, S} = cbench:start_server(E, #{port => 0, threads => 1}),
                St = cbench:stats(S),
                ok = cbench:stop_server(S),
                {lists:sort(maps:keys(St)),
                 lists:sort(maps:keys(maps:get(requests_by_route, St))),
                 lists:sort(maps:keys(maps:get(requests_by_proto, St)))}
            end || E <- [nif, port, ehttpd]],
    ?assertMatch([K, K, K], Keys).

%% cbench:start/0 (`erl -s cbench') starts the three engines on the ports of the env and prints
%% the banner; cbench:stop/0 stops them all.
start_banner(_Config) ->
    ok = application:set_env(cbench, ports, [{ehttpd, 0}, {nif, 0}, {port, 0}]),
    ok = cbench:start(),
    ?assertEqual([ehttpd, nif, port], lists:sort([E || #{engine := E} <- cbench:servers()])),
    [begin
         {ok, {{_, 200, _}, _, "Hello, Joe!"}} = httpc:request(Url ++ "hello")
     end || #{url := Url} <- cbench:servers()],
    ok = cbench:stop(),
    ?assertEqual([], cbench:servers()),
    {ok, _} = application:ensure_all_started(cbench),
    ok = application:unset_env(cbench, ports).

%% application:stop stops every engine: nothing listens afterwards.
app_stop_stops_servers(_Config) ->
    {ok, _} = application:ensure_all_started(cbench),
    Ports = [begin {ok, S} = cbench:start_server(E, #{port => 0, threads => 1}), cbench:port(S) end
             || E <- [nif, port, ehttpd]],
    ok = application:stop(cbench),
    [?assertEqual({error, econnrefused}, gen_tcp:connect({127, 0, 0, 1}, P, [], 1000))
     || P <- Ports],
    {ok, _} = application:ensure_all_started(cbench).
