%%% @doc The ehttpd engine's recorder (docs/record.md): the exchanges its proxy stubs forward with
%%% `record => true', kept as stubs in the stub file's JSON terms (cbench_json), by the rules of the
%%% C engine's recorder (src/kinds/record.c), so that every engine writes the same recordings.
%%%
%%% A recording's match is the method, the path (exact: a path a pattern would read otherwise, with
%%% `*', `{' or `}', is skipped and counted), the query's parameters (decoded, sorted by name, the
%%% first value of a name kept) and the first value of each `record_headers' name the request has;
%%% its priority is the number of query and header matchers. Its answer is the status, the header
%%% fields as answered (less those the engine writes) and the body: a string when it is UTF-8 that
%%% JSON can carry, else base64, or a file beside the stub file when it is longer than
%%% `record_body_file_bytes'. The first answer of a match is kept, later ones counted as duplicates.
%%%
%%% The state is two ets tables owned by the server process (the recordings by arrival, and their
%%% keys) and an atomics array: any connection process records without a message.
-module(cbench_ehttpd_record).

-export([new/0, delete/1, record/3, recorded/1, save/2, clear/1, counts/1]).

-type recorder() :: #{items := ets:tid(), keys := ets:tid(), cnt := atomics:atomics_ref()}.
-export_type([recorder/0]).

-define(SEQ, 1).
-define(DUPS, 2).
-define(SKIPPED, 3).
-define(MAX_MATCHERS, 16).
%% Fields the engine writes itself: never part of a recording's answer.
-define(FORBIDDEN, [<<"content-length">>, <<"transfer-encoding">>, <<"connection">>, <<"keep-alive">>,
                    <<"upgrade">>, <<"te">>, <<"proxy-connection">>, <<"date">>]).

%% @doc A recorder, owned by the calling process.
-spec new() -> recorder().
new() ->
    #{items => ets:new(cbench_recorded, [ordered_set, public, {write_concurrency, true}]),
      keys => ets:new(cbench_recorded_keys, [set, public, {write_concurrency, true}]),
      cnt => atomics:new(3, [])}.

-spec delete(recorder()) -> ok.
delete(#{items := I, keys := K}) ->
    ets:delete(I),
    ets:delete(K),
    ok.

%% @doc Records one exchange of a proxy stub whose options are Proxy.
-spec record(recorder(), map(), #{method := binary(), target := binary(),
                                   req_headers := [{binary(), binary()}], status := pos_integer(),
                                   res_headers := [{binary(), binary()}], body := binary()}) -> ok.
record(R, Proxy, X = #{status := Status}) ->
    Wanted = case maps:get(record_status, Proxy, []) of
                 [] -> true;
                 List -> lists:member(Status, List)
             end,
    _ = Wanted andalso record_ok(R, Proxy, X),
    ok.

record_ok(#{items := Items, keys := Keys, cnt := Cnt}, Proxy,
          #{method := Method, target := Target, req_headers := ReqHs, status := Status,
            res_headers := ResHs, body := Body}) ->
    {Path, Query} = case binary:split(Target, <<"?">>) of
                        [P] -> {P, <<>>};
                        [P, Q] -> {P, Q}
                    end,
    Params = params(cbench_router:query_fields(Query)),
    Chosen = [{N, V} || N0 <- maps:get(record_headers, Proxy, []),
                        N <- [string:lowercase(iolist_to_binary(N0))],
                        {_, V} <- [lists:keyfind(N, 1, ReqHs)], V =/= false],
    Kept = [{N, V} || {N, V} <- ResHs, not lists:member(string:lowercase(N), ?FORBIDDEN)],
    %% HEAD: skipped, as by the C recorder (a stub answers HEAD with its own body's length; the GET
    %% recording answers it).
    Ok = Method =/= <<"HEAD">> andalso literal_path(Path) andalso Status >= 200 andalso Status =< 599
        andalso length(Params) =< ?MAX_MATCHERS andalso length(Chosen) =< ?MAX_MATCHERS
        %% The query's names too, and their sizes, as the C recorder checks them (record.c): a name
        %% with NUL written to a stub file is one no loader reads back (cbench:recorded/1 neither).
        andalso lists:all(fun({N, V}) -> json_text(N) andalso json_text(V) andalso byte_size(N) =< 256
                                             andalso byte_size(V) =< 8192 end, Params)
        andalso lists:all(fun json_text/1, [V || {_, V} <- Chosen])
        andalso lists:all(fun({N, V}) -> json_text(N) andalso json_text(V) end, Kept)
        andalso not ((Status =:= 204 orelse Status =:= 304) andalso Body =/= <<>>),
    Key = {Method, Path, Params, Chosen},
    if
        not Ok -> atomics:add(Cnt, ?SKIPPED, 1);
        true ->
            case ets:insert_new(Keys, {Key}) of
                false -> atomics:add(Cnt, ?DUPS, 1);
                true ->
                    Seq = atomics:add_get(Cnt, ?SEQ, 1),
                    ets:insert(Items, {Seq, Key, Status, Kept, Body,
                                       maps:get(record_body_file_bytes, Proxy, 0)})
            end
    end.

%% Decoded parameters sorted by name (stable: a name's first value stays first), one per name,
%% nameless ones left out.
params(Fields) ->
    Sorted = lists:keysort(1, [F || F = {N, _} <- Fields, N =/= <<>>]),
    dedup(Sorted).

dedup([{N, V}, {N, _} | Rest]) -> dedup([{N, V} | Rest]);
dedup([F | Rest]) -> [F | dedup(Rest)];
dedup([]) -> [].

literal_path(<<"/", _/binary>> = P) when byte_size(P) =< 8192 ->
    lists:all(fun(C) -> C > 16#20 andalso C < 16#7f andalso not lists:member(C, "?#*{}") end,
              binary_to_list(P));
literal_path(_) -> false.

%% JSON strings carry UTF-8 without NUL (the C recorder's json_text_ok).
json_text(B) ->
    case unicode:characters_to_binary(B, utf8, utf8) of
        B -> binary:match(B, <<0>>) =:= nomatch;
        _ -> false
    end.

%% @doc The recordings as the stub file's text, bodies inline: the bytes the C engine's
%% cb_server_recorded_json writes for the same exchanges (jansson's layout: one stub a line, keys in
%% the order below, `": "' and `", "' between them).
-spec recorded(recorder()) -> binary().
recorded(#{items := Items}) ->
    text([stub(Pos, Rec, inline) || {Pos, Rec} <- numbered(Items)]).

numbered(Items) ->
    lists:zip(lists:seq(1, ets:info(Items, size)), ets:tab2list(Items)).

text(Stubs) ->
    iolist_to_binary([<<"{\"stubs\": [\n">>, lists:join(<<",\n">>, Stubs), <<"\n]}\n">>]).

%% One recording as a stub object's text: name; match method, path, query (by name), headers (in
%% record_headers order), priority (when there are matchers); response status, headers, body.
stub(Pos, {_Seq, {Method, Path, Params, Chosen}, Status, Headers, Body, _FileBytes}, BodyAs) ->
    N = length(Params) + length(Chosen),
    Match = [{<<"method">>, Method}, {<<"path">>, Path}]
        ++ [{<<"query">>, {obj, [{matcher_text(K), matcher_text(V)} || {K, V} <- Params]}} || Params =/= []]
        ++ [{<<"headers">>, {obj, Chosen}} || Chosen =/= []]
        ++ [{<<"priority">>, N} || N > 0],
    BodyField = case {BodyAs, Body} of
                    {{file, F}, _} -> [{<<"body">>, {obj, [{<<"file">>, F}]}}];
                    {inline, <<>>} -> [];
                    {inline, _} ->
                        case json_text(Body) of
                            true -> [{<<"body">>, Body}];
                            false -> [{<<"body">>, {obj, [{<<"base64">>, base64:encode(Body)}]}}]
                        end
                end,
    Response = [{<<"status">>, Status}]
        ++ [{<<"headers">>, [[K, V] || {K, V} <- Headers]} || Headers =/= []]
        ++ BodyField,
    enc({obj, [{<<"name">>, <<"rec_", (integer_to_binary(Pos))/binary>>},
               {<<"match">>, {obj, Match}}, {<<"response">>, {obj, Response}}]}).

