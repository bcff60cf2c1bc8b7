%%% @doc The route-table checks of docs/wire.md, shared by the suites of every engine: raw gen_tcp
%%% requests compared byte for byte with the expected responses (only the date value masked), and
%%% OTP httpc requests. A suite starts its server with opts/0 and puts {port, Port} in Config.
-module(cbench_routes).

-include_lib("stdlib/include/assert.hrl").

-export([opts/0, cases/0, start/2]).
-export([routes_raw/1, routes_httpc/1, head/1, not_found_and_405/1, params_400/1, headers_json/1,
         http10/1, connection_close/1, keepalive/1, pipelining/1, get_with_body/1, echo_bodies/1,
         expect_continue/1, limit_431/1, limit_413/1, malformed_400/1, header_timeout/1,
         idle_timeout/1, stats_keys/1, trailers/1, chunk_framing/1, bad_targets/1, request_line/1,
         host_header/1]).
%% Helpers for other suites.
-export([exchange/3, resp/4, get/2, mask/1, file_content/1]).

-define(TIMEOUT, 10000).

%% @doc Server options every engine suite uses: small limits for the tests. The timeouts are long, so
%% that a loaded machine (CI) never closes a connection under a case; the two timeout cases start a
%% server of their own with short ones (short_timeouts/2).
-spec opts() -> map().
opts() ->
    #{port => 0, threads => 2, max_header_bytes => 4096, max_body_bytes => 65536,
      header_timeout_ms => 30000, idle_timeout_ms => 60000}.

%% Runs Fun(Port) against a server of the suite's engine with header_timeout_ms 500 and
%% idle_timeout_ms 1500.
short_timeouts(Config, Fun) ->
    Opts = (opts())#{header_timeout_ms => 500, idle_timeout_ms => 1500},
    {ok, S} = cbench:start_server(proplists:get_value(engine, Config), Opts),
    try Fun(cbench:port(S)) after ok = cbench:stop_server(S) end.

%% @doc The shared test cases.
-spec cases() -> [atom()].
cases() ->
    [routes_raw, routes_httpc, head, not_found_and_405, params_400, headers_json, http10,
     connection_close, keepalive, pipelining, get_with_body, echo_bodies, expect_continue,
     limit_431, limit_413, malformed_400, header_timeout, idle_timeout, stats_keys, trailers,
     chunk_framing, bad_targets, request_line, host_header].

%% @doc Starts a server of Engine for a suite and returns the Config entries.
-spec start(atom(), list()) -> list().
start(Engine, Config) ->
    {ok, _} = application:ensure_all_started(inets),
    {ok, S} = cbench:start_server(Engine, opts()),
    [{server, S}, {port, cbench:port(S)}, {engine, Engine} | Config].

%%% Expected bytes, written out independently of the server code.

