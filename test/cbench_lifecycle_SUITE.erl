%%% @doc The NIF's lifecycle in nodes of their own: load, start, purge and reload many times with
%%% the OS thread count back to its baseline; init:stop() with servers of every engine running
%%% ends the node with status 0 within seconds.
-module(cbench_lifecycle_SUITE).

-include_lib("stdlib/include/assert.hrl").

-export([all/0]).
-export([reload_no_thread_left/1, init_stop_exits_zero/1, halt_with_direct_owner/1,
         bound_schedulers_pin_engines/1]).
%% Run in the peer node.
-export([cycle/1, threads/0, start_stop/0]).

-define(CYCLES, 20).

all() -> [reload_no_thread_left, init_stop_exits_zero, halt_with_direct_owner,
          bound_schedulers_pin_engines].

ebin_args() ->
    ["-pa", filename:dirname(code:which(cbench)), "-pa", filename:dirname(code:which(?MODULE))].

%% @doc The OS threads of the calling node.
-spec threads() -> non_neg_integer().
threads() ->
    {ok, Tasks} = file:list_dir("/proc/self/task"),
    length(Tasks).

%% @doc Starts a server directly (this process is the owner), makes one request, stops it.
-spec start_stop() -> ok.
start_stop() ->
    {ok, Opts} = cbench_opts:validate(nif, #{port => 0, threads => 2}),
    {ok, H} = cbench_nif:start(Opts),
    {ok, C} = gen_tcp:connect({127, 0, 0, 1}, cbench_nif:port(H), [binary, {active, false}]),
    ok = gen_tcp:send(C, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"),
    {ok, <<"HTTP/1.1 200 OK", _/binary>>} = gen_tcp:recv(C, 0, 5000),
    gen_tcp:close(C),
    ok = cbench_nif:stop(H).

%% @doc One cycle: a server started and stopped, a server left to its owner's death, a reload
%% (the new library takes over), then delete and purge (the library unloads).
-spec cycle(pos_integer()) -> ok.
cycle(_I) ->
    {module, cbench_nif} = code:ensure_loaded(cbench_nif),
    run_in_process(fun start_stop/0),
    %% The owner dies with its server running: the down callback stops it.
    run_in_process(fun() ->
                           {ok, Opts} = cbench_opts:validate(nif, #{port => 0, threads => 2}),
                           {ok, _H} = cbench_nif:start(Opts),
                           ok
                   end),
    %% Reload over loaded code: the upgrade callback, then the old library unloads at purge.
    {module, cbench_nif} = code:load_file(cbench_nif),
    run_in_process(fun start_stop/0),
    true = code:soft_purge(cbench_nif) orelse wait_purge(50),
    true = code:delete(cbench_nif),
    true = code:soft_purge(cbench_nif) orelse wait_purge(50),
    ok.

%% A process that ran a server exits and its resource is freed; until then purge waits.
wait_purge(0) -> false;
wait_purge(N) ->
    erlang:garbage_collect(),
    timer:sleep(20),
    code:soft_purge(cbench_nif) orelse wait_purge(N - 1).

run_in_process(Fun) ->
    {Pid, Ref} = spawn_monitor(fun() -> exit({done, Fun()}) end),
    receive {'DOWN', Ref, process, Pid, {done, ok}} -> ok;
            {'DOWN', Ref, process, Pid, Other} -> error({cycle_failed, Other})
    after 30000 -> error(cycle_timeout)
    end.

reload_no_thread_left(_Config) ->
    {ok, Peer, _Node} = peer:start_link(#{connection => standard_io, args => ebin_args()}),
    try
        %% A first cycle starts whatever threads the node itself creates lazily.
        ok = peer:call(Peer, ?MODULE, cycle, [0], 60000),
        Baseline = wait_threads(Peer, undefined, 1),
        ct:log("OS threads after the first cycle: ~b", [Baseline]),
        [ok = peer:call(Peer, ?MODULE, cycle, [I], 60000) || I <- lists:seq(1, ?CYCLES)],
        ?assertEqual(Baseline, wait_threads(Peer, Baseline, 100)),
        %% The node is still healthy.
        ?assertEqual(ok, peer:call(Peer, ?MODULE, start_stop, [], 60000))
    after
        peer:stop(Peer)
    end.

%% Reaped engines stop in the background: poll until the count settles at Want.
wait_threads(Peer, _Want, 1) -> peer:call(Peer, ?MODULE, threads, []);
wait_threads(Peer, Want, N) ->
    case peer:call(Peer, ?MODULE, threads, []) of
        Want -> Want;
        _ -> timer:sleep(50), wait_threads(Peer, Want, N - 1)
    end.

%% A node with servers of every engine, each having served a request, ends on init:stop().
init_stop_exits_zero(_Config) ->
    Eval = "{ok, _} = application:ensure_all_started(inets),"
        "[begin {ok, S} = cbench:start_server(E, #{port => 0, threads => 2}),"
        "  {ok, {{_, 200, _}, _, _}} = httpc:request(cbench:url(S, \"/hello\")) end"
        " || E <- [nif, port, ehttpd]],"
        "{ok, _} = cbench:start_server(nif, #{port => 0, threads => 2}),"
        "init:stop().",
    ?assertEqual({0, []}, run_node(Eval, 20000)).

%% A server owned by a plain process (not under the application) at halt: no hang, no crash.
halt_with_direct_owner(_Config) ->
    Eval = "{ok, O} = cbench_opts:validate(nif, #{port => 0, threads => 2}),"
        "Self = self(),"
        "spawn(fun() -> {ok, H} = cbench_nif:start(O), Self ! go, receive _ -> H end end),"
        "receive go -> ok end,"
        "init:stop().",
    ?assertEqual({0, []}, run_node(Eval, 20000)).

%% With bound schedulers (+sbt db), engine thread i of nif and port runs on the CPU of scheduler
%% i, the port program's process is restricted to that set, and ehttpd acceptor i is on scheduler i.
bound_schedulers_pin_engines(_Config) ->
    Eval = "#{bound := true, bindings := B} = cbench:settings(),"
        "N = length(B),"
        "[{ok, _} = cbench:start_server(E, #{port => 0}) || E <- [nif, port, ehttpd]],"
        "Servers = cbench:servers(),"
        "[#{cpus := B, threads := N}] = [I || I = #{engine := nif} <- Servers],"
        "[#{cpus := B, os_pid := OsPid}] = [I || I = #{engine := port} <- Servers],"
        "Seq = lists:seq(1, N),"
        "[#{schedulers := Seq}] = [I || I = #{engine := ehttpd} <- Servers],"
        "{ok, Stat} = file:read_file(\"/proc/\" ++ integer_to_list(OsPid) ++ \"/status\"),"
        "{match, [L]} = re:run(Stat, \"Cpus_allowed_list:\\\\s*(\\\\S+)\", [{capture, all_but_first, list}]),"
        "Want = string:join([integer_to_list(C) || C <- lists:usort(B)], \",\"),"
        "true = (L =:= Want) orelse (L =:= integer_to_list(hd(B)) ++ \"-\" ++ integer_to_list(lists:last(B))),"
        "init:stop().",
    ?assertEqual({0, []}, run_node(["+sbt", "db"], Eval, 20000)).

run_node(Eval, Timeout) -> run_node([], Eval, Timeout).

%% Runs `erl Emu -noshell -eval Eval' and returns its exit status and any output.
run_node(Emu, Eval, Timeout) ->
    Erl = os:find_executable("erl"),
    Port = open_port({spawn_executable, Erl},
                     [{args, Emu ++ ["-noshell" | ebin_args()] ++ ["-eval", Eval]},
                      exit_status, stderr_to_stdout, binary]),
    collect(Port, [], erlang:monotonic_time(millisecond) + Timeout).

collect(Port, Out, Deadline) ->
    Left = max(0, Deadline - erlang:monotonic_time(millisecond)),
    receive
        {Port, {data, D}} -> collect(Port, [Out, D], Deadline);
        {Port, {exit_status, S}} -> {S, binary_to_list(iolist_to_binary(Out))}
    after Left ->
        catch port_close(Port),
        {timeout, binary_to_list(iolist_to_binary(Out))}
    end.
