%%% @doc The ehttpd engine's HTTP/2 client for proxy stubs with `protocol => h2c' (docs/proxy.md,
%%% "On the ehttpd engine"): prior knowledge (RFC 9113 3.3) on a gen_tcp socket, or h2 over an ssl
%%% socket whose ALPN chose it, owned by the calling connection process. OTP has no HTTP/2 client
%%% and Debian's cowlib no HPACK, so this is one, as small as the proxy needs.
%%%
%%% One stream at a time, synchronously: the request's HEADERS (and CONTINUATIONs) and its body as
%%% DATA within the peer's windows, then frames are read until the answer's END_STREAM. The answer
%%% is read whole, as cbench_ehttpd_proxy reads an HTTP/1.1 one: its status, fields, body (at most
%%% `max_body_bytes') and trailer fields. Interim (1xx) heads are skipped. Meanwhile SETTINGS are
%%% acknowledged, PINGs answered, WINDOW_UPDATEs open the send windows, and the receive windows
%%% are given back as DATA is read.
%%%
%%% The connection is kept in the process dictionary between requests (under the caller's key),
%%% with its HPACK decoder, next stream id, windows and any bytes read past the last answer, and
%%% closed with the process. It is not kept after a failure, a GOAWAY, or when the next stream id
%%% would pass 2^31-1.
%%%
%%% Failures are cbench_ehttpd_proxy's: `reset' (RST_STREAM, or the connection closed before any
%%% frame of the stream), `truncated' (closed after some), `bad_response' (any protocol violation,
%%% a PUSH_PROMISE, a malformed answer; a GOAWAY with the error's code is sent first),
%%% `head_too_big' (a header block over ?MAX_HEAD bytes, or decoding to more than ?MAX_HEADERS
%%% fields or ?MAX_HEAD bytes), `body_too_big', `timeout' (504 before the head, 502 after). A
%%% stream the upstream did not process (above a GOAWAY's last stream id, or refused with
%%% REFUSED_STREAM before any answer) is sent again once on a new connection, and so is one whose
%%% kept connection turned out closed.
-module(cbench_h2_upstream).

-export([request/4]).

-define(PREFACE, <<"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n">>).
-define(MAX_HEAD, 65536).
-define(MAX_HEADERS, 128).
%% Our receive window, for the connection and each stream: given back in WINDOW_UPDATEs each time
%% half of it has been read, so a long body flows without a round trip per 64 KiB.
-define(WINDOW, 1048576).
-define(MAX_WINDOW, 2147483647).
-define(MAX_STREAM_ID, 2147483647).
%% What we advertise and so what the upstream may send: the protocol's defaults.
-define(TABLE_SIZE, 4096).
-define(MAX_FRAME, 16384).

-define(DATA, 0).
-define(HEADERS, 1).
-define(PRIORITY, 2).
-define(RST_STREAM, 3).
-define(SETTINGS, 4).
-define(PUSH_PROMISE, 5).
-define(PING, 6).
-define(GOAWAY, 7).
-define(WINDOW_UPDATE, 8).
-define(CONTINUATION, 9).

