%%% @doc The roadrunner routes of docs/wire.md (`/large', `/cookies', `/gzip') on every engine,
%%% byte for byte over raw gen_tcp (only the date value masked), with the expected bodies written
%%% out here independently of the engines. Shared through cbench_routes_cases.hrl.
-module(cbench_roadrunner_wire).

-include_lib("stdlib/include/assert.hrl").

-export([cases/0, rr_large/1, rr_cookies/1, rr_gzip/1, rr_headers_heavy/1, rr_ws/1, rr_ws_errors/1]).

-define(JSON, [<<"content-type: application/json">>]).

%% @doc The cases.
-spec cases() -> [atom()].
cases() -> [rr_large, rr_cookies, rr_gzip, rr_headers_heavy, rr_ws, rr_ws_errors].

port(Config) -> proplists:get_value(port, Config).

get(Path, Extra) -> cbench_routes:get(Path, Extra).

ok200(CT, Body) ->
    cbench_routes:resp(<<"200 OK">>, CT,
                       iolist_to_binary(["content-length: ", integer_to_list(iolist_size(Body))]),
                       Body).

%% Each request on one keep-alive connection, then the connection is closed.
exchanges(Config, Pairs) ->
    {ok, S} = gen_tcp:connect({127, 0, 0, 1}, port(Config), [binary, {active, false}, {nodelay, true}]),
    [cbench_routes:exchange(S, Req, Exp) || {Req, Exp} <- Pairs],
    gen_tcp:close(S).

%% @doc GET and HEAD /large: 65,536 bytes, byte i is i rem 251.
rr_large(Config) ->
    Body = cbench_routes:file_content(65536),
    Oct = [<<"content-type: application/octet-stream">>],
    Head = cbench_routes:resp(<<"200 OK">>, Oct, <<"content-length: 65536">>, <<>>),
    exchanges(Config, [{get("/large", ""), ok200(Oct, Body)},
                       {["HEAD /large HTTP/1.1\r\nHost: x\r\n\r\n"], Head},
                       {get("/large?x=1", ""), ok200(Oct, Body)}]).

%% @doc GET /cookies: RFC 6265 pairs as a JSON object; bad pairs skipped, the first of a name wins,
%% several cookie fields read in order, none at all is {}.
rr_cookies(Config) ->
    C = fun(Values) -> get("/cookies", [["Cookie: ", V, "\r\n"] || V <- Values]) end,
    Eight = "a=1; bb=22; ccc=333; session=9f86d081884c7d65; theme=dark; lang=en-GB; "
            "csrf=\"tok-e3b0c442\"; consent=yes",
    Many = lists:join("; ", [["c", integer_to_list(I), "=", integer_to_list(I)]
                             || I <- lists:seq(1, 300)]),
    ManyJson = ["{", lists:join(",", [["\"c", integer_to_list(I), "\":\"", integer_to_list(I), "\""]
                                      || I <- lists:seq(1, 256)]), "}"],
    Cases =
        [{[], "{}"},
         {[Eight], "{\"a\":\"1\",\"bb\":\"22\",\"ccc\":\"333\",\"session\":\"9f86d081884c7d65\","
                   "\"theme\":\"dark\",\"lang\":\"en-GB\",\"csrf\":\"tok-e3b0c442\",\"consent\":\"yes\"}"},
         %% No '=', a space in the name, a space in the value, a comma, a backslash, an empty
         %% name, a lone quote: each skipped; empty pieces skipped; an empty value kept.
         {["a=1; novalue; c d=3; e=x y; f=ok;; g=; h=a,b; i=a\\b; =v; j=\"; k = 2 ;a=dup"],
          "{\"a\":\"1\",\"f\":\"ok\",\"g\":\"\",\"k\":\"2\"}"},
         %% Quotes removed only when they enclose the value; a quote inside is bad.
         {["q=\"\"; r=\"x\"y\"; s=\"v\"; t=x\"y"], "{\"q\":\"\",\"s\":\"v\"}"},
         %% Name is a token: '(' is not; '!#$%&' are; '=' is a cookie-octet.
         {["a(b=1; !#$%&=2; x==3"], "{\"!#$%&\":\"2\",\"x\":\"=3\"}"},
         {["a=1", "b=2; a=3"], "{\"a\":\"1\",\"b\":\"2\"}"},
         {[Many], ManyJson}],
    exchanges(Config, [{C(Values), ok200(?JSON, Json)} || {Values, Json} <- Cases]).

