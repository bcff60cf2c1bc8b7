%%% @doc The nif engine: the shared route-table checks, owner monitoring and the resource.
-module(cbench_nif_SUITE).

-include_lib("stdlib/include/assert.hrl").

-export([all/0, init_per_suite/1, end_per_suite/1]).
-export([owner_killed/1, direct_owner_dies/1, resource_after_stop/1, port_in_use/1]).

-include("cbench_routes_cases.hrl").

all() -> cbench_routes:cases() ++ cbench_roadrunner_wire:cases() ++ cbench_stubs:cases() ++ cbench_stubs:h2_cases() ++ [owner_killed, direct_owner_dies, resource_after_stop, port_in_use].

init_per_suite(Config) -> cbench_routes:start(nif, Config).

end_per_suite(Config) -> cbench:stop_server(proplists:get_value(server, Config)).

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
    ?assertMatch({error, {bad_option, bogus, 1, {known, [host | _]}}},
                 cbench_nif:start_nif(#{bogus => 1})),
    ?assertEqual({error, {bad_option, port, -1, {integer, 0, 65535}}},
                 cbench_nif:start_nif(#{port => -1})),
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
