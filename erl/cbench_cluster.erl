%%% @doc cbench:load/2 over several nodes (`nodes => [Node | {Node, Weight}]'): cbench-load runs on
%%% every node through erpc, all starting at one agreed wall-clock time, and their histograms are
%%% merged exactly (cbench_hist), so the merged p99 is the p99 of the union of the nodes' samples.
%%%
%%% The steps: each node is probed first (reachable, cbench on its code path, cbench-load built:
%%% otherwise the run does not start and the error names the node); connections and the open-loop
%%% rate are split by weight; the agreed start is a second after the probes, told to each node in
%%% its own clock (the probe's round trip estimates each node's clock offset, Cristian's way, so the
%%% nodes' clocks need not agree: the start is off by at most half a round trip plus the sleep's
%%% wake-up); every node sleeps until then and runs cbench_load:run/2. The results are collected
%%% until duration + warm-up + timeout + 10 s after the start: a node that dies (its connection
%%% drops) or does not answer by then (cut off) is listed under `failed' by name, and the others'
%%% results are merged and kept (docs/bench.md, "More than one machine").
-module(cbench_cluster).

-export([run/2, split/2, probe/0, node_run/3]).
%% probe/0 and node_run/3 run on the load nodes, called over erpc.
%% split/2: for the tests.
-ignore_xref([{probe, 0}, {node_run, 3}, {split, 2}]).

-define(START_MS, 1000).
-define(MARGIN_MS, 10000).
-define(PROBE_MS, 10000).
%% cbench-load's own default (src/load/config.c): split like a given count.
-define(DEFAULT_CONNECTIONS, 10).

%% @doc Runs a load from every node of `nodes' (see cbench:load/2) and merges the results.
-spec run(string() | binary(), map()) -> {ok, map()} | {error, term()}.
run(Url, #{nodes := _} = Opts) when is_binary(Url) ->
    run(binary_to_list(Url), Opts);
run(Url, #{nodes := Nodes0} = Opts) when is_list(Url) ->
    case io_lib:printable_latin1_list(Url) of
        false -> error(badarg);
        true ->
            Rest = maps:remove(nodes, Opts),
            case {nodes_arg(Nodes0), cbench_load:args(Url, Rest#{'$body_file' => "body"})} of
                {error, _} -> {error, {bad_option, nodes, Nodes0, {list, {node, weight}}}};
                {_, {error, _} = E} -> E;
                {{ok, Nodes}, {ok, _, _}} when node() =:= nonode@nohost ->
                    {error, {not_distributed, [N || {N, _} <- Nodes]}};
                {{ok, Nodes}, {ok, _, _}} -> plan(Url, Nodes, Rest)
            end
    end;
run(_, _) ->
    error(badarg).

%% [Node | {Node, Weight}], no node twice, weights positive numbers.
nodes_arg([_ | _] = L) ->
    Ns = [case X of
              {N, W} when is_atom(N), is_number(W), W > 0 -> {N, W};
              N when is_atom(N) -> {N, 1};
              _ -> bad
          end || X <- L],
    Names = [N || {N, _} <- Ns],
    case lists:member(bad, Ns) orelse length(lists:usort(Names)) =/= length(Names)
        orelse not lists:all(fun(N) -> lists:member($@, atom_to_list(N)) end, Names) of
        true -> error;
        false -> {ok, Ns}
    end;
nodes_arg(_) -> error.

plan(Url, Nodes, Opts) ->
    Weights = [W || {_, W} <- Nodes],
    Conns = maps:get(connections, Opts, ?DEFAULT_CONNECTIONS),
    Shares = split(Conns, Weights),
    case lists:member(0, Shares) of
        true -> {error, {bad_option, connections, Conns, {at_least, length(Nodes)}}};
        false ->
            Total = lists:sum(Weights),
            Plan = [{N, W, Opts#{connections => C},
                     case Opts of
                         #{rate := R} when R > 0 -> #{rate => R * W / Total};
                         _ -> #{}
                     end} || {{N, W}, C} <- lists:zip(Nodes, Shares)],
            probe_all([{N, W, maps:merge(O, Rate)} || {N, W, O, Rate} <- Plan], Url, Opts, [])
    end.

%% @doc Total split in proportion to Weights, in integers that sum to Total (largest remainder;
%% ties to the earlier node).
-spec split(non_neg_integer(), [number()]) -> [non_neg_integer()].
split(Total, Weights) ->
    W = lists:sum(Weights),
    Exact = [Total * Wi / W || Wi <- Weights],
    Floors = [floor(E) || E <- Exact],
    Left = Total - lists:sum(Floors),
    Idx = lists:seq(1, length(Weights)),
    ByRemainder = lists:sort([{-(E - F), I} || {I, E, F} <- lists:zip3(Idx, Exact, Floors)]),
    Extra = [I || {_, I} <- lists:sublist(ByRemainder, Left)],
    [F + case lists:member(I, Extra) of true -> 1; false -> 0 end
     || {I, F} <- lists:zip(Idx, Floors)].

%% Every node answers first, or the run does not start.
probe_all([{N, W, O} | Rest], Url, Opts, Acc) ->
    case probe_node(N) of
        {ok, Clock} -> probe_all(Rest, Url, Opts, [{N, W, O, Clock} | Acc]);
        {error, _} = E -> E
    end;
probe_all([], Url, Opts, Acc) ->
    start(Url, Opts, lists:reverse(Acc)).

%% Three round trips once connected (the first call of a new connection also sets it up, which
%% would count in its round trip); the clock offset is read from the shortest.
probe_node(Node) ->
    try
        [#{exe := Exe} | _] = Ps = [probe_once(Node) || _ <- [1, 2, 3]],
        [{Rtt, Offset} | _] = lists:sort([{R, O} || #{rtt_us := R, clock_offset_us := O} <- Ps]),
        case Exe of
            {ok, _} -> {ok, #{clock_offset_us => Offset, rtt_us => Rtt}};
            {error, {not_built, Path}} -> {error, {not_built, Node, Path}}
        end
    catch
        error:{erpc, noconnection} -> {error, {nodedown, Node}};
        error:{erpc, timeout} -> {error, {timeout, Node}};
        error:{exception, undef, [{?MODULE, probe, _, _} | _]} -> {error, {no_cbench, Node}};
        C:R -> {error, {probe_failed, Node, {C, R}}}
    end.

probe_once(Node) ->
    T0 = os:system_time(microsecond),
    #{time_us := Remote, exe := Exe} = erpc:call(Node, ?MODULE, probe, [], ?PROBE_MS),
    T1 = os:system_time(microsecond),
    #{exe => Exe, clock_offset_us => Remote - (T0 + T1) div 2, rtt_us => T1 - T0}.

%% @doc On a load node: its clock and where its cbench-load is (called by the coordinator).
-spec probe() -> #{time_us := integer(), exe := {ok, file:filename()} | {error, term()}}.
probe() ->
    #{time_us => os:system_time(microsecond), exe => cbench_load:exe_path()}.

%% @doc On a load node: sleeps until StartAt (ms of this node's os:system_time/1), then runs the
%% load; returns its result and how late it started by this node's clock.
-spec node_run(string(), map(), integer()) -> {{ok, map()} | {error, term()}, map()}.
node_run(Url, Opts, StartAt) ->
    timer:sleep(max(0, StartAt - os:system_time(millisecond))),
    Late = os:system_time(millisecond) - StartAt,
    {cbench_load:run(Url, Opts), #{start_late_ms => Late}}.

start(Url, Opts, Plan) ->
    Secs = maps:get(duration, Opts, 10) + maps:get(warmup, Opts, 0) + maps:get(timeout, Opts, 10),
    Deadline = erlang:monotonic_time(millisecond) + ?START_MS + round(Secs * 1000) + ?MARGIN_MS,
    StartAt = os:system_time(millisecond) + ?START_MS,
    Reqs = [{N, W, O, Clock,
             erpc:send_request(N, ?MODULE, node_run,
                               [Url, O, StartAt + maps:get(clock_offset_us, Clock) div 1000])}
            || {N, W, O, Clock} <- Plan],
    Results = [{N, W, O, Clock, collect(Req, Deadline)} || {N, W, O, Clock, Req} <- Reqs],
    merge(Results).

collect(Req, Deadline) ->
    Left = max(0, Deadline - erlang:monotonic_time(millisecond)),
    try erpc:receive_response(Req, Left) of
        {{ok, #{hist := #{layout := L}} = R}, Info} ->
            case cbench_hist:layout(L) of
                ok -> {ok, R, Info};
                {error, _} = E -> E
            end;
        {{ok, _}, _} -> {error, no_histograms};
        {{error, E}, _} -> {error, E}
    catch
        error:{erpc, noconnection} -> {error, nodedown};
        error:{erpc, timeout} -> {error, timeout};
        C:R -> {error, {C, R}}
    end.

merge(Results) ->
    Failed = maps:from_list([{N, Why} || {N, _, _, _, {error, Why}} <- Results]),
    case [{N, W, O, Clock, R, Info} || {N, W, O, Clock, {ok, R, Info}} <- Results] of
        [] -> {error, {all_nodes_failed, Failed}};
        Ok -> {ok, merged(Ok, Failed)}
    end.

merged(Ok, Failed) ->
    Rs = [R || {_, _, _, _, R, _} <- Ok],
    [First | _] = Rs,
    Hists = [maps:get(hist, R) || R <- Rs],
    H = fun(K) -> cbench_hist:merge([cbench_hist:from_term(maps:get(K, Hi)) || Hi <- Hists]) end,
    [Corrected, Uncorrected, Lag] = [H(K) || K <- [corrected, uncorrected, send_lag]],
    Seconds = merge_seconds([[cbench_hist:from_term(S) || S <- maps:get(seconds, Hi)] || Hi <- Hists]),
    Sum = fun(K) -> lists:foldl(fun(R, Acc) -> add(Acc, maps:get(K, R, undefined)) end, undefined, Rs) end,
    Timeline = [#{second => I, rps => lists:sum([rps_at(I, R) || R <- Rs]),
                  p99_us => cbench_hist:percentile(S, 99) / 1000.0}
                || {I, S} <- lists:zip(lists:seq(1, length(Seconds)), Seconds)],
    Nodes = maps:from_list(
              [{N, R#{weight => W, start_late_ms => maps:get(start_late_ms, Info),
                                           clock_offset_us => maps:get(clock_offset_us, Clock),
                                           rtt_us => maps:get(rtt_us, Clock),
                                           rate => maps:get(rate, O, undefined)}}
               || {N, W, O, Clock, R, Info} <- Ok]),
    Same = maps:with([tool, version, url, proto, mode, depth, new_conn, duration_s, warmup_s,
                      timeout_s], First),
    Same#{connections => Sum(connections), threads => Sum(threads),
          offered_rps => Sum(offered_rps), achieved_rps => Sum(achieved_rps), ok_rps => Sum(ok_rps),
          requests => Sum(requests), errors => Sum(errors), status => Sum(status),
          bytes => Sum(bytes), connects => Sum(connects), tls => Sum(tls), cpu_s => Sum(cpu_s),
          latency_us => #{corrected => cbench_hist:summary(Corrected),
                          uncorrected => cbench_hist:summary(Uncorrected),
                          send_lag => cbench_hist:summary(Lag)},
          timeline => Timeline,
          hist => #{layout => maps:get(layout, hd(Hists)),
                    corrected => cbench_hist:to_term(Corrected),
                    uncorrected => cbench_hist:to_term(Uncorrected),
                    send_lag => cbench_hist:to_term(Lag),
                    seconds => [cbench_hist:to_term(S) || S <- Seconds]},
          nodes => Nodes, failed => Failed}.

%% Second i of the merged timeline is second i of every node's: the nodes started together.
merge_seconds(PerNode) ->
    Len = lists:max([length(L) || L <- PerNode]),
    [cbench_hist:merge([lists:nth(I, L) || L <- PerNode, length(L) >= I]) || I <- lists:seq(1, Len)].

rps_at(I, #{timeline := T}) when length(T) >= I ->
    maps:get(rps, lists:nth(I, T));
rps_at(_, _) -> 0.

%% Counts summed key by key (maps inside maps: errors by kind and by status).
add(undefined, B) -> B;
add(A, undefined) -> A;
add(A, B) when is_number(A), is_number(B) -> A + B;
add(A, B) when is_map(A), is_map(B) ->
    maps:fold(fun(K, V, Acc) -> Acc#{K => add(maps:get(K, Acc, undefined), V)} end, A, B);
add(A, _) -> A.
