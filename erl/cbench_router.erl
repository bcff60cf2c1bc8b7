%%% @doc The run-time route table of the ehttpd engine: stubs and the fixture routes compiled into
%%% one immutable value, published with persistent_term (read per request without a copy or a
%%% lock; replaced whole after stubs were added or removed), and the lookup with the rules every
%%% engine follows:
%%%
%%% - Order: stubs by `priority' (higher first), then newest first; the fixture routes last.
%%% - A route applies to a request when its path, header and query matchers match. The first
%%%   applying route whose methods include the request's answers (GET brings HEAD; `any' takes
%%%   every method). A stub with `times' left at 0 is spent: it no longer applies.
%%% - A route with a body matcher (docs/routes.md, "Body matchers"): a lookup without the body
%%%   that reaches it (path, fields and method matched) answers `body_wait'; the connection reads
%%%   the body and looks up again with it (lookup/6), where a failing body matcher is a route that
%%%   does not apply. A body matcher is not looked at for 405.
%%% - Routes apply but none takes the method: 405, `allow' listing their methods
%%%   (cbench_spec:methods_order/1). No route applies: 404.
%%%
%%% Routes are indexed by the first segment of their path (routes whose first segment is a
%%% parameter, or the prefix "/", are checked for every path), so a lookup among 1,000 stubs
%%% looks only at the few that share the request's first segment.
-module(cbench_router).

-export([compile/2, publish/2, lazy/2, stale/1, refresh/2, table/1, unpublish/1, lookup/5,
         lookup/6, path_matches/2, query_fields/1, near_body/6, near_parts/6]).

-export_type([table/0, target/0]).

-define(IS_HEX(C), ((C >= $0 andalso C =< $9) orelse (C >= $a andalso C =< $f) orelse
                    (C >= $A andalso C =< $F))).

-record(route, {order :: non_neg_integer(),
                methods :: any | [binary()],
                path :: cbench_spec:canon_path(),
                headers :: [{binary(), present | {equal, binary()}}],
                query :: [{binary(), present | {equal, binary()}}],
                body :: any | cbench_spec:canon_body(),
                target :: target(),
                %% Uses left for a stub with `times' (atomics, decremented by the request that
                %% claims one); undefined: unlimited.
                left :: atomics:atomics_ref() | undefined,
                %% A scenario (issue 25): its states' atomics and slot, the state it requires
                %% (any: none) and the one its answer moves to (undefined: none).
                scen :: {atomics:atomics_ref(), pos_integer(), non_neg_integer() | any,
                         non_neg_integer() | undefined} | undefined}).
%% A stub's counters: 1, the requests it answered; 2, the 405s counted under it (the first route
%% whose path matched a request whose method it did not take).
-type target() :: {fixture, cbench_fixture_routes:name(), StatIndex :: pos_integer()}
                | {stub, Id :: pos_integer(), Name :: binary(), answer(), counters:counters_ref()}.
%% A stub's canned response, or an Erlang handler (cbench_handler).
-type answer() :: cbench_spec:canon_response() | {handler, pid() | atom(), map()}.
-opaque table() :: {#{binary() => [#route{}]}, [#route{}]}.

-type stub() :: #{id := pos_integer(), name := binary(), match := cbench_spec:canon_match(),
                  response := answer(), counts := counters:counters_ref(),
                  left := atomics:atomics_ref() | undefined}.

