%%% @doc The terms of routes and journal filters, checked and normalised into the one canonical form
%%% every engine takes (the ehttpd router reads it, the NIF and the port program decode it into the
%%% C API's structs). Nothing here knows an engine.
%%%
%%% Errors: a Match or Response that is not a map (nor, for Match, a path) is the caller's type error
%%% and raises `badarg' in cbench; anything wrong inside the maps is `{bad_stub, Why}' with Why
%%% naming the field: `{unknown_key, K}', `{missing, path}', `{Key, Value}' for a bad value,
%%% `{file, Path, Posix}' for a body file that cannot be read.
-module(cbench_spec).

-include_lib("kernel/include/file.hrl").

-export([match/1, response/1, stub/2, filter/1, path/1, describe/1, path_text/1,
         methods_order/1, pieces/2, chunks_fit_size/2]).
%% The single terms on their own, for the routes of later kinds and the test suites.
-ignore_xref([{response, 1}, {path, 1}]).

-export_type([match/0, response/0, filter/0, path_pattern/0, canon_match/0, canon_response/0,
              canon_path/0, canon_filter/0, why/0]).

%% What a user writes.
-type method() :: atom() | binary() | string().
-type path_pattern() :: binary() | string().
-type field_matcher() :: [{iodata() | atom(), present | iodata()}]
                       | #{iodata() | atom() => present | iodata()}.
-type match() :: path_pattern()
               | #{path := path_pattern(), method => method() | [method()] | any,
                   headers => field_matcher(), query => field_matcher(),
                   priority => integer(), name => iodata()}.
-type response() :: #{status => 200..599, headers => [{iodata() | atom(), iodata()}],
                      body => iodata() | {bytes, non_neg_integer()} | {file, file:name_all()},
                      delay_ms => non_neg_integer(),
                      chunks => {pos_integer(), non_neg_integer()},
                      times => pos_integer() | infinity,
                      fault => cbench_fault:user_fault()}.
-type filter() :: #{method => method() | [method()], path => path_pattern(),
                    stub => pos_integer(), since => non_neg_integer()}.

%% What the engines take.
-type canon_path() :: {exact, binary()} | {prefix, binary()}
                    | {segments, [binary() | {param, binary()}]}.
-type canon_field() :: {binary(), present | {equal, binary()}}.
-type canon_match() :: #{methods := any | [binary()], path := canon_path(),
                         headers := [canon_field()], query := [canon_field()],
                         priority := integer(), name := binary() | undefined}.
-type canon_response() :: #{status := 200..599, headers := [{binary(), binary()}],
                            body := {data, binary()} | {bytes, non_neg_integer()}
                                  | {file, binary()},
                            delay_ms := non_neg_integer(),
                            chunks := none | {pos_integer(), non_neg_integer()},
                            times := pos_integer() | infinity,
                            %% A fault's spec text (docs/faults.md), when the stub has one.
                            fault => binary(),
                            %% The ehttpd engine's: a body file's size, taken when the stub is added,
                            %% and its fault parsed, with the counter of its rate's draws.
                            file_size => non_neg_integer(),
                            fault_run => cbench_fault:fault(),
                            fault_draws => atomics:atomics_ref()}.
-type canon_filter() :: #{methods := any | [binary()], path := any | canon_path(),
                          stub := any | integer(), since := non_neg_integer()}.
-type why() :: term().

-define(MAX_PRIORITY, 1000000).
-define(MAX_DELAY_MS, 3600000).
-define(MAX_CHUNKS, 1000000).
-define(MAX_BYTES, 1 bsl 40).
%% A body given as bytes is copied into the engine (and over the port): keep it reasonable.
-define(MAX_DATA, 64 * 1024 * 1024).
-define(MAX_MATCHERS, 32).
-define(MAX_HEADERS, 64).
-define(MAX_PATH, 4096).
-define(MAX_PARAMS, 8).
-define(MAX_NAME, 128).
-define(MAX_VALUE, 8192).
%% The methods a route can name (include/cbench.h, CB_METHOD_*), in the order of an allow header.
-define(METHODS, [<<"GET">>, <<"HEAD">>, <<"POST">>, <<"PUT">>, <<"DELETE">>, <<"PATCH">>,
                  <<"OPTIONS">>, <<"CONNECT">>, <<"TRACE">>]).

%% Response headers the engine writes itself (framing, connection management, date): a stub that
%% set them would send a message that contradicts its own framing, or a forbidden h2 field.
-define(RESERVED, [<<"content-length">>, <<"transfer-encoding">>, <<"connection">>,
                   <<"keep-alive">>, <<"proxy-connection">>, <<"upgrade">>, <<"te">>,
                   <<"date">>]).

%% @doc A stub: its match and its response, both normalised.
-spec stub(match(), response()) ->
          {ok, canon_match(), canon_response()} | {error, {bad_stub, why()}}.
stub(Match, Response) ->
    case match(Match) of
        {ok, M} ->
            case response(Response) of
                {ok, R} -> {ok, M, R};
                Error -> Error
            end;
        Error -> Error
    end.

%% @doc A Match term (a map, or a bare path standing for `#{path => Path}') in canonical form.
%% Methods are those of include/cbench.h (GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS, CONNECT,
%% TRACE) or `any'; atoms are uppercased (`get' is `GET'), binaries and strings taken as they are
%% (methods are case-sensitive). Header names are lowercased (they match without case); query
%% names and values are compared with the request's after percent-decoding it (`+' as space).
%% `name' names the route in the journal and the counters (default `stub_<id>').
-spec match(match()) -> {ok, canon_match()} | {error, {bad_stub, why()}}.
match(Path) when is_binary(Path); is_list(Path) ->
    match(#{path => Path});
match(M) when is_map(M) ->
    check(fun() ->
                  known_keys(M, [path, method, headers, query, priority, name]),
                  P = case M of
                          #{path := P0} -> path_or_fail(P0);
                          _ -> fail({missing, path})
                      end,
                  #{methods => methods(maps:get(method, M, any)),
                    path => P,
                    headers => fields(headers, maps:get(headers, M, []), fun lower/1),
                    query => fields(query, maps:get(query, M, []), fun(B) -> B end),
                    priority => priority(maps:get(priority, M, 0)),
                    name => name(maps:get(name, M, undefined))}
          end);
