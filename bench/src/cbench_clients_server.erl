%% @doc Runs inside the fixture's node for the client benchmark (`make bench-clients'): a peer node
%% the harness started, or any node given with --server-node. The harness loads this module (and
%% cbench_bench_sampler, cbench_bench_os) there over the connection it calls through, then starts,
%% watches and stops one cbench server at a time and samples the node's CPU and memory.
%%
%% A server started here is watched by a guard process: when the harness's node disconnects (the
%% harness was killed), the guard stops the server, so that a remote node is left as it was found.
-module(cbench_clients_server).

-export([info/0, start_fixture/3, stop_fixture/1, alive/1, stats/1, sampler_start/1,
         sampler_stop/0, proc_number/2]).

-define(SAMPLER, cbench_clients_sampler).

%% @doc What the harness reports about the fixture's node.
-spec info() -> map().
info() ->
    #{os_pid => list_to_integer(os:getpid()),
      node => node(),
      otp => erlang:system_info(otp_release),
      erts => erlang:system_info(version),
      schedulers => erlang:system_info(schedulers_online),
      bindings => tuple_to_list(erlang:system_info(scheduler_bindings)),
      cpus => case erlang:system_info(logical_processors_available) of
                  unknown -> erlang:system_info(logical_processors_online);
                  N -> N
              end,
      port_limit => erlang:system_info(port_limit),
      fd_limit => fd_limit(),
      cbench => code:which(cbench) =/= non_existing,
      host => list_to_binary(net_adm:localhost())}.

%% The soft limit of open files of this OS process (undefined off Linux).
fd_limit() ->
    proc_number("/proc/self/limits", "Max open files\\s+([0-9]+|unlimited)").

%% @doc The number a regular expression captures in a /proc file (or `unlimited'); undefined when
%% the file or the number is not there.
-spec proc_number(string(), string()) -> integer() | unlimited | undefined.
proc_number(File, Re) ->
    case file:read_file(File) of
        {ok, B} ->
            case re:run(B, Re, [{capture, all_but_first, list}]) of
                {match, ["unlimited"]} -> unlimited;
                {match, [N]} -> list_to_integer(N);
                nomatch -> undefined
            end;
        _ -> undefined
    end.

%% @doc Starts a cbench server of Engine with Opts (cbench:start_server/2), watched by a guard that
%% stops it when Harness (a node name, or nonode@nohost for none) disconnects. Returns the server,
%% its port and the OS pids to sample (the node, and the port program for the `port' engine).
-spec start_fixture(atom(), map(), node()) -> {ok, map()} | {error, term()}.
start_fixture(Engine, Opts, Harness) ->
    case code:ensure_loaded(cbench) of
        {module, cbench} ->
            case cbench:start_server(Engine, Opts) of
                {ok, S} ->
                    Guard = spawn(fun() -> guard(S, Harness) end),
                    {ok, #{server => S, port => cbench:port(S), guard => Guard,
                           pids => pids(Engine)}};
                {error, _} = E -> E
            end;
        _ ->
            {error, {cbench_not_loadable, node()}}
    end.

guard(S, Harness) ->
    _ = Harness =/= nonode@nohost andalso erlang:monitor_node(Harness, true),
    Ref = monitor(process, S),
    receive
        {nodedown, Harness} -> cbench:stop_server(S);
        stop -> cbench:stop_server(S);
        {'DOWN', Ref, process, S, _} -> ok
    end.

pids(Engine) ->
    Self = list_to_integer(os:getpid()),
    case Engine of
        port ->
            [Self | [K || K <- cbench_bench_os:descendants(Self),
                          lists:prefix("cbench_port", cbench_bench_os:comm(K))]];
        _ -> [Self]
    end.

%% @doc Stops a server started by start_fixture/3 and waits until it has stopped.
-spec stop_fixture(map()) -> ok.
stop_fixture(#{server := S, guard := G}) ->
    Ref = monitor(process, G),
    G ! stop,
    receive {'DOWN', Ref, process, G, _} -> ok
    after 30000 -> cbench:stop_server(S)
    end,
    ok.

%% @doc Whether the server still runs.
-spec alive(map()) -> boolean().
alive(#{server := S}) ->
    is_process_alive(S).

%% @doc The server's counters (cbench:stats/1).
-spec stats(map()) -> map() | {error, term()}.
stats(#{server := S}) ->
    cbench:stats(S).

%% @doc Starts sampling the OS processes Pids every 100 ms (cbench_bench_sampler), with the node's
%% erlang:memory(total), in a process of its own registered here.
-spec sampler_start([integer()]) -> ok.
sampler_start(Pids) ->
    _ = sampler_stop(),
    Caller = self(),
    {Pid, Ref} = spawn_monitor(fun() -> sampler_holder(Caller, Pids) end),
    receive
        {Pid, ready} -> demonitor(Ref, [flush]), ok;
        {'DOWN', Ref, process, Pid, Why} -> error({sampler, Why})
    end.

sampler_holder(Caller, Pids) ->
    register(?SAMPLER, self()),
    S = cbench_bench_sampler:start(Pids, fun() -> erlang:memory(total) end),
    receive {S, started} -> ok end,
    Caller ! {self(), ready},
    %% A harness that died without stopping it leaves it for an hour at most.
    receive
        {stop, From, Ref} -> From ! {Ref, cbench_bench_sampler:stop(S)}
    after 3600000 -> ok
    end.

%% @doc Stops the sampler and returns its figures (cpu_pct, rss_peak_kb, beam_peak, ...), or
%% undefined when none runs.
-spec sampler_stop() -> map() | undefined.
sampler_stop() ->
    case whereis(?SAMPLER) of
        undefined -> undefined;
        H ->
            Ref = make_ref(),
            H ! {stop, self(), Ref},
            receive {Ref, R} -> R
            after 15000 -> exit(H, kill), undefined
            end
    end.
