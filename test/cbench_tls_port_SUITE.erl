%%% @doc A TLS listener beside the cleartext one (`tls_port', issue 24) on the C engines, nif and
%%% port: cbench:tls_port/1 and cbench:tls_url/2, both ports served, cbench:down/1 and up/1 close
%%% and open both, the bound on handshakes in progress (`tls_max_handshakes') with exact counts of
%%% refused and failed handshakes, kernel TLS reported in the server's info (and why not), and the options' bad
%%% values. The TLS client is OTP `ssl' over the made certificate (not verified here: the certificate
%%% and its CA are cbench:tls/1's, tested with it).
-module(cbench_tls_port_SUITE).

-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, init_per_suite/1, end_per_suite/1, init_per_group/2, end_per_group/2]).
-export([both_ports/1, down_up_both/1, handshakes_bounded/1, no_tls/1, bad_options/1, ehttpd/1]).

all() -> [{group, nif}, {group, port}, bad_options, ehttpd].

groups() ->
    Cases = [both_ports, down_up_both, handshakes_bounded, no_tls],
    [{nif, [], Cases}, {port, [], Cases}].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(ssl),
    {ok, _} = application:ensure_all_started(cbench),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_group(Engine, Config) -> [{engine, Engine} | Config].

end_per_group(_, _Config) -> ok.

start(Config, Opts) ->
    {ok, S} = cbench:start_server(proplists:get_value(engine, Config), Opts#{port => 0, threads => 1}),
    S.

%% GET /hello over TLS on port P: the status line and body.
tls_hello(P) ->
    {ok, C} = ssl:connect("localhost", P, [binary, {active, false}, {verify, verify_none},
                                           {alpn_advertised_protocols, [<<"http/1.1">>]}], 10000),
    ok = ssl:send(C, <<"GET /hello HTTP/1.1\r\nhost: localhost\r\n\r\n">>),
    R = recv_until(fun(B) -> binary:match(B, <<"Hello, Joe!">>) =/= nomatch end,
                   fun(T) -> ssl:recv(C, 0, T) end, <<>>),
    ssl:close(C),
    R.

tcp_hello(P) ->
    {ok, C} = gen_tcp:connect({127, 0, 0, 1}, P, [binary, {active, false}]),
    ok = gen_tcp:send(C, <<"GET /hello HTTP/1.1\r\nhost: x\r\n\r\n">>),
    R = recv_until(fun(B) -> binary:match(B, <<"Hello, Joe!">>) =/= nomatch end,
                   fun(T) -> gen_tcp:recv(C, 0, T) end, <<>>),
    gen_tcp:close(C),
    R.

recv_until(Done, Recv, Acc) ->
    case Done(Acc) of
        true -> hello(Acc);
        false ->
            case Recv(10000) of
                {ok, B} -> recv_until(Done, Recv, <<Acc/binary, B/binary>>);
                Error -> Error
            end
    end.

hello(<<"HTTP/1.1 200 OK\r\n", _/binary>> = B) ->
    [_, Body] = binary:split(B, <<"\r\n\r\n">>),
    {200, Body};
hello(B) ->
    {unexpected, B}.

%% Waits until the server has closed C (a refused or failed handshake): closed, and nothing came.
closed(C) ->
    ?assertMatch({error, E} when E =:= closed; E =:= econnreset, gen_tcp:recv(C, 0, 10000)),
    gen_tcp:close(C).

wait_stats(S, Pred) -> wait_stats(S, Pred, 200).
wait_stats(S, _Pred, 0) -> cbench:stats(S);
wait_stats(S, Pred, N) ->
    St = cbench:stats(S),
    case Pred(St) of
        true -> St;
        false -> timer:sleep(50), wait_stats(S, Pred, N - 1)
    end.

refused(Port) ->
    ?assertEqual({error, econnrefused}, gen_tcp:connect({127, 0, 0, 1}, Port, [binary])).

%% Whether this kernel offers the tls ULP, as the engine reads it.
kernel_ktls() ->
    case file:read_file("/proc/sys/net/ipv4/tcp_available_ulp") of
        {ok, B} -> lists:member(<<"tls">>, binary:split(B, [<<" ">>, <<"\n">>], [global]));
        _ -> false
    end.

%% @doc tls_port => 0: an ephemeral TLS port beside the cleartext one, both served; tls_url/2
%% names localhost (the made certificate's name); info says whether kernel TLS is tried.
both_ports(Config) ->
    S = start(Config, #{tls_port => 0}),
    P = cbench:port(S),
    T = cbench:tls_port(S),
    ?assert(is_integer(T) andalso T > 0 andalso T =/= P),
    ?assertEqual("https://localhost:" ++ integer_to_list(T) ++ "/hello", cbench:tls_url(S, "/hello")),
    ?assertEqual("https://localhost:" ++ integer_to_list(T) ++ "/hello", cbench:tls_url(S, "hello")),
    ?assertEqual(list_to_binary("https://localhost:" ++ integer_to_list(T)), cbench:tls_url(S, <<>>)),
    ?assertEqual({200, <<"Hello, Joe!">>}, tcp_hello(P)),
    ?assertEqual({200, <<"Hello, Joe!">>}, tls_hello(T)),
    ?assertEqual({200, <<"Hello, Joe!">>}, tls_hello(T)),
    {ok, Info} = {ok, cbench_server:call(S, info)},
    ?assertMatch(#{tls_port := T}, Info),
    case kernel_ktls() of
        true -> ?assertMatch(#{ktls := true}, Info);
        false -> ?assertMatch(#{ktls := false,
                                ktls_why := <<"the kernel offers no tls ULP (/proc/sys/net/ipv4/"
                                              "tcp_available_ulp does not list tls: modprobe tls)">>}, Info)
    end,
    St = wait_stats(S, fun(#{conns_closed := C}) -> C >= 3 end),
    ?assertMatch(#{requests := 3, tls_handshakes_failed := 0, tls_handshakes_refused := 0,
                   tls_ktls := 0}, St),
    %% Cleartext on the TLS port: a failed handshake, closed.
    {ok, C} = gen_tcp:connect({127, 0, 0, 1}, T, [binary, {active, false}]),
    ok = gen_tcp:send(C, <<"GET /hello HTTP/1.1\r\nhost: x\r\n\r\n">>),
    closed(C), %% no HTTP answer, no record (OpenSSL sends no alert to bytes that are no record)
    St2 = wait_stats(S, fun(#{tls_handshakes_failed := F}) -> F >= 1 end),
    ?assertMatch(#{requests := 3, tls_handshakes_failed := 1, tls_handshakes_refused := 0}, St2),
    ok = cbench:stop_server(S).

%% @doc down/1 closes both listeners, up/1 opens both on the same ports.
down_up_both(Config) ->
    S = start(Config, #{tls_port => 0}),
    P = cbench:port(S),
    T = cbench:tls_port(S),
    ok = cbench:down(S),
    refused(P),
    refused(T),
    ok = cbench:up(S),
    ?assertEqual(T, cbench:tls_port(S)),
    ?assertEqual({200, <<"Hello, Joe!">>}, tcp_hello(P)),
    ?assertEqual({200, <<"Hello, Joe!">>}, tls_hello(T)),
    ok = cbench:stop_server(S).

%% @doc tls_max_handshakes => 2: two clients that send nothing hold both; the next TLS connection
%% is closed at once and counted; the cleartext port is served meanwhile; the holders' closes are
%% failed handshakes, and a TLS client is served again.
handshakes_bounded(Config) ->
    S = start(Config, #{tls_port => 0, tls_max_handshakes => 2}),
    P = cbench:port(S),
    T = cbench:tls_port(S),
    Hold = [begin
                {ok, H} = gen_tcp:connect({127, 0, 0, 1}, T, [binary, {active, false}]),
                H
            end || _ <- [1, 2]],
    wait_stats(S, fun(#{conns_accepted := A}) -> A >= 2 end),
    {ok, C} = gen_tcp:connect({127, 0, 0, 1}, T, [binary, {active, false}]),
    closed(C),
    ?assertEqual({200, <<"Hello, Joe!">>}, tcp_hello(P)),
    ?assertMatch(#{tls_handshakes_refused := 1, tls_handshakes_failed := 0, conns_accepted := 3},
                 wait_stats(S, fun(#{tls_handshakes_refused := R}) -> R >= 1 end)),
    [gen_tcp:close(H) || H <- Hold],
    ?assertMatch(#{tls_handshakes_refused := 1, tls_handshakes_failed := 2},
                 wait_stats(S, fun(#{tls_handshakes_failed := F}) -> F >= 2 end)),
    ?assertEqual({200, <<"Hello, Joe!">>}, tls_hello(T)),
    ok = cbench:stop_server(S).

%% @doc Without tls_port (and without tls) there is no TLS port.
no_tls(Config) ->
    S = start(Config, #{}),
    ?assertEqual(undefined, cbench:tls_port(S)),
    ?assertEqual({error, no_tls}, cbench:tls_url(S, "/hello")),
    ?assertEqual(false, maps:is_key(tls_port, cbench_server:call(S, info))),
    ok = cbench:stop_server(S).

%% @doc Bad values name the option and what it takes, the same on nif and port; tls_port and
%% tls_max_handshakes are options of the C engines.
bad_options(_Config) ->
    [begin
         ?assertEqual({error, {bad_option, tls_port, 65536, {integer, 0, 65535}}},
                      cbench:start_server(E, #{port => 0, tls_port => 65536})),
         ?assertEqual({error, {bad_option, tls_port, -1, {integer, 0, 65535}}},
                      cbench:start_server(E, #{port => 0, tls_port => -1})),
         ?assertEqual({error, {bad_option, tls_max_handshakes, 0, {integer, 1, 65535}}},
                      cbench:start_server(E, #{port => 0, tls_max_handshakes => 0}))
     end || E <- [nif, port]],
    ?assertError(badarg, cbench:tls_port(not_a_pid)),
    ?assertError(badarg, cbench:tls_url(self(), [1000])).

%% @doc The ehttpd engine has no TLS listener here: the option is refused, tls_port/1 is undefined.
ehttpd(_Config) ->
    %% tls_port alone turns TLS on, as on the C engines: both ports served.
    {ok, B} = cbench:start_server(ehttpd, #{port => 0, tls_port => 0}),
    T = cbench:tls_port(B),
    ?assert(is_integer(T) andalso T > 0 andalso T =/= cbench:port(B)),
    ?assertEqual("https://localhost:" ++ integer_to_list(T) ++ "/hello", cbench:tls_url(B, "/hello")),
    ?assertEqual({200, <<"Hello, Joe!">>}, tcp_hello(cbench:port(B))),
    ?assertEqual({200, <<"Hello, Joe!">>}, tls_hello(T)),
    ok = cbench:stop_server(B),
    {ok, S} = cbench:start_server(ehttpd, #{port => 0}),
    ?assertEqual(undefined, cbench:tls_port(S)),
    ?assertEqual({error, no_tls}, cbench:tls_url(S, "/")),
    ok = cbench:stop_server(S).
