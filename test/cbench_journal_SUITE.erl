%%% @doc The journal's promise (issue 21, docs/routes.md): once a client can observe the end of its
%%% response (its last byte, EOF, a reset, END_STREAM, RST_STREAM, GOAWAY), its request is in the
%%% journal, so that `cbench:requests/2' called right then finds it. Every engine and protocol (nif
%%% and port over HTTP/1.1 and h2c, ehttpd over HTTP/1.1), every fault kind and a plain answer, over
%%% raw gen_tcp so that nothing between the socket and the test waits or retries: at least 2,000
%%% requests per engine and protocol, each followed at once by one journal read that must count it.
%%% A fault that keeps its connection is repeated on one connection (HTTP/1.1 keep-alive, h2c streams
%%% 1, 3, 5, ...); one that ends it gets a connection per request, which the test keeps open until
%%% the journal has been read (its close would let the server end the connection sooner).
-module(cbench_journal_SUITE).

-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1]).
-export([promise_nif_http1/1, promise_nif_h2c/1, promise_port_http1/1, promise_port_h2c/1,
         promise_ehttpd_http1/1, await_entry_recorded_late/1, await_caller_dies/1,
         await_count_bounded/1, numbered_at_arrival/1, late_entry_full_ring/1]).

all() -> [promise_nif_http1, promise_nif_h2c, promise_port_http1, promise_port_h2c, promise_ehttpd_http1,
          await_entry_recorded_late, await_caller_dies, await_count_bounded, numbered_at_arrival,
          late_entry_full_ring].

suite() -> [{timetrap, {minutes, 3}}].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(cbench),
    Config.

end_per_suite(_Config) ->
    ok.

-define(REQUESTS, 2000). %% at least, per engine and protocol
-define(READ_MS, 10000).

%%% The fault specs: those that end the connection, and those that keep it.

%% HTTP/1.1. The HTTP/2 kinds are answered 501 there by the C engine (a whole answer: the connection
%% goes on); the ehttpd engine refuses them as stubs.
http1_close() ->
    [<<"reset">>, <<"reset?at=head">>, <<"reset?at=body&bytes=10&length=100">>, <<"empty">>,
     <<"hang?ms=1">>, <<"hang?ms=1&at=head">>, <<"garbage">>, <<"truncated">>, <<"overlong">>,
     <<"malformed_chunk">>, <<"missing_last_chunk">>, <<"raw?preset=http10_no_length">>].
http1_keep() ->
    [none, <<"delay?ms=1">>, <<"dribble?ms=2&pieces=2&length=10">>, <<"drip?ms=2&length=2">>,
     <<"trailers">>, <<"slow_head?ms=2&pieces=2">>, <<"raw?close=0&preset=no_reason">>].
http2_only() ->
    [<<"rst_stream">>, <<"goaway">>, <<"settings?window=1000">>, <<"violation?ms=1">>].

h2c_close() ->
    [<<"reset">>, <<"reset?at=head">>, <<"reset?at=body&bytes=10&length=100">>, <<"empty">>,
     <<"hang?ms=1">>, <<"hang?ms=1&at=head">>, <<"garbage">>, <<"goaway">>,
     <<"goaway?last=2147483647&code=2">>, <<"violation?ms=1">>].
h2c_keep() ->
    [none, <<"truncated">>, <<"overlong">>, <<"delay?ms=1">>, <<"dribble?ms=2&pieces=2&length=10">>,
     <<"drip?ms=2&length=2">>, <<"rst_stream">>, <<"rst_stream?at=head">>, <<"settings?window=1000">>,
     <<"trailers">>, <<"malformed_chunk">>, <<"missing_last_chunk">>, <<"raw?preset=no_reason">>,
     <<"slow_head?ms=2&pieces=2">>].

promise_nif_http1(_Config) -> promise(nif, http1, http1_close(), http1_keep() ++ http2_only()).
promise_nif_h2c(_Config) -> promise(nif, h2c, h2c_close(), h2c_keep()).
promise_port_http1(_Config) -> promise(port, http1, http1_close(), http1_keep() ++ http2_only()).
promise_port_h2c(_Config) -> promise(port, h2c, h2c_close(), h2c_keep()).
promise_ehttpd_http1(_Config) -> promise(ehttpd, http1, http1_close(), http1_keep()).

%% Stubs /p1, /p2, ... one per spec; each gets Per requests, each followed by one journal read.
promise(Engine, Proto, Close, Keep) ->
    Opts = case Engine of ehttpd -> #{port => 0}; _ -> #{port => 0, threads => 2} end,
    {ok, S} = cbench:start_server(Engine, Opts),
    Port = cbench:port(S),
    Specs = [{close, F} || F <- Close] ++ [{keep, F} || F <- Keep],
    Per = (?REQUESTS + length(Specs) - 1) div length(Specs),
    Paths = [begin
                 Path = <<"/p", (integer_to_binary(I))/binary>>,
                 Resp = case F of
                            none -> #{body => <<"stub body">>};
                            _ -> #{body => <<"stub body">>, fault => F}
                        end,
                 {ok, _} = cbench:stub(S, Path, Resp),
                 {Mode, F, Path}
             end || {I, {Mode, F}} <- lists:zip(lists:seq(1, length(Specs)), Specs)],
    T0 = erlang:monotonic_time(millisecond),
    Misses = lists:append([run(Proto, Mode, Port, S, F, Path, Per) || {Mode, F, Path} <- Paths]),
    Ms = erlang:monotonic_time(millisecond) - T0,
    ct:log("~p ~p: ~p specs x ~p requests in ~p ms, misses: ~p",
           [Engine, Proto, length(Specs), Per, Ms, Misses]),
    ?assert(Per * length(Specs) >= ?REQUESTS),
    ?assertEqual([], Misses),
    ok = cbench:stop_server(S).

%% await/4 counts an entry recorded after a newer one it has already seen: the C engines number a
%% request when it arrives and record it when its answer ends, so a request answered later than
%% one that came after it is recorded behind it. Here /slow arrives first and is held by a handler
%% (this process) while /hello is answered; an await for 2 is set up after /hello's entry is in,
%% then /slow is answered: the waiter must count it. (It waited out its timeout with /hello alone:
%% it read only entries above the newest sequence number it had seen.)
await_entry_recorded_late(_Config) ->
    [begin
         {ok, S} = cbench:start_server(E, #{port => 0, threads => 2}),
         Port = cbench:port(S),
         {ok, _} = cbench:handle(S, "/slow", self(), #{}),
         Self = self(),
         Slow = spawn_link(fun() ->
                                   Sock = connect(Port),
                                   ok = gen_tcp:send(Sock, request(<<"/slow">>)),
                                   {ok, <<>>} = read_response(Sock, <<>>),
                                   Self ! {slow_answered, self()}
                           end),
         Req = receive {cbench_request, R} -> R after ?READ_MS -> error(no_request) end,
         Sock = connect(Port),
         ok = gen_tcp:send(Sock, request(<<"/hello">>)),
         {ok, <<>>} = read_response(Sock, <<>>),
         [#{path := <<"/hello">>}] = cbench:requests(S),
         Awaiter = spawn_link(fun() -> Self ! {awaited, self(), cbench:await(S, #{}, 2, 5000)} end),
         ok = waiting(S),
         ok = cbench:reply(Req, 200, [], <<"late">>),
         receive {slow_answered, Slow} -> ok end,
         Got = receive {awaited, Awaiter, A} -> A end,
         ?assertMatch({E, {ok, [_, _]}}, {E, Got}),
         {ok, Entries} = Got,
         ?assertEqual({E, [<<"/hello">>, <<"/slow">>]}, {E, lists:sort([P || #{path := P} <- Entries])}),
         %% Oldest first, as requests/1 lists them.
         ?assertEqual({E, [Seq || #{seq := Seq} <- cbench:requests(S)]},
                      {E, [Seq || #{seq := Seq} <- Entries]}),
         gen_tcp:close(Sock),
         ok = cbench:stop_server(S)
     end || E <- [nif, port, ehttpd]],
    ok.

%% A caller of await/4 that dies while it waits takes its waiter with it: the server no longer
%% keeps it (and every matching entry it collects, for up to 2^32-1 ms), nor the monitor. The
%% waiter stayed until its timeout, the engine waking the server for every request meanwhile.
await_caller_dies(_Config) ->
    [begin
         {ok, S} = cbench:start_server(E, #{port => 0, threads => 1}),
         {Pid, Mon} = spawn_monitor(fun() -> cbench:await(S, #{path => "/never"}, 1, 1 bsl 31) end),
         ok = waiting(S),
         exit(Pid, kill),
         receive {'DOWN', Mon, process, Pid, killed} -> ok end,
         ?assertEqual({E, ok}, {E, no_waiter(S, 1000)}),
         ?assertEqual({E, false}, {E, monitors(S, Pid)}),
         %% A caller that lives: its answer comes, and no monitor stays behind it.
         ?assertEqual({E, {error, {timeout, []}}}, {E, cbench:await(S, #{path => "/never"}, 1, 0)}),
         ?assertEqual({E, false}, {E, monitors(S, self())}),
         ok = cbench:stop_server(S)
     end || E <- [nif, port, ehttpd]],
    ok.

%% A waiter keeps the matching entries it has seen until it has Count of them, so a Count above
%% the journal's bound let it hold more than the journal does, for as long as its timeout (up to
%% 2^32-1 ms): it is refused at once on every engine, and nothing waits. Count up to the bound
%% waits as before.
await_count_bounded(_Config) ->
    [begin
         {ok, S} = cbench:start_server(E, #{port => 0, threads => 1, journal => 3}),
         ?assertEqual({E, {error, {bad_await, {count, 4, out_of_range}}}},
                      {E, cbench:await(S, #{}, 4, 1 bsl 31)}),
         ?assertEqual({E, {error, {bad_await, {count, 1 bsl 40, out_of_range}}}},
                      {E, cbench:await(S, #{}, 1 bsl 40, 0)}),
         ?assertEqual({E, ok}, {E, no_waiter(S, 1)}),
         ?assertEqual({E, {error, {timeout, []}}}, {E, cbench:await(S, #{}, 3, 0)}),
         [begin
              Sock = connect(cbench:port(S)),
              ok = gen_tcp:send(Sock, request(<<"/hello">>)),
              {ok, <<>>} = read_response(Sock, <<>>),
              gen_tcp:close(Sock)
          end || _ <- [1, 2, 3]],
         ?assertMatch({E, {ok, [_, _, _]}}, {E, cbench:await(S, #{}, 3, 0)}),
         ok = cbench:stop_server(S)
     end || E <- [nif, port, ehttpd]],
    ok.

%% Every engine numbers a request when it is dispatched (its head read, its route found) and
%% records it when its answer ends: the journal lists requests in the order they came, and a
%% request that came before clear_requests/1 is not listed after it, even when it is answered
%% later. (ehttpd numbered a request when it recorded it: /h, held by a handler, came after
%% /hello and stayed after the clear.)
numbered_at_arrival(_Config) ->
    [begin
         {ok, S} = cbench:start_server(E, #{port => 0, threads => 1, journal => 3}),
         Port = cbench:port(S),
         {ok, _} = cbench:handle(S, "/h", self(), #{}),
         Held = fun() ->
                        Self = self(),
                        Pid = spawn_link(fun() ->
                                                 Sock = connect(Port),
                                                 ok = gen_tcp:send(Sock, request(<<"/h">>)),
                                                 {ok, <<>>} = read_response(Sock, <<>>),
                                                 Self ! {answered, self()}
                                         end),
                        receive {cbench_request, R} -> {Pid, R} after ?READ_MS -> error(no_request) end
                end,
         Hello = fun() ->
                         Sock = connect(Port),
                         ok = gen_tcp:send(Sock, request(<<"/hello">>)),
                         {ok, <<>>} = read_response(Sock, <<>>),
                         gen_tcp:close(Sock)
                 end,
         Answer = fun({Pid, R}) ->
                          ok = cbench:reply(R, 200, [], <<"late">>),
                          receive {answered, Pid} -> ok end
                  end,
         Paths = fun() -> [P || #{path := P} <- cbench:requests(S)] end,
         H1 = Held(),
         Hello(),
         Answer(H1),
         ?assertEqual({E, [<<"/h">>, <<"/hello">>]}, {E, Paths()}),
         H2 = Held(),
         ok = cbench:clear_requests(S),
         Hello(),
         Answer(H2),
         ?assertEqual({E, [<<"/hello">>]}, {E, Paths()}),
         %% Answered after three newer requests, a request is not among the newest 3: the journal
         %% keeps those three (the C engine's ring gave its slot to it, then dropped a /hello).
         H3 = Held(),
         [Hello() || _ <- [1, 2, 3]],
         Answer(H3),
         ?assertEqual({E, [<<"/hello">>, <<"/hello">>, <<"/hello">>]}, {E, Paths()}),
         Seqs = [Q || #{seq := Q} <- cbench:requests(S)],
         ?assertEqual({E, Seqs}, {E, lists:seq(hd(Seqs), hd(Seqs) + 2)}),
         ok = cbench:stop_server(S)
     end || E <- [nif, port, ehttpd]],
    ok.

%% docs/erlang.md's example, journal 3, one worker: a handler's request (#1) answered after /hello #2
%% and #3 is recorded behind them while still among the newest 3; then /hello #4. The newest 3 are
%% #2..#4 on every engine (the C engines' ring, full, dropped #2 and kept #1: it listed #3 and #4).
late_entry_full_ring(_Config) ->
    [begin
         {ok, S} = cbench:start_server(E, #{port => 0, threads => 1, journal => 3}),
         Port = cbench:port(S),
         {ok, _} = cbench:handle(S, "/h", self(), #{}),
         Self = self(),
         Pid = spawn_link(fun() ->
                                  Sock = connect(Port),
                                  ok = gen_tcp:send(Sock, request(<<"/h">>)),
                                  {ok, <<>>} = read_response(Sock, <<>>),
                                  Self ! {answered, self()}
                          end),
         R = receive {cbench_request, Req} -> Req after ?READ_MS -> error(no_request) end,
         Sock = connect(Port),
         Hello = fun() ->
                         ok = gen_tcp:send(Sock, request(<<"/hello">>)),
                         {ok, <<>>} = read_response(Sock, <<>>)
                 end,
         Listed = fun() -> [{Q, P} || #{seq := Q, path := P} <- cbench:requests(S)] end,
         Hello(),
         Hello(),
         ok = cbench:reply(R, 200, [], <<"late">>),
         receive {answered, Pid} -> ok end,
         ?assertEqual({E, [{1, <<"/h">>}, {2, <<"/hello">>}, {3, <<"/hello">>}]}, {E, Listed()}),
         Hello(),
         ?assertEqual({E, [{2, <<"/hello">>}, {3, <<"/hello">>}, {4, <<"/hello">>}]}, {E, Listed()}),
         gen_tcp:close(Sock),
         ok = cbench:stop_server(S)
     end || E <- [nif, port, ehttpd]],
    ok.

%% Whether process S monitors Pid.
monitors(S, Pid) ->
    {monitors, Ms} = process_info(S, monitors),
    lists:member({process, Pid}, Ms).

%% ok once the server holds no waiter; the 'DOWN' of the dead caller may reach it after a call of
%% ours, so it is asked again (Tries times at most).
no_waiter(_S, 0) -> waiter_left;
no_waiter(S, Tries) ->
    case cbench_waiters:is_empty(maps:get(waiters, sys:get_state(S))) of
        true -> ok;
        false -> receive after 10 -> no_waiter(S, Tries - 1) end
    end.

%% Returns once the server process holds a waiter (cbench:await/4 has read the journal).
waiting(S) ->
    case cbench_waiters:is_empty(maps:get(waiters, sys:get_state(S))) of
        true -> receive after 1 -> waiting(S) end;
        false -> ok
    end.

%% The misses of Per requests to Path: {Spec, N, EndSeen, EntriesFound}.
run(http1, close, Port, S, F, Path, Per) ->
    lists:append([begin
                      Sock = connect(Port),
                      ok = gen_tcp:send(Sock, request(Path)),
                      End = read_to_close(Sock),
                      Miss = check(S, F, Path, N, End),
                      gen_tcp:close(Sock),
                      Miss
                  end || N <- lists:seq(1, Per)]);
run(http1, keep, Port, S, F, Path, Per) ->
    Sock = connect(Port),
    Misses = lists:append([begin
                               ok = gen_tcp:send(Sock, request(Path)),
                               {ok, Rest} = read_response(Sock, <<>>),
                               <<>> = Rest,
                               check(S, F, Path, N, last_byte)
                           end || N <- lists:seq(1, Per)]),
    gen_tcp:close(Sock),
    Misses;
run(h2c, close, Port, S, F, Path, Per) ->
    lists:append([begin
                      Sock = h2_connect(Port),
                      ok = h2_get(Sock, 1, Path),
                      {End, _} = h2_end(Sock, <<>>, 1),
                      Miss = check(S, F, Path, N, End),
                      gen_tcp:close(Sock),
                      Miss
                  end || N <- lists:seq(1, Per)]);
run(h2c, keep, Port, S, F, Path, Per) ->
    Sock = h2_connect(Port),
    {Misses, _} = lists:foldl(
                    fun(N, {Acc, Buf}) ->
                            Sid = 2 * N - 1,
                            ok = h2_get(Sock, Sid, Path),
                            {End, Buf2} = h2_end(Sock, Buf, Sid),
                            ?assert(End =:= ended orelse End =:= rst),
                            {check(S, F, Path, N, End) ++ Acc, Buf2}
                    end, {[], <<>>}, lists:seq(1, Per)),
    gen_tcp:close(Sock),
    lists:reverse(Misses).

%% The journal right after the end: N entries for Path, or a miss.
check(S, F, Path, N, End) ->
    case length(cbench:requests(S, #{path => Path})) of
        N -> [];
        Found -> [{F, N, End, Found}]
    end.

%%% HTTP/1.1 over gen_tcp

connect(Port) ->
    {ok, Sock} = gen_tcp:connect({127, 0, 0, 1}, Port, [binary, {active, false}, {nodelay, true}]),
    Sock.

request(Path) -> [<<"GET ">>, Path, <<" HTTP/1.1\r\nhost: x\r\n\r\n">>].

%% Reads until the server closes (FIN) or resets.
read_to_close(Sock) ->
    case gen_tcp:recv(Sock, 0, ?READ_MS) of
        {ok, _} -> read_to_close(Sock);
        {error, closed} -> eof;
        {error, econnreset} -> reset
    end.

%% One whole response (content-length or chunked, trailers included): {ok, BytesAfterIt}.
read_response(Sock, Buf) ->
    case binary:split(Buf, <<"\r\n\r\n">>) of
        [Head, Rest] ->
            Lower = string:lowercase(Head),
            case re:run(Lower, "\r\ncontent-length: *([0-9]+)", [{capture, all_but_first, binary}]) of
                {match, [Len]} ->
                    {_, After} = need(Sock, Rest, binary_to_integer(Len)),
                    {ok, After};
                nomatch ->
                    match = re:run(Lower, "\r\ntransfer-encoding: *chunked", [{capture, none}]),
                    chunks(Sock, Rest)
            end;
        [_] -> read_response(Sock, more(Sock, Buf))
    end.

chunks(Sock, Buf) ->
    case binary:split(Buf, <<"\r\n">>) of
        [SizeLine, Rest] ->
            case binary_to_integer(hd(binary:split(SizeLine, <<";">>)), 16) of
                0 -> trailer(Sock, Rest);
                Size ->
                    {_, After} = need(Sock, Rest, Size + 2),
                    chunks(Sock, After)
            end;
        [_] -> chunks(Sock, more(Sock, Buf))
    end.

trailer(_Sock, <<"\r\n", After/binary>>) -> {ok, After};
trailer(Sock, Buf) ->
    case binary:split(Buf, <<"\r\n">>) of
        [_Field, Rest] -> trailer(Sock, Rest);
        [_] -> trailer(Sock, more(Sock, Buf))
    end.

need(_Sock, Buf, N) when byte_size(Buf) >= N -> split_binary(Buf, N);
need(Sock, Buf, N) -> need(Sock, more(Sock, Buf), N).

more(Sock, Buf) ->
    {ok, D} = gen_tcp:recv(Sock, 0, ?READ_MS),
    <<Buf/binary, D/binary>>.

%%% h2c over gen_tcp: prior knowledge, header blocks as literals without indexing (no HPACK state)

h2_connect(Port) ->
    Sock = connect(Port),
    %% Our SETTINGS (empty), and the connection's window opened wide: nothing waits on flow control.
    ok = gen_tcp:send(Sock, [<<"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n">>, frame(4, 0, 0, <<>>),
                             frame(8, 0, 0, <<(16#7fffffff - 65535):32>>)]),
    Sock.

frame(Type, Flags, Sid, Payload) ->
    [<<(iolist_size(Payload)):24, Type, Flags, 0:1, Sid:31>>, Payload].

h2_get(Sock, Sid, Path) ->
    Block = [field(<<":method">>, <<"GET">>), field(<<":scheme">>, <<"http">>), field(<<":path">>, Path),
             field(<<":authority">>, <<"x">>)],
    gen_tcp:send(Sock, frame(1, 16#5, Sid, Block)). %% END_STREAM | END_HEADERS

%% A literal field without indexing, new name (RFC 7541 6.2.2), lengths below 127, no Huffman.
field(Name, Value) -> [0, byte_size(Name), Name, byte_size(Value), Value].

%% Reads frames until stream Sid's end can be seen: {ended | rst | goaway | eof | reset, Rest}.
%% SETTINGS and PING are acknowledged.
h2_end(Sock, <<Len:24, Type, Flags, _:1, Id:31, Payload:Len/binary, Rest/binary>>, Sid) ->
    %% The server may have closed already (a fault that ends the connection): a failed send is fine.
    _ = if
            Type =:= 4, Flags band 1 =:= 0 -> gen_tcp:send(Sock, frame(4, 1, 0, <<>>));
            Type =:= 6, Flags band 1 =:= 0 -> gen_tcp:send(Sock, frame(6, 1, 0, Payload));
            true -> ok
        end,
    if
        Type =:= 7 -> {goaway, Rest};
        Type =:= 3, Id =:= Sid -> {rst, Rest};
        Type =< 1, Id =:= Sid, Flags band 1 =:= 1 -> {ended, Rest};
        true -> h2_end(Sock, Rest, Sid)
    end;
h2_end(Sock, Buf, Sid) ->
    case gen_tcp:recv(Sock, 0, ?READ_MS) of
        {ok, D} -> h2_end(Sock, <<Buf/binary, D/binary>>, Sid);
        {error, closed} -> {eof, <<>>};
        {error, econnreset} -> {reset, <<>>}
    end.