%% @doc An expected response: status line with reason, `date: X', the given header lines, body.
-spec resp(binary(), [binary()], binary(), iodata()) -> binary().
resp(StatusLine, HeaderLines, LengthLine, Body) ->
    iolist_to_binary(["HTTP/1.1 ", StatusLine, "\r\ndate: X\r\n",
                      [[H, "\r\n"] || H <- HeaderLines],
                      case LengthLine of <<>> -> []; _ -> [LengthLine, "\r\n"] end,
                      "\r\n", Body]).

ok200(CT, Body) ->
    resp(<<"200 OK">>, CT, cl(Body), Body).

cl(Body) -> iolist_to_binary(["content-length: ", integer_to_list(iolist_size(Body))]).

chunked(CT, Pieces) ->
    resp(<<"200 OK">>, CT, <<"transfer-encoding: chunked">>,
         [[[string:lowercase(integer_to_list(iolist_size(P), 16)), "\r\n", P, "\r\n"]
           || P <- Pieces], "0\r\n\r\n"]).

empty(StatusLine) -> resp(StatusLine, [], <<"content-length: 0">>, <<>>).

error_close(StatusLine) ->
    resp(StatusLine, [], <<"content-length: 0\r\nconnection: close">>, <<>>).

-define(TEXT, [<<"content-type: text/plain">>]).
-define(JSON, [<<"content-type: application/json">>]).
-define(OCTET, [<<"content-type: application/octet-stream">>]).
-define(SSE, [<<"content-type: text/event-stream">>, <<"cache-control: no-cache">>]).

line() -> binary:copy(<<"0123456789abcdef">>, 4).
bigline() -> binary:copy(line(), 256).
event(Data) -> <<"event: tick\ndata: ", Data/binary, "\n\n">>.

%% @doc The fixture file content: byte i is i rem 251.
-spec file_content(pos_integer()) -> binary().
file_content(N) ->
    binary:part(binary:copy(list_to_binary(lists:seq(0, 250)), N div 251 + 1), 0, N).

get(Path, Extra) ->
    ["GET ", Path, " HTTP/1.1\r\nHost: localhost\r\n", Extra, "\r\n"].

%% Request, expected response, for every route.
route_table() ->
    [{get("/", ""), resp(<<"200 OK">>, [], <<"content-length: 12">>, <<"hello world!">>)},
     {get("/hello", ""), ok200(?TEXT, <<"Hello, Joe!">>)},
     {get("/hello?x=1&y", ""), ok200(?TEXT, <<"Hello, Joe!">>)},
     {get("/json", ""), ok200(?JSON, <<"{\"message\":\"Hello, Joe!\"}">>)},
     {"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", ok200(?OCTET, <<"hello">>)},
     {"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", ok200(?OCTET, <<>>)},
     {get("/file/tiny", ""), ok200(?OCTET, file_content(1024))},
     {get("/file/small", ""), ok200(?OCTET, file_content(102400))},
     {get("/file/big", ""), ok200(?OCTET, file_content(5242880))},
     {get("/stream", ""), chunked(?TEXT, [<<"hello, ">>, <<"Joe!">>])},
     {get("/stream/small", ""), chunked(?OCTET, lists:duplicate(100, line()))},
     {get("/stream/big", ""), chunked(?OCTET, lists:duplicate(64, bigline()))},
     {get("/sse", ""), chunked(?SSE, lists:duplicate(32, event(line())))},
     {get("/sse/small", ""), chunked(?SSE, lists:duplicate(100, event(line())))},
     {get("/sse/big", ""), chunked(?SSE, lists:duplicate(64, event(bigline())))},
     {get("/delay/10", ""), ok200(?TEXT, <<"ok">>)},
     {get("/delay/0", ""), ok200(?TEXT, <<"ok">>)},
     {get("/status/200", ""), empty(<<"200 OK">>)},
     {get("/status/201", ""), empty(<<"201 Created">>)},
     {get("/status/204", ""), resp(<<"204 No Content">>, [], <<>>, <<>>)},
     {get("/status/304", ""), resp(<<"304 Not Modified">>, [], <<>>, <<>>)},
     {get("/status/413", ""), empty(<<"413 Content Too Large">>)},
     {get("/status/418", ""), empty(<<"418 Unknown">>)},
     {get("/status/422", ""), empty(<<"422 Unprocessable Content">>)},
     {get("/status/431", ""), empty(<<"431 Request Header Fields Too Large">>)},
     {get("/status/503", ""), empty(<<"503 Service Unavailable">>)},
     {get("/status/599", ""), empty(<<"599 Unknown">>)},
     {get("/headers", ""), ok200(?JSON, <<"{\"host\":\"localhost\"}">>)},
     {get("/nope", ""), empty(<<"404 Not Found">>)}].

%%% Raw exchanges

%% @doc Sends Req on a new connection (or on Sock) and compares the answer with Expected byte for
%% byte, the date values masked. Returns the socket for more exchanges.
-spec exchange(inet:port_number() | gen_tcp:socket(), iodata(), binary()) -> gen_tcp:socket().
exchange(Port, Req, Expected) when is_integer(Port) ->
    {ok, S} = gen_tcp:connect({127, 0, 0, 1}, Port, [binary, {active, false}, {nodelay, true}]),
    exchange(S, Req, Expected);
exchange(S, Req, Expected) ->
    ok = gen_tcp:send(S, Req),
    expect(S, Expected),
    S.

expect(S, Expected) ->
    Dates = length(binary:matches(Expected, <<"\r\ndate: X\r\n">>)),
    Len = byte_size(Expected) + Dates * 28,
    Got = case gen_tcp:recv(S, Len, ?TIMEOUT) of
              {ok, B} -> B;
              {error, E} -> ct:fail({recv, E, {expected, shorten(Expected)}})
          end,
    case mask(Got) of
        Expected -> ok;
        Masked -> ct:fail({mismatch, {got, shorten(Masked)}, {expected, shorten(Expected)}})
    end.

shorten(B) when byte_size(B) > 600 -> <<(binary:part(B, 0, 600))/binary, "...">>;
shorten(B) -> B.

%% @doc Replaces every IMF-fixdate date value by X (and only a well-formed one).
-spec mask(binary()) -> binary().
mask(B) ->
    re:replace(B, "\r\ndate: (Mon|Tue|Wed|Thu|Fri|Sat|Sun), [0-9]{2} "
               "(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [0-9]{4} "
               "[0-9]{2}:[0-9]{2}:[0-9]{2} GMT\r\n",
               "\r\ndate: X\r\n", [global, {return, binary}]).

closed(S) ->
    ?assertEqual({error, closed}, gen_tcp:recv(S, 0, ?TIMEOUT)),
    gen_tcp:close(S).

still_open(S) ->
    ?assertEqual({error, timeout}, gen_tcp:recv(S, 0, 100)).

port(Config) -> proplists:get_value(port, Config).

%%% Cases

%% @doc Every route, each on its own connection, byte for byte.
routes_raw(Config) ->
    [begin S = exchange(port(Config), Req, Exp), still_open(S), gen_tcp:close(S) end
     || {Req, Exp} <- route_table()],
    ok.

%% @doc Every route with OTP httpc: status, content-type and body.
routes_httpc(Config) ->
    Base = "http://127.0.0.1:" ++ integer_to_list(port(Config)),
    Get = fun(Path) ->
                  {ok, {{_, Status, _}, Hs, Body}} =
                      httpc:request(get, {Base ++ Path, []}, [{timeout, ?TIMEOUT}],
                                    [{body_format, binary}]),
                  {Status, proplists:get_value("content-type", Hs), Body}
          end,
    ?assertEqual({200, undefined, <<"hello world!">>}, Get("/")),
    ?assertEqual({200, "text/plain", <<"Hello, Joe!">>}, Get("/hello")),
    ?assertEqual({200, "application/json", <<"{\"message\":\"Hello, Joe!\"}">>}, Get("/json")),
    ?assertEqual({200, "application/octet-stream", file_content(1024)}, Get("/file/tiny")),
    ?assertEqual({200, "application/octet-stream", file_content(102400)}, Get("/file/small")),
    ?assertEqual({200, "application/octet-stream", file_content(5242880)}, Get("/file/big")),
    ?assertEqual({200, "text/plain", <<"hello, Joe!">>}, Get("/stream")),
    ?assertEqual({200, "application/octet-stream", binary:copy(line(), 100)}, Get("/stream/small")),
    ?assertEqual({200, "application/octet-stream", binary:copy(bigline(), 64)}, Get("/stream/big")),
    ?assertEqual({200, "text/event-stream", binary:copy(event(line()), 32)}, Get("/sse")),
    ?assertEqual({200, "text/event-stream", binary:copy(event(line()), 100)}, Get("/sse/small")),
    ?assertEqual({200, "text/event-stream", binary:copy(event(bigline()), 64)}, Get("/sse/big")),
    ?assertEqual({200, "text/plain", <<"ok">>}, Get("/delay/10")),
    ?assertEqual({400, undefined, <<>>}, Get("/delay/60001")),
    ?assertEqual({201, undefined, <<>>}, Get("/status/201")),
    ?assertEqual({404, undefined, <<>>}, Get("/nope")),
    {_, _, Json} = Get("/headers"),
    ?assertMatch(#{<<"host">> := _}, json_object(Json)),
    Post = fun(Path, Body) ->
                   {ok, {{_, Status, _}, _, RBody}} =
                       httpc:request(post, {Base ++ Path, [], "application/octet-stream", Body},
                                     [{timeout, ?TIMEOUT}], [{body_format, binary}]),
                   {Status, RBody}
           end,
    Body = file_content(50000),
    ?assertEqual({200, Body}, Post("/echo", Body)),
    ?assertEqual({200, Body}, Post("/echo/chunked", Body)),
    {ok, {{_, 405, _}, Hs405, _}} = httpc:request(post, {Base ++ "/hello", [], "text/plain", "x"},
                                                  [{timeout, ?TIMEOUT}], []),
    ?assertEqual("GET, HEAD", proplists:get_value("allow", Hs405)),
    ok.

%% A tiny parser for the flat string-to-string objects of /headers.
json_object(<<"{", Rest/binary>>) ->
    {match, Pairs} = re:run(Rest, "\"([^\"]*)\":\"([^\"]*)\"", [global, {capture, all_but_first, binary}]),
    maps:from_list([{K, V} || [K, V] <- Pairs]).

%% @doc HEAD: the GET's status and headers, no body.
head(Config) ->
    P = port(Config),
    Head = fun(Path) -> ["HEAD ", Path, " HTTP/1.1\r\nHost: localhost\r\n\r\n"] end,
    Cases = [{"/hello", resp(<<"200 OK">>, ?TEXT, <<"content-length: 11">>, <<>>)},
             {"/", resp(<<"200 OK">>, [], <<"content-length: 12">>, <<>>)},
             {"/file/big", resp(<<"200 OK">>, ?OCTET, <<"content-length: 5242880">>, <<>>)},
             {"/stream", resp(<<"200 OK">>, ?TEXT, <<"transfer-encoding: chunked">>, <<>>)},
             {"/sse/big", resp(<<"200 OK">>, ?SSE, <<"transfer-encoding: chunked">>, <<>>)},
             {"/status/204", resp(<<"204 No Content">>, [], <<>>, <<>>)},
             {"/status/202", empty(<<"202 Accepted">>)},
             {"/delay/1", resp(<<"200 OK">>, ?TEXT, <<"content-length: 2">>, <<>>)},
             {"/headers", resp(<<"200 OK">>, ?JSON, <<"content-length: 20">>, <<>>)},
             {"/nope", empty(<<"404 Not Found">>)}],
    %% All on one connection: a HEAD answer must not carry a body that would shift the next one.
    {ok, S} = gen_tcp:connect({127, 0, 0, 1}, P, [binary, {active, false}]),
    [exchange(S, Head(Path), Exp) || {Path, Exp} <- Cases],
    still_open(S),
    gen_tcp:close(S).

%% @doc 404 for unknown paths (whatever the method), 405 with allow for known ones.
not_found_and_405(Config) ->
    P = port(Config),
    E404 = empty(<<"404 Not Found">>),
    A = fun(Allow) -> resp(<<"405 Method Not Allowed">>, [<<"allow: ", Allow/binary>>],
                           <<"content-length: 0">>, <<>>) end,
    Cases = [{get("/hello/", ""), E404},
             {get("/hello%20", ""), E404},
             {get("/HELLO", ""), E404},
             {get("/file/huge", ""), E404},
             {"POST /nope HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab", E404},
             {"DELETE /x HTTP/1.1\r\nHost: x\r\n\r\n", E404},
             {"POST /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab", A(<<"GET, HEAD">>)},
             {"PUT /json HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", A(<<"GET, HEAD">>)},
             {"POST /file/tiny HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", A(<<"GET, HEAD">>)},
             {get("/echo", ""), A(<<"POST">>)},
             {"HEAD /echo HTTP/1.1\r\nHost: x\r\n\r\n", A(<<"POST">>)},
             {"DELETE /echo/chunked HTTP/1.1\r\nHost: x\r\n\r\n", A(<<"POST">>)},
             {"POST /delay/10 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", A(<<"GET, HEAD">>)}],
    {ok, S} = gen_tcp:connect({127, 0, 0, 1}, P, [binary, {active, false}]),
    [exchange(S, Req, Exp) || {Req, Exp} <- Cases],
    still_open(S),
    gen_tcp:close(S).

%% @doc /delay and /status parameters out of the rule: 400, and the connection stays open.
params_400(Config) ->
    E400 = empty(<<"400 Bad Request">>),
    {ok, S} = gen_tcp:connect({127, 0, 0, 1}, port(Config), [binary, {active, false}]),
    [exchange(S, get(Path, ""), E400)
     || Path <- ["/delay/", "/delay/60001", "/delay/123456", "/delay/abc", "/delay/1x",
                 "/delay/-1", "/status/", "/status/199", "/status/600", "/status/20",
                 "/status/2000", "/status/abc"]],
    exchange(S, get("/delay/000001", ""), E400),
    exchange(S, get("/delay/00001", ""), ok200(?TEXT, <<"ok">>)),
    exchange(S, get("/delay/5?x=1", ""), ok200(?TEXT, <<"ok">>)),
    still_open(S),
    gen_tcp:close(S).

%% @doc /headers: lowercase names in order of first appearance, repeats joined, escapes.
headers_json(Config) ->
    Req = ["GET /headers HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nUser-Agent: t\r\nx-a: 2\r\n",
           "X-Quote: a\"b\\c\r\nX-Tab: a\tb\r\nX-Utf8: \xc3\xa9\r\n\r\n"],
    Body = <<"{\"host\":\"h\",\"x-a\":\"1, 2\",\"user-agent\":\"t\",\"x-quote\":\"a\\\"b\\\\c\","
             "\"x-tab\":\"a\\u0009b\",\"x-utf8\":\"\xc3\xa9\"}">>,
    S = exchange(port(Config), Req, ok200(?JSON, Body)),
    gen_tcp:close(S).

%% @doc HTTP/1.0: closed unless it asks for keep-alive, answered with an HTTP/1.1 status line.
http10(Config) ->
    P = port(Config),
    S1 = exchange(P, "GET /hello HTTP/1.0\r\n\r\n",
                  resp(<<"200 OK">>, ?TEXT, <<"content-length: 11\r\nconnection: close">>,
                       <<"Hello, Joe!">>)),
    closed(S1),
    S2 = exchange(P, "GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
                  resp(<<"200 OK">>, ?TEXT, <<"content-length: 11\r\nconnection: keep-alive">>,
                       <<"Hello, Joe!">>)),
    exchange(S2, "GET /json HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n",
             resp(<<"200 OK">>, ?JSON, <<"content-length: 25\r\nconnection: keep-alive">>,
                  <<"{\"message\":\"Hello, Joe!\"}">>)),
    still_open(S2),
    gen_tcp:close(S2).

%% @doc Connection: close on HTTP/1.1 gets `connection: close' and a close.
connection_close(Config) ->
    S = exchange(port(Config), get("/hello", "Connection: close\r\n"),
                 resp(<<"200 OK">>, ?TEXT, <<"content-length: 11\r\nconnection: close">>,
                      <<"Hello, Joe!">>)),
    closed(S),
    S2 = exchange(port(Config), get("/stream", "Connection: close\r\n"),
                  resp(<<"200 OK">>, ?TEXT, <<"transfer-encoding: chunked\r\nconnection: close">>,
                       <<"7\r\nhello, \r\n4\r\nJoe!\r\n0\r\n\r\n">>)),
    closed(S2).

