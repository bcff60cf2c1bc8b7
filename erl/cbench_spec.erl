%%% @doc The terms of routes and journal filters, checked and normalised into the one canonical form
%%% every engine takes (the ehttpd router reads it, the NIF and the port program decode it into the
%%% C API's structs). Nothing here knows an engine.
%%%
%%% Errors: a Match or Response that is not a map (nor, for Match, a path) is the caller's type error
%%% and raises `badarg' in cbench; anything wrong inside the maps is `{bad_stub, {Field, Value, Why}}'
%%% (a filter's: `{bad_filter, {Field, Value, Why}}'): Field the key path (`{match, path}',
%%% `{response, headers, <<"x-a">>}', `{filter, since}'), Value the value refused as given (a count
%%% or a size for `too_many' and `too_long' of a list or body), Why one of whys/0, the list that
%%% include/cbench.h's CB_WHY_* names for the C API (a suite checks that they agree). The one
%%% exception: a body file that cannot be opened has its file:posix() error as Why (`enoent',
%%% `eacces', `eisdir'). docs/erlang.md lists them.
-module(cbench_spec).

-include_lib("kernel/include/file.hrl").

-export([match/1, response/1, stub/2, filter/1, path/1, describe/1, path_text/1,
         methods_order/1, pieces/2, chunks_fit_size/2, whys/0, scenario_label/2,
         template_pieces/1, regex_ok/1]).
%% The single terms on their own, for the routes of later kinds and the test suites; whys/0 for
%% the suite that checks it against include/cbench.h.
-ignore_xref([{response, 1}, {path, 1}, {whys, 0}, {regex_ok, 1}]).

-export_type([match/0, response/0, filter/0, path_pattern/0, canon_match/0, canon_response/0,
              canon_path/0, canon_filter/0, canon_single/0, canon_body/0, why/0, field/0, bad/0]).

%% What a user writes.
-type method() :: atom() | binary() | string().
-type path_pattern() :: binary() | string().
-type field_matcher() :: [{iodata() | atom(), present | iodata()}]
                       | #{iodata() | atom() => present | iodata()}.
-type match() :: path_pattern()
               | #{path := path_pattern(), method => method() | [method()] | any,
                   headers => field_matcher(), query => field_matcher(),
                   priority => integer(), name => iodata(),
                   scenario => iodata() | atom(), 'when' => iodata() | atom(),
                   then => iodata() | atom(), body => body_matcher()}.
%% docs/routes.md, "Body matchers": one key. A JSON term: maps (binary or atom keys), lists,
%% binaries (strings), integers, floats, true, false, null (cbench_json).
-type body_matcher() :: #{equal => iodata()} | #{contains => iodata()} | #{regex => iodata()}
                      | #{json => term()} | #{json_subset => term()}.
-type response() :: #{status => 200..599, headers => [{iodata() | atom(), iodata()}],
                      body => iodata() | {bytes, non_neg_integer()} | {file, file:name_all()},
                      delay_ms => non_neg_integer(),
                      chunks => {pos_integer(), non_neg_integer()},
                      times => pos_integer() | infinity,
                      fault => cbench_fault:user_fault(),
                      delay => non_neg_integer() | {uniform, non_neg_integer(), non_neg_integer()}
                             | {lognormal, non_neg_integer(), number()},
                      delay_seed => non_neg_integer(), template => boolean()}
                  | #{proxy := proxy(), delay_ms => non_neg_integer(), delay => non_neg_integer(),
                      times => pos_integer() | infinity, fault => cbench_fault:user_fault()}
                  | #{responses := [response()], 'after' => last | cycle | not_found,
                      times => pos_integer() | infinity}.
%% docs/proxy.md.
-type proxy() :: #{to := iodata(), protocol => http1 | h2c, timeout_ms => pos_integer(),
                   max_body_bytes => pos_integer(), record => boolean(),
                   record_headers => [iodata() | atom()], record_body_file_bytes => non_neg_integer(),
                   record_status => [100..599],
                   %% http:// upstreams over http1 only above 1 (docs/proxy.md "Pipelining").
                   pipeline => 0..64,
                   %% https:// upstreams only (docs/proxy.md "https upstreams").
                   ca_file => iodata(), ca_pem => iodata(), insecure => boolean(),
                   server_name => iodata()}.
-type filter() :: #{method => method() | [method()], path => path_pattern(),
                    stub => pos_integer(), since => non_neg_integer(),
                    proto => cbench:proto() | [cbench:proto()]}.

%% What the engines take.
-type canon_path() :: {exact, binary()} | {prefix, binary()}
                    | {segments, [binary() | {param, binary()}]}.
-type canon_field() :: {binary(), present | {equal, binary()}}.
-type canon_match() :: #{methods := any | [binary()], path := canon_path(),
                         headers := [canon_field()], query := [canon_field()],
                         priority := integer(), name := binary() | undefined,
                         scenario => {binary(), binary() | undefined, binary() | undefined},
                         %% Only when the match has one.
                         body => canon_body()}.
-type canon_body() :: {equal | contains | regex, binary()}
                    | {json | json_subset, cbench_json:json()}.
-type canon_response() :: canon_single() | canon_sequence() | canon_proxy().
%% A proxy (docs/proxy.md): every key of its options there.
-type canon_proxy() :: #{proxy := #{to := binary(), protocol := http1 | h2c, timeout_ms := pos_integer(),
                                    max_body_bytes := pos_integer(), record := boolean(),
                                    record_headers := [binary()],
                                    record_body_file_bytes := non_neg_integer(),
                                    record_status := [100..599], insecure := boolean(),
                                    %% Only when given (an https:// upstream's).
                                    ca_file => binary(), ca_pem => binary(),
                                    server_name => binary(),
                                    %% Only when above 1.
                                    pipeline => 2..64},
                         delay_ms := non_neg_integer(), times := pos_integer() | infinity,
                         fault => binary()}.