match(_) ->
    error(badarg).

%% @doc A Response term in canonical form; `{file, Path}' must name a readable regular file now
%% (its size is taken when the engine adds the stub).
-spec response(response()) -> {ok, canon_response()} | {error, {bad_stub, why()}}.
response(R) when is_map(R) ->
    check(fun() ->
                  known_keys(R, [status, headers, body, delay_ms, chunks, times, fault]),
                  Status = case maps:get(status, R, 200) of
                               S when is_integer(S), S >= 200, S =< 599 -> S;
                               S -> fail({status, S})
                           end,
                  Body = body(maps:get(body, R, <<>>)),
                  Chunks = chunks(maps:get(chunks, R, none)),
                  chunks_fit(Chunks, body_size(Body)),
                  bodyless(Status, Body, Chunks),
                  Fault = case R of
                              #{fault := UF} ->
                                  case cbench_fault:spec(UF) of
                                      {ok, Text} -> #{fault => Text};
                                      {error, Why} -> fail(Why)
                                  end;
                              _ -> #{}
                          end,
                  Fault#{status => Status,
                         headers => response_headers(maps:get(headers, R, [])),
                         body => Body,
                         delay_ms => int_in(delay_ms, maps:get(delay_ms, R, 0), 0, ?MAX_DELAY_MS),
                         chunks => Chunks,
                         times => times(maps:get(times, R, infinity))}
          end);
response(_) ->
    error(badarg).

%% @doc A journal filter: any of `method' (one or a list, compared exactly: `get' is `GET' only),
%% `path' (a path pattern, as in a Match), `stub' (a stub id), `since' (entries after that
%% sequence number). Errors are `{bad_filter, Why}'.
-spec filter(filter()) -> {ok, canon_filter()} | {error, {bad_filter, why()}}.
filter(F) when is_map(F) ->
    case check(fun() ->
                       known_keys(F, [method, path, stub, since]),
                       #{methods => case maps:get(method, F, any) of
                                        any -> any;
                                        Ms -> methods(Ms)
                                    end,
                         path => case maps:get(path, F, any) of
                                     any -> any;
                                     P -> path_or_fail(P)
                                 end,
                         stub => case maps:get(stub, F, any) of
                                     any -> any;
                                     %% An id that cannot exist (0, -1, 2^64) matches nothing.
                                     Id when is_integer(Id) -> Id;
                                     Id -> fail({stub, Id})
                                 end,
                         since => int_in(since, maps:get(since, F, 0), 0, 1 bsl 62)}
               end) of
        {error, {bad_stub, Why}} -> {error, {bad_filter, Why}};
        Ok -> Ok
    end;
