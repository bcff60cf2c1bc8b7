%%% @doc The client benchmark's reference client (see cbench_client): each worker process keeps one
%%% keep-alive HTTP/1.1 connection of its own on a raw gen_tcp socket, with no pool, no manager
%%% process and no copy of the answer beyond what framing needs. It is the baseline the pooled
%%% clients are read against (httpc_bench used bare Mint in this role).
%%%
%%% The connection lives in the worker's process dictionary and closes when the worker exits. The
%%% answer is framed with erlang:decode_packet/3 on the received bytes (status line and headers),
%%% then `content-length' bytes of body, or the bytes up to the close when the server sends
%%% `connection: close' without a length. Chunked answers are not read (the fixture's routes that a
%%% benchmark requests are not chunked): such an answer is an error and the connection is closed.
%%% After an error or a timeout the connection is closed, since a late answer would otherwise be
%%% read as the next one's.
-module(cbench_client_tcp).
-behaviour(cbench_client).

-export([start/1, get/2, stop/1, pooled/0, request/1]).
%% request/1: the request bytes, for tests.
-ignore_xref([{request, 1}]).

-define(CONN, {?MODULE, conn}).

%% @doc No shared state but the timeout and the cell's target (its address resolved once, here:
%% gen_tcp:connect/4 given a host name, even "127.0.0.1", asks the resolver each time, and 16,384
%% workers connecting at once queue behind it). Connections are opened by the workers.
-spec start(cbench_client:opts()) -> map().
start(Opts = #{timeout := Timeout}) when is_integer(Timeout), Timeout >= 1 ->
    case Opts of
        #{url := Url} -> #{timeout => Timeout, url => Url, target => parse(Url)};
        _ -> #{timeout => Timeout}
    end.

%% @doc No pool: one connection per worker whatever the pool shape.
-spec pooled() -> false.
pooled() -> false.

%% @doc Nothing to stop: each worker's socket closed with the worker.
-spec stop(map()) -> ok.
stop(_) -> ok.

%% @doc One GET on the calling process's connection (opened on first use).
-spec get(map(), string()) -> ok | {error, term()}.
get(State = #{timeout := Timeout}, Url) ->
    Deadline = erlang:monotonic_time(millisecond) + Timeout,
    {Host, Port, Req} = case State of
                            #{url := Url, target := T} -> T;
                            _ -> target(Url)
                        end,
    case conn(Host, Port, Deadline) of
        {ok, S} ->
            case gen_tcp:send(S, Req) of
                ok -> answer(S, Deadline);
                {error, Reason} -> fail(S, Reason)
            end;
        {error, Reason} ->
            {error, Reason}
    end.

%% The address, port and request bytes of a URL other than the cell's, parsed once per worker.
target(Url) ->
    case get({?MODULE, Url}) of
        undefined ->
            T = parse(Url),
            put({?MODULE, Url}, T),
            T;
        T -> T
    end.

parse(Url) ->
    case uri_string:parse(Url) of
        #{scheme := "http", host := Host} = U ->
            Port = maps:get(port, U, 80),
            Path = case maps:get(path, U, "") of "" -> "/"; P -> P end,
            Query = case maps:get(query, U, undefined) of undefined -> ""; Q -> "?" ++ Q end,
            Addr = case inet:parse_address(Host) of
                       {ok, Ip} -> Ip;
                       {error, _} ->
                           case inet:getaddr(Host, inet) of
                               {ok, Ip} -> Ip;
                               {error, Why} -> erlang:error({bad_host, Host, Why})
                           end
                   end,
            {Addr, Port, request(#{host => Host, port => Port, target => Path ++ Query})};
        _ ->
            erlang:error({bad_url, Url})
    end.

%% @doc The bytes of a keep-alive GET request.
-spec request(#{host := string(), port := inet:port_number(), target := string()}) -> binary().
request(#{host := Host, port := Port, target := Target}) ->
    iolist_to_binary(["GET ", Target, " HTTP/1.1\r\nhost: ", Host, $:, integer_to_list(Port),
                      "\r\nuser-agent: cbench-client-tcp\r\n\r\n"]).

conn(Host, Port, Deadline) ->
    case get(?CONN) of
        undefined ->
            Opts = [binary, {active, false}, {packet, raw}, {nodelay, true}],
            case gen_tcp:connect(Host, Port, Opts, left(Deadline)) of
                {ok, S} -> put(?CONN, S), {ok, S};
                {error, _} = E -> E
            end;
        S -> {ok, S}
    end.

left(Deadline) -> max(0, Deadline - erlang:monotonic_time(millisecond)).

fail(S, Reason) ->
    _ = gen_tcp:close(S),
    erase(?CONN),
    {error, Reason}.

%% Status line, then headers, then the body, each from the bytes received so far.
answer(S, Deadline) ->
    case recv(S, <<>>, Deadline) of
        {ok, Buf} -> status(S, Buf, Deadline);
        {error, Reason} -> fail(S, Reason)
    end.

recv(S, Buf, Deadline) ->
    case gen_tcp:recv(S, 0, left(Deadline)) of
        {ok, Data} -> {ok, <<Buf/binary, Data/binary>>};
        {error, _} = E -> E
    end.

status(S, Buf, Deadline) ->
    case erlang:decode_packet(http_bin, Buf, []) of
        {ok, {http_response, _Vsn, Code, _}, Rest} ->
            headers(S, Rest, Deadline, #{code => Code, length => undefined, close => false});
        {more, _} ->
            case recv(S, Buf, Deadline) of
                {ok, Buf1} -> status(S, Buf1, Deadline);
                {error, Reason} -> fail(S, Reason)
            end;
        _ ->
            fail(S, {bad_response, Buf})
    end.

headers(S, Buf, Deadline, H) ->
    case erlang:decode_packet(httph_bin, Buf, []) of
        {ok, http_eoh, Body} -> body(S, Body, Deadline, H);
        {ok, {http_header, _, 'Content-Length', _, V}, Rest} ->
            case string:to_integer(V) of
                {N, <<>>} when N >= 0 -> headers(S, Rest, Deadline, H#{length := N});
                _ -> fail(S, {bad_content_length, V})
            end;
        {ok, {http_header, _, 'Connection', _, V}, Rest} ->
            headers(S, Rest, Deadline, H#{close := string:lowercase(V) =:= <<"close">>});
        {ok, {http_header, _, 'Transfer-Encoding', _, _}, _} ->
            fail(S, chunked_not_supported);
        {ok, {http_header, _, _, _, _}, Rest} ->
            headers(S, Rest, Deadline, H);
        {more, _} ->
            case recv(S, Buf, Deadline) of
                {ok, Buf1} -> headers(S, Buf1, Deadline, H);
                {error, Reason} -> fail(S, Reason)
            end;
        _ ->
            fail(S, {bad_header, Buf})
    end.

body(S, Body, Deadline, H = #{length := undefined}) ->
    %% No length: the body ends with the connection.
    case gen_tcp:recv(S, 0, left(Deadline)) of
        {ok, More} -> body(S, <<Body/binary, More/binary>>, Deadline, H);
        {error, closed} -> _ = fail(S, closed), done(H);
        {error, Reason} -> fail(S, Reason)
    end;
body(S, Body, Deadline, H = #{length := N}) when byte_size(Body) < N ->
    case gen_tcp:recv(S, N - byte_size(Body), left(Deadline)) of
        {ok, More} -> body(S, <<Body/binary, More/binary>>, Deadline, H);
        {error, Reason} -> fail(S, Reason)
    end;
body(S, Body, _Deadline, H = #{length := N, close := Close}) when byte_size(Body) =:= N ->
    _ = Close andalso fail(S, closed),
    done(H);
body(S, _Body, _Deadline, _H) ->
    %% More bytes than the answer: the server sent something unasked for.
    fail(S, unexpected_bytes).

done(#{code := Code}) when Code >= 200, Code < 300 -> ok;
done(#{code := Code}) -> {error, {status, Code}}.