%% A sequence: its responses in turn, then as `after' says (docs/erlang.md).
-type canon_sequence() :: #{responses := [canon_single()], 'after' := last | cycle | not_found,
                            times := pos_integer() | infinity,
                            %% The ehttpd engine's: the responses to hand out, and how many were.
                            seq_items => tuple(), seq_n => pos_integer(),
                            seq_next => atomics:atomics_ref()}.
%% A drawn delay: its distribution and seed (delay_ms is then the lower end or the median).
-type drawn_delay() :: {uniform, non_neg_integer(), non_neg_integer(), non_neg_integer()}
                     | {lognormal, non_neg_integer(), float(), non_neg_integer()}.
-type canon_single() :: #{status := 200..599, headers := [{binary(), binary()}],
                            body := {data, binary()} | {bytes, non_neg_integer()}
                                  | {file, binary()},
                            delay_ms := non_neg_integer(),
                            chunks := none | {pos_integer(), non_neg_integer()},
                            times := pos_integer() | infinity,
                            %% A fault's spec text (docs/faults.md), when the stub has one.
                            fault => binary(),
                            delay => drawn_delay(),
                            template => true,
                            %% The ehttpd engine's: a body file's size, taken when the stub is added,
                            %% and its fault parsed, with the counter of its rate's draws.
                            file_size => non_neg_integer(),
                            %% and its descriptor, opened then, and the file's {device, inode}
                            %% (the body's path is then the descriptor's, /proc/self/fd/N).
                            file_fd => file:fd(),
                            file_id => {non_neg_integer(), non_neg_integer()},
                            fault_run => cbench_fault:fault(),
                            fault_draws => atomics:atomics_ref(),
                            %% And a drawn delay's parameters and draws, a template's pieces, the
                            %% stub's path and the count of its answers.
                            delay_run => cbench_fault:fault(),
                            delay_draws => atomics:atomics_ref(),
                            tpl_body => [term()], tpl_headers => [{binary(), [term()]}],
                            tpl_seq => atomics:atomics_ref(), tpl_path => canon_path(),
                            tpl_uses_body => boolean()}.
-type canon_filter() :: #{methods := any | [binary()], path := any | canon_path(),
                          stub := any | integer(), since := non_neg_integer(),
                          protos => [cbench:proto()]}.
-type why() :: atom().
%% The key path of a refused value: the term (match, response, filter), its key, and for a header or
%% query matcher or a response header, its name.
-type field() :: {match | response | filter, atom()} | {match | response, headers | query, binary()}
               | {response, proxy, atom()}.
-type bad() :: {field() | term(), Value :: term(), why()}.

-define(MAX_PRIORITY, 1000000).
-define(MAX_DELAY_MS, 3600000).
-define(MAX_CHUNKS, 1000000).
-define(MAX_BYTES, 1 bsl 40).
%% A body file: a regular file of at most 1 TiB (CB_MAX_BODY_FILE in cbench.h).
-define(MAX_FILE, 1 bsl 40).
%% A body given as bytes is copied into the engine (and over the port): keep it reasonable.
-define(MAX_DATA, 64 * 1024 * 1024).
-define(MAX_MATCHERS, 32).
-define(MAX_HEADERS, 64).
-define(MAX_PATH, 4096).
-define(MAX_PARAMS, 8).
-define(MAX_NAME, 128).
-define(MAX_VALUE, 8192).
%% All of a stub's response header names and values together (src/kinds/stub.c, MAX_HEADER_BYTES).
-define(MAX_HEADER_BYTES, 65536).
%% The methods a route can name (include/cbench.h, CB_METHOD_*), in the order of an allow header.
-define(METHODS, [<<"GET">>, <<"HEAD">>, <<"POST">>, <<"PUT">>, <<"DELETE">>, <<"PATCH">>,
                  <<"OPTIONS">>, <<"CONNECT">>, <<"TRACE">>]).

%% Response headers the engine writes itself (framing, connection management, date): a stub that
%% set them would send a message that contradicts its own framing, or a forbidden h2 field.
-define(RESERVED, [<<"content-length">>, <<"transfer-encoding">>, <<"connection">>,
                   <<"keep-alive">>, <<"proxy-connection">>, <<"upgrade">>, <<"te">>,
                   <<"date">>]).

%% Body matchers (include/cbench.h, CB_MAX_BODY_MATCH and CB_MAX_BODY_REGEX).
-define(MAX_BODY_MATCH, 1048576).
-define(MAX_BODY_REGEX, 1024).

%% The reasons, in the order of include/cbench.h's CB_WHY_* (without CB_WHY_NONE).
-define(WHYS, [unknown_key, missing, wrong_type, null_pointer, out_of_range, empty, too_long, too_many,
               not_a_token, control_char, edge_space, bad_char, no_leading_slash, misplaced_star,
               star_with_param, unclosed_brace, stray_brace, param_not_segment, empty_param_name,
               bad_param_name, too_many_params, unknown_method, forbidden_header, body_not_allowed,
               chunks_exceed_body, bad_fault, not_regular, fault_exceeds_body, needs_scenario,
               min_above_max, conflict, bad_template, bad_regex, bad_json, bad_url, bad_ca]).

%% @doc Every Why of `{bad_stub, {Field, Value, Why}}' but a body file's posix error, in the order
%% of include/cbench.h's CB_WHY_* (`null_pointer' only ever comes from the C API).
-spec whys() -> [why()].
whys() -> ?WHYS.

%% @doc A stub: its match and its response, both normalised.
-spec stub(match(), response()) ->
          {ok, canon_match(), canon_response()} | {error, {bad_stub, bad()}}.
stub(Match, Response) ->
    case match(Match) of
        {ok, M} ->
            case response(Response) of
                {ok, R} ->
                    case check(fun() -> template_params(M, R, Response) end) of
                        {ok, ok} -> {ok, M, R};
                        Error -> Error
                    end;
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
-spec match(match()) -> {ok, canon_match()} | {error, {bad_stub, bad()}}.
match(Path) when is_binary(Path); is_list(Path) ->
    match(#{path => Path});
match(M) when is_map(M) ->
    check(fun() ->
                  known_keys(match, M, [path, method, headers, query, priority, name,
                                        scenario, 'when', then, body]),
                  P = case M of
                          #{path := P0} -> path_or_fail({match, path}, P0);
                          _ -> fail({match, path}, undefined, missing)
                      end,
                  Canon = #{methods => methods({match, method}, maps:get(method, M, any)),
                    path => P,
                    headers => fields(headers, maps:get(headers, M, []), fun lower/1),
                    query => fields(query, maps:get(query, M, []), fun(B) -> B end),
                    priority => int_in({match, priority}, maps:get(priority, M, 0),
                                       -?MAX_PRIORITY, ?MAX_PRIORITY),
                    name => name(maps:get(name, M, undefined))},
                  %% Only when given, so that a match without one is the term it always was.
                  Canon1 = maps:merge(Canon, scenario(M)),
                  case M of
                      #{body := B} -> Canon1#{body => body_matcher(B)};
                      _ -> Canon1
                  end
          end);
match(_) ->
    error(badarg).

