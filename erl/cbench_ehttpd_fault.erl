%%% @doc Faults on the ehttpd engine (docs/faults.md): what src/fault.c does over HTTP/1.1, with
%%% gen_tcp. A reset is `{linger, {true, 0}}' and a close (RST); every other fault writes bytes
%%% and closes with FIN, or keeps the connection where the bytes were a whole answer. The HTTP/2
%%% kinds (rst_stream, goaway, settings, violation) are answered 501 here as on the C engine's HTTP/1.1: a stub with
%%% one of them is refused when it is added ({error, {unsupported, Kind}}).
-module(cbench_ehttpd_fault).

-export([run/3]).

-define(HANG_TICK_MS, 200).
-define(GEN_SPAN, 1048576).

%% What the connection hands over: its socket's answer context.
-type ctx() :: #{method := binary(), mode := close | keep_alive | default,
                 status := 100..599, headers := [{binary(), binary()}],
                 idle_ms := pos_integer(),
                 %% Records the request in the journal (status, body bytes) before the last write.
                 journal := fun((non_neg_integer(), non_neg_integer()) -> ok),
                 %% The answer without the fault.
                 normal := fun(() -> ok | close | {error, term()})}.

%% @doc Runs fault F on the request whose answer Ctx describes. ok: the connection goes on;
%% close: it ends (already closed or reset when the fault said so).
-spec run(gen_tcp:socket(), cbench_fault:fault(), ctx()) -> ok | close | {error, term()}.
run(S, #{kind := reset, at := 0}, #{journal := J}) ->
    J(0, 0),
    reset(S);
run(S, #{kind := reset, at := At, bytes := Bytes, length := Len}, Ctx = #{journal := J}) ->
    Sent = case At of 2 -> Bytes; _ -> 0 end,
    J(maps:get(status, Ctx), out(Ctx, Sent)),
    _ = gen_tcp:send(S, [head(Ctx, Len), body(Ctx, 0, Sent)]),
    reset(S);
run(S, #{kind := empty}, #{journal := J}) ->
    J(0, 0),
    close(S);
run(S, #{kind := hang, ms := Ms, at := At, length := Len}, Ctx = #{journal := J, idle_ms := Idle}) ->
    _ = inet:setopts(S, [{packet, raw}, {active, false}]),
    Status = case At of
                 1 -> _ = gen_tcp:send(S, head(Ctx, Len)), maps:get(status, Ctx);
                 _ -> 0
             end,
    hang(S, case Ms of 0 -> Idle; _ -> min(Ms, Idle) end),
    J(Status, 0),
    close(S);
run(S, #{kind := garbage, seed := Seed, bytes := N}, #{journal := J}) ->
    J(0, 0),
    _ = gen_tcp:send(S, cbench_fault:garbage(Seed, N)),
    close(S);
run(S, #{kind := truncated, length := Len, bytes := Bytes}, Ctx = #{journal := J}) ->
    J(maps:get(status, Ctx), out(Ctx, Bytes)),
    _ = gen_tcp:send(S, [head(Ctx, Len), body(Ctx, 0, Bytes)]),
    close(S);
run(S, #{kind := overlong, length := Len, bytes := Extra}, Ctx = #{journal := J}) ->
    J(maps:get(status, Ctx), out(Ctx, Len + Extra)),
    _ = gen_tcp:send(S, [head(Ctx, Len), body(Ctx, 0, Len + Extra)]),
    close(S);
run(S, #{kind := malformed_chunk, bytes := Bytes}, Ctx = #{journal := J}) ->
    J(maps:get(status, Ctx), out(Ctx, Bytes)),
    _ = gen_tcp:send(S, [head(Ctx, chunked), chunks(Ctx, Bytes), <<"zz\r\n">>]),
    close(S);
run(S, #{kind := missing_last_chunk, length := Len}, Ctx = #{journal := J}) ->
    J(maps:get(status, Ctx), out(Ctx, Len)),
    _ = gen_tcp:send(S, [head(Ctx, chunked), chunks(Ctx, Len)]),
    close(S);
run(S, #{kind := raw, data := Data, raw_status := Status, close := Close}, #{journal := J}) ->
    J(Status, 0),
    case gen_tcp:send(S, Data) of
        ok when not Close -> ok;
        _ -> close(S)
    end;
run(_S, F = #{kind := delay}, #{normal := Normal}) ->
    N = counters_next(delay),
    receive after cbench_fault:delay_ms(F, N) -> ok end,
    Normal();
run(S, #{kind := K, length := Len, pieces := P, ms := Ms}, Ctx = #{journal := J})
  when K =:= dribble; K =:= drip ->
    case maps:get(method, Ctx) of
        <<"HEAD">> ->
            J(maps:get(status, Ctx), 0),
            send(S, head(Ctx, Len));
        _ ->
            dribble(S, Ctx, Len, P, Ms div P, 0, 0, head(Ctx, Len), J)
    end;
run(S, #{kind := K}, Ctx = #{journal := J}) when K =:= rst_stream; K =:= goaway; K =:= settings;
                                                 K =:= violation ->
    J(501, 0),
    send(S, cbench_http:head(501, [], 0, maps:get(mode, Ctx)));
run(S, #{kind := trailers, length := Len}, Ctx = #{journal := J, status := Status, headers := Hs}) ->
    %% A chunked body, then the last chunk with a trailer field (as src/fault.c writes it).
    J(Status, out(Ctx, Len)),
    Head = cbench_http:head(Status, Hs ++ [{<<"transfer-encoding">>, <<"chunked">>},
                                           {<<"trailer">>, <<"x-trailer">>}], none, default),
    Body = case maps:get(method, Ctx) of
               <<"HEAD">> -> <<>>;
               _ -> [cbench_http:lower(integer_to_binary(Len, 16)), <<"\r\n">>, cbench_fixture:bytes(0, Len),
                     <<"\r\n0\r\nx-trailer: cbench\r\n\r\n">>]
           end,
    send(S, [Head, Body]);
run(S, #{kind := slow_head, length := Len, pieces := P, ms := Ms},
    Ctx = #{journal := J, status := Status, headers := Hs}) ->
    %% The head in P pieces Ms / P apart, without a date (its pieces must not depend on the clock).
    Head = iolist_to_binary([<<"HTTP/1.1 ">>, integer_to_binary(Status), $\s, cbench_http:reason(Status),
                             <<"\r\n">>, [[N, <<": ">>, V, <<"\r\n">>] || {N, V} <- Hs],
                             <<"content-length: ">>, integer_to_binary(Len), <<"\r\n\r\n">>]),
    Total = byte_size(Head),
    Pieces = [binary:part(Head, Total * K div P, Total * (K + 1) div P - Total * K div P)
              || K <- lists:seq(0, P - 1)],
    slow(S, Pieces, Ms div P, fun() ->
                                      J(Status, out(Ctx, Len)),
                                      send(S, body(Ctx, 0, Len))
                              end).
dribble(S, Ctx, Len, P, Step, K, Sent, Head, J) ->
    End = Len * (K + 1) div P,
    Last = K + 1 >= P,
    Last andalso J(maps:get(status, Ctx), Len),
    case send(S, [Head, cbench_fixture:bytes(Sent, End - Sent)]) of
        ok when Last -> ok;
        ok ->
            receive after Step -> ok end,
            dribble(S, Ctx, Len, P, Step, K + 1, End, <<>>, J);
        Error -> Error
    end.

slow(S, [Last], _Step, Then) ->
    case send(S, Last) of
        ok -> Then();
        Error -> Error
    end;
slow(S, [Piece | Rest], Step, Then) ->
    case send(S, Piece) of
        ok ->
            receive after Step -> ok end,
            slow(S, Rest, Step, Then);
        Error -> Error
    end.

%% Waits for the peer to go, or the time to pass, whatever it sends meanwhile.
hang(_S, Left) when Left =< 0 -> ok;
hang(S, Left) ->
    Step = min(Left, ?HANG_TICK_MS),
    case gen_tcp:recv(S, 0, Step) of
        {error, timeout} -> hang(S, Left - Step);
        {ok, _} -> hang(S, Left - Step);
        {error, _} -> ok
    end.

head(#{status := Status, headers := Headers, mode := Mode}, Framing) ->
    cbench_http:head(Status, Headers, Framing, Mode).

body(#{method := <<"HEAD">>}, _Off, _Len) -> <<>>;
body(_, Off, Len) -> cbench_fixture:bytes(Off, Len).

%% Len bytes of generated content as chunks of at most ?GEN_SPAN bytes, as the C engine writes them.
chunks(#{method := <<"HEAD">>}, _) -> <<>>;
chunks(_, Len) -> chunks(0, Len, []).
chunks(_Off, 0, Acc) -> lists:reverse(Acc);
chunks(Off, Len, Acc) ->
    N = min(Len, ?GEN_SPAN),
    chunks(Off + N, Len - N, [cbench_http:chunk(cbench_fixture:bytes(Off, N)) | Acc]).

out(#{method := <<"HEAD">>}, _) -> 0;
out(_, N) -> N.

send(S, Data) ->
    case gen_tcp:send(S, Data) of
        ok -> ok;
        Error -> Error
    end.

reset(S) ->
    _ = inet:setopts(S, [{linger, {true, 0}}]),
    _ = gen_tcp:close(S),
    close.

close(S) ->
    _ = gen_tcp:shutdown(S, write),
    close.

%% A node-wide sequence for the seeded draws.
counters_next(Key) ->
    Ref = case persistent_term:get({?MODULE, Key}, undefined) of
              undefined ->
                  C = atomics:new(1, []),
                  persistent_term:put({?MODULE, Key}, C),
                  C;
              C -> C
          end,
    atomics:add_get(Ref, 1, 1) - 1.