-define(END_STREAM, 16#1).
-define(ACK, 16#1).
-define(END_HEADERS, 16#4).
-define(PADDED, 16#8).
-define(PRIORITY_FLAG, 16#20).

%% Error codes (RFC 9113 7).
-define(NO_ERROR, 0).
-define(PROTOCOL_ERROR, 1).
-define(FLOW_CONTROL_ERROR, 3).
-define(FRAME_SIZE_ERROR, 6).
-define(REFUSED_STREAM, 7).
-define(CANCEL, 8).
-define(COMPRESSION_ERROR, 9).

%% A connection: its socket, HPACK decoder, the next stream id, the send windows the peer gave
%% (the connection's, and the initial one of a stream), the peer's frame size, our connection
%% receive window and what of it was read but not given back yet, bytes read past the last frame,
%% and whether the peer's SETTINGS came (it must be its first frame) or a GOAWAY.
-record(c, {sock :: cbench_ehttpd_sock:socket(), dec :: cbench_hpack:decoder(), next = 1 :: pos_integer(),
            send_win = 65535 :: integer(), peer_init = 65535 :: integer(), peer_frame = ?MAX_FRAME :: pos_integer(),
            recv_win = ?WINDOW :: integer(), unacked = 0 :: non_neg_integer(), buf = <<>> :: binary(),
            settings = false :: boolean(), goaway = false :: boolean()}).

%% The stream: its id, where its answer is (head: none yet; body: after the final head; done),
%% the request body left to send (`sent' once END_STREAM went), its send window, its receive
%% window and what was read of it, the answer so far, whether the answer can have a body, its
%% content-length, a header block being put together from CONTINUATIONs, whether the request may
%% have run (a frame of it came, or a GOAWAY covered it), and the deadline of the next read
%% (monotonic ms).
-record(s, {id :: pos_integer(), phase = head :: head | body | done, left :: binary() | sent,
            send_win :: integer(), recv_win = ?WINDOW :: integer(), unacked = 0 :: non_neg_integer(),
            status = 0 :: non_neg_integer(), headers = [] :: [cbench_hpack:field()],
            body = [] :: iodata(), size = 0 :: non_neg_integer(), trailers = [] :: [cbench_hpack:field()],
            bodyless :: boolean(), length = none :: none | non_neg_integer(),
            block = none :: none | {non_neg_integer(), iodata(), non_neg_integer()},
            began = false :: boolean(), deadline :: integer(), timeout :: pos_integer(),
            max_body :: non_neg_integer()}).

-type request() :: #{method := binary(), scheme := binary(), authority := binary(), path := binary(),
                     fields := [{binary(), binary()}], body := binary()}.
-type limits() :: #{timeout := pos_integer(), max_body := non_neg_integer()}.
-type connect() :: fun(() -> {ok, cbench_ehttpd_sock:socket()} | {error, 502 | 504, cbench_ehttpd_proxy:why()}).
-type answer() :: {ok, pos_integer(), [{binary(), binary()}], binary(), [{binary(), binary()}], reused | connected}
                | {error, 502 | 504, cbench_ehttpd_proxy:why()}.
-export_type([request/0, limits/0]).

%% @doc Sends Req as one stream on the connection kept under Key (or on a new one from Connect)
%% and reads its answer whole: status, fields (names lowercase, as sent), body, trailer fields,
%% and whether the connection was `reused' or `connected'; or the failure.
-spec request(term(), connect(), request(), limits()) -> answer().
request(Key, Connect, Req, Lim) ->
    case erase(Key) of
        undefined -> fresh(Key, Connect, Req, Lim, 1);
        C ->
            case stream(C, [], Req, Lim, false) of
                %% A kept connection the upstream had closed, or a stream it did not process:
                %% the request never ran, so it goes once more on a new connection.
                retry -> fresh(Key, Connect, Req, Lim, 0);
                Result -> keep(Key, Result, reused)
            end
    end.

%% A new connection (its preface sent with the request); Retries: how many more new connections
%% a stream the upstream did not process may take.
fresh(Key, Connect, Req, Lim, Retries) ->
    case Connect() of
        {ok, Sock} ->
            C = #c{sock = Sock, dec = cbench_hpack:new_decoder(?TABLE_SIZE)},
            case stream(C, preface(), Req, Lim, true) of
                retry when Retries > 0 -> fresh(Key, Connect, Req, Lim, Retries - 1);
                retry -> {error, 502, reset};
                Result -> keep(Key, Result, connected)
            end;
        Error -> Error
    end.

%% A complete answer keeps its connection, unless the upstream said GOAWAY or the stream ids ran
%% out; the answer's own tuple loses the connection either way.
keep(Key, {ok, Status, Headers, Body, Trailers, C}, How) ->
    case C#c.goaway orelse C#c.next > ?MAX_STREAM_ID of
        true -> close(C, ?NO_ERROR);
        false -> put(Key, C)
    end,
    {ok, Status, Headers, Body, Trailers, How};
keep(_Key, Error, _How) -> Error.

%% Our side of the preface (RFC 9113 3.4): the magic, SETTINGS (no push, our table size, our
%% initial window) and the connection's window raised to ours. Sent with the first request; the
%% peer's SETTINGS are read as its first frame.
preface() ->
    Settings = <<2:16, 0:32, 1:16, ?TABLE_SIZE:32, 4:16, ?WINDOW:32>>,
    [?PREFACE, frame(?SETTINGS, 0, 0, Settings), frame(?WINDOW_UPDATE, 0, 0, <<0:1, (?WINDOW - 65535):31>>)].

%% One stream on C, after Preface on a new connection (Fresh): {ok, Status, Headers, Body,
%% Trailers, C} with C ready for the next, `retry' when the request never ran, or the failure (the
%% connection closed). Failures deep in the frames are thrown to here.
stream(C, Preface, Req = #{body := Body}, Lim = #{timeout := Timeout}, Fresh) ->
    Id = C#c.next,
    S = #s{id = Id, left = case Body of <<>> -> sent; _ -> Body end, send_win = C#c.peer_init,
           bodyless = maps:get(method, Req) =:= <<"HEAD">>, deadline = deadline(Timeout), timeout = Timeout,
           max_body = maps:get(max_body, Lim)},
    Head = headers_frames(Id, cbench_hpack:encode(fields(Req)), Body =:= <<>>, C#c.peer_frame),
    try
        send(C, [Preface, Head]),
        {C1, S1} = loop(C#c{next = Id + 2}, S),
        C2 = cancel_rest(C1, S1),
        {ok, S1#s.status, S1#s.headers, iolist_to_binary(S1#s.body), S1#s.trailers, C2}
    catch
        throw:retry -> close(C, ?NO_ERROR), retry;
        throw:stale when Fresh -> close(C, ?NO_ERROR), {error, 502, reset};
        throw:stale -> close(C, ?NO_ERROR), retry;
        throw:{fail, Status, Why, Code} -> close(C, Code), {error, Status, Why}
    end.

%% The request's header block: pseudo-fields first (RFC 9113 8.3.1), then the fields as given.
fields(#{method := M, scheme := Sc, authority := A, path := P, fields := Fs}) ->
    [{<<":method">>, M}, {<<":scheme">>, Sc}, {<<":authority">>, A}, {<<":path">>, P} | Fs].

%% HEADERS, then CONTINUATIONs when the block is over the peer's frame size (RFC 9113 6.10).
headers_frames(Id, Block, EndStream, Max) ->
    Bin = iolist_to_binary(Block),
    End = case EndStream of true -> ?END_STREAM; false -> 0 end,
    case byte_size(Bin) =< Max of
        true -> frame(?HEADERS, End bor ?END_HEADERS, Id, Bin);
        false ->
            <<First:Max/binary, Rest/binary>> = Bin,
            [frame(?HEADERS, End, Id, First) | continuations(Id, Rest, Max)]
    end.

continuations(Id, Bin, Max) when byte_size(Bin) =< Max -> [frame(?CONTINUATION, ?END_HEADERS, Id, Bin)];
continuations(Id, Bin, Max) ->
    <<Piece:Max/binary, Rest/binary>> = Bin,
    [frame(?CONTINUATION, 0, Id, Piece) | continuations(Id, Rest, Max)].

frame(Type, Flags, Id, Payload) ->
    [<<(iolist_size(Payload)):24, Type:8, Flags:8, 0:1, Id:31>>, Payload].

%% Until the answer ends: the body sent as far as the windows allow, then one frame read and
%% handled.
loop(C, S = #s{phase = done}) -> {C, S};
loop(C, S) ->
    {C1, S1} = push(C, S),
    {Type, Flags, Id, Payload, C2} = read_frame(C1, S1),
    {C3, S2} = handle(Type, Flags, Id, Payload, C2, S1),
    loop(C3, S2).

%% The request body as DATA frames of at most the peer's frame size, within both send windows
%% (RFC 9113 6.9); the last one ends the stream. What does not fit waits for WINDOW_UPDATE.
push(C, S = #s{left = sent}) -> {C, S};
push(C, S = #s{left = Left}) ->
    N = lists:min([byte_size(Left), C#c.peer_frame, C#c.send_win, S#s.send_win]),
    case N of
        _ when N =< 0 -> {C, S};
        _ ->
            <<Piece:N/binary, Rest/binary>> = Left,
            End = case Rest of <<>> -> ?END_STREAM; _ -> 0 end,
            send(C, frame(?DATA, End, S#s.id, Piece)),
            Left1 = case Rest of <<>> -> sent; _ -> Rest end,
            %% Bytes going out are progress: the wait for the next window starts again.
            push(C#c{send_win = C#c.send_win - N},
                 S#s{left = Left1, send_win = S#s.send_win - N, deadline = deadline(S#s.timeout)})
    end.

%% An answer that ended before the request's body did (RFC 9113 8.1 allows it): the rest is not
%% sent, and RST_STREAM (CANCEL) closes our side so the connection can take the next stream.
cancel_rest(C, #s{left = sent}) -> C;
cancel_rest(C, #s{id = Id}) ->
    send(C, frame(?RST_STREAM, 0, Id, <<?CANCEL:32>>)),
    C.

%% The next frame: its 9-byte header and payload, read as far as needed (RFC 9113 4.1). A frame
%% over the size we allow is a FRAME_SIZE_ERROR.
read_frame(C = #c{buf = <<Len:24, Type:8, Flags:8, _:1, Id:31, Rest/binary>>}, S) ->
    if
        Len > ?MAX_FRAME -> fail(bad_response, ?FRAME_SIZE_ERROR);
        byte_size(Rest) >= Len ->
            <<Payload:Len/binary, Buf/binary>> = Rest,
            {Type, Flags, Id, Payload, C#c{buf = Buf}};
        true -> read_frame(more(C, S), S)
    end;
read_frame(C, S) -> read_frame(more(C, S), S).

%% More bytes, until the stream's deadline: a timeout is a 504 before the answer's head, a 502
%% after it; a closed connection is `stale' when nothing of the stream came (the request may not
%% have reached the upstream), else the answer is cut.
more(C = #c{sock = Sock, buf = Buf}, S) ->
    Left = max(0, S#s.deadline - erlang:monotonic_time(millisecond)),
    case cbench_ehttpd_sock:recv(Sock, 0, Left) of
        {ok, Bytes} -> C#c{buf = <<Buf/binary, Bytes/binary>>};
        {error, timeout} when S#s.phase =:= head -> fail(504, timeout, ?NO_ERROR);
        {error, timeout} -> fail(502, timeout, ?NO_ERROR);
        {error, _} when not S#s.began -> throw(stale);
        {error, closed} -> fail(502, truncated, ?NO_ERROR);
        {error, _} -> fail(502, reset, ?NO_ERROR)
    end.

deadline(Timeout) -> erlang:monotonic_time(millisecond) + Timeout.

%% A failure of the stream: thrown to stream/5, which closes the connection with GOAWAY(Code).
-spec fail(cbench_ehttpd_proxy:why(), non_neg_integer()) -> no_return().
fail(Why, Code) -> fail(502, Why, Code).

-spec fail(502 | 504, cbench_ehttpd_proxy:why(), non_neg_integer()) -> no_return().
fail(Status, Why, Code) -> throw({fail, Status, Why, Code}).

send(#c{sock = Sock}, Data) ->
    case cbench_ehttpd_sock:send(Sock, Data) of
        ok -> ok;
        {error, _} -> throw(stale)
    end.

%% A GOAWAY with Code (best effort: the peer may be gone), then the socket closed.
close(#c{sock = Sock}, Code) ->
    _ = cbench_ehttpd_sock:send(Sock, frame(?GOAWAY, 0, 0, <<0:32, Code:32>>)),
    cbench_ehttpd_sock:close(Sock).

%% ---- frames ----

%% The peer's first frame must be SETTINGS (RFC 9113 3.4); a header block in pieces allows only
%% its CONTINUATIONs in between (6.10).
handle(Type, Flags, _Id, _Payload, #c{settings = false}, _S)
  when Type =/= ?SETTINGS; Flags band ?ACK =/= 0 ->
    fail(bad_response, ?PROTOCOL_ERROR);
handle(Type, _Flags, Id, _Payload, _C, #s{block = {_, _, _}, id = Sid})
  when Type =/= ?CONTINUATION; Id =/= Sid ->
    fail(bad_response, ?PROTOCOL_ERROR);
handle(?DATA, Flags, Id, Payload, C, S) -> data(Flags, Id, Payload, C, S);
handle(?HEADERS, Flags, Id, Payload, C, S) -> headers(Flags, Id, Payload, C, S);
handle(?CONTINUATION, Flags, _Id, Payload, C, S) -> continuation(Flags, Payload, C, S);
handle(?PRIORITY, _Flags, Id, Payload, C, S) when Id =/= 0, byte_size(Payload) =:= 5 -> {C, S};
handle(?RST_STREAM, _Flags, Id, <<Code:32>>, C, S) when Id =/= 0 -> rst_stream(Id, Code, C, S);
handle(?SETTINGS, Flags, 0, Payload, C, S) -> settings(Flags, Payload, C, S);
handle(?PING, Flags, 0, Payload = <<_:8/binary>>, C, S) -> ping(Flags, Payload, C, S);
handle(?GOAWAY, _Flags, 0, <<_:1, Last:31, _Code:32, _Debug/binary>>, C, S) -> goaway(Last, C, S);
handle(?WINDOW_UPDATE, _Flags, Id, <<_:1, Inc:31>>, C, S) -> window_update(Id, Inc, C, S);
handle(Type, _Flags, _Id, _Payload, C, S) when Type > ?CONTINUATION ->
    %% Frames of unknown types are ignored (RFC 9113 4.1, 5.5).
    {C, S};
handle(_Type, _Flags, _Id, _Payload, _C, _S) ->
    %% A PUSH_PROMISE (we said ENABLE_PUSH 0), a frame on the wrong stream or of the wrong size.
    fail(bad_response, ?PROTOCOL_ERROR).

%% DATA of our stream after its final head: padding removed, counted against both receive windows
%% (past one: FLOW_CONTROL_ERROR), within max_body_bytes; the windows given back at half.
data(Flags, Id, Payload, C, S = #s{id = Id, phase = body}) ->
    Data = unpad(Flags, Payload),
    N = byte_size(Payload),
    Size = S#s.size + byte_size(Data),
    if
        N > C#c.recv_win; N > S#s.recv_win -> fail(bad_response, ?FLOW_CONTROL_ERROR);
        S#s.bodyless, Data =/= <<>> -> fail(bad_response, ?PROTOCOL_ERROR);
        Size > S#s.max_body -> fail(body_too_big, ?NO_ERROR);
        true ->
            S1 = S#s{body = [S#s.body, Data], size = Size, recv_win = S#s.recv_win - N,
                     unacked = S#s.unacked + N, deadline = deadline(S#s.timeout), began = true},
            C1 = C#c{recv_win = C#c.recv_win - N, unacked = C#c.unacked + N},
            give_back(Flags band ?END_STREAM =/= 0, C1, ended(Flags, S1))
    end;
data(_Flags, _Id, _Payload, _C, _S) ->
    %% DATA before the head, after END_STREAM, or on another stream.
    fail(bad_response, ?PROTOCOL_ERROR).

%% WINDOW_UPDATEs for what was read, once half a window's worth is: the connection's always, the
%% stream's while it is open.
give_back(Ended, C, S) ->
    C1 = case C#c.unacked >= ?WINDOW div 2 of
             true -> window(C, 0, C#c.unacked), C#c{recv_win = C#c.recv_win + C#c.unacked, unacked = 0};
             false -> C
         end,
    S1 = case not Ended andalso S#s.unacked >= ?WINDOW div 2 of
             true -> window(C, S#s.id, S#s.unacked), S#s{recv_win = S#s.recv_win + S#s.unacked, unacked = 0};
             false -> S
         end,
    {C1, S1}.

window(C, Id, N) -> send(C, frame(?WINDOW_UPDATE, 0, Id, <<0:1, N:31>>)).

%% RFC 9113 6.1 and 6.2: a pad length byte, the padding after the data; padding as long as the
%% payload or longer is a PROTOCOL_ERROR.
unpad(Flags, Payload) when Flags band ?PADDED =:= 0 -> Payload;
unpad(_Flags, <<Pad, Rest/binary>>) when Pad =< byte_size(Rest) -> binary:part(Rest, 0, byte_size(Rest) - Pad);
unpad(_Flags, _Payload) -> fail(bad_response, ?PROTOCOL_ERROR).

%% END_STREAM: the answer is complete; its body must be as long as its content-length said (RFC
%% 9113 8.1.1), but for a HEAD, 204 or 304 answer.
ended(Flags, S) when Flags band ?END_STREAM =:= 0 -> S;
ended(_Flags, S = #s{bodyless = true}) -> S#s{phase = done};
ended(_Flags, S = #s{length = none}) -> S#s{phase = done};
ended(_Flags, S = #s{length = Len, size = Len}) -> S#s{phase = done};
ended(_Flags, _S) -> fail(bad_response, ?PROTOCOL_ERROR).

%% HEADERS of our stream: padding and priority removed; the block bounded by ?MAX_HEAD bytes,
%% complete with END_HEADERS or waiting for CONTINUATIONs.
headers(Flags, Id, Payload, C, S = #s{id = Id}) ->
    Frag = priority(Flags, unpad(Flags, Payload)),
    fragment(Flags, Flags, [], 0, Frag, C, S);
headers(_Flags, _Id, _Payload, _C, _S) -> fail(bad_response, ?PROTOCOL_ERROR).

priority(Flags, Frag) when Flags band ?PRIORITY_FLAG =:= 0 -> Frag;
priority(_Flags, <<_:5/binary, Frag/binary>>) -> Frag;
priority(_Flags, _Frag) -> fail(bad_response, ?FRAME_SIZE_ERROR).

continuation(Flags, Frag, C, S = #s{block = {HeadersFlags, Acc, Size}}) ->
    fragment(HeadersFlags, Flags, Acc, Size, Frag, C, S#s{block = none});
continuation(_Flags, _Frag, _C, _S) -> fail(bad_response, ?PROTOCOL_ERROR).

fragment(HeadersFlags, Flags, Acc, Size, Frag, C, S) ->
    Size1 = Size + byte_size(Frag),
    if
        Size1 > ?MAX_HEAD -> fail(head_too_big, ?NO_ERROR);
        Flags band ?END_HEADERS =:= 0 -> {C, S#s{block = {HeadersFlags, [Acc, Frag], Size1}, began = true}};
        true -> block(HeadersFlags, iolist_to_binary([Acc, Frag]), C, S#s{began = true})
    end.

%% A whole header block, decoded (a bad one is a COMPRESSION_ERROR for the connection, RFC 9113
%% 4.3): the answer's head, an interim head, or its trailer fields.
block(Flags, Block, C, S) ->
    case cbench_hpack:decode(Block, C#c.dec, {?MAX_HEADERS, ?MAX_HEAD}) of
        {ok, Fields, Dec} -> head(Flags, Fields, C#c{dec = Dec}, S);
        {error, too_big} -> fail(head_too_big, ?NO_ERROR);
        {error, compression} -> fail(bad_response, ?COMPRESSION_ERROR)
    end.

%% RFC 9113 8.3.2 and 8.5: a head has :status first and alone of the pseudo-fields; a 1xx one is
%% interim (never 101, and never with END_STREAM); trailer fields come with END_STREAM and no
%% pseudo-field.
head(Flags, [{<<":status">>, Code} | Fields], C, S = #s{phase = head}) ->
    End = Flags band ?END_STREAM =/= 0,
    case {status(Code), valid(Fields)} of
        {Status, true} when Status >= 100, Status < 200, Status =/= 101, not End -> {C, S};
        {Status, true} when Status >= 200 -> final(Flags, Status, Fields, C, S);
        _ -> fail(bad_response, ?PROTOCOL_ERROR)
    end;
head(Flags, Fields, C, S = #s{phase = body}) when Flags band ?END_STREAM =/= 0 ->
    case valid(Fields) of
        true -> {C, ended(Flags, S#s{trailers = Fields})};
        false -> fail(bad_response, ?PROTOCOL_ERROR)
    end;
head(_Flags, _Fields, _C, _S) -> fail(bad_response, ?PROTOCOL_ERROR).

status(<<A, B, C>>) when A >= $1, A =< $9, B >= $0, B =< $9, C >= $0, C =< $9 -> binary_to_integer(<<A, B, C>>);
status(_) -> 0.

%% The final head: its content-length (one value, digits only) checked against max_body_bytes
%% (past it: body_too_big before any DATA, as the C engine's), then the body or, with END_STREAM,
%% the end. A 204 or 304 has no body whatever it says.
final(Flags, Status, Fields, C, S) ->
    Bodyless = S#s.bodyless orelse Status =:= 204 orelse Status =:= 304,
    Length = content_length([V || {<<"content-length">>, V} <- Fields]),
    S1 = S#s{phase = body, status = Status, headers = Fields, bodyless = Bodyless, length = Length,
             deadline = deadline(S#s.timeout)},
    case Length of
        N when is_integer(N), N > S#s.max_body, not Bodyless -> fail(body_too_big, ?NO_ERROR);
        _ -> {C, ended(Flags, S1)}
    end.

content_length([]) -> none;
content_length([V | More]) ->
    Digits = V =/= <<>> andalso lists:all(fun(B) -> B >= $0 andalso B =< $9 end, binary_to_list(V)),
    case Digits andalso lists:all(fun(X) -> X =:= V end, More) of
        true -> binary_to_integer(V);
        false -> fail(bad_response, ?PROTOCOL_ERROR)
    end.

%% RFC 9113 8.2: names lowercase tokens and never pseudo-fields here, no connection-specific
%% field (8.2.2); values without control bytes but tab (a CR or LF passed on to an HTTP/1.1
%% client would end its head early).
valid(Fields) -> lists:all(fun valid_field/1, Fields).

valid_field({Name, Value}) ->
    Name =/= <<>> andalso lists:all(fun name_char/1, binary_to_list(Name))
        andalso not lists:member(Name, [<<"connection">>, <<"keep-alive">>, <<"proxy-connection">>,
                                        <<"transfer-encoding">>, <<"upgrade">>])
        andalso lists:all(fun(B) -> B >= 16#20 andalso B =/= 16#7f orelse B =:= $\t end, binary_to_list(Value)).

name_char(B) when B >= $a, B =< $z; B >= $0, B =< $9 -> true;
name_char(B) -> lists:member(B, "!#$%&'*+-.^_`|~").

%% RST_STREAM of our stream: `reset', or a retry when the upstream refused it before answering
%% (REFUSED_STREAM: it did not process it, RFC 9113 8.7). One of an earlier stream is late news.
rst_stream(Id, ?REFUSED_STREAM, _C, #s{id = Id, phase = head, began = false}) -> throw(retry);
rst_stream(Id, _Code, _C, #s{id = Id}) -> fail(502, reset, ?NO_ERROR);
rst_stream(Id, _Code, C, S = #s{id = Sid}) when Id < Sid -> {C, S};
rst_stream(_Id, _Code, _C, _S) -> fail(bad_response, ?PROTOCOL_ERROR).

%% SETTINGS (RFC 9113 6.5): an ACK of ours; or the peer's, applied and acknowledged. A changed
%% initial window moves our stream's send window by the difference (6.9.2).
settings(Flags, <<>>, C, S) when Flags band ?ACK =/= 0 -> {C, S};
settings(Flags, _Payload, _C, _S) when Flags band ?ACK =/= 0 -> fail(bad_response, ?FRAME_SIZE_ERROR);
settings(_Flags, Payload, C, S) when byte_size(Payload) rem 6 =:= 0 ->
    {C1, S1} = lists:foldl(fun setting/2, {C#c{settings = true}, S},
                           [{K, V} || <<K:16, V:32>> <= Payload]),
    send(C1, frame(?SETTINGS, ?ACK, 0, <<>>)),
    {C1, S1};
settings(_Flags, _Payload, _C, _S) -> fail(bad_response, ?FRAME_SIZE_ERROR).

setting({2, V}, _) when V =/= 0 -> fail(bad_response, ?PROTOCOL_ERROR);
setting({4, V}, _) when V > ?MAX_WINDOW -> fail(bad_response, ?FLOW_CONTROL_ERROR);
setting({4, V}, {C, S}) ->
    Win = S#s.send_win + V - C#c.peer_init,
    Win > ?MAX_WINDOW andalso fail(bad_response, ?FLOW_CONTROL_ERROR),
    {C#c{peer_init = V}, S#s{send_win = Win}};
setting({5, V}, _) when V < 16384; V > 16777215 -> fail(bad_response, ?PROTOCOL_ERROR);
setting({5, V}, {C, S}) -> {C#c{peer_frame = V}, S};
setting(_Other, Acc) ->
    %% The header table size is our encoder's, which indexes nothing; the stream limit does not
    %% matter to one stream at a time (a refusal comes as REFUSED_STREAM); unknown ones are ignored.
    Acc.

ping(Flags, _Payload, C, S) when Flags band ?ACK =/= 0 -> {C, S};
ping(_Flags, Payload, C, S) ->
    send(C, frame(?PING, ?ACK, 0, Payload)),
    {C, S}.

%% GOAWAY (RFC 9113 6.8): a stream above the last id was not processed, so it can go elsewhere
%% when nothing of its answer came; one at or below it may still be answered, and the connection
%% takes no more.
goaway(Last, _C, #s{id = Id, began = false}) when Id > Last -> throw(retry);
goaway(Last, _C, #s{id = Id}) when Id > Last -> fail(502, truncated, ?NO_ERROR);
goaway(_Last, C, S) -> {C#c{goaway = true}, S#s{began = true}}.

%% WINDOW_UPDATE (RFC 9113 6.9): an increment of 0 is a PROTOCOL_ERROR, past 2^31-1 a
%% FLOW_CONTROL_ERROR; one for an earlier stream is late news.
window_update(_Id, 0, _C, _S) -> fail(bad_response, ?PROTOCOL_ERROR);
window_update(0, Inc, C, S) ->
    Win = C#c.send_win + Inc,
    Win > ?MAX_WINDOW andalso fail(bad_response, ?FLOW_CONTROL_ERROR),
    {C#c{send_win = Win}, S};
window_update(Id, Inc, C, S = #s{id = Id}) ->
    Win = S#s.send_win + Inc,
    Win > ?MAX_WINDOW andalso fail(bad_response, ?FLOW_CONTROL_ERROR),
    {C, S#s{send_win = Win}};
window_update(Id, _Inc, C, S = #s{id = Sid}) when Id < Sid -> {C, S};
window_update(_Id, _Inc, _C, _S) -> fail(bad_response, ?PROTOCOL_ERROR).