%% @doc A Response term in canonical form; `{file, Path}' must name a readable regular file now
%% (its size is taken when the engine adds the stub).
-spec response(response()) -> {ok, canon_response()} | {error, {bad_stub, bad()}}.
response(#{responses := _} = R) ->
    check(fun() -> sequence(R) end);
response(R = #{proxy := _}) ->
    check(fun() -> proxy_single(R) end);
response(R) when is_map(R) ->
    check(fun() -> single(R) end);
response(_) ->
    error(badarg).

%% One response: the only kind before sequences, and each item of a sequence.
single(R) ->
    known_keys(response, R, [status, headers, body, delay_ms, chunks, times, fault,
                             delay, delay_seed, template]),
    Status = int_in({response, status}, maps:get(status, R, 200), 200, 599),
    Body = body(maps:get(body, R, <<>>)),
    Chunks = chunks(maps:get(chunks, R, none)),
    chunks_fit(Chunks, body_size(Body)),
    bodyless(Status, Body, Chunks),
    Fault = case R of
                #{fault := UF} ->
                    case cbench_fault:spec(UF) of
                        {ok, Text} ->
                            fault_fits(Text, UF, body_size(Body)),
                            #{fault => Text};
                        {error, _} -> fail({response, fault}, UF, bad_fault)
                    end;
                _ -> #{}
            end,
    Delay = delay(R),
    Template = template(maps:get(template, R, false), R, Body, Chunks),
    maps:merge(Fault#{status => Status,
                      headers => response_headers(maps:get(headers, R, [])),
                      body => Body,
                      delay_ms => 0,
                      chunks => Chunks,
                      times => times(maps:get(times, R, infinity))},
               maps:merge(Delay, Template)).

%%% Proxy responses (issue 26; docs/proxy.md).

-define(PROXY_KEYS, [to, protocol, timeout_ms, max_body_bytes, record, record_headers,
                     record_body_file_bytes, record_status, ca_file, ca_pem, insecure, server_name, pipeline]).
%% CB_PROXY_MAX_PIPELINE in include/cbench.h.
-define(MAX_PIPELINE, 64).
-define(MAX_SERVER_NAME, 253).
-define(MAX_CA_FILE, 4096).
-define(MAX_PROXY_TO, 1024).
-define(MAX_RECORD_HEADERS, 32).
-define(MAX_RECORD_STATUS, 64).

%% `proxy => #{to => "http://HOST[:PORT][/prefix]", ...}': the request is forwarded (docs/proxy.md).
%% Of a response's other keys only delay_ms (or a fixed `delay'), times and fault go with it; any other
%% is a `conflict', named by its key (`after' first, as the C engines' stub file loader finds it
%% before the engine checks the others). Canonical: `#{proxy => CanonProxy, delay_ms, times}' and
%% `fault' when given, with every key of the proxy map there (its defaults filled in).
proxy_single(R) ->
    [fail({response, K}, maps:get(K, R), conflict)
     || K <- ['after', status, headers, body, chunks, template, delay_seed, responses], maps:is_key(K, R)],
    known_keys(response, R, [proxy, delay_ms, delay, times, fault]),
    Delay = case R of
                #{delay := D} when is_integer(D) -> delay(R);
                #{delay := D} -> fail({response, delay}, D, conflict);
                _ -> delay(R)
            end,
    Fault = case R of
                #{fault := UF} ->
                    case cbench_fault:spec(UF) of
                        {ok, Text} ->
                            case cbench_fault:parse(Text) of
                                {ok, #{kind := K}} when K =:= drip; K =:= dribble ->
                                    fail({response, fault}, UF, conflict);
                                _ -> #{fault => Text}
                            end;
                        {error, _} -> fail({response, fault}, UF, bad_fault)
                    end;
                _ -> #{}
            end,
    maps:merge(Fault#{proxy => proxy(maps:get(proxy, R)),
                      times => times(maps:get(times, R, infinity))}, Delay).

proxy(P) when is_map(P) ->
    [fail({response, proxy, K}, maps:get(K, P), unknown_key)
     || K <- maps:keys(P), not lists:member(K, ?PROXY_KEYS)],
    To = case P of
             #{to := T} -> proxy_to(T);
             _ -> fail({response, proxy, to}, undefined, missing)
         end,
    Protocol = case maps:get(protocol, P, http1) of
                   http1 -> http1;
                   h2c -> h2c;
                   Pr when is_atom(Pr) -> fail({response, proxy, protocol}, Pr, out_of_range);
                   Pr -> fail({response, proxy, protocol}, Pr, wrong_type)
               end,
    Record = case maps:get(record, P, false) of
                 Bool when is_boolean(Bool) -> Bool;
                 Bool -> fail({response, proxy, record}, Bool, wrong_type)
             end,
    Tls = proxy_tls(To, P),
    Opt = maps:merge(Tls, pipeline(To, Protocol, P)),
    Opt#{to => To, protocol => Protocol,
      timeout_ms => int_in({response, proxy, timeout_ms}, maps:get(timeout_ms, P, 10000), 1,
                           ?MAX_DELAY_MS),
      max_body_bytes => int_in({response, proxy, max_body_bytes},
                               maps:get(max_body_bytes, P, 1 bsl 30), 1, 1 bsl 62),
      record => Record,
      record_headers => record_headers(maps:get(record_headers, P, [])),
      record_body_file_bytes => int_in({response, proxy, record_body_file_bytes},
                                       maps:get(record_body_file_bytes, P, 0), 0, 1 bsl 62),
      record_status => record_status(maps:get(record_status, P, []))};
proxy(P) -> fail({response, proxy}, P, wrong_type).

%% `pipeline' (docs/proxy.md "Pipelining"), as src/kinds/proxy.c checks it: 0..64, and above 1 an
%% http:// upstream spoken to over http1 only (h2c multiplexes, an https:// one is not pipelined: each
%% a `conflict'). Canonical only when above 1 (0 and 1 are both one request at a time), so that a
%% stub without it is listed as before.
pipeline(To, Protocol, P) ->
    case int_in({response, proxy, pipeline}, maps:get(pipeline, P, 0), 0, ?MAX_PIPELINE) of
        N when N > 1 ->
            (Protocol =:= h2c orelse https(To)) andalso fail({response, proxy, pipeline}, N, conflict),
            #{pipeline => N};
        _ -> #{}
    end.

https(To) -> lower(binary:part(To, 0, min(8, byte_size(To)))) =:= <<"https://">>.

%% An https:// upstream's options, as src/kinds/proxy.c checks them: with http:// each is a conflict;
%% ca_file and ca_pem not both; a CA that cannot be read or holds no certificate is bad_ca (read now,
%% as the C engines read it when the stub is added). Canonical: insecure always, the others when given.
proxy_tls(To, P) ->
    Https = https(To),
    Insecure = case maps:get(insecure, P, false) of
                   I when is_boolean(I) -> I;
                   I -> fail({response, proxy, insecure}, I, wrong_type)
               end,
    Strs = maps:from_list(
             [{K, case to_bin(V) of
                      {ok, B} when is_atom(V) -> fail({response, proxy, K}, V, wrong_type), B;
                      {ok, B} when is_integer(V) -> fail({response, proxy, K}, V, wrong_type), B;
                      {ok, <<>>} -> fail({response, proxy, K}, V, empty);
                      {ok, B} -> B;
                      error -> fail({response, proxy, K}, V, wrong_type)
                  end}
              || K <- [ca_file, ca_pem, server_name], V <- [maps:get(K, P, undefined)], V =/= undefined]),
    Https orelse
        begin
            [fail({response, proxy, K}, V, conflict) || {K, V} <- lists:sort(maps:to_list(Strs))],
            Insecure andalso fail({response, proxy, insecure}, true, conflict)
        end,
    case Strs of
        #{ca_file := F, ca_pem := _} -> fail({response, proxy, ca_file}, F, conflict);
        _ -> ok
    end,
    case Strs of
        #{ca_file := File} ->
            byte_size(File) =< ?MAX_CA_FILE orelse fail({response, proxy, ca_file}, File, too_long),
            binary:match(File, <<0>>) =:= nomatch orelse fail({response, proxy, ca_file}, File, bad_char),
            case file:read_file(File) of
                {ok, Text} -> pem_certs(Text) > 0 orelse fail({response, proxy, ca_file}, File, bad_ca);
                {error, _} -> fail({response, proxy, ca_file}, File, bad_ca)
            end;
        _ -> ok
    end,
    case Strs of
        #{ca_pem := Pem} -> pem_certs(Pem) > 0 orelse fail({response, proxy, ca_pem}, Pem, bad_ca);
        _ -> ok
    end,
    case Strs of
        #{server_name := N} ->
            byte_size(N) =< ?MAX_SERVER_NAME orelse fail({response, proxy, server_name}, N, too_long),
            lists:all(fun(C) -> (C >= $a andalso C =< $z) orelse (C >= $A andalso C =< $Z)
                                    orelse (C >= $0 andalso C =< $9) orelse C =:= $. orelse C =:= $-
                                    orelse C =:= $: end, binary_to_list(N))
                orelse fail({response, proxy, server_name}, N, bad_char);
        _ -> ok
    end,
    Strs#{insecure => Insecure}.

