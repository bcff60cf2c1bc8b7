%%% @doc The nif engine: the shared route-table checks, owner monitoring and the resource.
-module(cbench_nif_SUITE).

-include_lib("stdlib/include/assert.hrl").

-export([all/0, init_per_suite/1, end_per_suite/1]).
-export([routes_raw/1, routes_httpc/1, head/1, not_found_and_405/1, params_400/1, headers_json/1,
         http10/1, connection_close/1, keepalive/1, pipelining/1, get_with_body/1, echo_bodies/1,
         expect_continue/1, limit_431/1, limit_413/1, malformed_400/1, header_timeout/1,
         idle_timeout/1, stats_keys/1]).
-export([owner_killed/1, direct_owner_dies/1, resource_after_stop/1, port_in_use/1]).

all() -> cbench_routes:cases() ++ [owner_killed, direct_owner_dies, resource_after_stop, port_in_use].

init_per_suite(Config) -> cbench_routes:start(nif, Config).

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


%% Killing the server's process (the NIF resource's owner) stops the engine: the monitor's down
%% callback hands it to the reaper thread.
owner_killed(_Config) ->
    {ok, S} = cbench:start_server(nif, #{port => 0, threads => 1}),
    P = cbench:port(S),
    {ok, C} = gen_tcp:connect({127, 0, 0, 1}, P, [binary, {active, false}]),
    gen_tcp:close(C),
    exit(S, kill),
    ok = wait_refused(P, 100).

%% The same for a server started directly by a plain process that then dies.
direct_owner_dies(_Config) ->
    Self = self(),
    Owner = spawn(fun() ->
                          {ok, Opts} = cbench_opts:validate(nif, #{port => 0, threads => 1}),
                          {ok, H} = cbench_nif:start(Opts),
                          Self ! {port, cbench_nif:port(H)},
                          receive stop -> ok end
                  end),
    P = receive {port, Port} -> Port after 10000 -> ct:fail(no_port) end,
    {ok, C} = gen_tcp:connect({127, 0, 0, 1}, P, [binary, {active, false}]),
    gen_tcp:close(C),
    exit(Owner, kill),
    ok = wait_refused(P, 100).

%% Stop is idempotent on the resource; stats then says stopped; the port stays known.
resource_after_stop(_Config) ->
    {ok, Opts} = cbench_opts:validate(nif, #{port => 0, threads => 2, cpus => []}),
    {ok, H} = cbench_nif:start(Opts),
    ?assertMatch(#{threads := 2, cpus := [-1, -1]}, cbench_nif:info(H)),
    ?assertMatch(#{requests := 0}, cbench_nif:stats(H)),
    P = cbench_nif:port(H),
    ok = cbench_nif:stop(H),
    ok = cbench_nif:stop(H),
    ?assertEqual({error, stopped}, cbench_nif:stats(H)),
    ?assertEqual(P, cbench_nif:port(H)),
    ?assertError(badarg, cbench_nif:stop(make_ref())),
    ?assertError(badarg, cbench_nif:start_nif(#{})),
    ?assertError(badarg, cbench_nif:start_nif(not_a_map)),
    ?assertError(badarg, cbench_nif:stats_nif(<<>>)),
    ok.

%% The engine's own errors come back as {error, Atom}.
port_in_use(_Config) ->
    {ok, S} = cbench:start_server(nif, #{port => 0, threads => 1}),
    P = cbench:port(S),
    ?assertEqual({error, eaddrinuse}, cbench:start_server(nif, #{port => P})),
    ?assertEqual({error, eaddrinuse}, cbench:start_server(port, #{port => P})),
    ?assertEqual({error, eaddrinuse}, cbench:start_server(ehttpd, #{port => P})),
    ok = cbench:stop_server(S).

wait_refused(_P, 0) -> {error, still_listening};
wait_refused(P, N) ->
    case gen_tcp:connect({127, 0, 0, 1}, P, [binary, {active, false}], 1000) of
        {error, econnrefused} -> ok;
        {ok, C} -> gen_tcp:close(C), timer:sleep(50), wait_refused(P, N - 1);
        {error, _} -> timer:sleep(50), wait_refused(P, N - 1)
    end.
