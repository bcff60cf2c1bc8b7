%%% @doc One connection of the ehttpd engine: a process on its acceptor's scheduler that owns its
%%% socket (so that `file:sendfile/5' works), reads heads with `{packet, http_bin}', bodies with
%%% `{packet, raw}' (exact lengths, so a pipelined request is never swallowed) and chunk-size lines
%%% with `{packet, line}', routes each request through the server's published table
%%% (cbench_router) and answers with a fixture handler or a stub, in request order.
%%%
%%% When the journal is on, each request is recorded just before the last write of its response,
%%% so that a client that has read a response finds it in the journal. The part of the request
%%% body the journal keeps, and the connection's number and peer, live in the process dictionary:
%%% the body is read deep in the handlers, and threading it through every one of them would double
%%% their arguments.
-module(cbench_ehttpd_conn).

-export([conn/3, conn_tls/4, own_size/1]).

-include_lib("kernel/include/file.hrl").
-include("cbench_ehttpd.hrl").

%% The request being served.
-record(req, {method :: binary(), target :: binary(), version :: {integer(), integer()},
              %% Names lowercased, values as received (trailing whitespace dropped), in order.
              headers = [] :: [{binary(), binary()}], keep = true :: boolean(),
              %% {buffered, Body}: read already, for a body matcher (request/3).
              framing = none :: none | chunked | {length, non_neg_integer()} | {buffered, binary()},
              expect = false :: boolean(),
              %% For the journal: arrival (system time and monotonic, microseconds), the route's
              %% name and the stub that answered.
              arrival = 0 :: integer(), t0 = 0 :: integer(),
              %% Its sequence number, given at dispatch (0: not yet; cbench_ehttpd_journal).
              seq = 0 :: non_neg_integer(),
              route = not_found :: atom() | binary(), stub :: pos_integer() | undefined,
              %% The fault applied to the answer (docs/faults.md), for the journal.
              fault :: cbench_fault:kind() | undefined,
              %% The delay a stub waited before its answer (its delay_ms or the drawn one).
              delay_ms = 0 :: non_neg_integer(),
              %% The request body, kept for a template that inserts it ({{body}}).
              body = <<>> :: binary(),
              %% The answer has begun (a streamed echo): a later error closes without a status.
              started = false :: boolean(),
              %% A proxy stub's exchange with its upstream, for the journal (docs/proxy.md).
              upstream :: map() | undefined}).

-define(EHTTPD_ANSWER, <<"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\nhello world!">>).
-define(LINGER_MS, 1000).
%% The C engine writes generated content in runs of at most this many bytes (CB__GEN_SPAN), so a
%% chunked piece of it is that many chunks.
-define(GEN_SPAN, 1048576).
%% A templated header value is cut at this many bytes (src/kinds/stub.c, TPL_MAX_VALUE).
-define(TPL_MAX_VALUE, 8192).

%% Process dictionary keys (see the module doc). ?HELD: the bytes this connection holds of the
%% server's echo budget (echo_hold/2), given back when it ends whatever way it ends.
-define(BODY, cbench_body).
-define(HELD, cbench_echo_held).
%% A TLS connection's last byte counters (tls_octets/1).
-define(TLS_OCTETS, cbench_tls_octets).
%% The echo budgets, in body limits (src/internal.h, CB__ECHO_CONN_BODIES and CB__ECHO_SERVER_BODIES).
-define(ECHO_CONN_BODIES, 2).
-define(ECHO_SERVER_BODIES, 32).

bump(#cfg{cnt = Cnt}, I) -> counters:add(Cnt, I, 1).

%% @private
-spec conn(pid(), #cfg{}, gen_tcp:socket()) -> ok.
conn(_Acceptor, Cfg, S) ->
    receive {go, S} -> ok end,
    serve(Cfg, S).

%% @private A connection of a TLS listener: the handshake first, bounded by the header timeout, in
%% this process (so that a client that stalls it holds no acceptor); Slot is its acceptor's count
%% of pending handshakes, given back when the handshake ends either way.
-spec conn_tls(pid(), #cfg{}, ssl:sslsocket(), pos_integer()) -> ok.
conn_tls(_Acceptor, Cfg = #cfg{tls = Tls}, T, Slot) ->
    receive {go, T} -> ok end,
    cbench_ehttpd_sock:tls_transport(T),
    Timeout = Tls#tls.handshake_timeout,
    Deadline = erlang:monotonic_time(millisecond) + Timeout,
    Result = case ssl:handshake(T, Timeout) of
                 {ok, Hello, Ext} -> hello(Cfg, Hello, maps:get(sni, Ext, undefined), Deadline);
                 Other -> Other
             end,
    atomics:sub(Tls#tls.pending, Slot, 1),
    case Result of
        {fault, _} ->
            %% A handshake fault ended it (docs/faults.md, "TLS faults"): no request, no fault count.
            bump(Cfg, ?TLS_FAILED),
            bump(Cfg, ?CONNS_CLOSED),
            ok;
        {ok, S} ->
            counters:add(Tls#tls.cnt, 1, 1),
            Info = tls_info(S, Tls, Cfg#cfg.journal =/= undefined),
            bump(Cfg, case Info of #{resumed := true} -> ?TLS_RESUMED; _ -> ?TLS_FULL end),
            put(cbench_tls, Info),
            serve(Cfg, S);
        {error, _} ->
            bump(Cfg, ?TLS_FAILED),
            _ = ssl:close(T),
            bump(Cfg, ?CONNS_CLOSED),
            ok
    end.

%% The handshake after the ClientHello: a handshake fault when the client asked for one of their
%% names (docs/faults.md, "TLS faults"), else the handshake goes on within the header timeout.
%% tls-stall: nothing is answered; the header timeout closes (FIN). tls-reset: an RST. alpn-none:
%% the fatal no_application_protocol alert, written as the plaintext record it is before a
%% ServerHello, whatever the client offered, then the FIN. tls-slow: the server's first flight held
%% ?TLS_SLOW_MS, then sent whole (OTP ssl writes the flight at once: the C engine paces it in ten
%% pieces over the same time), and the handshake goes on.
-define(TLS_SLOW_MS, 900).
hello(Cfg, Hello, Sni, Deadline) ->
    Left = fun() -> max(0, Deadline - erlang:monotonic_time(millisecond)) end,
    case Sni of
        "tls-stall.localhost" ->
            %% The header timeout closes it, unless the client closes first (the session's
            %% process then closes the TCP socket: no timeout to count).
            case cbench_ehttpd_sock:raw_wait_closed(Left()) of
                closed -> ok;
                timeout ->
                    bump(Cfg, ?TIMEOUTS),
                    cbench_ehttpd_sock:raw_close(fin)
            end,
            {fault, stall};
        "tls-reset.localhost" ->
            cbench_ehttpd_sock:raw_close(rst),
            {fault, reset};
        "alpn-none.localhost" ->
            cbench_ehttpd_sock:raw_send(<<21, 3, 3, 0, 2, 2, 120>>),
            cbench_ehttpd_sock:raw_close(fin),
            {fault, alpn_none};
        "tls-slow.localhost" ->
            receive after min(?TLS_SLOW_MS, Left()) -> ok end,
            ssl:handshake_continue(Hello, [], Left());
        _ ->
            ssl:handshake_continue(Hello, [], Left())
    end.

%% What the journal records of a TLS connection (docs/tls.md): version, cipher (OpenSSL's name, as
%% the C engine gives it), SNI, ALPN, whether the session was resumed, the client certificate.
%% Without the journal only `resumed' is worked out (the counters need it).
tls_info(S, Tls, false) ->
    {ok, I} = ssl:connection_information(S, [protocol, session_id, session_resumption]),
    #{resumed => resumed(Tls, I)};
tls_info(S, Tls, true) ->
    {ok, I} = ssl:connection_information(S, [protocol, selected_cipher_suite, sni_hostname,
                                             session_id, session_resumption]),
    Version = case proplists:get_value(protocol, I) of
                  'tlsv1.3' -> <<"TLSv1.3">>;
                  'tlsv1.2' -> <<"TLSv1.2">>;
                  V -> atom_to_binary(V)
              end,
    #{version => Version,
      cipher => list_to_binary(ssl:suite_to_openssl_str(proplists:get_value(selected_cipher_suite, I))),
      sni => case proplists:get_value(sni_hostname, I) of
                 undefined -> undefined;
                 Name -> list_to_binary(Name)
             end,
      alpn => case ssl:negotiated_protocol(S) of
                  {ok, P} -> P;
                  _ -> undefined
              end,
      resumed => resumed(Tls, I),
      client_cert => case ssl:peercert(S) of
                         {ok, Der} -> #{subject => cbench_certs:subject(Der),
                                        sha256 => cbench_certs:fingerprint(Der)};
                         _ -> undefined
                     end}.

%% TLS 1.3: `ssl' says whether a ticket was taken. TLS 1.2: ssl 10.8 says false even for an
%% abbreviated handshake, so a session id seen before is a resumed session (the server's own ids,
%% kept until there are ?MAX_SESSION_IDS of them, then forgotten all at once).
-define(MAX_SESSION_IDS, 65536).
resumed(#tls{sessions = Tab}, I) ->
    case proplists:get_value(protocol, I) of
        'tlsv1.2' ->
            Id = proplists:get_value(session_id, I),
            ets:info(Tab, size) >= ?MAX_SESSION_IDS andalso ets:delete_all_objects(Tab),
            not ets:insert_new(Tab, {Id});
        _ -> proplists:get_value(session_resumption, I, false)
    end.

serve(Cfg, S) ->
    try
        case Cfg#cfg.close_mode of
            true -> ehttpd_loop(S);
            false ->
                Cfg#cfg.journal =/= undefined andalso journal_conn(Cfg, S),
                next_request(S, Cfg, true)
        end
    catch
        Class:Reason:Stack ->
            %% A bug here must not kill the acceptor (we are linked): log it and close.
            logger:error("cbench_ehttpd connection crashed: ~p:~p ~p", [Class, Reason, Stack]),
            bump(Cfg, ?RESETS)
    end,
    echo_release(Cfg, echo_held()),
    case cbench_ehttpd_sock:getstat(S, [recv_oct, send_oct]) of
        {ok, [{recv_oct, R}, {send_oct, W}]} ->
            counters:add(Cfg#cfg.cnt, ?BYTES_READ, R),
            counters:add(Cfg#cfg.cnt, ?BYTES_WRITTEN, W);
        _ ->
            %% A TLS session the peer closed first is gone with its counters: the last ones taken.
            case get(?TLS_OCTETS) of
                {R, W} ->
                    counters:add(Cfg#cfg.cnt, ?BYTES_READ, R),
                    counters:add(Cfg#cfg.cnt, ?BYTES_WRITTEN, W);
                undefined -> ok
            end
    end,
    _ = cbench_ehttpd_sock:close(S),
    bump(Cfg, ?CONNS_CLOSED),
    ok.

%% What the journal records of the connection, taken once.
journal_conn(#cfg{journal = J}, S) ->
    put(cbench_conn, cbench_ehttpd_journal:next_conn(J)),
    _ = peer(S),
    ok.

%% The original ehttpd: skip the head, answer, close.
ehttpd_loop(S) ->
    case cbench_ehttpd_sock:recv(S, 0, infinity) of
        {ok, http_eoh} -> cbench_ehttpd_sock:send(S, ?EHTTPD_ANSWER);
        {ok, _} -> ehttpd_loop(S);
        {error, _} -> ok
    end.

next_request(S, Cfg, Fresh) ->
    %% A fresh connection gets the header timeout; between requests the idle timeout runs until
    %% the request line is complete, and the header timeout for the rest of the head.
    Wait = case Fresh of
               true -> Cfg#cfg.header_timeout;
               false -> Cfg#cfg.idle_timeout
           end,
    case cbench_ehttpd_sock:recv(S, 0, Wait) of
        {ok, {http_request, Method, Uri, Version}} ->
            Deadline = erlang:monotonic_time(millisecond) + Cfg#cfg.header_timeout,
            M = method(Method),
            T = target(Uri),
            Req0 = #req{method = M, target = T, version = Version},
            Req = case Cfg#cfg.journal of
                      undefined -> Req0;
                      _ -> Req0#req{arrival = erlang:system_time(microsecond),
                                    t0 = erlang:monotonic_time(microsecond)}
                  end,
            case request_line(M, T, Version) of
                ok -> read_headers(S, Cfg, Req, byte_size(M) + byte_size(T) + 12, Deadline);
                Status -> error_close(S, Cfg, Status)
            end;
        {ok, {http_error, _}} -> error_close(S, Cfg, 400);
        {ok, _Other} -> error_close(S, Cfg, 400);
        {error, timeout} -> head_timeout(S, Cfg);
        {error, emsgsize} -> error_close(S, Cfg, 431);
        {error, _} -> ok
    end.

read_headers(S, Cfg, Req, Bytes, Deadline) ->
    Left = max(0, Deadline - erlang:monotonic_time(millisecond)),
    case cbench_ehttpd_sock:recv(S, 0, Left) of
        {ok, {http_header, _, _Field, Name, Value0}} ->
            Value = skip_leading_folds(Value0),
            Bytes1 = Bytes + byte_size(Name) + byte_size(Value) + 4,
            Bad = bad_value(Value) orelse framing_tab(Name, Value),
            if
                Bytes1 > Cfg#cfg.max_header ->
                    error_close(S, Cfg, 431);
                Bad ->
                    %% http_bin takes any byte but LF in a value (a lone CR too, which the proxy
                    %% would pass on as a line end to its upstream); llhttp's strict mode does not,
                    %% nor a tab after a framing field's value.
                    error_close(S, Cfg, 400);
                true ->
                    %% Names lowercased once, here: framing, routing and the journal compare them.
                    Hs = [{cbench_http:lower(Name), trim(Value)} | Req#req.headers],
                    read_headers(S, Cfg, Req#req{headers = Hs}, Bytes1, Deadline)
            end;
        {ok, http_eoh} ->
            Req1 = Req#req{headers = lists:reverse(Req#req.headers)},
            case frame(Req1) of
                {ok, Req2} -> request(S, Cfg, Req2);
                error -> error_close(S, Cfg, 400)
            end;
        {ok, _} -> error_close(S, Cfg, 400);
        {error, timeout} -> bump(Cfg, ?TIMEOUTS), error_close(S, Cfg, 408);
        {error, emsgsize} -> error_close(S, Cfg, 431);
        {error, _} -> bump(Cfg, ?RESETS)
    end.

%% http_bin joins an obs-fold (a line that begins with SP or HTAB, RFC 9112 5.2) to the value
%% before it, CRLF included. A fold is a 400 (bad_value/1 sees its CR), as on the C engines, but
%% for one before any byte of the value (`x:<CRLF> b'), which llhttp skips as whitespace before
%% the value, the RFC's other choice (the fold replaced by SP): every engine takes `b' there.
skip_leading_folds(<<C, Rest/binary>>) when C =:= $\s; C =:= $\t -> skip_leading_folds(Rest);
skip_leading_folds(<<"\r\n", C, Rest/binary>>) when C =:= $\s; C =:= $\t -> skip_leading_folds(Rest);
skip_leading_folds(V) -> V.

%% A field value may hold visible bytes, obs-text, spaces and tabs (RFC 9110 5.5): any other
%% control byte (CR, NUL, DEL, ...) makes it malformed.
bad_value(<<C, _/binary>>) when C < 16#20, C =/= $\t; C =:= 16#7f -> true;
bad_value(<<_, Rest/binary>>) -> bad_value(Rest);
bad_value(<<>>) -> false.

%% llhttp 8.1 reads content-length and transfer-encoding itself and takes no tab in the whitespace
%% after their values (a 400 on the C engines, docs/wire.md); http_bin keeps that whitespace.
framing_tab(Name, Value) when byte_size(Name) =:= 14; byte_size(Name) =:= 17 ->
    case cbench_http:lower(Name) of
        N when N =:= <<"content-length">>; N =:= <<"transfer-encoding">> -> tab_after(Value, byte_size(Value));
        _ -> false
    end;
framing_tab(_Name, _Value) -> false.

tab_after(V, N) when N > 0 ->
    case binary:at(V, N - 1) of
        $\t -> true;
        $\s -> tab_after(V, N - 1);
        _ -> false
    end;
tab_after(_V, 0) -> false.

%% A timed-out head: 408 if any of it arrived, a silent close otherwise.
head_timeout(S, Cfg) ->
    bump(Cfg, ?TIMEOUTS),
    ok = cbench_ehttpd_sock:setopts(S, [{packet, raw}]),
    case cbench_ehttpd_sock:recv(S, 0, 0) of
        {ok, _Partial} -> error_close(S, Cfg, 408);
        _ -> ok
    end.

method(M) when is_atom(M) -> atom_to_binary(M);
method(M) -> M.

target({abs_path, P}) -> P;
target('*') -> <<"*">>;
target({absoluteURI, Scheme, Host, Port, Path}) ->
    iolist_to_binary([atom_to_binary(Scheme), "://", Host,
                      case Port of undefined -> ""; _ -> [":", integer_to_binary(Port)] end,
                      Path]);
target({scheme, Scheme, Rest}) -> <<Scheme/binary, ":", Rest/binary>>;
target(T) when is_binary(T) -> T.

%% The request line's checks, in the C engine's order (docs/wire.md): a method other than RFC 9110's
%% and PATCH is not implemented (501; PRI, the HTTP/2 preface, is a 400); the target may hold visible
%% ASCII only (0x21-0x7E); HTTP/0.9 is a 400 at once; a version other than 1.0 and 1.1 is a 505
%% (two-digit numbers are malformed: 400).
request_line(M, T, Version) ->
    Known = [<<"GET">>, <<"HEAD">>, <<"POST">>, <<"PUT">>, <<"DELETE">>, <<"CONNECT">>,
             <<"OPTIONS">>, <<"TRACE">>, <<"PATCH">>],
    VisibleAscii = lists:all(fun(C) -> C > 16#20 andalso C < 16#7f end, binary_to_list(T)),
    case lists:member(M, Known) of
        false when M =:= <<"PRI">> -> 400;
        false -> 501;
        true when not VisibleAscii -> 400;
        true ->
            case Version of
                {1, Minor} when Minor =< 1 -> ok;
                {0, 9} -> 400;
                {Major, Minor} when Major =< 9, Minor =< 9 -> 505;
                _ -> 400
            end
    end.

%% http_bin keeps trailing whitespace in values; HTTP (and llhttp) drops it.
trim(<<>>) -> <<>>;
trim(V) ->
    case binary:last(V) of
        C when C =:= $\s; C =:= $\t -> trim(binary:part(V, 0, byte_size(V) - 1));
        _ -> V
    end.

%% Works out keep-alive, the body framing and Expect from the headers; error means 400.
frame(Req = #req{version = {1, Minor}, headers = Hs}) ->
    case host_ok(Hs, Minor) of
        true -> frame(Hs, Req#req{keep = Minor >= 1}, undefined, undefined, Minor);
        false -> error
    end;
frame(_) ->
    error.

%% Host (RFC 9112 3.2): exactly one in HTTP/1.1, at most one in HTTP/1.0, and its value is
%% uri-host [":" port] (RFC 3986): a reg-name (unreserved, sub-delims, %HH) or an IP literal in
%% brackets, then digits after the colon; it may be empty.
host_ok(Hs, Minor) ->
    case [V || {N, V} <- Hs, cbench_http:lower(N) =:= <<"host">>] of
        [] -> Minor =:= 0;
        [V] -> valid_host(V);
        _ -> false
    end.

valid_host(<<"[", Rest/binary>>) ->
    case binary:split(Rest, <<"]">>) of
        [Lit, Port] when Lit =/= <<>> ->
            lists:all(fun(C) -> host_char(C) orelse C =:= $: end, binary_to_list(Lit))
                andalso port_ok(Port);
        _ -> false
    end;
valid_host(V) ->
    case binary:split(V, <<":">>) of
        [Name] -> reg_name(Name);
        [Name, Port] -> reg_name(Name) andalso port_ok(<<":", Port/binary>>)
    end.

reg_name(<<>>) -> true;
reg_name(<<$%, A, B, Rest/binary>>) ->
    hex_digit(A) =/= error andalso hex_digit(B) =/= error andalso reg_name(Rest);
reg_name(<<C, Rest/binary>>) -> host_char(C) andalso reg_name(Rest).

host_char(C) when C >= $a, C =< $z; C >= $A, C =< $Z; C >= $0, C =< $9 -> true;
host_char(C) -> lists:member(C, "-._~!$&'()*+,;=").

port_ok(<<>>) -> true;
port_ok(<<":", Digits/binary>>) -> lists:all(fun(C) -> C >= $0 andalso C =< $9 end, binary_to_list(Digits));
port_ok(_) -> false.

frame([], Req, CL, TE, Minor) ->
    case {CL, TE} of
        {undefined, undefined} -> {ok, Req};
        %% HTTP/1.0 has no Transfer-Encoding: its framing is faulty (RFC 9112 6.1), so the answer
        %% closes the connection, whatever `connection' said.
        {undefined, chunked} when Minor =:= 0 -> {ok, Req#req{framing = chunked, keep = false}};
        {undefined, chunked} -> {ok, Req#req{framing = chunked}};
        {N, undefined} when is_integer(N) -> {ok, Req#req{framing = {length, N}}};
        _ -> error
    end;
frame([{Name, Value} | Rest], Req, CL, TE, Minor) ->
    case Name of
        <<"content-length">> when CL =:= undefined ->
            case content_length(Value, 0) of
                N when is_integer(N) -> frame(Rest, Req, N, TE, Minor);
                error -> error
            end;
        <<"content-length">> -> error;
        <<"transfer-encoding">> ->
            %% As llhttp reads them: the codings of every such field, in order, must end with
            %% chunked, which comes once (RFC 9112 6.1); the others are not undone.
            Codings = tokens(Value),
            Chunked = [C || C <- Codings, C =:= <<"chunked">>],
            case {TE, Chunked, lists:last([<<>> | Codings])} of
                {chunked, _, _} -> error;
                {_, [], _} -> frame(Rest, Req, CL, coded, Minor);
                {_, [_], <<"chunked">>} -> frame(Rest, Req, CL, chunked, Minor);
                _ -> error
            end;
        <<"connection">> ->
            Tokens = tokens(Value),
            Keep = case Minor of
                       0 -> lists:member(<<"keep-alive">>, Tokens);
                       _ -> not lists:member(<<"close">>, Tokens)
                   end,
            frame(Rest, Req#req{keep = Keep}, CL, TE, Minor);
        <<"expect">> ->
            frame(Rest, Req#req{expect = cbench_http:lower(Value) =:= <<"100-continue">>},
                  CL, TE, Minor);
        _ ->
            frame(Rest, Req, CL, TE, Minor)
    end.

%% A content-length as llhttp reads it, digit by digit: past 2^64-1 it is malformed (400, where
%% a smaller value over max_body_bytes is a 413). binary_to_integer/1 would take the whole digit
%% string, up to max_header_bytes of it, in time quadratic in its length without yielding.
content_length(<<>>, _) -> error;
content_length(V, N) -> content_length_digits(V, N).

content_length_digits(<<C, Rest/binary>>, N) when C >= $0, C =< $9 ->
    case N * 10 + (C - $0) of
        N1 when N1 > 16#FFFFFFFFFFFFFFFF -> error;
        N1 -> content_length_digits(Rest, N1)
    end;
content_length_digits(<<>>, N) -> N;
content_length_digits(_, _) -> error.

tokens(Value) ->
    [cbench_http:lower(cbench_http:trim_ows(T)) || T <- binary:split(Value, <<",">>, [global])].

%% How the response ends the connection: docs/wire.md, "connection" header rule.
conn_mode(#req{keep = false}) -> close;
conn_mode(#req{version = {1, 0}}) -> keep_alive;
conn_mode(_) -> default.

split_target(T) ->
    case binary:match(T, <<"?">>) of
        nomatch -> {T, <<>>};
        {Pos, _} -> {binary_part(T, 0, Pos), binary_part(T, Pos + 1, byte_size(T) - Pos - 1)}
    end.

request(S, Cfg = #cfg{max_body = MaxBody}, #req{framing = {length, N}}) when N > MaxBody ->
    error_close(S, Cfg, 413);
request(S, Cfg, Req = #req{method = <<"CONNECT">>}) when Req#req.keep; Req#req.framing =/= none ->
    %% CONNECT (RFC 9110 9.3.6) asks for a tunnel, which the engine does not open: its content has
    %% no defined meaning, and the bytes after its head would be the tunnel's. As llhttp ends the
    %% message at the head: answered as the routes say, the body (a content-length, a chunked one)
    %% not read, and the connection closed after the answer, lingering, so that the bytes behind
    %% are never read as a request (they smuggled one past whatever framed them as a body).
    _ = request(S, Cfg, Req#req{framing = none, keep = false}),
    linger(S);
request(S, Cfg, Req00 = #req{method = Method, target = Target}) ->
    {Path, Query} = split_target(Target),
    Cfg#cfg.journal =/= undefined andalso put(?BODY, {[], 0, 0}),
    bump(Cfg, ?REQUESTS),
    %% Numbered at dispatch, as the C engine numbers it: the journal lists requests as they came.
    Req0 = Req00#req{seq = cbench_ehttpd_journal:next_seq(Cfg#cfg.journal)},
    Cfg#cfg.tls =/= false andalso counters:add((Cfg#cfg.tls)#tls.cnt, 2, 1),
    %% Taken before the answer too: a client that closes as soon as it has the answer can end the
    %% session before the count after it (the bytes read so far are then counted, not the answer's).
    Cfg#cfg.tls =/= false andalso tls_octets(S),
    Table = cbench_router:table(Cfg#cfg.table),
    Lookup0 = cbench_router:lookup(Table, Method, Path, Query, Req0#req.headers),
    continue(S, Req0),
    Result =
        case Lookup0 of
            body_wait ->
                %% A route with a body matcher: the whole body first, then the lookup again with
                %% it; the route chosen reads the body from memory (framing {buffered, Body}).
                case body(S, Cfg, Req0, fun(Piece, Acc) -> {ok, [Acc | Piece]} end, []) of
                    {ok, Body0} ->
                        Body = iolist_to_binary(Body0),
                        dispatch(S, Cfg, Req0#req{framing = {buffered, Body}}, Path, Query,
                                 cbench_router:lookup(Table, Method, Path, Query,
                                                      Req0#req.headers, Body));
                    Error ->
                        Error
                end;
            Lookup ->
                dispatch(S, Cfg, Req0, Path, Query, Lookup)
        end,
    Cfg#cfg.tls =/= false andalso tls_octets(S),
    case Result of
        ok when Req0#req.keep ->
            ok = cbench_ehttpd_sock:setopts(S, [{packet, http_bin}]),
            next_request(S, Cfg, false);
        ok ->
            ok;
        close ->
            ok;
        {error, _} ->
            ok
    end.

dispatch(S, Cfg = #cfg{cnt = Cnt}, Req0, Path, Query, Lookup) ->
        case Lookup of
            {ok, {fixture, Route, Stat}} ->
                counters:add(Cnt, Stat, 1),
                Req = Req0#req{route = Route},
                case Route of
                    echo -> echo(S, Cfg, Req);
                    echo_chunked -> echo_chunked(S, Cfg, Req);
                    _ -> after_body(S, Cfg, Req, fun() -> respond(S, Cfg, Req, Route) end)
                end;
            {ok, {stub, Id, Name, {handler, Handler, HOpts}, Counts}} ->
                counters:add(Counts, 1, 1),
                handler(S, Cfg, Req0#req{route = Name, stub = Id}, Path, Query, Handler, HOpts);
            {ok, {stub, Id, Name, Response, Counts}} ->
                counters:add(Counts, 1, 1),
                Req = Req0#req{route = Name, stub = Id},
                stub_after_body(S, Cfg, Req, Response);
            {not_allowed, Allow, Target405} ->
                %% Counted and journaled under the first route whose path matched.
                Req = case Target405 of
                          {fixture, Route, Stat} ->
                              counters:add(Cnt, Stat, 1),
                              Req0#req{route = Route};
                          {stub, _, Name, _, Counts} ->
                              counters:add(Counts, 2, 1),
                              Req0#req{route = Name}
                      end,
                bump(Cfg, ?STATUS_405),
                after_body(S, Cfg, Req,
                           fun() -> simple(S, Cfg, Req, 405, [{<<"allow">>, Allow}], <<>>) end);
            not_found ->
                counters:add(Cnt, Cfg#cfg.not_found_stat, 1),
                bump(Cfg, ?STATUS_404),
                after_body(S, Cfg, Req0, fun() -> not_found(S, Cfg, Req0, Query) end)
        end.

%% A 404: with the stubs that came closest when there are stubs (cbench_router:near_body/6).
not_found(S, Cfg, Req = #req{method = Method, target = Target, headers = Headers}, Query) ->
    Body = case Req#req.framing of
               {buffered, B} -> B;
               _ -> unknown
           end,
    case cbench_router:near_body(cbench_router:table(Cfg#cfg.table), Method, Target, Query, Headers,
                                 Body) of
        none -> simple(S, Cfg, Req, 404, [], <<>>);
        {json, Text} -> simple(S, Cfg, Req, 404, [ct(json)], Text);
        {text, Text} -> simple(S, Cfg, Req, 404, [{<<"content-type">>, <<"text/plain">>}], Text)
    end.

%% Expect: 100-continue is answered only when a body will be read, and never to HTTP/1.0 (which has
%% no 1xx answers, RFC 9110 15.2; the C engine's rule).
continue(S, #req{expect = true, framing = F, version = {1, 1}}) when F =/= none, F =/= {length, 0} ->
    cbench_ehttpd_sock:send(S, <<"HTTP/1.1 100 Continue\r\n\r\n">>);
continue(_, _) ->
    ok.

%% Reads and drops a request body, then runs Respond.
after_body(_S, _Cfg, #req{framing = none}, Respond) ->
    Respond();
after_body(S, Cfg, Req, Respond) ->
    case body(S, Cfg, Req, fun(_, Acc) -> {ok, Acc} end, ok) of
        {ok, ok} -> Respond();
        Error -> Error
    end.

%% /echo holds the body from the echo budget as the C engine's buffer does (src/kinds/fixture_routes.c): a
%% declared length at once, a chunked body in a capacity that doubles from 4 KiB (at most the body
%% limit). A body that would take the connection or the server over its budget gets 503 at once,
%% and the rest of it is read and dropped; the connection goes on.
echo(S, Cfg, Req = #req{framing = {length, N}}) when N > 0 ->
    case echo_hold(Cfg, N) of
        ok ->
            Result = echo_answer(S, Cfg, Req, body(S, Cfg, Req, fun(P, Acc) -> {ok, [Acc, P]} end, [])),
            echo_release(Cfg, N),
            Result;
        _Full ->
            then(simple(S, Cfg, Req, 503, [], <<>>),
                 fun() -> case body(S, Cfg, Req, fun(_, A) -> {ok, A} end, ok) of
                              {ok, ok} -> ok;
                              Error -> Error
                          end
                 end)
    end;
echo(S, Cfg, Req = #req{framing = chunked}) ->
    Grow = fun(_Piece, refused) -> {ok, refused};
              (Piece, {Acc, Len, Cap}) ->
                   Len1 = Len + byte_size(Piece),
                   Cap1 = echo_capacity(Cfg, Len1, Cap),
                   case echo_hold(Cfg, Cap1 - Cap) of
                       ok -> {ok, {[Acc, Piece], Len1, Cap1}};
                       _Full ->
                           echo_release(Cfg, Cap),
                           case simple(S, Cfg, Req, 503, [], <<>>) of
                               ok -> {ok, refused};
                               Error -> Error
                           end
                   end
           end,
    case body(S, Cfg, Req, Grow, {[], 0, 0}) of
        {ok, refused} -> ok;
        {ok, {Body, _, Cap}} ->
            Result = echo_answer(S, Cfg, Req, {ok, Body}),
            echo_release(Cfg, Cap),
            Result;
        Error -> Error
    end;
echo(S, Cfg, Req = #req{framing = {buffered, Body}}) ->
    %% Held already for a body matcher that did not match (request/3): echoed whole, holding its
    %% size from the budget while it is written, as a declared length is.
    N = byte_size(Body),
    case echo_hold(Cfg, N) of
        ok ->
            Result = echo_answer(S, Cfg, Req, {ok, Body}),
            echo_release(Cfg, N),
            Result;
        _Full ->
            simple(S, Cfg, Req, 503, [], <<>>)
    end;
echo(S, Cfg, Req) ->
    echo_answer(S, Cfg, Req, {ok, []}).

echo_answer(S, Cfg, Req, {ok, Body}) ->
    Size = iolist_size(Body),
    finish(S, Cfg, Req, 200, out(Req, Size),
           [cbench_http:head(200, [ct(octet)], Size, conn_mode(Req)), body_unless_head(Req, Body)]);
echo_answer(_S, _Cfg, _Req, Error) ->
    Error.

echo_capacity(_Cfg, Len, Cap) when Len =< Cap -> Cap;
echo_capacity(#cfg{max_body = Max}, Len, Cap) ->
    Doubled = double_from(case Cap of 0 -> 4096; _ -> Cap end, Len),
    case Doubled > Max andalso Len =< Max of
        true -> Max;
        false -> Doubled
    end.

double_from(C, Len) when C >= Len -> C;
double_from(C, Len) -> double_from(C * 2, Len).

%% Takes N bytes from the connection's echo budget (two body limits) and the server's (32): ok, or
%% conn or server naming the budget it would pass (nothing taken then).
echo_hold(_Cfg, 0) -> ok;
echo_hold(#cfg{echo_held = A, max_body = Max}, N) ->
    Mine = echo_held(),
    case Mine + N > ?ECHO_CONN_BODIES * Max of
        true -> conn;
        false ->
            case atomics:add_get(A, 1, N) > ?ECHO_SERVER_BODIES * Max of
                true -> atomics:sub(A, 1, N), server;
                false -> put(?HELD, Mine + N), ok
            end
    end.

echo_release(_Cfg, 0) -> ok;
echo_release(#cfg{echo_held = A}, N) ->
    atomics:sub(A, 1, N),
    put(?HELD, echo_held() - N),
    ok.

echo_held() ->
    case get(?HELD) of
        undefined -> 0;
        N -> N
    end.

echo_chunked(S, Cfg, Req) ->
    case send(S, cbench_http:head(200, [ct(octet)], chunked, conn_mode(Req))) of
        ok ->
            Send = fun(Piece, ok) -> send(S, cbench_http:chunk(Piece)) end,
            case body(S, Cfg, Req#req{started = true},
                      fun(P, A) -> case Send(P, A) of ok -> {ok, ok}; E -> E end end, ok) of
                {ok, ok} -> finish(S, Cfg, Req, 200, request_body, cbench_http:last_chunk());
                Error -> Error
            end;
        Error -> Error
    end.

%% An Erlang handler (cbench_handler): the whole body is read, the request sent to the handler's
%% process, and this process waits for the answer (503 when there is no handler or it dies first,
%% 504 after its timeout_ms; a streamed answer cut short closes the connection).
handler(S, Cfg, Req, Path, Query, Target, HOpts = #{body := stream}) ->
    %% The body in pieces: the request goes first, then each piece as it is read.
    Info = #{method => Req#req.method, path => Path, query => Query,
             headers => Req#req.headers, peer => peer(S), proto => proto(Cfg), body => stream},
    case cbench_ehttpd_handler:send(Target, handler_opts(Cfg, HOpts), Info) of
        {ok, Ctx, To} ->
            case body(S, Cfg, Req, fun(Piece, Acc) -> cbench_ehttpd_handler:body(Ctx, To, Piece),
                                                      {ok, Acc} end, ok) of
                {ok, ok} ->
                    cbench_ehttpd_handler:body(Ctx, To, eof),
                    handler_answer(S, Cfg, Req, cbench_ehttpd_handler:wait(Ctx));
                Error ->
                    cbench_ehttpd_handler:done(Ctx),
                    Error
            end;
        {fail, _} = Fail ->
            after_body(S, Cfg, Req, fun() -> handler_answer(S, Cfg, Req, Fail) end)
    end;
handler(S, Cfg, Req, Path, Query, Target, HOpts) ->
    case body(S, Cfg, Req, fun(Piece, Acc) -> {ok, [Acc | Piece]} end, []) of
        {ok, Body} ->
            Info = #{method => Req#req.method, path => Path, query => Query,
                     headers => Req#req.headers, peer => peer(S), proto => proto(Cfg),
                     body => iolist_to_binary(Body)},
            handler_answer(S, Cfg, Req, cbench_ehttpd_handler:await(Target, handler_opts(Cfg, HOpts), Info));
        Error -> Error
    end.

handler_opts(Cfg, HOpts) -> HOpts#{max_queued_reply_bytes => Cfg#cfg.max_queued_reply}.

handler_answer(S, Cfg, Req, Answer) ->
    case Answer of
        {reply, Status, Headers, RBody, Ctx} ->
            cbench_ehttpd_handler:done(Ctx),
            simple(S, Cfg, Req, Status, Headers, RBody);
        {stream, Status, Headers, Ctx} ->
            handler_stream(S, Cfg, Req, Status, Headers, Ctx);
        {fail, Status} ->
            bump(Cfg, handler_fail_stat(Status)),
            simple(S, Cfg, Req, Status, [], <<>>)
    end.

handler_fail_stat(503) -> ?HANDLER_UNAVAILABLE;
handler_fail_stat(504) -> ?HANDLER_TIMEOUTS.

%% HTTP/1.0 has no chunked coding: the pieces go raw and the close ends the body (as a stub's).
handler_stream(S, Cfg, Req, Status, Headers, Ctx) ->
    Chunked = Req#req.version =/= {1, 0},
    Head = case Chunked of
               true -> cbench_http:head(Status, Headers, chunked, conn_mode(Req));
               false -> cbench_http:head(Status, Headers, none, close)
           end,
    Result = case send(S, Head) of
                 ok -> handler_pieces(S, Cfg, Req#req{keep = Req#req.keep andalso Chunked,
                                                      started = true}, Status, Chunked, Ctx, 0);
                 Error -> Error
             end,
    cbench_ehttpd_handler:done(Ctx),
    Result.

handler_pieces(S, Cfg, Req, Status, Chunked, Ctx, Sent) ->
    Head = Req#req.method =:= <<"HEAD">>,
    case cbench_ehttpd_handler:next(Ctx) of
        {send, <<>>} ->
            handler_pieces(S, Cfg, Req, Status, Chunked, Ctx, Sent);
        {send, Data} when Head ->
            cbench_ehttpd_handler:written(Ctx, byte_size(Data)),
            handler_pieces(S, Cfg, Req, Status, Chunked, Ctx, Sent);
        {send, Data} ->
            case send(S, case Chunked of true -> cbench_http:chunk(Data); false -> Data end) of
                ok ->
                    cbench_ehttpd_handler:written(Ctx, byte_size(Data)),
                    handler_pieces(S, Cfg, Req, Status, Chunked, Ctx, Sent + byte_size(Data));
                Error -> Error
            end;
        finish when Chunked, not Head ->
            finish(S, Cfg, Req, Status, Sent, cbench_http:last_chunk());
        finish ->
            journal(Cfg, Req, Status, Sent),
            case Req#req.keep of true -> ok; false -> close end;
        {cut, Why} ->
            %% The answer began: it cannot end well, so the connection is closed.
            bump(Cfg, handler_fail_stat(Why)),
            journal(Cfg, Req, Status, Sent),
            close;
        overflow ->
            %% max_queued_reply_bytes of the answer waited for a client that does not read.
            bump(Cfg, ?HANDLER_OVERFLOWS),
            journal(Cfg, Req, Status, Sent),
            close
    end.

peer(S) ->
    case get(cbench_peer) of
        undefined ->
            P = case cbench_ehttpd_sock:peername(S) of
                    {ok, {Ip, Port}} when tuple_size(Ip) =:= 8 ->
                        iolist_to_binary(["[", inet:ntoa(Ip), "]:", integer_to_list(Port)]);
                    {ok, {Ip, Port}} ->
                        iolist_to_binary([inet:ntoa(Ip), ":", integer_to_list(Port)]);
                    _ -> <<>>
                end,
            put(cbench_peer, P),
            P;
        P -> P
    end.

%% Reads the body in raw mode, folding Fun over the pieces as they are read.
body(_S, _Cfg, #req{framing = none}, _Fun, Acc) ->
    {ok, Acc};
body(_S, _Cfg, #req{framing = {buffered, <<>>}}, _Fun, Acc) ->
    {ok, Acc};
body(_S, _Cfg, #req{framing = {buffered, Body}}, Fun, Acc) ->
    Fun(Body, Acc);
body(S, Cfg, #req{framing = {length, N}}, Fun, Acc) ->
    ok = cbench_ehttpd_sock:setopts(S, [{packet, raw}]),
    body_length(S, Cfg, N, Fun, Acc);
body(S, Cfg, Req = #req{framing = chunked}, Fun, Acc) ->
    ok = cbench_ehttpd_sock:setopts(S, [{packet, raw}]),
    body_chunked(S, Cfg, Req, 0, Fun, Acc).

body_length(_S, _Cfg, 0, _Fun, Acc) ->
    {ok, Acc};
body_length(S, Cfg, Left, Fun, Acc) ->
    %% Exact lengths only: reading "what is there" could swallow the next pipelined request.
    case cbench_ehttpd_sock:recv(S, min(Left, 65536), Cfg#cfg.idle_timeout) of
        {ok, Piece} ->
            keep_body(Cfg, Piece),
            case Fun(Piece, Acc) of
                {ok, Acc1} -> body_length(S, Cfg, Left - byte_size(Piece), Fun, Acc1);
                Error -> Error
            end;
        {error, timeout} -> bump(Cfg, ?TIMEOUTS), {error, timeout};
        {error, E} -> bump(Cfg, ?RESETS), {error, E}
    end.

body_chunked(S, Cfg, Req, Total, Fun, Acc) ->
    body_chunked(S, Cfg, Req, Total, 0, Fun, Acc).

%% Ext: the bytes of chunk extensions so far; they may take max_header_bytes in all (413 over it).
body_chunked(S, Cfg, Req, Total, Ext, Fun, Acc) ->
    case read_line(S, Cfg, Cfg#cfg.max_header + 64) of
        {ok, Line} ->
            case chunk_line(Line) of
                {ok, _, E} when Ext + E > Cfg#cfg.max_header ->
                    fail(S, Cfg, Req, 413), {error, too_large};
                {ok, 0, _} -> trailers(S, Cfg, Req, 0, Acc);
                {ok, Size, _} when Total + Size > Cfg#cfg.max_body ->
                    fail(S, Cfg, Req, 413), {error, too_large};
                {ok, Size, E} ->
                    ok = cbench_ehttpd_sock:setopts(S, [{packet, raw}]),
                    case chunk_data(S, Cfg, Size, Fun, Acc) of
                        {ok, Acc1} ->
                            case cbench_ehttpd_sock:recv(S, 2, Cfg#cfg.idle_timeout) of
                                {ok, <<"\r\n">>} ->
                                    body_chunked(S, Cfg, Req, Total + Size, Ext + E, Fun, Acc1);
                                {ok, _} -> fail(S, Cfg, Req, 400), {error, bad_chunk};
                                {error, Why} -> bump(Cfg, ?RESETS), {error, Why}
                            end;
                        Error -> Error
                    end;
                error ->
                    fail(S, Cfg, Req, 400), {error, bad_chunk}
            end;
        {error, emsgsize} -> fail(S, Cfg, Req, 413), {error, too_large};
        Error -> Error
    end.

chunk_data(_S, _Cfg, 0, _Fun, Acc) ->
    {ok, Acc};
chunk_data(S, Cfg, Left, Fun, Acc) ->
    case cbench_ehttpd_sock:recv(S, min(Left, 65536), Cfg#cfg.idle_timeout) of
        {ok, Piece} ->
            keep_body(Cfg, Piece),
            case Fun(Piece, Acc) of
                {ok, Acc1} -> chunk_data(S, Cfg, Left - byte_size(Piece), Fun, Acc1);
                Error -> Error
            end;
        {error, timeout} -> bump(Cfg, ?TIMEOUTS), {error, timeout};
        {error, E} -> bump(Cfg, ?RESETS), {error, E}
    end.

%% Trailers are parsed like header lines and dropped (no route sees them); they have their own
%% budget, max_header_bytes: over it, 431 (docs/wire.md).
trailers(S, Cfg, Req, Bytes, Acc) ->
    case read_line(S, Cfg, Cfg#cfg.max_header) of
        {ok, <<"\r\n">>} -> {ok, Acc};
        {ok, <<"\n">>} -> {ok, Acc};
        {ok, Line} when Bytes + byte_size(Line) > Cfg#cfg.max_header ->
            fail(S, Cfg, Req, 431), {error, too_large};
        {ok, Line} when binary_part(Line, byte_size(Line), -2) =/= <<"\r\n">> ->
            fail(S, Cfg, Req, 400), {error, bad_trailer};
        {ok, Line} ->
            %% httph_bin decides on a line only once it sees the next (a value may continue).
            case erlang:decode_packet(httph_bin, <<Line/binary, "\r\n">>, []) of
                {ok, {http_header, _, _, _, _}, <<"\r\n">>} ->
                    trailers(S, Cfg, Req, Bytes + byte_size(Line), Acc);
                _ ->
                    fail(S, Cfg, Req, 400), {error, bad_trailer}
            end;
        {error, emsgsize} -> fail(S, Cfg, Req, 431), {error, too_large};
        Error -> Error
    end.

%% One line of the chunked framing; {error, emsgsize} when it is longer than Max.
%% {packet, line} hands a line longer than the socket's buffer over in pieces: they are joined.
read_line(S, Cfg, Max) ->
    ok = cbench_ehttpd_sock:setopts(S, [{packet, line}]),
    read_line(S, Cfg, Max, <<>>).

read_line(S, Cfg, Max, Acc) ->
    case cbench_ehttpd_sock:recv(S, 0, Cfg#cfg.idle_timeout) of
        {ok, Piece} ->
            Line = <<Acc/binary, Piece/binary>>,
            case binary:last(Line) of
                _ when byte_size(Line) > Max -> {error, emsgsize};
                $\n -> {ok, Line};
                _ -> read_line(S, Cfg, Max, Line)
            end;
        {error, emsgsize} -> {error, emsgsize};
        {error, timeout} -> bump(Cfg, ?TIMEOUTS), {error, timeout};
        {error, E} -> bump(Cfg, ?RESETS), {error, E}
    end.

%% A chunk-size line as the C engine (llhttp in strict mode) reads it: hex digits, then extensions
%% `;name' or `;name=value' (a token, or a quoted string without backslash escapes), then CRLF.
%% Returns {ok, Size, ExtBytes}, ExtBytes counted as the C engine counts them (name, value, 2), or
%% error.
chunk_line(Line) ->
    case binary:split(Line, <<"\r\n">>) of
        [Head, <<>>] -> chunk_hex(Head, 0, 0);
        _ -> error
    end.

chunk_hex(<<C, Rest/binary>>, N, V) when V < 16#1000000000000000 ->
    case hex_digit(C) of
        error when N > 0 -> chunk_exts(<<C, Rest/binary>>, V, 0);
        error -> error;
        D -> chunk_hex(Rest, N + 1, V * 16 + D)
    end;
chunk_hex(<<>>, N, V) when N > 0 -> {ok, V, 0};
chunk_hex(_, _, _) -> error.

hex_digit(C) when C >= $0, C =< $9 -> C - $0;
hex_digit(C) when C >= $a, C =< $f -> C - $a + 10;
hex_digit(C) when C >= $A, C =< $F -> C - $A + 10;
hex_digit(_) -> error.

chunk_exts(<<>>, V, E) -> {ok, V, E};
chunk_exts(<<$;, Rest/binary>>, V, E) ->
    case token(Rest, 0) of
        {0, _} -> error;
        {N, <<$=, Value/binary>>} ->
            case ext_value(Value) of
                {ok, L, Rest1} -> chunk_exts(Rest1, V, E + N + L + 2);
                error -> error
            end;
        {N, Rest1} -> chunk_exts(Rest1, V, E + N + 2)
    end;
chunk_exts(_, _, _) -> error.

ext_value(<<$", Rest/binary>>) -> quoted(Rest, 2);
ext_value(B) ->
    case token(B, 0) of
        {0, _} -> error;
        {N, Rest} -> {ok, N, Rest}
    end.

quoted(<<$", Rest/binary>>, L) -> {ok, L, Rest};
quoted(<<C, Rest/binary>>, L) when C =:= $\t; C =:= $\s; C =:= 16#21; C >= 16#23, C =/= $\\ ->
    quoted(Rest, L + 1);
quoted(_, _) -> error.

%% The length of the token at the start of B (RFC 9110 tchar) and what follows it.
token(B, N) ->
    case B of
        <<C, Rest/binary>> ->
            case is_tchar(C) of
                true -> token(Rest, N + 1);
                false -> {N, B}
            end;
        <<>> -> {N, B}
    end.

is_tchar(C) when C >= $a, C =< $z; C >= $A, C =< $Z; C >= $0, C =< $9 -> true;
is_tchar(C) -> lists:member(C, "!#$%&'*+-.^_`|~").

%%% Fixture responses

ct(text) -> {<<"content-type">>, <<"text/plain">>};
ct(json) -> {<<"content-type">>, <<"application/json">>};
ct(octet) -> {<<"content-type">>, <<"application/octet-stream">>};
ct(sse) -> {<<"content-type">>, <<"text/event-stream">>}.

-define(NO_CACHE, {<<"cache-control">>, <<"no-cache">>}).

respond(S, Cfg, Req, root) -> simple(S, Cfg, Req, 200, [], <<"hello world!">>);
respond(S, Cfg, Req, hello) -> simple(S, Cfg, Req, 200, [ct(text)], <<"Hello, Joe!">>);
respond(S, Cfg, Req, json) ->
    simple(S, Cfg, Req, 200, [ct(json)], <<"{\"message\":\"Hello, Joe!\"}">>);
respond(S, Cfg, Req, Route) when Route =:= file_tiny; Route =:= file_small;
                                 Route =:= file_big ->
    Size = cbench_fixture:size(Route),
    send_file(S, Cfg, Req, 200, [ct(octet)], cbench_fixture:path(Route), Size);
respond(S, Cfg, Req, stream) ->
    streamed(S, Cfg, Req, [ct(text)], [<<"hello, ">>, <<"Joe!">>]);
respond(S, Cfg, Req, stream_small) ->
    streamed(S, Cfg, Req, [ct(octet)], lists:duplicate(100, cbench_http:line()));
respond(S, Cfg, Req, stream_big) ->
    streamed(S, Cfg, Req, [ct(octet)], lists:duplicate(64, cbench_http:bigline()));
respond(S, Cfg, Req, sse) ->
    streamed(S, Cfg, Req, [ct(sse), ?NO_CACHE],
             lists:duplicate(32, cbench_http:sse_event(cbench_http:line())));
respond(S, Cfg, Req, sse_small) ->
    streamed(S, Cfg, Req, [ct(sse), ?NO_CACHE],
             lists:duplicate(100, cbench_http:sse_event(cbench_http:line())));
respond(S, Cfg, Req, sse_big) ->
    streamed(S, Cfg, Req, [ct(sse), ?NO_CACHE],
             lists:duplicate(64, cbench_http:sse_event(cbench_http:bigline())));
respond(S, Cfg, Req, delay) ->
    case cbench_http:delay_param(Req#req.target) of
        {ok, Ms} ->
            %% A timer in this connection's process: the scheduler serves others meanwhile.
            receive after Ms -> ok end,
            simple(S, Cfg, Req, 200, [ct(text)], <<"ok">>);
        error ->
            bump(Cfg, ?STATUS_400),
            simple(S, Cfg, Req, 400, [], <<>>)
    end;
respond(S, Cfg, Req, status) ->
    case cbench_http:status_param(Req#req.target) of
        {ok, Code} ->
            simple(S, Cfg, Req, Code, [], <<>>);
        error ->
            bump(Cfg, ?STATUS_400),
            simple(S, Cfg, Req, 400, [], <<>>)
    end;
respond(S, Cfg, Req, headers) ->
    simple(S, Cfg, Req, 200, [ct(json)], cbench_http:headers_json(Req#req.headers));
respond(S, Cfg, Req, large) -> simple(S, Cfg, Req, 200, [ct(octet)], cbench_roadrunner:large());
respond(S, Cfg, Req, cookies) ->
    simple(S, Cfg, Req, 200, [ct(json)], cbench_roadrunner:cookies_json(Req#req.headers));
respond(S, Cfg, Req = #req{method = M, headers = Hs, version = V}, ws) ->
    %% HTTP/1.1 only; the connection is the WebSocket's from the 101 on (cbench_ws).
    case {V, cbench_ws:check(M, Hs)} of
        {{1, 1}, 0} ->
            Accept = cbench_ws:accept(proplists:get_value(<<"sec-websocket-key">>, Hs)),
            Head = [<<"HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nupgrade: websocket\r\n"
                      "sec-websocket-accept: ">>, Accept, <<"\r\n\r\n">>],
            case finish(S, Cfg, Req, 101, 0, Head) of
                ok -> cbench_ws:serve(S, Cfg#cfg.max_body, Cfg#cfg.idle_timeout,
                                      fun(N) when N >= 0 -> echo_hold(Cfg, N);
                                         (N) -> echo_release(Cfg, -N)
                                      end);
                Error -> Error
            end;
        {_, 426} -> simple(S, Cfg, Req, 426, [{<<"sec-websocket-version">>, <<"13">>}], <<>>);
        _ ->
            bump(Cfg, ?STATUS_400),
            simple(S, Cfg, Req, 400, [], <<>>)
    end;
respond(S, Cfg, Req, gzip) ->
    Vary = {<<"vary">>, <<"accept-encoding">>},
    case cbench_roadrunner:accepts_gzip(Req#req.headers) of
        true -> simple(S, Cfg, Req, 200, [ct(json), {<<"content-encoding">>, <<"gzip">>}, Vary],
                       cbench_roadrunner:gzip_body(gzip));
        false -> simple(S, Cfg, Req, 200, [ct(json), Vary], cbench_roadrunner:gzip_body(identity))
    end;
respond(S, Cfg, Req = #req{target = <<"/fault/", Spec/binary>>}, fault) ->
    %% /fault/{kind}?params: the spec is the rest of the target (docs/faults.md).
    case cbench_fault:parse(Spec) of
        {ok, F = #{ms := Ms, max := Max}} when Ms =< 60000, Max =< 60000 ->
            Declared = fun() ->
                               Len = maps:get(length, F),
                               simple(S, Cfg, Req, 200, [ct(octet)], cbench_fixture:bytes(0, Len))
                       end,
            case cbench_fault:fires(F, fault_draw(route)) of
                true -> fault(S, Cfg, Req, F, 200, [ct(octet)], Declared, none, 60000);
                false -> Declared()
            end;
        _ ->
            %% Unparsable, or a time over /delay/'s bound (these parameters are the client's).
            bump(Cfg, ?STATUS_400),
            simple(S, Cfg, Req, 400, [], <<>>)
    end.

%% Answers with fault F (cbench_ehttpd_fault); Normal is the answer without it, Own the body a
%% pacing fault paces (none: `length' generated bytes), MaxDelay the bound of a drawn delay.
fault(S, Cfg, Req0, F = #{kind := Kind}, Status, Headers, Normal, Own, MaxDelay) ->
    %% A kind this connection cannot carry is answered 501 and counts as no fault: the HTTP/2 kinds,
    %% and the TLS kinds on a cleartext connection or where the TCP socket under the session cannot
    %% be reached (cbench_ehttpd_sock:has_raw/0).
    Carried = not cbench_fault:h2_only(Kind)
        andalso (not cbench_fault:tls_only(Kind) orelse
                 (not is_port(S) andalso cbench_ehttpd_sock:has_raw())),
    Req = case Carried of
              false -> Req0;
              true -> bump(Cfg, ?FAULTS), Req0#req{fault = Kind}
          end,
    cbench_ehttpd_fault:run(S, F, #{method => Req#req.method, mode => conn_mode(Req),
                                    http10 => Req#req.version =:= {1, 0},
                                    status => Status, headers => Headers,
                                    idle_ms => Cfg#cfg.idle_timeout,
                                    journal => fun(St, Bytes) -> journal(Cfg, Req, St, Bytes) end,
                                    normal => Normal, own => Own, max_delay_ms => MaxDelay}).

%% The n-th draw of a rate (from 0), node-wide for /fault/ and per stub for a stub's fault.
fault_draw(route) ->
    Ref = case persistent_term:get({?MODULE, fault_draws}, undefined) of
              undefined ->
                  C = atomics:new(1, []),
                  persistent_term:put({?MODULE, fault_draws}, C),
                  C;
              C -> C
          end,
    atomics:add_get(Ref, 1, 1) - 1;
fault_draw(Ref) ->
    atomics:add_get(Ref, 1, 1) - 1.

%% A fixed-size answer; 204 and 304 have neither body nor content-length.
simple(S, Cfg, Req, Status, Headers, _Body) when Status =:= 204; Status =:= 304 ->
    finish(S, Cfg, Req, Status, 0, cbench_http:head(Status, Headers, none, conn_mode(Req)));
simple(S, Cfg, Req, Status, Headers, Body) ->
    Size = iolist_size(Body),
    finish(S, Cfg, Req, Status, out(Req, Size),
           [cbench_http:head(Status, Headers, Size, conn_mode(Req)),
            body_unless_head(Req, Body)]).

streamed(S, Cfg, Req, Headers, Pieces) ->
    finish(S, Cfg, Req, 200, out(Req, iolist_size(Pieces)),
           [cbench_http:head(200, Headers, chunked, conn_mode(Req)),
            body_unless_head(Req, [[cbench_http:chunk(P) || P <- Pieces],
                                   cbench_http:last_chunk()])]).

%% File: a fixture's path, or {Path, Id} for a stub's (open_file/1). A file that cannot be opened
%% gets a 500 and a close before any byte of the answer.
send_file(S, Cfg, Req, Status, Headers, File, Size) ->
    Head = cbench_http:head(Status, Headers, Size, conn_mode(Req)),
    case {Req#req.method, Size} of
        {<<"HEAD">>, _} -> finish(S, Cfg, Req, Status, 0, Head);
        {_, 0} -> finish(S, Cfg, Req, Status, 0, Head);
        _ ->
            case open_file(File) of
                {ok, Fd} ->
                    try send(S, Head) of
                        ok ->
                            journal(Cfg, Req, Status, Size),
                            send_fd(S, Cfg, Fd, 0, Size);
                        Error -> Error
                    after
                        file:close(Fd)
                    end;
                {error, _} ->
                    error_close(S, Cfg, 500)
            end
    end.

%% A piece of a stub's file (never empty: cbench_spec:pieces/2 makes none).
sendfile(S, Cfg, File, Offset, Size) ->
    case open_file(File) of
        {ok, Fd} ->
            try send_fd(S, Cfg, Fd, Offset, Size)
            after
                file:close(Fd)
            end;
        Error -> Error
    end.

send_fd(S, Cfg, Fd, Offset, Size) ->
    case cbench_ehttpd_sock:sendfile(Fd, S, Offset, Size) of
        {ok, Size} when is_port(S) ->
            %% send_oct does not count what sendfile wrote (over TLS it counts the records).
            counters:add(Cfg#cfg.cnt, ?BYTES_WRITTEN, Size);
        {ok, Size} -> ok;
        {ok, _} -> {error, short_sendfile};
        Error -> Error
    end.

body_unless_head(#req{method = <<"HEAD">>}, _) -> <<>>;
body_unless_head(_, Body) -> Body.

%%% Stub responses

%% A stub's answer once the request's body is in: kept whole for a template that inserts it,
%% read and dropped otherwise.
stub_after_body(S, Cfg, Req, R = #{tpl_uses_body := true}) ->
    %% The body is held from the echo budget as it comes, in a capacity that doubles from 4 KiB
    %% (src/kinds/stub.c, tpl_body, as /echo's chunked body): over the budget the rest is read and
    %% dropped, and the answer is a 503; else it is given back once the answer is sent.
    Grow = fun(_Piece, refused) -> {ok, refused};
              (Piece, {Acc, Len, Cap}) ->
                   Len1 = Len + byte_size(Piece),
                   Cap1 = echo_capacity(Cfg, Len1, Cap),
                   case echo_hold(Cfg, Cap1 - Cap) of
                       ok -> {ok, {[Acc, Piece], Len1, Cap1}};
                       _Full -> echo_release(Cfg, Cap), {ok, refused}
                   end
           end,
    case body(S, Cfg, Req, Grow, {[], 0, 0}) of
        {ok, refused} -> simple(S, Cfg, Req, 503, [], <<>>);
        {ok, {B, _, Cap}} ->
            Result = stub(S, Cfg, Req#req{body = iolist_to_binary(B)}, R),
            echo_release(Cfg, Cap),
            Result;
        Error -> Error
    end;
stub_after_body(S, Cfg, Req, R = #{proxy := _}) ->
    %% A proxy stub reads the body itself, to forward it (proxy/5).
    stub(S, Cfg, Req, R);
stub_after_body(S, Cfg, Req, R) ->
    after_body(S, Cfg, Req, fun() -> stub(S, Cfg, Req, R) end).

%% A stub's answer: delay_ms, then the head (the user's headers in their order, then the framing)
%% and the body whole, or in `chunks' pieces `interval' apart (chunked over HTTP/1.1; raw pieces
%% ended by the close over HTTP/1.0). HEAD gets the head alone; 204 and 304 never carry a body.
stub(S, Cfg, Req, R = #{proxy := P}) ->
    proxy(S, Cfg, Req, R, P);
stub(S, Cfg, Req, R = #{fault_run := F, fault_draws := Draws, status := Status,
                        headers := Headers}) ->
    Normal = fun() -> stub(S, Cfg, Req, maps:without([fault_run], R)) end,
    Own = case own_size(R) of
              0 -> none;
              Size -> {Size, fun(Off, Len) -> own_bytes(file_body(R), Off, Len) end}
          end,
    case cbench_fault:fires(F, fault_draw(Draws)) of
        true -> fault(S, Cfg, Req, F, Status, Headers, Normal, Own, 3600000);
        false -> Normal()
    end;
stub(S, Cfg, Req0, R = #{status := Status, headers := Headers0, body := Body0, chunks := Chunks}) ->
    %% A proxied answer (proxy/5) waited its delay before it was fetched.
    {Delay, Wait} = case R of
                        #{delay_waited := W} -> {W, 0};
                        _ -> D = stub_delay(R), {D, D}
                    end,
    Wait > 0 andalso receive after Wait -> ok end,
    Req = Req0#req{delay_ms = Delay},
    %% A rendered answer is held from the echo budget while it is sent (src/kinds/stub.c,
    %% tpl_start): over the budget, a 503 instead.
    {Headers, Body, Held} = case R of
                                #{tpl_body := _} -> render(R, Req);
                                _ -> {Headers0, Body0, 0}
                            end,
    case echo_hold(Cfg, Held) of
        ok ->
            Result = stub_answer(S, Cfg, Req, R, Status, Headers, Body, Chunks),
            echo_release(Cfg, Held),
            Result;
        _Full ->
            simple(S, Cfg, Req, 503, [], <<>>)
    end.

stub_answer(S, Cfg, Req, R, Status, Headers, Body, Chunks) ->
    Size = case Body of
               {data, B} -> byte_size(B);
               {bytes, Bytes} -> Bytes;
               {file, _} -> maps:get(file_size, R)
           end,
    Head = fun(Framing, Mode) -> cbench_http:head(Status, Headers, Framing, Mode) end,
    case {Chunks, Req#req.method, Body} of
        _ when Status =:= 204; Status =:= 304 ->
            finish(S, Cfg, Req, Status, 0, Head(none, conn_mode(Req)));
        {none, <<"HEAD">>, _} ->
            finish(S, Cfg, Req, Status, 0, Head(Size, conn_mode(Req)));
        {none, _, {file, Path}} ->
            send_file(S, Cfg, Req, Status, Headers, {Path, maps:get(file_id, R)}, Size);
        {none, _, _} when map_get(trailers, R) =/= [], Req#req.version =/= {1, 0} ->
            %% A proxied chunked answer's trailer fields (proxy/5): the body goes as one chunk, the
            %% fields after the last one. An HTTP/1.0 client (no chunked coding) goes without them.
            finish(S, Cfg, Req, Status, Size,
                   [Head(chunked, conn_mode(Req)), cbench_http:chunk(slice(Body, 0, Size)), <<"0\r\n">>,
                    [[N, <<": ">>, V, <<"\r\n">>] || {N, V} <- maps:get(trailers, R)], <<"\r\n">>]);
        {none, _, _} ->
            finish(S, Cfg, Req, Status, Size, [Head(Size, conn_mode(Req)), slice(Body, 0, Size)]);
        {{N, Interval}, Method, _} ->
            %% HTTP/1.0 has no chunked coding: the pieces go raw and the close ends the body.
            Chunked = Req#req.version =/= {1, 0},
            H = case Chunked of
                    true -> Head(chunked, conn_mode(Req));
                    false -> Head(none, close)
                end,
            Sent = case Method of
                       <<"HEAD">> -> finish(S, Cfg, Req, Status, 0, H);
                       _ -> pieces(S, Cfg, Req, {Status, Size}, file_body(R), H,
                                   cbench_spec:pieces(Size, N), Interval, Chunked)
                   end,
            %% The head said `connection: close' to HTTP/1.0, even to one that asked to keep it.
            case {Sent, Chunked} of
                {ok, false} -> close;
                _ -> Sent
            end
    end.

%% A proxy stub (docs/proxy.md): the request's body is read whole and forwarded to the upstream
%% after the stub's delay (cbench_ehttpd_proxy); the upstream's answer is then sent as a stub's
%% own answer would be, whole, a fault of the stub applied to it. A failure before an answer is a
%% 502 or 504 with a text body that says why, as the C engine's.
proxy(S, Cfg, Req0, R, P) ->
    case body(S, Cfg, Req0, fun(Piece, Acc) -> {ok, [Acc | Piece]} end, []) of
        {ok, Body} ->
            Delay = stub_delay(R),
            Delay > 0 andalso receive after Delay -> ok end,
            Req = Req0#req{delay_ms = Delay},
            Fwd = #{method => Req#req.method, target => Req#req.target, headers => Req#req.headers,
                    body => Body, peer => peer_ip(S), host => <<>>},
            To = iolist_to_binary(maps:get(to, P)),
            bump(Cfg, ?PROXY_REQUESTS),
            case cbench_ehttpd_proxy:forward(P, Fwd, Cfg#cfg.tls =/= false) of
                {ok, Status, Headers, Answer0, Trailers, How} ->
                    %% A HEAD answer: the length the upstream declared, told the client as the head of
                    %% a generated body of that length (docs/proxy.md, "On the ehttpd engine").
                    {Answer, AnswerBody} = case Answer0 of
                                               {head_length, none} -> {<<>>, {data, <<>>}};
                                               {head_length, N} -> {<<>>, {bytes, N}};
                                               _ -> {Answer0, {data, Answer0}}
                                           end,
                    bump(Cfg, case How of reused -> ?PROXY_REUSED; connected -> ?PROXY_CONNECTS end),
                    Up = Req#req{upstream = #{to => To, status => Status, error => none}},
                    _ = maps:get(record, P, false) andalso
                        cbench_ehttpd_record:record(Cfg#cfg.recorder, P,
                                                    #{method => Req#req.method, target => Req#req.target,
                                                      req_headers => Req#req.headers, status => Status,
                                                      res_headers => Headers, body => Answer}),
                    Own = maps:with([fault_run, fault_draws], R),
                    stub(S, Cfg, Up, Own#{status => Status, headers => Headers, body => AnswerBody,
                                          chunks => none, delay_ms => Delay, delay_waited => Delay,
                                          trailers => Trailers});
                {error, Status, Why} ->
                    bump(Cfg, case Status of 504 -> ?PROXY_504; _ -> ?PROXY_502 end),
                    Text = iolist_to_binary([<<"cbench proxy: ">>, cbench_ehttpd_proxy:why_text(Why),
                                             <<" (">>, To, <<")\n">>]),
                    Failed = Req#req{upstream = #{to => To, status => 0,
                                                  error => cbench_ehttpd_proxy:journal_why(Why)}},
                    Head = cbench_http:head(Status, [{<<"content-type">>, <<"text/plain">>}],
                                            byte_size(Text), conn_mode(Failed)),
                    finish(S, Cfg, Failed, Status, byte_size(Text),
                           [Head, body_unless_head(Failed, Text)])
            end;
        Error -> Error
    end.

%% The client's address without its port, for x-forwarded-for.
peer_ip(S) ->
    case cbench_ehttpd_sock:peername(S) of
        {ok, {Ip, _}} -> list_to_binary(inet:ntoa(Ip));
        _ -> <<>>
    end.

%% A template rendered for Req (src/kinds/template.c does the same): each placeholder replaced by the
%% request's value, escaped nowhere, a missing one empty; in a header value, the inserted bytes a
%% field value cannot hold (control bytes but HTAB) are left out, the value is cut at 8192 bytes
%% and trimmed of spaces and tabs at its ends. A header value is rendered only up to the cut, so one
%% that repeats {{body}} never builds more than it sends.
render(R = #{tpl_body := BodyT, tpl_headers := HeadersT, tpl_seq := A, tpl_path := Pattern}, Req) ->
    Seq = atomics:add_get(A, 1, 1),
    {Path, Query} = split_target(Req#req.target),
    Ctx = {Req, params(Pattern, Path), Query, Seq},
    Values = [{N, header_value(T, Ctx, ?TPL_MAX_VALUE, [])} || {N, T} <- HeadersT],
    Body = iolist_to_binary([value(P, Ctx) || P <- BodyT]),
    %% What src/kinds/stub.c holds from the echo budget for it: the header values as rendered
    %% (before the trim), and the body unless the answer carries none.
    Sent = case {maps:get(status, R), Req#req.method} of
               {St, _} when St =:= 204; St =:= 304 -> 0;
               {_, <<"HEAD">>} -> 0;
               _ -> byte_size(Body)
           end,
    {[{N, edge_trim(V)} || {N, V} <- Values], {data, Body},
     lists:sum([byte_size(V) || {_, V} <- Values]) + Sent}.

%% A header value's pieces, Room bytes at most in all.
header_value([P | T], Ctx, Room, Acc) when Room > 0 ->
    V = case P of
            Lit when is_binary(Lit) -> binary:part(Lit, 0, min(Room, byte_size(Lit)));
            _ -> field_bytes(value(P, Ctx), Room, <<>>)
        end,
    header_value(T, Ctx, Room - byte_size(V), [V | Acc]);
header_value(_, _Ctx, _Room, Acc) ->
    iolist_to_binary(lists:reverse(Acc)).

%% The first Room bytes of V that a field value can hold (control bytes but HTAB are left out).
field_bytes(<<C, Rest/binary>>, Room, Acc) when Room > 0 ->
    case C >= 32 andalso C =/= 127 orelse C =:= $\t of
        true -> field_bytes(Rest, Room - 1, <<Acc/binary, C>>);
        false -> field_bytes(Rest, Room, Acc)
    end;
field_bytes(_, _Room, Acc) -> Acc.

params({segments, Segs}, <<"/", Rest/binary>>) ->
    [{N, V} || {{param, N}, V} <- lists:zip(Segs, binary:split(Rest, <<"/">>, [global]))];
params(_, _) -> [].

value(Lit, _Ctx) when is_binary(Lit) -> Lit;
value(method, {Req, _, _, _}) -> Req#req.method;
value(body, {Req, _, _, _}) -> Req#req.body;
value(seq, {_, _, _, Seq}) -> integer_to_binary(Seq);
value({path, N}, {_, Params, _, _}) -> proplists:get_value(N, Params, <<>>);
value({query, N}, {_, _, Query, _}) -> proplists:get_value(N, cbench_router:query_fields(Query), <<>>);
value({header, N}, {Req, _, _, _}) -> proplists:get_value(N, Req#req.headers, <<>>).

edge_trim(V) -> cbench_http:trim_ows(V).

%% A stub's delay: delay_ms, or the n-th draw of its distribution (the n-th answer of this
%% response, over every connection), as the delay fault draws (cbench_fault:delay_ms/3) and as
%% src/kinds/stub.c does, so that a seed gives the same delays on every engine.
stub_delay(#{delay_run := F, delay_draws := A}) ->
    cbench_fault:delay_ms(F, atomics:add_get(A, 1, 1) - 1, 3600000);
stub_delay(#{delay_ms := Ms}) -> Ms.

%% The head goes with the first piece, each next piece `Interval' ms after the one before, the
%% last chunk with the last piece (journaled just before that write). Answer is {Status, Size}.
pieces(S, Cfg, Req, {Status, _}, _Body, Head, [], _Interval, Chunked) ->
    finish(S, Cfg, Req, Status, 0, [Head, last_chunk(Chunked)]);
pieces(S, Cfg, Req, Answer, Body, Head, [{Off, Len} | Rest], Interval, Chunked) ->
    End = case Rest of
              [] -> last_chunk(Chunked);
              _ -> <<>>
          end,
    Sent = case Body of
               {file, Path} ->
                   %% sendfile writes the piece; its chunk framing goes around it.
                   {Pre, Post} = case Chunked of
                                     true -> {chunk_size_line(Len), <<"\r\n">>};
                                     false -> {<<>>, <<>>}
                                 end,
                   then(send(S, [Head, Pre]),
                        fun() -> then(sendfile(S, Cfg, Path, Off, Len),
                                      fun() -> last_or_send(S, Cfg, Req, Answer, Rest,
                                                            [Post, End]) end)
                        end);
               _ ->
                   last_or_send(S, Cfg, Req, Answer, Rest,
                                [Head, framed(Body, Off, Len, Chunked), End])
           end,
    case {Sent, Rest} of
        {ok, []} -> ok;
        {ok, _} ->
            receive after Interval -> ok end,
            pieces(S, Cfg, Req, Answer, Body, <<>>, Rest, Interval, Chunked);
        {Error, _} -> Error
    end.

%% A piece as chunks: one for given bytes, one per ?GEN_SPAN bytes of generated content (as the C
%% engine writes it); raw over HTTP/1.0.
framed(Body, Off, Len, false) -> slice(Body, Off, Len);
framed({data, _} = Body, Off, Len, true) -> chunk(slice(Body, Off, Len), Len);
framed({bytes, _}, Off, Len, true) when Len > ?GEN_SPAN ->
    [chunk(cbench_fixture:bytes(Off, ?GEN_SPAN), ?GEN_SPAN)
     | framed({bytes, 0}, Off + ?GEN_SPAN, Len - ?GEN_SPAN, true)];
framed({bytes, _}, Off, Len, true) -> chunk(cbench_fixture:bytes(Off, Len), Len).

chunk(Data, Len) -> [chunk_size_line(Len), Data, <<"\r\n">>].

chunk_size_line(Len) -> [cbench_http:lower(integer_to_binary(Len, 16)), <<"\r\n">>].

last_or_send(S, Cfg, Req, {Status, Size}, [], Data) -> finish(S, Cfg, Req, Status, Size, Data);
last_or_send(S, _Cfg, _Req, _Answer, _More, Data) -> send(S, Data).

last_chunk(true) -> cbench_http:last_chunk();
last_chunk(false) -> <<>>.

then(ok, Next) -> Next();
then(Error, _) -> Error.

%% Len bytes of a body from offset Off (generated content is sliced from a shared block).
%% @doc The size of a stub's own body (0 for none, and for 204 and 304, which carry none).
-spec own_size(cbench_spec:canon_response()) -> non_neg_integer().
own_size(#{proxy := _}) -> 0; %% unknown until the upstream answers: a fault keeps its own length
own_size(#{status := Status}) when Status =:= 204; Status =:= 304 -> 0;
own_size(#{body := {data, B}}) -> byte_size(B);
own_size(#{body := {bytes, N}}) -> N;
own_size(#{body := {file, _}, file_size := Size}) -> Size.

%% A stub's body, a file's with the identity its descriptor had when the stub was added.
file_body(#{body := {file, Path}, file_id := Id}) -> {file, {Path, Id}};
file_body(#{body := Body}) -> Body.

%% Opens a body file: a fixture's by its path; a stub's by its descriptor's path, checked to be the
%% file the stub was added with (a descriptor number the server reused after the stub went is not).
open_file({Path, Id}) ->
    case file:open(Path, [read, raw, binary]) of
        {ok, Fd} ->
            case file:read_file_info(Fd) of
                {ok, #file_info{type = regular, major_device = Dev, inode = Ino}} when {Dev, Ino} =:= Id ->
                    {ok, Fd};
                _ -> ok = file:close(Fd), {error, stub_file_gone}
            end;
        Error -> Error
    end;
open_file(Path) ->
    file:open(Path, [read, raw, binary]).

%% Bytes [Off, Off + Len) of a stub's own body (a file's read with pread).
own_bytes({file, File}, Off, Len) ->
    case open_file(File) of
        {ok, Fd} ->
            try file:pread(Fd, Off, Len) of
                {ok, B} -> B;
                _ -> <<>>
            after
                file:close(Fd)
            end;
        _ -> <<>>
    end;
own_bytes(Body, Off, Len) -> slice(Body, Off, Len).

slice({data, B}, Off, Len) -> binary_part(B, Off, Len);
slice({bytes, _}, Off, Len) -> cbench_fixture:bytes(Off, Len).

%%% Writing and the journal

send(S, Data) ->
    case cbench_ehttpd_sock:send(S, Data) of
        ok -> ok;
        {error, _} = E -> E
    end.

%% The body bytes a response sends: none to HEAD.
out(#req{method = <<"HEAD">>}, _Size) -> 0;
out(_Req, Size) -> Size.

%% The last write of a response: journaled first, so that a client that has read the response
%% finds its request in the journal. BodyBytes: the journal's bytes_out.
finish(S, Cfg, Req, Status, BodyBytes, Data) ->
    journal(Cfg, Req, Status, BodyBytes),
    send(S, Data).

%% Records the request. BodyBytes is the response body's size, or `request_body' for an echo.
journal(#cfg{journal = undefined}, _Req, _Status, _BodyBytes) -> ok;
journal(Cfg = #cfg{journal = J}, Req = #req{target = Target}, Status, BodyBytes) ->
    {Path, Query} = split_target(Target),
    {Kept, _, Total} = get(?BODY),
    Entry = #{time_us => Req#req.arrival, proto => proto(Cfg),
           conn => get(cbench_conn), stream => 0,
           peer => get(cbench_peer), method => Req#req.method, path => Path, query => Query,
           headers => Req#req.headers,
           body => iolist_to_binary(Kept), body_length => Total, route => Req#req.route,
           stub => Req#req.stub, status => Status, fault => Req#req.fault,
           %% The TLS map (docs/tls.md): undefined on a cleartext connection (nothing put).
           delay_ms => Req#req.delay_ms, tls => get(cbench_tls), upstream => Req#req.upstream,
           bytes_out => case BodyBytes of request_body -> Total; _ -> BodyBytes end,
           duration_us => erlang:monotonic_time(microsecond) - Req#req.t0},
    %% A request answered before its dispatch (a 413 on its declared length) is numbered now.
    Seq = case Req#req.seq of
              0 -> cbench_ehttpd_journal:next_seq(J);
              N -> N
          end,
    cbench_ehttpd_journal:record(J, Seq, Entry).

%% A TLS connection's byte counters before and after each answer: the session process that holds
%% them ends when the peer closes, before this process can read them (serve/2).
tls_octets(S) ->
    case ssl:getstat(S, [recv_oct, send_oct]) of
        {ok, [{recv_oct, R}, {send_oct, W}]} -> put(?TLS_OCTETS, {R, W});
        _ -> ok
    end.

proto(#cfg{tls = false}) -> http1;
proto(_) -> h1_tls.

%% Keeps the first journal_body_bytes of a request body for the journal.
keep_body(#cfg{journal = undefined}, _Piece) -> ok;
keep_body(#cfg{journal = J}, Piece) ->
    {Kept, KeptN, Total} = get(?BODY),
    Room = cbench_ehttpd_journal:body_bytes(J) - KeptN,
    Take = min(Room, byte_size(Piece)),
    Kept1 = case Take of
                0 -> Kept;
                _ -> [Kept, binary:copy(binary_part(Piece, 0, Take))]
            end,
    put(?BODY, {Kept1, KeptN + Take, Total + byte_size(Piece)}).

%% A request that fails while its body is read: the error answer, or, when the answer has already
%% begun (a streamed echo), a close without a second status.
fail(S, Cfg, #req{started = true}, Status) ->
    bump_status(Cfg, Status),
    _ = cbench_ehttpd_sock:shutdown(S, write),
    {error, closed};
fail(S, Cfg, _Req, Status) ->
    error_close(S, Cfg, Status).

%% An error answer, then a lingering close: shut our side, drop what the peer still sends for a
%% short while, so that it reads the answer instead of a reset.
error_close(S, Cfg, Status) ->
    bump_status(Cfg, Status),
    _ = cbench_ehttpd_sock:send(S, cbench_http:head(Status, [], 0, close)),
    linger(S).

%% A lingering close: our side shut, what the peer still sends dropped for a short while.
linger(S) ->
    _ = cbench_ehttpd_sock:shutdown(S, write),
    _ = cbench_ehttpd_sock:setopts(S, [{packet, raw}]),
    Deadline = erlang:monotonic_time(millisecond) + ?LINGER_MS,
    drain(S, Deadline),
    {error, closed}.

bump_status(Cfg, 400) -> bump(Cfg, ?STATUS_400);
bump_status(Cfg, 413) -> bump(Cfg, ?STATUS_413);
bump_status(Cfg, 431) -> bump(Cfg, ?STATUS_431);
bump_status(_Cfg, _) -> ok.

drain(S, Deadline) ->
    Left = Deadline - erlang:monotonic_time(millisecond),
    case Left > 0 andalso cbench_ehttpd_sock:recv(S, 0, Left) of
        {ok, _} -> drain(S, Deadline);
        _ -> ok
    end.