%% The certificates a PEM text holds (0 for text that is not PEM, or whose base64 does not decode).
pem_certs(Text) ->
    try length([E || E = {'Certificate', _, not_encrypted} <- public_key:pem_decode(Text)])
    catch _:_ -> 0
    end.

%% http://HOST[:PORT][/prefix], as src/kinds/proxy.c reads it (the same reasons in the same order),
%% the host resolved now.
proxy_to(T) ->
    F = {response, proxy, to},
    B = case (is_binary(T) orelse is_list(T)) andalso to_bin(T) of
            {ok, B0} -> B0;
            _ -> fail(F, T, wrong_type)
        end,
    byte_size(B) > 0 orelse fail(F, T, empty),
    byte_size(B) =< ?MAX_PROXY_TO orelse fail(F, T, too_long),
    lists:all(fun(C) -> C > 32 andalso C < 127 andalso C =/= $? andalso C =/= $# end, binary_to_list(B))
        orelse fail(F, T, bad_char),
    Rest = case B of
               <<Scheme:8/binary, R1/binary>> when R1 =/= <<>> ->
                   case lower(Scheme) of
                       <<"https://">> -> R1;
                       <<"http://", _>> -> binary:part(B, 7, byte_size(B) - 7);
                       _ -> fail(F, T, bad_url)
                   end;
               <<Scheme:7/binary, R0/binary>> when R0 =/= <<>> ->
                   lower(Scheme) =:= <<"http://">> orelse fail(F, T, bad_url),
                   R0;
               _ -> fail(F, T, bad_url)
           end,
    Authority = hd(binary:split(Rest, <<"/">>)),
    {Host, Port} = case Authority of
                       <<"[", V6/binary>> ->
                           case binary:split(V6, <<"]">>) of
                               [H6, <<>>] -> {H6, <<>>};
                               [H6, <<":", P6/binary>>] -> {H6, P6};
                               _ -> fail(F, T, bad_url)
                           end;
                       _ ->
                           case binary:split(Authority, <<":">>) of
                               [H4] -> {H4, <<>>};
                               [H4, P4] -> {H4, P4}
                           end
                   end,
    (Host =/= <<>> andalso byte_size(Host) < 256) orelse fail(F, T, bad_url),
    case Port of
        <<>> -> ok;
        _ ->
            (byte_size(Port) =< 5 andalso lists:all(fun(C) -> C >= $0 andalso C =< $9 end,
                                                    binary_to_list(Port))
             andalso binary_to_integer(Port) >= 1 andalso binary_to_integer(Port) =< 65535)
                orelse fail(F, T, bad_url)
    end,
    Name = binary_to_list(Host),
    case {inet:getaddr(Name, inet), inet:getaddr(Name, inet6)} of
        {{error, _}, {error, _}} -> fail(F, T, bad_url);
        _ -> B
    end.

record_headers(L) when is_list(L) ->
    case list_length(L) of
        error -> fail({response, proxy, record_headers}, L, wrong_type);
        N when N > ?MAX_RECORD_HEADERS -> fail({response, proxy, record_headers}, N, too_many);
        _ -> [case to_bin(H) of
                  {ok, B} -> lower(token({response, proxy, record_headers}, B));
                  error -> fail({response, proxy, record_headers}, H, wrong_type)
              end || H <- L]
    end;
record_headers(V) -> fail({response, proxy, record_headers}, V, wrong_type).

record_status(L) when is_list(L) ->
    case list_length(L) of
        error -> fail({response, proxy, record_status}, L, wrong_type);
        N when N > ?MAX_RECORD_STATUS -> fail({response, proxy, record_status}, N, too_many);
        _ -> [int_in({response, proxy, record_status}, S, 100, 599) || S <- L]
    end;
record_status(V) -> fail({response, proxy, record_status}, V, wrong_type).

%%% Sequences, scenarios and drawn delays (issue 25; docs/erlang.md).

-define(MAX_RESPONSES, 1000).
-define(MAX_SIGMA, 10).

%% A sequence: `responses' (1 to 1000 responses, each as a single one but without `times'), `after'
%% (last, cycle or not_found; default last) and `times' (the answers in all). An item's refused
%% field is named as a single response's (`{response, status}').
sequence(R) ->
    known_keys(response, R, [responses, 'after', times]),
    Items = maps:get(responses, R),
    case is_list(Items) andalso list_length(Items) of
        false -> fail({response, responses}, Items, wrong_type);
        error -> fail({response, responses}, Items, wrong_type);
        0 -> fail({response, responses}, Items, empty);
        N when N > ?MAX_RESPONSES -> fail({response, responses}, N, too_many);
        _ -> ok
    end,
    Canon = [item(I) || I <- Items],
    After = case maps:get('after', R, last) of
                A when A =:= last; A =:= cycle; A =:= not_found -> A;
                A when is_atom(A) -> fail({response, 'after'}, A, out_of_range);
                A -> fail({response, 'after'}, A, wrong_type)
            end,
    #{responses => Canon, 'after' => After, times => times(maps:get(times, R, infinity))}.

item(I) when is_map(I) ->
    maps:is_key(times, I) andalso fail({response, times}, maps:get(times, I), unknown_key),
    maps:is_key(proxy, I) andalso fail({response, proxy}, maps:get(proxy, I), conflict),
    maps:is_key(responses, I) andalso
        fail({response, responses}, maps:get(responses, I), unknown_key),
    single(I);
item(I) -> fail({response, responses}, I, wrong_type).

%% `delay => Ms | {uniform, Min, Max} | {lognormal, MedianMs, Sigma}' and `delay_seed', or the
%% older `delay_ms => Ms' (not both): a fixed delay in delay_ms; a drawn one also as
%% `delay => {uniform, Min, Max, Seed} | {lognormal, Median, Sigma, Seed}'.
delay(R = #{delay := D}) ->
    maps:is_key(delay_ms, R) andalso fail({response, delay_ms}, maps:get(delay_ms, R), conflict),
    Seed = int_in({response, delay_seed}, maps:get(delay_seed, R, 0), 0, 1 bsl 64 - 1),
    case D of
        Ms when is_integer(Ms) -> #{delay_ms => int_in({response, delay}, Ms, 0, ?MAX_DELAY_MS)};
        {uniform, Min, Max} when is_integer(Min), is_integer(Max) ->
            (Min >= 0 andalso Max =< ?MAX_DELAY_MS) orelse fail({response, delay}, D, out_of_range),
            Min =< Max orelse fail({response, delay}, D, min_above_max),
            #{delay_ms => Min, delay => {uniform, Min, Max, Seed}};
        {lognormal, Median, Sigma} when is_integer(Median), is_number(Sigma) ->
            (Median >= 0 andalso Median =< ?MAX_DELAY_MS andalso Sigma > 0 andalso
             Sigma =< ?MAX_SIGMA) orelse fail({response, delay}, D, out_of_range),
            #{delay_ms => Median, delay => {lognormal, Median, float(Sigma), Seed}};
        _ -> fail({response, delay}, D, wrong_type)
    end;
delay(R) ->
    _ = int_in({response, delay_seed}, maps:get(delay_seed, R, 0), 0, 1 bsl 64 - 1),
    #{delay_ms => int_in({response, delay_ms}, maps:get(delay_ms, R, 0), 0, ?MAX_DELAY_MS)}.

%% `template => true': the body and the header values are templates (docs/erlang.md): checked here
%% as src/kinds/template.c compiles them; sent whole from bytes, so not with chunks, a fault, or a body
%% of generated bytes or a file. Canonical: `template => true', only when given true.
template(false, _R, _Body, _Chunks) -> #{};
template(true, R, Body, Chunks) ->
    (Chunks =:= none andalso not maps:is_key(fault, R) andalso element(1, Body) =:= data)
        orelse fail({response, template}, true, conflict),
    {data, B} = Body,
    template_ok(B) orelse fail({response, body}, maps:get(body, R), bad_template),
    [template_ok(V) orelse fail({response, headers, N}, V, bad_template)
     || {N, V} <- response_headers(maps:get(headers, R, []))],
    #{template => true};
template(V, _R, _Body, _Chunks) -> fail({response, template}, V, wrong_type).

%% @doc A template's pieces (src/kinds/template.c): literal binaries and placeholders, or error for an
%% unknown or unclosed one. `{path, Name}' is checked against the stub's path by the engine.
-spec template_pieces(binary()) -> {ok, [binary() | method | body | seq | {path | query | header,
                                                                        binary()}]} | error.
template_pieces(B) ->
    try {ok, tpl_pieces(B, <<>>, [])}
    catch throw:bad_template -> error
    end.

tpl_pieces(<<"{{", Rest/binary>>, Lit, Acc) ->
    {Name, After} = placeholder(Rest, <<>>),
    Acc1 = case Lit of <<>> -> Acc; _ -> [Lit | Acc] end,
    tpl_pieces(After, <<>>, [piece(Name) | Acc1]);
tpl_pieces(<<C, Rest/binary>>, Lit, Acc) -> tpl_pieces(Rest, <<Lit/binary, C>>, Acc);
tpl_pieces(<<>>, <<>>, Acc) -> lists:reverse(Acc);
tpl_pieces(<<>>, Lit, Acc) -> lists:reverse([Lit | Acc]).

placeholder(<<"}}", Rest/binary>>, Name) -> {Name, Rest};
placeholder(<<C, Rest/binary>>, Name) when C >= $a, C =< $z; C >= $A, C =< $Z; C >= $0, C =< $9;
                                           C =:= $_; C =:= $-; C =:= $. ->
    placeholder(Rest, <<Name/binary, C>>);
placeholder(_, _) -> throw(bad_template).

piece(<<"method">>) -> method;
piece(<<"body">>) -> body;
piece(<<"seq">>) -> seq;
piece(<<"path.", N/binary>>) when N =/= <<>> -> {path, N};
piece(<<"query.", N/binary>>) when N =/= <<>> -> {query, N};
piece(<<"header.", N/binary>>) when N =/= <<>> -> {header, lower(N)};
piece(_) -> throw(bad_template).

template_ok(B) -> template_pieces(B) =/= error.

%% A template's {{path.NAME}} must name a parameter of the stub's path (the one check of a template
%% that needs the match).
template_params(#{path := P}, #{responses := Rs}, #{responses := URs}) ->
    _ = [template_params(#{path => P}, R, U) || {R, U} <- lists:zip(Rs, URs)],
    ok;
template_params(#{path := P}, R = #{template := true, body := {data, B}}, U) ->
    Params = case P of
                 {segments, Segs} -> [N || {param, N} <- Segs];
                 _ -> []
             end,
    Known = fun(T) ->
                    {ok, Ps} = template_pieces(T),
                    lists:all(fun({path, N}) -> lists:member(N, Params); (_) -> true end, Ps)
            end,
    Known(B) orelse fail({response, body}, maps:get(body, U), bad_template),
    [Known(V) orelse fail({response, headers, N}, V, bad_template)
     || {N, V} <- maps:get(headers, R)],
    ok;
template_params(_, _, _) -> ok.

%% `scenario => Name, 'when' => State, then => State': the stub matches while the scenario is in
%% State (any state without `when') and its answer moves it to `then'. Canonical:
%% `scenario => {Name, When | undefined, Then | undefined}', only when given.
scenario(M = #{scenario := Name}) ->
    #{scenario => {label({match, scenario}, Name),
                   case M of #{'when' := W} -> label({match, 'when'}, W); _ -> undefined end,
                   case M of #{then := T} -> label({match, then}, T); _ -> undefined end}};
scenario(#{'when' := W}) -> fail({match, 'when'}, W, needs_scenario);
scenario(#{then := T}) -> fail({match, then}, T, needs_scenario);
scenario(_) -> #{}.

%% A scenario's name or state: as a route's name (1 to 128 printable ASCII bytes, no space).
label(Field, V) ->
    B = case V of
            _ when is_atom(V), V =/= undefined -> atom_to_binary(V);
            _ when is_binary(V); is_list(V) ->
                case to_bin(V) of
                    {ok, B0} -> B0;
                    error -> fail(Field, V, wrong_type)
                end;
            _ -> fail(Field, V, wrong_type)
        end,
    byte_size(B) >= 1 orelse fail(Field, V, empty),
    byte_size(B) =< ?MAX_NAME orelse fail(Field, V, too_long),
    lists:all(fun(C) -> C > 32 andalso C < 127 end, binary_to_list(B)) orelse fail(Field, V, bad_char),
    B.

%% @doc A scenario's name or state as the engines take it (scenario/2,3 in cbench).
-spec scenario_label(scenario | state, term()) -> {ok, binary()} | {error, {bad_scenario, bad()}}.
scenario_label(Which, V) ->
    try {ok, label({scenario, Which}, V)}
    catch throw:{bad_stub, Bad} -> {error, {bad_scenario, Bad}}
    end.

%% @doc A journal filter: any of `method' (one or a list, compared exactly: `get' is `GET' only),
%% `path' (a path pattern, as in a Match), `stub' (a stub id), `since' (entries after that
%% sequence number), `proto' (one of cbench:proto() or a list: `h1_tls', `h2_tls' for TLS; the
%% canonical filter has `protos' only when it was given).
%% Errors are `{bad_filter, Why}'.
-spec filter(filter()) -> {ok, canon_filter()} | {error, {bad_filter, bad()}}.
filter(F) when is_map(F) ->
    case check(fun() ->
                       known_keys(filter, F, [method, path, stub, since, proto]),
                       Canon = #{methods => case maps:get(method, F, any) of
                                                any -> any;
                                                Ms -> methods({filter, method}, Ms)
                                            end,
                                 path => case maps:get(path, F, any) of
                                             any -> any;
                                             P -> path_or_fail({filter, path}, P)
                                         end,
                                 stub => case maps:get(stub, F, any) of
                                             any -> any;
                                             %% An id that cannot exist (0, -1, 2^64) matches nothing.
                                             Id when is_integer(Id) -> Id;
                                             Id -> fail({filter, stub}, Id, wrong_type)
                                         end,
                                 since => int_in({filter, since}, maps:get(since, F, 0), 0, 1 bsl 62)},
                       case F of
                           #{proto := Given} -> Canon#{protos => protos(Given, Given)};
                           #{} -> Canon
                       end
               end) of
        {error, {bad_stub, Why}} -> {error, {bad_filter, Why}};
        Ok -> Ok
    end;
filter(_) ->
    error(badarg).

%% A filter's protocols: one, or a non-empty list, of cbench:proto().
%% Given is the value as the caller wrote it, for the refusal.
protos(P, Given) when is_atom(P) ->
    protos([P], Given);
protos(Ps, Given) when is_list(Ps), Ps =/= [] ->
    Known = [http1, h2c_prior, h2c_upgrade, h1_tls, h2_tls],
    list_length(Ps) =:= error andalso fail({filter, proto}, Given, wrong_type),
    case lists:all(fun(P) -> lists:member(P, Known) end, Ps) of
        true -> lists:usort(Ps);
        false -> fail({filter, proto}, Given, unknown_proto)
    end;
protos(_, Given) ->
    fail({filter, proto}, Given, wrong_type).

%% @doc A path pattern: exact (`"/users"'), prefix (`"/files/*"': every path that starts with
%% `/files/'), or segments with named parameters (`"/users/{id}"': `{id}' matches one non-empty
%% segment). A `*' anywhere but after the last `/', a parameter that is not a whole segment, or a
%% byte that cannot appear in a request path (space, control, `?', `#', non-ASCII) is an error:
%% `{error, {{match, path}, P, Why}}'.
-spec path(path_pattern()) -> {ok, canon_path()} | {error, bad()}.
path(P) ->
    try {ok, path_or_fail({match, path}, P)}
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

%% @doc Whether a regular expression stays inside the subset that POSIX ERE (the C engine's
%% regcomp) and PCRE (`re', with dotall and dollar_endonly) read alike (docs/routes.md, "Body
%% matchers"): src/routes/body_match.c's cb__regex_subset_ok, step for step.
-spec regex_ok(binary()) -> boolean().
regex_ok(Re) -> rx(Re, 0, false).

-define(RX_ESCAPABLE, "\\.[](){}*+?|^$-/").

rx(<<>>, Depth, _) -> Depth =:= 0;
rx(<<0, _/binary>>, _, _) -> false;
rx(<<$\\, C, R/binary>>, D, _) ->
    lists:member(C, ?RX_ESCAPABLE) andalso rx(R, D, true);
rx(<<$\\>>, _, _) -> false;
rx(<<$[, R0/binary>>, D, _) ->
    R1 = case R0 of <<$^, X/binary>> -> X; _ -> R0 end,
    R2 = case R1 of <<$], X2/binary>> -> X2; _ -> R1 end,
    case bracket(R2) of
        {ok, R3} -> rx(R3, D, true);
        error -> false
    end;
rx(<<$(, C, _/binary>>, _, _) when C =:= $?; C =:= $*; C =:= $+ -> false;
rx(<<$(, R/binary>>, D, _) -> rx(R, D + 1, false);
rx(<<$), _/binary>>, 0, _) -> false;
rx(<<$), R/binary>>, D, _) -> rx(R, D - 1, true);
rx(<<C, R/binary>>, D, _) when C =:= $|; C =:= $^; C =:= $$ -> rx(R, D, false);
rx(<<C, R/binary>>, D, true) when C =:= $*; C =:= $+; C =:= $? -> rx(R, D, false);
rx(<<C, _/binary>>, _, false) when C =:= $*; C =:= $+; C =:= $?; C =:= ${ -> false;
rx(<<${, R/binary>>, D, true) ->
    case interval(R) of
        {ok, R1} -> rx(R1, D, false);
        error -> false
    end;
rx(<<C, _/binary>>, _, _) when C =:= $}; C =:= $] -> false;
rx(<<_, R/binary>>, D, _) -> rx(R, D, true).

%% The rest of a bracket expression after its opening (and a leading ^ and ]): up to its `]'.
bracket(<<>>) -> error;
bracket(<<$], R/binary>>) -> {ok, R};
bracket(<<C, _/binary>>) when C =:= $\\; C =:= 0 -> error;
bracket(<<$[, C, _/binary>>) when C =:= $.; C =:= $= -> error;
bracket(<<$[, $:, R/binary>>) ->
    case binary:match(R, <<":]">>) of
        nomatch -> error;
        {Pos, 2} ->
            Class = binary_part(R, 0, Pos),
            case lists:member(Class, [<<"alpha">>, <<"digit">>, <<"alnum">>, <<"upper">>,
                                      <<"lower">>, <<"space">>, <<"punct">>, <<"print">>,
                                      <<"graph">>, <<"cntrl">>, <<"xdigit">>, <<"blank">>]) of
                true -> bracket(binary_part(R, Pos + 2, byte_size(R) - Pos - 2));
                false -> error
            end
    end;
bracket(<<_, R/binary>>) -> bracket(R).

%% {m}, {m,}, {m,n} after the `{': m <= n <= 255, at most 4 digits each.
interval(R) ->
    case rx_digits(R, 0, 0) of
        {0, _, _} -> error;
        {_, M, _} when M > 255 -> error;
        {_, M, <<$,, R1/binary>>} ->
            case rx_digits(R1, 0, 0) of
                {0, _, <<$}, R2/binary>>} -> {ok, R2};
                {_, N, <<$}, R2/binary>>} when N =< 255, N >= M -> {ok, R2};
                _ -> error
            end;
        {_, _, <<$}, R1/binary>>} -> {ok, R1};
        _ -> error
    end.

