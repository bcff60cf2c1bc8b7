%%% @doc Erlang handlers (issue 14): routes answered by a process, on the nif, port and ehttpd
%%% engines. Every reply form is compared byte for byte with a stub that answers the same
%%% (HTTP/1.1 on every engine, h2c on the nif and port engines with curl); streaming;
%%% {error, gone}; 503 (no process, death before the answer); 504; a crash mid-stream (HTTP/1.1 and h2c); many
%%% concurrent requests answered out of order in one batch; one batch's answers checked each on its own where
%%% they share a header list; every field of a request as the handler gets it.
-module(cbench_handler_SUITE).

-include_lib("stdlib/include/assert.hrl").
-include_lib("common_test/include/ct.hrl").

-export([all/0, groups/0, init_per_group/2, end_per_group/2]).
-export([reply_forms/1, request_fields/1, reply_forms_h2c/1, gone_and_badarg/1, unavailable/1, timeout/1,
         crash_mid_stream/1, crash_mid_stream_h2c/1, concurrent_out_of_order/1,
         body_stream/1, body_stream_h2c/1, pool/1, batch_checks/1, stream_overflow/1]).
-export([pool_answer/1]).

all() -> [{group, nif}, {group, port}, {group, ehttpd}].

groups() ->
    Cases = [reply_forms, request_fields, gone_and_badarg, unavailable, timeout, crash_mid_stream,
             concurrent_out_of_order, batch_checks, body_stream, pool, stream_overflow],
    H2c = [reply_forms_h2c, crash_mid_stream_h2c, body_stream_h2c],
    [{nif, [], Cases ++ H2c}, {port, [], Cases ++ H2c}, {ehttpd, [], Cases}].

