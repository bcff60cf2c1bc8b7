%%% @doc The ehttpd-style Erlang engine: one gen_tcp acceptor per scheduler, spawned with
%%% `{scheduler, I}', each connection a process on its acceptor's scheduler reading heads with
%%% `{packet, http_bin}' and bodies with `{packet, raw}'. It serves the route table of docs/wire.md
%%% byte for byte; with `close => true' it is the original ehttpd (one canned answer, then close).
%%%
%%% Process tree: the caller of start/1 (a cbench_server, which traps exits) links to the acceptors;
%%% each connection is linked to its acceptor and always exits normally, so stop/1 (killing the
%%% acceptors) takes every connection and its socket down with it, while a closing connection
%%% never disturbs its acceptor.
-module(cbench_ehttpd).

-export([start/1, stop/1, port/1, stats/1, info/1]).
%% Engine callbacks, called as Mod:F(...) by cbench_server.
-ignore_xref([{start, 1}, {stop, 1}, {port, 1}, {stats, 1}, {info, 1}]).
%% Process entry points.
-export([acceptor/4, conn/3]).

-export_type([handle/0]).

-record(h, {listen :: gen_tcp:socket(), acceptors :: [pid()], cnt :: counters:counters_ref(),
            port :: inet:port_number(), threads :: pos_integer(),
            scheds :: [pos_integer()]}).
-opaque handle() :: #h{}.

%% Per-connection settings, copied once into each connection process.
-record(cfg, {cnt, max_header, max_body, header_timeout, idle_timeout, close_mode}).

%% The request being served.
-record(req, {method :: binary(), target :: binary(), version :: {integer(), integer()},
              headers = [] :: [{binary(), binary()}], keep = true :: boolean(),
              framing = none :: none | chunked | {length, non_neg_integer()},
              expect = false :: boolean()}).

-define(EHTTPD_ANSWER, <<"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\nhello world!">>).
-define(LINGER_MS, 1000).
-define(TCP_DEFER_ACCEPT, {raw, 6, 9, <<1:32/native>>}).

%% Counter slots, in the order of cb_stats_t.
-define(STAT_KEYS, [conns_accepted, conns_closed, requests, bytes_read, bytes_written, status_400,
                    status_404, status_405, status_413, status_431, timeouts, resets,
                    accept_backoffs]).
-define(NROUTES, 18).

%% @doc Listens and spawns the acceptors, linked to the caller. Opts is validated by cbench_opts.
-spec start(map()) -> {ok, handle()} | {error, term()}.
start(Opts = #{ip := Ip, port := Port, threads := Threads, backlog := Backlog,
               max_header_bytes := MaxHeader}) ->
    Family = case tuple_size(Ip) of 4 -> inet; 8 -> inet6 end,
    ListenOpts = [Family, binary, {ip, Ip}, {active, false}, {packet, http_bin},
                  {packet_size, MaxHeader}, {backlog, Backlog}, {reuseaddr, true},
                  {nodelay, true}, ?TCP_DEFER_ACCEPT,
                  %% A head line over packet_size fails the read with emsgsize; the socket must
                  %% stay open for writing so that the peer gets its 431.
                  {exit_on_close, false},
                  %% A peer that stops reading must not pin a connection process forever.
                  {send_timeout, maps:get(idle_timeout_ms, Opts)}, {send_timeout_close, true}],
    case gen_tcp:listen(Port, ListenOpts) of
        {ok, L} ->
            {ok, Bound} = inet:port(L),
            _ = cbench_fixture:ensure(),
            Cnt = counters:new(length(?STAT_KEYS) + ?NROUTES, [write_concurrency]),
            Cfg = #cfg{cnt = Cnt, max_header = MaxHeader,
                       max_body = maps:get(max_body_bytes, Opts),
                       header_timeout = maps:get(header_timeout_ms, Opts),
                       idle_timeout = maps:get(idle_timeout_ms, Opts),
                       close_mode = maps:get(close, Opts, false)},
            Online = erlang:system_info(schedulers_online),
            Scheds = [(I - 1) rem Online + 1 || I <- lists:seq(1, Threads)],
            Accs = [spawn_opt(?MODULE, acceptor, [L, S, Cfg, Cnt], [link, {scheduler, S}])
                    || S <- Scheds],
            {ok, #h{listen = L, acceptors = Accs, cnt = Cnt, port = Bound, threads = Threads,
                    scheds = Scheds}};
        {error, Reason} ->
            {error, Reason}
    end.

%% @doc Closes the listener and kills the acceptors, which takes every connection with them.
%% Unlike the C engine, in-flight responses are not given stop_timeout_ms to finish.
-spec stop(handle()) -> ok.
stop(#h{listen = L, acceptors = Accs}) ->
    _ = gen_tcp:close(L),
    Refs = [monitor(process, A) || A <- Accs],
    [exit(A, kill) || A <- Accs],
    [receive {'DOWN', R, process, _, _} -> ok end || R <- Refs],
    ok.

%% @doc The bound TCP port.
-spec port(handle()) -> inet:port_number().
port(#h{port = P}) -> P.

%% @doc Threads (acceptors) and the scheduler each one runs on.
-spec info(handle()) -> #{threads := pos_integer(), schedulers := [pos_integer()]}.
info(#h{threads = T, scheds = S}) -> #{threads => T, schedulers => S}.

%% @doc The counters, with the keys of cbench:stats/1. Bytes are added when a connection closes.
-spec stats(handle()) -> map().
stats(#h{cnt = Cnt}) ->
    Base = maps:from_list([{K, counters:get(Cnt, idx(K))} || K <- ?STAT_KEYS]),
    ByRoute = maps:from_list([{R, counters:get(Cnt, route_idx(R))}
                              || R <- cbench_http:route_names()]),
    #{conns_accepted := Acc, conns_closed := Closed, requests := Reqs} = Base,
    Base#{conns_open => Acc - Closed,
          requests_by_route => ByRoute,
          conns_by_proto => #{http1 => Acc, h2c_prior => 0, h2c_upgrade => 0},
          requests_by_proto => #{http1 => Reqs, h2c_prior => 0, h2c_upgrade => 0},
          h2_errors => 0}.

idx(K) -> idx(K, ?STAT_KEYS, 1).
idx(K, [K | _], I) -> I;
idx(K, [_ | T], I) -> idx(K, T, I + 1).

route_idx(R) -> length(?STAT_KEYS) + idx(R, cbench_http:route_names(), 1).

bump(#cfg{cnt = Cnt}, K) -> counters:add(Cnt, idx(K), 1).

%%% Acceptor

%% @private
-spec acceptor(gen_tcp:socket(), pos_integer(), #cfg{}, counters:counters_ref()) -> no_return().
acceptor(L, Sched, Cfg, Cnt) ->
    case gen_tcp:accept(L) of
        {ok, S} ->
            counters:add(Cnt, idx(conns_accepted), 1),
            Pid = spawn_opt(?MODULE, conn, [self(), Cfg, S], [link, {scheduler, Sched}]),
            %% sendfile needs the socket's owner; the connection waits for this handoff.
            case gen_tcp:controlling_process(S, Pid) of
                ok -> Pid ! {go, S};
                {error, _} -> exit(Pid, kill), gen_tcp:close(S)
            end,
            acceptor(L, Sched, Cfg, Cnt);
        {error, closed} ->
            exit(normal);
        {error, E} when E =:= emfile; E =:= enfile ->
            %% Back off instead of spinning while descriptors are exhausted.
            counters:add(Cnt, idx(accept_backoffs), 1),
            receive after 100 -> ok end,
            acceptor(L, Sched, Cfg, Cnt);
        {error, _} ->
            acceptor(L, Sched, Cfg, Cnt)
    end.

%%% Connection

%% @private
-spec conn(pid(), #cfg{}, gen_tcp:socket()) -> ok.
conn(_Acceptor, Cfg, S) ->
    receive {go, S} -> ok end,
    try
        case Cfg#cfg.close_mode of
            true -> ehttpd_loop(S);
            false -> next_request(S, Cfg, true)
        end
    catch
        Class:Reason:Stack ->
            %% A bug here must not kill the acceptor (we are linked): log it and close.
            logger:error("cbench_ehttpd connection crashed: ~p:~p ~p", [Class, Reason, Stack]),
            bump(Cfg, resets)
    end,
    case inet:getstat(S, [recv_oct, send_oct]) of
        {ok, [{recv_oct, R}, {send_oct, W}]} ->
            counters:add(Cfg#cfg.cnt, idx(bytes_read), R),
            counters:add(Cfg#cfg.cnt, idx(bytes_written), W);
        _ -> ok
    end,
    _ = gen_tcp:close(S),
    bump(Cfg, conns_closed),
    ok.

%% The original ehttpd: skip the head, answer, close.
ehttpd_loop(S) ->
    case gen_tcp:recv(S, 0) of
        {ok, http_eoh} -> gen_tcp:send(S, ?EHTTPD_ANSWER);
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
    case gen_tcp:recv(S, 0, Wait) of
        {ok, {http_request, Method, Uri, Version}} ->
            Deadline = erlang:monotonic_time(millisecond) + Cfg#cfg.header_timeout,
            M = method(Method),
            T = target(Uri),
            Req = #req{method = M, target = T, version = Version},
            read_headers(S, Cfg, Req, byte_size(M) + byte_size(T) + 12, Deadline);
        {ok, {http_error, _}} -> error_close(S, Cfg, 400);
        {ok, _Other} -> error_close(S, Cfg, 400);
        {error, timeout} -> head_timeout(S, Cfg);
        {error, emsgsize} -> error_close(S, Cfg, 431);
        {error, _} -> ok
    end.

read_headers(S, Cfg, Req, Bytes, Deadline) ->
    Left = max(0, Deadline - erlang:monotonic_time(millisecond)),
    case gen_tcp:recv(S, 0, Left) of
        {ok, {http_header, _, _Field, Name, Value}} ->
            Bytes1 = Bytes + byte_size(Name) + byte_size(Value) + 4,
            if
                Bytes1 > Cfg#cfg.max_header ->
                    error_close(S, Cfg, 431);
                true ->
                    Hs = [{Name, trim(Value)} | Req#req.headers],
                    read_headers(S, Cfg, Req#req{headers = Hs}, Bytes1, Deadline)
            end;
        {ok, http_eoh} ->
            Req1 = Req#req{headers = lists:reverse(Req#req.headers)},
            case frame(Req1) of
                {ok, Req2} -> request(S, Cfg, Req2);
                error -> error_close(S, Cfg, 400)
            end;
        {ok, _} -> error_close(S, Cfg, 400);
        {error, timeout} -> bump(Cfg, timeouts), error_close(S, Cfg, 408);
        {error, emsgsize} -> error_close(S, Cfg, 431);
        {error, _} -> bump(Cfg, resets)
    end.

%% A timed-out head: 408 if any of it arrived, a silent close otherwise.
head_timeout(S, Cfg) ->
    bump(Cfg, timeouts),
    ok = inet:setopts(S, [{packet, raw}]),
    case gen_tcp:recv(S, 0, 0) of
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

%% http_bin keeps trailing whitespace in values; HTTP (and llhttp) drops it.
trim(<<>>) -> <<>>;
trim(V) ->
    case binary:last(V) of
        C when C =:= $\s; C =:= $\t -> trim(binary:part(V, 0, byte_size(V) - 1));
        _ -> V
    end.

%% Works out keep-alive, the body framing and Expect from the headers; error means 400.
frame(Req = #req{version = {1, Minor}, headers = Hs}) ->
    frame(Hs, Req#req{keep = Minor >= 1}, undefined, undefined, Minor);
frame(_) ->
    error.

frame([], Req, CL, TE, _Minor) ->
    case {CL, TE} of
        {undefined, undefined} -> {ok, Req};
        {undefined, chunked} -> {ok, Req#req{framing = chunked}};
        {N, undefined} when is_integer(N) -> {ok, Req#req{framing = {length, N}}};
        _ -> error
    end;
frame([{Name, Value} | Rest], Req, CL, TE, Minor) ->
    case cbench_http:lower(Name) of
        <<"content-length">> when CL =:= undefined ->
            case is_digits(Value) of
                true -> frame(Rest, Req, binary_to_integer(Value), TE, Minor);
                false -> error
            end;
        <<"content-length">> -> error;
        <<"transfer-encoding">> ->
            Codings = tokens(Value),
            case lists:last([<<>> | Codings]) of
                <<"chunked">> when length(Codings) =:= 1, TE =:= undefined ->
                    frame(Rest, Req, CL, chunked, Minor);
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

is_digits(<<>>) -> false;
is_digits(B) -> lists:all(fun(C) -> C >= $0 andalso C =< $9 end, binary_to_list(B)).

tokens(Value) ->
    [cbench_http:lower(string:trim(T)) || T <- binary:split(Value, <<",">>, [global])].

%% How the response ends the connection: docs/wire.md, "connection" header rule.
conn_mode(#req{keep = false}) -> close;
conn_mode(#req{version = {1, 0}}) -> keep_alive;
conn_mode(_) -> default.

request(S, Cfg = #cfg{max_body = MaxBody}, #req{framing = {length, N}}) when N > MaxBody ->
    error_close(S, Cfg, 413);
request(S, Cfg, Req = #req{method = Method, target = Target}) ->
    {Route, Allowed} = cbench_http:route(Target),
    bump(Cfg, requests),
    counters:add(Cfg#cfg.cnt, route_idx(Route), 1),
    MethodOk = case {Allowed, Method} of
                   {any, _} -> true;
                   {get, <<"GET">>} -> true;
                   {get, <<"HEAD">>} -> true;
                   {post, <<"POST">>} -> true;
                   _ -> false
               end,
    continue(S, Req),
    Result =
        case {MethodOk, Route} of
            {true, echo} -> echo(S, Cfg, Req);
            {true, echo_chunked} -> echo_chunked(S, Cfg, Req);
            {true, _} -> after_body(S, Cfg, Req, fun() -> respond(S, Cfg, Req, Route) end);
            {false, _} ->
                Allow = case Allowed of
                            get -> <<"GET, HEAD">>;
                            post -> <<"POST">>
                        end,
                bump(Cfg, status_405),
                after_body(S, Cfg, Req,
                           fun() -> simple(S, Req, 405, [{<<"allow">>, Allow}], <<>>) end)
        end,
    case Result of
        ok when Req#req.keep ->
            ok = inet:setopts(S, [{packet, http_bin}]),
            next_request(S, Cfg, false);
        ok ->
            ok;
        {error, _} ->
            ok
    end.

%% Expect: 100-continue is answered only when a body will be read.
continue(S, #req{expect = true, framing = F}) when F =/= none, F =/= {length, 0} ->
    gen_tcp:send(S, <<"HTTP/1.1 100 Continue\r\n\r\n">>);
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

echo(S, Cfg, Req) ->
    case body(S, Cfg, Req, fun(Piece, Acc) -> {ok, [Acc | Piece]} end, []) of
        {ok, Body} ->
            send(S, [cbench_http:head(200, [ct(octet)], iolist_size(Body), conn_mode(Req)),
                     body_unless_head(Req, Body)]);
        Error -> Error
    end.

echo_chunked(S, Cfg, Req) ->
    case send(S, cbench_http:head(200, [ct(octet)], chunked, conn_mode(Req))) of
        ok ->
            Send = fun(Piece, ok) -> send(S, cbench_http:chunk(Piece)) end,
            case body(S, Cfg, Req, fun(P, A) -> case Send(P, A) of ok -> {ok, ok}; E -> E end end,
                      ok) of
                {ok, ok} -> send(S, cbench_http:last_chunk());
                Error -> Error
            end;
        Error -> Error
    end.

%% Reads the body in raw mode, folding Fun over the pieces as they are read.
body(_S, _Cfg, #req{framing = none}, _Fun, Acc) ->
    {ok, Acc};
body(S, Cfg, #req{framing = {length, N}}, Fun, Acc) ->
    ok = inet:setopts(S, [{packet, raw}]),
    body_length(S, Cfg, N, Fun, Acc);
body(S, Cfg, #req{framing = chunked}, Fun, Acc) ->
    ok = inet:setopts(S, [{packet, raw}]),
    body_chunked(S, Cfg, 0, Fun, Acc).

body_length(_S, _Cfg, 0, _Fun, Acc) ->
    {ok, Acc};
body_length(S, Cfg, Left, Fun, Acc) ->
    %% Exact lengths only: reading "what is there" could swallow the next pipelined request.
    case gen_tcp:recv(S, min(Left, 65536), Cfg#cfg.idle_timeout) of
        {ok, Piece} ->
            case Fun(Piece, Acc) of
                {ok, Acc1} -> body_length(S, Cfg, Left - byte_size(Piece), Fun, Acc1);
                Error -> Error
            end;
        {error, timeout} -> bump(Cfg, timeouts), {error, timeout};
        {error, E} -> bump(Cfg, resets), {error, E}
    end.

body_chunked(S, Cfg, Total, Fun, Acc) ->
    case read_line(S, Cfg) of
        {ok, Line} ->
            case chunk_size(Line) of
                {ok, 0} -> trailers(S, Cfg, Acc);
                {ok, Size} when Total + Size > Cfg#cfg.max_body ->
                    error_close(S, Cfg, 413), {error, too_large};
                {ok, Size} ->
                    ok = inet:setopts(S, [{packet, raw}]),
                    case chunk_data(S, Cfg, Size, Fun, Acc) of
                        {ok, Acc1} ->
                            case gen_tcp:recv(S, 2, Cfg#cfg.idle_timeout) of
                                {ok, <<"\r\n">>} -> body_chunked(S, Cfg, Total + Size, Fun, Acc1);
                                {ok, _} -> error_close(S, Cfg, 400), {error, bad_chunk};
                                {error, E} -> bump(Cfg, resets), {error, E}
                            end;
                        Error -> Error
                    end;
                error ->
                    error_close(S, Cfg, 400), {error, bad_chunk}
            end;
        Error -> Error
    end.

chunk_data(_S, _Cfg, 0, _Fun, Acc) ->
    {ok, Acc};
chunk_data(S, Cfg, Left, Fun, Acc) ->
    case gen_tcp:recv(S, min(Left, 65536), Cfg#cfg.idle_timeout) of
        {ok, Piece} ->
            case Fun(Piece, Acc) of
                {ok, Acc1} -> chunk_data(S, Cfg, Left - byte_size(Piece), Fun, Acc1);
                Error -> Error
            end;
        {error, timeout} -> bump(Cfg, timeouts), {error, timeout};
        {error, E} -> bump(Cfg, resets), {error, E}
    end.

trailers(S, Cfg, Acc) ->
    case read_line(S, Cfg) of
        {ok, <<"\r\n">>} -> {ok, Acc};
        {ok, <<"\n">>} -> {ok, Acc};
        {ok, _Trailer} -> trailers(S, Cfg, Acc);
        Error -> Error
    end.

read_line(S, Cfg) ->
    ok = inet:setopts(S, [{packet, line}]),
    case gen_tcp:recv(S, 0, Cfg#cfg.idle_timeout) of
        {ok, Line} -> {ok, Line};
        {error, emsgsize} -> error_close(S, Cfg, 400), {error, bad_chunk};
        {error, timeout} -> bump(Cfg, timeouts), {error, timeout};
        {error, E} -> bump(Cfg, resets), {error, E}
    end.

%% A chunk-size line: hex digits, optional extensions after `;', then CRLF.
chunk_size(Line) ->
    Hex = hd(binary:split(hd(binary:split(Line, [<<";">>, <<"\r">>, <<"\n">>])), <<" ">>)),
    case byte_size(Hex) of
        N when N >= 1, N =< 15 ->
            try {ok, binary_to_integer(Hex, 16)} catch error:badarg -> error end;
        _ -> error
    end.

