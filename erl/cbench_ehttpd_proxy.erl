%%% @doc The ehttpd engine's proxy (docs/proxy.md): forwards one request to an HTTP/1.1 upstream on
%%% a plain gen_tcp socket and reads the whole answer, within the proxy's limits. With
%%% `protocol => h2c' the request goes as a stream of cbench_h2_upstream's HTTP/2 client instead
%%% (h2 by ALPN for an https:// upstream), with the same fields in HTTP/2's form, the same limits
%%% and failures, and its answer filtered as an HTTP/1.1 one is.
%%%
%%% The C engine streams a proxied answer as it arrives; ehttpd reads it whole first (its stub answers
%%% are whole binaries), so an answer costs its body's size in the connection's process, bounded by
%%% `max_body_bytes'. The upstream head is framed with erlang:decode_packet/3's http_bin (as ehttpd
%%% reads its own requests), at most ?MAX_HEAD bytes and ?MAX_HEADERS fields; the body by its
%%% content-length, by chunks (the trailer fields kept, but hop-by-hop and framing ones), or up to
%%% the close.
%%%
%%% Connections: each client connection process keeps one kept-alive upstream socket per upstream in
%%% its process dictionary, reused after a complete answer whose framing allows it, and closed with
%%% the process. A reused socket that the upstream closed meanwhile fails before any byte of the
%%% answer: the request is then sent once more on a new connection (it never reached the upstream).
%%% `pipeline' (cbench_spec checks it as for the C engines) is taken and not acted on: a client
%%% connection's process sends its next request only once the last answer was read, so a socket has
%%% at most one request in flight (docs/proxy.md, "Pipelining").
%%%
%%% An https:// upstream is spoken to with OTP's ssl (ssl:connect/4): ALPN http/1.1, SNI the host
%%% of `to' or `server_name' (none for an IP literal), the peer verified unless `insecure' against
%%% `ca_pem', `ca_file' or the system's CAs (public_key:cacerts_get/0), the name checked with
%%% public_key's https match function. The kept socket's key holds the verification settings, so
%%% that stubs that verify differently never share one. A failed handshake is
%%% `{error, 502, {tls, Reason}}', Reason OTP's alert (`unknown_ca', `handshake_failure',
%%% `certificate_expired'...) or `connection closed' / `connection reset'.
%%%
%%% Failures are `{error, Status, Why}': 504 when the upstream did not connect or answer within
%%% `timeout_ms', 502 for the rest, with the same reasons as the C engine's proxy.
-module(cbench_ehttpd_proxy).

-export([forward/3, upstream/1, request_head/2, forwarded_headers/3, answer_headers/1, why_text/1,
         journal_why/1, h2_fields/2, to_authority/1]).
%% The pure pieces of forward/3, exported for their unit tests (test/cbench_ehttpd_proxy_tests.erl).
-ignore_xref([{upstream, 1}, {request_head, 2}, {forwarded_headers, 3}, {answer_headers, 1},
              {h2_fields, 2}, {to_authority, 1}]).

-define(MAX_HEAD, 65536).
-define(MAX_HEADERS, 128).
-define(MAX_CHUNK_LINE, 4096).
-define(DEFAULT_TIMEOUT, 10000).
-define(DEFAULT_MAX_BODY, 1073741824).

-type why() :: refused | reset | timeout | bad_response | head_too_big | body_too_big | truncated
             | {tls, binary()}.
-type req() :: #{method := binary(), target := binary(), headers := [{binary(), binary()}],
                 body := iodata(), peer := binary(), host := binary()}.
-export_type([why/0, req/0]).

