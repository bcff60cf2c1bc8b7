%% @doc Resource sampling during a measured window: every 100 ms, the CPU time and
%% resident set of the server's processes (from /proc/PID/stat and status) and,
%% for the node, erlang:memory(total).
-module(cbench_bench_sampler).

-export([start/2, stop/1]).

-define(PERIOD, 100).

%% @doc Starts sampling the processes Pids (OS pids) and, when MemFun is a fun,
%% the node's memory. The first sample is the baseline.
-spec start([integer()], undefined | fun(() -> integer())) -> pid().
start(Pids, MemFun) ->
    Parent = self(),
    spawn_link(fun() ->
                       T0 = erlang:monotonic_time(microsecond),
                       Base = sample(Pids),
                       Parent ! {self(), started},
                       loop(Pids, MemFun, #{t0 => T0, base => Base, last => Base,
                                            tlast => T0, rss => rss(Base), beam => mem(MemFun),
                                            died => Base =:= dead, n => 1})
               end).

%% @doc Stops sampling and returns cpu_s (CPU seconds of the processes over the
%% window), wall_s, cpu_pct, rss_peak_kb, beam_peak (bytes or undefined), died.
-spec stop(pid()) -> map().
stop(S) ->
    Ref = make_ref(),
    S ! {stop, self(), Ref},
    receive {Ref, Result} -> Result
    after 10000 -> #{died => unknown}
    end.

loop(Pids, MemFun, St) ->
    receive
        {stop, From, Ref} ->
            St1 = take(Pids, MemFun, St),
            From ! {Ref, result(St1)}
    after ?PERIOD ->
            loop(Pids, MemFun, take(Pids, MemFun, St))
    end.

take(Pids, MemFun, St = #{rss := R, beam := B, n := N}) ->
    case sample(Pids) of
        dead -> St#{died => true};
        S ->
            St#{last => S, tlast => erlang:monotonic_time(microsecond),
                rss => max(R, rss(S)), beam => max_opt(B, mem(MemFun)), n => N + 1}
    end.

result(#{base := dead}) ->
    #{died => true};
result(#{t0 := T0, tlast := T1, base := {Ticks0, _}, last := {Ticks1, _},
         rss := Rss, beam := Beam, died := Died, n := N}) ->
    Wall = max(1, T1 - T0) / 1.0e6,
    Cpu = (Ticks1 - Ticks0) / clk_tck(),
    #{cpu_s => Cpu, wall_s => Wall, cpu_pct => 100 * Cpu / Wall,
      rss_peak_kb => Rss, beam_peak => Beam, died => Died, samples => N}.

%% The sum over the processes of {ticks, rss_kb}; `dead' when one is gone.
sample(Pids) ->
    lists:foldl(fun(_, dead) -> dead;
                   (P, {T, R}) ->
                        case cbench_bench_os:proc_sample(P) of
                            undefined -> dead;
                            {T1, R1} -> {T + T1, R + R1}
                        end
                end, {0, 0}, Pids).

rss(dead) -> 0;
rss({_, R}) -> R.

mem(undefined) -> undefined;
mem(F) ->
    try F() of
        M when is_integer(M) -> M;
        _ -> undefined
    catch _:_ -> undefined
    end.

max_opt(undefined, X) -> X;
max_opt(X, undefined) -> X;
max_opt(A, B) -> max(A, B).

clk_tck() ->
    case persistent_term:get({?MODULE, clk_tck}, undefined) of
        undefined ->
            T = cbench_bench_os:clk_tck(),
            persistent_term:put({?MODULE, clk_tck}, T),
            T;
        T -> T
    end.