%% @doc GET /gzip: gzip when accept-encoding prefers it (q-values parsed), identity otherwise;
%% vary always; the compressed bytes are zlib level 6 with the gzip wrapper, on every engine.
rr_gzip(Config) ->
    Plain = gzip_plain(),
    ?assertEqual(16384, byte_size(Plain)),
    Packed = zlib:gzip(Plain),
    Vary = <<"vary: accept-encoding">>,
    Gz = ok200(?JSON ++ [<<"content-encoding: gzip">>, Vary], Packed),
    Id = ok200(?JSON ++ [Vary], Plain),
    AE = fun(V) -> get("/gzip", ["Accept-Encoding: ", V, "\r\n"]) end,
    Cases = [{get("/gzip", ""), Id},
             {AE("gzip"), Gz},
             {AE("gzip, deflate, br"), Gz},
             {AE("GZip"), Gz},
             {AE("x-gzip"), Gz},
             {AE("br, *"), Gz},
             {AE("deflate, br"), Id},
             {AE("identity"), Id},
             {AE(""), Id},
             {AE("gzip;q=0"), Id},
             {AE("gzip;q=0.000"), Id},
             %% identity is acceptable at q=1 unless the request weighs it.
             {AE("gzip ; Q=0.001"), Id},
             {AE("gzip ; Q=0.001, identity;q=0"), Gz},
             {AE("gzip;q=0.5, identity;q=0.4"), Gz},
             {AE("gzip;q=0.4, identity;q=0.5"), Id},
             {AE("gzip;q=0.5, identity;q=0.5"), Gz},
             {AE("*;q=0.3, identity;q=0.2"), Gz},
             {AE("*;q=0"), Id},
             {AE("identity;q=0, *;q=0"), Id},
             %% Malformed weights: the member is ignored.
             {AE("gzip;q=1.5"), Id},
             {AE("gzip;q=0.1234"), Id},
             {AE("gzip;q=.5"), Id},
             {AE("gzip;level=1"), Id},
             {AE("gzip;q=0.5;x=y"), Id},
             {AE("gzip;q=0, gzip"), Id},
             {get("/gzip", "Accept-Encoding: identity;q=0.1\r\nAccept-Encoding: gzip;q=0.2\r\n"), Gz},
             {["HEAD /gzip HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n"],
              cbench_routes:resp(<<"200 OK">>, ?JSON ++ [<<"content-encoding: gzip">>, Vary],
                                 iolist_to_binary(["content-length: ",
                                                   integer_to_list(byte_size(Packed))]), <<>>)}],
    exchanges(Config, Cases).

%% The /gzip body as docs/wire.md describes it.
gzip_plain() ->
    Item = fun(I) ->
                   Price = I * 37 rem 1000,
                   Cents = I * 13 rem 100,
                   lists:flatten(["{\"id\":", integer_to_list(I), ",\"name\":\"item-", integer_to_list(I),
                                  "\",\"price\":", integer_to_list(Price), ".",
                                  [$0 || Cents < 10], integer_to_list(Cents),
                                  ",\"in_stock\":", atom_to_list(I rem 3 =/= 0),
                                  ",\"tags\":[\"cbench\",\"fixture\"]}"])
           end,
    Head = iolist_to_binary(["{\"items\":[", lists:join(",", [Item(I) || I <- lists:seq(0, 149)]),
                             "],\"pad\":\""]),
    Pad = [lists:nth(I rem 16 + 1, "0123456789abcdef") || I <- lists:seq(0, 16384 - byte_size(Head) - 3)],
    iolist_to_binary([Head, Pad, "\"}"]).

