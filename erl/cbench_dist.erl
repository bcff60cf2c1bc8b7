%%% @doc Distributed Erlang for cbench's own use: epmd started and waited for, and this node made
%%% distributed when it is not. A fresh machine (or network namespace) has no epmd running, and
%%% net_kernel fails at once if the one `epmd -daemon' just started has not bound its port yet.
-module(cbench_dist).

-export([ensure_epmd/0, ensure_started/2]).
%% ensure_epmd/0: also for the benchmark harness (bench/src/cbench_bench_os.erl).
-ignore_xref([{ensure_epmd, 0}]).

%% @doc ok once an epmd answers on this host (started with `epmd -daemon' when none does, then
%% waited for, at most 10 s), or {error, Text} saying what epmd printed.
-spec ensure_epmd() -> ok | {error, string()}.
ensure_epmd() ->
    case erl_epmd:names() of
        {ok, _} -> ok;
        _ ->
            Out = os:cmd("epmd -daemon 2>&1"),
            wait_epmd(erlang:monotonic_time(millisecond) + 10000, Out)
    end.

wait_epmd(Deadline, Out) ->
    case erl_epmd:names() of
        {ok, _} -> ok;
        Error ->
            case erlang:monotonic_time(millisecond) >= Deadline of
                true ->
                    {error, lists:flatten(io_lib:format("epmd does not answer after `epmd -daemon' "
                                                        "(~0p; it printed: ~ts)", [Error, Out]))};
                false ->
                    timer:sleep(20),
                    wait_epmd(Deadline, Out)
            end
    end.

%% @doc Makes this node distributed as Name (`shortnames' or `longnames') when it is not yet;
%% ok when it already is, whatever its name.
-spec ensure_started(node(), shortnames | longnames) -> ok | {error, string()}.
ensure_started(Name, Mode) ->
    case node() of
        nonode@nohost ->
            case ensure_epmd() of
                ok ->
                    case net_kernel:start([Name, Mode]) of
                        {ok, _} -> ok;
                        {error, R} ->
                            {error, lists:flatten(io_lib:format("this node could not start "
                                                                "distribution: ~0p", [R]))}
                    end;
                {error, _} = E -> E
            end;
        _ -> ok
    end.