filter(_) ->
    error(badarg).

%% @doc A path pattern: exact (`"/users"'), prefix (`"/files/*"': every path that starts with
%% `/files/'), or segments with named parameters (`"/users/{id}"': `{id}' matches one non-empty
%% segment). A `*' anywhere but after the last `/', a parameter that is not a whole segment, or a
%% byte that cannot appear in a request path (space, control, `?', `#', non-ASCII) is an error.
-spec path(path_pattern()) -> {ok, canon_path()} | {error, why()}.
path(P) ->
    try {ok, path_or_fail(P)}
    catch throw:{bad_stub, Why} -> {error, Why}
    end.

%% @doc A short readable text for a canonical match (`GET /users/{id}'), used in verify/1 problems.
-spec describe(canon_match()) -> binary().
describe(#{methods := Ms, path := P} = M) ->
    Method = case Ms of
                 any -> <<"*">>;
                 _ -> iolist_to_binary(lists:join(<<",">>, Ms))
             end,
    Extra = [[<<" ">>, Kind, <<" ">>, N, case V of present -> <<>>; {equal, E} -> [<<"=">>, E] end]
             || {Kind, Fs} <- [{<<"header">>, maps:get(headers, M, [])},
                               {<<"query">>, maps:get(query, M, [])}],
                {N, V} <- Fs],
    iolist_to_binary([Method, <<" ">>, path_text(P), Extra]).

%% @doc A canonical path as the pattern text the C engine takes (`/files/*', `/users/{id}').
-spec path_text(canon_path()) -> binary().
path_text({exact, P}) -> P;
path_text({prefix, P}) -> <<P/binary, "*">>;
path_text({segments, Segs}) ->
    iolist_to_binary([[<<"/">>, case S of {param, N} -> [<<"{">>, N, <<"}">>]; _ -> S end]
                      || S <- Segs]).

%% @doc The methods of an `allow' header in the engines' order (GET, HEAD, POST, PUT, DELETE,
%% PATCH, OPTIONS, CONNECT, TRACE); GET brings HEAD, as it does when matching.
-spec methods_order([binary()]) -> [binary()].
methods_order(Ms) ->
    All = case lists:member(<<"GET">>, Ms) of
              true -> [<<"HEAD">> | Ms];
              false -> Ms
          end,
    [K || K <- ?METHODS, lists:member(K, All)].

%% @doc How `chunks => {N, _}' splits a body of Size bytes (N =< Size), as every engine sends it:
%% piece k (from 0) ends at Size * (k + 1) div N, given as {Offset, Length}. An empty body has no
%% piece (the head, then the end of the body).
-spec pieces(non_neg_integer(), pos_integer()) -> [{non_neg_integer(), pos_integer()}].
pieces(0, _N) -> [];
pieces(Size, N) ->
    Ends = [Size * K div N || K <- lists:seq(0, N)],
    [{Start, End - Start} || {Start, End} <- lists:zip(lists:droplast(Ends), tl(Ends))].

%%% Internals: every check throws {bad_stub, Why}, caught once in check/1.

check(Fun) ->
    try {ok, Fun()}
    catch throw:{bad_stub, _} = Bad -> {error, Bad}
    end.

fail(Why) -> throw({bad_stub, Why}).

known_keys(M, Known) ->
    case [K || K <- maps:keys(M), not lists:member(K, Known)] of
        [] -> ok;
        [K | _] -> fail({unknown_key, K})
    end.

int_in(_Key, V, Min, Max) when is_integer(V), V >= Min, V =< Max -> V;
int_in(Key, V, _, _) -> fail({Key, V}).

priority(P) -> int_in(priority, P, -?MAX_PRIORITY, ?MAX_PRIORITY).

times(infinity) -> infinity;
times(N) -> int_in(times, N, 1, 1 bsl 62).

methods(any) -> any;
methods([]) -> fail({method, []});
methods(L = [C | _]) when is_integer(C) -> [one_method(L)];  % a string
methods(L) when is_list(L), length(L) =< 16 -> lists:usort([one_method(M) || M <- L]);
methods(M) -> [one_method(M)].

one_method(any) -> any;
one_method(M) when is_atom(M), M =/= undefined ->
    known_method(M, string:uppercase(atom_to_binary(M)));
one_method(M) when is_binary(M) -> known_method(M, M);
one_method(M) when is_list(M) ->
    try list_to_binary(M) of
        B -> known_method(M, B)
    catch error:badarg -> fail({method, M})
    end;
one_method(M) -> fail({method, M}).

known_method(Given, B) ->
    case lists:member(B, ?METHODS) of
        true -> B;
        false -> fail({method, Given})
    end.

name(undefined) -> undefined;
name(N) ->
    case to_bin(N) of
        {ok, B} when byte_size(B) >= 1, byte_size(B) =< ?MAX_NAME ->
            lists:all(fun(C) -> C > 32 andalso C < 127 end, binary_to_list(B))
                orelse fail({name, N}),
            B;
        _ -> fail({name, N})
    end.

token(Key, B) ->
    case B =/= <<>> andalso byte_size(B) =< 256 andalso is_token(B) of
        true -> B;
        false -> fail({Key, B})
    end.

is_token(B) -> lists:all(fun tchar/1, binary_to_list(B)).

tchar(C) when C >= $a, C =< $z; C >= $A, C =< $Z; C >= $0, C =< $9 -> true;
tchar(C) -> lists:member(C, "!#$%&'*+-.^_`|~").

to_bin(V) when is_binary(V) -> {ok, V};
to_bin(V) when is_atom(V) -> {ok, atom_to_binary(V)};
to_bin(V) when is_integer(V) -> {ok, integer_to_binary(V)};
to_bin(V) when is_list(V) ->
    try {ok, iolist_to_binary(V)} catch error:_ -> error end;
to_bin(_) -> error.

%% Header and query matchers: a list of {Name, present | Value} or a map of the same.
fields(Key, M, Norm) when is_map(M) -> fields(Key, lists:sort(maps:to_list(M)), Norm);
fields(Key, L, Norm) when is_list(L), length(L) =< ?MAX_MATCHERS ->
    [field(Key, F, Norm) || F <- L];
fields(Key, V, _) -> fail({Key, V}).

field(Key, {Name, Value} = F, Norm) ->
    N = case to_bin(Name) of
            {ok, B} when Key =:= headers -> Norm(token(Key, B));
            {ok, B} when B =/= <<>>, byte_size(B) =< ?MAX_VALUE -> B;
            _ -> fail({Key, F})
        end,
    case Value of
        present -> {N, present};
        _ ->
            case to_bin(Value) of
                {ok, V} when Key =:= headers -> {N, {equal, header_value(Key, V)}};
                {ok, V} when byte_size(V) =< ?MAX_VALUE -> {N, {equal, V}};
                error -> fail({Key, F})
            end
    end;
field(Key, F, _) -> fail({Key, F}).

%% A field value as HTTP/1.1 and HTTP/2 both accept it: visible bytes, spaces and tabs inside, none
%% at either end (RFC 9113 8.2.1), no CR, LF or NUL.
header_value(Key, V) ->
    Ok = lists:all(fun(C) -> C =:= $\t orelse (C >= 32 andalso C =/= 127) end, binary_to_list(V))
        andalso not edge_space(V) andalso byte_size(V) =< ?MAX_VALUE,
    case Ok of
        true -> V;
        false -> fail({Key, V})
    end.

edge_space(<<>>) -> false;
edge_space(V) ->
    lists:member(binary:first(V), " \t") orelse lists:member(binary:last(V), " \t").

response_headers(L) when is_list(L), length(L) =< ?MAX_HEADERS ->
    [response_header(H) || H <- L];
response_headers(V) -> fail({headers, V}).

response_header({Name, Value} = H) ->
    N = case to_bin(Name) of
            {ok, B} -> lower(token(headers, B));
            error -> fail({headers, H})
        end,
    lists:member(N, ?RESERVED) andalso fail({reserved_header, N}),
    case to_bin(Value) of
        {ok, V} -> {N, header_value(headers, V)};
        error -> fail({headers, H})
    end;
response_header(H) -> fail({headers, H}).

body({bytes, N}) when is_integer(N), N >= 0, N =< ?MAX_BYTES -> {bytes, N};
body({file, Path} = F) ->
    P = try unicode:characters_to_binary(Path) of
            B when is_binary(B), B =/= <<>> -> B;
            _ -> fail({body, F})
        catch error:_ -> fail({body, F})
        end,
    Abs = filename:absname(P),
    case file:read_file_info(Abs) of
        {ok, #file_info{type = regular}} ->
            case file:open(Abs, [read, raw]) of
                {ok, Fd} -> ok = file:close(Fd), {file, Abs};
                {error, E} -> fail({file, P, E})
            end;
        {ok, #file_info{type = directory}} -> fail({file, P, eisdir});
        {ok, _} -> fail({file, P, not_regular});
        {error, E} -> fail({file, P, E})
    end;
body(B) ->
    try iolist_size(B) of
        N when N =< ?MAX_DATA -> {data, iolist_to_binary(B)};
        _ -> fail({body, too_large})
    catch error:badarg -> fail({body, B})
    end.

chunks(none) -> none;
chunks({N, Ms}) when is_integer(N), N >= 1, N =< ?MAX_CHUNKS,
                     is_integer(Ms), Ms >= 0, Ms =< ?MAX_DELAY_MS -> {N, Ms};
chunks(V) -> fail({chunks, V}).

chunks_fit(_Chunks, unknown) -> ok;
chunks_fit(Chunks, Size) -> chunks_fit_size(Chunks, Size) orelse fail({chunks, Chunks}).

%% @doc Whether a body of Size bytes can go in `chunks' pieces: N pieces need N bytes (an empty
%% body goes as one empty piece).
-spec chunks_fit_size(none | {pos_integer(), non_neg_integer()}, non_neg_integer()) -> boolean().
chunks_fit_size(none, _) -> true;
chunks_fit_size({1, _}, 0) -> true;
chunks_fit_size({N, _}, Size) -> N =< Size.

body_size({data, B}) -> byte_size(B);
body_size({bytes, N}) -> N;
body_size({file, Path}) ->
    %% The engine takes the size again when it adds the stub (and checks again).
    case file:read_file_info(Path) of
        {ok, #file_info{size = Size}} -> Size;
        _ -> unknown
    end.

%% 204 and 304 carry no body (RFC 9110), so neither bytes nor pieces of one.
bodyless(Status, Body, Chunks) when Status =:= 204; Status =:= 304 ->
    Body =:= {data, <<>>} orelse fail({body_not_allowed, Status}),
    Chunks =:= none orelse fail({body_not_allowed, Status});
bodyless(_, _, _) -> ok.

path_or_fail(P0) ->
    P = case to_bin(P0) of
            {ok, B} when is_binary(P0); is_list(P0) -> B;
            _ -> fail({path, P0})
        end,
    Ok = byte_size(P) =< ?MAX_PATH andalso binary:first(<<P/binary, 0>>) =:= $/ andalso
        lists:all(fun(C) -> C > 32 andalso C < 127 andalso C =/= $? andalso C =/= $# end,
                  binary_to_list(P)),
    Ok orelse fail({path, P0}),
    Stars = length(binary:matches(P, <<"*">>)),
    Braces = binary:match(P, [<<"{">>, <<"}">>]) =/= nomatch,
    Len = byte_size(P),
    if
        Stars =:= 1, Len >= 2, binary_part(P, Len - 2, 2) =:= <<"/*">>, not Braces ->
            {prefix, binary_part(P, 0, Len - 1)};
        Stars > 0 -> fail({path, P0});
        Braces -> {segments, segments(P, P0)};
        true -> {exact, P}
    end.

segments(P, P0) ->
    [<<>> | Segs] = binary:split(P, <<"/">>, [global]),
    Canon = [segment(S, P0) || S <- Segs],
    length([S || {param, _} = S <- Canon]) =< ?MAX_PARAMS orelse fail({path, P0}),
    Canon.

segment(<<"{", Rest/binary>>, P0) when byte_size(Rest) >= 2 ->
    Name = binary_part(Rest, 0, byte_size(Rest) - 1),
    case binary:last(Rest) =:= $} andalso
        lists:all(fun(C) -> C =:= $_ orelse (C >= $a andalso C =< $z) orelse
                                (C >= $A andalso C =< $Z) orelse (C >= $0 andalso C =< $9) end,
                  binary_to_list(Name)) of
        true -> {param, Name};
        false -> fail({path, P0})
    end;
segment(S, P0) ->
    case binary:match(S, [<<"{">>, <<"}">>]) of
        nomatch -> S;
        _ -> fail({path, P0})
    end.

lower(B) -> cbench_http:lower(B).
