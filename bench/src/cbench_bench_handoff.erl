%%% @doc The node's side of the port engine's Erlang hand-off, without sockets (issue 28): frames of
%%% requests as the program sends them go through the port's owner side (cbench_port_handler:frame/2),
%%% a batching handler answers them with one cbench:replies/1, and the answers go back through the
%%% owner (queue/2, flush/1) into a port to `cat > /dev/null'. Wall time per request of one scheduler,
%%% which is busy the whole time: what the node spends per request of `erl_hello' (run it pinned, on
%%% an otherwise idle CPU).
%%%
%%%   taskset -c 1 erl +S 1 -noshell -pa _build/default/lib/cbench/ebin -pa bench/ebin \
%%%       -run cbench_bench_handoff run [Frames [PerFrame]]
-module(cbench_bench_handoff).

-export([run/0, run/1]).

run() -> run([]).

run(Args) ->
    {Frames, PerFrame} = case Args of
                             [] -> {20000, 36};
                             [F] -> {list_to_integer(F), 36};
                             [F, P | _] -> {list_to_integer(F), list_to_integer(P)}
                         end,
    Port = open_port({spawn, "cat > /dev/null"}, [binary, {packet, 4}]),
    ok = cbench_port_handler:route_added(1, spawn_link(fun handler/0), true, whole),
    %% The program's numbers for requests are large (a worker's bits above a sequence).
    Bins = [term_to_binary({cbench_requests, 1, requests(1 bsl 40 + K * PerFrame, PerFrame)})
            || K <- lists:seq(1, Frames)],
    T0 = erlang:monotonic_time(nanosecond),
    lists:foreach(fun(Bin) ->
                          cbench_port_handler:frame(Port, binary_to_term(Bin)),
                          answers(Port, PerFrame)
                  end, Bins),
    T1 = erlang:monotonic_time(nanosecond),
    io:format("~b frames of ~b requests: ~.3f us per request~n",
              [Frames, PerFrame, (T1 - T0) / 1000 / (Frames * PerFrame)]),
    halt().

requests(Base, N) ->
    [{Base + I, <<"GET">>, <<"/erl/hello">>, <<>>,
      [{<<"host">>, <<"localhost">>}, {<<"user-agent">>, <<"h2load nghttp2/1.52.0">>}],
      <<"127.0.0.1">>, http1, <<>>} || I <- lists:seq(1, N)].

%% The owner's loop (cbench_port:handle_info/2) until every answer of the frame is flushed.
answers(_Port, 0) ->
    ok;
answers(Port, Left) ->
    receive
        {cbench_port_reply, Items} ->
            ok = cbench_port_handler:queue(Port, Items),
            answers(Port, Left - length(Items));
        {cbench_port_flush, Port} ->
            ok = cbench_port_handler:flush(Port),
            answers(Port, Left)
    end.

%% bench/src/cbench_bench_node.erl's batched erl_hello handler.
handler() ->
    receive
        {cbench_requests, Reqs} ->
            _ = cbench:replies([{R, 200, [{<<"content-type">>, <<"text/plain">>}], <<"Hello, Joe!">>}
                                || R <- Reqs])
    end,
    handler().