%% @doc Every route in turn on one connection.
keepalive(Config) ->
    {ok, S} = gen_tcp:connect({127, 0, 0, 1}, port(Config), [binary, {active, false}]),
    [exchange(S, Req, Exp) || {Req, Exp} <- route_table()],
    still_open(S),
    gen_tcp:close(S).

%% @doc All requests in one write: the answers come in request order.
pipelining(Config) ->
    Table = [T || T = {Req, _} <- route_table(), iolist_size(Req) > 0],
    Reqs = [Req || {Req, _} <- Table] ++ [get("/delay/50", ""), get("/hello", "")],
    Exp = iolist_to_binary([E || {_, E} <- Table] ++
                               [ok200(?TEXT, <<"ok">>), ok200(?TEXT, <<"Hello, Joe!">>)]),
    S = exchange(port(Config), Reqs, Exp),
    still_open(S),
    gen_tcp:close(S).

%% @doc A GET with a body: the body is read and dropped, the connection goes on.
get_with_body(Config) ->
    S = exchange(port(Config), "GET /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
                 ok200(?TEXT, <<"Hello, Joe!">>)),
    exchange(S, "GET /json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
             "3\r\nabc\r\n0\r\n\r\n", ok200(?JSON, <<"{\"message\":\"Hello, Joe!\"}">>)),
    exchange(S, get("/", ""), resp(<<"200 OK">>, [], <<"content-length: 12">>, <<"hello world!">>)),
    still_open(S),
    gen_tcp:close(S).

