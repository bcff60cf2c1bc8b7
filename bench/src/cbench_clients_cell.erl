%% @doc One cell of the client benchmark: `concurrency' worker processes share `iterations' GET
%% requests through one client adapter (a cbench_client module), each timing its own requests.
%%
%% The workers take requests from one shared budget (an atomics counter), so fast workers do more
%% of them; each records its successes' latencies and counts its errors by kind. The cell's clock
%% runs from the moment the workers are told to go until the last one has finished. A cell is
%% bounded in time: after `max_seconds' no worker starts another request, and a worker still inside
%% a request `timeout' + 2 s after that is killed and its request counted as a timeout (the
%% adapter broke its contract; the cell is marked `stuck'). So a server that stops answering gives
%% errors, never a hang.
-module(cbench_clients_cell).

-export([run/3, run_on/4, merge/1, figures/1]).

-define(GRACE_MS, 2000).
%% Error reasons kept per kind and worker, for the report.
-define(EXAMPLES, 2).

-define(C_STARTED, 1).
-define(C_OK, 2).
-define(KINDS, [timeout, closed, refused, other]).

%% @doc Runs one cell. Opts: concurrency, iterations, timeout (ms), pool_size, pool_count,
%% max_seconds; optional on_go and on_done (funs of no argument called just before the workers go and
%% just after the last one finished; on_done's result is returned as `probe').
%% Returns the raw measurements (see figures/1).
-spec run(module(), string(), map()) -> map().
run(Mod, Url, Opts = #{concurrency := C, iterations := N, timeout := T, pool_size := PS,
                       pool_count := PC, max_seconds := _})
  when is_atom(Mod), is_integer(C), C >= 1, is_integer(N), N >= 1 ->
    Base = #{concurrency => C, iterations => N, timeout => T, pool_size => PS, pool_count => PC},
    case start_client(Mod, #{pool_size => PS, pool_count => PC, timeout => T, concurrency => C, url => Url}) of
        {ok, State} ->
            try measure(Mod, State, Url, Opts) of
                R -> maps:merge(Base, R)
            after
                catch Mod:stop(State)
            end;
        {error, Why} ->
            Base#{status => start_failed, why => Why}
    end.

%% @doc Runs one cell with its workers split over Nodes (`make bench-clients NODES=...'): concurrency
%% and iterations shared evenly (largest remainder), every node's part run by run/3 there at once, and
%% the parts merged (merge/1). on_go and on_done run here, around the whole. A node that fails
%% (unreachable, crashed, no answer by the cell's bound) counts its share of the requests as `other'
%% errors, with an example naming it.
-spec run_on([node()], module(), string(), map()) -> map().
run_on(Nodes0, Mod, Url, Opts = #{concurrency := C, iterations := N, timeout := T, max_seconds := MaxS}) ->
    Nodes = lists:sublist(Nodes0, C),
    Shares = lists:zip3(Nodes, cbench_cluster:split(C, [1 || _ <- Nodes]),
                        cbench_cluster:split(max(N, length(Nodes)), [1 || _ <- Nodes])),
    Part = maps:without([on_go, on_done], Opts),
    (maps:get(on_go, Opts, fun() -> ok end))(),
    Reqs = [{Node, Ni, erpc:send_request(Node, ?MODULE, run, [Mod, Url, Part#{concurrency => Ci, iterations => Ni}])}
            || {Node, Ci, Ni} <- Shares],
    %% A part's own bound is max_seconds + timeout + the grace; its pools' start and stop come on top.
    Deadline = erlang:monotonic_time(millisecond) + MaxS * 1000 + T + ?GRACE_MS + 60000,
    Parts = [part(Node, Ni, Req, Deadline) || {Node, Ni, Req} <- Reqs],
    Probe = (maps:get(on_done, Opts, fun() -> undefined end))(),
    (merge(Parts))#{concurrency => C, iterations => N, timeout => T, pool_size => maps:get(pool_size, Opts),
                    pool_count => maps:get(pool_count, Opts), probe => Probe,
                    nodes => [atom_to_binary(Nd) || Nd <- Nodes]}.

part(Node, Ni, Req, Deadline) ->
    try erpc:receive_response(Req, max(0, Deadline - erlang:monotonic_time(millisecond))) of
        R -> R
    catch C:R ->
            #{status => ok, started => Ni, ok => 0, errors => #{timeout => 0, closed => 0, refused => 0, other => Ni},
              stuck => 0, elapsed_us => 0, latencies_us => [], examples => #{other => [{node_failed, Node, {C, R}}]}}
    end.

%% @doc The parts of a cell run on several nodes as one: counts and errors summed, the latencies
%% merged, the elapsed time the longest part's (the parts start together), the status the worst
%% (start_failed, stuck, capped, ok).
-spec merge([map()]) -> map().
merge(Parts) ->
    Statuses = [maps:get(status, P) || P <- Parts],
    Status = hd([S || S <- [start_failed, stuck, capped, ok], lists:member(S, Statuses)]),
    case Status of
        start_failed ->
            #{status => start_failed, why => [maps:get(why, P) || P = #{status := start_failed} <- Parts]};
        _ ->
            Sum = fun(K) -> lists:sum([maps:get(K, P) || P <- Parts]) end,
            #{status => Status, started => Sum(started), ok => Sum(ok), stuck => Sum(stuck),
              errors => maps:from_list([{K, lists:sum([maps:get(K, maps:get(errors, P)) || P <- Parts])}
                                        || K <- ?KINDS]),
              elapsed_us => lists:max([maps:get(elapsed_us, P) || P <- Parts]),
              latencies_us => lists:merge([maps:get(latencies_us, P) || P <- Parts]),
              examples => lists:foldl(fun(P, Ex) -> merge_examples(maps:get(examples, P), Ex) end,
                                      #{}, Parts)}
    end.

start_client(Mod, Opts) ->
    try Mod:start(Opts) of
        {error, Why} -> {error, Why};
        State -> {ok, State}
    catch C:R -> {error, {C, R}}
    end.

measure(Mod, State, Url, Opts = #{concurrency := C, iterations := N, timeout := T, max_seconds := MaxS}) ->
    Budget = atomics:new(1, [{signed, true}]),
    ok = atomics:put(Budget, 1, N),
    Counts = counters:new(2 + length(?KINDS), [write_concurrency]),
    Self = self(),
    Go = make_ref(),
    Workers = [spawn_monitor(fun() -> worker_init(Self, Go, Mod, State, Url, Budget, Counts) end)
               || _ <- lists:seq(1, C)],
    OnGo = maps:get(on_go, Opts, fun() -> ok end),
    OnGo(),
    T0 = erlang:monotonic_time(microsecond),
    StopAt = T0 div 1000 + MaxS * 1000,
    [W ! {Go, StopAt} || {W, _} <- Workers],
    HardStop = StopAt + T + ?GRACE_MS,
    {Lats, Examples, Stuck} = collect(maps:from_list(Workers), HardStop, [], #{}),
    T1 = erlang:monotonic_time(microsecond),
    Probe = (maps:get(on_done, Opts, fun() -> undefined end))(),
    Errors = maps:from_list([{K, counters:get(Counts, idx(K))} || K <- ?KINDS]),
    Started = counters:get(Counts, ?C_STARTED),
    Ok = counters:get(Counts, ?C_OK),
    Status = if Stuck > 0 -> stuck;
                Started < N -> capped;
                true -> ok
             end,
    #{status => Status, started => Started, ok => Ok,
      %% A killed worker's request never finished: a timeout.
      errors => Errors#{timeout := maps:get(timeout, Errors) + Stuck},
      stuck => Stuck, elapsed_us => T1 - T0, latencies_us => lists:sort(Lats),
      examples => Examples, probe => Probe}.

idx(timeout) -> 3;
idx(closed) -> 4;
idx(refused) -> 5;
idx(other) -> 6.

%% Waits for every worker's report; kills those still running at the hard stop.
collect(Left, _HardStop, Lats, Ex) when map_size(Left) =:= 0 ->
    {lists:append(Lats), Ex, 0};
collect(Left, HardStop, Lats, Ex) ->
    Wait = max(0, HardStop - erlang:monotonic_time(millisecond)),
    receive
        {done, W, WLats, WEx} ->
            receive {'DOWN', _, process, W, _} -> ok after 1000 -> ok end,
            collect(maps:remove(W, Left), HardStop, [WLats | Lats], merge_examples(WEx, Ex));
        {'DOWN', Ref, process, W, Why} when is_map_key(W, Left) ->
            %% A worker that crashed outside an adapter call (the adapter's own crashes are caught).
            Ref = maps:get(W, Left),
            collect(maps:remove(W, Left), HardStop, Lats, merge_examples(#{other => [Why]}, Ex))
    after Wait ->
            [exit(W, kill) || W <- maps:keys(Left)],
            [receive {'DOWN', R, process, _, _} -> ok after 1000 -> ok end || R <- maps:values(Left)],
            {lists:append(Lats), Ex, map_size(Left)}
    end.

merge_examples(WEx, Ex) ->
    maps:fold(fun(K, Rs, Acc) ->
                      Old = maps:get(K, Acc, []),
                      Acc#{K => lists:sublist(lists:usort(Old ++ Rs), 3)}
              end, Ex, WEx).

worker_init(Parent, Go, Mod, State, Url, Budget, Counts) ->
    receive
        {Go, StopAt} ->
            {Lats, Ex} = worker(Mod, State, Url, Budget, Counts, StopAt, [], #{}),
            Parent ! {done, self(), Lats, Ex}
    end.

worker(Mod, State, Url, Budget, Counts, StopAt, Lats, Ex) ->
    case erlang:monotonic_time(millisecond) < StopAt andalso atomics:sub_get(Budget, 1, 1) >= 0 of
        false ->
            {Lats, Ex};
        true ->
            counters:add(Counts, ?C_STARTED, 1),
            T1 = erlang:monotonic_time(microsecond),
            R = try Mod:get(State, Url)
                catch C:E -> {error, {C, E}}
                end,
            T2 = erlang:monotonic_time(microsecond),
            case R of
                ok ->
                    counters:add(Counts, ?C_OK, 1),
                    worker(Mod, State, Url, Budget, Counts, StopAt, [T2 - T1 | Lats], Ex);
                {error, Reason} ->
                    Kind = cbench_client:error_kind(Reason),
                    counters:add(Counts, idx(Kind), 1),
                    worker(Mod, State, Url, Budget, Counts, StopAt, Lats, example(Kind, Reason, Ex));
                Other ->
                    counters:add(Counts, idx(other), 1),
                    worker(Mod, State, Url, Budget, Counts, StopAt, Lats,
                           example(other, {bad_return, Other}, Ex))
            end
    end.

example(Kind, Reason, Ex) ->
    case maps:get(Kind, Ex, []) of
        L when length(L) < ?EXAMPLES -> Ex#{Kind => [Reason | L]};
        _ -> Ex
    end.

%% @doc The figures of a cell from its raw measurements: req/s (successes over the elapsed time),
%% errors and error % (errors over the requests that finished, by kind), client latency p50 and p99
%% (nearest rank over the successes, microseconds).
-spec figures(map()) -> map().
figures(#{status := start_failed}) ->
    #{rps => undefined, error_pct => undefined, errors_total => undefined, p50_us => undefined,
      p99_us => undefined, error_pcts => #{}};
figures(#{ok := Ok, errors := Errors, elapsed_us := Us, latencies_us := Lats}) ->
    Total = lists:sum(maps:values(Errors)),
    Done = Ok + Total,
    Pct = fun(0) -> 0.0;
             (E) -> 100 * E / Done
          end,
    #{rps => case Us of 0 -> 0.0; _ -> Ok / (Us / 1.0e6) end,
      errors_total => Total,
      error_pct => Pct(Total),
      error_pcts => maps:map(fun(_, E) -> Pct(E) end, Errors),
      p50_us => cbench_bench_h2load:percentile(Lats, 50),
      p99_us => cbench_bench_h2load:percentile(Lats, 99)}.
