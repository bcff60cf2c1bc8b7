%% @doc h2load as the load generator: command lines, running it bounded in time,
%% and reading what it prints and logs.
%%
%% Everything that reads h2load's text lives here so that the unit tests can feed
%% it recorded outputs (bench/test/samples/) without running a server.
-module(cbench_bench_h2load).

-export([args/1, run/2, run/3, parse/1, parse_log/1, parse_log/2, percentile/2,
         classify/2, version/0]).

-type parsed() :: #{rps := float(), total := non_neg_integer(),
                    started := non_neg_integer(), done := non_neg_integer(),
                    succeeded := non_neg_integer(), failed := non_neg_integer(),
                    errored := non_neg_integer(), timeout := non_neg_integer(),
                    s2xx := non_neg_integer(), s3xx := non_neg_integer(),
                    s4xx := non_neg_integer(), s5xx := non_neg_integer(),
                    bytes := non_neg_integer(), finished_s := float(),
                    protocol := binary()}.
-export_type([parsed/0]).

%% @doc The h2load argument list for one load run.
%% Spec keys: url, proto (h1 | h2c), clients, threads, streams, duration, warmup,
%% headers ([{Name, Value}]), data (path of a body file or undefined),
%% rps (per-client rate or undefined), log (path or undefined), requests (for -n runs).
-spec args(map()) -> [string()].
args(Spec = #{url := Url, proto := Proto}) ->
    Clients = maps:get(clients, Spec, 50),
    Threads = min(maps:get(threads, Spec, 1), Clients),
    Streams = case Proto of h1 -> 1; h2c -> maps:get(streams, Spec, 10) end,
    Base = ["-t", integer_to_list(Threads), "-c", integer_to_list(Clients),
            "-m", integer_to_list(Streams)],
    ProtoArgs = case Proto of h1 -> ["--h1"]; h2c -> ["-p", "h2c"] end,
    Time = case maps:get(requests, Spec, undefined) of
               undefined ->
                   ["-D", integer_to_list(maps:get(duration, Spec))]
                   ++ case maps:get(warmup, Spec, 0) of
                          0 -> [];
                          W -> ["--warm-up-time", integer_to_list(W)]
                      end;
               N -> ["-n", integer_to_list(N)]
           end,
    Hdrs = lists:append([["-H", N ++ ": " ++ V] || {N, V} <- maps:get(headers, Spec, [])]),
    Data = case maps:get(data, Spec, undefined) of
               undefined -> [];
               Path -> ["-d", Path]
           end,
    Rps = case maps:get(rps, Spec, undefined) of
              undefined -> [];
              R -> ["--rps", integer_to_list(R)]
          end,
    Log = case maps:get(log, Spec, undefined) of
              undefined -> [];
              L -> ["--log-file", L]
          end,
    Base ++ ProtoArgs ++ Time ++ Hdrs ++ Data ++ Rps ++ Log ++ [Url].

%% @doc Runs h2load pinned to the load CPUs, bounded by the run's duration plus a
%% margin (it is killed past that). Returns {ok, Output} or {error, Reason, Output}.
%% The OS pid is recorded in the pid directory while it runs so that the shell glue
%% can kill it if the harness itself is killed.
-spec run(map(), string()) -> {ok, binary()} | {error, term(), binary()}.
run(Spec, LoadCpus) ->
    run(Spec, LoadCpus, undefined).

%% @doc As run/2; Notify (a pid or undefined) is sent {os_pid, Runner, OsPid}.
run(Spec, LoadCpus, Notify) ->
    Bound = maps:get(duration, Spec, 1) + maps:get(warmup, Spec, 0) + 15,
    Args = ["-c", LoadCpus, h2load_path() | args(Spec)],
    cbench_bench_os:run_bounded("/usr/bin/taskset", Args, Bound * 1000, "h2load", Notify).

h2load_path() ->
    case os:find_executable("h2load") of
        false -> "h2load";
        P -> P
    end.

%% @doc h2load's version string, or undefined when it is not installed.
-spec version() -> binary() | undefined.
version() ->
    case os:find_executable("h2load") of
        false -> undefined;
        P ->
            Out = os:cmd(P ++ " --version"),
            iolist_to_binary(string:trim(Out))
    end.

%% @doc Reads the summary h2load prints at the end of a run.
-spec parse(binary()) -> {ok, parsed()} | {error, term()}.
parse(Out) ->
    Lines = binary:split(Out, [<<"\n">>, <<"\r\n">>], [global]),
    try
        Acc = lists:foldl(fun parse_line/2, #{protocol => <<>>}, Lines),
        Need = [rps, total, s2xx],
        case [K || K <- Need, not maps:is_key(K, Acc)] of
            [] -> {ok, Acc};
            Missing -> {error, {no_summary, Missing}}
        end
    catch
        error:Reason -> {error, {unreadable, Reason}}
    end.

parse_line(<<"finished in ", Rest/binary>>, Acc) ->
    %% finished in 2.00s, 61857.00 req/s, 9.37MB/s
    [Time, Rps | _] = binary:split(Rest, <<", ">>, [global]),
    [RpsNum | _] = binary:split(Rps, <<" ">>),
    Acc#{finished_s => duration_s(Time), rps => num(RpsNum)};
parse_line(<<"requests: ", Rest/binary>>, Acc) ->
    %% requests: 61857 total, 61857 started, 61857 done, 61857 succeeded, 0 failed, 0 errored, 0 timeout
    maps:merge(Acc, counts(Rest, #{<<"total">> => total, <<"started">> => started,
                                   <<"done">> => done, <<"succeeded">> => succeeded,
                                   <<"failed">> => failed, <<"errored">> => errored,
                                   <<"timeout">> => timeout}));
parse_line(<<"status codes: ", Rest/binary>>, Acc) ->
    maps:merge(Acc, counts(Rest, #{<<"2xx">> => s2xx, <<"3xx">> => s3xx,
                                   <<"4xx">> => s4xx, <<"5xx">> => s5xx}));