%% @doc Request bodies with content-length and chunked, echoed whole or chunk by chunk.
echo_bodies(Config) ->
    P = port(Config),
    S = exchange(P, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                 "5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\n", ok200(?OCTET, <<"hello, world">>)),
    exchange(S, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
             "A\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\n", ok200(?OCTET, <<"0123456789">>)),
    exchange(S, "POST /echo/chunked HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
             chunked(?OCTET, [<<"abc">>])),
    exchange(S, "POST /echo/chunked HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
             chunked(?OCTET, [])),
    exchange(S, "POST /echo/chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
             "3\r\nabc\r\n0\r\n\r\n", chunked(?OCTET, [<<"abc">>])),
    %% A body sent in slow pieces comes back whole, whatever the piece boundaries.
    ok = gen_tcp:send(S, "POST /echo/chunked HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\nab"),
    timer:sleep(50),
    ok = gen_tcp:send(S, "cdef"),
    {ok, Head} = gen_tcp:recv(S, byte_size(chunked(?OCTET, [])) - 5 + 28, ?TIMEOUT),
    ?assertEqual(resp(<<"200 OK">>, ?OCTET, <<"transfer-encoding: chunked">>, <<>>), mask(Head)),
    ?assertEqual(<<"abcdef">>, read_chunks(S, <<>>)),
    still_open(S),
    gen_tcp:close(S).