%% @doc Builds a table from the stubs (in the order they were added) and the fixture routes with
%% their counter index.
-spec compile([stub()], [{cbench_fixture_routes:route(), pos_integer()}]) -> table().
compile(Stubs, Fixture) ->
    %% Higher priority first, then newest (highest id) first.
    Sorted = lists:sort(fun(#{id := A, match := #{priority := PA}},
                            #{id := B, match := #{priority := PB}}) -> {PA, A} >= {PB, B} end,
                        Stubs),
    NStubs = length(Sorted),
    StubRoutes = [(route(I, M, {stub, Id, Name, R, Counts}, Left))#route{
                      scen = maps:get(scen, Stub, undefined)}
                  || {I, Stub = #{id := Id, name := Name, match := M, response := R,
                                  counts := Counts, left := Left}}
                         <- lists:zip(lists:seq(1, NStubs), Sorted)],
    FixtureRoutes = [route(NStubs + I, M, {fixture, Name, Stat}, undefined)
                     || {I, {#{name := Name, match := M}, Stat}}
                            <- lists:zip(lists:seq(1, length(Fixture)), Fixture)],
    index(StubRoutes ++ FixtureRoutes).

route(Order, M = #{methods := Ms, path := P, headers := H, query := Q}, Target, Left) ->
    %% Query matchers are percent-decoded once, as the C engines' route compiler decodes them
    %% (src/routes/route.c), and compared with the request's decoded fields: `a%2Bb' matches `?q=a%2Bb'
    %% on every engine, and a recording's `%2B' replays its `+'.
    Query = [{decode(N), case V of present -> present; {equal, X} -> {equal, decode(X)} end} || {N, V} <- Q],
    #route{order = Order, methods = Ms, path = P, headers = H, query = Query,
           body = compile_body(maps:get(body, M, any)), target = Target, left = Left}.

%% A regex is compiled once, here (PCRE read as POSIX ERE reads the subset cbench_spec lets in:
%% `.' matches newlines, `$' only the end).
compile_body({regex, Re}) ->
    {ok, MP} = re:compile(Re, [dotall, dollar_endonly]),
    {regex, MP};
compile_body(B) -> B.

index(Routes) ->
    {Buckets, Wild} =
        lists:foldr(fun(R, {B, W}) ->
                            case first_segment(R#route.path) of
                                wild -> {B, [R | W]};
                                Seg -> {maps:update_with(Seg, fun(L) -> [R | L] end, [R], B), W}
                            end
                    end, {#{}, []}, Routes),
    {Buckets, Wild}.

first_segment({exact, P}) -> path_segment(P);
first_segment({prefix, <<"/">>}) -> wild;
first_segment({prefix, P}) -> path_segment(P);
first_segment({segments, [{param, _} | _]}) -> wild;
first_segment({segments, [S | _]}) -> S.

%% The first segment of a path: between the leading `/' and the next one.
path_segment(<<"/", Rest/binary>>) ->
    case binary:match(Rest, <<"/">>) of
        nomatch -> Rest;
        {Pos, _} -> binary_part(Rest, 0, Pos)
    end;
path_segment(_) -> <<>>.

%% @doc Makes Table the one a server's connections read under Key.
-spec publish(term(), table()) -> ok.
publish(Key, Table) -> persistent_term:put({?MODULE, Key}, Table).

%% Publishing is lazy: a change to the stubs only marks the table stale (stale/1, one atomic
%% write), and the first table/1 after it asks the server process to compile and publish the
%% table once (refresh/2), whatever the number of changes. persistent_term:put copies the whole
%% table and makes every process be scanned for the old one, so a put per stub/3 call would make
%% N calls cost N tables.

%% @doc Publishing under Key becomes lazy: Server compiles and publishes the table when a
%% connection finds it stale (it gets {cbench_router, publish, From, Ref} and calls refresh/2).
-spec lazy(term(), pid()) -> ok.
lazy(Key, Server) -> persistent_term:put({?MODULE, Key, stale}, {atomics:new(1, []), Server}).

%% @doc The stubs behind Key changed: the next table/1 asks for a new table. Called by the server
%% process before the change's call returns, so a request sent after it never gets the old table.
-spec stale(term()) -> ok.
stale(Key) ->
    {Stale, _} = persistent_term:get({?MODULE, Key, stale}),
    atomics:put(Stale, 1, 1).

%% @doc In the server process: publishes Compile() if the table is stale (several connections
%% may ask for one change). The table is put before the mark is cleared, so a reader that sees
%% the mark clear reads the new table.
-spec refresh(term(), fun(() -> table())) -> ok.
refresh(Key, Compile) ->
    {Stale, _} = persistent_term:get({?MODULE, Key, stale}),
    case atomics:get(Stale, 1) of
        0 -> ok;
        _ ->
            publish(Key, Compile()),
            atomics:put(Stale, 1, 0)
    end.

%% @doc The table published under Key, once it has every change made so far (see lazy/2).
-spec table(term()) -> table().
table(Key) ->
    {Stale, Server} = persistent_term:get({?MODULE, Key, stale}),
    case atomics:get(Stale, 1) of
        0 -> persistent_term:get({?MODULE, Key});
        _ ->
            Ref = monitor(process, Server),
            Server ! {?MODULE, publish, self(), Ref},
            receive
                {Ref, published} ->
                    demonitor(Ref, [flush]),
                    table(Key);
                {'DOWN', Ref, process, _, _} ->
                    persistent_term:get({?MODULE, Key})
            end
    end.

%% @doc Forgets the table of a stopped server.
-spec unpublish(term()) -> ok.
unpublish(Key) ->
    _ = persistent_term:erase({?MODULE, Key}),
    _ = persistent_term:erase({?MODULE, Key, stale}),
    ok.

%% @doc The route of a request: Path is the target before `?', Query what follows it (<<>> when
%% none), Headers as received with their names lowercased. A stub with `times' is claimed here, so
%% that exactly that many requests get it even when connections race; so are a scenario's
%% transition (one compare-and-swap) and a sequence's response (the target then holds that one).
-spec lookup(table(), binary(), binary(), binary(), [{binary(), binary()}]) ->
          {ok, target()} | {not_allowed, Allow :: binary(), target()} | not_found | body_wait.
lookup(Table, Method, Path, Query, Headers) ->
    lookup(Table, Method, Path, Query, Headers, unknown).

%% @doc The same with the request's whole body known (Body a binary): body matchers are tried; with
%% `unknown', `body_wait' when the lookup reaches a route with one.
-spec lookup(table(), binary(), binary(), binary(), [{binary(), binary()}], binary() | unknown) ->
          {ok, target()} | {not_allowed, Allow :: binary(), target()} | not_found | body_wait.
lookup({Buckets, Wild}, Method, Path, Query, Headers, Body) ->
    Candidates = merge(maps:get(path_segment(Path), Buckets, []), Wild),
    Req = {Method, Path, Query, Headers},
    case Body of
        unknown -> ok;
        _ -> put({?MODULE, json}, undefined)
    end,
    find(Candidates, Req, Body, []).

merge([], Ws) -> Ws;
merge(Bs, []) -> Bs;
merge([B | Bs], [W | _] = Ws) when B#route.order < W#route.order -> [B | merge(Bs, Ws)];
merge(Bs, [W | Ws]) -> [W | merge(Bs, Ws)].

find([], _Req, _Body, []) -> not_found;
find([], _Req, _Body, Applying) ->
    [First | _] = Rs = lists:reverse(Applying),
    Ms = lists:usort(lists:append([M || #route{methods = M} <- Rs])),
    {not_allowed, iolist_to_binary(lists:join(<<", ">>, cbench_spec:methods_order(Ms))),
     First#route.target};
find([R | Rs], Req = {Method, Path, Query, Headers}, Body, Applying) ->
    case path_matches(R#route.path, Path) andalso fields_match(R, Query, Headers)
        andalso not spent(R) of
        false -> find(Rs, Req, Body, Applying);
        true ->
            case method_matches(R#route.methods, Method) of
                true when R#route.body =/= any, Body =:= unknown -> body_wait;
                true ->
                    case R#route.body =:= any orelse body_matches(R#route.body, Body) of
                        false -> find(Rs, Req, Body, Applying);
                        true ->
                            case claim(R) of
                                {ok, Target} -> {ok, Target};
                                false -> find(Rs, Req, Body, Applying)  % spent by a racing request
                            end
                    end;
                false -> find(Rs, Req, Body, [R | Applying])
            end
    end.

%% @doc The body of a 404 with near misses (docs/routes.md, "Near misses"; src/kinds/near_miss.c writes
%% the same bytes): every stub scored by the parts of its match the request fails (the path 4, the
%% method 2, each header or query matcher and the body matcher 1; a body matcher on a body that was
%% not read counts and says so; a stub that failed nothing was spent by its `times'), the three
%% lowest, ties in matching order. none when the table has no stub.
-spec near_body(table(), binary(), binary(), binary(), [{binary(), binary()}],
                binary() | unknown) -> none | {json | text, binary()}.
near_body({Buckets, Wild}, Method, Target, Query, Headers, Body) ->
    Path = case binary:match(Target, <<"?">>) of
               nomatch -> Target;
               {Pos, _} -> binary_part(Target, 0, Pos)
           end,
    Routes = lists:ukeysort(#route.order, Wild ++ lists:append(maps:values(Buckets))),
    put({?MODULE, json}, undefined),
    %% The query decoded once for every stub: each query matcher is then one lookup.
    Fields = query_index(Query),
    Scored = lists:sort([{Score, R#route.order, Name, Id, Parts}
                         || R = #route{target = {stub, Id, Name, _, _}} <- Routes,
                            {Score, Parts} <- [near_score(R, Method, Path, Fields, Headers, Body)]]),
    case lists:sublist(Scored, 3) of
        [] -> none;
        Best ->
            Json = lists:any(fun({<<"accept">>, V}) -> binary:match(V, <<"application/json">>) =/= nomatch;
                                (_) -> false
                             end, Headers),
            {case Json of true -> json; false -> text end,
             iolist_to_binary(near_text(Json, Method, Target, Best))}
    end.

%% @doc The parts of a canonical match a request fails, and their score (as for near_body/6):
%% verify/1 pairs an unmet expectation with the stray request that came closest.
-spec near_parts(cbench_spec:canon_match(), binary(), binary(), binary(), [{binary(), binary()}],
                 binary() | unknown) -> {non_neg_integer(), [binary()]}.
near_parts(Match, Method, Path, Query, Headers, Body) ->
    put({?MODULE, json}, undefined),
    %% A route of its own for the match (the target is not looked at).
    {Score, Parts} = near_score(route(0, Match, {fixture, expectation, 1}, undefined), Method, Path,
                                query_index(Query), Headers, Body),
    {Score, [iolist_to_binary(part(P, false)) || P <- Parts]}.

near_score(R, Method, Path, Fields, Headers, Body) ->
    Parts = [<<"method">> || R#route.methods =/= any, not method_matches(R#route.methods, Method)]
        ++ [<<"path">> || not path_matches(R#route.path, Path)]
        ++ [{<<"header ">>, N} || M = {N, _} <- R#route.headers, not all_present([M], Headers)]
        ++ [{<<"query ">>, N} || M = {N, _} <- R#route.query, not query_present(M, Fields)]
        ++ case {R#route.body, Body} of
               {any, _} -> [];
               {_, unknown} -> [<<"body (not read)">>];
               {B, _} -> [<<"body">> || not body_matches(B, Body)]
           end,
    Score = lists:sum([case P of <<"path">> -> 4; <<"method">> -> 2; _ -> 1 end || P <- Parts]),
    case Parts of
        [] -> {0, [<<"unavailable (spent, or another scenario state)">>]};
        _ -> {Score, Parts}
    end.

near_text(true, Method, Target, Best) ->
    ["{\"method\":\"", esc(Method, true), "\",\"target\":\"", esc(Target, true),
     "\",\"near_misses\":[",
     lists:join($,, [["{\"name\":\"", esc(Name, true), "\",\"id\":", integer_to_binary(Id),
                      ",\"differs\":[", lists:join($,, [[$", part(P, true), $"] || P <- Parts]), "]}"]
                     || {_, _, Name, Id, Parts} <- Best]),
     "]}\n"];
near_text(false, Method, Target, Best) ->
    ["No stub matched ", esc(Method, false), " ", esc(Target, false), "\nClosest stubs:\n",
     [["  ", esc(Name, false), " (id ", integer_to_binary(Id), "): ",
       lists:join(", ", [part(P, false) || P <- Parts]), "\n"]
      || {_, _, Name, Id, Parts} <- Best]].

part({Prefix, Name}, Json) -> [Prefix, esc(Name, Json)];
part(P, _) -> P.

%% Bytes as text: in plain text, bytes outside printable ASCII and `\' as \xHH; in JSON, `"' and
%% `\' escaped and bytes outside printable ASCII as \u00HH.
esc(B, Json) -> << <<(esc_byte(C, Json))/binary>> || <<C>> <= B >>.

esc_byte(C, true) when C =:= $"; C =:= $\\ -> <<$\\, C>>;
esc_byte(C, true) when C < 16#20; C >= 16#7f -> iolist_to_binary(io_lib:format("\\u00~2.16.0b", [C]));
esc_byte(C, false) when C < 16#20; C >= 16#7f; C =:= $\\ ->
    iolist_to_binary(io_lib:format("\\x~2.16.0b", [C]));
esc_byte(C, _) -> <<C>>.

%% Whether a whole request body matches a compiled body matcher. The body is parsed as JSON once
%% per lookup, by the first JSON matcher tried.
-spec body_matches(term(), binary()) -> boolean().
body_matches({equal, B}, Body) -> B =:= Body;
body_matches({contains, <<>>}, _Body) -> true;
body_matches({contains, B}, Body) -> binary:match(Body, B) =/= nomatch;
%% PCRE backtracks where glibc's matcher does not: a bound on its steps keeps a pathological
%% pattern from holding the connection (past it, no match; docs/routes.md).
body_matches({regex, MP}, Body) ->
    re:run(Body, MP, [{capture, none}, {match_limit, 10000000}]) =:= match;
body_matches({Kind, J}, Body) when Kind =:= json; Kind =:= json_subset ->
    Parsed = case get({?MODULE, json}) of
                 undefined ->
                     P = cbench_json:decode(Body),
                     put({?MODULE, json}, P),
                     P;
                 P -> P
             end,
    case Parsed of
        {ok, V} when Kind =:= json -> cbench_json:equal(V, J);
        {ok, V} -> cbench_json:holds(V, J);
        error -> false
    end.

%% @doc Whether a request path (the target before `?') matches a canonical path pattern.
-spec path_matches(cbench_spec:canon_path(), binary()) -> boolean().
path_matches({exact, P}, Path) -> P =:= Path;
path_matches({prefix, P}, Path) ->
    N = byte_size(P),
    byte_size(Path) >= N andalso binary_part(Path, 0, N) =:= P;
path_matches({segments, Segs}, <<"/", Rest/binary>>) ->
    segments_match(Segs, binary:split(Rest, <<"/">>, [global]));
path_matches({segments, _}, _) -> false.

segments_match([], []) -> true;
segments_match([{param, _} | Ss], [P | Ps]) when P =/= <<>> -> segments_match(Ss, Ps);
segments_match([S | Ss], [S | Ps]) -> segments_match(Ss, Ps);
segments_match(_, _) -> false.

method_matches(any, _) -> true;
method_matches(Ms, <<"HEAD">>) -> lists:member(<<"HEAD">>, Ms) orelse lists:member(<<"GET">>, Ms);
method_matches(Ms, M) -> lists:member(M, Ms).

fields_match(#route{headers = [], query = []}, _, _) -> true;
fields_match(#route{headers = H, query = Q}, Query, Headers) ->
    (H =:= [] orelse all_present(H, Headers)) andalso
        (Q =:= [] orelse all_present(Q, query_fields(Query))).

%% Each matcher must find a field of its name: any one for `present', one with exactly that value
%% for `{equal, V}' (a repeated field matches when any of its values does).
all_present(Matchers, Fields) ->
    lists:all(fun({N, present}) -> lists:keymember(N, 1, Fields);
                 ({N, {equal, V}}) -> lists:member({N, V}, Fields)
              end, Matchers).

%% The fields of a query as a set of their names and of their name=value pairs, so that scoring
%% a 404 against every stub costs one lookup per query matcher, not a scan of every field for each
%% (src/kinds/near_miss.c indexes them alike).
query_index(Query) ->
    maps:from_list(lists:append([[{{name, N}, true}, {{pair, N, V}, true}]
                                 || {N, V} <- query_fields(Query)])).

query_present({N, present}, Index) -> is_map_key({name, N}, Index);
query_present({N, {equal, V}}, Index) -> is_map_key({pair, N, V}, Index).

%% @doc A query string split into its `name=value' fields (`name' alone has the value <<>>),
%% each percent-decoded with `+' as a space (a `%' not followed by two hex digits stays as it is).
-spec query_fields(binary()) -> [{binary(), binary()}].
query_fields(<<>>) -> [];
query_fields(Query) ->
    [case binary:split(F, <<"=">>) of
         [N, V] -> {decode(N), decode(V)};
         [N] -> {decode(N), <<>>}
     end || F <- binary:split(Query, <<"&">>, [global]), F =/= <<>>].

decode(B) -> decode(B, <<>>).

decode(<<$+, Rest/binary>>, Acc) -> decode(Rest, <<Acc/binary, $\s>>);
decode(<<$%, H, L, Rest/binary>>, Acc) when ?IS_HEX(H), ?IS_HEX(L) ->
    decode(Rest, <<Acc/binary, (hex(H) * 16 + hex(L))>>);
decode(<<C, Rest/binary>>, Acc) -> decode(Rest, <<Acc/binary, C>>);
decode(<<>>, Acc) -> Acc.

hex(C) when C >= $0, C =< $9 -> C - $0;
hex(C) when C >= $a, C =< $f -> C - $a + 10;
hex(C) -> C - $A + 10.

spent(#route{left = undefined}) -> false;
spent(#route{left = Left}) -> atomics:get(Left, 1) =< 0.

%% Takes one use of a route, in the order of stub.c's stub_claim: a sequence that is spent, then
%% the scenario (its state, then the compare-and-swap of its transition), then `times', then the
%% sequence's next response. false when the route does not answer.
claim(#route{left = Left, scen = Scen, target = Target}) ->
    case not seq_spent(Target) andalso scen_take(Scen) andalso
        (Left =:= undefined orelse atomics:sub_get(Left, 1, 1) >= 0) of
        true -> pick(Target);
        false -> false
    end.

seq_spent({stub, _, _, #{'after' := not_found, seq_next := A, seq_n := N}, _}) ->
    atomics:get(A, 1) >= N;
seq_spent(_) -> false.

scen_take(undefined) -> true;
scen_take({A, Slot, When, Then}) ->
    Cur = atomics:get(A, Slot),
    (When =:= any orelse Cur =:= When) andalso
        (Then =:= undefined orelse Cur =:= Then orelse
         atomics:compare_exchange(A, Slot, Cur, Then) =:= ok).

pick({stub, Id, Name, #{seq_items := Items, 'after' := After, seq_next := A, seq_n := N},
      Counts}) ->
    I = atomics:add_get(A, 1, 1) - 1,
    K = if
            I < N -> I;
            After =:= cycle -> I rem N;
            After =:= last -> N - 1;
            true -> none
        end,
    case K of
        none -> false;
        _ -> {ok, {stub, Id, Name, element(K + 1, Items), Counts}}
    end;
pick(Target) -> {ok, Target}.
