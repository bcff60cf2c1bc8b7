%%% @doc Record and replay end to end (issue 26, docs/record.md): a session is recorded through a
%%% proxy stub against a second cbench server acting as the "real" service (stubs, an Erlang
%%% handler, a streamed answer, a binary body, queries (one holding `+') and a chosen header, a HEAD
%%% that is not recorded), saved, the real
%%% service stopped, the file loaded into a fresh server, and every answer compared with the one
%%% the recording server gave: status, header fields in order and body bytes, the `date' field
%%% masked and the framing fields (`content-length', `transfer-encoding') left out, since a
%%% streamed answer is recorded whole and replayed with its length. On nif, port and ehttpd (each
%%% engine records and replays; the real service is a nif server).
-module(cbench_record_replay_SUITE).

-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1]).
-export([record_replay_nif/1, record_replay_port/1, record_replay_ehttpd/1,
         replay_helper_modes/1]).

all() -> [record_replay_nif, record_replay_port, record_replay_ehttpd, replay_helper_modes].

suite() -> [{timetrap, {minutes, 2}}].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(cbench),
    Config.

end_per_suite(_Config) ->
    ok.

record_replay_nif(Config) -> record_replay(nif, Config).
record_replay_port(Config) -> record_replay(port, Config).
record_replay_ehttpd(Config) -> record_replay(ehttpd, Config).

%% The requests of the session: {Method, Target, Headers, Body}. Two queries of one path and two
%% `accept' values of another make distinct recordings; the repeated /api/users/42 is one.
session() ->
    [{<<"GET">>, <<"/api/users/42">>, [{<<"accept">>, <<"application/json">>}], <<>>},
     {<<"GET">>, <<"/api/users/42">>, [{<<"accept">>, <<"application/json">>}], <<>>},
     {<<"GET">>, <<"/api/users/42">>, [{<<"accept">>, <<"text/plain">>}], <<>>},
     {<<"GET">>, <<"/api/search?q=erlang&page=1">>, [], <<>>},
     {<<"GET">>, <<"/api/search?q=elixir&page=1">>, [], <<>>},
     %% A value holding `+' once decoded: recorded as %2B, which the loader decodes back to `+'.
     {<<"GET">>, <<"/api/search?q=a%2Bb&page=1">>, [], <<>>},
     %% Not recorded: a HEAD recording would replay its stub's own length (0); the GET's answers it.
     {<<"HEAD">>, <<"/api/users/42">>, [{<<"accept">>, <<"text/plain">>}], <<>>},
     {<<"GET">>, <<"/api/bin">>, [], <<>>},
     {<<"GET">>, <<"/api/stream">>, [], <<>>},
     {<<"POST">>, <<"/api/handled">>, [{<<"content-type">>, <<"text/plain">>}], <<"ping">>},
     {<<"GET">>, <<"/api/missing">>, [], <<>>}].

