%%% @doc The ehttpd engine over OTP `ssl' (docs/tls.md, "ehttpd"): routes, stubs and faults over
%%% https, the journal's `h1_tls' and TLS map, every bad-certificate scenario with the exact error
%%% of an `ssl' client (and curl's exit code and message, when curl is installed), client
%%% certificates, resumption counted, the TLS port beside the cleartext one, and the handshake's
%%% bounds: a client that stalls it holds no acceptor, and pending handshakes are limited.
-module(cbench_ehttpd_tls_SUITE).

-include_lib("stdlib/include/assert.hrl").

-export([all/0, init_per_suite/1, end_per_suite/1]).
-export([https_routes/1, journal_tls/1, sni_scenarios/1, client_auth_none/1,
         client_auth_request/1, client_auth_require/1, resumption/1, stalled_handshake/1,
         pending_bound/1, tls_port_beside/1, options/1, user_cert/1, down_up/1, curl/1,
         handler_and_wss/1]).

all() ->
    [https_routes, journal_tls, sni_scenarios, client_auth_none, client_auth_request,
     client_auth_require, resumption, stalled_handshake, pending_bound, tls_port_beside, options,
     user_cert, down_up, curl, handler_and_wss].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(ssl),
    {ok, _} = application:ensure_all_started(inets),
    {ok, _} = application:ensure_all_started(cbench),
    Config.

end_per_suite(_Config) -> ok.

%% The options of docs/tls.md for an `ssl' client of server S, naming Sni.
client_opts(S, Sni) ->
    cbench:client_tls_opts(S, #{sni => Sni}).

connect(S, Sni, Extra) ->
    ssl:connect("localhost", cbench:tls_port(S),
                [binary, {active, false} | Extra ++ client_opts(S, Sni)], 10000).

%% A whole answer read until the server closes (the request asked for `connection: close').
get(C, Path) ->
    ok = ssl:send(C, ["GET ", Path, " HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n"]),
    read_all(C, <<>>).

read_all(C, Acc) ->
    case ssl:recv(C, 0, 10000) of
        {ok, B} -> read_all(C, <<Acc/binary, B/binary>>);
        {error, closed} -> Acc;
        {error, E} -> {error, E, Acc}
    end.

body(Answer) ->
    [_, Body] = binary:split(Answer, <<"\r\n\r\n">>),
    Body.

httpc(S, Method, Path, Body) ->
    Profile = list_to_atom("tls_" ++ integer_to_list(erlang:unique_integer([positive]))),
    {ok, Pid} = inets:start(httpc, [{profile, Profile}], stand_alone),
    %% Stopped below; its exit must not reach the test process.
    unlink(Pid),
    Url = cbench:tls_url(S, Path),
    Req = case Method of
              get -> {Url, []};
              post -> {Url, [], "application/octet-stream", Body}
          end,
    try httpc:request(Method, Req, [{ssl, client_opts(S, "localhost")}, {timeout, 10000}],
                      [{body_format, binary}], Pid)
    after inets:stop(stand_alone, Pid)
    end.

%% httpc over https: a fixture route, the echo, a stub, a stub's fault and a route's fault.
https_routes(_Config) ->
    {ok, S} = cbench:start_server(ehttpd, #{tls => true, threads => 1}),
    ?assertEqual(cbench:port(S), cbench:tls_port(S)),
    ?assertMatch({ok, {{_, 200, _}, _, <<"Hello, Joe!">>}}, httpc(S, get, "/hello", <<>>)),
    Big = binary:copy(<<"0123456789">>, 10000),
    ?assertMatch({ok, {{_, 200, _}, _, Big}}, httpc(S, post, "/echo", Big)),
    {ok, _} = cbench:stub(S, "/tls-stub", #{status => 201, body => <<"stubbed">>}),
    ?assertMatch({ok, {{_, 201, _}, _, <<"stubbed">>}}, httpc(S, get, "/tls-stub", <<>>)),
    %% A file route: read and encrypted here (no sendfile over TLS), the same bytes.
    {ok, {{_, 200, _}, _, Small}} = httpc(S, get, "/file/small", <<>>),
    ?assertEqual(cbench_fixture:size(file_small), byte_size(Small)),
    %% A stub's fault: the connection closed without a byte of answer (close_notify, then FIN).
    {ok, _} = cbench:stub(S, "/tls-empty", #{fault => <<"empty">>}),
    {ok, C1} = connect(S, "localhost", []),
    ?assertEqual(<<>>, get(C1, "/tls-empty")),
    %% A route's fault: the head with content-length 100, 10 body bytes, then the close.
    {ok, C2} = connect(S, "localhost", []),
    A = get(C2, "/fault/truncated?length=100&bytes=10"),
    ?assertMatch({_, _}, binary:match(A, <<"content-length: 100\r\n">>)),
    ?assertEqual(iolist_to_binary(cbench_fixture:bytes(0, 10)), body(A)),
    %% The TLS fault kinds act over TLS, as on the C engine (cbench_tls_fault_SUITE has their table):
    %% 10 body bytes of 100, then the FIN without close_notify, which httpc reports as a short body.
    ?assertEqual({error, {shutdown, server_closed}},
                 httpc(S, get, "/fault/tls_truncate?length=100&bytes=10", <<>>)),
    #{faults := 3, tls_handshakes_full := 7, tls_handshakes_failed := 0} = cbench:stats(S),
    ok = cbench:stop_server(S).

%% The journal of a request over TLS: proto h1_tls and the TLS map (docs/tls.md).
journal_tls(_Config) ->
    {ok, S} = cbench:start_server(ehttpd, #{tls => true, threads => 1}),
    {ok, C} = connect(S, "localhost", [{alpn_advertised_protocols, [<<"h2">>, <<"http/1.1">>]}]),
    ?assertEqual({ok, <<"http/1.1">>}, ssl:negotiated_protocol(C)),
    {ok, [{protocol, V}, {selected_cipher_suite, Suite}]} =
        ssl:connection_information(C, [protocol, selected_cipher_suite]),
    ?assertEqual(<<"Hello, Joe!">>, body(get(C, "/hello"))),
    %% ALPN: HTTP/1.1 only; a client that offers only h2 is refused.
    ?assertMatch({error, {tls_alert, {no_application_protocol, _}}},
                 connect(S, "localhost", [{alpn_advertised_protocols, [<<"h2">>]}])),
    [E] = cbench:requests(S),
    ?assertMatch(#{proto := h1_tls, path := <<"/hello">>, status := 200}, E),
    ?assertEqual('tlsv1.3', V),
    ?assertEqual(#{version => <<"TLSv1.3">>,
                   cipher => list_to_binary(ssl:suite_to_openssl_str(Suite)),
                   sni => <<"localhost">>, alpn => <<"http/1.1">>, resumed => false,
                   client_cert => undefined}, maps:get(tls, E)),
    %% TLS 1.2, without SNI (an IP) or ALPN.
    {ok, C2} = ssl:connect({127, 0, 0, 1}, cbench:tls_port(S),
                           [binary, {active, false}, {versions, ['tlsv1.2']},
                            {server_name_indication, disable},
                            {cacerts, [maps:get(ca_der, cbench:tls(S))]}, {verify, verify_peer}],
                           10000),
    ?assertEqual(<<"Hello, Joe!">>, body(get(C2, "/hello"))),
    [_, E2] = cbench:requests(S),
    ?assertMatch(#{version := <<"TLSv1.2">>, sni := undefined, alpn := undefined,
                   resumed := false}, maps:get(tls, E2)),
    ok = cbench:stop_server(S).

%% Every bad-certificate scenario of docs/tls.md, by SNI: the exact error of an `ssl' client that
%% trusts the server's CA and checks the host name (the same leaves, the same flaws, as the C
%% engine's). OTP `ssl' has no floor on RSA key sizes: weak-key.localhost is accepted.
sni_scenarios(_Config) ->
    {ok, S} = cbench:start_server(ehttpd, #{tls => true, threads => 1}),
    Expected = [{"localhost", ok},
                {"expired.localhost", certificate_expired},
                {"not-yet-valid.localhost", certificate_expired},
                {"wrong-host.localhost", handshake_failure},
                {"self-signed.localhost", bad_certificate},
                {"untrusted-root.localhost", unknown_ca},
                {"missing-intermediate.localhost", unknown_ca},
                {"weak-key.localhost", ok},
                {"other.localhost", handshake_failure}],
    Seen = [{Name, case connect(S, Name, []) of
                       {ok, C} -> ssl:close(C), ok;
                       {error, {tls_alert, {Alert, Text}}} -> ct:log("~s: ~s", [Name, Text]), Alert
                   end} || {Name, _} <- Expected],
    ?assertEqual(Expected, Seen),
    %% The host name check is what fails for wrong-host (and for a name without a leaf).
    {error, {tls_alert, {handshake_failure, Why}}} = connect(S, "wrong-host.localhost", []),
    ?assertNotEqual(nomatch, string:find(Why, "hostname_check_failed")),
    %% The weak leaf is the RSA-1024 one.
    {ok, C} = connect(S, "weak-key.localhost", []),
    {ok, Der} = ssl:peercert(C),
    {'OTPCertificate', Tbs, _, _} = public_key:pkix_decode_cert(Der, otp),
    {'OTPSubjectPublicKeyInfo', _, {'RSAPublicKey', N, _}} = element(8, Tbs),
    ?assertEqual(1024, bit_size(binary:encode_unsigned(N))),
    ok = cbench:stop_server(S).

%% client_auth => none: no certificate is asked for, so none is recorded even when the client has one.
client_auth_none(_Config) ->
    {ok, S} = cbench:start_server(ehttpd, #{tls => true, threads => 1}),
    #{cert_der := Der, key := Key} = cbench:client_cert(S, #{cn => <<"alice">>}),
    {ok, C} = connect(S, "localhost", [{cert, Der}, {key, Key}]),
    ?assertEqual(<<"Hello, Joe!">>, body(get(C, "/hello"))),
    [#{tls := #{client_cert := undefined}}] = cbench:requests(S),
    ok = cbench:stop_server(S).

%% client_auth => request: a client without a certificate is served; one with a certificate of
%% the client CA is recorded (subject, SHA-256); one of another CA is refused.
client_auth_request(_Config) ->
    {ok, S} = cbench:start_server(ehttpd, #{tls => true, threads => 1, client_auth => request}),
    {ok, C1} = connect(S, "localhost", []),
    ?assertEqual(<<"Hello, Joe!">>, body(get(C1, "/hello"))),
    Cert = #{cert_der := Der, key := Key, subject := Subject, sha256 := Sha} =
        cbench:client_cert(S, #{cn => <<"alice">>}),
    ?assertEqual(<<"CN=alice">>, Subject),
    ?assertEqual(64, byte_size(Sha)),
    ?assertEqual(Sha, list_to_binary(io_lib:format("~64.16.0b",
                                                   [binary:decode_unsigned(crypto:hash(sha256, Der))]))),
    ?assertMatch([{'Certificate', _, not_encrypted}], public_key:pem_decode(maps:get(cert_pem, Cert))),
    {ok, C2} = connect(S, "localhost", [{cert, Der}, {key, Key}]),
    ?assertEqual(<<"Hello, Joe!">>, body(get(C2, "/hello"))),
    [#{tls := #{client_cert := undefined}}, #{tls := #{client_cert := CC}}] = cbench:requests(S),
    ?assertEqual(#{subject => <<"CN=alice">>, sha256 => Sha}, CC),
    %% A certificate of another server's client CA: the handshake fails.
    {ok, Other} = cbench:start_server(ehttpd, #{tls => true, threads => 1}),
    #{cert_der := ODer, key := OKey} = cbench:client_cert(Other, #{cn => <<"mallory">>}),
    ok = cbench:stop_server(Other),
    ?assertMatch({error, {tls_alert, {unknown_ca, _}}}, first_read(S, [{cert, ODer}, {key, OKey}])),
    ?assertEqual({error, {bad_client_cert, {cn, <<>>, empty}}}, cbench:client_cert(S, #{cn => <<>>})),
    ?assertEqual({error, {bad_client_cert, {cn, <<"a\nb">>, control_character}}},
                 cbench:client_cert(S, #{cn => <<"a\nb">>})),
    ok = cbench:stop_server(S).

%% client_auth => require: a client without a certificate is refused; with one, served.
client_auth_require(_Config) ->
    {ok, S} = cbench:start_server(ehttpd, #{tls => true, threads => 1, client_auth => require}),
    ?assertMatch({error, {tls_alert, {certificate_required, _}}}, first_read(S, [])),
    #{cert_der := Der, key := Key} = cbench:client_cert(S, #{cn => <<"bob">>}),
    {ok, C} = connect(S, "localhost", [{cert, Der}, {key, Key}]),
    ?assertEqual(<<"Hello, Joe!">>, body(get(C, "/hello"))),
    [#{tls := #{client_cert := #{subject := <<"CN=bob">>}}}] = cbench:requests(S),
    #{tls_handshakes_failed := 1, tls_handshakes_full := 1} = cbench:stats(S),
    ok = cbench:stop_server(S).

%% In TLS 1.3 the client's handshake ends before the server has checked its certificate: the
%% server's alert comes after the client's connect returned. The client is in active mode from
%% the start, so the alert is delivered as a message whenever it arrives.
first_read(S, Extra) ->
    case ssl:connect("localhost", cbench:tls_port(S),
                     [binary, {active, once} | Extra ++ client_opts(S, "localhost")], 10000) of
        {ok, C} ->
            receive
                {ssl_error, C, Error} -> {error, Error};
                {ssl_closed, C} -> {error, closed};
                {ssl, C, Data} -> {ok, Data}
            after 10000 -> {error, timeout}
            end;
        Error -> Error
    end.

%% A client that keeps its session (TLS 1.3 tickets, then a TLS 1.2 session id) resumes it, and
%% the counters and the journal say so.
resumption(_Config) ->
    {ok, S} = cbench:start_server(ehttpd, #{tls => true, threads => 1}),
    Tickets = [{session_tickets, auto}, {versions, ['tlsv1.3']}],
    {ok, C1} = connect(S, "localhost", Tickets),
    %% The ticket arrives after the handshake; the answer is read after it.
    <<"Hello, Joe!">> = body(get(C1, "/hello")),
    {ok, C2} = connect(S, "localhost", Tickets),
    <<"Hello, Joe!">> = body(get(C2, "/hello")),
    %% TLS 1.2: the first session is saved (`save' waits for it), the next connection offers it.
    {ok, C3} = connect(S, "localhost", [{versions, ['tlsv1.2']}, {reuse_sessions, save}]),
    <<"Hello, Joe!">> = body(get(C3, "/hello")),
    {ok, C4} = connect(S, "localhost", [{versions, ['tlsv1.2']}, {reuse_sessions, true}]),
    <<"Hello, Joe!">> = body(get(C4, "/hello")),
    ?assertEqual([false, true, false, true],
                 [R || #{tls := #{resumed := R}} <- cbench:requests(S)]),
    ?assertMatch(#{tls_handshakes_full := 2, tls_handshakes_resumed := 2}, cbench:stats(S)),
    ok = cbench:stop_server(S).

%% A client that connects and stalls the handshake (one that sends nothing, and one that sends a
%% record header and no more) holds no acceptor: with one acceptor, another client is served
%% meanwhile. The stalled ones are closed after the header timeout and counted as failed.
stalled_handshake(_Config) ->
    {ok, S} = cbench:start_server(ehttpd, #{tls => true, threads => 1, header_timeout_ms => 1500}),
    {ok, Silent} = gen_tcp:connect({127, 0, 0, 1}, cbench:port(S), [binary, {active, false}]),
    {ok, Partial} = gen_tcp:connect({127, 0, 0, 1}, cbench:port(S), [binary, {active, false}]),
    ok = gen_tcp:send(Partial, <<22, 3, 1, 0, 200>>),
    {ok, C} = connect(S, "localhost", []),
    ?assertEqual(<<"Hello, Joe!">>, body(get(C, "/hello"))),
    ?assertEqual({error, closed}, gen_tcp:recv(Partial, 0, 10000)),
    %% The silent one: accepted by the kernel only when the defer-accept wait ends; then the same.
    ?assertEqual({error, closed}, gen_tcp:recv(Silent, 0, 15000)),
    %% ssl closes the socket before ssl:handshake/2 returns its timeout, so the count follows.
    ok = wait(fun() -> maps:get(tls_handshakes_failed, cbench:stats(S)) >= 2 end, 5000),
    ?assertMatch(#{tls_handshakes_failed := 2, tls_handshakes_full := 1}, cbench:stats(S)),
    ok = cbench:stop_server(S).

%% tls_max_handshakes: over that many handshakes under way (per acceptor), a new connection is
%% closed at once and counted refused; once the stalled one is gone, clients are served again.
pending_bound(_Config) ->
    {ok, S} = cbench:start_server(ehttpd, #{tls => true, threads => 1, tls_max_handshakes => 1,
                                            header_timeout_ms => 2000}),
    {ok, Stalled} = gen_tcp:connect({127, 0, 0, 1}, cbench:port(S), [binary, {active, false}]),
    ok = gen_tcp:send(Stalled, <<22, 3, 1, 0, 200>>),
    %% The stalled connection is accepted once its bytes are in; wait until it is.
    ok = wait(fun() -> maps:get(conns_accepted, cbench:stats(S)) =:= 1 end, 5000),
    ?assertMatch({error, _}, connect(S, "localhost", [])),
    ?assertMatch(#{tls_handshakes_refused := 1}, cbench:stats(S)),
    ?assertEqual({error, closed}, gen_tcp:recv(Stalled, 0, 10000)),
    ok = wait(fun() -> maps:get(tls_handshakes_failed, cbench:stats(S)) >= 1 end, 5000),
    {ok, C} = connect(S, "localhost", []),
    ?assertEqual(<<"Hello, Joe!">>, body(get(C, "/hello"))),
    ?assertMatch(#{tls_handshakes_refused := 1, tls_handshakes_failed := 1,
                   tls_handshakes_full := 1}, cbench:stats(S)),
    ok = cbench:stop_server(S).

%% Waits up to Ms (wall clock) for F() to hold.
wait(F, Ms) -> wait_until(F, erlang:monotonic_time(millisecond) + Ms).

wait_until(F, Deadline) ->
    case F() of
        true -> ok;
        false ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true -> error(timeout);
                false -> receive after 20 -> wait_until(F, Deadline) end
            end
    end.

%% tls_port: a TLS listener beside the cleartext port; the journal and the per-protocol counters
%% tell them apart.
tls_port_beside(_Config) ->
    {ok, S} = cbench:start_server(ehttpd, #{tls => true, tls_port => 0, threads => 1}),
    TlsPort = cbench:tls_port(S),
    ?assert(is_integer(TlsPort) andalso TlsPort =/= cbench:port(S)),
    ?assertEqual("https://localhost:" ++ integer_to_list(TlsPort) ++ "/hello",
                 cbench:tls_url(S, "/hello")),
    {ok, T} = gen_tcp:connect({127, 0, 0, 1}, cbench:port(S), [binary, {active, false}]),
    ok = gen_tcp:send(T, <<"GET /hello HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n">>),
    {ok, Plain} = gen_tcp:recv(T, 0, 10000),
    ?assertEqual(<<"Hello, Joe!">>, body(Plain)),
    {ok, C} = connect(S, "localhost", []),
    ?assertEqual(<<"Hello, Joe!">>, body(get(C, "/hello"))),
    [#{proto := http1, tls := undefined}, #{proto := h1_tls, tls := #{version := _}}] =
        cbench:requests(S),
    #{conns_by_proto := #{http1 := 1, h1_tls := 1}, requests_by_proto := #{http1 := 1, h1_tls := 1}} =
        cbench:stats(S),
    %% A keep-alive TLS connection the client closes first: its session process ends before the
    %% connection's, and the bytes taken after its last request are counted. The close is seen at
    %% once (the TLS listener has no exit_on_close false, which hid it: docs/tls.md).
    ok = ssl:close(C),
    try wait(fun() -> maps:get(conns_closed, cbench:stats(S)) =:= 2 end, 10000)
    catch error:timeout -> ct:fail({not_closed, cbench:stats(S)})
    end,
    #{bytes_read := R0} = cbench:stats(S),
    {ok, K} = connect(S, "localhost", []),
    ok = ssl:send(K, <<"GET /hello HTTP/1.1\r\nhost: x\r\n\r\n">>),
    {ok, _} = ssl:recv(K, 0, 10000),
    ok = ssl:close(K),
    try wait(fun() -> maps:get(conns_closed, cbench:stats(S)) =:= 3 end, 10000)
    catch error:timeout -> ct:fail({not_closed, cbench:stats(S)})
    end,
    #{bytes_read := R1} = cbench:stats(S),
    ?assert(R1 - R0 > byte_size(<<"GET /hello HTTP/1.1\r\nhost: x\r\n\r\n">>), {R0, R1, cbench:stats(S)}),
    ok = cbench:stop_server(S).

%% Options: what TLS needs, refused with the option named; a server without TLS says so.
options(_Config) ->
    ?assertEqual({error, {bad_option, client_auth, require, {requires, {tls, true}}}},
                 cbench:start_server(ehttpd, #{client_auth => require})),
    ?assertEqual({error, {bad_option, client_auth, maybe, {one_of, [none, request, require]}}},
                 cbench:start_server(ehttpd, #{tls => true, client_auth => maybe})),
    ?assertEqual({error, {bad_option, tls_cert_file, <<"/x.pem">>, {requires, tls_key_file}}},
                 cbench:start_server(ehttpd, #{tls => true, tls_cert_file => "/x.pem"})),
    ?assertEqual({error, {bad_option, tls_max_handshakes, 0, {integer, 1, 65535}}},
                 cbench:start_server(ehttpd, #{tls => true, tls_max_handshakes => 0})),
    {ok, S} = cbench:start_server(ehttpd, #{}),
    ?assertEqual({error, no_tls}, cbench:tls(S)),
    ?assertEqual(undefined, cbench:tls_port(S)),
    ?assertEqual({error, no_tls}, cbench:tls_url(S, "/")),
    ?assertEqual({error, no_tls}, cbench:client_cert(S, #{cn => <<"a">>})),
    ok = cbench:stop_server(S).

%% The user's certificate and key files replace the made leaf; cbench:tls/1 has no CA then.
user_cert(Config) ->
    Dir = proplists:get_value(priv_dir, Config),
    #{server_config := SConf, client_config := CConf} =
        public_key:pkix_test_data(#{server_chain => #{root => [{key, {namedCurve, secp256r1}}],
                                                      peer => [{key, {namedCurve, secp256r1}},
                                                               {extensions, [{'Extension', {2, 5, 29, 17}, false,
                                                                              [{dNSName, "localhost"}]}]}]},
                                    client_chain => #{root => [], peer => []}}),
    CertFile = filename:join(Dir, "user-cert.pem"),
    KeyFile = filename:join(Dir, "user-key.pem"),
    ok = file:write_file(CertFile, public_key:pem_encode([{'Certificate', proplists:get_value(cert, SConf), not_encrypted}])),
    {KT, KDer} = proplists:get_value(key, SConf),
    ok = file:write_file(KeyFile, public_key:pem_encode([{KT, KDer, not_encrypted}])),
    {ok, S} = cbench:start_server(ehttpd, #{tls => true, threads => 1, tls_cert_file => CertFile,
                                            tls_key_file => KeyFile}),
    ?assertMatch(#{ca_pem := undefined, ca_der := undefined, client_ca_der := <<_/binary>>},
                 cbench:tls(S)),
    {ok, C} = ssl:connect("localhost", cbench:tls_port(S),
                          [binary, {active, false}, {verify, verify_peer},
                           {cacerts, proplists:get_value(cacerts, CConf)},
                           {server_name_indication, "localhost"}], 10000),
    ?assertEqual(<<"Hello, Joe!">>, body(get(C, "/hello"))),
    ok = cbench:stop_server(S).

%% Down and up on a TLS server: refused while down, served again after up.
down_up(_Config) ->
    {ok, S} = cbench:start_server(ehttpd, #{tls => true, tls_port => 0, threads => 1}),
    ok = cbench:down(S),
    ?assertEqual({error, econnrefused}, connect(S, "localhost", [])),
    ok = cbench:up(S),
    {ok, C} = connect(S, "localhost", []),
    ?assertEqual(<<"Hello, Joe!">>, body(get(C, "/hello"))),
    ok = cbench:stop_server(S).

%% curl (OpenSSL) sees each scenario as it does against the C engine (docs/tls.md's table):
%% the good leaf serves, every bad one fails with exit 60 and OpenSSL's reason.
curl(Config) ->
    case os:find_executable("curl") of
        false -> {skip, "curl is not installed"};
        Curl ->
            {ok, S} = cbench:start_server(ehttpd, #{tls => true, threads => 1}),
            CaFile = filename:join(proplists:get_value(priv_dir, Config), "ca.pem"),
            ok = file:write_file(CaFile, maps:get(ca_pem, cbench:tls(S))),
            P = integer_to_list(cbench:tls_port(S)),
            Run = fun(Name) ->
                          Cmd = Curl ++ " -sS --max-time 10 --cacert " ++ CaFile ++ " --resolve " ++
                              Name ++ ":" ++ P ++ ":127.0.0.1 https://" ++ Name ++ ":" ++ P ++
                              "/hello 2>&1; echo \" exit=$?\"",
                          os:cmd(Cmd)
                  end,
            Expected = [{"localhost", "Hello, Joe! exit=0"},
                        {"expired.localhost", "certificate has expired"},
                        {"not-yet-valid.localhost", "certificate is not yet valid"},
                        {"wrong-host.localhost", "no alternative certificate subject name matches"},
                        {"self-signed.localhost", "self-signed certificate"},
                        {"untrusted-root.localhost", "unable to get local issuer certificate"},
                        {"missing-intermediate.localhost", "unable to get local issuer certificate"},
                        {"weak-key.localhost", "EE certificate key too weak"}],
            [begin
                 Out = Run(Name),
                 ct:log("~s: ~s", [Name, Out]),
                 ?assertEqual({Name, true}, {Name, string:find(Out, Want) =/= nomatch}),
                 Name =:= "localhost" orelse
                     ?assertEqual({Name, true}, {Name, string:find(Out, "exit=60") =/= nomatch})
             end || {Name, Want} <- Expected],
            ok = cbench:stop_server(S)
    end.

%% An Erlang handler over TLS (its request says h1_tls), and the WebSocket echo over TLS (wss).
handler_and_wss(_Config) ->
    {ok, S} = cbench:start_server(ehttpd, #{tls => true, threads => 1}),
    Self = self(),
    H = spawn_link(fun() ->
                           receive {cbench_request, Req = #{proto := P}} ->
                                   Self ! {proto, P},
                                   ok = cbench:reply(Req, 200, [], <<"from erlang">>)
                           end
                   end),
    {ok, _} = cbench:handle(S, "/erl", H, #{}),
    {ok, C} = connect(S, "localhost", []),
    ?assertEqual(<<"from erlang">>, body(get(C, "/erl"))),
    receive {proto, P} -> ?assertEqual(h1_tls, P) after 5000 -> error(no_request) end,
    {ok, W} = connect(S, "localhost", []),
    ok = ssl:send(W, <<"GET /ws HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: Upgrade\r\n"
                       "sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n">>),
    Head = <<"HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nupgrade: websocket\r\n"
             "sec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n">>,
    ?assertEqual({ok, Head}, ssl:recv(W, byte_size(Head), 10000)),
    Mask = <<1, 2, 3, 4>>,
    Masked = << <<(B bxor lists:nth(I rem 4 + 1, binary_to_list(Mask)))>>
                || {I, B} <- lists:zip(lists:seq(0, 4), binary_to_list(<<"hello">>)) >>,
    ok = ssl:send(W, <<1:1, 0:3, 1:4, 1:1, 5:7, Mask/binary, Masked/binary>>),
    ?assertEqual({ok, <<1:1, 0:3, 1:4, 0:1, 5:7, "hello">>}, ssl:recv(W, 7, 10000)),
    ok = cbench:stop_server(S).