rx_digits(<<C, R/binary>>, Nd, V) when C >= $0, C =< $9, Nd < 4 -> rx_digits(R, Nd + 1, V * 10 + C - $0);
rx_digits(R, Nd, V) -> {Nd, V, R}.

%% match.body: one of equal, contains, regex (iodata), json, json_subset (a JSON term).
body_matcher(B) when is_map(B), map_size(B) =:= 1 ->
    [{Kind, V}] = maps:to_list(B),
    Field = {match, body},
    case Kind of
        _ when Kind =:= equal; Kind =:= contains; Kind =:= regex ->
            Bin = case iodata_bin(V) of
                      {ok, X} -> X;
                      error -> fail(Field, V, wrong_type)
                  end,
            Max = case Kind of regex -> ?MAX_BODY_REGEX; _ -> ?MAX_BODY_MATCH end,
            byte_size(Bin) =< Max orelse fail(Field, V, too_long),
            Kind =/= regex orelse regex_compiles(Bin) orelse fail(Field, V, bad_regex),
            {Kind, Bin};
        _ when Kind =:= json; Kind =:= json_subset ->
            case cbench_json:normalize(V) of
                {ok, J} ->
                    byte_size(cbench_json:encode(J)) =< ?MAX_BODY_MATCH
                        orelse fail(Field, V, too_long),
                    {Kind, J};
                error -> fail(Field, V, bad_json)
            end;
        _ -> fail({match, body}, B, unknown_key)
    end;
