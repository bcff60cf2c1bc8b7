%% @doc Tests of the client benchmark (make bench-clients-unit, part of make test).
%%
%% The arithmetic on cells recorded from real runs (bench/test/samples/clients_cell_*.term: the raw
%% measurements of a clean tcp cell, and of an httpc cell whose fixture was stopped 400 ms in), the
%% error kinds, the command line and the report's rows; then the real path in this node: both
%% adapters against a cbench server, a server stopped mid-cell (errors, within a bound, never a
%% hang), the runner's guards against adapters that hang or crash, and the fixture placed on
%% another node through distributed Erlang (a local peer node standing for a remote machine).
-module(cbench_clients_tests).

-include_lib("eunit/include/eunit.hrl").

%% The repository: this module is bench/test/ebin/cbench_clients_tests.beam in it.
root() ->
    Beam = filename:absname(code:which(?MODULE)),
    filename:dirname(filename:dirname(filename:dirname(filename:dirname(Beam)))).

sample(Name) ->
    {ok, [T]} = file:consult(filename:join([root(), "bench", "test", "samples", Name])),
    T.

%% --- arithmetic on recorded cells ------------------------------------------

clean_cell_figures_test() ->
    F = cbench_clients_cell:figures(sample("clients_cell_tcp_c32.term")),
    %% 400 successes in 153,490 us.
    ?assertEqual(400 / 0.15349, maps:get(rps, F)),
    ?assertEqual(0, maps:get(errors_total, F)),
    ?assertEqual(0.0, maps:get(error_pct, F)),
    ?assertEqual(10522, maps:get(p50_us, F)),
    ?assertEqual(19379, maps:get(p99_us, F)).

stopped_fixture_figures_test() ->
    R = sample("clients_cell_httpc_stopped.term"),
    F = cbench_clients_cell:figures(R),
    %% 2,074 successes in 533,471 us; 10 closed and 916 refused of 3,000 finished requests.
    ?assertEqual(2074 / 0.533471, maps:get(rps, F)),
    ?assertEqual(926, maps:get(errors_total, F)),
    ?assertEqual(100 * 926 / 3000, maps:get(error_pct, F)),
    ?assertEqual(#{timeout => 0.0, closed => 100 * 10 / 3000, refused => 100 * 916 / 3000, other => 0.0},
                 maps:get(error_pcts, F)),
    ?assertEqual(11311, maps:get(p50_us, F)),
    ?assertEqual(32588, maps:get(p99_us, F)),
    %% The recorded reasons are those the kinds come from.
    #{examples := #{closed := [C], refused := [Rf]}} = R,
    ?assertEqual(closed, cbench_client:error_kind(C)),
    ?assertEqual(refused, cbench_client:error_kind(Rf)).

