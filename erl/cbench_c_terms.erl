%%% @doc The terms the C engine's glue takes and gives, shared by the nif and port engines: a stub's
%%% canonical match with its path as the pattern text include/cbench.h wants, the journal filter the
%%% engine applies itself, the engine's error names turned into cbench's errors, and a handler's
%%% answer as the engine takes it.
-module(cbench_c_terms).

-export([match/1, filter/1, add_result/4, remove_result/1, scenario_result/1,
         reply_item/2, tls_info/1, start_result/2]).

-export_type([reply_item/0]).

%% A handler's answer to request Ref, as cb_server_reply() takes it (through the NIF, or in the
%% port program's {reply, Items} frame); `unavailable' is the port owner's 503 for a request no
%% process can take.
-type reply_item() :: {Ref :: term(), reply, integer(), [{iodata(), iodata()}], iodata()} |
                      {Ref :: term(), stream, integer(), [{iodata(), iodata()}]} |
                      {Ref :: term(), send, iodata()} |
                      {Ref :: term(), finish} |
                      {Ref :: term(), unavailable}.

%% @doc The engine's answer to a start: the user's certificate and key (checked as PEM files by
%% cbench_opts) that the engine could not load as a pair (a key that is not the certificate's, or
%% a certificate OpenSSL cannot read) are a bad `tls_key_file'.
-spec start_result({ok, term()} | {error, term()}, map()) -> {ok, term()} | {error, term()}.
start_result({error, einval}, #{tls := true, tls_key_file := Key}) when Key =/= undefined ->
    {error, {bad_option, tls_key_file, Key, {tls, rejected}}};
start_result(Result, _Opts) ->
    Result.

%% @doc The engine's answer for its CA (tls_nif, the port's `tls'), as cbench:tls/1 gives it: the
%% PEM and its DER; no_ca (the user's certificate files) gives `undefined' for both.
-spec tls_info({ok, binary()} | {error, term()}) ->
          #{ca_pem := binary() | undefined, ca_der := binary() | undefined} | {error, term()}.
tls_info({ok, Pem}) ->
    [{'Certificate', Der, not_encrypted}] = public_key:pem_decode(Pem),
    #{ca_pem => Pem, ca_der => Der};
tls_info({error, no_ca}) ->
    #{ca_pem => undefined, ca_der => undefined};
tls_info({error, _} = Error) ->
    Error.

%% @doc A canonical match as the C glue decodes it: the path as pattern text, the body matcher as
%% `any' or `{Kind, Bytes}' (a JSON value as its compact text, which jansson parses).
-spec match(cbench_spec:canon_match()) -> map().
match(M = #{path := P}) ->
    Body = case M of
               #{body := {K, J}} when K =:= json; K =:= json_subset -> {K, cbench_json:encode(J)};
               #{body := B} -> B;
               _ -> any
           end,
    M#{path := cbench_spec:path_text(P), body => Body}.

%% @doc What of a canonical filter the engine applies while reading (it returns no more than the
%% filter keeps; cbench_journal:filter/2 then applies the whole filter): since, one method, an
%% exact path, a stub.
-spec filter(cbench_spec:canon_filter()) -> map().
filter(#{since := Since, methods := Ms, path := P, stub := Stub}) ->
    #{since => Since,
      method => case Ms of [M] -> M; _ -> undefined end,
      path => case P of {exact, Exact} -> Exact; _ -> undefined end,
      stub => case Stub of any -> undefined; Id -> Id end}.

%% @doc The result of adding a stub: a body file the engine cannot open, or a field it refuses
%% (which cbench_spec should have caught; the glue names it from cb_error_detail() as
%% `{bad_stub, {Field, Value, Why}}', the term cbench_spec gives), is a bad stub.
-spec add_result({ok, pos_integer()} | {error, atom() | {bad_stub, cbench_spec:bad()}},
                 cbench_spec:canon_response()) ->
          {ok, pos_integer()} | {error, term()}.
add_result({ok, Id}, _Response) -> {ok, Id};
add_result({error, {bad_stub, _}} = Bad, _Response) -> Bad;
add_result({error, elimit}, _Response) -> {error, too_many_routes};
add_result({error, E}, #{body := {file, Path}}) when E =/= stopped, E =/= enomem, E =/= ebusy,
                                                    E =/= einval ->
    {error, {bad_stub, {{response, body}, {file, Path}, E}}};
add_result({error, E}, _Response) -> {error, E}.

%% CB_MAX_ROUTES in include/cbench.h.
-define(MAX_ROUTES, 100000).

%% @doc add_result/2 for a stub of Match: the engine's one limit error (CB_ELIMIT) is the
%% scenarios' limit (CB_MAX_SCENARIOS names or states) for a match that names a scenario while
%% the table is below CB_MAX_ROUTES, as the ehttpd engine says it. Stubs: the stubs the engine has
%% (asked only then).
-spec add_result({ok, pos_integer()} | {error, atom() | {bad_stub, cbench_spec:bad()}},
                 cbench_spec:canon_match(), cbench_spec:canon_response(),
                 fun(() -> [map()] | {error, term()})) ->
          {ok, pos_integer()} | {error, term()}.
add_result(Result, Match, Response, Stubs) ->
    case add_result(Result, Response) of
        {error, too_many_routes} when is_map_key(scenario, Match) ->
            case Stubs() of
                L when is_list(L), length(L) < ?MAX_ROUTES -> {error, too_many_scenarios};
                _ -> {error, too_many_routes}
            end;
        Other -> Other
    end.

%% @doc The result of setting a scenario: the engine's limit is too_many_scenarios.
-spec scenario_result(ok | {error, atom()}) -> ok | {error, term()}.
scenario_result({error, elimit}) -> {error, too_many_scenarios};
scenario_result(Other) -> Other.

%% @doc The result of removing a stub: an id the engine does not know is not_found.
-spec remove_result(ok | {error, atom()}) -> ok | {error, term()}.
remove_result({error, enoent}) -> {error, not_found};
remove_result(Other) -> Other.

%% @doc An answer (cbench_handler's term) to request Ref as a reply item.
-spec reply_item(term(), {reply, integer(), [{iodata(), iodata()}], iodata()} |
                         {stream, integer(), [{iodata(), iodata()}]} | {send, iodata()} | finish) ->
          reply_item().
reply_item(Ref, {reply, S, H, B}) -> {Ref, reply, S, H, B};
reply_item(Ref, {stream, S, H}) -> {Ref, stream, S, H};
reply_item(Ref, {send, D}) -> {Ref, send, D};
reply_item(Ref, finish) -> {Ref, finish}.