read_chunks(S, Acc) ->
    ok = inet:setopts(S, [{packet, line}]),
    {ok, SizeLine} = gen_tcp:recv(S, 0, ?TIMEOUT),
    Size = binary_to_integer(string:trim(SizeLine), 16),
    ok = inet:setopts(S, [{packet, raw}]),
    case Size of
        0 -> {ok, <<"\r\n">>} = gen_tcp:recv(S, 2, ?TIMEOUT), Acc;
        _ ->
            {ok, <<Data:Size/binary, "\r\n">>} = gen_tcp:recv(S, Size + 2, ?TIMEOUT),
            read_chunks(S, <<Acc/binary, Data/binary>>)
    end.

%% @doc Expect: 100-continue: `100 Continue' before the body is read; over the limit, 413 at once.
expect_continue(Config) ->
    P = port(Config),
    S = exchange(P, "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
                 <<"HTTP/1.1 100 Continue\r\n\r\n">>),
    exchange(S, "hello", ok200(?OCTET, <<"hello">>)),
    still_open(S),
    gen_tcp:close(S),
    S2 = exchange(P, "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                  "Content-Length: 100000\r\n\r\n", error_close(<<"413 Content Too Large">>)),
    closed(S2).

%% @doc Request line plus headers over max_header_bytes (4096 here): 431, then close.
limit_431(Config) ->
    P = port(Config),
    Big = binary:copy(<<"a">>, 5000),
    S1 = exchange(P, get("/hello", ["X-Big: ", Big, "\r\n"]),
                  error_close(<<"431 Request Header Fields Too Large">>)),
    closed(S1),
    Many = [["X-H", integer_to_list(I), ": ", binary:copy(<<"b">>, 100), "\r\n"]
            || I <- lists:seq(1, 60)],
    S2 = exchange(P, get("/hello", Many), error_close(<<"431 Request Header Fields Too Large">>)),
    closed(S2),
    S3 = exchange(P, get(["/", Big], ""), error_close(<<"431 Request Header Fields Too Large">>)),
    closed(S3),
    %% Just under the limit is fine.
    S4 = exchange(P, get("/hello", ["X-Ok: ", binary:copy(<<"c">>, 3000), "\r\n"]),
                  ok200(?TEXT, <<"Hello, Joe!">>)),
    gen_tcp:close(S4).

%% @doc Declared or received body over max_body_bytes (65536 here): 413, then close.
limit_413(Config) ->
    P = port(Config),
    S1 = exchange(P, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 65537\r\n\r\n",
                  error_close(<<"413 Content Too Large">>)),
    closed(S1),
    Chunk = binary:copy(<<"z">>, 40000),
    S2 = exchange(P, ["POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
                      "9c40\r\n", Chunk, "\r\n9c40\r\n", Chunk, "\r\n0\r\n\r\n"],
                  error_close(<<"413 Content Too Large">>)),
    closed(S2),
    S3 = exchange(P, ["POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 65536\r\n\r\n",
                      binary:copy(<<"y">>, 65536)], ok200(?OCTET, binary:copy(<<"y">>, 65536))),
    gen_tcp:close(S3).

%% @doc Malformed requests: 400 with content-length 0 and connection close, then close.
malformed_400(Config) ->
    P = port(Config),
    E = error_close(<<"400 Bad Request">>),
    [closed(exchange(P, Req, E))
     || Req <- ["GARBAGE\r\n\r\n",
                "GET /hello HTTP/1.1\r\nHost: x\r\nBad Header Line\r\n\r\n",
                "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
                "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
                "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
                "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n"]],
    ok.

%% @doc A head not complete within header_timeout_ms (500 here): 408 and close.
header_timeout(Config) ->
    short_timeouts(Config, fun(Port) ->
        {ok, S} = gen_tcp:connect({127, 0, 0, 1}, Port, [binary, {active, false}]),
        ok = gen_tcp:send(S, "GET /hello HTTP/1.1\r\nHost: x\r\n"),
        expect(S, error_close(<<"408 Request Timeout">>)),
        closed(S)
    end).

%% @doc A connection idle between requests longer than idle_timeout_ms: closed silently.
idle_timeout(Config) ->
    short_timeouts(Config, fun(Port) ->
        S = exchange(Port, get("/hello", ""), ok200(?TEXT, <<"Hello, Joe!">>)),
        ?assertEqual({error, closed}, gen_tcp:recv(S, 0, 10000)),
        gen_tcp:close(S)
    end).

%% @doc stats/1 has the same keys for every engine and counts what was served.
stats_keys(Config) ->
    Server = proplists:get_value(server, Config),
    Before = cbench:stats(Server),
    S = exchange(port(Config), get("/hello", ""), ok200(?TEXT, <<"Hello, Joe!">>)),
    gen_tcp:close(S),
    Keys = [accept_backoffs, bytes_read, bytes_written, conns_accepted, conns_by_proto,
            conns_closed, conns_open, faults, h2_errors, h2_parked, h2_woken, handler_overflows, handler_timeouts,
            handler_unavailable,
            proxy_502, proxy_504, proxy_requests, proxy_upstream_connects, proxy_upstream_reused,
            record_skipped, recorded, recorded_duplicates,
            requests, requests_by_proto, requests_by_route, resets, status_400, status_404, status_405,
            status_413, status_431, timeouts, tls_handshakes_failed, tls_handshakes_full,
            tls_handshakes_refused, tls_handshakes_resumed, tls_ktls],
    After = wait_stats(Server, fun(#{conns_closed := C}) -> C > maps:get(conns_closed, Before) end),
    ?assertEqual(Keys, lists:sort(maps:keys(After))),
    ?assertEqual([cookies, delay, echo, echo_chunked, fault, file_big, file_small, file_tiny, gzip,
                  headers, hello, json, large, not_found, root, sse, sse_big, sse_small, status, stream,
                  stream_big, stream_small, ws],
                 lists:sort(maps:keys(maps:get(requests_by_route, After)))),
    ?assertEqual([h1_tls, h2_tls, h2c_prior, h2c_upgrade, http1],
                 lists:sort(maps:keys(maps:get(conns_by_proto, After)))),
    Hello = fun(M) -> maps:get(hello, maps:get(requests_by_route, M)) end,
    ?assertEqual(Hello(Before) + 1, Hello(After)),
    ?assert(maps:get(requests, After) > maps:get(requests, Before)),
    ?assert(maps:get(bytes_read, After) > maps:get(bytes_read, Before)),
    ok.

%% @doc Trailers of a chunked body are read and dropped: /headers does not list them, and every route
%% answers as without them. Their own budget is max_header_bytes (4096 here): over it, 431; when the
%% answer has begun (/echo/chunked), the connection is cut without a second status.
trailers(Config) ->
    P = port(Config),
    Chunked = fun(Path, Trailers) ->
                      ["GET ", Path, " HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n",
                       Trailers, "\r\n"]
              end,
    Big = ["X-Trailer: ", binary:copy(<<"A">>, 3000), "\r\n"],
    Many = [["X-T", integer_to_list(I), ": ", integer_to_list(I), "\r\n"] || I <- lists:seq(1, 20)],
    Json = ok200(?JSON, <<"{\"host\":\"x\",\"transfer-encoding\":\"chunked\"}">>),
    S = exchange(P, Chunked("/headers", Big), Json),
    exchange(S, Chunked("/headers", Many), Json),
    exchange(S, Chunked("/delay/1", Big), ok200(?TEXT, <<"ok">>)),
    exchange(S, Chunked("/status/201", Big), empty(<<"201 Created">>)),
    still_open(S),
    gen_tcp:close(S),
    TooBig = ["X-Trailer: ", binary:copy(<<"A">>, 5000), "\r\n"],
    closed(exchange(P, Chunked("/hello", TooBig), error_close(<<"431 Request Header Fields Too Large">>))),
    TooMany = [["X-T", integer_to_list(I), ": ", binary:copy(<<"v">>, 100), "\r\n"]
               || I <- lists:seq(1, 60)],
    closed(exchange(P, Chunked("/hello", TooMany), error_close(<<"431 Request Header Fields Too Large">>))),
    closed(exchange(P, Chunked("/hello", "X Bad: 1\r\n"), error_close(<<"400 Bad Request">>))),
    S2 = exchange(P, "POST /echo/chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                  "3\r\nabc\r\n",
                  resp(<<"200 OK">>, ?OCTET, <<"transfer-encoding: chunked">>, <<"3\r\nabc\r\n">>)),
    ok = gen_tcp:send(S2, ["0\r\n" | TooBig]),
    closed(S2).

%% @doc Chunked framing: CRLF after chunk data is checked (no smuggling), extensions `;a=b;c=d' and
%% quoted values are accepted, malformed ones are 400, and all of a request's extensions together may
%% take max_header_bytes (4096 here): over it, 413.
chunk_framing(Config) ->
    P = port(Config),
    Post = fun(Body) ->
                   ["POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", Body]
           end,
    E400 = error_close(<<"400 Bad Request">>),
    S = exchange(P, Post("5;a=b;c=d\r\nhello\r\n0\r\n\r\n"), ok200(?OCTET, <<"hello">>)),
    exchange(S, Post("5;a=\"b c\";d\r\nhello\r\n3;q=1;r=\"\";s\r\nabc\r\n0;z=9\r\n\r\n"),
             ok200(?OCTET, <<"helloabc">>)),
    still_open(S),
    gen_tcp:close(S),
    [closed(exchange(P, Post(Body), E400))
     || Body <- ["2\r\nabcd0\r\n\r\n", "2\r\nab\n0\r\n\r\n", "2\r\nabXY0\r\n\r\n",
                 "5;=b\r\nhello\r\n0\r\n\r\n", "5;a=\r\nhello\r\n0\r\n\r\n",
                 "5;a=b;\r\nhello\r\n0\r\n\r\n", "5; a=b\r\nhello\r\n0\r\n\r\n",
                 "5 ;a=b\r\nhello\r\n0\r\n\r\n", "5;a=\"x\\\\y\"\r\nhello\r\n0\r\n\r\n",
                 "5;a=b c\r\nhello\r\n0\r\n\r\n", "5\nhello\r\n0\r\n\r\n"]],
    E413 = error_close(<<"413 Content Too Large">>),
    closed(exchange(P, Post(["1", lists:duplicate(1100, ";a=b"), "\r\nx\r\n0\r\n\r\n"]), E413)),
    %% Spread over chunks: 10 chunks of 600 bytes of extensions.
    Ext = [";e=", binary:copy(<<"v">>, 595)],
    closed(exchange(P, Post([[["1", Ext, "\r\nx\r\n"] || _ <- lists:seq(1, 10)], "0\r\n\r\n"]), E413)).