init_per_group(Engine, Config) ->
    {ok, S} = cbench:start_server(Engine, #{port => 0, threads => 2}),
    [{server, S}, {engine, Engine} | Config].

end_per_group(_Engine, Config) ->
    cbench:stop_server(?config(server, Config)).

%% ---- helpers ----

%% A handler process: Fun(Req) for each request, alone or in a batch.
handler(Fun) ->
    spawn(fun() -> handler_loop(Fun) end).

handler_loop(Fun) ->
    receive
        {cbench_request, Req} -> Fun(Req);
        {cbench_requests, Reqs} -> [Fun(R) || R <- Reqs];
        stop -> exit(normal)
    end,
    handler_loop(Fun).

%% One request on a new connection (closed by the server after the answer), the answer as read
%% until the close, dates masked.
raw(Config, Method, Path) ->
    raw(Config, Method, Path, <<>>).

raw(Config, Method, Path, Body) ->
    {ok, Sock} = gen_tcp:connect({127, 0, 0, 1}, cbench:port(?config(server, Config)),
                                 [binary, {active, false}]),
    Len = integer_to_binary(byte_size(Body)),
    ok = gen_tcp:send(Sock, [Method, " ", Path, " HTTP/1.1\r\nhost: x\r\nconnection: close\r\n",
                             "content-length: ", Len, "\r\n\r\n", Body]),
    Got = read_all(Sock, <<>>),
    gen_tcp:close(Sock),
    mask(Got).

read_all(Sock, Acc) ->
    case gen_tcp:recv(Sock, 0, 10000) of
        {ok, Data} -> read_all(Sock, <<Acc/binary, Data/binary>>);
        {error, closed} -> Acc
    end.

mask(Bin) ->
    re:replace(Bin, "date: [^\r]*", "date: X", [global, {return, binary}]).

handle(Config, Path, Target, Opts) ->
    {ok, Id} = cbench:handle(?config(server, Config), Path, Target, Opts),
    Id.

stub(Config, Path, Response) ->
    {ok, Id} = cbench:stub(?config(server, Config), Path, Response),
    Id.

stat(Config, Key) ->
    maps:get(Key, cbench:stats(?config(server, Config))).

%% The script of reply_forms' handler: the same answers as the stubs under /s/.
answer(Req = #{path := <<"/h/full">>}) ->
    ok = cbench:reply(Req, 201, [{<<"Content-Type">>, <<"text/plain">>}, {"x-a", "1"}],
                      [<<"Hello, ">>, "Joe!"]);
answer(Req = #{path := <<"/h/empty">>}) ->
    ok = cbench:reply(Req, 204, [], <<>>);
answer(Req = #{path := <<"/h/stream">>}) ->
    ok = cbench:reply_stream(Req, 200, [{<<"x-s">>, <<"1">>}]),
    ok = cbench:send(Req, <<"abc">>),
    ok = cbench:send(Req, [<<"de">>, "fg"]),
    ok = cbench:finish(Req);
answer(Req = #{path := <<"/h/echo">>, query := Q, body := B, method := M, headers := Hs}) ->
    {_, Host} = lists:keyfind(<<"host">>, 1, Hs),
    ok = cbench:reply(Req, 200, [], [M, " ", Q, " ", Host, " ", B]).

%% ---- cases ----

%% Each reply form gives the bytes of a stub with the same status, headers and body.
reply_forms(Config) ->
    H = handler(fun answer/1),
    handle(Config, "/h/*", H, #{}),
    stub(Config, "/s/full", #{status => 201, headers => [{<<"content-type">>, <<"text/plain">>},
                                                         {<<"x-a">>, <<"1">>}],
                              body => <<"Hello, Joe!">>}),
    stub(Config, "/s/empty", #{status => 204}),
    stub(Config, "/s/stream", #{headers => [{<<"x-s">>, <<"1">>}], body => <<"abcdefg">>,
                                chunks => {2, 0}}),
    [?assertEqual(raw(Config, M, "/s/" ++ P), raw(Config, M, "/h/" ++ P))
     || M <- ["GET", "HEAD"], P <- ["full", "empty", "stream"]],
    Full = raw(Config, "GET", "/h/full"),
    ?assertMatch({match, _}, re:run(Full, "^HTTP/1.1 201 Created\r\n")),
    ?assertEqual(<<"POST a=1 x 12345">>, body(raw(Config, "POST", "/h/echo?a=1", <<"12345">>))),
    H ! stop.

%% Every field of a request reaches the handler whole, and each answer its own request, whatever
%% size the numbers take on the way (in the port's frames a route id above 255 is a 32-bit integer,
%% and a request's Ref beyond 32 bits a bignum): headers in order, a query, a body of every byte
%% value, 40 requests in flight at once on two workers.
request_fields(Config) ->
    S = ?config(server, Config),
    Pads = [stub(Config, "/pad/" ++ integer_to_list(N), #{status => 200}) || N <- lists:seq(1, 260)],
    Self = self(),
    H = handler(fun(Req = #{path := P}) ->
                        Self ! {got, P, maps:remove(handle, Req)},
                        ok = cbench:reply(Req, 200, [], P)
                end),
    Id = handle(Config, "/f/*", H, #{batch => true}),
    ?assert(Id > 255),
    Body = list_to_binary(lists:seq(0, 255)),
    Ks = lists:seq(1, 40),
    Socks = [begin
                 {ok, Sock} = gen_tcp:connect({127, 0, 0, 1}, cbench:port(S), [binary, {active, false}]),
                 K1 = integer_to_list(K),
                 ok = gen_tcp:send(Sock, ["POST /f/", K1, "?a=1&b=", K1, " HTTP/1.1\r\nhost: x\r\n"
                                          "x-one: 1\r\nx-two: ", K1, "\r\nconnection: close\r\n"
                                          "content-length: 256\r\n\r\n", Body]),
                 {K, Sock}
             end || K <- Ks],
    [begin
         Resp = read_all(Sock, <<>>),
         gen_tcp:close(Sock),
         ?assertEqual(list_to_binary(["/f/", integer_to_list(K)]), body(Resp))
     end || {K, Sock} <- Socks],
    Got = maps:from_list([receive {got, P, R} -> {P, R} after 10000 -> error(no_request) end
                          || _ <- Ks]),
    [begin
         K1 = integer_to_binary(K),
         #{peer := Peer} = Req = maps:get(<<"/f/", K1/binary>>, Got),
         ?assertMatch(<<"127.0.0.1:", _/binary>>, Peer),
         ?assertEqual(#{method => <<"POST">>, path => <<"/f/", K1/binary>>,
                        query => <<"a=1&b=", K1/binary>>,
                        headers => [{<<"host">>, <<"x">>}, {<<"x-one">>, <<"1">>},
                                    {<<"x-two">>, K1}, {<<"connection">>, <<"close">>},
                                    {<<"content-length">>, <<"256">>}],
                        peer => Peer, proto => http1, body => Body}, Req)
     end || K <- Ks],
    H ! stop,
    cbench:unstub(S, Id),
    [cbench:unstub(S, P) || P <- Pads],
    ok.

body(Response) ->
    [_, Body] = binary:split(Response, <<"\r\n\r\n">>),
    Body.

%% The same over h2c (curl, prior knowledge): status, headers and body as the stub's.
reply_forms_h2c(Config) ->
    H = handler(fun answer/1),
    handle(Config, "/h/*", H, #{}),
    stub(Config, "/s/full", #{status => 201, headers => [{<<"content-type">>, <<"text/plain">>},
                                                         {<<"x-a">>, <<"1">>}],
                              body => <<"Hello, Joe!">>}),
    stub(Config, "/s/stream", #{headers => [{<<"x-s">>, <<"1">>}], body => <<"abcdefg">>,
                                chunks => {2, 0}}),
    Port = integer_to_list(cbench:port(?config(server, Config))),
    Curl = fun(P) ->
                   mask(list_to_binary(os:cmd("curl -s -i --http2-prior-knowledge http://127.0.0.1:"
                                              ++ Port ++ P)))
           end,
    [begin
         Want = Curl("/s/" ++ P),
         ?assertMatch({match, _}, re:run(Want, "^HTTP/2 20")),
         ?assertEqual(Want, Curl("/h/" ++ P))
     end || P <- ["full", "stream"]],
    H ! stop.

%% A second answer, a piece after the end, or an answer to a request that timed out: {error,
%% gone}, and nothing is sent. Terms of the wrong type: badarg. A value the engine refuses: the same
%% {error, {bad_reply, {Field, Value, Why}}} or {error, {too_large, ...}} on every engine, and the
%% request still takes its answer (issue 21: these were badarg, a 40 MiB body was ok on nif and
%% ehttpd but badarg and then a 504 on port, a bad header did not say which). A piece or an end
%% before reply_stream/3: {error, not_streaming} (it was {error, gone}), then the stream works.
gone_and_badarg(Config) ->
    Self = self(),
    Max = 32 bsl 20,
    H = handler(fun(Req = #{path := <<"/g/twice">>}) ->
                        Types = [catch cbench:reply(Req, ok, [], <<>>),
                                 catch cbench:reply(Req, 200, [x], <<>>),
                                 catch cbench:reply(Req, 200, [{<<"a">>, <<"b">>} | x], <<>>),
                                 catch cbench:reply(Req, 200, [], atom),
                                 catch cbench:reply(Req, 200, [{a, <<"b">>}], <<>>),
                                 catch cbench:reply(not_a_req, 200, [], <<>>),
                                 catch cbench:replies([{Req, 200, [], <<>>} | x]),
                                 catch cbench:replies([{Req, 200, [], <<>>}, {Req, 200, [], y}])],
                        Values = [cbench:reply(Req, 99, [], <<>>),
                                  cbench:reply(Req, 600, [], <<>>),
                                  %% Past a C int: the NIF cannot decode it (found by
                                  %% cbench_api_statem: badarg on nif only).
                                  cbench:reply(Req, 1 bsl 64, [], <<>>),
                                  cbench:reply(Req, 204, [], <<"x">>),
                                  cbench:reply_stream(Req, 304, []),
                                  cbench:reply(Req, 200, [{<<"Content-Length">>, <<"1">>}], <<"x">>),
                                  cbench:reply(Req, 200, [{<<"a b">>, <<"1">>}], <<>>),
                                  cbench:reply(Req, 200, [{<<"X-Ä"/utf8>>, <<"1">>}], <<>>),
                                  cbench:reply(Req, 200, [{<<>>, <<"1">>}], <<>>),
                                  cbench:reply(Req, 200, [{<<"x">>, <<"a\r\nb">>}], <<>>),
                                  cbench:reply(Req, 200, [{"x", [<<"a">>, 1]}], <<>>),
                                  cbench:reply(Req, 200, lists:duplicate(65, {<<"x">>, <<"1">>}),
                                               <<>>),
                                  cbench:reply(Req, 200, [{<<"x">>, binary:copy(<<"v">>, 1 bsl 20)}],
                                               <<>>),
                                  cbench:reply(Req, 200, [], binary:copy(<<"x">>, Max + 1)),
                                  cbench:replies([{Req, 99, [], <<>>}])],
                        R0 = cbench:reply(Req, 200, [], binary:copy(<<"x">>, Max)),
                        R1 = cbench:reply(Req, 200, [], <<"one">>),
                        R2 = cbench:reply_stream(Req, 200, []),
                        Self ! {results, {Types, Values}, [R0, R1, R2]};
                   (Req = #{path := <<"/g/early">>}) ->
                        Early = [cbench:send(Req, <<"x">>), cbench:finish(Req)],
                        ok = cbench:reply_stream(Req, 200, []),
                        ok = cbench:send(Req, <<"abc">>),
                        ok = cbench:finish(Req),
                        Self ! {results, Early, []};
                   (Req = #{path := <<"/g/stream">>}) ->
                        ok = cbench:reply_stream(Req, 200, []),
                        ok = cbench:finish(Req),
                        Self ! {results, [], [cbench:send(Req, <<"x">>), cbench:finish(Req)]}
                end),
    handle(Config, "/g/*", H, #{}),
    ?assertEqual(Max, byte_size(body(raw(Config, "GET", "/g/twice")))),
    receive {results, {Types, Values}, Rs} ->
            ?assertEqual(lists:duplicate(8, badarg), [Why || {'EXIT', {Why, _}} <- Types]),
            ?assertEqual([{error, {bad_reply, {{reply, status}, 99, out_of_range}}},
                          {error, {bad_reply, {{reply, status}, 600, out_of_range}}},
                          {error, {bad_reply, {{reply, status}, 1 bsl 64, out_of_range}}},
                          {error, {bad_reply, {{reply, status}, 204, body_not_allowed}}},
                          {error, {bad_reply, {{reply, status}, 304, body_not_allowed}}},
                          {error, {bad_reply, {{reply, headers, <<"content-length">>}, <<"Content-Length">>,
                                               forbidden_header}}},
                          {error, {bad_reply, {{reply, headers, <<"a b">>}, <<"a b">>, not_a_token}}},
                          {error, {bad_reply, {{reply, headers, <<"x-ä"/utf8>>}, <<"X-Ä"/utf8>>, not_a_token}}},
                          {error, {bad_reply, {{reply, headers, <<>>}, <<>>, not_a_token}}},
                          {error, {bad_reply, {{reply, headers, <<"x">>}, <<"a\r\nb">>, control_char}}},
                          {error, {bad_reply, {{reply, headers, <<"x">>}, <<"a", 1>>, control_char}}},
                          {error, {bad_reply, {{reply, headers}, 65, too_many}}},
                          {error, {too_large, {headers, (1 bsl 20) + 1, 1 bsl 20}}},
                          {error, {too_large, {body, Max + 1, Max}}},
                          [{error, {bad_reply, {{reply, status}, 99, out_of_range}}}]],
                         Values),
            ?assertEqual([ok, {error, gone}, {error, gone}], Rs)
    end,
    ?assertEqual(<<"3\r\nabc\r\n0\r\n\r\n">>, body(raw(Config, "GET", "/g/early"))),
    receive {results, Early, []} ->
            ?assertEqual([{error, not_streaming}, {error, not_streaming}], Early)
    end,
    raw(Config, "GET", "/g/stream"),
    receive {results, [], Rs2} -> ?assertEqual([{error, gone}, {error, gone}], Rs2) end,
    H ! stop.

%% No process behind the name: 503. The handler dies before it answers: 503. The connection goes
%% on (keep-alive), and both are counted and journaled.
unavailable(Config) ->
    Before = stat(Config, handler_unavailable),
    handle(Config, "/u/none", cbench_no_such_process, #{}),
    H = handler(fun(_Req) -> exit(normal) end),
    handle(Config, "/u/dies", H, #{}),
    {ok, Sock} = gen_tcp:connect({127, 0, 0, 1}, cbench:port(?config(server, Config)),
                                 [binary, {active, false}]),
    Empty503 = fun(Got) -> ?assertMatch({match, _}, re:run(Got, "^HTTP/1.1 503 Service Unavailable\r\n.*content-length: 0\r\n\r\n$", [dotall])) end,
    ok = gen_tcp:send(Sock, "GET /u/none HTTP/1.1\r\nhost: x\r\n\r\n"),
    Empty503(recv_head(Sock, <<>>)),
    ok = gen_tcp:send(Sock, "GET /u/dies HTTP/1.1\r\nhost: x\r\n\r\n"),
    Empty503(recv_head(Sock, <<>>)),
    ok = gen_tcp:send(Sock, "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n"),
    ?assertMatch({match, _}, re:run(recv_head(Sock, <<>>), "^HTTP/1.1 200 OK")),
    gen_tcp:close(Sock),
    ?assertEqual(Before + 2, stat(Config, handler_unavailable)),
    [#{status := 503}] = cbench:requests(?config(server, Config), #{path => "/u/none"}).

%% Reads one response head (and a body announced with content-length) from a kept connection.
recv_head(Sock, Acc) ->
    case binary:split(Acc, <<"\r\n\r\n">>) of
        [Head, Rest] ->
            case re:run(Head, "content-length: ([0-9]+)", [{capture, all_but_first, list}]) of
                {match, [N]} when byte_size(Rest) >= 0 ->
                    Need = list_to_integer(N) - byte_size(Rest),
                    More = case Need > 0 of
                               true -> {ok, M} = gen_tcp:recv(Sock, Need, 10000), M;
                               false -> <<>>
                           end,
                    mask(<<Head/binary, "\r\n\r\n", Rest/binary, More/binary>>);
                _ -> mask(Acc)
            end;
        [_] ->
            {ok, Data} = gen_tcp:recv(Sock, 0, 10000),
            recv_head(Sock, <<Acc/binary, Data/binary>>)
    end.

%% No answer within timeout_ms: 504, counted; the late answer is {error, gone}.
timeout(Config) ->
    Self = self(),
    Before = stat(Config, handler_timeouts),
    H = handler(fun(Req) -> Self ! {req, Req} end),
    handle(Config, "/t", H, #{timeout_ms => 200}),
    Got = raw(Config, "GET", "/t"),
    ?assertMatch({match, _}, re:run(Got, "^HTTP/1.1 504 Gateway Timeout\r\n")),
    receive {req, Req} ->
            wait_gone(Req),
            ?assertEqual({error, gone}, cbench:reply(Req, 200, [], <<"late">>))
    end,
    ?assertEqual(Before + 1, stat(Config, handler_timeouts)),
    ?assertMatch({error, {bad_handler, {{handler, timeout_ms}, 0, out_of_range}}},
                 cbench:handle(?config(server, Config), "/t2", H, #{timeout_ms => 0})),
    ?assertMatch({error, {bad_handler, {{handler, x}, 1, unknown_key}}},
                 cbench:handle(?config(server, Config), "/t2", H, #{x => 1})),
    ?assertError(badarg, cbench:handle(?config(server, Config), "/t2", "not a pid", #{})),
    H ! stop.

%% The port engine learns that a request timed out from the program's {cbench_gone, Ref}, which
%% may reach the server after the client got its 504: wait for it (the nif and ehttpd engines
%% know at once).
wait_gone(#{handle := {cbench_port, _, _, A}}) -> wait_until(fun() -> not cbench_handler_state:is_open(A) end);
wait_gone(_) -> ok.

%% A streamed answer to a client that reads nothing: once max_queued_reply_bytes of it wait in the
%% engine, the answer is cut (the connection closes without the last chunk), counted in
%% handler_overflows, and the handler's sends are {error, gone} from then on. Before, every piece
%% was kept. Each send is followed by a stats call so that the handler does not run far ahead of
%% the engine (on port a send is a message).
stream_overflow(Config) ->
    {ok, S} = cbench:start_server(?config(engine, Config),
                                  #{port => 0, threads => 1, max_queued_reply_bytes => 1048576}),
    Self = self(),
    Piece = binary:copy(<<"0123456789abcdef">>, 4096),
    Send = fun Send(Req, N) when N < 4096 ->
                   case cbench:send(Req, Piece) of
                       ok -> _ = cbench:stats(S), Send(Req, N + 1);
                       {error, gone} -> N
                   end
           end,
    H = handler(fun(Req) ->
                        ok = cbench:reply_stream(Req, 200, []),
                        Self ! {sent, Send(Req, 0)}
                end),
    {ok, _} = cbench:handle(S, "/ovf", H, #{timeout_ms => 30000}),
    {ok, Sock} = gen_tcp:connect({127, 0, 0, 1}, cbench:port(S), [binary, {active, false}, {recbuf, 4096}]),
    ok = gen_tcp:send(Sock, "GET /ovf HTTP/1.1\r\nhost: x\r\n\r\n"),
    N = receive {sent, N0} -> N0 after 60000 -> error(no_gone) end,
    ?assert(N < 4096),
    Got = read_all(Sock, <<>>),
    gen_tcp:close(Sock),
    ct:log("~b sends taken; ~b bytes read, from ~p", [N, byte_size(Got), binary:part(Got, 0, min(200, byte_size(Got)))]),
    ?assertMatch({match, _}, re:run(Got, "^HTTP/1.1 200 OK\r\n")),
    ?assertNotEqual(<<"\r\n0\r\n\r\n">>, binary:part(Got, byte_size(Got), -7)),
    ?assert(byte_size(Got) < (N + 1) * byte_size(Piece)),
    ?assertMatch(#{handler_overflows := 1, handler_timeouts := 0, handler_unavailable := 0},
                 cbench:stats(S)),
    H ! stop,
    ok = cbench:stop_server(S).

%% The handler crashes after the head and one piece: the HTTP/1.1 connection is closed without
%% the last chunk (the answer is visibly cut).
crash_mid_stream(Config) ->
    H = handler(fun(Req) ->
                        ok = cbench:reply_stream(Req, 200, []),
                        ok = cbench:send(Req, <<"abc">>),
                        timer:sleep(50),
                        exit(crash)
                end),
    handle(Config, "/c", H, #{}),
    Got = raw(Config, "GET", "/c"),
    ?assertMatch({match, _}, re:run(Got, "transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
                                    "3\r\nabc\r\n$")),
    wait_until(fun() -> stat(Config, handler_unavailable) > 0 end).

%% The same over h2c (nghttp, two streams on one connection): the crashed answer's stream is reset
%% with INTERNAL_ERROR after its head and first piece, and the other stream, answered after the
%% reset, completes on the same connection (no GOAWAY).
crash_mid_stream_h2c(Config) ->
    Before = stat(Config, handler_unavailable),
    %% The later answer waits until the engine has counted the crash (when it resets the stream).
    Later = handler(fun(Req) ->
                            wait_until(fun() -> stat(Config, handler_unavailable) > Before end),
                            ok = cbench:reply(Req, 200, [], <<"after the reset">>)
                    end),
    Crash = handler(fun(Req) ->
                            ok = cbench:reply_stream(Req, 200, []),
                            ok = cbench:send(Req, <<"abc">>),
                            timer:sleep(50),
                            exit(crash)
                    end),
    handle(Config, "/c2/crash", Crash, #{}),
    handle(Config, "/c2/later", Later, #{}),
    Base = "http://127.0.0.1:" ++ integer_to_list(cbench:port(?config(server, Config))),
    Out = os:cmd("nghttp -v " ++ Base ++ "/c2/crash " ++ Base ++ "/c2/later 2>&1"),
    ct:log("~s", [Out]),
    Rst = "recv RST_STREAM frame <length=4, flags=0x00, stream_id=([0-9]+)>\\s+\\(error_code=INTERNAL_ERROR",
    {match, [RstId]} = re:run(Out, Rst, [{capture, all_but_first, list}]),
    %% The reset stream is the one of /c2/crash, after its 3 bytes of DATA.
    {match, [CrashId]} = re:run(Out, "send HEADERS frame <[^>]*stream_id=([0-9]+)>[^<]*(?:\n[^\n]*){0,12}:path: /c2/crash",
                                [{capture, all_but_first, list}]),
    ?assertEqual(CrashId, RstId),
    ?assertMatch({match, _}, re:run(Out, "recv DATA frame <length=3, flags=0x00, stream_id=" ++ CrashId ++ ">")),
    ?assertMatch({match, _}, re:run(Out, "after the reset")),
    ?assertEqual(nomatch, re:run(Out, "recv GOAWAY")),
    %% The later answer came after the reset.
    {P1, _} = binary:match(list_to_binary(Out), <<"recv RST_STREAM">>),
    {P2, _} = binary:match(list_to_binary(Out), <<"after the reset">>),
    ?assert(P1 < P2),
    Later ! stop.

wait_until(F) -> wait_until(F, 200).
wait_until(F, 0) -> ?assert(F());
wait_until(F, N) ->
    case F() of
        true -> ok;
        false -> timer:sleep(20), wait_until(F, N - 1)
    end.

%% Many requests at once to a batching handler that answers them in reverse order with one
%% replies/1 call: each client gets its own answer.
concurrent_out_of_order(Config) ->
    N = 40,
    H = spawn(fun() -> collect(N, []) end),
    handle(Config, "/o/*", H, #{batch => true}),
    Self = self(),
    Pids = [spawn_link(fun() ->
                               P = "/o/" ++ integer_to_list(I),
                               Self ! {done, I, body(raw(Config, "GET", P))}
                       end) || I <- lists:seq(1, N)],
    Got = [receive {done, I, B} -> {I, B} end || I <- lists:seq(1, N)],
    ?assertEqual([{I, list_to_binary("/o/" ++ integer_to_list(I))} || I <- lists:seq(1, N)], Got),
    ?assertEqual(N, length(Pids)).

collect(0, Reqs) ->
    %% Newest first: the reverse of arrival.
    Results = cbench:replies([{R, 200, [], P} || R = #{path := P} <- Reqs]),
    [ok] = lists:usort(Results);
collect(N, Reqs) ->
    receive
        {cbench_requests, Batch} when is_list(Batch) ->
            collect(N - length(Batch), lists:reverse(Batch) ++ Reqs)
    end.

%% One replies/1 call checks each answer on its own, also where answers share one header list (the
%% port and ehttpd engines check a list once for a run of answers that give the same term): an
%% answer refused for its status or body between two that pass, a different list refused for its
%% value, and the shared list again after it. The refused ones still wait, and are answered after.
batch_checks(Config) ->
    N = 6,
    Self = self(),
    H = spawn(fun() -> Self ! {results, batch_answers(N, [])} end),
    handle(Config, "/b/*", H, #{batch => true}),
    Pids = [spawn_link(fun() -> Self ! {done, I, raw(Config, "GET", "/b/" ++ integer_to_list(I))} end)
            || I <- lists:seq(1, N)],
    {Results, Later} = receive {results, R} -> R after 10000 -> error(no_results) end,
    ?assertEqual([ok, ok,
                  {error, {bad_reply, {{reply, status}, 99, out_of_range}}},
                  {error, {bad_reply, {{reply, status}, 204, body_not_allowed}}},
                  {error, {bad_reply, {{reply, headers, <<"x-bad">>}, <<"a\nb">>, control_char}}},
                  ok], Results),
    ?assertEqual([ok, ok, ok], Later),
    Got = [receive {done, I, B} -> B end || I <- lists:seq(1, N)],
    [?assertEqual({true, true}, {binary:match(G, <<"HTTP/1.1 200 OK\r\n">>) =:= {0, 17},
                                 binary:match(G, <<"\r\nx-same: 1\r\n">>) =/= nomatch}, I)
     || {I, G} <- lists:zip(lists:seq(1, N), Got), lists:member(I, [1, 2, 6])],
    ?assertEqual([<<"1">>, <<"2">>, <<"later">>, <<"later">>, <<"later">>, <<"6">>], [body(G) || G <- Got]),
    ?assertEqual(N, length(Pids)).

batch_answers(0, Reqs) ->
    [R1, R2, R3, R4, R5, R6] = lists:sort(fun(#{path := A}, #{path := B}) -> A =< B end, Reqs),
    Same = [{<<"X-Same">>, <<"1">>}],
    Results = cbench:replies([{R1, 200, Same, <<"1">>}, {R2, 200, Same, <<"2">>}, {R3, 99, Same, <<"3">>},
                              {R4, 204, Same, <<"4">>}, {R5, 200, [{<<"x-bad">>, <<"a\nb">>}], <<"5">>},
                              {R6, 200, Same, <<"6">>}]),
    {Results, cbench:replies([{R, 200, [], <<"later">>} || R <- [R3, R4, R5]])};
batch_answers(N, Reqs) ->
    receive
        {cbench_requests, Batch} -> batch_answers(N - length(Batch), Batch ++ Reqs)
    end.

%% #{body => stream}: the request comes with body => stream, then its body in pieces
%% ({cbench_body, Handle, Data}, then {cbench_body_end, Handle}); the handler answers with what it
%% got. Byte for byte, with content-length (sent in three writes) and chunked, and an empty body.
streaming_handler() ->
    handler(fun(Req = #{body := stream, handle := H}) ->
                    Body = collect_body(H, []),
                    ok = cbench:reply(Req, 200, [], Body);
               (Req) ->
                    ok = cbench:reply(Req, 500, [], <<"not streamed">>)
            end).

collect_body(H, Acc) ->
    receive
        {cbench_body, H, Data} when is_binary(Data), Data =/= <<>> -> collect_body(H, [Acc | Data]);
        {cbench_body_end, H} -> iolist_to_binary(Acc)
    after 10000 -> error(no_body_end)
    end.

body_bytes(N) -> << <<(I rem 251)>> || I <- lists:seq(1, N) >>.

body_stream(Config) ->
    H = streaming_handler(),
    handle(Config, "/bs", H, #{body => stream}),
    Port = cbench:port(?config(server, Config)),
    Body = body_bytes(300000),
    <<B1:100000/binary, B2:100000/binary, B3/binary>> = Body,
    {ok, Sock} = gen_tcp:connect({127, 0, 0, 1}, Port, [binary, {active, false}]),
    ok = gen_tcp:send(Sock, ["POST /bs HTTP/1.1\r\nhost: x\r\ncontent-length: 300000\r\n\r\n", B1]),
    timer:sleep(20),
    ok = gen_tcp:send(Sock, B2),
    timer:sleep(20),
    ok = gen_tcp:send(Sock, B3),
    Got = recv_head(Sock, <<>>),
    ?assertMatch({match, _}, re:run(Got, "^HTTP/1.1 200 OK\r\n")),
    ?assertEqual(Body, body(Got)),
    %% Chunked, on the same connection.
    ok = gen_tcp:send(Sock, ["POST /bs HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n",
                             "5\r\nhello\r\n", "7\r\n, world\r\n", "0\r\n\r\n"]),
    ?assertEqual(<<"hello, world">>, body(recv_head(Sock, <<>>))),
    %% No body at all: just the end.
    ok = gen_tcp:send(Sock, "GET /bs HTTP/1.1\r\nhost: x\r\n\r\n"),
    ?assertEqual(<<>>, body(recv_head(Sock, <<>>))),
    gen_tcp:close(Sock),
    ?assertMatch({error, {bad_handler, {{handler, body}, pieces, wrong_type}}},
                 cbench:handle(?config(server, Config), "/bs2", H, #{body => pieces})),
    H ! stop.

%% The same over h2c (curl, prior knowledge): a 1 MB body comes back whole.
body_stream_h2c(Config) ->
    H = streaming_handler(),
    handle(Config, "/bs", H, #{body => stream}),
    Body = body_bytes(1000000),
    File = filename:join(?config(priv_dir, Config), "body.bin"),
    ok = file:write_file(File, Body),
    Port = integer_to_list(cbench:port(?config(server, Config))),
    Out = File ++ ".out",  % not through os:cmd/1's output, which ends at a byte 4
    "200" = os:cmd("curl -s -w '%{http_code}' --http2-prior-knowledge --data-binary @" ++ File ++
                       " -o " ++ Out ++ " http://127.0.0.1:" ++ Port ++ "/bs"),
    ?assertEqual({ok, Body}, file:read_file(Out)),
    H ! stop.

%% An {M, F} target: M:F(Req) runs in a pool of the server's processes. Many concurrent requests
%% are answered (the body says which pool process answered: more than one did); a streamed body
%% reaches the process that has its request; an exception answers 500 and the pool goes on;
%% unstub/2 ends the pool.
pool_answer(Req = #{path := <<"/p/crash">>}) ->
    error({crash, Req});
pool_answer(Req = #{body := stream, handle := H}) ->
    ok = cbench:reply(Req, 200, [], collect_body(H, []));
pool_answer(Req) ->
    ok = cbench:reply(Req, 200, [], pid_to_list(self())).

pool(Config) ->
    S = ?config(server, Config),
    {ok, Id} = cbench:handle(S, "/p/*", {?MODULE, pool_answer}, #{pool => 4, batch => true}),
    {ok, _} = cbench:handle(S, "/ps", {?MODULE, pool_answer}, #{pool => 2, body => stream}),
    Self = self(),
    N = 40,
    [spawn_link(fun() -> Self ! {done, body(raw(Config, "GET", "/p/" ++ integer_to_list(I)))} end)
     || I <- lists:seq(1, N)],
    Pids = [receive {done, B} -> B end || _ <- lists:seq(1, N)],
    ?assertEqual([true], lists:usort([is_pid(list_to_pid(binary_to_list(P))) || P <- Pids])),
    ?assert(length(lists:usort(Pids)) > 1),
    ?assertMatch({match, _}, re:run(raw(Config, "GET", "/p/crash"), "^HTTP/1.1 500 Internal Server Error\r\n")),
    ?assertMatch({match, _}, re:run(raw(Config, "GET", "/p/after"), "^HTTP/1.1 200 OK\r\n")),
    Body = body_bytes(100000),
    ?assertEqual(Body, body(raw(Config, "POST", "/ps", Body))),
    [Pid | _] = Pids,
    Worker = list_to_pid(binary_to_list(Pid)),
    ?assert(is_process_alive(Worker)),
    ok = cbench:unstub(S, Id),
    wait_until(fun() -> not is_process_alive(Worker) end),
    ?assertMatch({error, {bad_handler, {{handler, pool}, 0, out_of_range}}},
                 cbench:handle(S, "/p2", {?MODULE, pool_answer}, #{pool => 0})),
    ?assertError(badarg, cbench:handle(S, "/p2", {?MODULE, "f"}, #{})).