body_matcher(B) -> fail({match, body}, B, wrong_type).

-define(REGEX_PROG, 16384).

regex_compiles(Re) ->
    regex_ok(Re) andalso rx_size(Re) =< ?REGEX_PROG
        andalso element(1, re:compile(Re, [dotall, dollar_endonly])) =:= ok.

%% What the C engine's matcher (src/routes/body_match.c, re_size) makes of a pattern regex_ok/1
%% took: its instructions, counted repetitions written out, plus the final match. Over
%% ?REGEX_PROG the C engines refuse it (bad_regex), and so do the others: the same patterns
%% everywhere.
rx_size(Re) ->
    {Size, <<>>} = rx_alt(Re),
    Size + 1.

rx_alt(R0) ->
    {S, R} = rx_cat(R0, 0),
    case R of
        <<$|, R1/binary>> -> {S2, R2} = rx_alt(R1), {S + S2 + 2, R2};
        _ -> {S, R}
    end.

rx_cat(<<>>, S) -> {S, <<>>};
rx_cat(R = <<C, _/binary>>, S) when C =:= $|; C =:= $) -> {S, R};
rx_cat(R0, S) ->
    {T, R1} = rx_atom(R0),
    {P, R2} = rx_quant(R1, T),
    rx_cat(R2, S + P).

