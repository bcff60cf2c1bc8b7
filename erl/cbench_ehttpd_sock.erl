%%% @doc The ehttpd engine's transport: a connection's socket is a gen_tcp port (cleartext) or an
%%% `ssl' socket (TLS, docs/tls.md), and both take the same packet modes ({packet, http_bin}, raw,
%%% line) and the same passive reads, so the connection code is one for both. Each function picks
%%% the module by `is_port/1', one type test on the cleartext path.
-module(cbench_ehttpd_sock).

-export([recv/3, send/2, setopts/2, shutdown/2, close/1, getstat/2, peername/1, sendfile/4,
         reset/1, tls_transport/1, raw_send/1, raw_close/1, raw_wait_closed/1, has_raw/0]).

%% The connection's TLS socket as ssl:transport_accept/1 gave it (tls_transport/1).
-define(TRANSPORT, cbench_tls_transport).

-export_type([socket/0]).

-type socket() :: gen_tcp:socket() | ssl:sslsocket().

%% What one read of a file sent over TLS takes (sendfile cannot encrypt).
-define(FILE_PIECE, 65536).

%% @doc gen_tcp:recv/3 or ssl:recv/3.
-spec recv(socket(), non_neg_integer(), timeout()) -> {ok, term()} | {error, term()}.
recv(S, N, T) when is_port(S) -> gen_tcp:recv(S, N, T);
recv(S, N, T) -> ssl:recv(S, N, T).

%% @doc gen_tcp:send/2 or ssl:send/2.
-spec send(socket(), iodata()) -> ok | {error, term()}.
send(S, Data) when is_port(S) -> gen_tcp:send(S, Data);
send(S, Data) -> ssl:send(S, Data).

%% @doc inet:setopts/2 or ssl:setopts/2.
-spec setopts(socket(), list()) -> ok | {error, term()}.
setopts(S, Opts) when is_port(S) -> inet:setopts(S, Opts);
setopts(S, Opts) -> ssl:setopts(S, Opts).

%% @doc gen_tcp:shutdown/2 or ssl:shutdown/2 (which sends close_notify first).
-spec shutdown(socket(), read | write | read_write) -> ok | {error, term()}.
shutdown(S, How) when is_port(S) -> gen_tcp:shutdown(S, How);
shutdown(S, How) -> ssl:shutdown(S, How).

%% @doc gen_tcp:close/1 or ssl:close/1.
-spec close(socket()) -> ok | {error, term()}.
close(S) when is_port(S) -> gen_tcp:close(S);
close(S) -> ssl:close(S).

%% @doc The TCP counters (over TLS, of the records: what went over the wire).
-spec getstat(socket(), [atom()]) -> {ok, [{atom(), integer()}]} | {error, term()}.
getstat(S, Keys) when is_port(S) -> inet:getstat(S, Keys);
getstat(S, Keys) -> ssl:getstat(S, Keys).

%% @doc inet:peername/1 or ssl:peername/1.
-spec peername(socket()) -> {ok, {inet:ip_address(), inet:port_number()}} | {error, term()}.
peername(S) when is_port(S) -> inet:peername(S);
peername(S) -> ssl:peername(S).

%% @doc Size bytes of Fd from Offset: file:sendfile/5 in cleartext; over TLS, read and sent in
%% pieces of 64 KiB (the bytes are encrypted here).
-spec sendfile(file:fd(), socket(), non_neg_integer(), non_neg_integer()) ->
          {ok, non_neg_integer()} | {error, term()}.
sendfile(Fd, S, Offset, Size) when is_port(S) -> file:sendfile(Fd, S, Offset, Size, []);
sendfile(Fd, S, Offset, Size) -> pread_send(Fd, S, Offset, Size, 0).

pread_send(_Fd, _S, _Offset, 0, Sent) -> {ok, Sent};
pread_send(Fd, S, Offset, Left, Sent) ->
    case file:pread(Fd, Offset, min(Left, ?FILE_PIECE)) of
        {ok, Data} ->
            N = byte_size(Data),
            case ssl:send(S, Data) of
                ok -> pread_send(Fd, S, Offset + N, Left - N, Sent + N);
                Error -> Error
            end;
        eof -> {ok, Sent};
        Error -> Error
    end.

%% @doc Closes with RST (linger 0). Over TLS the TCP socket under the session is reset, without
%% close_notify (raw_close/1), as the C engine does; where it cannot be reached, ssl:close/1 sends
%% close_notify before the reset.
-spec reset(socket()) -> ok.
reset(S) when is_port(S) ->
    _ = inet:setopts(S, [{linger, {true, 0}}]),
    _ = gen_tcp:close(S),
    ok;
reset(S) ->
    case has_raw() of
        true -> raw_close(rst);
        false ->
            _ = ssl:setopts(S, [{linger, {true, 0}}]),
            _ = ssl:close(S),
            ok
    end.

%%% The TCP socket under a TLS session, for what OTP `ssl' cannot do itself: the TLS faults
%%% (docs/faults.md) write a record no key decrypts, or end without close_notify, on it. OTP 25's
%%% transport socket holds it as `{sslsocket, {gen_tcp, Port, _, _}, _}'; any process may write to a
%%% port or close it, so the connection does so under the session's processes, which then see the
%%% bytes gone and the socket closed. Kept in the process dictionary, where it is a plain term.

%% @doc Keeps the connection's TLS socket (from ssl:transport_accept/1) for the raw functions.
-spec tls_transport(term()) -> ok.
tls_transport(T) ->
    put(?TRANSPORT, T),
    ok.

raw() ->
    case get(?TRANSPORT) of
        {sslsocket, {gen_tcp, Port, _, _}, _} when is_port(Port) -> Port;
        _ -> none
    end.

%% @doc Whether the TCP socket under this connection's TLS session can be reached (it can on OTP 25).
-spec has_raw() -> boolean().
has_raw() -> raw() =/= none.

%% @doc Bytes written on the TCP socket under the session, after what the session wrote.
-spec raw_send(iodata()) -> ok.
raw_send(Data) ->
    case raw() of
        none -> ok;
        Port -> _ = catch erlang:port_command(Port, Data), ok
    end.

%% @doc Waits up to Ms for the client to close the TCP socket under a paused handshake (tls-stall):
%% the connection takes the socket from the session's process (which no longer reads it) and waits
%% for its close, dropping whatever else the client sends.
-spec raw_wait_closed(non_neg_integer()) -> closed | timeout.
raw_wait_closed(Ms) ->
    case raw() of
        none -> receive after Ms -> timeout end;
        Port ->
            try
                true = erlang:port_connect(Port, self()),
                ok = inet:setopts(Port, [{active, true}]),
                raw_wait_closed(Port, erlang:monotonic_time(millisecond) + Ms)
            catch
                error:_ -> closed
            end
    end.

raw_wait_closed(Port, Deadline) ->
    Left = max(0, Deadline - erlang:monotonic_time(millisecond)),
    receive
        {tcp_closed, Port} -> closed;
        {tcp_error, Port, _} -> closed;
        {tcp, Port, _} -> raw_wait_closed(Port, Deadline)
    after Left -> timeout
    end.

%% @doc Closes the TCP socket under the session: with a FIN, or with an RST (linger 0).
-spec raw_close(fin | rst) -> ok.
raw_close(How) ->
    case raw() of
        none -> ok;
        Port ->
            How =:= rst andalso inet:setopts(Port, [{linger, {true, 0}}]),
            _ = catch erlang:port_close(Port),
            ok
    end.
