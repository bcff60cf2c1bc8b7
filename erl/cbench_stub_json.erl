%%% @doc Stub files as Erlang terms and back (docs/record.md, docs/routes.md "The stub file").
%%%
%%% from_json/2 turns a decoded stub file (cbench_json:decode/1 of `{"stubs": [...]}' or a list of
%%% stubs) into `#{name, match, response}' maps that cbench:stub/3 takes as they are (the name is in
%%% the match too, so stub/3 keeps it); to_json/1 is the inverse, writing the stub file's text.
%%% The fields read and written are the recorder's and those a hand-written file most often holds:
%%% name; match method, path, headers, query, priority; response status, headers, body (a string,
%%% `{"base64": ...}', `{"file": ...}' relative to the file's folder, `{"bytes": N}',
%%% `{"json": ...}'), delay_ms, times, proxy (its ca_file relative to the file's folder), and
%%% after (which cbench_spec refuses as the C loader does: beside a proxy a conflict, else
%%% unknown_key, sequences not being read here). Any other field is `{error, {unsupported, Field}}'
%%% (the C engines' loader, cb_server_stubs_file, reads every field).
-module(cbench_stub_json).

-export([from_json/2, to_json/1]).
%% to_json/1: for the ehttpd engine's save_stubs/2 (later) and for users writing stub files.
-ignore_xref([{to_json, 1}]).

-export_type([stub/0]).

-type stub() :: #{name := binary(), match := map(), response := map()}.

%% @doc The stubs of a decoded stub file, in file order; Dir: the folder relative body files are
%% taken from. `{error, {bad_stub_json, Where, Why}}' for a term that is not a stub file's: Why is the
%% reason the C engines' loader gives for the same field (wrong_type, missing, empty, out_of_range,
%% unknown_key, bad_char; docs/routes.md), and Where its place, so that ehttpd's load_stubs/2 and
%% theirs refuse a file alike.
-spec from_json(cbench_json:json(), file:filename_all()) -> {ok, [stub()]} | {error, term()}.
from_json(#{<<"stubs">> := Stubs} = File, Dir) ->
    %% The file's object holds the list and nothing else (a misspelt second list would add nothing).
    case maps:keys(File) -- [<<"stubs">>] of
        [] -> from_json(Stubs, Dir);
        [K | _] -> {error, {bad_stub_json, K, unknown_key}}
    end;
from_json(Stubs, Dir) when is_list(Stubs) ->
    try
        {ok, [stub(S, I, Dir) || {I, S} <- lists:zip(lists:seq(0, length(Stubs) - 1), Stubs)]}
    catch throw:{bad, Where, Why} -> {error, {bad_stub_json, Where, Why}}
    end;
from_json(_, _) ->
    {error, {bad_stub_json, stubs, wrong_type}}.

stub(S, I, Dir) when is_map(S) ->
    only(S, [<<"name">>, <<"match">>, <<"response">>], {I}),
    Name = case S of
               #{<<"name">> := N} when is_binary(N) -> N;
               #{<<"name">> := _} -> throw({bad, {I, name}, wrong_type});
               _ -> undefined
           end,
    M = case S of
            #{<<"match">> := M1} when is_map(M1) -> M1;
            #{<<"match">> := _} -> throw({bad, {I, match}, wrong_type});
            _ -> throw({bad, {I, match}, missing})
        end,
    Match0 = match(M, I),
    Match = case Name of undefined -> Match0; _ -> Match0#{name => Name} end,
    Res = response(maps:get(<<"response">>, S, #{}), I, Dir),
    #{name => case Name of undefined -> <<>>; _ -> Name end, match => Match, response => Res};
%% The C engines' loader's places and reasons (src/stub_json.c): a stub that is not an object, a
%% match that is not one, a match that is not there.
stub(S, I, _) when not is_map(S) ->
    throw({bad, {I}, wrong_type});
stub(#{<<"match">> := _}, I, _) ->
    throw({bad, {I, match}, wrong_type});
stub(_, I, _) ->
    throw({bad, {I}, wrong_type}).

%% A key outside Keys: {unsupported, Key} at Where's place plus the key.
only(Map, Keys, Where) ->
    case maps:keys(Map) -- Keys of
        [] -> ok;
        [K | _] -> throw({bad, erlang:append_element(Where, K), {unsupported, K}})
    end.

%% An integer field within the C loader's bounds: out_of_range outside them, wrong_type when not an
%% integer.
int(V, Min, Max, _) when is_integer(V), V >= Min, V =< Max -> V;
int(V, _, _, Where) when is_integer(V) -> throw({bad, Where, out_of_range});
int(_, _, _, Where) -> throw({bad, Where, wrong_type}).

match(M, I) ->
    only(M, [<<"method">>, <<"path">>, <<"headers">>, <<"query">>, <<"priority">>], {I, match}),
    Path = case M of
               #{<<"path">> := P} when is_binary(P) -> P;
               #{<<"path">> := _} -> throw({bad, {I, match, path}, wrong_type});
               _ -> throw({bad, {I, match, path}, missing})
           end,
    lists:foldl(
      fun({<<"method">>, Me}, Acc) -> Acc#{method => method(Me, {I, match, method})};
         ({<<"headers">>, H}, Acc) when is_map(H) -> Acc#{headers => matchers(H, {I, match, headers})};
         ({<<"query">>, Q}, Acc) when is_map(Q) -> Acc#{query => matchers(Q, {I, match, query})};
         ({<<"priority">>, P}, Acc) ->
              Acc#{priority => int(P, -1000000, 1000000, {I, match, <<"priority">>})};
         ({<<"path">>, _}, Acc) -> Acc;
         ({K, _}, _) -> throw({bad, {I, match, K}, wrong_type})
      end, #{path => Path}, lists:sort(maps:to_list(M))).

%% "any", a method, or a non-empty list of methods, refused with the C loader's place and reason
%% (an item by its index) rather than cbench_spec's, which names the whole field.
method(<<"any">>, _) -> any;
method(M, Where) when is_binary(M) -> known_method(M, Where);
method([], Where) -> throw({bad, Where, empty});
method(Ms, Where) when is_list(Ms) ->
    lists:usort([case M of
                     _ when is_binary(M) -> known_method(M, erlang:append_element(Where, I));
                     _ -> throw({bad, erlang:append_element(Where, I), wrong_type})
                 end || {I, M} <- lists:zip(lists:seq(0, length(Ms) - 1), Ms)]);
method(_, Where) -> throw({bad, Where, wrong_type}).

%% A method a route can name: cbench_spec orders the known ones and drops the others.
known_method(M, Where) ->
    case lists:member(M, cbench_spec:methods_order([M])) of
        true -> M;
        false -> throw({bad, Where, unknown_method})
    end.

%% A matcher of another type is named by its key, as the C loader names it.
matchers(Map, Where) ->
    [{K, case V of
             true -> present;
             B when is_binary(B) -> B;
             _ -> throw({bad, erlang:append_element(Where, K), wrong_type})
         end} || {K, V} <- lists:sort(maps:to_list(Map))].

response(R, I, Dir) when is_map(R) ->
    only(R, [<<"status">>, <<"headers">>, <<"body">>, <<"delay_ms">>, <<"times">>, <<"proxy">>,
             <<"after">>], {I, response}),
    %% A proxy has no status of its own (cbench_spec refuses one beside it as a conflict).
    Init = case R of
               #{<<"proxy">> := _} -> #{};
               _ -> #{status => 200}
           end,
    maps:fold(
      fun(<<"status">>, S, Acc) -> Acc#{status => int(S, 200, 599, {I, response, <<"status">>})};
         (<<"headers">>, H, Acc) when is_map(H) ->
              Acc#{headers => [case V of
                                   _ when is_binary(V) -> {K, V};
                                   _ -> throw({bad, {I, response, headers, K}, wrong_type})
                               end || {K, V} <- lists:sort(maps:to_list(H))]};
         (<<"headers">>, H, Acc) when is_list(H) ->
              Acc#{headers => [case P of
                                   [K, V] when is_binary(K), is_binary(V) -> {K, V};
                                   _ -> throw({bad, {I, response, headers, N}, wrong_type})
                               end || {N, P} <- lists:zip(lists:seq(0, length(H) - 1), H)]};
         (<<"body">>, B, Acc) -> Acc#{body => body(B, I, Dir)};
         (<<"delay_ms">>, D, Acc) -> Acc#{delay_ms => int(D, 0, 3600000, {I, response, <<"delay_ms">>})};
         (<<"times">>, T, Acc) ->
              case int(T, 0, 16#7fffffffffffffff, {I, response, <<"times">>}) of
                  0 -> Acc;
                  N -> Acc#{times => N}
              end;
         (<<"proxy">>, P, Acc) -> Acc#{proxy => proxy(P, I, Dir)};
         (<<"after">>, A, Acc) -> Acc#{'after' => after_value(A)};
         (K, _, _) -> throw({bad, {I, response, K}, wrong_type})
      end, Init, R);
response(_, I, _) ->
    throw({bad, {I, response}, wrong_type}).

%% A proxy's options with cbench_spec's keys (docs/proxy.md), which checks their values as
%% src/kinds/proxy.c does; a protocol is read as the C loader reads it, and a relative ca_file is the
%% stub file's folder's, as a body file.
-define(PROXY_KEYS, [to, protocol, timeout_ms, max_body_bytes, record, record_headers,
                     record_body_file_bytes, record_status, ca_file, ca_pem, insecure, server_name]).

proxy(P, I, Dir) when is_map(P) ->
    Names = maps:from_list([{atom_to_binary(K), K} || K <- ?PROXY_KEYS]),
    maps:fold(
      fun(K, V, Acc) ->
              Key = case Names of
                        #{K := A} -> A;
                        _ -> throw({bad, {I, response, proxy, K}, unknown_key})
                    end,
              Acc#{Key => proxy_value(Key, V, I, Dir)}
      end, #{}, P);
proxy(_, I, _) -> throw({bad, {I, response, proxy}, wrong_type}).

proxy_value(protocol, <<"http1">>, _, _) -> http1;
proxy_value(protocol, <<"h2c">>, _, _) -> h2c;
proxy_value(protocol, V, I, _) when is_binary(V) -> throw({bad, {I, response, proxy, protocol}, out_of_range});
proxy_value(protocol, _, I, _) -> throw({bad, {I, response, proxy, protocol}, wrong_type});
proxy_value(ca_file, F, _, Dir) when is_binary(F), F =/= <<>> -> filename:join(Dir, F);
proxy_value(_, V, _, _) -> V.

%% A sequence's after, as its atom when it is one of the three; cbench_spec refuses it either way
%% here (no responses beside it), naming it.
after_value(<<"last">>) -> last;
after_value(<<"cycle">>) -> cycle;
after_value(<<"not_found">>) -> not_found;
after_value(A) -> A.

%% A string, or an object of exactly one of base64, file, bytes, json (as the C loader reads it).
body(B, _, _) when is_binary(B) -> B;
body(B, I, Dir) when is_map(B), map_size(B) =:= 1 ->
    [{K, V}] = maps:to_list(B),
    body(K, V, I, Dir);
body(_, I, _) -> throw({bad, {I, response, body}, wrong_type}).

body(<<"base64">>, B64, I, _) when is_binary(B64) ->
    %% RFC 4648 without white space, padded to a multiple of 4: base64:decode/1 would also skip
    %% white space, which the C loader refuses (\\z: $ would let a final newline through).
    case re:run(B64, "^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?\\z", [{capture, none}]) of
        match -> base64:decode(B64);
        nomatch -> throw({bad, {I, response, body, base64}, bad_char})
    end;
body(<<"file">>, <<>>, I, _) -> throw({bad, {I, response, body, file}, empty});
body(<<"file">>, F, _, Dir) when is_binary(F) -> {file, filename:join(Dir, F)};
body(<<"bytes">>, N, _, _) when is_integer(N), N >= 0 -> {bytes, N};
body(<<"bytes">>, N, I, _) when is_integer(N) -> throw({bad, {I, response, body, bytes}, out_of_range});
body(<<"json">>, J, _, _) -> cbench_json:encode(J);
body(K, _, I, _) when K =:= <<"base64">>; K =:= <<"file">>; K =:= <<"bytes">> ->
    throw({bad, {I, response, body, binary_to_atom(K)}, wrong_type});
body(_, _, I, _) -> throw({bad, {I, response, body}, unknown_key}).

%% @doc The stub file's text for stubs (as from_json/2 gives them, or as stub/3 takes them with a
%% map match): `{"stubs": [...]}', one stub a line. A body is a string when it is UTF-8 without
%% NUL, else `{"base64": ...}'; `{file, F}' is written as given; `{bytes, N}' as `{"bytes": N}'.
-spec to_json([stub() | #{match := map(), response := map()}]) -> binary().
to_json(Stubs) when is_list(Stubs) ->
    Lines = [cbench_json:encode(stub_json(S)) || S <- Stubs],
    iolist_to_binary(["{\"stubs\": [\n", lists:join(",\n", Lines), "\n]}\n"]).

stub_json(S = #{match := M, response := R}) ->
    Name = case S of
               #{name := N} when N =/= <<>> -> #{<<"name">> => bin(N)};
               _ -> #{}
           end,
    Name#{<<"match">> => match_json(maps:remove(name, M)), <<"response">> => response_json(R)}.

match_json(M) ->
    maps:fold(fun(path, P, A) -> A#{<<"path">> => bin(P)};
                 (method, any, A) -> A#{<<"method">> => <<"any">>};
                 (method, Ms, A) when is_list(Ms), Ms =/= [], not is_integer(hd(Ms)) ->
                      A#{<<"method">> => [bin(X) || X <- Ms]};
                 (method, Me, A) -> A#{<<"method">> => bin(Me)};
                 (headers, H, A) -> A#{<<"headers">> => matchers_json(H)};
                 (query, Q, A) -> A#{<<"query">> => matchers_json(Q)};
                 (priority, P, A) -> A#{<<"priority">> => P};
                 (K, _, _) -> error({unsupported, K})
              end, #{}, M).

matchers_json(L) when is_list(L) ->
    maps:from_list([{bin(K), case V of present -> true; _ -> bin(V) end} || {K, V} <- L]);
matchers_json(M) when is_map(M) ->
    matchers_json(maps:to_list(M)).

response_json(R) ->
    maps:fold(fun(status, S, A) -> A#{<<"status">> => S};
                 (headers, H, A) -> A#{<<"headers">> => [[bin(K), bin(V)] || {K, V} <- H]};
                 (body, B, A) -> A#{<<"body">> => body_json(B)};
                 (delay_ms, D, A) -> A#{<<"delay_ms">> => D};
                 (times, infinity, A) -> A;
                 (times, T, A) -> A#{<<"times">> => T};
                 (K, _, _) -> error({unsupported, K})
              end, #{}, R).

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
