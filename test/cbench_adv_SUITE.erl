%%% @doc The wire findings of issue 22 on every engine: one table of exact request bytes, sent over
%%% gen_tcp to nif, port and ehttpd, each answer compared with the bytes docs/wire.md gives (the
%%% `date' value masked) and so with the other engines'; then the echo budgets shared by WebSocket
%%% messages and `/echo' bodies, and a stub's body file replaced by a FIFO after the stub was added.
-module(cbench_adv_SUITE).

-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1]).
-export([wire_table/1, ws_server_budget/1, stub_file_fifo/1, template_obs_text/1,
         template_echo_budget/1]).

all() -> [wire_table, ws_server_budget, stub_file_fifo, template_obs_text, template_echo_budget].

suite() -> [{timetrap, {minutes, 3}}].

-define(ENGINES, [nif, port, ehttpd]).
%% A small body limit, so that the budgets (2 and 32 limits) are reached with little memory.
-define(LIMIT, 1000).
-define(KEY, "dGhlIHNhbXBsZSBub25jZQ==").
-define(ACCEPT, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=").

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(cbench),
    Config.

end_per_suite(_Config) ->
    ok.

%%% The table

%% A WebSocket handshake with spaces after the version and the key (taken: RFC 9112 5 drops them).
handshake() ->
    "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    "Sec-WebSocket-Key: " ?KEY " \r\nSec-WebSocket-Version: 13 \r\n\r\n".

%% A masked empty close frame, and the server's empty close in answer.
-define(CLOSE, <<16#88, 16#80, 0, 0, 0, 0>>).
-define(CLOSE_ANSWER, <<16#88, 0>>).
-define(WS_101, "HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nupgrade: websocket\r\n"
                "sec-websocket-accept: " ?ACCEPT "\r\n\r\n").
-define(CLOSE_REQ, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").
-define(CLOSE_ANS, "HTTP/1.1 200 OK\r\ndate: *\r\ncontent-length: 12\r\nconnection: close\r\n\r\nhello world!").
-define(E413, "HTTP/1.1 413 Content Too Large\r\ndate: *\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").
-define(E400, "HTTP/1.1 400 Bad Request\r\ndate: *\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").
-define(CONNECT_405, "HTTP/1.1 405 Method Not Allowed\r\ndate: *\r\nallow: GET, HEAD\r\ncontent-length: 0\r\n"
                    "connection: close\r\n\r\n").

%% {Name, request bytes, the answer}: each case ends with the server's close, so the answer is all
%% that comes back until then.
cases() ->
    [{host_trailing_space,
      "GET / HTTP/1.1\r\nHost: x \r\nConnection: close\r\n\r\n", ?CLOSE_ANS},
     {host_tab_around, "GET / HTTP/1.1\r\nHost:\tx\t\r\nConnection: close\r\n\r\n", ?CLOSE_ANS},
     {headers_whitespace_around,
      "GET /headers HTTP/1.1\r\nHost: x\r\na:  b  \r\nc:\t d \t\r\nConnection: close\r\n\r\n",
      "HTTP/1.1 200 OK\r\ndate: *\r\ncontent-type: application/json\r\ncontent-length: 49\r\n"
      "connection: close\r\n\r\n{\"host\":\"x\",\"a\":\"b\",\"c\":\"d\",\"connection\":\"close\"}"},
     {ws_version_and_key_with_space, [handshake(), ?CLOSE], [?WS_101, ?CLOSE_ANSWER]},
     {http10_chunked_closes,
      "POST /echo HTTP/1.0\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n"
      "5\r\nhello\r\n0\r\n\r\nGET /hello HTTP/1.0\r\n\r\n",
      "HTTP/1.1 200 OK\r\ndate: *\r\ncontent-type: application/octet-stream\r\ncontent-length: 5\r\n"
      "connection: close\r\n\r\nhello"},
     {http10_expect_no_100,
      "POST /echo HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi",
      "HTTP/1.1 200 OK\r\ndate: *\r\ncontent-type: application/octet-stream\r\ncontent-length: 2\r\n"
      "connection: close\r\n\r\nhi"},
     {expect_100_then_echo,
      "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi",
      "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ndate: *\r\ncontent-type: application/octet-stream\r\n"
      "content-length: 2\r\nconnection: close\r\n\r\nhi"},
     {chunk_size_max_at_once,
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n", ?E413},
     {second_chunk_past_limit,
      ["POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3e8\r\n",
       binary:copy(<<"a">>, 1000), "\r\n1\r\n"], ?E413},
     {ws_behind_hello, ["GET /hello HTTP/1.1\r\nHost: x\r\n\r\n", handshake(), ?CLOSE],
      ["HTTP/1.1 200 OK\r\ndate: *\r\ncontent-type: text/plain\r\ncontent-length: 11\r\n\r\nHello, Joe!",
       ?WS_101, ?CLOSE_ANSWER]},
     {ws_behind_delay, ["GET /delay/100 HTTP/1.1\r\nHost: x\r\n\r\n", handshake(), ?CLOSE],
      ["HTTP/1.1 200 OK\r\ndate: *\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\nok",
       ?WS_101, ?CLOSE_ANSWER]},
     %% A content-length past 2^64-1 is malformed (400), as llhttp reads it, digit by digit (ehttpd
     %% answered 413, and converted the whole digit string: quadratic in its length); 2^64-1 itself
     %% is only too large (413); leading zeros do not count.
     {content_length_over_64_bits,
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 18446744073709551616\r\n\r\n", ?E400},
     {content_length_64_bits,
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 18446744073709551615\r\n\r\n", ?E413},
     {content_length_leading_zeros,
      ["POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: ", lists:duplicate(1000, $0),
       "2\r\nConnection: close\r\n\r\nab"],
      "HTTP/1.1 200 OK\r\ndate: *\r\ncontent-type: application/octet-stream\r\ncontent-length: 2\r\n"
      "connection: close\r\n\r\nab"},
     %% A control byte but HTAB in a field value (RFC 9110 5.5): 400, as llhttp's strict mode. ehttpd
     %% took them, and its proxy passed a lone CR on to the upstream (`x: a<CR>injected: 1').
     {value_control_byte, "GET / HTTP/1.1\r\nHost: x\r\nX: a\x01b\r\nConnection: close\r\n\r\n", ?E400},
     {value_del, "GET / HTTP/1.1\r\nHost: x\r\nX: a\x7fb\r\nConnection: close\r\n\r\n", ?E400},
     {value_lone_cr, "GET /headers HTTP/1.1\r\nHost: x\r\nX: a\rinjected: 1\r\nConnection: close\r\n\r\n",
      ?E400},
     %% llhttp 8.1's limit (docs/wire.md): a tab after a content-length or transfer-encoding value
     %% is a 400, a space is not (ehttpd took both).
     {content_length_tab_after,
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2 \t\r\nConnection: close\r\n\r\nab", ?E400},
     {transfer_encoding_tab_after,
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\t\r\nConnection: close\r\n\r\n0\r\n\r\n",
      ?E400},
     {content_length_space_after,
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2 \r\nConnection: close\r\n\r\nab",
      "HTTP/1.1 200 OK\r\ndate: *\r\ncontent-type: application/octet-stream\r\ncontent-length: 2\r\n"
      "connection: close\r\n\r\nab"},
     %% obs-text (bytes 0x80-0xFF, RFC 9110 5.5) in the token lists of connection, transfer-encoding
     %% and upgrade: bytes like any other, not UTF-8 (ehttpd closed without an answer).
     {connection_obs_text, "GET / HTTP/1.1\r\nHost: x\r\nConnection: \xff, close\r\n\r\n", ?CLOSE_ANS},
     {transfer_encoding_obs_text,
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: \xff\r\n\r\n", ?E400},
     %% Transfer codings (RFC 9112 6.1): those of every transfer-encoding field, in order, must end
     %% with chunked, and chunked must come once; the others are not undone (the body is passed on as
     %% received). ehttpd took one field of `chunked' alone (400 for `gzip, chunked').
     {transfer_encoding_gzip_chunked,
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n"
      "3\r\nabc\r\n0\r\n\r\n",
      "HTTP/1.1 200 OK\r\ndate: *\r\ncontent-type: application/octet-stream\r\ncontent-length: 3\r\n"
      "connection: close\r\n\r\nabc"},
     {transfer_encoding_two_fields,
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n"
      "Connection: close\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
      "HTTP/1.1 200 OK\r\ndate: *\r\ncontent-type: application/octet-stream\r\ncontent-length: 3\r\n"
      "connection: close\r\n\r\nabc"},
     {transfer_encoding_chunked_twice,
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
      ?E400},
     {transfer_encoding_chunked_in_two_fields,
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"
      "3\r\nabc\r\n0\r\n\r\n", ?E400},
     %% An empty transfer-encoding field (RFC 9112 6.3: a coding list that does not end in chunked) is a
     %% 400, not framing by content-length: llhttp sets no flag for it (the C engines served the body as
     %% content-length framed it); beside a chunked field it changes nothing.
     {transfer_encoding_empty,
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: \r\nContent-Length: 3\r\n\r\nabc", ?E400},
     {transfer_encoding_empty_get, "GET /hello HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\n\r\n", ?E400},
     {transfer_encoding_empty_beside_chunked,
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: \r\nTransfer-Encoding: chunked\r\n"
      "Connection: close\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
      "HTTP/1.1 200 OK\r\ndate: *\r\ncontent-type: application/octet-stream\r\ncontent-length: 3\r\n"
      "connection: close\r\n\r\nabc"},
     {transfer_encoding_not_chunked_last,
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
      ?E400},
     %% obs-fold (RFC 9112 5.2): a 400 on every engine. llhttp 8.1 takes it and the C engines joined
     %% it (`a b'); ehttpd refused it only because http_bin keeps its CRLF in the value. One before
     %% any byte of the value is skipped by llhttp as the whitespace before the value, the RFC's
     %% replacement by SP: every engine takes `b' there.
     {obs_fold, "GET /headers HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\nConnection: close\r\n\r\n", ?E400},
     {obs_fold_tab, "GET /headers HTTP/1.1\r\nHost: x\r\nX: a \r\n\tb\r\nConnection: close\r\n\r\n", ?E400},
     {obs_fold_connection, "GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n ,close\r\n\r\n", ?E400},
     {obs_fold_before_value,
      "GET /headers HTTP/1.1\r\nHost: x\r\nX:\r\n b\r\nConnection: close\r\n\r\n",
      "HTTP/1.1 200 OK\r\ndate: *\r\ncontent-type: application/json\r\ncontent-length: 41\r\n"
      "connection: close\r\n\r\n{\"host\":\"x\",\"x\":\"b\",\"connection\":\"close\"}"},
     %% CONNECT (RFC 9110 9.3.6) opens no tunnel: answered as the routes say, then the connection
     %% closes and nothing after the head is read. The C engines read a CONNECT's body as the next
     %% request (llhttp ends the message at the head); ehttpd read it as a body, and kept the
     %% connection.
     {connect_body_is_no_request,
      "CONNECT /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 32\r\n\r\nGET /hello HTTP/1.1\r\nHost: x\r\n\r\n",
      ?CONNECT_405},
     {connect_chunked,
      "CONNECT /hello HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nGET /hello HTTP/1.1\r\nHost: x\r\n\r\n",
      ?CONNECT_405},
     {connect_then_request, "CONNECT x:443 HTTP/1.1\r\nHost: x\r\n\r\nGET /hello HTTP/1.1\r\nHost: x\r\n\r\n",
      "HTTP/1.1 404 Not Found\r\ndate: *\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"},
     %% The trailers fault to HTTP/1.0, which has no chunked coding (RFC 9112 7): the body as a
     %% streamed route sends it there, without trailers, ended by the close.
     {trailers_http10, "GET /fault/trailers?length=5 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
      <<"HTTP/1.1 200 OK\r\ndate: *\r\ncontent-type: application/octet-stream\r\nconnection: close\r\n\r\n",
        0, 1, 2, 3, 4>>},
     %% malformed_chunk and missing_last_chunk to HTTP/1.0 likewise (RFC 9112 7): no
     %% transfer-encoding and no chunk-size lines; malformed_chunk's `zz' line after the body bytes,
     %% missing_last_chunk's body ended by the close.
     {malformed_chunk_http10,
      "GET /fault/malformed_chunk?bytes=3 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
      <<"HTTP/1.1 200 OK\r\ndate: *\r\ncontent-type: application/octet-stream\r\nconnection: close\r\n\r\n",
        0, 1, 2, "zz\r\n">>},
     {malformed_chunk_http10_head, "HEAD /fault/malformed_chunk?bytes=3 HTTP/1.0\r\n\r\n",
      <<"HTTP/1.1 200 OK\r\ndate: *\r\ncontent-type: application/octet-stream\r\nconnection: close\r\n\r\n"
        "zz\r\n">>},
     {missing_last_chunk_http10, "GET /fault/missing_last_chunk?length=3 HTTP/1.0\r\n\r\n",
      <<"HTTP/1.1 200 OK\r\ndate: *\r\ncontent-type: application/octet-stream\r\nconnection: close\r\n\r\n",
        0, 1, 2>>},
     {upgrade_obs_text,
      ["GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: \xff, websocket\r\nConnection: Upgrade\r\n"
       "Sec-WebSocket-Key: " ?KEY "\r\nSec-WebSocket-Version: 13\r\n\r\n", ?CLOSE],
      [?WS_101, ?CLOSE_ANSWER]}].

%% @doc Every case on every engine: the same exact bytes, those of docs/wire.md.
wire_table(_Config) ->
    Got = [begin
               {ok, S} = cbench:start_server(E, #{port => 0, max_body_bytes => ?LIMIT}),
               P = cbench:port(S),
               Answers = [{Name, mask_date(exchange(P, Req))} || {Name, Req, _} <- cases()],
               ok = cbench:stop_server(S),
               {E, Answers}
           end || E <- ?ENGINES],
    Want = [{Name, iolist_to_binary(A)} || {Name, _, A} <- cases()],
    [ct:log("~p: ~p", [E, Answers]) || {E, Answers} <- Got],
    %% Every difference at once: {Engine, Case, Wanted, Got}.
    ?assertEqual([], [{E, Name, W, A} || {E, Answers} <- Got,
                                         {{Name, W}, {Name, A}} <- lists:zip(Want, Answers), W =/= A]),
    ok.

%%% The echo budgets

%% @doc WebSocket messages and /echo bodies share the server's budget, 32 body limits: 32
%% connections each hold a full-size message open (a fragment without FIN, acknowledged by the
%% pong of the ping behind it); then a data frame on a 33rd connection gets the close code 1013
%% and an /echo body a 503 at once; once one holder has gone, the budget is free again.
ws_server_budget(_Config) ->
    [budget(E) || E <- ?ENGINES],
    ok.

budget(E) ->
    {ok, S} = cbench:start_server(E, #{port => 0, max_body_bytes => ?LIMIT}),
    P = cbench:port(S),
    Holders = [begin
                   C = ws_open(P),
                   ok = gen_tcp:send(C, [masked(2, 0, binary:copy(<<"a">>, ?LIMIT)), masked(9, 1, <<"p">>)]),
                   ?assertEqual({E, {ok, <<16#8a, 1, "p">>}}, {E, gen_tcp:recv(C, 3, 5000)}),
                   C
               end || _ <- lists:seq(1, 32)],
    C33 = ws_open(P),
    ok = gen_tcp:send(C33, masked(2, 1, <<"x">>)),
    ?assertEqual({E, <<16#88, 2, 1013:16>>}, {E, recv_all(C33)}),
    {ok, C34} = gen_tcp:connect({127, 0, 0, 1}, P, [binary, {active, false}]),
    ok = gen_tcp:send(C34, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n"),
    ?assertEqual({E, <<"HTTP/1.1 503 Service Unavailable\r\ndate: *\r\ncontent-length: 0\r\n\r\n">>},
                 {E, mask_date(recv_head(C34))}),
    %% The refused body is read and dropped; the connection goes on.
    ok = gen_tcp:send(C34, ["abc", ?CLOSE_REQ]),
    ?assertEqual({E, <<?CLOSE_ANS>>}, {E, mask_date(recv_all(C34))}),
    %% A chunked body: refused at its first chunk, the rest read and dropped.
    {ok, C35} = gen_tcp:connect({127, 0, 0, 1}, P, [binary, {active, false}]),
    ok = gen_tcp:send(C35, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n"),
    ?assertEqual({E, <<"HTTP/1.1 503 Service Unavailable\r\ndate: *\r\ncontent-length: 0\r\n\r\n">>},
                 {E, mask_date(recv_head(C35))}),
    ok = gen_tcp:send(C35, ["2\r\nde\r\n0\r\n\r\n", ?CLOSE_REQ]),
    ?assertEqual({E, <<?CLOSE_ANS>>}, {E, mask_date(recv_all(C35))}),
    [gen_tcp:close(C) || C <- Holders],
    ?assertEqual({E, ok}, {E, echo_within(P, 50)}),
    ok = cbench:stop_server(S).

%% An /echo of 3 bytes answered 200, tried every 100 ms up to N times (holders closing is seen by
%% the server a little after the client closed).
echo_within(_P, 0) -> no_room;
echo_within(P, N) ->
    Got = mask_date(exchange(P, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc")),
    case Got of
        <<"HTTP/1.1 200 OK", _/binary>> -> ok;
        _ -> timer:sleep(100), echo_within(P, N - 1)
    end.

ws_open(P) ->
    {ok, C} = gen_tcp:connect({127, 0, 0, 1}, P, [binary, {active, false}]),
    ok = gen_tcp:send(C, handshake()),
    W = <<?WS_101>>,
    {ok, W} = gen_tcp:recv(C, byte_size(W), 5000),
    C.

%% A client frame with FIN as given, masked with the zero key (the payload unchanged).
masked(Op, Fin, P) when byte_size(P) < 126 -> <<Fin:1, 0:3, Op:4, 1:1, (byte_size(P)):7, 0:32, P/binary>>;
masked(Op, Fin, P) -> <<Fin:1, 0:3, Op:4, 1:1, 126:7, (byte_size(P)):16, 0:32, P/binary>>.

%%% A stub's body file

%% @doc A stub's body is the file it was added with: a FIFO put in its place afterwards neither
%% blocks a connection nor changes the answer (the C engine keeps the descriptor it opened at add
%% time; ehttpd keeps its own).
stub_file_fifo(Config) ->
    Dir = proplists:get_value(priv_dir, Config),
    [begin
         Path = filename:join(Dir, atom_to_list(E) ++ "_body"),
         ok = file:write_file(Path, <<"from the file">>),
         {ok, S} = cbench:start_server(E, #{port => 0}),
         {ok, _} = cbench:stub(S, <<"/f">>, #{body => {file, list_to_binary(Path)}}),
         {ok, _} = cbench:stub(S, <<"/c">>, #{body => {file, list_to_binary(Path)},
                                             chunks => {2, 1}}),
         {ok, _} = cbench:stub(S, <<"/d">>, #{body => {file, list_to_binary(Path)},
                                             fault => <<"dribble?pieces=2&ms=2">>}),
         ok = file:delete(Path),
         "" = os:cmd("mkfifo " ++ Path),
         P = cbench:port(S),
         ?assertEqual({E, <<"HTTP/1.1 200 OK\r\ndate: *\r\ncontent-length: 13\r\nconnection: close\r\n\r\n"
                            "from the file">>},
                      {E, mask_date(exchange(P, "GET /f HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))}),
         ?assertEqual({E, <<"HTTP/1.1 200 OK\r\ndate: *\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
                            "6\r\nfrom t\r\n7\r\nhe file\r\n0\r\n\r\n">>},
                      {E, mask_date(exchange(P, "GET /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))}),
         ?assertEqual({E, <<"HTTP/1.1 200 OK\r\ndate: *\r\ncontent-length: 13\r\nconnection: close\r\n\r\n"
                            "from the file">>},
                      {E, mask_date(exchange(P, "GET /d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))}),
         ok = cbench:stop_server(S),
         ok = file:delete(Path)
     end || E <- ?ENGINES],
    ok.

%% @doc A template inserts a request header's obs-text bytes (0x80-0xFF) as they came, in a
%% header value (trimmed of spaces and tabs) and in the body, on every engine (ehttpd closed
%% without an answer: its trim read the value as UTF-8).
template_obs_text(_Config) ->
    [begin
         {ok, S} = cbench:start_server(E, #{port => 0}),
         {ok, _} = cbench:stub(S, "/t", #{template => true, headers => [{"x-v", "{{header.x-a}}"}],
                                          body => <<"[{{header.x-a}}]">>}),
         ?assertEqual({E, <<"HTTP/1.1 200 OK\r\ndate: *\r\nx-v: \xff\xfe\r\ncontent-length: 4\r\n"
                            "connection: close\r\n\r\n[\xff\xfe]">>},
                      {E, mask_date(exchange(cbench:port(S), "GET /t HTTP/1.1\r\nHost: x\r\n"
                                             "x-a: \xff\xfe\r\nConnection: close\r\n\r\n"))}),
         ok = cbench:stop_server(S)
     end || E <- ?ENGINES],
    ok.

%% @doc A template's request body ({{body}}) and its rendered answer (header values and body) are
%% held from the connection's echo budget, two body limits: at the budget a 200, one byte over it
%% a 503 (the body read whole first; the connection goes on), as src/kinds/stub.c holds them on
%% every engine (ehttpd held nothing and answered 200).
template_echo_budget(_Config) ->
    Body = binary:copy(<<"a">>, ?LIMIT),
    Post = fun(Path, B) ->
                   ["POST ", Path, " HTTP/1.1\r\nHost: x\r\nContent-Length: ", integer_to_list(byte_size(B)),
                    "\r\n\r\n", B]
           end,
    E503 = <<"HTTP/1.1 503 Service Unavailable\r\ndate: *\r\ncontent-length: 0\r\n\r\n">>,
    [begin
         {ok, S} = cbench:start_server(E, #{port => 0, max_body_bytes => ?LIMIT}),
         P = cbench:port(S),
         %% The body held (1000) and rendered once (1000): the budget, 2000.
         {ok, _} = cbench:stub(S, "/b1", #{template => true, body => <<"{{body}}">>}),
         %% One byte over: rendered 1001.
         {ok, _} = cbench:stub(S, "/b1x", #{template => true, body => <<"{{body}}x">>}),
         %% Twice over, the second copy in a header value (cut at 8,192, so 1000).
         {ok, _} = cbench:stub(S, "/b2", #{template => true, headers => [{"x-b", "{{body}}"}],
                                           body => <<"{{body}}">>}),
         %% No body held: the rendered answer alone, 1996 + the method.
         {ok, _} = cbench:stub(S, "/m", #{template => true,
                                          body => <<(binary:copy(<<"m">>, 1996))/binary, "{{method}}">>}),
         ?assertEqual({E, <<"HTTP/1.1 200 OK\r\ndate: *\r\ncontent-length: 1000\r\n\r\n", Body/binary,
                            ?CLOSE_ANS>>},
                      {E, mask_dates(exchange(P, [Post("/b1", Body), ?CLOSE_REQ]))}),
         [?assertEqual({E, Path, <<E503/binary, ?CLOSE_ANS>>},
                       {E, Path, mask_dates(exchange(P, [Post(Path, Body), ?CLOSE_REQ]))})
          || Path <- ["/b1x", "/b2"]],
         ?assertEqual({E, <<"HTTP/1.1 200 OK\r\ndate: *\r\ncontent-length: 2000\r\nconnection: close\r\n\r\n",
                            (binary:copy(<<"m">>, 1996))/binary, "POST">>},
                      {E, mask_date(exchange(P, "POST /m HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
                                             "Connection: close\r\n\r\n"))}),
         ?assertEqual({E, <<E503/binary, ?CLOSE_ANS>>},
                      {E, mask_dates(exchange(P, ["PATCH /m HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
                                                 ?CLOSE_REQ]))}),
         ok = cbench:stop_server(S)
     end || E <- ?ENGINES],
    ok.

%%% Helpers

%% Sends Req and reads until the server closes (5 s at most between reads).
exchange(P, Req) ->
    {ok, C} = gen_tcp:connect({127, 0, 0, 1}, P, [binary, {active, false}]),
    ok = gen_tcp:send(C, Req),
    recv_all(C).

recv_all(C) -> recv_all(C, <<>>).
recv_all(C, Acc) ->
    case gen_tcp:recv(C, 0, 5000) of
        {ok, D} -> recv_all(C, <<Acc/binary, D/binary>>);
        {error, _} -> gen_tcp:close(C), Acc
    end.

recv_head(C) -> recv_head(C, <<>>).
recv_head(C, Acc) ->
    case binary:match(Acc, <<"\r\n\r\n">>) of
        nomatch ->
            {ok, D} = gen_tcp:recv(C, 0, 5000),
            recv_head(C, <<Acc/binary, D/binary>>);
        _ -> Acc
    end.

mask_date(B) -> re:replace(B, "date: [^\r]*", "date: *", [{return, binary}]).

%% Every date field masked (answers after the first on one connection).
mask_dates(B) -> re:replace(B, "date: [^\r]*", "date: *", [global, {return, binary}]).
