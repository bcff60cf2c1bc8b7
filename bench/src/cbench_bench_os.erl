%% @doc The harness's dealings with the operating system: child processes started
%% and stopped as whole process groups, bounded commands, /proc readings, free ports.
%%
%% Every child is spawned through an Erlang port, which makes it the leader of its
%% own session and process group (erl_child_setup does that), so `kill -- -PID'
%% reaches it and everything it forked. While a child runs, its pid is written to
%% $CBENCH_BENCH_PIDDIR (set by bench/run.sh), whose trap kills whatever is listed
%% there if the harness itself is interrupted or killed.
-module(cbench_bench_os).

-export([run_bounded/4, run_bounded/5, start/4, stop/1, alive/1, os_pid/1, output/1,
         kill_group/2, free_port/0, proc_sample/1, descendants/1, comm/1,
         clk_tck/0, wait_tcp/3, cmd/1, pidfile/2, rm_pidfile/1, ensure_epmd/0]).

%% @doc Runs Exe with Args, collecting stdout and stderr, killing its process
%% group after TimeoutMs. Returns {ok, Out} on exit status 0.
-spec run_bounded(string(), [string()], pos_integer(), string()) ->
          {ok, binary()} | {error, term(), binary()}.
run_bounded(Exe, Args, TimeoutMs, Tag) ->
    run_bounded(Exe, Args, TimeoutMs, Tag, undefined).

%% @doc As run_bounded/4; Notify (a pid) is sent {os_pid, self(), OsPid} once the
%% command runs.
run_bounded(Exe, Args, TimeoutMs, Tag, Notify) ->
    Port = open_port({spawn_executable, Exe},
                     [{args, Args}, exit_status, stderr_to_stdout, binary, use_stdio]),
    {os_pid, Pid} = erlang:port_info(Port, os_pid),
    _ = is_pid(Notify) andalso (Notify ! {os_pid, self(), Pid}),
    PidFile = pidfile(Tag, Pid),
    Deadline = erlang:monotonic_time(millisecond) + TimeoutMs,
    try collect(Port, Pid, Deadline, [])
    after
        rm_pidfile(PidFile)
    end.

collect(Port, Pid, Deadline, Acc) ->
    Left = max(0, Deadline - erlang:monotonic_time(millisecond)),
    receive
        {Port, {data, D}} -> collect(Port, Pid, Deadline, [D | Acc]);
        {Port, {exit_status, 0}} -> {ok, iolist_to_binary(lists:reverse(Acc))};
        {Port, {exit_status, S}} -> {error, {exit_status, S}, iolist_to_binary(lists:reverse(Acc))}
    after Left ->
            kill_group(Pid, "KILL"),
            catch port_close(Port),
            {error, timeout, iolist_to_binary(lists:reverse(Acc))}
    end.

%% @doc Starts a long-running child. Ready is called with the output so far (a
%% binary) every 50 ms until it returns true, the child exits, or 15 s pass.
-spec start(string(), string(), [string()], fun((binary()) -> boolean())) ->
          {ok, pid()} | {error, term(), binary()}.
start(Tag, Exe, Args, Ready) ->
    Parent = self(),
    Owner = spawn(fun() -> owner_init(Parent, Tag, Exe, Args) end),
    receive
        {Owner, started} -> wait_ready(Owner, Ready, 300)
    after 10000 ->
            {error, spawn_timeout, <<>>}
    end.

wait_ready(Owner, _Ready, 0) ->
    Out = bin(output(Owner)),
    stop(Owner),
    {error, not_ready, Out};
wait_ready(Owner, Ready, N) ->
    timer:sleep(50),
    Out = bin(output(Owner)),
    case Ready(Out) of
        true -> {ok, Owner};
        false ->
            case os_pid(Owner) of
                undefined ->
                    %% It exited before it was ready: report how, at once.
                    {exited, Status} = stop(Owner),
                    {error, {exited, Status}, Out};
                _ -> wait_ready(Owner, Ready, N - 1)
            end
    end.

bin(B) when is_binary(B) -> B;
bin(_) -> <<>>.

owner_init(Parent, Tag, Exe, Args) ->
    Port = open_port({spawn_executable, Exe},
                     [{args, Args}, exit_status, stderr_to_stdout, binary, use_stdio]),
    {os_pid, Pid} = erlang:port_info(Port, os_pid),
    PidFile = pidfile(Tag, Pid),
    Parent ! {self(), started},
    owner_loop(Port, Pid, PidFile, <<>>).

%% Only the last 64 KiB of a child's output is kept: enough for the ready line and
%% for the last words of a child that died.
owner_loop(Port, Pid, PidFile, Out) ->
    receive
        {Port, {data, D}} ->
            Out1 = <<Out/binary, D/binary>>,
            Keep = case byte_size(Out1) of
                       S when S > 65536 -> binary:part(Out1, S - 65536, 65536);
                       _ -> Out1
                   end,
            owner_loop(Port, Pid, PidFile, Keep);
        {Port, {exit_status, S}} ->
            rm_pidfile(PidFile),
            exit_loop(S, Out);
        {From, Ref, os_pid} ->
            From ! {Ref, Pid},
            owner_loop(Port, Pid, PidFile, Out);
        {From, Ref, output} ->
            From ! {Ref, Out},
            owner_loop(Port, Pid, PidFile, Out);
        {From, Ref, stop} ->
            kill_group(Pid, "TERM"),
            S = receive {Port, {exit_status, St}} -> St
                after 5000 ->
                        kill_group(Pid, "KILL"),
                        receive {Port, {exit_status, St}} -> St
                        after 2000 -> killed
                        end
                end,
            rm_pidfile(PidFile),
            From ! {Ref, {stopped, S}}
    end.

%% A child that exited on its own: the owner stays to answer questions about it.
exit_loop(Status, Out) ->
    receive
        {From, Ref, os_pid} -> From ! {Ref, undefined}, exit_loop(Status, Out);
        {From, Ref, output} -> From ! {Ref, Out}, exit_loop(Status, Out);
        {From, Ref, stop} -> From ! {Ref, {exited, Status}}
    end.

ask(Owner, What, Timeout) ->
    Ref = make_ref(),
    Owner ! {self(), Ref, What},
    receive {Ref, R} -> R
    after Timeout -> timeout
    end.

%% @doc The OS pid of a running child, or undefined once it has exited.
-spec os_pid(pid()) -> integer() | undefined | timeout.
os_pid(Owner) -> ask(Owner, os_pid, 2000).

%% @doc The last output of a child.
-spec output(pid()) -> binary() | timeout.
output(Owner) -> ask(Owner, output, 2000).

%% @doc Whether a child is still running.
-spec alive(pid()) -> boolean().
alive(Owner) ->
    is_process_alive(Owner) andalso is_integer(os_pid(Owner)).

%% @doc Stops a child (TERM to its group, KILL after 5 s). Returns {stopped, Status}
%% or {exited, Status} when it had already exited by itself.
-spec stop(pid()) -> {stopped | exited, term()} | timeout.
stop(Owner) ->
    case is_process_alive(Owner) of
        true -> ask(Owner, stop, 10000);
        false -> {exited, unknown}
    end.

kill_group(Pid, Sig) when is_integer(Pid) ->
    _ = os:cmd("kill -" ++ Sig ++ " -" ++ integer_to_list(Pid) ++ " 2>/dev/null"),
    ok.

pidfile(Tag, Pid) ->
    case os:getenv("CBENCH_BENCH_PIDDIR") of
        false -> undefined;
        "" -> undefined;
        Dir ->
            F = filename:join(Dir, Tag ++ "-" ++ integer_to_list(Pid) ++ ".pid"),
            _ = file:write_file(F, [integer_to_list(Pid), $\n]),
            F
    end.

rm_pidfile(undefined) -> ok;
rm_pidfile(F) -> _ = file:delete(F), ok.

%% @doc A TCP port that was free a moment ago on 127.0.0.1.
-spec free_port() -> inet:port_number().
free_port() ->
    {ok, S} = gen_tcp:listen(0, [{ip, {127, 0, 0, 1}}, {reuseaddr, true}]),
    {ok, P} = inet:port(S),
    gen_tcp:close(S),
    P.

%% @doc Waits until something accepts TCP connections on 127.0.0.1:Port.
wait_tcp(_Port, 0, _Delay) -> false;
wait_tcp(Port, N, Delay) ->
    case gen_tcp:connect({127, 0, 0, 1}, Port, [], 500) of
        {ok, S} -> gen_tcp:close(S), true;
        {error, _} -> timer:sleep(Delay), wait_tcp(Port, N - 1, Delay)
    end.

%% @doc CPU time (clock ticks, user + system, all threads) and resident set (KiB)
%% of one process, or undefined when it is gone.
-spec proc_sample(integer()) -> {non_neg_integer(), non_neg_integer()} | undefined.
proc_sample(Pid) ->
    P = "/proc/" ++ integer_to_list(Pid),
    case file:read_file(P ++ "/stat") of
        {ok, Stat} ->
            Fields = stat_fields(Stat),
            Ticks = binary_to_integer(lists:nth(12, Fields)) + binary_to_integer(lists:nth(13, Fields)),
            {Ticks, rss_kb(P)};
        {error, _} -> undefined
    end.

%% The fields after the command name, which is in parentheses and may hold spaces:
%% the first one returned is the state (field 3 of proc(5)).
stat_fields(Stat) ->
    [_, After] = string:split(Stat, <<")">>, trailing),
    binary:split(string:trim(After), <<" ">>, [global]).

rss_kb(P) ->
    case file:read_file(P ++ "/status") of
        {ok, St} ->
            case re:run(St, <<"VmRSS:\\s+([0-9]+) kB">>, [{capture, all_but_first, binary}]) of
                {match, [K]} -> binary_to_integer(K);
                nomatch -> 0
            end;
        {error, _} -> 0
    end.

%% @doc All processes descending from Pid (children, grandchildren, ...).
-spec descendants(integer()) -> [integer()].
descendants(Pid) ->
    {ok, Names} = file:list_dir("/proc"),
    Parents = lists:foldl(
                fun(N, Acc) ->
                        case catch list_to_integer(N) of
                            I when is_integer(I) ->
                                case file:read_file("/proc/" ++ N ++ "/stat") of
                                    {ok, S} ->
                                        case catch binary_to_integer(lists:nth(2, stat_fields(S))) of
                                            PP when is_integer(PP) -> [{I, PP} | Acc];
                                            _ -> Acc
                                        end;
                                    _ -> Acc
                                end;
                            _ -> Acc
                        end
                end, [], Names),
    desc([Pid], Parents, []).

desc([], _Parents, Acc) -> lists:usort(Acc);
desc([P | Rest], Parents, Acc) ->
    Kids = [C || {C, PP} <- Parents, PP =:= P],
    desc(Kids ++ Rest, Parents, Kids ++ Acc).

%% @doc The command name of a process ("" when it is gone).
comm(Pid) ->
    case file:read_file("/proc/" ++ integer_to_list(Pid) ++ "/comm") of
        {ok, C} -> binary_to_list(string:trim(C));
        _ -> ""
    end.

clk_tck() ->
    case string:to_integer(os:cmd("getconf CLK_TCK")) of
        {N, _} when is_integer(N), N > 0 -> N;
        _ -> 100
    end.

%% @doc A short shell command's trimmed output.
cmd(C) ->
    string:trim(os:cmd(C)).

%% @doc Starts epmd if it is not running and returns once it answers, so that net_kernel:start/1
%% can register. `epmd -daemon' returns before the daemon listens: on a fresh machine, where no
%% epmd ran before, a distribution started right after it fails with `nodistribution'
%% (register/listen error: econnrefused). {error, Why} names what was tried after 10 s. The code
%% is cbench_dist:ensure_epmd/0, which cbench:load/2 over several nodes and cbench_peers share.
-spec ensure_epmd() -> ok | {error, string()}.
ensure_epmd() ->
    cbench_dist:ensure_epmd().
