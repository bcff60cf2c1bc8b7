%% @doc Where the client benchmark's fixture runs: in a node apart from the clients, as httpc_bench
%% ran its server on another machine. On one machine that node is a peer started here (OTP's `peer',
%% over its standard input and output, pinned to the server CPUs with taskset); across machines it is
%% any node reachable by distributed Erlang (--server-node NAME@HOST), which must have cbench in its
%% code path. Either way the harness reaches it through call/5, loads its own server-side modules
%% there, and starts, watches and stops the fixture's cbench servers through them.
-module(cbench_clients_fixture).

-export([open/1, close/1, call/5, start/3, stop/2, alive/2, stats/2, sample_start/2,
         sample_stop/1, wait_idle/3]).

%% The modules that run on the fixture's node (cbench itself must already be there).
-define(SHIPPED, [cbench_bench_os, cbench_bench_sampler, cbench_clients_server]).
-define(CALL_MS, 60000).

%% @doc Opens the fixture's node. Cfg: server_node (undefined for a local peer), cookie, server_cpus
%% (a taskset list), schedulers, root. Returns the placement with the node's info.
-spec open(map()) -> {ok, map()} | {error, string()}.
open(Cfg = #{server_node := undefined}) ->
    #{server_cpus := Cpus, schedulers := N, root := Root} = Cfg,
    Erl = os:find_executable("erl"),
    CbEbin = filename:join([Root, "_build", "default", "lib", "cbench", "ebin"]),
    Args = ["+S", integer_to_list(N), "+sbt", "db", "+sbwt", "none", "+sbwtdcpu", "none",
            "+sbwtdio", "none", "+Q", "65536", "-pa", CbEbin],
    %% Not linked: a fixture node that dies must show as errors in the cells, not end the harness.
    try peer:start(#{connection => standard_io,
                     exec => {"/usr/bin/taskset", ["-c", Cpus, Erl]},
                     args => Args, wait_boot => 30000}) of
        {ok, Peer} -> ready(#{kind => peer, peer => Peer, args => Args, cpus => Cpus});
        {ok, Peer, _} -> ready(#{kind => peer, peer => Peer, args => Args, cpus => Cpus});
        Other -> {error, fmt("the fixture's peer node did not start: ~0p", [Other])}
    catch C:R -> {error, fmt("the fixture's peer node did not start: ~0p:~0p", [C, R])}
    end;
open(#{server_node := Node} = Cfg) ->
    case distributed(Node) of
        ok ->
            _ = case maps:get(cookie, Cfg, undefined) of
                    undefined -> ok;
                    Cookie -> erlang:set_cookie(Node, Cookie)
                end,
            case net_kernel:connect_node(Node) of
                true -> ready(#{kind => remote, node => Node});
                _ -> {error, fmt("cannot reach ~s (is it running, with the same cookie?)", [Node])}
            end;
        {error, Why} -> {error, Why}
    end.

%% The harness becomes a distributed node to reach a remote one: short or long names as the
%% remote node's host part says, epmd started if it is not running.
distributed(Node) ->
    case node() of
        nonode@nohost ->
            Long = case string:split(atom_to_list(Node), "@") of
                       [_, Host] -> lists:member($., Host);
                       _ -> false
                   end,
            Name = list_to_atom("cbench_clients_" ++ os:getpid()),
            case cbench_bench_os:ensure_epmd() of
                ok ->
                    case net_kernel:start([Name, case Long of true -> longnames; false -> shortnames end]) of
                        {ok, _} -> ok;
                        {error, R} -> {error, fmt("this node could not start distribution: ~0p", [R])}
                    end;
                {error, Why} -> {error, Why}
            end;
        _ -> ok
    end.

ready(Place) ->
    try
        [ship(Place, M) || M <- ?SHIPPED],
        Info = call(Place, cbench_clients_server, info, [], ?CALL_MS),
        case maps:get(cbench, Info) of
            true ->
                PidFile = case Place of
                              #{kind := peer} -> cbench_bench_os:pidfile("fixture", maps:get(os_pid, Info));
                              _ -> undefined
                          end,
                {ok, Place#{info => Info, pidfile => PidFile}};
            false ->
                close(Place),
                {error, fmt("cbench is not in the code path of the fixture's node ~s", [maps:get(node, Info)])}
        end
    catch C:R ->
            close(Place),
            {error, fmt("the fixture's node did not answer: ~0p:~0p", [C, R])}
    end.

ship(Place, M) ->
    {M, Bin, File} = code:get_object_code(M),
    {module, M} = call(Place, code, load_binary, [M, File, Bin], ?CALL_MS).

%% @doc Stops the peer node (a remote node is left running; its fixtures are stopped by stop/2).
-spec close(map()) -> ok.
close(Place) ->
    case Place of
        #{kind := peer, peer := Peer} -> catch peer:stop(Peer);
        _ -> ok
    end,
    cbench_bench_os:rm_pidfile(maps:get(pidfile, Place, undefined)),
    ok.

%% @doc M:F(A...) on the fixture's node, raising when it cannot be reached.
-spec call(map(), module(), atom(), list(), timeout()) -> term().
call(#{kind := peer, peer := Peer}, M, F, A, Timeout) -> peer:call(Peer, M, F, A, Timeout);
call(#{kind := remote, node := Node}, M, F, A, Timeout) -> erpc:call(Node, M, F, A, Timeout).

%% @doc Starts a server of Engine on the fixture's node, listening on Ip with a deep accept queue.
-spec start(map(), atom(), string()) -> {ok, map()} | {error, term()}.
start(Place, Engine, Ip) ->
    Opts = #{port => 0, ip => Ip, backlog => 65535},
    %% A peer node is not distributed (it halts with this node anyway): its guard watches no node.
    Harness = case Place of
                  #{kind := peer} -> nonode@nohost;
                  _ -> node()
              end,
    case call(Place, cbench_clients_server, start_fixture, [Engine, Opts, Harness], ?CALL_MS) of
        {ok, Fx = #{port := Port}} ->
            {ok, Fx#{engine => Engine, base => "http://" ++ Ip ++ ":" ++ integer_to_list(Port)}};
        {error, _} = E -> E
    end.

%% @doc Stops a server started by start/3 (nothing when the node is gone).
-spec stop(map(), map()) -> ok.
stop(Place, Fx) ->
    _ = (catch call(Place, cbench_clients_server, stop_fixture, [Fx], ?CALL_MS)),
    ok.

%% @doc Whether the node answers and the server still runs.
-spec alive(map(), map()) -> boolean().
alive(Place, Fx) ->
    try call(Place, cbench_clients_server, alive, [Fx], 5000)
    catch _:_ -> false
    end.

%% @doc The server's counters, or undefined when they cannot be read.
-spec stats(map(), map()) -> map() | undefined.
stats(Place, Fx) ->
    try call(Place, cbench_clients_server, stats, [Fx], 10000) of
        M when is_map(M) -> M;
        _ -> undefined
    catch _:_ -> undefined
    end.

%% @doc Starts sampling the server's OS processes (on its node).
-spec sample_start(map(), map()) -> ok | error.
sample_start(Place, #{pids := Pids}) ->
    try call(Place, cbench_clients_server, sampler_start, [Pids], 10000)
    catch _:_ -> error
    end.

%% @doc The sampler's figures (see cbench_bench_sampler:stop/1), or #{} when it is gone.
-spec sample_stop(map()) -> map().
sample_stop(Place) ->
    try call(Place, cbench_clients_server, sampler_stop, [], 20000) of
        M when is_map(M) -> M;
        _ -> #{}
    catch _:_ -> #{}
    end.

%% @doc Waits (at most Ms) until the server has no connection open, so that a cell does not start
%% while the last one's connections are still being closed. Returns the connections still open.
-spec wait_idle(map(), map(), non_neg_integer()) -> non_neg_integer() | undefined.
wait_idle(Place, Fx, Ms) ->
    Until = erlang:monotonic_time(millisecond) + Ms,
    wait_idle_until(Place, Fx, Until).

wait_idle_until(Place, Fx, Until) ->
    case stats(Place, Fx) of
        #{conns_open := 0} -> 0;
        #{conns_open := N} ->
            case erlang:monotonic_time(millisecond) >= Until of
                true -> N;
                false -> timer:sleep(100), wait_idle_until(Place, Fx, Until)
            end;
        _ -> undefined
    end.

fmt(F, A) -> lists:flatten(io_lib:format(F, A)).
