%%% @doc GET /ws for the ehttpd engine: the WebSocket echo of docs/wire.md (RFC 6455) on the
%%% connection's socket (gen_tcp or ssl, cbench_ehttpd_sock), the same bytes as the C engine's src/proto/ws.c: the handshake's checks
%%% and Sec-WebSocket-Accept, then every text or binary message back as one unmasked frame, pongs
%%% for pings, the close handshake, and a close frame with the RFC's code for a bad frame (1002, 1007
%%% for invalid UTF-8, 1009 over the message limit), checked in the C engine's order.
-module(cbench_ws).

-export([check/2, accept/1, serve/4]).

-define(GUID, "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").
-define(LINGER_MS, 1000).

%% @doc 0 when the request (method, lowercased headers) is a valid handshake; else its status:
%% 426 for a version other than 13, 400 otherwise.
-spec check(binary(), [{binary(), binary()}]) -> 0 | 400 | 426.
check(Method, Headers) ->
    Get = fun(N) -> proplists:get_value(N, Headers) end,
    Get2 = fun(N, D) -> proplists:get_value(N, Headers, D) end,
    %% The engine has checked content-length's digits already: a digit other than 0 is a body
    %% (not binary_to_integer/1, quadratic in the digits: leading zeros may fill a head).
    Body = Get(<<"transfer-encoding">>) =/= undefined orelse
        lists:any(fun(C) -> C =/= $0 end, binary_to_list(Get2(<<"content-length">>, <<"0">>))),
    case Method =:= <<"GET">> andalso has_token(Get(<<"upgrade">>), <<"websocket">>)
        andalso has_token(Get(<<"connection">>), <<"upgrade">>) andalso not Body of
        false -> 400;
        true ->
            case Get(<<"sec-websocket-version">>) of
                <<"13">> -> key_ok(Get(<<"sec-websocket-key">>));
                _ -> 426
            end
    end.

key_ok(<<K:22/binary, "==">>) ->
    case lists:all(fun(C) -> (C >= $A andalso C =< $Z) orelse (C >= $a andalso C =< $z)
                                 orelse (C >= $0 andalso C =< $9) orelse C =:= $+ orelse C =:= $/
                   end, binary_to_list(K)) of
        true -> 0;
        false -> 400
    end;
key_ok(_) -> 400.

has_token(undefined, _) -> false;
has_token(V, Token) ->
    lists:any(fun(T) -> cbench_http:lower(cbench_http:trim_ows(T)) =:= Token end,
              binary:split(V, <<",">>, [global])).

%% @doc Sec-WebSocket-Accept: base64 of the SHA-1 of the key and the RFC's GUID.
-spec accept(binary()) -> binary().
accept(Key) -> base64:encode(sha1(<<Key/binary, ?GUID>>)).

%% @doc Serves the upgraded connection until the close handshake or an error; returns close.
%% Limit is the largest message (max_body_bytes), Idle the idle timeout between frames. Hold(N)
%% takes N bytes of the echo budgets for a data frame when its header is complete (ok, or conn or
%% server: the close code 1009 or 1013), Hold(-N) gives back a message's bytes once its echo is
%% written; the connection gives back the rest when it ends (docs/wire.md, WebSocket memory).
-spec serve(cbench_ehttpd_sock:socket(), pos_integer(), pos_integer(),
            fun((integer()) -> ok | conn | server)) -> close.
serve(S, Limit, Idle, Hold) ->
    ok = cbench_ehttpd_sock:setopts(S, [{packet, raw}]),
    loop(S, #{limit => Limit, idle => Idle, hold => Hold, op => none, msg => [], len => 0,
              utf8 => 0}).