parse_line(<<"traffic: ", Rest/binary>>, Acc) ->
    %% traffic: 9.37MB (9824133) total, ...
    case re:run(Rest, <<"^\\S+ \\(([0-9]+)\\) total">>, [{capture, all_but_first, binary}]) of
        {match, [B]} -> Acc#{bytes => binary_to_integer(B)};
        nomatch -> Acc
    end;
parse_line(<<"Application protocol: ", P/binary>>, Acc) ->
    Acc#{protocol => string:trim(P)};
parse_line(_, Acc) ->
    Acc.

counts(Text, Names) ->
    Parts = binary:split(Text, <<", ">>, [global]),
    lists:foldl(
      fun(Part, M) ->
              case binary:split(string:trim(Part), <<" ">>) of
                  [N, Name] ->
                      case maps:find(Name, Names) of
                          {ok, Key} -> M#{Key => binary_to_integer(N)};
                          error -> M
                      end;
                  _ -> M
              end
      end, #{}, Parts).

num(B) ->
    case string:to_float(B) of
        {F, _} when is_float(F) -> F;
        {error, _} -> float(binary_to_integer(B))
    end.

%% h2load prints durations as 2.00s, 793us, 2.11ms or 1.5m.
duration_s(B) ->
    {match, [N, U]} = re:run(B, <<"^([0-9.]+)(us|ms|s|m|h)$">>, [{capture, all_but_first, binary}]),
    V = num(N),
    case U of
        <<"us">> -> V / 1.0e6;
        <<"ms">> -> V / 1.0e3;
        <<"s">> -> V;
        <<"m">> -> V * 60;
        <<"h">> -> V * 3600
    end.

%% @doc Classifies a run: `errors' when a request failed or got a non-2xx answer (or
%% nothing could be started at all), `stalled' when no connection can have completed
%% a second request (at most one success per connection), `ok' otherwise.
-spec classify(parsed(), pos_integer()) -> ok | errors | stalled.
classify(#{started := 0}, _Clients) ->
    errors;
classify(P = #{succeeded := Ok}, Clients) ->
    NonOk = maps:get(s3xx, P, 0) + maps:get(s4xx, P, 0) + maps:get(s5xx, P, 0),
    if
        NonOk > 0 -> errors;
        Ok =< Clients -> stalled;
        map_get(failed, P) > 0 -> errors;
        map_get(errored, P) > 0 -> errors;
        true -> ok
    end.

%% @doc Reads an h2load --log-file: one line per request, tab-separated start time
%% (µs since the epoch), status (-1 for a failed stream) and duration (µs). Returns
%% the sorted durations of the 2xx requests and the count of the others.
-spec parse_log(binary()) -> #{durations := [non_neg_integer()], bad := non_neg_integer(),
                               first_us := integer() | undefined, last_us := integer() | undefined}.
parse_log(Bin) ->
    parse_log(Bin, 0).

%% @doc As parse_log/1, ignoring requests that started before NotBeforeUs.
parse_log(Bin, NotBeforeUs) ->
    Lines = binary:split(Bin, <<"\n">>, [global, trim_all]),
    {Ds, Bad, First, Last} =
        lists:foldl(
          fun(Line, {D, B, F, L} = Acc) ->
                  case binary:split(Line, <<"\t">>, [global]) of
                      [S, St, Du | _] ->
                          Start = binary_to_integer(S),
                          if
                              Start < NotBeforeUs -> Acc;
                              true ->
                                  F1 = min_opt(F, Start),
                                  L1 = max_opt(L, Start),
                                  case binary_to_integer(St) of
                                      Code when Code >= 200, Code < 300 ->
                                          {[binary_to_integer(string:trim(Du)) | D], B, F1, L1};
                                      _ ->
                                          {D, B + 1, F1, L1}
                                  end
                          end;
                      _ -> Acc
                  end
          end, {[], 0, undefined, undefined}, Lines),
    #{durations => lists:sort(Ds), bad => Bad, first_us => First, last_us => Last}.

min_opt(undefined, X) -> X;
min_opt(A, X) -> min(A, X).
max_opt(undefined, X) -> X;
max_opt(A, X) -> max(A, X).

%% @doc The nearest-rank percentile P (0 < P =< 100) of a sorted list; undefined
%% for an empty list.
-spec percentile([number()], number()) -> number() | undefined.
percentile([], _P) ->
    undefined;
percentile(Sorted, P) when P > 0, P =< 100 ->
    N = length(Sorted),
    Rank = max(1, ceil_int(P * N / 100)),
    lists:nth(min(Rank, N), Sorted).

ceil_int(X) ->
    T = trunc(X),
    %% Guard against float noise such as 99.9 * 1000 / 100 = 999.0000000000001.
    case X - T of
        D when D > 1.0e-9 -> T + 1;
        _ -> T
    end.