empty_cell_figures_test() ->
    F = cbench_clients_cell:figures(#{ok => 0, errors => #{timeout => 5, closed => 0, refused => 0, other => 0},
                                      elapsed_us => 1000000, latencies_us => []}),
    ?assertEqual(0.0, maps:get(rps, F)),
    ?assertEqual(100.0, maps:get(error_pct, F)),
    ?assertEqual(undefined, maps:get(p50_us, F)),
    ?assertEqual(#{rps => undefined, error_pct => undefined, errors_total => undefined, p50_us => undefined,
                   p99_us => undefined, error_pcts => #{}},
                 cbench_clients_cell:figures(#{status => start_failed})).

error_kind_test_() ->
    K = fun cbench_client:error_kind/1,
    [?_assertEqual(timeout, K(timeout)),
     ?_assertEqual(timeout, K({failed_connect, [{to_address, {"h", 1}}, {inet, [inet], timeout}]})),
     ?_assertEqual(timeout, K(checkout_timeout)),                         % hackney's pool
     ?_assertEqual(timeout, K(#{'__struct__' => 'Elixir.Mint.TransportError', reason => timeout})),
     ?_assertEqual(refused, K(econnrefused)),
     ?_assertEqual(refused, K({shutdown, econnrefused})),                 % gun
     ?_assertEqual(refused, K({failed_connect, [{to_address, {"h", 1}}, {inet, [inet], econnrefused}]})),
     ?_assertEqual(closed, K(socket_closed_remotely)),                    % httpc
     ?_assertEqual(closed, K({closed, <<"partial">>})),
     ?_assertEqual(closed, K(econnreset)),
     ?_assertEqual(other, K({status, 404})),
     ?_assertEqual(other, K(emfile)),
     ?_assertEqual(other, K({error, {badmatch, 3}})),
     %% Only a few levels are searched: a reason is not a data structure to walk whole.
     ?_assertEqual(other, K([[[[[[[[timeout]]]]]]]]))].

%% --- rows, the table and the plan ------------------------------------------

server_stats(Requests, Conns, Resets) ->
    #{requests => Requests, conns_accepted => Conns, resets => Resets, timeouts => 0, status_400 => 0,
      status_404 => 0, status_405 => 0, status_413 => 0, status_431 => 0, h2_errors => 0,
      accept_backoffs => 0, conns_open => 0}.

cell_row_test() ->
    Raw = (sample("clients_cell_httpc_stopped.term"))#{
            client => "httpc", module => cbench_client_httpc,
            probe => #{server => #{cpu_pct => 93.5, cpu_s => 0.5, rss_peak_kb => 40000, beam_peak => 1000},
                       client => #{cpu_pct => 99.0}}},
    Row = cbench_clients:cell_row(Raw, #{before => server_stats(100, 10, 0),
                                         'after' => server_stats(2184, 26, 3),
                                         cpus => 1, leftover => 0}),
    ?assertEqual(2084, maps:get(server_requests, Row)),
    ?assertEqual(16, maps:get(server_conns, Row)),
    ?assertEqual(#{resets => 3}, maps:get(server_errors, Row)),
    ?assertEqual(0.5 / 2084 * 1.0e6, maps:get(server_cpu_us, Row)),
    ?assertEqual(40000, maps:get(server_rss_kb, Row)),
    ?assertEqual(99.0, maps:get(client_cpu_pct, Row)),
    %% 93.5% of one CPU is saturated; of two it is not.
    ?assert(maps:get(server_saturated, Row)),
    ?assertNot(maps:get(server_saturated, cbench_clients:cell_row(Raw, #{cpus => 2}))),
    ?assertEqual(undefined, maps:get(server_errors, cbench_clients:cell_row(Raw, #{cpus => 1}))),
    ?assertNot(maps:is_key(latencies_us, Row)),
    ?assertEqual(2, length(maps:get(examples, Row))).

hold_row_test() ->
    Raw = (sample("clients_cell_tcp_c32.term"))#{client => "tcp", engine => nif, delay => 10},
    Row = cbench_clients:hold_row(Raw, #{before => server_stats(0, 0, 0), 'after' => server_stats(400, 32, 0),
                                         cpus => 1}),
    %% The server answered 400 requests in 153,490 us, each held 10 ms.
    ?assertEqual(400 / 0.15349, maps:get(server_rps, Row)),
    ?assertEqual(400 / 0.15349 * 10 / 1000, maps:get(held, Row)),
    ?assertEqual(#{}, maps:get(server_errors, Row)).

server_errors_test() ->
    ?assertEqual(#{}, cbench_clients:server_errors(server_stats(1, 1, 0), server_stats(9, 9, 0))),
    ?assertEqual(#{resets => 2}, cbench_clients:server_errors(server_stats(1, 1, 0), server_stats(9, 9, 2))),
    ?assertEqual(undefined, cbench_clients:server_errors(undefined, server_stats(9, 9, 2))).

seed_rows_test() ->
    Cells = [#{client => "httpc", pool_count => 1, pool_size => 64, concurrency => 256, rps => 5400.4,
               error_pct => 0.0, status => ok, server_saturated => false},
             #{client => "tcp", pooled => false, pool_count => 1, pool_size => 1, concurrency => 256,
               rps => 21408.0, error_pct => 0.04, status => ok, server_saturated => true},
             #{client => "httpc", pool_count => 4, pool_size => 16, concurrency => 16384, rps => 1299.0,
               error_pct => 92.35, status => capped, server_saturated => false},
             #{client => "httpc", pool_count => 4, pool_size => 16, concurrency => 256, status => start_failed}],
    ?assertEqual([["tcp", "-", "-", "256", "21,408 !", "0.0"],
                  ["httpc", "1", "64", "256", "5,400", "0.0"],
                  ["httpc", "4", "16", "16384", "1,299 +", "92.3"]],
                 cbench_clients_report:seed_rows(Cells)),
    ?assertEqual("start_failed", cbench_clients_report:rps_cell(lists:last(Cells))).

hold_ratios_test() ->
    Hold = [#{engine => nif, delay => 10, server_cpu_us => 10.0, server_rss_kb => 40000},
            #{engine => ehttpd, delay => 10, server_cpu_us => 45.0, server_rss_kb => 120000},
            #{engine => nif, delay => 1000, server_cpu_us => 12.0, server_rss_kb => 50000},
            #{engine => ehttpd, delay => 1000, server_cpu_us => undefined, server_rss_kb => 100000}],
    ?assertEqual([{10, ehttpd, 4.5, 3.0}, {1000, ehttpd, undefined, 2.0}],
                 cbench_clients_report:hold_ratios(Hold)).

plan_test() ->
    {ok, Cfg} = cbench_clients:parse_args(["--profile", "smoke", "--concurrency", "32,8",
                                           "--pool-sizes", "4,2", "--pool-counts", "1"]),
    Plan = cbench_clients:plan(Cfg),
    %% httpc: 1 pool count x 2 sizes x 2 concurrencies; tcp (no pool): once per concurrency.
    ?assertEqual([{"httpc", 1, 2, 8}, {"httpc", 1, 2, 32}, {"httpc", 1, 4, 8}, {"httpc", 1, 4, 32},
                  {"tcp", 1, 1, 8}, {"tcp", 1, 1, 32}],
                 [{N, PC, PS, C} || #{client := N, pool_count := PC, pool_size := PS, concurrency := C} <- Plan]).

profiles_test() ->
    {ok, Q} = cbench_clients:parse_args([]),
    ?assertEqual(quick, maps:get(profile, Q)),
    ?assertEqual(16384, lists:max(maps:get(concurrency, Q))),
    {ok, F} = cbench_clients:parse_args(["--profile", "full"]),
    ?assertEqual([256, 512, 1024, 2048, 4096, 8192, 16384], maps:get(concurrency, F)),
    ?assertEqual([1, 2, 4, 8, 16, 32, 64, 128, 256, 512], maps:get(pool_sizes, F)),
    ?assertEqual([1, 2, 4, 8, 16, 32], maps:get(pool_counts, F)),
    ?assertEqual({1000, 10}, {maps:get(timeout, F), maps:get(delay, F)}).

bad_args_test_() ->
    [?_assertMatch({error, _}, cbench_clients:parse_args(A))
     || A <- [["--profile", "huge"], ["--clients", "nope"], ["--concurrency", "0"], ["--concurrency", "x"],
              ["--engine", "apache"], ["--server-node", "nohost"], ["--url", "ftp://x/"],
              ["--delay", "60001"], ["--server-ip", "localhost"], ["--frobnicate"], ["--timeout"]]].

%% --- the real path, in this node -------------------------------------------

with_server(Engine, Fun) ->
    {ok, _} = application:ensure_all_started(inets),
    {ok, S} = cbench:start_server(Engine, #{port => 0}),
    try Fun(S) after cbench:stop_server(S) end.

cell(Mod, Url, C, N) ->
    cbench_clients_cell:run(Mod, Url, #{concurrency => C, iterations => N, timeout => 5000, pool_size => 4,
                                        pool_count => 2, max_seconds => 30}).

adapters_test_() ->
    {timeout, 60,
     fun() ->
             with_server(nif, fun(S) ->
                                      Url = cbench:url(S, "/delay/1"),
                                      [begin
                                           #{requests := R0} = cbench:stats(S),
                                           R = cell(M, Url, 16, 300),
                                           #{requests := R1, conns_open := Open} = cbench:stats(S),
                                           ?assertMatch(#{status := ok, started := 300, ok := 300, stuck := 0,
                                                          errors := #{timeout := 0, closed := 0, refused := 0,
                                                                      other := 0}}, R),
                                           ?assertEqual(300, length(maps:get(latencies_us, R))),
                                           ?assertEqual(300, R1 - R0),
                                           %% Every connection was closed by the adapter's stop/1 or with
                                           %% its workers: wait until the server has seen them close.
                                           ?assert(Open >= 0),
                                           ?assertEqual(ok, wait_closed(S, 100))
                                       end || M <- [cbench_client_httpc, cbench_client_tcp]]
                              end)
     end}.

wait_closed(_S, 0) -> still_open;
wait_closed(S, N) ->
    case cbench:stats(S) of
        #{conns_open := 0} -> ok;
        _ -> timer:sleep(50), wait_closed(S, N - 1)
    end.

non_2xx_is_an_error_test_() ->
    {timeout, 30,
     fun() ->
             with_server(nif, fun(S) ->
                                      [?assertMatch(#{ok := 0, errors := #{other := 20}},
                                                    cell(M, cbench:url(S, "/status/503"), 4, 20))
                                       || M <- [cbench_client_httpc, cbench_client_tcp]]
                              end)
     end}.

%% The server stops 300 ms into a cell that would run for 8 s: the workers get errors (closed
%% connections, refused ones) and the cell ends by its time bound, with what succeeded before.
stopped_mid_cell_test_() ->
    {timeout, 60,
     fun() ->
             {ok, _} = application:ensure_all_started(inets),
             [begin
                  {ok, S} = cbench:start_server(nif, #{port => 0}),
                  Url = cbench:url(S, "/delay/10"),
                  _ = spawn(fun() -> timer:sleep(300), cbench:stop_server(S) end),
                  T0 = erlang:monotonic_time(millisecond),
                  R = cbench_clients_cell:run(M, Url, #{concurrency => 16, iterations => 100000000,
                                                        timeout => 1000, pool_size => 4, pool_count => 2,
                                                        max_seconds => 3}),
                  Took = erlang:monotonic_time(millisecond) - T0,
                  #{ok := Ok, errors := #{refused := Refused, closed := Closed, other := Other}} = R,
                  ?assertEqual(capped, maps:get(status, R)),
                  ?assert(Ok > 0),
                  ?assert(Refused > 0),
                  ?assertEqual(0, Other),
                  ?assertEqual(maps:get(started, R), Ok + lists:sum(maps:values(maps:get(errors, R)))),
                  %% Bounded: 3 s of cell, the last requests' 1 s timeout, and slack for a busy machine.
                  ?assert(Took < 3000 + 1000 + 4000),
                  ?debugFmt("~s: ~b ok, ~b refused, ~b closed in ~b ms", [M, Ok, Refused, Closed, Took])
              end || M <- [cbench_client_httpc, cbench_client_tcp]]
     end}.

stuck_adapter_is_bounded_test_() ->
    {timeout, 30,
     fun() ->
             cbench_clients_test_client:set_mode(stuck),
             T0 = erlang:monotonic_time(millisecond),
             R = cbench_clients_cell:run(cbench_clients_test_client, "http://127.0.0.1:1/", #{
                                           concurrency => 5, iterations => 100, timeout => 100,
                                           pool_size => 1, pool_count => 1, max_seconds => 1}),
             Took = erlang:monotonic_time(millisecond) - T0,
             %% The hard bound is 1 s + the 100 ms timeout + 2 s of grace.
             ?assert(Took >= 3100),
             ?assert(Took < 3100 + 3000),
             ?assertMatch(#{status := stuck, stuck := 5, started := 5, ok := 0,
                            errors := #{timeout := 5}}, R)
     end}.

misbehaving_adapters_test() ->
    Opts = #{concurrency => 2, iterations => 10, timeout => 100, pool_size => 1, pool_count => 1,
             max_seconds => 5},
    cbench_clients_test_client:set_mode(crash),
    ?assertMatch(#{status := ok, ok := 0, errors := #{other := 10}, examples := #{other := [{error, boom}]}},
                 cbench_clients_cell:run(cbench_clients_test_client, "http://x/", Opts)),
    cbench_clients_test_client:set_mode(bad_return),
    ?assertMatch(#{status := ok, errors := #{other := 10}, examples := #{other := [{bad_return, maybe}]}},
                 cbench_clients_cell:run(cbench_clients_test_client, "http://x/", Opts)),
    cbench_clients_test_client:set_mode(no_start),
    ?assertMatch(#{status := start_failed, why := {error, cannot_start}},
                 cbench_clients_cell:run(cbench_clients_test_client, "http://x/", Opts)).

%% --- placement on another node ---------------------------------------------

%% A local peer node, reached only through distributed Erlang as a node on another machine would
%% be: the harness loads its modules there, starts the fixture, measures, stops it; a harness that
%% disconnects leaves no server running there.
remote_node_test_() ->
    {timeout, 120, fun remote_node/0}.

remote_node() ->
    ok = cbench_bench_os:ensure_epmd(),
    Started = case node() of
                  nonode@nohost ->
                      {ok, _} = net_kernel:start([list_to_atom("cbench_clients_test_" ++ os:getpid()), shortnames]),
                      true;
                  _ -> false
              end,
    CbEbin = filename:join([root(), "_build", "default", "lib", "cbench", "ebin"]),
    %% Controlled over its standard input, so that disconnecting it below does not end it.
    {ok, Peer, Node} = peer:start(#{name => list_to_atom("cbench_fixture_" ++ os:getpid()),
                                    connection => standard_io, args => ["-pa", CbEbin]}),
    try
        {ok, Place} = cbench_clients_fixture:open(#{server_node => Node}),
        ?assertMatch(#{kind := remote, info := #{node := Node, cbench := true}}, Place),
        {ok, Fx} = cbench_clients_fixture:start(Place, nif, "127.0.0.1"),
        ?assertEqual(Node, node(maps:get(server, Fx))),
        ?assert(cbench_clients_fixture:alive(Place, Fx)),
        #{requests := 0} = cbench_clients_fixture:stats(Place, Fx),
        ok = cbench_clients_fixture:sample_start(Place, Fx),
        R = cell(cbench_client_tcp, maps:get(base, Fx) ++ "/delay/1", 8, 200),
        Samp = cbench_clients_fixture:sample_stop(Place),
        ?assertMatch(#{ok := 200}, R),
        ?assertMatch(#{requests := 200, resets := 0}, cbench_clients_fixture:stats(Place, Fx)),
        ?assertMatch(#{rss_peak_kb := Kb, cpu_s := _} when Kb > 0, Samp),
        ?assertEqual(0, cbench_clients_fixture:wait_idle(Place, Fx, 5000)),
        ok = cbench_clients_fixture:stop(Place, Fx),
        ?assertNot(cbench_clients_fixture:alive(Place, Fx)),
        ?assertEqual([], erpc:call(Node, cbench, servers, [])),
        %% The guard: a harness that goes away takes its fixture with it.
        {ok, Fx2} = cbench_clients_fixture:start(Place, ehttpd, "127.0.0.1"),
        ?assertEqual(1, length(erpc:call(Node, cbench, servers, []))),
        true = erlang:disconnect_node(Node),
        ?assertEqual([], wait_no_servers(Node, 100)),
        ok = cbench_clients_fixture:close(Place),
        ?assertNot(cbench_clients_fixture:alive(Place, Fx2))
    after
        peer:stop(Peer),
        _ = Started andalso net_kernel:stop()
    end.

wait_no_servers(Node, 0) -> erpc:call(Node, cbench, servers, []);
wait_no_servers(Node, N) ->
    timer:sleep(50),
    case erpc:call(Node, cbench, servers, []) of
        [] -> [];
        _ -> wait_no_servers(Node, N - 1)
    end.

%% A cell split over nodes (--nodes) reads as one: counts and errors summed, latencies merged in
%% order, the longest part's time, the worst status; a part that could not start fails the cell.
merge_parts_test() ->
    P = fun(Ok, Lats, Us, St) ->
                #{status => St, started => Ok + 1, ok => Ok, stuck => 0, elapsed_us => Us,
                  errors => #{timeout => 1, closed => 0, refused => 0, other => 0},
                  latencies_us => Lats, examples => #{timeout => [t]}}
        end,
    M = cbench_clients_cell:merge([P(2, [10, 30], 1000, ok), P(3, [5, 20, 40], 1500, capped)]),
    ?assertMatch(#{status := capped, started := 7, ok := 5, elapsed_us := 1500,
                   latencies_us := [5, 10, 20, 30, 40],
                   errors := #{timeout := 2, closed := 0, refused := 0, other := 0}}, M),
    ?assertMatch(#{rps := R, error_pct := E} when R == 5 / 0.0015 andalso E == 200 / 7,
                 cbench_clients_cell:figures(M)),
    ?assertMatch(#{status := start_failed, why := [nope]},
                 cbench_clients_cell:merge([P(1, [1], 10, ok), #{status => start_failed, why => nope}])).