%% A decoded query name or value as a matcher: the loader percent-decodes matchers once more, so `%'
%% and `+' go as %25 and %2B (the C recorder's query_text).
matcher_text(B) -> << <<(matcher_byte(C))/binary>> || <<C>> <= B >>.

matcher_byte($%) -> <<"%25">>;
matcher_byte($+) -> <<"%2B">>;
matcher_byte(C) -> <<C>>.

%% JSON as jansson writes it without JSON_COMPACT: objects in the order given.
enc({obj, Fields}) ->
    [${, lists:join(<<", ">>, [[enc(K), <<": ">>, enc(V)] || {K, V} <- Fields]), $}];
enc(L) when is_list(L) -> [$[, lists:join(<<", ">>, [enc(X) || X <- L]), $]];
enc(I) when is_integer(I) -> integer_to_binary(I);
enc(B) when is_binary(B) -> [$", esc(B), $"].

%% jansson's escapes: the quote, the backslash, \b \f \n \r \t, other control bytes as \u00XX
%% (upper case); UTF-8 as it is.
esc(B) -> << <<(esc_byte(C))/binary>> || <<C>> <= B >>.

esc_byte($") -> <<"\\\"">>;
esc_byte($\\) -> <<"\\\\">>;
esc_byte($\b) -> <<"\\b">>;
esc_byte($\f) -> <<"\\f">>;
esc_byte($\n) -> <<"\\n">>;
esc_byte($\r) -> <<"\\r">>;
esc_byte($\t) -> <<"\\t">>;
esc_byte(C) when C < 16#20 -> iolist_to_binary(io_lib:format("\\u~4.16.0B", [C]));
esc_byte(C) -> <<C>>.

%% @doc Writes the recordings to File as a stub file (bodies longer than their proxy's
%% record_body_file_bytes in File.bodies/N.bin), each file through a temporary one renamed over it.
%% `{error, {Path, Why}}' names the file that could not be written.
-spec save(recorder(), file:filename_all()) -> ok | {error, {binary(), file:posix() | badarg}}.
save(#{items := Items}, File0) ->
    File = iolist_to_binary(File0),
    Dir = <<File/binary, ".bodies">>,
    Base = filename:basename(File),
    try
        Stubs = [case Body of
                     _ when FileBytes > 0, byte_size(Body) > FileBytes ->
                         ok = ensure_dir(Dir),
                         Name = <<(integer_to_binary(Pos))/binary, ".bin">>,
                         ok = write_atomic(filename:join(Dir, Name), Body),
                         stub(Pos, Rec, {file, <<Base/binary, ".bodies/", Name/binary>>});
                     _ -> stub(Pos, Rec, inline)
                 end || {Pos, Rec = {_, _, _, _, Body, FileBytes}} <- numbered(Items)],
        write_atomic(File, text(Stubs))
    catch
        error:{badmatch, {error, Failed}} -> {error, Failed}
    end.

ensure_dir(Dir) ->
    case file:make_dir(Dir) of
        ok -> ok;
        {error, eexist} -> ok;
        {error, Why} -> {error, {Dir, Why}}
    end.

write_atomic(Path, Data) ->
    Tmp = <<(iolist_to_binary(Path))/binary, ".tmp">>,
    case file:write_file(Tmp, Data) of
        ok ->
            case file:rename(Tmp, Path) of
                ok -> ok;
                {error, Why} -> {error, {iolist_to_binary(Path), Why}}
            end;
        {error, Why} -> {error, {Tmp, Why}}
    end.

-spec clear(recorder()) -> ok.
clear(#{items := I, keys := K, cnt := Cnt}) ->
    ets:delete_all_objects(I),
    ets:delete_all_objects(K),
    [atomics:put(Cnt, N, 0) || N <- [?SEQ, ?DUPS, ?SKIPPED]],
    ok.

%% @doc Recordings kept, duplicates counted, exchanges skipped.
-spec counts(recorder()) -> #{recorded := non_neg_integer(), recorded_duplicates := non_neg_integer(),
                               record_skipped := non_neg_integer()}.
counts(#{items := I, cnt := Cnt}) ->
    #{recorded => ets:info(I, size), recorded_duplicates => atomics:get(Cnt, ?DUPS),
      record_skipped => atomics:get(Cnt, ?SKIPPED)}.
