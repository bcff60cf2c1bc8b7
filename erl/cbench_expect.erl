%%% @doc Expectations (cbench:expect/4) and their verification: an expectation is a stub that must
%%% answer a number of requests (exactly, or at least); verify/3 compares the stubs' hit counts with
%%% that, and reports the requests nothing was set up for (answered 404, or 405 by the method rule)
%%% that are in the journal. A 405 by the rule is one that no stub answered and that the fixture
%%% /status route did not make (/status/405).
-module(cbench_expect).

-export([count/1, verify/3, near_misses/2]).

-export_type([count/0, expectation/0, problem/0, near_miss/0]).

-type near_miss() :: #{seq := pos_integer(), method := binary(), path := binary(),
                       query := binary(),
                       near := [#{id := pos_integer(), name := binary(), differs := [binary()]}]}.

-type count() :: {times, non_neg_integer()} | {at_least, non_neg_integer()}.
-type expectation() :: #{id := pos_integer(), what := binary(), count := count(),
                         match => cbench_spec:canon_match()}.
-type problem() :: {expected, What :: binary(), non_neg_integer() | {at_least, non_neg_integer()},
                    got, non_neg_integer()}
                 | {no_request_arrived, What :: binary(),
                    expected, non_neg_integer() | {at_least, non_neg_integer()}}
                 | {unexpected_request, Method :: binary(), Path :: binary()}
                 | {nearest_request, What :: binary(), #{method := binary(), path := binary(),
                                                         query := binary(),
                                                         differs := [binary()]}}.

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
    Strays = case Journal of
                 {error, _} -> [];
                 _ -> [E || E <- Journal, unexpected(E)]
             end,
    %% An expectation that got fewer requests than it wants is paired with the stray request that
    %% came closest to its match, when only its method, headers, query or body differ (the path
    %% matched): {nearest_request, What, ...} follows it, and that request is not listed again.
    {Counts, Left} =
        lists:foldl(fun(#{id := Id, what := What, count := Count} = X, {Acc, Rest}) ->
                            Got = maps:get(Id, Hits, 0),
                            case problem(What, Count, Got) of
                                ok -> {Acc, Rest};
                                P ->
                                    case short(Count, Got) andalso nearest(X, Rest) of
                                        {E, Near} -> {[Near, P | Acc], lists:delete(E, Rest)};
                                        _ -> {[P | Acc], Rest}
                                    end
                            end
                    end, {[], Strays}, Expectations),
    Unexpected = [{unexpected_request, M, P} || #{method := M, path := P} <- Left],
    case lists:reverse(Counts) ++ Unexpected of
        [] -> ok;
        Problems -> {error, Problems}
    end.

short({times, N}, Got) -> Got < N;
short({at_least, N}, Got) -> Got < N.

%% The stray request (oldest first among equals) whose parts differ least from the expectation's
%% match, scored as a 404's near misses are (cbench_router:near_parts/6), if its path matched.
nearest(#{what := What, match := Match}, Strays) ->
    Scored = [{Score, I, E, Parts}
              || {I, E = #{method := M, path := P, query := Q, headers := H}} <-
                     lists:zip(lists:seq(1, length(Strays)), Strays),
                 {Score, Parts} <- [cbench_router:near_parts(Match, M, P, Q, H, body(E))],
                 Score < 4],
    case lists:sort(Scored) of
        [{_, _, E = #{method := M, path := P, query := Q}, Parts} | _] ->
            {E, {nearest_request, What, #{method => M, path => P, query => Q, differs => Parts}}};
        [] -> false
    end;
nearest(_, _) ->
    false.

%% @doc The journal's requests that no route matched (404s, oldest first), each with the three
%% stubs closest to it now (Stubs: {Id, Name, CanonMatch}), scored as a 404's near misses are
%% (cbench_router:near_parts/6; the body judged from the journal's copy), equal scores in matching
%% order (priority, then newest).
-spec near_misses([{pos_integer(), binary(), cbench_spec:canon_match()}],
                  [cbench_journal:entry()]) -> [near_miss()].
near_misses(Stubs, Journal) ->
    Ordered = lists:sort(fun({A, _, #{priority := PA}}, {B, _, #{priority := PB}}) ->
                                 {PA, A} >= {PB, B}
                         end, Stubs),
    Indexed = lists:zip(lists:seq(1, length(Ordered)), Ordered),
    [#{seq => Seq, method => M, path => P, query => Q,
       near => [#{id => Id, name => Name, differs => Parts}
                || {_, _, Id, Name, Parts}
                       <- lists:sublist(lists:sort(
                                          [{Score, I, Id, Name, Parts}
                                           || {I, {Id, Name, Match}} <- Indexed,
                                              {Score, Parts} <-
                                                  [cbench_router:near_parts(Match, M, P, Q, H,
                                                                            body(E))]]), 3)]}
     || E = #{route := not_found, seq := Seq, method := M, path := P, query := Q, headers := H}
            <- Journal].

%% A journaled body is whole when the journal kept all of it.
body(#{body := B, body_length := N}) when byte_size(B) =:= N -> B;
body(_) -> unknown.

unexpected(#{route := not_found}) -> true;
unexpected(#{status := 405, stub := undefined, route := R}) -> R =/= status;
unexpected(_) -> false.

problem(_What, {times, N}, N) -> ok;
problem(_What, {at_least, N}, Got) when Got >= N -> ok;
problem(What, Count, 0) -> {no_request_arrived, What, expected, expected(Count)};
problem(What, Count, Got) -> {expected, What, expected(Count), got, Got}.

expected({times, N}) -> N;
expected(AtLeast) -> AtLeast.
