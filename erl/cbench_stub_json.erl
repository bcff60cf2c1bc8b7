%%% @doc Stub files as Erlang terms and back (docs/record.md, docs/routes.md "The stub file").
%%%
%%% from_json/2 turns a decoded stub file (cbench_json:decode/1 of `{"stubs": [...]}' or a list of
%%% stubs) into `#{name, match, response}' maps that cbench:stub/3 takes as they are (the name is in
%%% the match too, so stub/3 keeps it; a stub's `expect' is its `expect' key, the count that
%%% cbench:expect/4 takes); to_json/1 is the inverse, writing the stub file's text. Every field the C
%%% engines' loader (src/stub_json.c, cb_server_stubs_file) reads is read here, with its JSON checks
%%% in its order and at its place: name; match method, path, headers, query, priority, scenario,
%%% when, then, body; response status, headers, body, delay_ms, chunks, interval_ms, times, fault,
%%% delay, delay_seed, template, proxy, and a sequence's responses and after; expect. What the C
%%% engine checks once the JSON types are right (a path's syntax, a fault's spec, a template) is
%%% cbench_spec's, and spec_where/4 names a field it refuses as the C loader does.
-module(cbench_stub_json).

-include_lib("kernel/include/file.hrl").

-export([from_json/2, to_json/1, spec_where/4]).
%% to_json/1: for the ehttpd engine's save_stubs/2 (later) and for users writing stub files.
-ignore_xref([{to_json, 1}]).

-export_type([stub/0, where/0]).

-type stub() :: #{name := binary(), match := map(), response := map(),
                  expect => #{times | at_least := non_neg_integer()}}.
%% A place in a stub file, as the C engines' loader names it: `stubs' (the list itself), a key of
%% the file's object, or a stub's index followed by keys (atoms for the fields read here, binaries
%% for other keys and for header and matcher names) and list indexes:
%% `{0, response, responses, 1, status}' is stubs[0].response.responses[1].status.
-type where() :: stubs | binary() | tuple().

%% The bounds of src/stub_json.c's JSON checks.
-define(MAX_DELAY_MS, 3600000).
-define(MAX_CHUNKS, 1000000).
-define(MAX_PRIORITY, 1000000).
-define(MAX_U63, 16#7fffffffffffffff).
-define(MAX_U62, 16#3fffffffffffffff).
-define(MAX_RESPONSES, 1000).
-define(MAX_BODY_FILE, 1 bsl 40).
-define(MAX_RECORD_HEADERS, 32).
-define(MAX_RECORD_STATUS, 64).
-define(MAX_SIGMA, 10).
-define(MAX_PIPELINE, 64).

-define(STUB_KEYS, [<<"name">>, <<"match">>, <<"response">>, <<"expect">>]).
-define(MATCH_KEYS, [<<"method">>, <<"path">>, <<"headers">>, <<"query">>, <<"priority">>, <<"scenario">>,
                     <<"when">>, <<"then">>, <<"body">>]).
%% A sequence's responses take these; the stub's own response also times, responses, after, proxy.
-define(ITEM_KEYS, [<<"status">>, <<"headers">>, <<"body">>, <<"delay_ms">>, <<"chunks">>, <<"interval_ms">>,
                    <<"fault">>, <<"delay">>, <<"delay_seed">>, <<"template">>]).
-define(RESPONSE_KEYS, [<<"times">>, <<"responses">>, <<"after">>, <<"proxy">> | ?ITEM_KEYS]).
-define(PROXY_KEYS, [to, protocol, timeout_ms, max_body_bytes, record, record_headers,
                     record_body_file_bytes, record_status, ca_file, ca_pem, insecure, server_name, pipeline]).

%% @doc The stubs of a decoded stub file, in file order; Dir: the folder relative body files and a
%% proxy's relative ca_file are taken from. `{error, {bad_stub_json, Where, Why}}' for a term that
%% is not a stub file's: Why is the reason the C engines' loader gives for the same field
%% (wrong_type, missing, empty, out_of_range, unknown_key, unknown_method, bad_char, conflict,
%% too_many, min_above_max, eisdir, not_regular, efbig; docs/routes.md), and Where its place, so
%% that ehttpd's load_stubs/2 and theirs refuse a file alike.
-spec from_json(cbench_json:json(), file:filename_all()) ->
          {ok, [stub()]} | {error, {bad_stub_json, where(), term()}}.
from_json(#{<<"stubs">> := Stubs} = File, Dir) ->
    %% The file's object holds the list and nothing else (a misspelt second list would add nothing).
    case maps:keys(File) -- [<<"stubs">>] of
        [] -> from_json(Stubs, Dir);
        [K | _] -> {error, {bad_stub_json, K, unknown_key}}
    end;
from_json(Stubs, Dir) when is_list(Stubs) ->
    try
        {ok, [stub(S, I, Dir) || {I, S} <- indexed(Stubs)]}
    catch throw:{bad, Where, Why} -> {error, {bad_stub_json, Where, Why}}
    end;
from_json(_, _) ->
    {error, {bad_stub_json, stubs, wrong_type}}.

%% @doc Where in a decoded stub file (File, as from_json/2 took it) the C engines' loader names a
%% field of stub I that cbench_spec refused as `{Field, Value, Why}' (or that the ehttpd engine
%% refused when adding it): `{response, status}' is `{I, response, status}'; a stub's name is a key of
%% the stub; a header matcher is named by its key in the file, a response header by its index in a
%% list of pairs or its key in an object (a sequence's by the response's `headers' alone, as the C
%% loader can name no more); a refused interval_ms (Erlang's `{response, chunks}' holds both) by
%% its key; a proxy's options by `proxy', but a `to' by its own key.
-spec spec_where(cbench_json:json(), non_neg_integer(), term(), term()) -> where().
spec_where(_File, I, {match, name}, _) ->
    {I, name};
spec_where(File, I, {match, headers, Name}, _) ->
    Keys = case json_stub(File, I) of
               #{<<"match">> := #{<<"headers">> := H}} when is_map(H) -> maps:keys(H);
               _ -> []
           end,
    case [K || K <- lists:sort(Keys), cbench_http:lower(K) =:= cbench_http:lower(Name)] of
        [K | _] -> {I, match, headers, K};
        [] -> {I, match, headers, Name}
    end;
spec_where(File, I, {response, headers, Name}, Value) ->
    Lower = cbench_http:lower(Name),
    case json_stub(File, I) of
        #{<<"response">> := #{<<"headers">> := H}} when is_map(H) ->
            case [K || K <- lists:sort(maps:keys(H)), cbench_http:lower(K) =:= Lower] of
                [K | _] -> {I, response, headers, K};
                [] -> {I, response, headers}
            end;
        #{<<"response">> := #{<<"headers">> := H}} when is_list(H) ->
            %% The pair whose value (or name) was refused, else the first of that name.
            Named = [{J, V} || {J, [K, V]} <- indexed(H), is_binary(K), cbench_http:lower(K) =:= Lower],
            case [J || {J, V} <- Named, V =:= Value orelse Name =:= Value orelse Lower =:= Value] ++
                [J || {J, _} <- Named] of
                [J | _] -> {I, response, headers, J};
                [] -> {I, response, headers}
            end;
        _ -> {I, response, headers}
    end;
spec_where(_File, I, {response, chunks}, {0, _}) ->
    {I, response, interval_ms};
spec_where(_File, I, {response, proxy, to}, _) ->
    {I, response, proxy, to};
spec_where(_File, I, {response, proxy, _}, _) ->
    {I, response, proxy};
spec_where(_File, I, Field, _) when is_tuple(Field) ->
    list_to_tuple([I | tuple_to_list(Field)]);
spec_where(_File, I, Field, _) ->
    {I, Field}.

json_stub(#{<<"stubs">> := Stubs}, I) -> json_stub(Stubs, I);
json_stub(Stubs, I) when is_list(Stubs), I < length(Stubs) -> lists:nth(I + 1, Stubs);
json_stub(_, _) -> undefined.

%%% Reading: each check where src/stub_json.c makes it, so that a file with one wrong field is
%%% refused at the same place for the same reason.

stub(S, I, Dir) when is_map(S) ->
    keys(S, ?STUB_KEYS, {I}),
    Name = case S of
               #{<<"name">> := N} when is_binary(N) -> N;
               #{<<"name">> := _} -> bad({I, name}, wrong_type);
               _ -> undefined
           end,
    M = case S of
            #{<<"match">> := M0} when is_map(M0) -> M0;
            #{<<"match">> := _} -> bad({I, match}, wrong_type);
            _ -> bad({I, match}, missing)
        end,
    R = case S of
            #{<<"response">> := R0} when is_map(R0) -> R0;
            #{<<"response">> := _} -> bad({I, response}, wrong_type);
            _ -> #{}
        end,
    keys(M, ?MATCH_KEYS, {I, match}),
    keys(R, ?RESPONSE_KEYS, {I, response}),
    Match0 = match(M, {I, match}),
    Match = case Name of undefined -> Match0; _ -> Match0#{name => Name} end,
    Stub = #{name => case Name of undefined -> <<>>; _ -> Name end, match => Match,
             response => response(R, {I, response}, Dir)},
    case S of
        #{<<"expect">> := E} -> Stub#{expect => expect(E, {I, expect})};
        _ -> Stub
    end;
stub(_, I, _) ->
    throw({bad, {I}, wrong_type}).

bad(Where, Why) -> throw({bad, Where, Why}).

at(Where, Key) -> erlang:append_element(Where, Key).

indexed(L) -> lists:zip(lists:seq(0, length(L) - 1), L).

%% A key of Map outside Keys: unknown_key at its place.
keys(Map, Keys, Where) ->
    case lists:sort(maps:keys(Map)) -- Keys of
        [] -> ok;
        [K | _] -> bad(at(Where, K), unknown_key)
    end.

%% An integer field within the C loader's bounds: out_of_range outside them, wrong_type when not an
%% integer.
int(V, Min, Max, _) when is_integer(V), V >= Min, V =< Max -> V;
int(V, _, _, Where) when is_integer(V) -> bad(Where, out_of_range);
int(_, _, _, Where) -> bad(Where, wrong_type).

%% Fields in the order src/stub_json.c reads them: {JSON key, Erlang key, reader of the value and
%% its place}; the Erlang terms of those given.
fields(Obj, Steps, Where, Acc0) ->
    lists:foldl(fun({Key, Atom, Read}, Acc) ->
                        case Obj of
                            #{Key := V} -> Acc#{Atom => Read(V, at(Where, Atom))};
                            _ -> Acc
                        end
                end, Acc0, Steps).

string(V, _) when is_binary(V) -> V;
string(_, Where) -> bad(Where, wrong_type).

boolean(V, _) when is_boolean(V) -> V;
boolean(_, Where) -> bad(Where, wrong_type).

match(M, W) ->
    Path = case M of
               #{<<"path">> := P} when is_binary(P) -> P;
               #{<<"path">> := _} -> bad(at(W, path), wrong_type);
               _ -> bad(at(W, path), missing)
           end,
    fields(M, [{<<"method">>, method, fun method/2},
               {<<"scenario">>, scenario, fun string/2},
               {<<"when">>, 'when', fun string/2},
               {<<"then">>, then, fun string/2},
               {<<"headers">>, headers, fun matchers/2},
               {<<"query">>, query, fun matchers/2},
               {<<"priority">>, priority, fun(V, Wp) -> int(V, -?MAX_PRIORITY, ?MAX_PRIORITY, Wp) end},
               {<<"body">>, body, fun body_matcher/2}],
           W, #{path => Path}).

%% "any", a method, or a non-empty list of methods, refused with the C loader's place and reason
%% (an item by its index) rather than cbench_spec's, which names the whole field.
method(<<"any">>, _) -> any;
method(M, Where) when is_binary(M) -> known_method(M, Where);
method([], Where) -> bad(Where, empty);
method(Ms, Where) when is_list(Ms) ->
    lists:usort([case M of
                     _ when is_binary(M) -> known_method(M, at(Where, I));
                     _ -> bad(at(Where, I), wrong_type)
                 end || {I, M} <- indexed(Ms)]);
method(_, Where) -> bad(Where, wrong_type).

%% A method a route can name: cbench_spec orders the known ones and drops the others.
known_method(M, Where) ->
    case lists:member(M, cbench_spec:methods_order([M])) of
        true -> M;
        false -> bad(Where, unknown_method)
    end.

%% A matcher of another type is named by its key, as the C loader names it.
matchers(Map, Where) when is_map(Map) ->
    [{K, case V of
             true -> present;
             B when is_binary(B) -> B;
             _ -> bad(at(Where, K), wrong_type)
         end} || {K, V} <- lists:sort(maps:to_list(Map))];
matchers(_, Where) -> bad(Where, wrong_type).

%% One of equal, contains, regex (strings), json, json_subset (any JSON value).
body_matcher(B, Where) when is_map(B), map_size(B) =:= 1 ->
    [{K, V}] = maps:to_list(B),
    case K of
        _ when K =:= <<"equal">>; K =:= <<"contains">>; K =:= <<"regex">> ->
            #{binary_to_atom(K) => string(V, at(Where, binary_to_atom(K)))};
        _ when K =:= <<"json">>; K =:= <<"json_subset">> -> #{binary_to_atom(K) => V};
        _ -> bad(Where, unknown_key)
    end;
body_matcher(_, Where) -> bad(Where, wrong_type).

%% The stub's response: a sequence, a proxy, or a single one.
response(#{<<"responses">> := _} = R, W, Dir) ->
    %% times first, then only responses, after and times (src/stub_json.c, parse_sequence).
    Times = fields(R, [{<<"times">>, times, fun times/2}], W, #{}),
    keys(R, [<<"responses">>, <<"after">>, <<"times">>], W),
    Wl = at(W, responses),
    Items = case maps:get(<<"responses">>, R) of
                [] -> bad(Wl, empty);
                L when is_list(L), length(L) > ?MAX_RESPONSES -> bad(Wl, too_many);
                L when is_list(L) -> L;
                _ -> bad(Wl, wrong_type)
            end,
    Rs = [item(X, at(Wl, J), Dir) || {J, X} <- indexed(Items)],
    After = case R of
                #{<<"after">> := A} when A =:= <<"last">>; A =:= <<"cycle">>; A =:= <<"not_found">> ->
                    #{'after' => binary_to_atom(A)};
                #{<<"after">> := A} when is_binary(A) -> bad(at(W, 'after'), out_of_range);
                #{<<"after">> := _} -> bad(at(W, 'after'), wrong_type);
                _ -> #{}
            end,
    maps:merge(without_zero_times(Times), After#{responses => Rs});
response(R, W, Dir) ->
    %% after goes with responses only: beside a proxy it is one of the keys a proxy cannot go with.
    case R of
        #{<<"after">> := _, <<"proxy">> := _} -> bad(at(W, 'after'), conflict);
        #{<<"after">> := _} -> bad(at(W, 'after'), unknown_key);
        _ -> ok
    end,
    Single = single(R, W, Dir),
    case R of
        #{<<"proxy">> := P} -> (beside_proxy(Single))#{proxy => proxy(P, at(W, proxy), Dir)};
        _ -> plain(maps:merge(#{status => 200}, Single))
    end.

item(X, W, Dir) when is_map(X) ->
    keys(X, ?ITEM_KEYS, W),
    plain(maps:merge(#{status => 200}, single(X, W, Dir)));
item(_, W, _) ->
    bad(W, wrong_type).

%% The fields of one response, as src/stub_json.c's parse_response reads them (chunks and
%% interval_ms as Erlang's one {N, Ms}, times 0 as no bound).
single(R, W, Dir) ->
    S0 = fields(R, [{<<"status">>, status, fun(V, Wf) -> int(V, 200, 599, Wf) end},
                    {<<"headers">>, headers, fun headers/2},
                    {<<"body">>, body, fun(V, Wf) -> body(V, Wf, Dir) end},
                    {<<"delay_ms">>, delay_ms, fun(V, Wf) -> int(V, 0, ?MAX_DELAY_MS, Wf) end},
                    {<<"chunks">>, chunks, fun(V, Wf) -> int(V, 0, ?MAX_CHUNKS, Wf) end},
                    {<<"interval_ms">>, interval_ms, fun(V, Wf) -> int(V, 0, ?MAX_DELAY_MS, Wf) end},
                    {<<"times">>, times, fun times/2},
                    {<<"fault">>, fault, fun string/2}],
                W, #{}),
    case R of
        #{<<"delay">> := _, <<"delay_ms">> := _} -> bad(at(W, delay_ms), conflict);
        _ -> ok
    end,
    S1 = fields(R, [{<<"delay_seed">>, delay_seed, fun(V, Wf) -> int(V, 0, ?MAX_U63, Wf) end},
                    {<<"delay">>, delay, fun delay/2},
                    {<<"template">>, template, fun boolean/2}],
                W, S0),
    S2 = case S1 of
             #{template := false} -> maps:remove(template, S1);
             _ -> S1
         end,
    Chunks = {maps:get(chunks, S2, 0), maps:get(interval_ms, S2, 0)},
    S3 = maps:without([chunks, interval_ms], without_zero_times(S2)),
    case Chunks of
        {0, 0} -> S3;
        _ -> S3#{chunks => Chunks}
    end.

times(V, W) -> int(V, 0, ?MAX_U63, W).

without_zero_times(#{times := 0} = R) -> maps:remove(times, R);
without_zero_times(R) -> R.

%% A response without a proxy: no chunks means no interval either (the C engine sends the body
%% whole then, whatever interval_ms says).
plain(#{chunks := {0, _}} = R) -> maps:remove(chunks, R);
plain(R) -> R.

%% Beside a proxy only delay_ms, delay, times and fault go (docs/proxy.md): another field is a
%% conflict when it says something, and what the C engine takes as unset is left out (no headers,
%% an empty body, no chunks, delay_seed, which only a drawn delay reads), so that cbench_spec refuses
%% what the C engine refuses.
beside_proxy(R) ->
    Unset = [K || {K, V} <- maps:to_list(R),
                  (K =:= headers andalso V =:= []) orelse (K =:= body andalso V =:= <<>>)
                      orelse K =:= delay_seed],
    maps:without(Unset, R).

%% Response headers: an object goes out sorted by name as the C loader sorts it (src/stub_json.c,
%% header_name_cmp): by the name as sent, lowercased, then by the name as written, bytewise; not in
%% map order, which is sorted only up to 32 keys, nor by the name as written alone (X-B before x-a).
%% A list of pairs keeps its order.
headers(H, W) when is_map(H) ->
    [{K, case V of
             _ when is_binary(V) -> V;
             _ -> bad(at(W, K), wrong_type)
         end} || {_, K, V} <- lists:sort([{cbench_http:lower(K), K, V} || {K, V} <- maps:to_list(H)])];
headers(H, W) when is_list(H) ->
    [case P of
         [K, V] when is_binary(K), is_binary(V) -> {K, V};
         _ -> bad(at(W, J), wrong_type)
     end || {J, P} <- indexed(H)];
headers(_, W) ->
    bad(W, wrong_type).

%% "delay": milliseconds, {"uniform": [MIN, MAX]} or {"lognormal": [MEDIAN_MS, SIGMA]}.
delay(Ms, W) when is_integer(Ms) -> int(Ms, 0, ?MAX_DELAY_MS, W);
delay(#{<<"uniform">> := [Lo, Hi]} = D, W) when map_size(D) =:= 1, is_integer(Lo), is_integer(Hi) ->
    (Lo >= 0 andalso Lo =< ?MAX_DELAY_MS andalso Hi >= 0 andalso Hi =< ?MAX_DELAY_MS)
        orelse bad(W, out_of_range),
    Lo =< Hi orelse bad(W, min_above_max),
    {uniform, Lo, Hi};
delay(#{<<"lognormal">> := [Median, Sigma]} = D, W) when map_size(D) =:= 1, is_integer(Median),
                                                         is_number(Sigma) ->
    (Median >= 0 andalso Median =< ?MAX_DELAY_MS andalso Sigma > 0 andalso Sigma =< ?MAX_SIGMA)
        orelse bad(W, out_of_range),
    {lognormal, Median, Sigma};
delay(_, W) -> bad(W, wrong_type).

%% A string, or an object of exactly one of base64, file, bytes, json (as the C loader reads it).
body(B, _, _) when is_binary(B) -> B;
body(B, W, Dir) when is_map(B), map_size(B) =:= 1 ->
    [{K, V}] = maps:to_list(B),
    body(K, V, W, Dir);
body(_, W, _) -> bad(W, wrong_type).

body(<<"base64">>, B64, W, _) when is_binary(B64) ->
    %% RFC 4648 without white space, padded to a multiple of 4: base64:decode/1 would also skip
    %% white space, which the C loader refuses (\\z: $ would let a final newline through).
    case re:run(B64, "^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?\\z", [{capture, none}]) of
        match -> base64:decode(B64);
        nomatch -> bad(at(W, base64), bad_char)
    end;
body(<<"file">>, <<>>, W, _) -> bad(at(W, file), empty);
body(<<"file">>, F, W, Dir) when is_binary(F) ->
    Path = filename:join(Dir, F),
    %% What the C loader finds with stat(2) before the engine opens the file.
    case file:read_file_info(Path) of
        {ok, #file_info{type = directory}} -> bad(at(W, file), eisdir);
        {ok, #file_info{type = regular, size = Size}} when Size > ?MAX_BODY_FILE -> bad(at(W, file), efbig);
        {ok, #file_info{type = regular}} -> ok;
        {ok, #file_info{}} -> bad(at(W, file), not_regular);
        {error, _} -> ok
    end,
    {file, Path};
body(<<"bytes">>, N, _, _) when is_integer(N), N >= 0 -> {bytes, N};
body(<<"bytes">>, N, W, _) when is_integer(N) -> bad(at(W, bytes), out_of_range);
body(<<"json">>, J, _, _) -> cbench_json:encode(J);
body(K, _, W, _) when K =:= <<"base64">>; K =:= <<"file">>; K =:= <<"bytes">> ->
    bad(at(W, binary_to_atom(K)), wrong_type);
body(_, _, W, _) -> bad(W, unknown_key).

%% A proxy's options with cbench_spec's keys (docs/proxy.md), their JSON types checked as
%% src/stub_json.c's parse_proxy does (the values' rules are cbench_spec's, as they are the C
%% engine's; pipeline's bound is checked here too, as there); what the C engine takes as unset
%% (max_body_bytes 0, an empty ca_file, ca_pem or server_name) or as the default (pipeline 0 or 1:
%% one request at a time) is left out. A relative ca_file is the stub file's folder's, as a body
%% file.
proxy(P, W, Dir) when is_map(P) ->
    keys(P, [atom_to_binary(K) || K <- ?PROXY_KEYS], W),
    To = case P of
             #{<<"to">> := T} when is_binary(T) -> T;
             #{<<"to">> := _} -> bad(at(W, to), wrong_type);
             _ -> bad(at(W, to), missing)
         end,
    Opts = fields(P, [{<<"protocol">>, protocol, fun protocol/2},
                      {<<"timeout_ms">>, timeout_ms, fun(V, Wf) -> int(V, 1, ?MAX_DELAY_MS, Wf) end},
                      {<<"max_body_bytes">>, max_body_bytes, fun(V, Wf) -> int(V, 0, ?MAX_U62, Wf) end},
                      {<<"record_body_file_bytes">>, record_body_file_bytes,
                       fun(V, Wf) -> int(V, 0, ?MAX_U62, Wf) end},
                      {<<"pipeline">>, pipeline, fun(V, Wf) -> int(V, 0, ?MAX_PIPELINE, Wf) end},
                      {<<"record">>, record, fun boolean/2},
                      {<<"insecure">>, insecure, fun boolean/2},
                      {<<"ca_file">>, ca_file, fun string/2},
                      {<<"ca_pem">>, ca_pem, fun string/2},
                      {<<"server_name">>, server_name, fun string/2},
                      {<<"record_headers">>, record_headers,
                       fun(V, Wf) -> list_of(V, ?MAX_RECORD_HEADERS, fun string/2, Wf) end},
                      {<<"record_status">>, record_status,
                       fun(V, Wf) -> list_of(V, ?MAX_RECORD_STATUS, fun(S, Ws) -> int(S, 100, 599, Ws) end,
                                             Wf) end}],
                  W, #{to => To}),
    Unset = [K || {K, V} <- maps:to_list(Opts),
                  (K =:= max_body_bytes andalso V =:= 0) orelse
                      (K =:= pipeline andalso V =< 1) orelse
                      (lists:member(K, [ca_file, ca_pem, server_name]) andalso V =:= <<>>)],
    case maps:without(Unset, Opts) of
        #{ca_file := F} = O -> O#{ca_file := filename:join(Dir, F)};
        O -> O
    end;
proxy(_, W, _) -> bad(W, wrong_type).

protocol(<<"http1">>, _) -> http1;
protocol(<<"h2c">>, _) -> h2c;
protocol(V, W) when is_binary(V) -> bad(W, out_of_range);
protocol(_, W) -> bad(W, wrong_type).

list_of(L, Max, Read, W) when is_list(L) ->
    length(L) =< Max orelse bad(W, too_many),
    [Read(X, at(W, J)) || {J, X} <- indexed(L)];
list_of(_, _, _, W) -> bad(W, wrong_type).

%% "expect": {"times": N} or {"at_least": N}, one of the two.
expect(E, W) when is_map(E), map_size(E) =:= 1 ->
    keys(E, [<<"times">>, <<"at_least">>], W),
    [{K, V}] = maps:to_list(E),
    Key = binary_to_atom(K),
    #{Key => int(V, 0, ?MAX_U63, at(W, Key))};
expect(_, W) -> bad(W, wrong_type).

%%% Writing

%% @doc The stub file's text for stubs (as from_json/2 gives them, or as stub/3 takes them with a
%% map match): `{"stubs": [...]}', one stub a line, every field from_json/2 reads, so that
%% from_json/2 of the text gives the stubs it gives back. A body is a string when it is UTF-8
%% without NUL, else `{"base64": ...}'; `{file, F}' is written as given; `{bytes, N}' as
%% `{"bytes": N}'; a fault as its spec text; `chunks => {N, Ms}' as chunks and interval_ms.
-spec to_json([stub() | #{match := map(), response := map()}]) -> binary().
to_json(Stubs) when is_list(Stubs) ->
    Lines = [cbench_json:encode(stub_json(S)) || S <- Stubs],
    iolist_to_binary(["{\"stubs\": [\n", lists:join(",\n", Lines), "\n]}\n"]).

stub_json(S = #{match := M, response := R}) ->
    Name = case {S, M} of
               {#{name := N}, _} when N =/= <<>> -> #{<<"name">> => bin(N)};
               {_, #{name := N}} when N =/= <<>> -> #{<<"name">> => bin(N)};
               _ -> #{}
           end,
    Expect = case S of
                 #{expect := E} -> #{<<"expect">> => maps:fold(fun(K, V, A) -> A#{bin(K) => V} end, #{}, E)};
                 _ -> #{}
             end,
    maps:merge(Name, Expect#{<<"match">> => match_json(M), <<"response">> => response_json(R)}).

match_json(P) when is_binary(P); is_list(P) ->
    match_json(#{path => P});
match_json(M) ->
    maps:fold(fun(name, _, A) -> A;
                 (path, P, A) -> A#{<<"path">> => bin(P)};
                 (method, any, A) -> A#{<<"method">> => <<"any">>};
                 (method, Ms, A) when is_list(Ms), Ms =/= [], not is_integer(hd(Ms)) ->
                      A#{<<"method">> => [method_json(X) || X <- Ms]};
                 (method, Me, A) -> A#{<<"method">> => method_json(Me)};
                 (headers, H, A) -> A#{<<"headers">> => matchers_json(H)};
                 (query, Q, A) -> A#{<<"query">> => matchers_json(Q)};
                 (priority, P, A) -> A#{<<"priority">> => P};
                 (K, V, A) when K =:= scenario; K =:= 'when'; K =:= then -> A#{bin(K) => bin(V)};
                 (body, B, A) -> A#{<<"body">> => body_matcher_json(B)};
                 (K, _, _) -> error({unsupported, K})
              end, #{}, M).

%% A method atom is its name in capitals, as cbench_spec takes it (`get' is GET).
method_json(M) when is_atom(M) -> string:uppercase(atom_to_binary(M));
method_json(M) -> bin(M).

matchers_json(L) when is_list(L) ->
    maps:from_list([{bin(K), case V of present -> true; _ -> bin(V) end} || {K, V} <- L]);
matchers_json(M) when is_map(M) ->
    matchers_json(maps:to_list(M)).

body_matcher_json(B) ->
    [{K, V}] = maps:to_list(B),
    case K of
        _ when K =:= json; K =:= json_subset ->
            {ok, J} = cbench_json:normalize(V),
            #{bin(K) => J};
        _ -> #{bin(K) => bin(V)}
    end.

response_json(#{responses := _} = R) ->
    maps:fold(fun(responses, Items, A) -> A#{<<"responses">> => [response_json(I) || I <- Items]};
                 ('after', After, A) -> A#{<<"after">> => bin(After)};
                 (times, infinity, A) -> A;
                 (times, T, A) -> A#{<<"times">> => T};
                 (K, _, _) -> error({unsupported, K})
              end, #{}, R);
response_json(R) ->
    maps:fold(fun(status, S, A) -> A#{<<"status">> => S};
                 (headers, H, A) -> A#{<<"headers">> => [[bin(K), bin(V)] || {K, V} <- H]};
                 (body, B, A) -> A#{<<"body">> => body_json(B)};
                 (chunks, none, A) -> A;
                 (chunks, {N, Ms}, A) ->
                      %% Either left out at 0, as from_json/2 reads it back.
                      A1 = case N of 0 -> A; _ -> A#{<<"chunks">> => N} end,
                      case Ms of 0 -> A1; _ -> A1#{<<"interval_ms">> => Ms} end;
                 (times, infinity, A) -> A;
                 (fault, F, A) when is_binary(F) -> A#{<<"fault">> => F};
                 (fault, F, A) ->
                      {ok, Text} = cbench_fault:spec(F),
                      A#{<<"fault">> => Text};
                 (delay, {uniform, Lo, Hi}, A) -> A#{<<"delay">> => #{<<"uniform">> => [Lo, Hi]}};
                 (delay, {lognormal, M, S}, A) -> A#{<<"delay">> => #{<<"lognormal">> => [M, S]}};
                 (proxy, P, A) -> A#{<<"proxy">> => proxy_json(P)};
                 (K, V, A) when K =:= delay_ms; K =:= times; K =:= delay; K =:= delay_seed;
                                K =:= template -> A#{bin(K) => V};
                 (K, _, _) -> error({unsupported, K})
              end, #{}, R).

%% pipeline only above 1, as cbench_spec lists it (0 and 1 are both one request at a time).
proxy_json(P) ->
    maps:fold(fun(K, V, A) when K =:= to; K =:= ca_file; K =:= ca_pem; K =:= server_name;
                                K =:= protocol -> A#{bin(K) => bin(V)};
                 (record_headers, Hs, A) -> A#{<<"record_headers">> => [bin(H) || H <- Hs]};
                 (pipeline, N, A) when is_integer(N), N =< 1 -> A;
                 (K, V, A) -> A#{bin(K) => V}
              end, #{}, P).

body_json({file, F}) -> #{<<"file">> => bin(F)};
body_json({bytes, N}) -> #{<<"bytes">> => N};
body_json(B) ->
    Bin = iolist_to_binary(B),
    case unicode:characters_to_binary(Bin) of
        Bin -> case binary:match(Bin, <<0>>) of
                   nomatch -> Bin;
                   _ -> #{<<"base64">> => base64:encode(Bin)}
               end;
        _ -> #{<<"base64">> => base64:encode(Bin)}
    end.

bin(A) when is_atom(A) -> atom_to_binary(A);
bin(B) -> unicode:characters_to_binary(B).