%% @doc The request target holds visible ASCII only: control bytes and raw non-ASCII bytes get 400.
bad_targets(Config) ->
    P = port(Config),
    E400 = error_close(<<"400 Bad Request">>),
    [closed(exchange(P, ["GET /he", [C], "llo HTTP/1.1\r\nHost: x\r\n\r\n"], E400))
     || C <- [1, 8, 9, 12, 16#1b, 16#7f, 16#80, 16#c3, 16#ff]],
    closed(exchange(P, "GET /hello?a\x01b HTTP/1.1\r\nHost: x\r\n\r\n", E400)),
    S = exchange(P, "GET /hello?a=%C3%A9&b=~!$'()*+,;= HTTP/1.1\r\nHost: x\r\n\r\n",
                 ok200(?TEXT, <<"Hello, Joe!">>)),
    gen_tcp:close(S).

%% @doc The request line: methods other than RFC 9110's and PATCH get 501, HTTP/0.9 (a line without
%% a version) gets 400 at once, versions other than 1.0 and 1.1 get 505; each closes. Known methods
%% other than GET, HEAD and POST get 405 on a fixture path and 404 elsewhere.
request_line(Config) ->
    P = port(Config),
    E = fun(Status) -> error_close(Status) end,
    [closed(exchange(P, Req, E(Status)))
     || {Req, Status} <-
            [{"FOO /hello HTTP/1.1\r\nHost: x\r\n\r\n", <<"501 Not Implemented">>},
             {"PROPFIND /hello HTTP/1.1\r\nHost: x\r\n\r\n", <<"501 Not Implemented">>},
             {"get /hello HTTP/1.1\r\nHost: x\r\n\r\n", <<"501 Not Implemented">>},
             {"FOO /nope HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc", <<"501 Not Implemented">>},
             {"G@T /hello HTTP/1.1\r\nHost: x\r\n\r\n", <<"400 Bad Request">>},
             {"GARBAGE\r\n\r\n", <<"400 Bad Request">>},
             {"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n", <<"400 Bad Request">>},
             {"GET /hello\r\n", <<"400 Bad Request">>},
             {"GET /hello HTTP/0.9\r\n\r\n", <<"400 Bad Request">>},
             {"GET /hello HTTP/2.0\r\nHost: x\r\n\r\n", <<"505 HTTP Version Not Supported">>},
             {"GET /hello HTTP/1.2\r\nHost: x\r\n\r\n", <<"505 HTTP Version Not Supported">>},
             {"GET /hello HTTP/3.0\r\nHost: x\r\n\r\n", <<"505 HTTP Version Not Supported">>},
             {"GET /hello HTTP/1.10\r\nHost: x\r\n\r\n", <<"400 Bad Request">>}]],
    A = resp(<<"405 Method Not Allowed">>, [<<"allow: GET, HEAD">>], <<"content-length: 0">>, <<>>),
    S = exchange(P, "PATCH /hello HTTP/1.1\r\nHost: x\r\n\r\n", A),
    [exchange(S, [M, " /hello HTTP/1.1\r\nHost: x\r\n\r\n"], A)
     || M <- ["PUT", "DELETE", "OPTIONS", "TRACE"]],
    exchange(S, "OPTIONS /nope HTTP/1.1\r\nHost: x\r\n\r\n", empty(<<"404 Not Found">>)),
    still_open(S),
    gen_tcp:close(S).

%% @doc Host (RFC 9112 3.2): an HTTP/1.1 request without one, with two, or with a malformed one gets
%% 400; HTTP/1.0 may leave it out; an empty one, an IP literal and a port are fine.
host_header(Config) ->
    P = port(Config),
    E400 = error_close(<<"400 Bad Request">>),
    Req = fun(Version, Hosts) -> ["GET /hello ", Version, "\r\n", [["Host: ", H, "\r\n"] || H <- Hosts], "\r\n"] end,
    [closed(exchange(P, Req(V, Hs), E400))
     || {V, Hs} <- [{"HTTP/1.1", []}, {"HTTP/1.1", ["a", "b"]}, {"HTTP/1.1", ["a", "a"]},
                    {"HTTP/1.0", ["a", "a"]}, {"HTTP/1.1", ["a b"]}, {"HTTP/1.1", ["a:b"]},
                    {"HTTP/1.1", ["a/b"]}, {"HTTP/1.1", ["a%4"]}, {"HTTP/1.1", ["[::1"]},
                    {"HTTP/1.1", ["[]"]}, {"HTTP/1.1", ["a@b"]}, {"HTTP/1.0", ["x y"]}]],
    Hello = ok200(?TEXT, <<"Hello, Joe!">>),
    S = exchange(P, Req("HTTP/1.1", [""]), Hello),
    [exchange(S, Req("HTTP/1.1", [H]), Hello)
     || H <- ["127.0.0.1:8080", "[::1]:80", "[v1.x]", "example.com", "ex-ample.com:", "a%20b",
              "a.b_c~d!$&'()*+,;="]],
    still_open(S),
    gen_tcp:close(S),
    S2 = exchange(P, "GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
                  resp(<<"200 OK">>, ?TEXT, <<"content-length: 11\r\nconnection: keep-alive">>,
                       <<"Hello, Joe!">>)),
    gen_tcp:close(S2).

wait_stats(Server, Pred) -> wait_stats(Server, Pred, 50).
wait_stats(Server, _Pred, 0) -> cbench:stats(Server);
wait_stats(Server, Pred, N) ->
    St = cbench:stats(Server),
    case Pred(St) of
        true -> St;
        false -> timer:sleep(20), wait_stats(Server, Pred, N - 1)
    end.