%% @doc Forwards Req to the proxy's upstream: the answer's status, headers (without hop-by-hop
%% and framing ones), body and trailer fields (of a chunked answer, without hop-by-hop and framing
%% ones), and whether it came on a kept connection (`reused') or a new one (`connected'); or the
%% status a failure is answered with and why. A HEAD request's answer has no body: in its place
%% the length the upstream declared (`{head_length, N}', `none' without a valid content-length),
%% which the client is told as the C engines tell it.
-spec forward(map(), req(), boolean()) ->
          {ok, pos_integer(), [{binary(), binary()}], binary() | {head_length, non_neg_integer() | none},
           [{binary(), binary()}], reused | connected}
          | {error, 502 | 504, why()}.
forward(Proxy = #{protocol := h2c}, Req, Tls) ->
    h2_forward(Proxy, Req, Tls);
forward(Proxy, Req, Tls) ->
    {Host, Port, Prefix} = upstream(maps:get(to, Proxy)),
    Timeout = maps:get(timeout_ms, Proxy, ?DEFAULT_TIMEOUT),
    MaxBody = maps:get(max_body_bytes, Proxy, ?DEFAULT_MAX_BODY),
    Authority = authority(Host, Port, https(Proxy)),
    Data = [request_head(Req#{target := <<Prefix/binary, (maps:get(target, Req))/binary>>},
                         #{authority => Authority, tls => Tls}),
            maps:get(body, Req)],
    Head = maps:get(method, Req) =:= <<"HEAD">>,
    Key = {?MODULE, Host, Port, tls_key(Proxy)},
    case get(Key) of
        undefined -> fresh(Key, Proxy, Host, Port, Data, Head, Timeout, MaxBody);
        Sock ->
            case exchange(Sock, Data, Head, Timeout, MaxBody) of
                {error, stale} ->
                    erase(Key),
                    fresh(Key, Proxy, Host, Port, Data, Head, Timeout, MaxBody);
                Result -> keep(Key, Sock, Result, reused)
            end
    end.

fresh(Key, Proxy, Host, Port, Data, Head, Timeout, MaxBody) ->
    case connect(Proxy, Host, Port, Timeout, <<"http/1.1">>) of
        {ok, Sock} ->
            case exchange(Sock, Data, Head, Timeout, MaxBody) of
                {error, stale} -> close(Sock), {error, 502, reset};
                Result -> keep(Key, Sock, Result, connected)
            end;
        Error -> Error
    end.

%% A connection to the upstream: gen_tcp, or ssl offering Alpn alone (docs/proxy.md "https
%% upstreams"); over ssl, h2 must have been chosen (an upstream that ignored the offer speaks
%% something else).
connect(Proxy, Host, Port, Timeout, Alpn) ->
    Opts = [binary, {active, false}, {nodelay, true}, {packet, raw}],
    Https = https(Proxy),
    Connected = case Https of
                    true -> ssl:connect(binary_to_list(Host), Port, Opts ++ tls_opts(Proxy, Host, Alpn), Timeout);
                    false -> gen_tcp:connect(binary_to_list(Host), Port, Opts, Timeout)
                end,
    case Connected of
        {ok, Sock} when Https, Alpn =:= <<"h2">> ->
            case ssl:negotiated_protocol(Sock) of
                {ok, <<"h2">>} -> {ok, Sock};
                _ ->
                    ssl:close(Sock),
                    {error, 502, {tls, <<"the upstream did not choose h2 by ALPN">>}}
            end;
        {ok, Sock} -> {ok, Sock};
        {error, timeout} -> {error, 504, timeout};
        {error, econnrefused} -> {error, 502, refused};
        {error, Why} when Https -> {error, 502, {tls, tls_reason(Why)}};
        {error, _} -> {error, 502, refused}
    end.

%% The h2c path (cbench_h2_upstream): the same forwarded fields in HTTP/2's form (h2_fields/2),
%% the connection kept under a key of its own so that it never meets an HTTP/1.1 socket to the
%% same upstream; the answer's fields and trailer fields filtered as an HTTP/1.1 answer's are.
h2_forward(Proxy, Req, Tls) ->
    To = iolist_to_binary(maps:get(to, Proxy)),
    {Host, Port, Prefix} = upstream(To),
    Timeout = maps:get(timeout_ms, Proxy, ?DEFAULT_TIMEOUT),
    Body = iolist_to_binary(maps:get(body, Req)),
    H2Req = #{method => maps:get(method, Req), path => <<Prefix/binary, (maps:get(target, Req))/binary>>,
              scheme => case https(Proxy) of true -> <<"https">>; false -> <<"http">> end,
              authority => to_authority(To), fields => h2_fields(Req#{body := Body}, Tls), body => Body},
    Connect = fun() -> connect(Proxy, Host, Port, Timeout, <<"h2">>) end,
    Key = {cbench_h2_upstream, Host, Port, tls_key(Proxy)},
    Lim = #{timeout => Timeout, max_body => maps:get(max_body_bytes, Proxy, ?DEFAULT_MAX_BODY)},
    case cbench_h2_upstream:request(Key, Connect, H2Req, Lim) of
        {ok, Status, Headers, Answer0, Trailers, How} ->
            Drop = [<<"content-length">>, <<"date">> | hop_by_hop()],
            Answer = case maps:get(method, Req) of
                         <<"HEAD">> -> {head_length, head_length(header(<<"content-length">>, Headers))};
                         _ -> Answer0
                     end,
            {ok, Status, answer_headers(Headers), Answer,
             [{N, V} || {N, V} <- Trailers, not lists:member(N, Drop)], How};
        Error -> Error
    end.

%% @doc The request's fields as an h2c upstream gets them (src/kinds/proxy.c cb__px_h2_fields):
%% those forwarded_headers/3 keeps (no hop-by-hop field, so no `te' either, no `host': the
%% authority is `:authority'), names lowercase as HTTP/2 wants them, then `content-length' when
%% the request had a body or declared one (ehttpd has it whole), then the x-forwarded-* fields.
-spec h2_fields(req(), boolean()) -> [{binary(), binary()}].
h2_fields(Req = #{headers := Headers, body := Body}, Tls) ->
    {Kept0, Added} = forwarded(Headers, Req, Tls),
    Kept = [{string:lowercase(N), V} || {N, V} <- Kept0],
    Framed = lists:keymember(<<"content-length">>, 1, Headers)
        orelse lists:keymember(<<"transfer-encoding">>, 1, Headers) orelse iolist_size(Body) > 0,
    Length = [{<<"content-length">>, integer_to_binary(iolist_size(Body))} || Framed],
    Kept ++ Length ++ Added.

%% @doc The authority of `to' as written (`host:port', `[v6]:port' or `host'): the C engine's
%% `:authority' for an h2c upstream.
-spec to_authority(binary()) -> binary().
to_authority(To) ->
    [_Scheme, Rest] = binary:split(To, <<"://">>),
    hd(binary:split(Rest, <<"/">>)).

https(Proxy) ->
    To = iolist_to_binary(maps:get(to, Proxy)),
    string:lowercase(binary:part(To, 0, min(8, byte_size(To)))) =:= <<"https://">>.

%% What keys a kept socket beside the address: none for http://, the verification settings for https://.
tls_key(Proxy) ->
    case https(Proxy) of
        false -> none;
        true -> maps:with([insecure, server_name, ca_file, ca_pem], Proxy)
    end.

%% ssl:connect/4's options for an https:// upstream (docs/proxy.md "https upstreams"), offering
%% the one protocol the stub speaks by ALPN.
tls_opts(Proxy, Host, Alpn) ->
    Name = binary_to_list(iolist_to_binary(maps:get(server_name, Proxy, Host))),
    Sni = case inet:parse_address(Name) of
              {ok, _} -> [{server_name_indication, disable}];
              _ -> [{server_name_indication, Name}]
          end,
    Verify = case maps:get(insecure, Proxy, false) of
                 true -> [{verify, verify_none}];
                 false ->
                     Cas = case Proxy of
                               #{ca_pem := Pem} ->
                                   {cacerts, [Der || {'Certificate', Der, _} <- public_key:pem_decode(
                                                                                  iolist_to_binary(Pem))]};
                               #{ca_file := File} -> {cacertfile, binary_to_list(iolist_to_binary(File))};
                               _ -> {cacerts, public_key:cacerts_get()}
                           end,
                     [{verify, verify_peer}, Cas,
                      {customize_hostname_check,
                       [{match_fun, public_key:pkix_verify_hostname_match_fun(https)}]}]
             end,
    Sni ++ Verify ++ [{versions, ['tlsv1.3', 'tlsv1.2']}, {alpn_advertised_protocols, [Alpn]}].

tls_reason({tls_alert, {Alert, _}}) when is_atom(Alert) -> atom_to_binary(Alert);
tls_reason(closed) -> <<"connection closed">>;
tls_reason(econnreset) -> <<"connection reset">>;
tls_reason(Other) -> iolist_to_binary(io_lib:format("~0P", [Other, 8])).

send(Sock, Data) when is_port(Sock) -> gen_tcp:send(Sock, Data);
send(Sock, Data) -> ssl:send(Sock, Data).

close(Sock) when is_port(Sock) -> gen_tcp:close(Sock);
close(Sock) -> ssl:close(Sock).

keep(Key, Sock, {ok, Status, Headers, Body, Trailers, true}, How) ->
    put(Key, Sock),
    {ok, Status, Headers, Body, Trailers, How};
keep(Key, Sock, {ok, Status, Headers, Body, Trailers, false}, How) ->
    erase(Key),
    close(Sock),
    {ok, Status, Headers, Body, Trailers, How};
keep(Key, Sock, Error, _How) ->
    erase(Key),
    close(Sock),
    Error.

%% One request and its answer on Sock: {ok, Status, Headers, Body, Trailers, Reusable}, {error, stale} when
%% the socket failed before the first byte of the answer, or the failure.
exchange(Sock, Data, Head, Timeout, MaxBody) ->
    case send(Sock, Data) of
        ok ->
            case recv(Sock, 0, Timeout) of
                {ok, First} -> answer(Sock, First, Head, Timeout, MaxBody);
                {error, timeout} -> {error, 504, timeout};
                {error, _} -> {error, stale}
            end;
        {error, _} -> {error, stale}
    end.

recv(Sock, N, Timeout) when is_port(Sock) -> gen_tcp:recv(Sock, N, Timeout);
recv(Sock, N, Timeout) -> ssl:recv(Sock, N, Timeout).

%% The head: a status line and header fields, framed by decode_packet on the bytes so far.
answer(Sock, Buf, Head, Timeout, MaxBody) ->
    case head(Sock, Buf, Timeout) of
        {ok, {101, _Version, _Headers}, _Rest} ->
            %% A switch of protocols: the proxy carries no upgrade (as the C engine's).
            {error, 502, bad_response};
        {ok, {Status, _Version, _Headers}, Rest} when Status >= 100, Status < 200 ->
            %% An interim answer (100 Continue, 103 Early Hints): the final one follows.
            answer(Sock, Rest, Head, Timeout, MaxBody);
        {ok, {Status, Version, Headers}, Rest} ->
            body(Sock, Status, Version, Headers, Rest, Head, Timeout, MaxBody);
        Error -> Error
    end.

head(Sock, Buf, Timeout) ->
    case erlang:decode_packet(http_bin, Buf, [{packet_size, ?MAX_HEAD}]) of
        {ok, {http_response, Version, Status, _}, Rest} when is_integer(Status), Status >= 100, Status =< 999 ->
            fields(Sock, Rest, Timeout, {Status, Version, []}, byte_size(Buf) - byte_size(Rest));
        {ok, _, _} -> {error, 502, bad_response};
        {more, _} when byte_size(Buf) >= ?MAX_HEAD -> {error, 502, head_too_big};
        {more, _} -> more(Sock, Buf, Timeout, fun(B) -> head(Sock, B, Timeout) end);
        {error, _} when byte_size(Buf) >= ?MAX_HEAD -> {error, 502, head_too_big};
        {error, _} -> {error, 502, bad_response}
    end.

fields(_Sock, _Buf, _Timeout, {_, _, Hs}, _Used) when length(Hs) > ?MAX_HEADERS ->
    {error, 502, head_too_big};
fields(_Sock, _Buf, _Timeout, _Acc, Used) when Used > ?MAX_HEAD ->
    {error, 502, head_too_big};
fields(Sock, Buf, Timeout, Acc = {Status, Version, Hs}, Used) ->
    case erlang:decode_packet(httph_bin, Buf, [{packet_size, ?MAX_HEAD}]) of
        {ok, http_eoh, Rest} -> {ok, {Status, Version, lists:reverse(Hs)}, Rest};
        {ok, {http_header, _, Name, _, Value}, Rest} ->
            fields(Sock, Rest, Timeout, {Status, Version, [{lower(Name), Value} | Hs]},
                   Used + byte_size(Buf) - byte_size(Rest));
        {ok, _, _} -> {error, 502, bad_response};
        {more, _} when Used + byte_size(Buf) >= ?MAX_HEAD -> {error, 502, head_too_big};
        {more, _} -> more(Sock, Buf, Timeout, fun(B) -> fields(Sock, B, Timeout, Acc, Used) end);
        {error, _} -> {error, 502, bad_response}
    end.

more(Sock, Buf, Timeout, Then) ->
    case recv(Sock, 0, Timeout) of
        {ok, More} -> Then(<<Buf/binary, More/binary>>);
        {error, timeout} -> {error, 504, timeout};
        {error, closed} -> {error, 502, truncated};
        {error, _} -> {error, 502, reset}
    end.

%% Byte by byte (cbench_http): string:lowercase/1 reads UTF-8 and raises badarg on obs-text.
lower(Name) when is_atom(Name) -> cbench_http:lower(atom_to_binary(Name, latin1));
lower(Name) -> cbench_http:lower(Name).

%% The body by its framing: none (HEAD, 1xx, 204, 304), chunked, content-length, or to the close.
body(Sock, Status, Version, Headers, Rest, Head, Timeout, MaxBody) ->
    Keep = keep_alive(Version, Headers),
    Out = answer_headers(Headers),
    TE = header(<<"transfer-encoding">>, Headers),
    CL = header(<<"content-length">>, Headers),
    if
        Head ->
            {ok, Status, Out, {head_length, head_length(CL)}, [], Keep andalso Rest =:= <<>>};
        Status =:= 204; Status =:= 304 ->
            {ok, Status, Out, <<>>, [], Keep andalso Rest =:= <<>>};
        TE =/= undefined ->
            case lower(TE) of
                <<"chunked">> ->
                    case chunks(Sock, Rest, Timeout, MaxBody, []) of
                        {ok, Body, Trailers, <<>>} -> {ok, Status, Out, Body, Trailers, Keep};
                        {ok, Body, Trailers, _} -> {ok, Status, Out, Body, Trailers, false};
                        Error -> Error
                    end;
                _ -> {error, 502, bad_response}
            end;
        CL =/= undefined ->
            case string:to_integer(CL) of
                {N, <<>>} when N >= 0, N > MaxBody -> {error, 502, body_too_big};
                {N, <<>>} when N >= 0 ->
                    case exact(Sock, Rest, N, Timeout) of
                        {ok, Body, <<>>} -> {ok, Status, Out, Body, [], Keep};
                        {ok, Body, _} -> {ok, Status, Out, Body, [], false};
                        Error -> Error
                    end;
                _ -> {error, 502, bad_response}
            end;
        true ->
            case to_close(Sock, Rest, Timeout, MaxBody) of
                {ok, Body} -> {ok, Status, Out, Body, [], false};
                Error -> Error
            end
    end.

exact(_Sock, Buf, N, _Timeout) when byte_size(Buf) >= N ->
    <<Body:N/binary, Rest/binary>> = Buf,
    {ok, Body, Rest};
exact(Sock, Buf, N, Timeout) ->
    case recv(Sock, 0, Timeout) of
        {ok, More} -> exact(Sock, <<Buf/binary, More/binary>>, N, Timeout);
        {error, timeout} -> {error, 502, timeout};
        {error, closed} -> {error, 502, truncated};
        {error, _} -> {error, 502, reset}
    end.

to_close(_Sock, Buf, _Timeout, MaxBody) when byte_size(Buf) > MaxBody -> {error, 502, body_too_big};
to_close(Sock, Buf, Timeout, MaxBody) ->
    case recv(Sock, 0, Timeout) of
        {ok, More} -> to_close(Sock, <<Buf/binary, More/binary>>, Timeout, MaxBody);
        {error, closed} -> {ok, Buf};
        {error, timeout} -> {error, 502, timeout};
        {error, _} -> {error, 502, reset}
    end.

%% Chunks: a size line (hex, extensions ignored), the bytes and CRLF; the last chunk, then trailer
%% lines up to an empty one: {ok, Body, Trailers, Rest}.
chunks(Sock, Buf, Timeout, MaxBody, Acc) ->
    case line(Sock, Buf, Timeout) of
        {ok, Line, Rest} ->
            [Hex | _] = binary:split(Line, <<";">>),
            case catch binary_to_integer(string:trim(Hex), 16) of
                0 -> trailers(Sock, Rest, Timeout, iolist_to_binary(lists:reverse(Acc)), []);
                N when is_integer(N), N > 0 ->
                    Size = iolist_size(Acc) + N,
                    if
                        Size > MaxBody -> {error, 502, body_too_big};
                        true ->
                            case exact(Sock, Rest, N + 2, Timeout) of
                                {ok, <<Data:N/binary, "\r\n">>, Rest2} ->
                                    chunks(Sock, Rest2, Timeout, MaxBody, [Data | Acc]);
                                {ok, _, _} -> {error, 502, bad_response};
                                Error -> Error
                            end
                    end;
                _ -> {error, 502, bad_response}
            end;
        Error -> Error
    end.

%% The trailer fields as the C engine passes them on (src/kinds/proxy.c, on_trailers): names as
%% sent, values without the spaces around them, hop-by-hop and framing ones left out; at most
%% ?MAX_HEADERS lines (past it: head_too_big), each `Name: Value' (else bad_response).
trailers(_Sock, _Buf, _Timeout, _Body, Acc) when length(Acc) > ?MAX_HEADERS ->
    {error, 502, head_too_big};
trailers(Sock, Buf, Timeout, Body, Acc) ->
    case line(Sock, Buf, Timeout) of
        {ok, <<>>, Rest} ->
            Drop = [<<"content-length">>, <<"date">> | hop_by_hop()],
            {ok, Body, [{N, V} || {N, V} <- lists:reverse(Acc),
                                  not lists:member(lower(N), Drop)], Rest};
        {ok, Line, Rest} ->
            case binary:split(Line, <<":">>) of
                [Name, Value] ->
                    case token(Name) andalso field_value(Value) of
                        true ->
                            trailers(Sock, Rest, Timeout, Body,
                                     [{Name, cbench_http:trim_ows(Value)} | Acc]);
                        false -> {error, 502, bad_response}
                    end;
                _ -> {error, 502, bad_response}
            end;
        Error -> Error
    end.

%% RFC 9110 5.1 and 5.5: a field name is a token; a value has no control byte but tab (a lone LF
%% passed on would end the client's head early).
token(<<>>) -> false;
token(Name) -> lists:all(fun tchar/1, binary_to_list(Name)).

tchar(C) when C >= $a, C =< $z; C >= $A, C =< $Z; C >= $0, C =< $9 -> true;
tchar(C) -> lists:member(C, "!#$%&'*+-.^_`|~").

field_value(V) -> not lists:any(fun(C) -> (C < 16#20 andalso C =/= $\t) orelse C =:= 16#7f end,
                                binary_to_list(V)).

line(Sock, Buf, Timeout) ->
    case binary:split(Buf, <<"\r\n">>) of
        [Line, Rest] -> {ok, Line, Rest};
        [_] when byte_size(Buf) > ?MAX_CHUNK_LINE -> {error, 502, head_too_big};
        [_] ->
            case recv(Sock, 0, Timeout) of
                {ok, More} -> line(Sock, <<Buf/binary, More/binary>>, Timeout);
                {error, timeout} -> {error, 502, timeout};
                {error, closed} -> {error, 502, truncated};
                {error, _} -> {error, 502, reset}
            end
    end.

keep_alive(Version, Headers) ->
    Conn = [cbench_http:lower(cbench_http:trim_ows(T))
            || V <- values(<<"connection">>, Headers), T <- binary:split(V, <<",">>, [global])],
    case Version of
        {1, 0} -> lists:member(<<"keep-alive">>, Conn);
        _ -> not lists:member(<<"close">>, Conn)
    end.

header(Name, Headers) ->
    case lists:keyfind(Name, 1, Headers) of
        {_, V} -> V;
        false -> undefined
    end.

values(Name, Headers) -> [V || {N, V} <- Headers, N =:= Name].

%% @doc "http[s]://host:port[/prefix]" as {Host, Port, Prefix} (the prefix without a trailing slash;
%% the port 80, or 443 for https, when none is given).
-spec upstream(iodata()) -> {binary(), inet:port_number(), binary()}.
upstream(To) ->
    #{host := Host} = U = uri_string:parse(iolist_to_binary(To)),
    Default = case string:lowercase(iolist_to_binary(maps:get(scheme, U, <<"http">>))) of
                  <<"https">> -> 443;
                  _ -> 80
              end,
    Port = maps:get(port, U, Default),
    Prefix = string:trim(maps:get(path, U, <<>>), trailing, "/"),
    {iolist_to_binary(Host), Port, iolist_to_binary(Prefix)}.

authority(Host, 80, false) -> Host;
authority(Host, 443, true) -> Host;
authority(Host, Port, _Https) ->
    H = case binary:match(Host, <<":">>) of
            nomatch -> Host;
            _ -> <<"[", Host/binary, "]">>
        end,
    <<H/binary, ":", (integer_to_binary(Port))/binary>>.

%% @doc The request head sent upstream: the method and target as received, `host' set to the
%% upstream's authority, the client's headers without hop-by-hop ones and without `host', then
%% the x-forwarded-* fields, and the body's framing (the body is read whole, so content-length).
-spec request_head(req(), #{authority := binary(), tls := boolean()}) -> iodata().
request_head(Req = #{method := Method, target := Target, headers := Headers, body := Body},
             #{authority := Authority, tls := Tls}) ->
    Len = iolist_size(Body),
    Framing = case {Len, Method} of
                  {0, M} when M =:= <<"GET">>; M =:= <<"HEAD">>; M =:= <<"DELETE">>;
                              M =:= <<"OPTIONS">>; M =:= <<"TRACE">> -> [];
                  _ -> [<<"content-length: ">>, integer_to_binary(Len), <<"\r\n">>]
              end,
    [Method, $\s, Target, <<" HTTP/1.1\r\nhost: ">>, Authority, <<"\r\n">>,
     [[N, <<": ">>, V, <<"\r\n">>] || {N, V} <- forwarded_headers(Headers, Req, Tls)],
     Framing, <<"\r\n">>].

%% @doc The client's headers as forwarded: hop-by-hop ones (RFC 9110 7.6.1, and those its
%% `connection' names), `host', `content-length' and `expect' dropped; then x-forwarded-for,
%% x-forwarded-proto and, when the request named a host, x-forwarded-host (as the C engines).
-spec forwarded_headers([{binary(), binary()}], map(), boolean()) -> [{binary(), binary()}].
forwarded_headers(Headers, Req, Tls) ->
    {Kept, Added} = forwarded(Headers, Req, Tls),
    Kept ++ Added.

%% The forwarded fields in two parts: the client's kept ones, and the x-forwarded-* ones added.
forwarded(Headers, Req, Tls) ->
    Named = [cbench_http:lower(cbench_http:trim_ows(T))
             || V <- values(<<"connection">>, Headers), T <- binary:split(V, <<",">>, [global])],
    Drop = [<<"host">>, <<"content-length">>, <<"expect">> | hop_by_hop()] ++ Named,
    Host = case header(<<"host">>, Headers) of
               undefined -> maps:get(host, Req, <<>>);
               H -> H
           end,
    {[{N, V} || {N, V} <- Headers, not lists:member(N, Drop)],
     [{<<"x-forwarded-for">>, maps:get(peer, Req)},
      {<<"x-forwarded-proto">>, case Tls of true -> <<"https">>; false -> <<"http">> end}
      | [{<<"x-forwarded-host">>, Host} || Host =/= <<>> orelse header(<<"host">>, Headers) =/= undefined]]}.

%% A declared content-length: digits only, else none.
head_length(undefined) -> none;
head_length(V) ->
    case re:run(V, <<"^[0-9]{1,18}$">>, [{capture, none}]) of
        match -> binary_to_integer(V);
        nomatch -> none
    end.

%% @doc The upstream's header fields as answered on: without hop-by-hop ones and without `date',
%% `content-length' and `transfer-encoding' (the engine writes its own).
-spec answer_headers([{binary(), binary()}]) -> [{binary(), binary()}].
answer_headers(Headers) ->
    Named = [cbench_http:lower(cbench_http:trim_ows(T))
             || V <- values(<<"connection">>, Headers), T <- binary:split(V, <<",">>, [global])],
    Drop = [<<"date">>, <<"content-length">> | hop_by_hop()] ++ Named,
    [{N, V} || {N, V} <- Headers, not lists:member(N, Drop)].

hop_by_hop() ->
    [<<"connection">>, <<"keep-alive">>, <<"proxy-connection">>, <<"te">>, <<"trailer">>,
     <<"transfer-encoding">>, <<"upgrade">>].

%% @doc What a 502 or 504 body says of a failure (the C engine's words).
-spec why_text(why()) -> binary().
why_text(refused) -> <<"connection refused">>;
why_text(reset) -> <<"connection reset">>;
why_text(timeout) -> <<"timeout">>;
why_text(bad_response) -> <<"bad response">>;
why_text(head_too_big) -> <<"response head too big">>;
why_text(body_too_big) -> <<"response body too big">>;
why_text(truncated) -> <<"connection closed before the answer ended">>;
why_text({tls, Reason}) -> <<"tls handshake failed: ", Reason/binary>>.

%% @doc The journal's `error' of a failure (`tls' for a failed handshake).
-spec journal_why(why()) -> atom().
journal_why({tls, _}) -> tls;
journal_why(Why) -> Why.
