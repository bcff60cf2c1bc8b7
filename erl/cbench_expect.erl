%%% @doc Expectations (cbench:expect/4) and their verification: an expectation is a stub that must
%%% answer a number of requests (exactly, or at least); verify/3 compares the stubs' hit counts with
%%% that, and reports the requests nothing was set up for (answered 404, or 405 by the method rule)
%%% that are in the journal. A 405 by the rule is one that no stub answered and that the fixture
%%% /status route did not make (/status/405).
-module(cbench_expect).

-export([count/1, verify/3]).

-export_type([count/0, expectation/0, problem/0]).

-type count() :: {times, non_neg_integer()} | {at_least, non_neg_integer()}.
-type expectation() :: #{id := pos_integer(), what := binary(), count := count()}.
-type problem() :: {expected, What :: binary(), non_neg_integer() | {at_least, non_neg_integer()},
                    got, non_neg_integer()}
                 | {no_request_arrived, What :: binary(),
                    expected, non_neg_integer() | {at_least, non_neg_integer()}}
                 | {unexpected_request, Method :: binary(), Path :: binary()}.

%% @doc The count option of expect/4: `#{times => N}' or `#{at_least => N}'.
-spec count(term()) -> {ok, count()} | error.
count(#{times := N} = M) when map_size(M) =:= 1, is_integer(N), N >= 0 -> {ok, {times, N}};
count(#{at_least := N} = M) when map_size(M) =:= 1, is_integer(N), N >= 0 -> {ok, {at_least, N}};
count(_) -> error.

%% @doc `ok', or `{error, Problems}' in this order: each expectation not met (in the order they
%% were made), then each unexpected request in the journal (oldest first). Hits maps stub ids to
%% the requests they answered.
-spec verify([expectation()], #{pos_integer() => non_neg_integer()},
             [cbench_journal:entry()] | {error, term()}) -> ok | {error, [problem()]}.
verify(Expectations, Hits, Journal) ->
    Counts = [problem(What, Count, maps:get(Id, Hits, 0))
              || #{id := Id, what := What, count := Count} <- Expectations],
    Unexpected = case Journal of
                     {error, _} -> [];
                     _ -> [{unexpected_request, M, P}
                           || E = #{method := M, path := P} <- Journal, unexpected(E)]
                 end,
    case [P || P <- Counts, P =/= ok] ++ Unexpected of
        [] -> ok;
        Problems -> {error, Problems}
    end.

unexpected(#{route := not_found}) -> true;
unexpected(#{status := 405, stub := undefined, route := R}) -> R =/= status;
unexpected(_) -> false.

problem(_What, {times, N}, N) -> ok;
problem(_What, {at_least, N}, Got) when Got >= N -> ok;
problem(What, Count, 0) -> {no_request_arrived, What, expected, expected(Count)};
problem(What, Count, Got) -> {expected, What, expected(Count), got, Got}.

expected({times, N}) -> N;
expected(AtLeast) -> AtLeast.