rx_atom(<<$(, R0/binary>>) -> {S, <<$), R/binary>>} = rx_alt(R0), {S, R};
rx_atom(<<$[, R0/binary>>) ->
    R1 = case R0 of <<$^, X/binary>> -> X; _ -> R0 end,
    R2 = case R1 of <<$], X2/binary>> -> X2; _ -> R1 end,
    {ok, R} = bracket(R2),
    {1, R};
rx_atom(<<$\\, _, R/binary>>) -> {1, R};
rx_atom(<<_, R/binary>>) -> {1, R}.

rx_quant(<<$*, R/binary>>, T) -> {T + 2, R};
rx_quant(<<$+, R/binary>>, T) -> {T + 1, R};
rx_quant(<<$?, R/binary>>, T) -> {T + 1, R};
rx_quant(<<${, R0/binary>>, T) ->
    {_, M, R1} = rx_digits(R0, 0, 0),
    case R1 of
        <<$}, R/binary>> -> {M * T, R};
        <<$,, $}, R/binary>> when M > 0 -> {M * T + 1, R};
        <<$,, $}, R/binary>> -> {T + 2, R};
        <<$,, R2/binary>> -> {_, N, <<$}, R/binary>>} = rx_digits(R2, 0, 0), {M * T + (N - M) * (T + 1), R}
    end;
rx_quant(R, T) -> {T, R}.

%% An iodata() value as a binary, or error.
iodata_bin(V) ->
    try {ok, iolist_to_binary(V)} catch error:badarg -> error end.

%%% Internals: every check throws {bad_stub, {Field, Value, Why}}, caught once in check/1.

check(Fun) ->
    try {ok, Fun()}
    catch throw:{bad_stub, _} = Bad -> {error, Bad}
    end.

fail(Field, Value, Why) -> throw({bad_stub, {Field, Value, Why}}).

known_keys(Term, M, Known) ->
    case [K || K <- maps:keys(M), not lists:member(K, Known)] of
        [] -> ok;
        [K | _] -> fail({Term, K}, maps:get(K, M), unknown_key)
    end.

int_in(_Field, V, Min, Max) when is_integer(V), V >= Min, V =< Max -> V;
int_in(Field, V, _, _) when is_integer(V) -> fail(Field, V, out_of_range);
int_in(Field, V, _, _) -> fail(Field, V, wrong_type).

times(infinity) -> infinity;
times(N) -> int_in({response, times}, N, 1, 1 bsl 62).

%% The length of a proper list, or error.
list_length(L) ->
    try length(L) catch error:badarg -> error end.

methods(_Field, any) -> any;
methods(Field, []) -> fail(Field, [], empty);
methods(Field, L = [C | _]) when is_integer(C) -> [one_method(Field, L)];  % a string
methods(Field, L) when is_list(L) ->
    case list_length(L) of
        error -> fail(Field, L, wrong_type);
        N when N > 16 -> fail(Field, N, too_many);
        _ -> lists:usort([one_method(Field, M) || M <- L])
    end;
methods(Field, M) -> [one_method(Field, M)].

one_method(_Field, any) -> any;
one_method(Field, M) when is_atom(M), M =/= undefined ->
    known_method(Field, M, string:uppercase(atom_to_binary(M)));
one_method(Field, M) when is_binary(M) -> known_method(Field, M, M);
one_method(Field, M) when is_list(M) ->
    try list_to_binary(M) of
        B -> known_method(Field, M, B)
    catch error:badarg -> fail(Field, M, wrong_type)
    end;
one_method(Field, M) -> fail(Field, M, wrong_type).

known_method(Field, Given, B) ->
    case lists:member(B, ?METHODS) of
        true -> B;
        false -> fail(Field, Given, unknown_method)
    end.

name(undefined) -> undefined;
name(N) ->
    B = case to_bin(N) of
            {ok, B0} -> B0;
            error -> fail({match, name}, N, wrong_type)
        end,
    byte_size(B) >= 1 orelse fail({match, name}, N, empty),
    byte_size(B) =< ?MAX_NAME orelse fail({match, name}, N, too_long),
    lists:all(fun(C) -> C > 32 andalso C < 127 end, binary_to_list(B))
        orelse fail({match, name}, N, bad_char),
    B.

%% A header name, as the C engine checks it (cb__header_name_why): the same reason first.
token(Field, B) ->
    if
        B =:= <<>> -> fail(Field, B, empty);
        byte_size(B) > 256 -> fail(Field, B, too_long);
        true -> is_token(B) orelse fail(Field, B, not_a_token), B
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
fields(Key, L, Norm) when is_list(L) ->
    case list_length(L) of
        error -> fail({match, Key}, L, wrong_type);
        N when N > ?MAX_MATCHERS -> fail({match, Key}, N, too_many);
        _ -> [field(Key, F, Norm) || F <- L]
    end;
fields(Key, V, _) -> fail({match, Key}, V, wrong_type).

field(Key, {Name, Value}, Norm) ->
    N = case to_bin(Name) of
            {ok, B} when Key =:= headers -> Norm(token({match, headers, B}, B));
            {ok, <<>>} -> fail({match, query, <<>>}, <<>>, empty);
            {ok, B} when byte_size(B) > 256 -> fail({match, query, B}, B, too_long);
            {ok, B} -> B;
            error -> fail({match, Key}, Name, wrong_type)
        end,
    case Value of
        present -> {N, present};
        _ ->
            case to_bin(Value) of
                {ok, V} when Key =:= headers -> {N, {equal, header_value({match, Key, N}, V)}};
                {ok, V} when byte_size(V) =< ?MAX_VALUE -> {N, {equal, V}};
                {ok, V} -> fail({match, Key, N}, V, too_long);
                error -> fail({match, Key, N}, Value, wrong_type)
            end
    end;
field(Key, F, _) -> fail({match, Key}, F, wrong_type).

