%% @doc The CPUs of a benchmark run (make bench, make bench-clients): which are online, the value
%% of an option that names some, the list as taskset takes it, and pinning the harness to them.
-module(cbench_bench_cpus).

-export([online_cpus/0, parse_cpus/1, cpus/2, cpu_list/1, pin_self/1]).

%% @doc The CPUs online on this machine (0 alone when the kernel does not say).
-spec online_cpus() -> [non_neg_integer()].
online_cpus() ->
    case file:read_file("/sys/devices/system/cpu/online") of
        {ok, B} -> parse_cpus(string:trim(binary_to_list(B)));
        _ -> [0]
    end.

%% @doc A CPU list as the kernel and taskset write it ("0-3,6"); error:_ when it is not one.
-spec parse_cpus(string()) -> [non_neg_integer()].
parse_cpus(S) ->
    lists:append([case string:split(P, "-") of
                      [A, B] -> lists:seq(list_to_integer(A), list_to_integer(B));
                      [A] -> [list_to_integer(A)]
                  end || P <- string:lexemes(S, ",")]).

%% @doc The value of a CPU list option (--server-cpus, ...): every CPU online, or
%% throw({usage, Message}) naming the option.
-spec cpus(string(), string()) -> [non_neg_integer()].
cpus(L, Opt) ->
    try parse_cpus(L) of
        [] -> throw({usage, Opt ++ " is empty"});
        Cs ->
            Online = online_cpus(),
            case Cs -- Online of
                [] -> Cs;
                Bad -> throw({usage, Opt ++ ": CPU " ++ integer_to_list(hd(Bad)) ++ " is not online"})
            end
    catch error:_ -> throw({usage, Opt ++ " needs a CPU list such as 0 or 0,1 or 0-3"})
    end.

%% @doc A CPU list as taskset takes it ("0,1,2").
-spec cpu_list([non_neg_integer()]) -> string().
cpu_list(Cs) -> string:join([integer_to_list(C) || C <- Cs], ",").

%% @doc Pins this node's OS process to Cpus (a taskset list): the harness itself (and so the load
%% generator it starts) runs on the load CPUs.
-spec pin_self(string()) -> ok.
pin_self(Cpus) ->
    _ = os:cmd("taskset -a -p -c " ++ Cpus ++ " " ++ os:getpid() ++ " >/dev/null 2>&1"),
    ok.
