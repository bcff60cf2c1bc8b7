%% @doc The statistics of the harness: medians, the `~' spread rule, the latency
%% ladder, and the number formats of the published tables.
-module(cbench_bench_stats).

-export([median/1, spread/1, spread_mark/1, ladder/2, rps_per_client/2,
         overloaded/2, lag_bound/2, fmt_int/1, fmt_rps/1, fmt_us/1, fmt_bytes/1, fmt_float/2]).

%% Runs more than this far apart (relative to their median) are marked `~'.
-define(SPREAD, 0.05).

%% @doc The median of a non-empty list (the mean of the two middle values when the
%% count is even).
-spec median([number()]) -> number().
median([]) -> erlang:error(badarg);
median(L) ->
    S = lists:sort(L),
    N = length(S),
    case N rem 2 of
        1 -> lists:nth(N div 2 + 1, S);
        0 -> (lists:nth(N div 2, S) + lists:nth(N div 2 + 1, S)) / 2
    end.

%% @doc How far apart the runs are: (max - min) / median; 0.0 for one run.
-spec spread([number()]) -> float().
spread([_]) -> 0.0;
spread(L) ->
    case median(L) of
        M when M == 0 -> 0.0;
        M -> (lists:max(L) - lists:min(L)) / M
    end.

%% @doc True when the runs are more than 5% apart (the legend's `~').
-spec spread_mark([number()]) -> boolean().
spread_mark(L) -> spread(L) > ?SPREAD.

%% @doc The offered rates of the latency ladder: the given fractions of the best
%% peak, rounded down to a multiple of the client count (h2load paces each client
%% at a whole number of requests per second), at least one request per client.
-spec ladder(number(), pos_integer()) -> [pos_integer()].
ladder(Peak, Clients) ->
    lists:usort([max(1, trunc(Peak * F / Clients)) * Clients || F <- [0.25, 0.5, 0.75]]).

%% @doc The --rps value (per client) for an offered rate.
rps_per_client(Rate, Clients) -> max(1, Rate div Clients).

%% @doc `overloaded' when less than 98% of the offered rate was answered.
-spec overloaded(number(), number()) -> boolean().
overloaded(Offered, Answered) -> Answered < 0.98 * Offered.

%% @doc In an open-loop latency run, the load generator is taken as the limit (`^')
%% when its own send lag (actual send - intended send) has a p99 over 1 ms and at
%% least half the corrected p99: then the tail is the client's lateness more than
%% the server's. (cbench-load polls instead of sleeping just before each send, so
%% its CPU is busy at any rate and says nothing here.)
-spec lag_bound(number() | undefined, number() | undefined) -> boolean().
lag_bound(Lag, P99) when is_number(Lag), is_number(P99) -> Lag > 1000 andalso Lag >= 0.5 * P99;
lag_bound(_, _) -> false.

%% @doc 266046 -> "266,046".
fmt_int(N) when is_float(N) -> fmt_int(round(N));
fmt_int(N) when is_integer(N), N < 0 -> "-" ++ fmt_int(-N);
fmt_int(N) when is_integer(N) ->
    S = integer_to_list(N),
    group(lists:reverse(S), []).

group([A, B, C, D | Rest], Acc) -> group([D | Rest], [$,, C, B, A | Acc]);
group(Rest, Acc) -> lists:reverse(Rest) ++ Acc.

fmt_rps(N) -> fmt_int(N).

%% @doc Microseconds as the published tables show latencies: 169us, 1.35ms, 2.07s.
fmt_us(undefined) -> "-";
fmt_us(Us) when Us < 1000 -> integer_to_list(round(Us)) ++ "us";
fmt_us(Us) when Us < 1000000 -> fmt_float(Us / 1000, 2) ++ "ms";
fmt_us(Us) -> fmt_float(Us / 1000000, 2) ++ "s".

%% @doc KiB or bytes as MB (10^6, as the resource reports print them).
fmt_bytes(undefined) -> "-";
fmt_bytes(B) -> integer_to_list(round(B / 1000000)) ++ " MB".

fmt_float(F, Decimals) ->
    float_to_list(float(F), [{decimals, Decimals}]).