loop(S, St = #{idle := Idle}) ->
    case cbench_ehttpd_sock:recv(S, 2, Idle) of
        {ok, <<B0, B1>>} ->
            Len7 = B1 band 16#7f,
            Ext = case Len7 of 126 -> 2; 127 -> 8; _ -> 0 end,
            MaskLen = case B1 band 16#80 of 0 -> 0; _ -> 4 end,
            case recv(S, Ext + MaskLen, Idle) of
                {ok, Rest} -> frame(S, St, B0, B1, Ext, Rest);
                error -> close
            end;
        _ -> close
    end.

recv(_S, 0, _Idle) -> {ok, <<>>};
recv(S, N, Idle) ->
    case cbench_ehttpd_sock:recv(S, N, Idle) of
        {ok, B} -> {ok, B};
        _ -> error
    end.

%% The header is complete: the checks of src/proto/ws.c's header_done/1, in its order.
frame(S, St, B0, B1, Ext, Rest) ->
    Fin = B0 bsr 7,
    Op = B0 band 16#0f,
    Ctrl = Op band 8 =/= 0,
    Len7 = B1 band 16#7f,
    <<ExtLen:Ext/binary, Mask/binary>> = Rest,
    N = case Ext of 0 -> Len7; _ -> binary:decode_unsigned(ExtLen) end,
    #{op := MsgOp, len := MsgLen, limit := Limit} = St,
    if
        B0 band 16#70 =/= 0 -> fail(S, 1002);
        B1 band 16#80 =:= 0 -> fail(S, 1002);
        Op > 2, Op =/= 8, Op =/= 9, Op =/= 10 -> fail(S, 1002);
        Ctrl, Fin =:= 0 orelse Len7 > 125 -> fail(S, 1002);
        Ext =:= 2, N < 126 -> fail(S, 1002);
        Ext =:= 8, N < 65536 orelse N bsr 63 =/= 0 -> fail(S, 1002);
        Op =:= 0, MsgOp =:= none -> fail(S, 1002);
        Op =:= 1 orelse Op =:= 2, MsgOp =/= none -> fail(S, 1002);
        Op =:= 8, N =:= 1 -> fail(S, 1002);
        not Ctrl, N > Limit orelse MsgLen + N > Limit -> fail(S, 1009);
        true ->
            Held = case Ctrl of
                       true -> ok;
                       false -> (maps:get(hold, St))(N)
                   end,
            case Held of
                conn -> fail(S, 1009);
                server -> fail(S, 1013);
                ok ->
                    case recv(S, N, maps:get(idle, St)) of
                        {ok, Masked} -> payload(S, St, Fin, Op, unmask(Masked, Mask));
                        error -> close
                    end
            end
    end.

payload(S, St, Fin, Op, P) when Op >= 8 ->
    control(S, St, Op, P, Fin);
payload(S, St0, Fin, Op, P) ->
    St = case Op of
             0 -> St0;
             _ -> St0#{op := Op, msg := [], len := 0, utf8 := 0}
         end,
    #{op := MsgOp, msg := Msg, len := Len, utf8 := U0} = St,
    case MsgOp =:= 1 andalso utf8(P, U0) of
        error -> fail(S, 1007);
        U ->
            St1 = St#{msg := [Msg, P], len := Len + byte_size(P),
                      utf8 := case U of false -> 0; _ -> U end},
            case Fin of
                0 -> loop(S, St1);
                1 when MsgOp =:= 1, U =/= 0 -> fail(S, 1007);
                1 ->
                    Out = iolist_to_binary([Msg, P]),
                    case send(S, [head(MsgOp, byte_size(Out)), Out]) of
                        ok ->
                            _ = (maps:get(hold, St1))(-byte_size(Out)),
                            loop(S, St1#{op := none, msg := [], len := 0, utf8 := 0});
                        error -> close
                    end
            end
    end.

control(S, St, 9, P, _) ->
    case send(S, [head(10, byte_size(P)), P]) of
        ok -> loop(S, St);
        error -> close
    end;
control(S, St, 10, _P, _) -> loop(S, St);
control(S, _St, 8, <<>>, _) -> close_with(S, <<>>);
control(S, _St, 8, <<Code:16, Reason/binary>>, _) ->
    Valid = (Code >= 1000 andalso Code =< 1003) orelse (Code >= 1007 andalso Code =< 1014)
        orelse (Code >= 3000 andalso Code =< 4999),
    case Valid of
        false -> fail(S, 1002);
        true ->
            case utf8(Reason, 0) of
                0 -> close_with(S, <<Code:16>>);
                _ -> fail(S, 1007)
            end
    end.

fail(S, Code) -> close_with(S, <<Code:16>>).

%% The close frame, then the close: our side shut, the peer's bytes drained a short while.
close_with(S, Payload) ->
    _ = send(S, [head(8, byte_size(Payload)), Payload]),
    _ = cbench_ehttpd_sock:shutdown(S, write),
    Deadline = erlang:monotonic_time(millisecond) + ?LINGER_MS,
    drain(S, Deadline),
    close.

drain(S, Deadline) ->
    Left = Deadline - erlang:monotonic_time(millisecond),
    case Left > 0 andalso cbench_ehttpd_sock:recv(S, 0, Left) of
        {ok, _} -> drain(S, Deadline);
        _ -> ok
    end.

send(S, Data) ->
    case cbench_ehttpd_sock:send(S, Data) of
        ok -> ok;
        _ -> error
    end.

head(Op, N) when N < 126 -> <<1:1, 0:3, Op:4, 0:1, N:7>>;
head(Op, N) when N < 65536 -> <<1:1, 0:3, Op:4, 0:1, 126:7, N:16>>;
head(Op, N) -> <<1:1, 0:3, Op:4, 0:1, 127:7, N:64>>.

%% XOR with the mask key, four bytes at a time.
unmask(P, <<K:32>>) ->
    Whole = byte_size(P) div 4 * 4,
    <<Body:Whole/binary, Tail/binary>> = P,
    <<K1:8, K2:8, K3:8, _:8>> = <<K:32>>,
    T = case Tail of
            <<>> -> <<>>;
            <<A>> -> <<(A bxor K1)>>;
            <<A, B>> -> <<(A bxor K1), (B bxor K2)>>;
            <<A, B, C>> -> <<(A bxor K1), (B bxor K2), (C bxor K3)>>
        end,
    Unmasked = << <<(W bxor K):32>> || <<W:32>> <= Body >>,
    <<Unmasked/binary, T/binary>>.

%% UTF-8 (RFC 3629) over P from state U, as src/proto/ws.c's utf8_next/2 walks it: the new state (0 at a
%% character boundary) or error at the first byte that cannot continue.
utf8(<<>>, U) -> U;
utf8(<<B, Rest/binary>>, 0) when B < 16#80 -> utf8(Rest, 0);
utf8(<<B, Rest/binary>>, 0) when B >= 16#c2, B =< 16#df -> utf8(Rest, {1, 16#80, 16#bf});
utf8(<<16#e0, Rest/binary>>, 0) -> utf8(Rest, {2, 16#a0, 16#bf});
utf8(<<16#ed, Rest/binary>>, 0) -> utf8(Rest, {2, 16#80, 16#9f});
utf8(<<B, Rest/binary>>, 0) when B >= 16#e1, B =< 16#ef -> utf8(Rest, {2, 16#80, 16#bf});
utf8(<<16#f0, Rest/binary>>, 0) -> utf8(Rest, {3, 16#90, 16#bf});
utf8(<<16#f4, Rest/binary>>, 0) -> utf8(Rest, {3, 16#80, 16#8f});
utf8(<<B, Rest/binary>>, 0) when B >= 16#f1, B =< 16#f3 -> utf8(Rest, {3, 16#80, 16#bf});
utf8(<<_, _/binary>>, 0) -> error;
utf8(<<B, Rest/binary>>, {Left, Lo, Hi}) when B >= Lo, B =< Hi ->
    case Left of
        1 -> utf8(Rest, 0);
        _ -> utf8(Rest, {Left - 1, 16#80, 16#bf})
    end;
utf8(_, _) -> error.

%% SHA-1 (FIPS 180-4), for the handshake only: the node's crypto application is not a dependency.
sha1(Msg) ->
    Bits = bit_size(Msg),
    Pad = (55 - byte_size(Msg)) rem 64,
    Padded = <<Msg/binary, 16#80, 0:((Pad + 64) rem 64)/unit:8, Bits:64>>,
    <<A:32, B:32, C:32, D:32, E:32>> =
        sha1_blocks(Padded, <<16#67452301:32, 16#efcdab89:32, 16#98badcfe:32, 16#10325476:32,
                               16#c3d2e1f0:32>>),
    <<A:32, B:32, C:32, D:32, E:32>>.

sha1_blocks(<<>>, H) -> H;
sha1_blocks(<<Block:64/binary, Rest/binary>>, <<H0:32, H1:32, H2:32, H3:32, H4:32>>) ->
    W0 = [W || <<W:32>> <= Block],
    W = expand(lists:reverse(W0), 16),
    {A, B, C, D, E} = rounds(W, 0, {H0, H1, H2, H3, H4}),
    M = 16#ffffffff,
    sha1_blocks(Rest, <<((H0 + A) band M):32, ((H1 + B) band M):32, ((H2 + C) band M):32,
                        ((H3 + D) band M):32, ((H4 + E) band M):32>>).

%% The 80 words, built newest first, returned oldest first.
expand(Rev, 80) -> lists:reverse(Rev);
expand(Rev = [_, _, W3, _, _, _, _, W8 | _], T) ->
    W14 = lists:nth(14, Rev),
    W16 = lists:nth(16, Rev),
    expand([rol(W3 bxor W8 bxor W14 bxor W16, 1) | Rev], T + 1).

rounds([], _, H) -> H;
rounds([W | Ws], T, {A, B, C, D, E}) ->
    {F, K} = if
                 T < 20 -> {(B band C) bor ((bnot B) band D), 16#5a827999};
                 T < 40 -> {B bxor C bxor D, 16#6ed9eba1};
                 T < 60 -> {(B band C) bor (B band D) bor (C band D), 16#8f1bbcdc};
                 true -> {B bxor C bxor D, 16#ca62c1d6}
             end,
    Tmp = (rol(A, 5) + (F band 16#ffffffff) + E + K + W) band 16#ffffffff,
    rounds(Ws, T + 1, {Tmp, A, rol(B, 30), C, D}).

rol(X, N) -> ((X bsl N) bor (X bsr (32 - N))) band 16#ffffffff.