%% The real service: stubs, a handler and a streamed answer, on a nif server.
real_service() ->
    {ok, Real} = cbench:start_server(nif, #{port => 0}),
    {ok, _} = cbench:stub(Real, <<"/api/users/42">>,
                          #{headers => [{<<"content-type">>, <<"text/plain">>}], body => <<"Joe (42)">>}),
    %% Newer stubs match first: the one with a header matcher after the plain one.
    {ok, _} = cbench:stub(Real, #{path => <<"/api/users/42">>, headers => #{<<"accept">> => <<"application/json">>}},
                          #{headers => [{<<"content-type">>, <<"application/json">>}, {<<"x-real">>, <<"1">>}],
                            body => <<"{\"id\":42,\"name\":\"Joe\"}">>}),
    {ok, _} = cbench:stub(Real, #{path => <<"/api/search">>, query => #{<<"q">> => <<"erlang">>}},
                          #{body => <<"results for erlang">>}),
    {ok, _} = cbench:stub(Real, #{path => <<"/api/search">>, query => #{<<"q">> => <<"elixir">>}},
                          #{status => 203, body => <<"results for elixir">>}),
    %% Matchers are percent-decoded: this one matches the decoded value "a+b".
    {ok, _} = cbench:stub(Real, #{path => <<"/api/search">>, query => #{<<"q">> => <<"a%2Bb">>}},
                          #{body => <<"results for a+b">>}),
    {ok, _} = cbench:stub(Real, <<"/api/bin">>,
                          #{headers => [{<<"content-type">>, <<"application/octet-stream">>}],
                            body => list_to_binary(lists:seq(0, 255))}),
    {ok, _} = cbench:stub(Real, <<"/api/stream">>, #{body => {bytes, 40000}, chunks => {4, 0}}),
    Handler = spawn_link(fun() -> handler_loop() end),
    {ok, _} = cbench:handle(Real, #{path => <<"/api/handled">>, method => <<"POST">>}, Handler, #{}),
    {ok, _} = cbench:stub(Real, <<"/api/missing">>, #{status => 404, body => <<"no such thing">>}),
    {Real, Handler}.

handler_loop() ->
    receive
        {cbench_request, Req} ->
            _ = cbench:reply(Req, 201, [{<<"x-handled">>, <<"yes">>}],
                             [<<"got ">>, maps:get(body, Req, <<>>)]),
            handler_loop();
        stop -> ok
    end.

record_replay(Engine, Config) ->
    Dir = proplists:get_value(priv_dir, Config),
    File = filename:join(Dir, atom_to_list(Engine) ++ "-cassette.json"),
    {Real, Handler} = real_service(),
    {ok, Rec} = cbench:start_server(Engine, #{port => 0}),
    {ok, _} = cbench:stub(Rec, #{path => <<"/*">>, method => any},
                          #{proxy => #{to => cbench:url(Real, <<>>), record => true,
                                       record_headers => [<<"accept">>]}}),
    Recorded = [ask(cbench:port(Rec), R) || R <- session()],
    %% The proxy answered what the real service answers.
    [{200, _, <<"{\"id\":42,\"name\":\"Joe\"}">>} | _] = Recorded,
    ?assertMatch({201, _, <<"got ping">>}, lists:nth(10, Recorded)),
    ?assertMatch({203, _, <<"results for elixir">>}, lists:nth(5, Recorded)),
    ?assertMatch({200, _, <<"results for a+b">>}, lists:nth(6, Recorded)),
    ?assertMatch({200, _, <<>>}, lists:nth(7, Recorded)),
    ?assertEqual(40000, byte_size(element(3, lists:nth(9, Recorded)))),
    %% Nine distinct exchanges (the repeated GET is one, the HEAD is skipped), in the order they came.
    Stubs = cbench:recorded(Rec),
    ?assertEqual(9, length(Stubs)),
    ok = cbench:save_stubs(Rec, File),
    ok = cbench:stop_server(Rec),
    ok = cbench:stop_server(Real),
    Handler ! stop,
    %% Offline: the real service is gone, the file answers.
    {ok, Replay} = cbench:start_server(Engine, #{port => 0}),
    {ok, Ids} = cbench:load_stubs(Replay, File),
    ?assertEqual(9, length(Ids)),
    Replayed = [ask(cbench:port(Replay), R) || R <- session()],
    [?assertEqual({Req, A}, {Req, B}) || {Req, A, B} <- lists:zip3(session(), Recorded, Replayed)],
    ok = cbench:stop_server(Replay).

%% The replay helper: replay mode without a cassette fails and says which file; record mode
%% records through the proxy and saves at stop; replay mode then answers from the file.
replay_helper_modes(Config) ->
    Dir = proplists:get_value(priv_dir, Config),
    {Real, Handler} = real_service(),
    Up = cbench:url(Real, <<>>),
    Opts = #{dir => Dir},
    ?assertMatch({error, {no_recording, _}}, cbench_record:server(helper, Up, Opts)),
    {ok, R1} = cbench_record:server(helper, Up, Opts#{record => true}),
    A = ask(cbench:port(R1), {<<"GET">>, <<"/api/bin">>, [], <<>>}),
    ok = cbench_record:stop(R1),
    ok = cbench:stop_server(Real),
    Handler ! stop,
    {ok, R2} = cbench_record:server(helper, Up, Opts),
    ?assertEqual(A, ask(cbench:port(R2), {<<"GET">>, <<"/api/bin">>, [], <<>>})),
    ok = cbench_record:stop(R2).

%%% A raw HTTP/1.1 client: one connection per request, read to the close.

ask(Port, {Method, Target, Headers, Body}) ->
    {ok, S} = gen_tcp:connect({127, 0, 0, 1}, Port, [binary, {active, false}], 5000),
    Len = case Body of <<>> -> []; _ -> [<<"content-length: ">>, integer_to_binary(byte_size(Body)), <<"\r\n">>] end,
    ok = gen_tcp:send(S, [Method, <<" ">>, Target, <<" HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n">>,
                          [[N, <<": ">>, V, <<"\r\n">>] || {N, V} <- Headers], Len, <<"\r\n">>, Body]),
    Bytes = read_all(S, []),
    ok = gen_tcp:close(S),
    [Head, Rest] = binary:split(Bytes, <<"\r\n\r\n">>),
    [StatusLine | Lines] = binary:split(Head, <<"\r\n">>, [global]),
    <<"HTTP/1.1 ", Code:3/binary, _/binary>> = StatusLine,
    Fields = [list_to_tuple(binary:split(L, <<": ">>)) || L <- Lines],
    Lower = [{string:lowercase(N), V} || {N, V} <- Fields],
    BodyBytes = case lists:keyfind(<<"transfer-encoding">>, 1, Lower) of
                    {_, <<"chunked">>} -> dechunk(Rest, []);
                    false -> Rest
                end,
    Kept = [F || F = {N, _} <- Lower,
                 not lists:member(N, [<<"date">>, <<"content-length">>, <<"transfer-encoding">>,
                                      <<"connection">>])],
    {binary_to_integer(Code), Kept, BodyBytes}.

read_all(S, Acc) ->
    case gen_tcp:recv(S, 0, 5000) of
        {ok, B} -> read_all(S, [Acc | B]);
        {error, closed} -> iolist_to_binary(Acc)
    end.

dechunk(Bin, Acc) ->
    [SizeLine, Rest] = binary:split(Bin, <<"\r\n">>),
    case binary_to_integer(hd(binary:split(SizeLine, <<";">>)), 16) of
        0 -> iolist_to_binary(lists:reverse(Acc));
        N ->
            <<Data:N/binary, "\r\n", More/binary>> = Rest,
            dechunk(More, [Data | Acc])
    end.
