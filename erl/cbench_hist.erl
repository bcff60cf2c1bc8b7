%%% @doc cbench-load's log-linear latency histogram on the Erlang side: read from the `hist' entries
%%% of its --erl file, merged exactly, and read back as percentiles the way src/load/hist.c reads
%%% them, so that the p99 of a run spread over several nodes is the p99 of the union of their
%%% samples (docs/bench.md, "More than one machine").
%%%
%%% The layout is hist.h's: one bucket per nanosecond below 256 ns, then 128 buckets per power of
%%% two up to 2^36 ns; a file written with another layout is refused (layout/1), never misread.
%%% Counts are kept sparse (a map from bucket index to count): a run at one latency fills a few
%%% dozen of the 3,840 buckets.
-module(cbench_hist).

-export([layout/1, from_term/1, to_term/1, empty/0, merge/2, merge/1, percentile/2, summary/1,
         range/1]).

-export_type([hist/0]).
%% The API of the histogram; cbench_cluster uses only part of it.
-ignore_xref([{empty, 0}, {merge, 2}, {range, 1}]).

-define(SUB_BITS, 7).
-define(HALF, (1 bsl ?SUB_BITS)).
-define(LINEAR, (2 bsl ?SUB_BITS)).
-define(MAX_BITS, 36).
-define(BUCKETS, (?LINEAR + (?MAX_BITS - ?SUB_BITS - 1) * ?HALF)).

-type hist() :: #{total := non_neg_integer(), min := non_neg_integer(), max := non_neg_integer(),
                  sum := non_neg_integer(), counts := #{non_neg_integer() => pos_integer()}}.

%% @doc ok when the `layout' entry of an --erl file's `hist' is the one this module reads.
-spec layout(term()) -> ok | {error, {hist_layout, term()}}.
layout(#{sub_bits := ?SUB_BITS, linear := ?LINEAR, max_bits := ?MAX_BITS, buckets := ?BUCKETS}) -> ok;
layout(Other) -> {error, {hist_layout, Other}}.

%% @doc A histogram from its term (#{total, min, max, sum, buckets => [Index, Count, ...]});
%% badarg for anything else (an index out of the layout, a count that is not positive, a total
%% that differs from the counts' sum).
-spec from_term(term()) -> hist().
from_term(#{total := T, min := Min, max := Max, sum := Sum, buckets := B})
  when is_integer(T), T >= 0, is_integer(Min), Min >= 0, is_integer(Max), Max >= Min,
       is_integer(Sum), Sum >= 0, is_list(B) ->
    Counts = pairs(B, #{}),
    case lists:sum(maps:values(Counts)) of
        T -> #{total => T, min => Min, max => Max, sum => Sum, counts => Counts};
        _ -> error(badarg)
    end;
from_term(_) ->
    error(badarg).

pairs([I, C | Rest], Acc) when is_integer(I), I >= 0, I < ?BUCKETS, is_integer(C), C > 0,
                                not is_map_key(I, Acc) ->
    pairs(Rest, Acc#{I => C});
pairs([], Acc) -> Acc;
pairs(_, _) -> error(badarg).

%% @doc The histogram with no value.
-spec empty() -> hist().
empty() ->
    #{total => 0, min => 0, max => 0, sum => 0, counts => #{}}.

%% @doc The histogram of both histograms' values: counts added bucket by bucket, the exact min and
%% max kept (hist.c's cbl_hist_merge).
-spec merge(hist(), hist()) -> hist().
merge(#{total := 0}, B) -> B;
merge(A, #{total := 0}) -> A;
merge(#{total := Ta, min := MinA, max := MaxA, sum := Sa, counts := Ca},
      #{total := Tb, min := MinB, max := MaxB, sum := Sb, counts := Cb}) ->
    Counts = maps:fold(fun(I, C, Acc) -> Acc#{I => C + maps:get(I, Acc, 0)} end, Ca, Cb),
    #{total => Ta + Tb, min => min(MinA, MinB), max => max(MaxA, MaxB), sum => Sa + Sb,
      counts => Counts}.

%% @doc The merge of a list of histograms.
-spec merge([hist()]) -> hist().
merge(Hs) ->
    lists:foldl(fun(H, Acc) -> merge(Acc, H) end, empty(), Hs).

%% @doc The value (ns) at percentile P (0 < P =< 100) by nearest rank, exactly as hist.c's
%% cbl_hist_percentile: the midpoint of the bucket holding the rank-th smallest value, kept within
%% the exact [min, max]; 0 for an empty histogram. The rank is computed with the same double
%% arithmetic as the C code, so that both round it the same way.
-spec percentile(hist(), number()) -> non_neg_integer().
percentile(#{total := 0}, _) -> 0;
percentile(#{max := Max}, P) when P >= 100 -> Max;
percentile(#{total := T, min := Min, max := Max, counts := Counts}, P) when P > 0 ->
    Exact = P / 100.0 * T,
    Rank0 = trunc(Exact),
    Rank1 = case Rank0 < Exact - 1.0e-9 * T of
                true -> Rank0 + 1;
                false -> Rank0
            end,
    walk(lists:sort(maps:to_list(Counts)), max(1, Rank1), 0, Min, Max).

walk([{I, C} | Rest], Rank, Seen, Min, Max) ->
    case Seen + C >= Rank of
        true ->
            {Low, Width} = range(I),
            min(Max, max(Min, Low + Width div 2));
        false -> walk(Rest, Rank, Seen + C, Min, Max)
    end;
walk([], _, _, _, Max) -> Max.

%% @doc The range [Low, Low + Width) of ns a bucket holds (hist.c's cbl_hist_range).
-spec range(non_neg_integer()) -> {non_neg_integer(), pos_integer()}.
range(I) when I < ?LINEAR -> {I, 1};
range(I0) ->
    I = I0 - ?LINEAR,
    Shift = I div ?HALF + 1,
    {(?HALF + I rem ?HALF) bsl Shift, 1 bsl Shift}.

%% @doc The summary cbench-load writes under `latency_us' (count, min, mean, p50, p90, p99, p999,
%% p9999, max; microseconds): for a histogram read from one run, the same values as that run's
%% (the mean to the file's three decimals).
-spec summary(hist()) -> #{atom() => number()}.
summary(#{total := T, min := Min, max := Max, sum := Sum} = H) ->
    #{count => T, min => case T of 0 -> 0.0; _ -> Min / 1000.0 end,
      mean => case T of 0 -> 0.0; _ -> Sum / T / 1000.0 end,
      p50 => us(percentile(H, 50)), p90 => us(percentile(H, 90)), p99 => us(percentile(H, 99)),
      p999 => us(percentile(H, 99.9)), p9999 => us(percentile(H, 99.99)), max => us(Max)}.

us(Ns) -> Ns / 1000.0.

%% @doc The term of a histogram, in the shape from_term/1 reads and cbench-load writes (buckets as
%% a flat [Index, Count, ...] list in index order): a merged histogram can be merged again.
-spec to_term(hist()) -> map().
to_term(#{total := T, min := Min, max := Max, sum := Sum, counts := Counts}) ->
    #{total => T, min => Min, max => Max, sum => Sum,
      buckets => lists:append([[I, C] || {I, C} <- lists:sort(maps:to_list(Counts))])}.