%%% Responses

ct(text) -> {<<"content-type">>, <<"text/plain">>};
ct(json) -> {<<"content-type">>, <<"application/json">>};
ct(octet) -> {<<"content-type">>, <<"application/octet-stream">>};
ct(sse) -> {<<"content-type">>, <<"text/event-stream">>}.

-define(NO_CACHE, {<<"cache-control">>, <<"no-cache">>}).

respond(S, _Cfg, Req, root) -> simple(S, Req, 200, [], <<"hello world!">>);
respond(S, _Cfg, Req, hello) -> simple(S, Req, 200, [ct(text)], <<"Hello, Joe!">>);
respond(S, _Cfg, Req, json) ->
    simple(S, Req, 200, [ct(json)], <<"{\"message\":\"Hello, Joe!\"}">>);
respond(S, Cfg, Req, Route) when Route =:= file_tiny; Route =:= file_small;
                                 Route =:= file_big ->
    Size = cbench_fixture:size(Route),
    case send(S, cbench_http:head(200, [ct(octet)], Size, conn_mode(Req))) of
        ok when Req#req.method =:= <<"HEAD">> -> ok;
        ok ->
            {ok, Fd} = file:open(cbench_fixture:path(Route), [read, raw, binary]),
            try file:sendfile(Fd, S, 0, Size, []) of
                {ok, Size} ->
                    %% send_oct does not count what sendfile wrote.
                    counters:add(Cfg#cfg.cnt, idx(bytes_written), Size);
                {ok, _} -> {error, short_sendfile};
                Error -> Error
            after
                file:close(Fd)
            end;
        Error -> Error
    end;
respond(S, _Cfg, Req, stream) ->
    streamed(S, Req, [ct(text)], [<<"hello, ">>, <<"Joe!">>]);
respond(S, _Cfg, Req, stream_small) ->
    streamed(S, Req, [ct(octet)], lists:duplicate(100, cbench_http:line()));
respond(S, _Cfg, Req, stream_big) ->
    streamed(S, Req, [ct(octet)], lists:duplicate(64, cbench_http:bigline()));
respond(S, _Cfg, Req, sse) ->
    streamed(S, Req, [ct(sse), ?NO_CACHE],
             lists:duplicate(32, cbench_http:sse_event(cbench_http:line())));
respond(S, _Cfg, Req, sse_small) ->
    streamed(S, Req, [ct(sse), ?NO_CACHE],
             lists:duplicate(100, cbench_http:sse_event(cbench_http:line())));
respond(S, _Cfg, Req, sse_big) ->
    streamed(S, Req, [ct(sse), ?NO_CACHE],
             lists:duplicate(64, cbench_http:sse_event(cbench_http:bigline())));
respond(S, Cfg, Req, delay) ->
    case cbench_http:delay_param(Req#req.target) of
        {ok, Ms} ->
            %% A timer in this connection's process: the scheduler serves others meanwhile.
            receive after Ms -> ok end,
            simple(S, Req, 200, [ct(text)], <<"ok">>);
        error ->
            bump(Cfg, status_400),
            simple(S, Req, 400, [], <<>>)
    end;
respond(S, Cfg, Req, status) ->
    case cbench_http:status_param(Req#req.target) of
        {ok, Code} when Code =:= 204; Code =:= 304 ->
            send(S, cbench_http:head(Code, [], none, conn_mode(Req)));
        {ok, Code} ->
            simple(S, Req, Code, [], <<>>);
        error ->
            bump(Cfg, status_400),
            simple(S, Req, 400, [], <<>>)
    end;
respond(S, _Cfg, Req, headers) ->
    simple(S, Req, 200, [ct(json)], cbench_http:headers_json(Req#req.headers));
respond(S, Cfg, Req, not_found) ->
    bump(Cfg, status_404),
    simple(S, Req, 404, [], <<>>).

simple(S, Req, Status, Headers, Body) ->
    send(S, [cbench_http:head(Status, Headers, byte_size(Body), conn_mode(Req)),
             body_unless_head(Req, Body)]).

streamed(S, Req, Headers, Pieces) ->
    send(S, [cbench_http:head(200, Headers, chunked, conn_mode(Req)),
             body_unless_head(Req, [[cbench_http:chunk(P) || P <- Pieces],
                                    cbench_http:last_chunk()])]).

body_unless_head(#req{method = <<"HEAD">>}, _) -> <<>>;
body_unless_head(_, Body) -> Body.

send(S, Data) ->
    case gen_tcp:send(S, Data) of
        ok -> ok;
        {error, _} = E -> E
    end.

%% An error answer, then a lingering close: shut our side, drop what the peer still sends for a
%% short while, so that it reads the answer instead of a reset.
error_close(S, Cfg, Status) ->
    case Status of
        400 -> bump(Cfg, status_400);
        413 -> bump(Cfg, status_413);
        431 -> bump(Cfg, status_431);
        _ -> ok
    end,
    _ = gen_tcp:send(S, cbench_http:head(Status, [], 0, close)),
    _ = gen_tcp:shutdown(S, write),
    _ = inet:setopts(S, [{packet, raw}]),
    Deadline = erlang:monotonic_time(millisecond) + ?LINGER_MS,
    drain(S, Deadline),
    {error, closed}.

drain(S, Deadline) ->
    Left = Deadline - erlang:monotonic_time(millisecond),
    case Left > 0 andalso gen_tcp:recv(S, 0, Left) of
        {ok, _} -> drain(S, Deadline);
        _ -> ok
    end.