%% A field value as HTTP/1.1 and HTTP/2 both accept it (cb__header_value_why, in the same order): at
%% most 8192 bytes, visible bytes, spaces and tabs inside, none at either end (RFC 9113 8.2.1), no
%% CR, LF or NUL.
header_value(Field, V) ->
    byte_size(V) =< ?MAX_VALUE orelse fail(Field, V, too_long),
    lists:all(fun(C) -> C =:= $\t orelse (C >= 32 andalso C =/= 127) end, binary_to_list(V))
        orelse fail(Field, V, control_char),
    edge_space(V) andalso fail(Field, V, edge_space),
    V.

edge_space(<<>>) -> false;
edge_space(V) ->
    lists:member(binary:first(V), " \t") orelse lists:member(binary:last(V), " \t").

response_headers(L) when is_list(L) ->
    Hs = case list_length(L) of
             error -> fail({response, headers}, L, wrong_type);
             N when N > ?MAX_HEADERS -> fail({response, headers}, N, too_many);
             _ -> [response_header(H) || H <- L]
         end,
    Total = lists:sum([byte_size(N) + byte_size(V) || {N, V} <- Hs]),
    Total =< ?MAX_HEADER_BYTES orelse fail({response, headers}, Total, too_long),
    Hs;
response_headers(V) -> fail({response, headers}, V, wrong_type).

response_header({Name, Value}) ->
    N = case to_bin(Name) of
            {ok, B} -> lower(token({response, headers, B}, B));
            error -> fail({response, headers}, Name, wrong_type)
        end,
    lists:member(N, ?RESERVED) andalso fail({response, headers, N}, N, forbidden_header),
    case to_bin(Value) of
        {ok, V} -> {N, header_value({response, headers, N}, V)};
        error -> fail({response, headers, N}, Value, wrong_type)
    end;
response_header(H) -> fail({response, headers}, H, wrong_type).

body({bytes, N}) when is_integer(N), N >= 0, N =< ?MAX_BYTES -> {bytes, N};
body({bytes, N} = B) when is_integer(N) -> fail({response, body}, B, out_of_range);
body({file, Path} = F) ->
    P = try unicode:characters_to_binary(Path) of
            <<>> -> fail({response, body}, F, empty);
            B when is_binary(B) -> B;
            _ -> fail({response, body}, F, wrong_type)
        catch error:_ -> fail({response, body}, F, wrong_type)
        end,
    Abs = filename:absname(P),
    case file:read_file_info(Abs) of
        {ok, #file_info{type = regular, size = Size}} when Size > ?MAX_FILE ->
            fail({response, body}, {file, P}, efbig);
        {ok, #file_info{type = regular}} ->
            case file:open(Abs, [read, raw]) of
                {ok, Fd} -> ok = file:close(Fd), {file, Abs};
                {error, E} -> fail({response, body}, {file, P}, E)
            end;
        {ok, #file_info{type = directory}} -> fail({response, body}, {file, P}, eisdir);
        {ok, _} -> fail({response, body}, {file, P}, not_regular);
        {error, E} -> fail({response, body}, {file, P}, E)
    end;
body(B) ->
    try iolist_size(B) of
        N when N =< ?MAX_DATA -> {data, iolist_to_binary(B)};
        N -> fail({response, body}, N, too_long)
    catch error:badarg -> fail({response, body}, B, wrong_type)
    end.

chunks(none) -> none;
chunks({N, Ms}) when is_integer(N), N >= 1, N =< ?MAX_CHUNKS,
                     is_integer(Ms), Ms >= 0, Ms =< ?MAX_DELAY_MS -> {N, Ms};
chunks({N, Ms} = C) when is_integer(N), is_integer(Ms) -> fail({response, chunks}, C, out_of_range);
chunks(V) -> fail({response, chunks}, V, wrong_type).

%% A fault that paces a body paces the stub's own (docs/faults.md): it must fit it.
fault_fits(_Text, _UF, unknown) -> ok;
fault_fits(Text, UF, Size) ->
    {ok, F} = cbench_fault:parse(Text),
    cbench_fault:fit(F, Size) =/= error orelse fail({response, fault}, UF, fault_exceeds_body).

chunks_fit(_Chunks, unknown) -> ok;
chunks_fit(Chunks, Size) ->
    chunks_fit_size(Chunks, Size) orelse fail({response, chunks}, Chunks, chunks_exceed_body).

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
    Body =:= {data, <<>>} andalso Chunks =:= none
        orelse fail({response, status}, Status, body_not_allowed);
bodyless(_, _, _) -> ok.

%% A path pattern, checked in the order of route.c's path_why (so that every engine names the same
%% first fault): the bytes, then the star, then each segment from the left.
path_or_fail(Field, P0) ->
    P = case to_bin(P0) of
            {ok, B} when is_binary(P0); is_list(P0) -> B;
            _ -> fail(Field, P0, wrong_type)
        end,
    Why = if
              P =:= <<>> -> empty;
              binary_part(P, 0, 1) =/= <<"/">> -> no_leading_slash;
              byte_size(P) > ?MAX_PATH -> too_long;
              true ->
                  Ok = lists:all(fun(C) -> C > 32 andalso C < 127 andalso C =/= $? andalso C =/= $# end,
                                 binary_to_list(P)),
                  case Ok of
                      true -> ok;
                      false -> bad_char
                  end
          end,
    Why =:= ok orelse fail(Field, P0, Why),
    Len = byte_size(P),
    Braces = binary:match(P, [<<"{">>, <<"}">>]) =/= nomatch,
    case binary:match(P, <<"*">>) of
        {Star, 1} when Star =:= Len - 1, Len >= 2 ->
            binary:at(P, Len - 2) =:= $/ orelse fail(Field, P0, misplaced_star),
            Braces andalso fail(Field, P0, star_with_param),
            {prefix, binary_part(P, 0, Len - 1)};
        {_, 1} -> fail(Field, P0, misplaced_star);
        nomatch when Braces -> {segments, segments(Field, P, P0)};
        nomatch -> {exact, P}
    end.

segments(Field, P, P0) ->
    [<<>> | Segs] = binary:split(P, <<"/">>, [global]),
    {Canon, _} = lists:mapfoldl(fun(S, N) -> segment(Field, S, P0, N) end, 0, Segs),
    Canon.

segment(Field, S, P0, N) ->
    Open = binary:match(S, <<"{">>) =/= nomatch,
    Close = binary:match(S, <<"}">>) =/= nomatch,
    if
        not Open, not Close -> {S, N};
        not Close -> fail(Field, P0, unclosed_brace);
        not Open -> fail(Field, P0, stray_brace);
        true ->
            Len = byte_size(S),
            binary:first(S) =:= ${ andalso binary:last(S) =:= $}
                orelse fail(Field, P0, param_not_segment),
            Len > 2 orelse fail(Field, P0, empty_param_name),
            Name = binary_part(S, 1, Len - 2),
            lists:all(fun(C) -> C =:= $_ orelse (C >= $a andalso C =< $z) orelse
                                    (C >= $A andalso C =< $Z) orelse (C >= $0 andalso C =< $9) end,
                      binary_to_list(Name))
                orelse fail(Field, P0, bad_param_name),
            N < ?MAX_PARAMS orelse fail(Field, P0, too_many_params),
            {{param, Name}, N + 1}
    end.

lower(B) -> cbench_http:lower(B).
