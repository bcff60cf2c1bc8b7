%%% @doc cbench_h2_upstream against hostile upstreams, without an engine around it: a local
%%% listener answers the client's request with SETTINGS and then random frames (random types, flags,
%%% stream ids and payloads, with now and then a valid head or a padded, prioritised or continued
%%% header block), then closes. Whatever comes, request/4 returns an answer or one of the proxy's
%%% failures, and never raises (the ehttpd connection process that calls it must not crash). The
%%% exact answers to exact frames are cbench_proxy_SUITE's (h2c_hostile_upstream_ehttpd).
-module(cbench_h2_upstream_tests).

%% proper.hrl first: eunit.hrl defines ?LET only where PropEr has not.
-include_lib("proper/include/proper.hrl").
-include_lib("eunit/include/eunit.hrl").

random_frames_test_() ->
    {timeout, 300, fun() -> ?assert(proper:quickcheck(prop_any_frames(), [{numtests, 2000}, {to_file, user}])) end}.

prop_any_frames() ->
    ?FORALL({Frames, Body}, {list(h2frame()), oneof([<<>>, <<"abc">>, binary(70000)])},
            begin
                Bytes = iolist_to_binary([frame(4, 0, 0, <<>>) | Frames]),
                Result = exchange(Bytes, Body),
                %% The outcomes' mix is printed, to show the frames reach answers and not only errors.
                collect(outcome(Result),
                        ?WHENFAIL(io:format("frames ~w~nresult ~p~n", [Bytes, Result]), acceptable(Result)))
            end).

%% Mostly frames the client accepts somewhere (heads, padded and prioritised ones, DATA, trailers,
%% CONTINUATIONs, PING, SETTINGS, windows, RST_STREAM, GOAWAY, PRIORITY, unknown types), so that
%% random orders of them reach answers, interim heads and every state; now and then any frame.
h2frame() ->
    frequency([{6, valid_frame()},
               {1, ?LET({Type, Flags, Id, Payload},
                        {range(0, 255), range(0, 255), oneof([0, 1, 3, range(0, 16#7fffffff)]), binary()},
                        frame(Type, Flags, Id, Payload))}]).

valid_frame() ->
    oneof([?LET(F, oneof([4, 5]), frame(1, F, 1, <<16#88>>)),
           frame(1, 4, 1, <<16#08, 3, "103">>),
           frame(1, 16#2c, 1, <<2, 0:32, 7, 16#88, 0, 0>>),
           frame(1, 0, 1, <<16#88>>),
           frame(9, 4, 1, <<0, 3, "x-b", 1, "2">>),
           frame(1, 5, 1, <<0, 3, "x-t", 1, "1">>),
           ?LET({F, D}, {oneof([0, 1]), binary(8)}, frame(0, F, 1, D)),
           ?LET(D, binary(4), frame(0, 9, 1, <<2, D/binary, 0, 0>>)),
           ?LET(D, binary(8), frame(6, 0, 0, D)),
           ?LET({K, V}, {range(1, 6), oneof([0, 1, 4096, 16384, 65535, 1 bsl 20])}, frame(4, 0, 0, <<K:16, V:32>>)),
           ?LET({Id, Inc}, {oneof([0, 1]), range(1, 100000)}, frame(8, 0, Id, <<0:1, Inc:31>>)),
           ?LET(Code, oneof([0, 2, 7, 8]), frame(3, 0, 1, <<Code:32>>)),
           ?LET(Last, oneof([0, 1]), frame(7, 0, 0, <<Last:32, 0:32>>)),
           frame(2, 0, 1, <<0:32, 16>>),
           frame(20, 0, 1, <<"ignored">>)]).

frame(Type, Flags, Id, Payload) ->
    <<(byte_size(Payload)):24, Type, Flags, 0:1, Id:31, Payload/binary>>.

%% One request to a listener of its own that answers every connection (a retry opens a second)
%% with Bytes and closes; the connection kept by an answer is closed after it.
exchange(Bytes, Body) ->
    {ok, L} = gen_tcp:listen(0, [binary, {active, false}, {ip, {127, 0, 0, 1}}]),
    Up = spawn_link(fun() -> answer_all(L, Bytes) end),
    Key = make_ref(),
    Connect = fun() ->
                      {ok, S} = gen_tcp:connect({127, 0, 0, 1}, element(2, inet:port(L)),
                                                [binary, {active, false}, {packet, raw}]),
                      {ok, S}
              end,
    Req = #{method => <<"POST">>, scheme => <<"http">>, authority => <<"up">>, path => <<"/">>,
            fields => [{<<"x-a">>, <<"1">>}], body => Body},
    Result = try cbench_h2_upstream:request(Key, Connect, Req, #{timeout => 300, max_body => 100})
             catch Class:Reason:Stack -> {raised, Class, Reason, Stack}
             end,
    case erase(Key) of
        undefined -> ok;
        Kept -> gen_tcp:close(element(2, Kept))    % the #c{} record's socket
    end,
    unlink(Up),
    exit(Up, kill),
    gen_tcp:close(L),
    Result.

answer_all(L, Bytes) ->
    {ok, A} = gen_tcp:accept(L),
    _ = gen_tcp:recv(A, 0, 1000),
    _ = gen_tcp:send(A, Bytes),
    _ = gen_tcp:shutdown(A, write),
    answer_all(L, Bytes).

outcome({ok, _, _, _, _, _}) -> ok;
outcome({error, _, Why}) -> Why;
outcome(Other) -> Other.

acceptable({ok, Status, Headers, Body, Trailers, How}) ->
    Status >= 200 andalso Status =< 999 andalso is_list(Headers) andalso is_binary(Body)
        andalso byte_size(Body) =< 100 andalso is_list(Trailers) andalso lists:member(How, [reused, connected]);
acceptable({error, 502, Why}) -> lists:member(Why, [reset, bad_response, head_too_big, body_too_big, truncated]);
acceptable({error, 504, timeout}) -> true;
acceptable(_) -> false.