%% @doc /hello with 16 extra headers (roadrunner's headers_heavy): the same answer, and /headers
%% lists every one of them (all are parsed and kept).
rr_headers_heavy(Config) ->
    Extra = [["x-extra-", integer_to_list(I), ": value-", integer_to_list(I), "\r\n"]
             || I <- lists:seq(1, 16)],
    Json = ["{\"host\":\"localhost\",",
            lists:join(",", [["\"x-extra-", integer_to_list(I), "\":\"value-", integer_to_list(I), "\""]
                             || I <- lists:seq(1, 16)]), "}"],
    exchanges(Config, [{get("/hello", Extra), ok200([<<"content-type: text/plain">>], <<"Hello, Joe!">>)},
                       {get("/headers", Extra), ok200(?JSON, iolist_to_binary(Json))}]).

%%% WebSocket (GET /ws), written out from RFC 6455.

-define(KEY, "dGhlIHNhbXBsZSBub25jZQ==").
-define(SWITCH, <<"HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nupgrade: websocket\r\n"
                  "sec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n">>).

handshake(Extra) ->
    ["GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n",
     "Sec-WebSocket-Key: " ?KEY "\r\n", Extra, "\r\n"].

%% A client frame: masked with a fixed key, minimal length encoding unless Len says otherwise.
cframe(Fin, Op, Payload) -> cframe(Fin, Op, Payload, minimal).
cframe(Fin, Op, Payload, LenEnc) ->
    Key = <<16#37, 16#fa, 16#21, 16#3d>>,
    N = byte_size(Payload),
    Len = case LenEnc of
              minimal when N < 126 -> <<1:1, N:7>>;
              minimal when N < 65536 -> <<1:1, 126:7, N:16>>;
              minimal -> <<1:1, 127:7, N:64>>;
              L -> L
          end,
    Masked = list_to_binary([B bxor binary:at(Key, I rem 4)
                             || {I, B} <- lists:zip(lists:seq(0, N - 1), binary_to_list(Payload))]),
    <<Fin:1, 0:3, Op:4, Len/binary, Key/binary, Masked/binary>>.

%% A server frame: FIN, unmasked.
sframe(Op, P) ->
    N = byte_size(P),
    Len = if N < 126 -> <<N>>; N < 65536 -> <<126, N:16>>; true -> <<127, N:64>> end,
    <<1:1, 0:3, Op:4, Len/binary, P/binary>>.

ws_open(Config) ->
    S = cbench_routes:exchange(port(Config), handshake("Sec-WebSocket-Version: 13\r\n"), ?SWITCH),
    S.

expect_bytes(S, Expected) ->
    ?assertEqual({ok, Expected}, gen_tcp:recv(S, byte_size(Expected), 10000)).

closed(S) ->
    ?assertEqual({error, closed}, gen_tcp:recv(S, 0, 10000)),
    gen_tcp:close(S).

%% @doc The handshake, echoes of text and binary messages of every length encoding, a fragmented
%% message with a ping in the middle, pongs, and the close handshake.
rr_ws(Config) ->
    S = ws_open(Config),
    Send = fun(F) -> ok = gen_tcp:send(S, F) end,
    Send(cframe(1, 1, <<"hello">>)),
    expect_bytes(S, sframe(1, <<"hello">>)),
    Bin300 = list_to_binary([I rem 256 || I <- lists:seq(1, 300)]),
    Send(cframe(1, 2, Bin300)),
    expect_bytes(S, sframe(2, Bin300)),
    %% The message limit is max_body_bytes (65,536 in the suites): exactly that is echoed.
    Big = binary:copy(<<"0123456789abcdef">>, 4096),
    Send(cframe(1, 2, Big)),
    expect_bytes(S, sframe(2, Big)),
    Send(cframe(1, 1, <<>>)),
    expect_bytes(S, sframe(1, <<>>)),
    %% UTF-8 split across fragments: é is C3 A9.
    Send([cframe(0, 1, <<"h", 16#c3>>), cframe(1, 9, <<"ping!">>), cframe(0, 0, <<16#a9, "l">>),
          cframe(1, 0, <<"lo">>)]),
    expect_bytes(S, <<(sframe(10, <<"ping!">>))/binary, (sframe(1, <<"h", 16#c3, 16#a9, "llo">>))/binary>>),
    %% A pong is not answered; an empty ping is.
    Send([cframe(1, 10, <<"unsolicited">>), cframe(1, 9, <<>>)]),
    expect_bytes(S, sframe(10, <<>>)),
    Send(cframe(1, 8, <<1000:16, "bye">>)),
    expect_bytes(S, sframe(8, <<1000:16>>)),
    closed(S),
    %% An empty close gets an empty close.
    S2 = ws_open(Config),
    ok = gen_tcp:send(S2, cframe(1, 8, <<>>)),
    expect_bytes(S2, sframe(8, <<>>)),
    closed(S2),
    %% A handshake request and a frame in one write: the frame is read after the 101.
    {ok, S3} = gen_tcp:connect({127, 0, 0, 1}, port(Config), [binary, {active, false}]),
    ok = gen_tcp:send(S3, [handshake("Sec-WebSocket-Version: 13\r\n"), cframe(1, 1, <<"early">>)]),
    {ok, Got} = gen_tcp:recv(S3, byte_size(?SWITCH) + 7, 10000),
    ?assertEqual(<<?SWITCH/binary, (sframe(1, <<"early">>))/binary>>, Got),
    gen_tcp:close(S3).

%% @doc Bad handshakes (400, 426 with the version) leave an HTTP/1.1 connection open; bad frames get
%% a close frame with the RFC's code, then the close.
rr_ws_errors(Config) ->
    E400 = cbench_routes:resp(<<"400 Bad Request">>, [], <<"content-length: 0">>, <<>>),
    E426 = cbench_routes:resp(<<"426 Upgrade Required">>, [<<"sec-websocket-version: 13">>],
                              <<"content-length: 0">>, <<>>),
    exchanges(Config,
              [{handshake("Sec-WebSocket-Version: 8\r\n"), E426},
               {handshake(""), E426},
               {get("/ws", ""), E400},
               {["GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: short==\r\n\r\n"], E400},
               {["GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: h2c, foo\r\nConnection: Upgrade\r\n"
                 "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " ?KEY "\r\n\r\n"], E400},
               {["HEAD /ws HTTP/1.1\r\nHost: x\r\n\r\n"], E400}]),
    %% HTTP/1.0 is not upgraded.
    {ok, S0} = gen_tcp:connect({127, 0, 0, 1}, port(Config), [binary, {active, false}]),
    ok = gen_tcp:send(S0, ["GET /ws HTTP/1.0\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n",
                           "Sec-WebSocket-Key: " ?KEY "\r\nSec-WebSocket-Version: 13\r\n\r\n"]),
    {ok, Got0} = gen_tcp:recv(S0, 0, 10000),
    ?assertEqual(cbench_routes:resp(<<"400 Bad Request">>, [], <<"content-length: 0\r\nconnection: close">>, <<>>),
                 cbench_routes:mask(Got0)),
    gen_tcp:close(S0),
    Unmasked = <<1:1, 0:3, 1:4, 0:1, 2:7, "hi">>,
    Cases = [{"unmasked", Unmasked, 1002},
             {"rsv bits", <<(cframe(1, 1, <<"x">>))/binary>>, rsv},
             {"opcode 3", cframe(1, 3, <<"x">>), 1002},
             {"opcode 11", cframe(1, 11, <<>>), 1002},
             {"fragmented ping", cframe(0, 9, <<"p">>), 1002},
             {"ping of 126", cframe(1, 9, binary:copy(<<"p">>, 126)), 1002},
             {"continuation first", cframe(1, 0, <<"x">>), 1002},
             {"text inside a message", [cframe(0, 1, <<"a">>), cframe(1, 1, <<"b">>)], 1002},
             {"close of 1 byte", cframe(1, 8, <<3>>), 1002},
             {"close code 1005", cframe(1, 8, <<1005:16>>), 1002},
             {"close code 999", cframe(1, 8, <<999:16>>), 1002},
             {"close code 2000", cframe(1, 8, <<2000:16>>), 1002},
             {"close reason not UTF-8", cframe(1, 8, <<1000:16, 16#ff>>), 1007},
             {"16-bit length of 5", cframe(1, 1, <<"hello">>, <<1:1, 126:7, 5:16>>), 1002},
             {"64-bit length of 300", cframe(1, 2, binary:copy(<<"x">>, 300), <<1:1, 127:7, 300:64>>), 1002},
             {"text not UTF-8", cframe(1, 1, <<"a", 16#ff, "b">>), 1007},
             {"surrogate", cframe(1, 1, <<16#ed, 16#a0, 16#80>>), 1007},
             {"overlong", cframe(1, 1, <<16#c0, 16#af>>), 1007},
             {"cut sequence", cframe(1, 1, <<"a", 16#e2, 16#82>>), 1007},
             {"message over the limit", cframe(1, 2, binary:copy(<<"x">>, 65537)), 1009},
             {"fragments over the limit", [cframe(0, 2, binary:copy(<<"x">>, 40000)),
                                           cframe(1, 0, binary:copy(<<"x">>, 30000))], 1009}],
    [begin
         ct:log("~s", [What]),
         S = ws_open(Config),
         Frame = case Code of
                     rsv -> <<B0, Rest/binary>> = Bytes, <<(B0 bor 16#40), Rest/binary>>;
                     _ -> Bytes
                 end,
         ok = gen_tcp:send(S, Frame),
         expect_bytes(S, sframe(8, <<(case Code of rsv -> 1002; _ -> Code end):16>>)),
         closed(S)
     end || {What, Bytes, Code} <- Cases],
    ok.
