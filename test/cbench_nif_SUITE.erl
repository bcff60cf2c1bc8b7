%%% @doc The nif engine: the shared route-table checks, owner monitoring and the resource.
-module(cbench_nif_SUITE).

-include_lib("stdlib/include/assert.hrl").

-export([all/0, init_per_suite/1, end_per_suite/1]).
-export([owner_killed/1, direct_owner_dies/1, resource_after_stop/1, port_in_use/1, big_calls_dirty/1]).

-include("cbench_routes_cases.hrl").

all() -> cbench_routes:cases() ++ cbench_roadrunner_wire:cases() ++ cbench_stubs:cases() ++ cbench_stubs:h2_cases() ++ [owner_killed, direct_owner_dies, resource_after_stop, port_in_use, big_calls_dirty].

init_per_suite(Config) -> cbench_routes:start(nif, Config).

end_per_suite(Config) -> cbench:stop_server(proplists:get_value(server, Config)).

%% Killing the server's process (the NIF resource's owner) stops the engine: the monitor's down
%% callback hands it to the reaper thread.
owner_killed(_Config) ->
    {ok, S} = cbench:start_server(nif, #{port => 0, threads => 1}),
    P = cbench:port(S),
    {ok, C} = gen_tcp:connect({127, 0, 0, 1}, P, [binary, {active, false}]),
    gen_tcp:close(C),
    exit(S, kill),
    ok = wait_refused(P, 100).

%% The same for a server started directly by a plain process that then dies.
direct_owner_dies(_Config) ->
    Self = self(),
    Owner = spawn(fun() ->
                          {ok, Opts} = cbench_opts:validate(nif, #{port => 0, threads => 1}),
                          {ok, H} = cbench_nif:start(Opts),
                          Self ! {port, cbench_nif:port(H)},
                          receive stop -> ok end
                  end),
    P = receive {port, Port} -> Port after 10000 -> ct:fail(no_port) end,
    {ok, C} = gen_tcp:connect({127, 0, 0, 1}, P, [binary, {active, false}]),
    gen_tcp:close(C),
    exit(Owner, kill),
    ok = wait_refused(P, 100).

%% Stop is idempotent on the resource; stats then says stopped; the port stays known.
resource_after_stop(_Config) ->
    {ok, Opts} = cbench_opts:validate(nif, #{port => 0, threads => 2, cpus => []}),
    {ok, H} = cbench_nif:start(Opts),
    ?assertMatch(#{threads := 2, cpus := [-1, -1]}, cbench_nif:info(H)),
    ?assertMatch(#{requests := 0}, cbench_nif:stats(H)),
    P = cbench_nif:port(H),
    ok = cbench_nif:stop(H),
    ok = cbench_nif:stop(H),
    ?assertEqual({error, stopped}, cbench_nif:stats(H)),
    ?assertEqual(P, cbench_nif:port(H)),
    ?assertError(badarg, cbench_nif:stop(make_ref())),
    ?assertMatch({error, {bad_option, bogus, 1, {known, [host | _]}}},
                 cbench_nif:start_nif(#{bogus => 1})),
    ?assertEqual({error, {bad_option, port, -1, {integer, 0, 65535}}},
                 cbench_nif:start_nif(#{port => -1})),
    ?assertError(badarg, cbench_nif:start_nif(not_a_map)),
    ?assertError(badarg, cbench_nif:stats_nif(<<>>)),
    ok.

%% The engine's own errors come back as {error, Atom}.
port_in_use(_Config) ->
    {ok, S} = cbench:start_server(nif, #{port => 0, threads => 1}),
    P = cbench:port(S),
    ?assertEqual({error, eaddrinuse}, cbench:start_server(nif, #{port => P})),
    ?assertEqual({error, eaddrinuse}, cbench:start_server(port, #{port => P})),
    ?assertEqual({error, eaddrinuse}, cbench:start_server(ehttpd, #{port => P})),
    ok = cbench:stop_server(S).

%% The calls whose work grows with their input run on a dirty CPU scheduler when big (docs/erlang.md):
%% the stub list of 100,000 stubs (always dirty), and reply calls over 256 KiB or 256 answers, which
%% cbench_nif:dirty_replies_nif/0 counts, while a small reply stays on the normal scheduler (not
%% counted). Each answer is checked byte for byte.
big_calls_dirty(_Config) ->
    {ok, S} = cbench:start_server(nif, #{port => 0, threads => 1}),
    File = filename:join(filename:basedir(user_cache, "cbench_nif_SUITE"), "stubs.json"),
    ok = filelib:ensure_dir(File),
    N = 100000,
    Stubs = lists:join(<<",\n">>, [[<<"{\"match\": {\"path\": \"/s">>, integer_to_binary(I),
                                   <<"\"}, \"response\": {\"status\": 200}}">>] || I <- lists:seq(1, N)]),
    ok = file:write_file(File, [<<"[">>, Stubs, <<"]">>]),
    {ok, Ids} = cbench:load_stubs(S, File),
    ?assertEqual(N, length(Ids)),
    Listed = cbench:stubs(S),
    ?assertEqual(N, length(Listed)),
    ?assertEqual(Ids, [Id || #{id := Id} <- Listed]),
    ?assertEqual([<<"stub_1">>, <<"stub_100000">>],
                 [Name || #{name := Name} <- [hd(Listed), lists:last(Listed)]]),
    ok = cbench:reset(S), %% room for the handler's route (100,000 routes at most)
    {ok, _} = cbench:handle(S, "/h", self(), #{}),
    Port = cbench:port(S),
    Big = << <<(I rem 251)>> || I <- lists:seq(1, 32 bsl 20) >>,
    Pieces = [<<I:8192>> || I <- lists:seq(1, 300)], %% an iolist of 300 KiB
    Edge = binary:copy(<<"e">>, 256 bsl 10), %% 256 KiB: the most that stays
    Cases = [{<<"small">>, 0}, {Big, 1}, {Pieces, 1}, {Edge, 0}, {[Edge, $+], 1}, {<<"x">>, 0}],
    [begin
         D0 = cbench_nif:dirty_replies_nif(),
         {ok, Sock} = gen_tcp:connect({127, 0, 0, 1}, Port, [binary, {active, false}]),
         ok = gen_tcp:send(Sock, <<"GET /h HTTP/1.1\r\nhost: x\r\n\r\n">>),
         R = receive {cbench_request, Req} -> Req after 10000 -> error(no_request) end,
         ok = cbench:reply(R, 200, [], Body),
         Want = iolist_to_binary(Body),
         {ok, Got, <<>>} = read_body(Sock, <<>>),
         gen_tcp:close(Sock),
         ?assertEqual({byte_size(Want), erlang:md5(Want)}, {byte_size(Got), erlang:md5(Got)}),
         ?assertEqual({byte_size(Want), Dirty}, {byte_size(Want), cbench_nif:dirty_replies_nif() - D0})
     end || {Body, Dirty} <- Cases],
    %% 300 small answers in one replies/1: one dirty call; 256 stay.
    [begin
         D0 = cbench_nif:dirty_replies_nif(),
         Socks = [begin
                      {ok, Sock} = gen_tcp:connect({127, 0, 0, 1}, Port, [binary, {active, false}]),
                      ok = gen_tcp:send(Sock, <<"GET /h HTTP/1.1\r\nhost: x\r\n\r\n">>),
                      Sock
                  end || _ <- lists:seq(1, Count)],
         Reqs = [receive {cbench_request, Req} -> Req after 10000 -> error(no_request) end
                 || _ <- lists:seq(1, Count)],
         ?assertEqual(lists:duplicate(Count, ok), cbench:replies([{R, 200, [], <<"r">>} || R <- Reqs])),
         [{ok, <<"r">>, <<>>} = read_body(Sock, <<>>) || Sock <- Socks],
         [gen_tcp:close(Sock) || Sock <- Socks],
         ?assertEqual({Count, Dirty}, {Count, cbench_nif:dirty_replies_nif() - D0})
     end || {Count, Dirty} <- [{256, 0}, {300, 1}]],
    ok = cbench:stop_server(S).

%% The body of one content-length response, and the bytes read after it.
read_body(Sock, Buf) ->
    case binary:split(Buf, <<"\r\n\r\n">>) of
        [Head, Rest] ->
            {match, [Len]} = re:run(string:lowercase(Head), "\r\ncontent-length: *([0-9]+)",
                                    [{capture, all_but_first, binary}]),
            read_n(Sock, Rest, binary_to_integer(Len));
        [_] ->
            {ok, More} = gen_tcp:recv(Sock, 0, 10000),
            read_body(Sock, <<Buf/binary, More/binary>>)
    end.

read_n(_Sock, Buf, Len) when byte_size(Buf) >= Len ->
    <<Body:Len/binary, Rest/binary>> = Buf,
    {ok, Body, Rest};
read_n(Sock, Buf, Len) ->
    {ok, More} = gen_tcp:recv(Sock, 0, 10000),
    read_n(Sock, <<Buf/binary, More/binary>>, Len).

wait_refused(_P, 0) -> {error, still_listening};
wait_refused(P, N) ->
    case gen_tcp:connect({127, 0, 0, 1}, P, [binary, {active, false}], 1000) of
        {error, econnrefused} -> ok;
        {ok, C} -> gen_tcp:close(C), timer:sleep(50), wait_refused(P, N - 1);
        {error, _} -> timer:sleep(50), wait_refused(P, N - 1)
    end.
