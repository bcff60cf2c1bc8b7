%%% @doc The Erlang API over TLS (issue 24, docs/tls.md) on the nif and port engines, with only
%%% cbench:client_tls_opts/1,2 on the client's side: httpc over https (a fixture route, an echo
%%% with a body, a stub, a fault), HTTP/2 over TLS through `ssl' directly (ALPN h2, the frames written
%%% and read here, HPACK by hand), curl --http2 and nghttp with the CA written from cbench:tls/1, the
%%% journal's `proto' and `tls' map of each, the per-protocol counters, the journal filter by
%%% protocol, every bad-certificate SNI name of docs/tls.md's table with the exact term `ssl' gives,
%%% the user's own certificate files, and the options and calls refused.
-module(cbench_tls_SUITE).

-include_lib("stdlib/include/assert.hrl").

-define(config(K, C), proplists:get_value(K, C)).

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1, init_per_group/2,
         end_per_group/2]).
-export([tls_info/1, httpc_hello/1, httpc_echo/1, httpc_stub/1, httpc_fault/1, h2_alpn/1,
         h2_preface_without_alpn/1, h1_alpn/1, h2c_upgrade_ignored/1, curl_h2/1, nghttp_h2/1,
         sni_table/1, counters/1, filter_by_proto/1, handler_proto/1, resumed/1]).
-export([user_files/1, bad_options/1, no_tls/1, bad_client_opts/1, admin_json/1]).

all() -> [{group, nif}, {group, port}, user_files, bad_options, no_tls, bad_client_opts, admin_json].

groups() ->
    Cases = [tls_info, httpc_hello, httpc_echo, httpc_stub, httpc_fault, h2_alpn,
             h2_preface_without_alpn, h1_alpn, h2c_upgrade_ignored, curl_h2, nghttp_h2, sni_table,
             counters, filter_by_proto, handler_proto, resumed],
    [{nif, [], Cases}, {port, [], Cases}].

suite() -> [{timetrap, {minutes, 3}}].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(ssl),
    {ok, _} = application:ensure_all_started(inets),
    {ok, _} = application:ensure_all_started(cbench),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_group(Engine, Config) ->
    {ok, S} = cbench:start_server(Engine, #{tls => true, threads => 2, journal => 1000}),
    [{server, S}, {engine, Engine} | Config].

end_per_group(_Engine, Config) ->
    ok = cbench:stop_server(?config(server, Config)).


%% The repository (as cbench_fault_SUITE finds it): docs/tls.md is read there.
repo_root() ->
    {ok, Erl} = file:read_link_all(filename:join(code:lib_dir(cbench), "erl")),
    Root = filename:dirname(filename:absname(Erl, code:lib_dir(cbench))),
    true = filelib:is_regular(filename:join(Root, "rebar.config")),
    Root.

url(S, Path) -> "https://localhost:" ++ integer_to_list(cbench:port(S)) ++ Path.

%% The journal's entries after Seq that match Filter.
since(S, Seq, Filter) -> cbench:requests(S, Filter#{since => Seq}).

last_seq(S) ->
    case cbench:requests(S) of
        [] -> 0;
        Es -> maps:get(seq, lists:last(Es))
    end.

%% The tls map a client's session gives the journal: the cipher as OpenSSL names the suite the
%% client negotiated (ssl's own view of the same handshake).
expected_tls(Sock, Alpn) ->
    {ok, Info} = ssl:connection_information(Sock, [selected_cipher_suite, protocol]),
    'tlsv1.3' = proplists:get_value(protocol, Info),
    Suite = proplists:get_value(selected_cipher_suite, Info),
    #{version => <<"TLSv1.3">>, cipher => list_to_binary(ssl:suite_to_openssl_str(Suite)),
      sni => <<"localhost">>, alpn => Alpn, resumed => false, client_cert => undefined}.

%%% Cases of each engine

%% @doc cbench:tls/1 gives the CA as PEM and its DER, the same certificate; client_tls_opts/1 is
%% the contract's list.
tls_info(Config) ->
    S = ?config(server, Config),
    #{ca_pem := Pem, ca_der := Der, client_ca_pem := CPem, client_ca_der := CDer} = Info = cbench:tls(S),
    ?assertEqual([ca_der, ca_pem, client_ca_der, client_ca_pem], lists:sort(maps:keys(Info))),
    ?assertEqual([{'Certificate', CDer, not_encrypted}], public_key:pem_decode(CPem)),
    ?assertNotEqual(Der, CDer),
    ?assertMatch(<<"-----BEGIN CERTIFICATE-----\n", _/binary>>, Pem),
    ?assertEqual([{'Certificate', Der, not_encrypted}], public_key:pem_decode(Pem)),
    Opts = cbench:client_tls_opts(S),
    ?assertMatch([{cacerts, [Der]}, {verify, verify_peer}, {server_name_indication, "localhost"},
                  {customize_hostname_check, [{match_fun, F}]}] when is_function(F), Opts),
    ?assertEqual(Opts ++ [{alpn_advertised_protocols, [<<"h2">>]}],
                 cbench:client_tls_opts(S, #{alpn => [<<"h2">>]})).

%% @doc httpc over https with the options as they are: GET /hello, and its journal entry (h1_tls;
%% httpc offers no ALPN).
httpc_hello(Config) ->
    S = ?config(server, Config),
    Seq = last_seq(S),
    ?assertMatch({ok, {{"HTTP/1.1", 200, "OK"}, _, "Hello, Joe!"}},
                 httpc:request(get, {url(S, "/hello"), [{"connection", "close"}]},
                               [{ssl, cbench:client_tls_opts(S)}], [])),
    [E] = since(S, Seq, #{}),
    ?assertMatch(#{proto := h1_tls, path := <<"/hello">>, status := 200, route := hello,
                   stream := 0}, E),
    #{tls := Tls} = E,
    ?assertMatch(#{version := <<"TLSv1.3">>, sni := <<"localhost">>, alpn := undefined,
                   resumed := false, client_cert := undefined}, Tls),
    ?assertEqual([alpn, cipher, client_cert, resumed, sni, version], lists:sort(maps:keys(Tls))).

%% @doc A POST with a body comes back whole from /echo, and the journal keeps the body.
httpc_echo(Config) ->
    S = ?config(server, Config),
    Seq = last_seq(S),
    Body = binary:copy(<<"0123456789abcdef">>, 4096),
    ?assertMatch({ok, {{"HTTP/1.1", 200, _}, _, Body}},
                 httpc:request(post, {url(S, "/echo"), [], "application/octet-stream", Body},
                               [{ssl, cbench:client_tls_opts(S)}], [{body_format, binary}])),
    [#{proto := h1_tls, method := <<"POST">>, body_length := 65536, status := 200}] =
        since(S, Seq, #{path => "/echo"}).

%% @doc A stub answers over TLS as over cleartext, and is journaled with its id.
httpc_stub(Config) ->
    S = ?config(server, Config),
    {ok, Id} = cbench:stub(S, #{path => "/tls-stub", method => put},
                           #{status => 201, headers => [{"x-tls", "yes"}], body => <<"stubbed">>}),
    Seq = last_seq(S),
    {ok, {{"HTTP/1.1", 201, _}, Hs, <<"stubbed">>}} =
        httpc:request(put, {url(S, "/tls-stub"), [], "text/plain", <<"in">>},
                      [{ssl, cbench:client_tls_opts(S)}], [{body_format, binary}]),
    ?assertEqual("yes", proplists:get_value("x-tls", Hs)),
    [#{proto := h1_tls, stub := Id, body := <<"in">>, status := 201}] = since(S, Seq, #{stub => Id}),
    ok = cbench:unstub(S, Id).

%% @doc Faults over TLS: the same outcomes httpc sees over cleartext (docs/faults.md), and the
%% journal's fault.
httpc_fault(Config) ->
    S = ?config(server, Config),
    Get = fun(Spec) ->
                  httpc:request(get, {url(S, "/fault/" ++ Spec), [{"connection", "close"}]},
                                [{ssl, cbench:client_tls_opts(S)}, {timeout, 5000}],
                                [{body_format, binary}])
          end,
    Seq = last_seq(S),
    ?assertEqual({error, socket_closed_remotely}, Get("reset")),
    ?assertEqual({error, {shutdown, server_closed}}, Get("truncated")),
    ?assertMatch({ok, {{_, 200, _}, _, <<_:1024/binary>>}}, Get("overlong")),
    ?assertEqual([{h1_tls, reset}, {h1_tls, truncated}, {h1_tls, overlong}],
                 [{P, F} || #{proto := P, fault := F} <- since(S, Seq, #{})]).

%% @doc HTTP/2 over TLS through `ssl' directly: ALPN h2 negotiated, then the client preface, an
%% empty SETTINGS and a HEADERS frame for GET /hello written here (HPACK: indexed :method GET and
%% :scheme https, literal :path and :authority); the server's frames are read until the DATA
%% with END_STREAM. The response head is :status 200 indexed (0x88), the body `Hello, Joe!'.
h2_alpn(Config) ->
    S = ?config(server, Config),
    Seq = last_seq(S),
    {ok, Sock} = ssl:connect("localhost", cbench:port(S),
                             [binary, {active, false} | cbench:client_tls_opts(S, #{alpn => [<<"h2">>]})],
                             5000),
    ?assertEqual({ok, <<"h2">>}, ssl:negotiated_protocol(Sock)),
    Expected = expected_tls(Sock, <<"h2">>),
    {Status, Body} = h2_get(Sock, <<"/hello">>),
    ?assertEqual(<<16#88>>, Status),
    ?assertEqual(<<"Hello, Joe!">>, Body),
    ok = ssl:close(Sock),
    [E] = since(S, Seq, #{}),
    ?assertMatch(#{proto := h2_tls, path := <<"/hello">>, status := 200, stream := 1,
                   method := <<"GET">>}, E),
    ?assertEqual(Expected, maps:get(tls, E)).

%% @doc A client that offers no ALPN and sends the HTTP/2 preface gets HTTP/2 (the preface rule of
%% the cleartext port), journaled as h2_tls with alpn undefined.
h2_preface_without_alpn(Config) ->
    S = ?config(server, Config),
    Seq = last_seq(S),
    {ok, Sock} = ssl:connect("localhost", cbench:port(S),
                             [binary, {active, false} | cbench:client_tls_opts(S)], 5000),
    ?assertEqual({error, protocol_not_negotiated}, ssl:negotiated_protocol(Sock)),
    Expected = expected_tls(Sock, undefined),
    ?assertEqual({<<16#88>>, <<"Hello, Joe!">>}, h2_get(Sock, <<"/hello">>)),
    ok = ssl:close(Sock),
    [#{proto := h2_tls, tls := Tls}] = since(S, Seq, #{}),
    ?assertEqual(Expected, Tls).

%% @doc ALPN http/1.1: HTTP/1.1 over the session, the exact status line and body, journaled with
%% alpn <<"http/1.1">>.
h1_alpn(Config) ->
    S = ?config(server, Config),
    Seq = last_seq(S),
    {ok, Sock} = ssl:connect("localhost", cbench:port(S),
                             [binary, {active, false}
                              | cbench:client_tls_opts(S, #{alpn => [<<"http/1.1">>]})], 5000),
    ?assertEqual({ok, <<"http/1.1">>}, ssl:negotiated_protocol(Sock)),
    Expected = expected_tls(Sock, <<"http/1.1">>),
    ok = ssl:send(Sock, <<"GET /hello HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n">>),
    Resp = recv_all(Sock, <<>>),
    ?assertMatch(<<"HTTP/1.1 200 OK\r\n", _/binary>>, Resp),
    [_, RespBody] = binary:split(Resp, <<"\r\n\r\n">>),
    ?assertEqual(<<"Hello, Joe!">>, RespBody),
    [#{proto := h1_tls, tls := Tls}] = since(S, Seq, #{}),
    ?assertEqual(Expected, Tls).

%% @doc Upgrade: h2c over TLS is ignored (h2c is for cleartext; TLS chooses HTTP/2 by ALPN): the
%% request is answered over HTTP/1.1, no 101.
h2c_upgrade_ignored(Config) ->
    S = ?config(server, Config),
    Seq = last_seq(S),
    {ok, Sock} = ssl:connect("localhost", cbench:port(S),
                             [binary, {active, false} | cbench:client_tls_opts(S)], 5000),
    ok = ssl:send(Sock, <<"GET /hello HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade, HTTP2-Settings\r\n"
                          "Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n">>),
    {ok, Resp} = ssl:recv(Sock, 0, 5000),
    ?assertMatch(<<"HTTP/1.1 200 OK\r\n", _/binary>>, Resp),
    ok = ssl:close(Sock),
    [#{proto := h1_tls, status := 200}] = since(S, Seq, #{}).

%% @doc curl --http2 with the CA written from cbench:tls/1: h2 by ALPN, the body exact, the
%% journal's entry h2_tls with ALPN h2 and SNI localhost.
curl_h2(Config) ->
    case os:find_executable("curl") of
        false -> {skip, "curl is not installed (scripts/deps.sh test)"};
        Curl ->
            S = ?config(server, Config),
            Ca = ca_file(S, Config),
            Seq = last_seq(S),
            {0, Out} = run(Curl, ["-s", "--http2", "--cacert", Ca, "-w", "\n%{http_version} %{http_code}",
                                  url(S, "/hello")]),
            ?assertEqual(<<"Hello, Joe!\n2 200">>, Out),
            [#{proto := h2_tls, tls := Tls}] = since(S, Seq, #{}),
            ?assertMatch(#{version := <<"TLSv1.3">>, alpn := <<"h2">>, sni := <<"localhost">>,
                           resumed := false}, Tls)
    end.

%% @doc nghttp (which negotiates h2 by ALPN) gets the body; the journal says h2_tls. nghttp verifies
%% nothing (it warns that it could not, and goes on).
nghttp_h2(Config) ->
    case os:find_executable("nghttp") of
        false -> {skip, "nghttp is not installed (scripts/deps.sh test)"};
        Nghttp ->
            S = ?config(server, Config),
            Seq = last_seq(S),
            {0, Out} = run(Nghttp, [url(S, "/hello")]),
            ?assertEqual(<<"Hello, Joe!">>, lists:last(binary:split(Out, <<"\n">>, [global]))),
            [#{proto := h2_tls, tls := #{alpn := <<"h2">>, sni := <<"localhost">>}}] =
                since(S, Seq, #{})
    end.

%% @doc Every row of docs/tls.md's bad-certificate table: ssl:connect/3 with
%% client_tls_opts(S, #{sni => Name}) gives the OTP column's term.
sni_table(Config) ->
    S = ?config(server, Config),
    Rows = sni_rows(),
    [begin
         Got = ssl:connect("localhost", cbench:port(S), cbench:client_tls_opts(S, Sni), 5000),
         ct:log("~p: ~p", [Sni, Got]),
         ?assert(matches_pattern(Pattern, Got), {Sni, Pattern, Got}),
         case Got of
             {ok, Sock} -> ssl:close(Sock);
             _ -> ok
         end
     end || {Sni, Pattern} <- Rows],
    ok.

%% @doc The per-protocol counters: one connection over ALPN h2 and one over ALPN http/1.1 count
%% under h2_tls and h1_tls, with their requests, and nothing under the cleartext names.
counters(Config) ->
    S = ?config(server, Config),
    Before = cbench:stats(S),
    {ok, A} = ssl:connect("localhost", cbench:port(S),
                          [binary, {active, false} | cbench:client_tls_opts(S, #{alpn => [<<"h2">>]})],
                          5000),
    {<<16#88>>, _} = h2_get(A, <<"/hello">>),
    {ok, B} = ssl:connect("localhost", cbench:port(S),
                          [binary, {active, false}
                           | cbench:client_tls_opts(S, #{alpn => [<<"http/1.1">>]})], 5000),
    ok = ssl:send(B, <<"GET /hello HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n">>),
    <<"HTTP/1.1 200 OK", _/binary>> = recv_all(B, <<>>),
    After = cbench:stats(S),
    ok = ssl:close(A),
    Delta = fun(K) ->
                    maps:map(fun(P, N) -> N - maps:get(P, maps:get(K, Before)) end, maps:get(K, After))
            end,
    Zero = #{http1 => 0, h2c_prior => 0, h2c_upgrade => 0},
    ?assertEqual(Zero#{h1_tls => 1, h2_tls => 1}, Delta(conns_by_proto)),
    ?assertEqual(Zero#{h1_tls => 1, h2_tls => 1}, Delta(requests_by_proto)).

%% @doc The journal filter by protocol: h1_tls and h2_tls each pick their own entries; a protocol
%% that is not one is refused naming the field.
filter_by_proto(Config) ->
    S = ?config(server, Config),
    Seq = last_seq(S),
    {ok, {{_, 200, _}, _, _}} = httpc:request(get, {url(S, "/hello"), [{"connection", "close"}]},
                                              [{ssl, cbench:client_tls_opts(S)}], []),
    {ok, Sock} = ssl:connect("localhost", cbench:port(S),
                             [binary, {active, false} | cbench:client_tls_opts(S, #{alpn => [<<"h2">>]})],
                             5000),
    {<<16#88>>, _} = h2_get(Sock, <<"/hello">>),
    ok = ssl:close(Sock),
    ?assertMatch([#{proto := h1_tls}], since(S, Seq, #{proto => h1_tls})),
    ?assertMatch([#{proto := h2_tls}], since(S, Seq, #{proto => h2_tls})),
    ?assertMatch([#{proto := h1_tls}, #{proto := h2_tls}], since(S, Seq, #{proto => [h2_tls, h1_tls]})),
    ?assertEqual([], since(S, Seq, #{proto => http1})),
    ?assertEqual({error, {bad_filter, {{filter, proto}, tls, unknown_proto}}},
                 cbench:requests(S, #{proto => tls})),
    ?assertEqual({error, {bad_filter, {{filter, proto}, [h1_tls, "h1"], unknown_proto}}},
                 cbench:requests(S, #{proto => [h1_tls, "h1"]})),
    ?assertEqual({error, {bad_filter, {{filter, proto}, 42, wrong_type}}},
                 cbench:requests(S, #{proto => 42})).

%% @doc An Erlang handler's request over TLS names its protocol h1_tls / h2_tls.
handler_proto(Config) ->
    S = ?config(server, Config),
    Self = self(),
    Pid = spawn_link(fun Loop() ->
                             receive
                                 {cbench_request, Req} ->
                                     Self ! {proto, maps:get(proto, Req)},
                                     ok = cbench:reply(Req, 200, [], <<"handled">>),
                                     Loop()
                             end
                     end),
    {ok, Id} = cbench:handle(S, "/tls-handler", Pid, #{}),
    {ok, {{_, 200, _}, _, "handled"}} =
        httpc:request(get, {url(S, "/tls-handler"), [{"connection", "close"}]},
                      [{ssl, cbench:client_tls_opts(S)}], []),
    receive {proto, P1} -> ?assertEqual(h1_tls, P1) after 5000 -> error(no_request) end,
    {ok, Sock} = ssl:connect("localhost", cbench:port(S),
                             [binary, {active, false} | cbench:client_tls_opts(S, #{alpn => [<<"h2">>]})],
                             5000),
    {<<16#88>>, <<"handled">>} = h2_get(Sock, <<"/tls-handler">>),
    ok = ssl:close(Sock),
    receive {proto, P2} -> ?assertEqual(h2_tls, P2) after 5000 -> error(no_request) end,
    ok = cbench:unstub(S, Id),
    unlink(Pid),
    exit(Pid, kill).

%% @doc A session resumed with a TLS 1.3 ticket (the server issues them; the client keeps one by
%% hand) is journaled with resumed => true, and the full handshake before it with false; ssl agrees.
resumed(Config) ->
    S = ?config(server, Config),
    Seq = last_seq(S),
    Opts = [binary, {active, false}, {session_tickets, manual}
            | cbench:client_tls_opts(S, #{alpn => [<<"http/1.1">>]})],
    Get = <<"GET /hello HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n">>,
    {ok, A} = ssl:connect("localhost", cbench:port(S), Opts, 5000),
    ok = ssl:send(A, Get),
    <<"HTTP/1.1 200 OK", _/binary>> = recv_all(A, <<>>),
    Ticket = receive {ssl, session_ticket, T} -> T after 5000 -> error(no_ticket) end,
    ok = ssl:close(A),
    {ok, B} = ssl:connect("localhost", cbench:port(S), [{use_ticket, [Ticket]} | Opts], 5000),
    ?assertEqual({ok, [{session_resumption, true}]}, ssl:connection_information(B, [session_resumption])),
    ok = ssl:send(B, Get),
    <<"HTTP/1.1 200 OK", _/binary>> = recv_all(B, <<>>),
    ok = ssl:close(B),
    flush_tickets(),
    ?assertMatch([#{proto := h1_tls, tls := #{resumed := false, alpn := <<"http/1.1">>}},
                  #{proto := h1_tls, tls := #{resumed := true, alpn := <<"http/1.1">>,
                                               sni := <<"localhost">>}}],
                 since(S, Seq, #{})).

flush_tickets() ->
    receive {ssl, session_ticket, _} -> flush_tickets()
    after 0 -> ok
    end.

%%% Cases outside the groups

%% @doc The user's certificate and key (made here with openssl: a CA of the user's and a leaf for
%% localhost it signed): the server serves them, cbench:tls/1 has no CA to give (undefined),
%% client_tls_opts/1 has no cacerts, and with the user's CA added httpc verifies the server. A key
%% that is not the certificate's is refused naming the field.
user_files(Config) ->
    case os:find_executable("openssl") of
        false -> {skip, "openssl is not installed"};
        Openssl ->
            Dir = ?config(priv_dir, Config),
            F = fun(Name) -> filename:join(Dir, Name) end,
            [Ca, CaKey, Csr, Ext, Cert, Key, Key2] =
                [F(N) || N <- ["ca.pem", "ca.key", "user.csr", "user.ext", "user.pem", "user.key", "other.key"]],
            EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"],
            {0, _} = run(Openssl, ["req", "-x509" | EC] ++ ["-keyout", CaKey, "-out", Ca, "-days", "2",
                                                             "-subj", "/CN=cbench user CA"]),
            {0, _} = run(Openssl, ["req", "-new" | EC] ++ ["-keyout", Key, "-out", Csr, "-subj", "/CN=localhost"]),
            ok = file:write_file(Ext, <<"basicConstraints=CA:FALSE\nsubjectAltName=DNS:localhost\n">>),
            {0, _} = run(Openssl, ["x509", "-req", "-in", Csr, "-CA", Ca, "-CAkey", CaKey, "-CAcreateserial",
                                   "-days", "2", "-extfile", Ext, "-out", Cert]),
            {0, _} = run(Openssl, ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                                   "-out", Key2]),
            {ok, Pem} = file:read_file(Ca),
            [{'Certificate', Der, not_encrypted}] = public_key:pem_decode(Pem),
            [begin
                 {ok, S} = cbench:start_server(E, #{tls => true, tls_cert_file => Cert,
                                                    tls_key_file => list_to_binary(Key)}),
                 ?assertMatch(#{ca_pem := undefined, ca_der := undefined, client_ca_pem := <<_/binary>>,
                               client_ca_der := <<_/binary>>}, cbench:tls(S)),
                 Opts = cbench:client_tls_opts(S),
                 ?assertEqual(false, lists:keymember(cacerts, 1, Opts)),
                 ?assertMatch({ok, {{_, 200, _}, _, "Hello, Joe!"}},
                              httpc:request(get, {url(S, "/hello"), []},
                                            [{ssl, [{cacerts, [Der]} | Opts]}], [])),
                 ok = cbench:stop_server(S),
                 ?assertEqual({error, {bad_option, tls_key_file, list_to_binary(Key2), {tls, rejected}}},
                              cbench:start_server(E, #{tls => true, tls_cert_file => Cert,
                                                       tls_key_file => Key2}))
             end || E <- [nif, port]],
            ok
    end.

%% @doc Bad TLS options: the usual {bad_option, Key, Value, Allowed} on nif and port; the ehttpd
%% engine refuses `tls => true' (not yet).
bad_options(Config) ->
    Dir = ?config(priv_dir, Config),
    Missing = filename:join(Dir, "missing.pem"),
    NotPem = filename:join(Dir, "not.pem"),
    ok = file:write_file(NotPem, <<"not a certificate\n">>),
    [begin
         ?assertEqual({error, {bad_option, tls, yes, boolean}}, cbench:start_server(E, #{tls => yes})),
         ?assertEqual({error, {bad_option, tls_cert_file, 42, {string, 4095}}},
                      cbench:start_server(E, #{tls => true, tls_cert_file => 42})),
         ?assertEqual({error, {bad_option, tls_cert_file, "a\0b", {string, 4095}}},
                      cbench:start_server(E, #{tls => true, tls_cert_file => "a\0b"})),
         ?assertEqual({error, {bad_option, tls_cert_file, <<"c.pem">>, {requires, tls_key_file}}},
                      cbench:start_server(E, #{tls => true, tls_cert_file => "c.pem"})),
         ?assertEqual({error, {bad_option, tls_key_file, <<"k.pem">>, {requires, tls_cert_file}}},
                      cbench:start_server(E, #{tls => true, tls_key_file => "k.pem"})),
         ?assertEqual({error, {bad_option, tls_cert_file, <<"c.pem">>, {requires, {tls, true}}}},
                      cbench:start_server(E, #{tls_cert_file => "c.pem", tls_key_file => "k.pem"})),
         ?assertEqual({error, {bad_option, tls_cert_file, list_to_binary(Missing), {file, enoent}}},
                      cbench:start_server(E, #{tls => true, tls_cert_file => Missing,
                                               tls_key_file => Missing})),
         ?assertEqual({error, {bad_option, tls_cert_file, list_to_binary(NotPem), {pem, no_certificate}}},
                      cbench:start_server(E, #{tls => true, tls_cert_file => NotPem,
                                               tls_key_file => NotPem}))
     end || E <- [nif, port]],
    ?assertEqual({error, {bad_option, tls_cert_file, <<"c.pem">>, {requires, {tls, true}}}},
                 cbench:start_server(ehttpd, #{tls_cert_file => "c.pem"})),
    %% The NIF and the port program check what reaches them again (a term that skipped cbench_opts).
    ?assertEqual({error, {bad_option, tls_cert_file, 42, {string, 4095}}},
                 cbench_nif:start_nif(#{tls_cert_file => 42})),
    {ok, P} = cbench_port:open(),
    ?assertEqual({error, {bad_option, tls_key_file, "k", {string, 4095}}},
                 cbench_port:request(P, {start, #{tls_key_file => "k"}}, 5000)),
    catch port_close(P),
    ok.

%% @doc A server without TLS: cbench:tls/1 and client_tls_opts/1 say so, on every engine.
no_tls(_Config) ->
    [begin
         {ok, S} = cbench:start_server(E, #{}),
         ?assertEqual({error, no_tls}, cbench:tls(S)),
         ?assertEqual({error, no_tls}, cbench:client_tls_opts(S)),
         ok = cbench:stop_server(S)
     end || E <- [nif, port, ehttpd]],
    ?assertError(badarg, cbench:tls(not_a_server)),
    ?assertError(badarg, cbench:client_tls_opts(self(), [])).

%% @doc client_tls_opts/2 refuses what it does not know, naming the key.
bad_client_opts(_Config) ->
    {ok, S} = cbench:start_server(nif, #{tls => true}),
    ?assertEqual({error, {bad_option, sni, 42, string}}, cbench:client_tls_opts(S, #{sni => 42})),
    ?assertEqual({error, {bad_option, sni, "", string}}, cbench:client_tls_opts(S, #{sni => ""})),
    ?assertEqual({error, {bad_option, alpn, ["h2"], {list, binary}}},
                 cbench:client_tls_opts(S, #{alpn => ["h2"]})),
    ?assertEqual({error, {bad_option, verify, none, {known, [alpn, sni]}}},
                 cbench:client_tls_opts(S, #{verify => none})),
    ?assertMatch([_, _, {server_name_indication, "expired.localhost"}, _],
                 cbench:client_tls_opts(S, #{sni => <<"expired.localhost">>})),
    ok = cbench:stop_server(S).

%% @doc The admin API's journal (GET /requests) gives the same TLS details as JSON: `tls' an object
%% with null for what is absent, and null for a cleartext entry (none here: the listener is TLS only).
admin_json(_Config) ->
    {ok, S} = cbench:start_server(nif, #{tls => true, admin => true}),
    {ok, Sock} = ssl:connect("localhost", cbench:port(S),
                             [binary, {active, false} | cbench:client_tls_opts(S, #{alpn => [<<"h2">>]})],
                             5000),
    Expected = expected_tls(Sock, <<"h2">>),
    {<<16#88>>, <<"Hello, Joe!">>} = h2_get(Sock, <<"/hello">>),
    ok = ssl:close(Sock),
    {ok, {{_, 200, _}, _, Json}} = httpc:request(get, {cbench:admin_url(S) ++ "/requests", []}, [],
                                                 [{body_format, binary}]),
    {ok, [Entry]} = cbench_json:decode(Json),
    ?assertEqual(<<"h2_tls">>, maps:get(<<"proto">>, Entry)),
    #{cipher := Cipher} = Expected,
    ?assertEqual(#{<<"version">> => <<"TLSv1.3">>, <<"cipher">> => Cipher, <<"sni">> => <<"localhost">>,
                   <<"alpn">> => <<"h2">>, <<"resumed">> => false, <<"client_cert">> => null},
                 maps:get(<<"tls">>, Entry)),
    ok = cbench:stop_server(S).

%%% HTTP/2 by hand

-define(PREFACE, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").

%% GET Path on stream 1: the first byte of the response's header block (its :status) and the body.
h2_get(Sock, Path) ->
    Block = <<16#82, 16#87,                                          % :method GET, :scheme https
              16#04, (byte_size(Path)), Path/binary,                 % :path, literal
              16#01, 9, "localhost">>,                               % :authority, literal
    ok = ssl:send(Sock, [<<?PREFACE>>, frame(4, 0, 0, <<>>), frame(1, 16#5, 1, Block)]),
    read_frames(Sock, <<>>, undefined, <<>>).

frame(Type, Flags, Stream, Payload) ->
    <<(byte_size(Payload)):24, Type:8, Flags:8, 0:1, Stream:31, Payload/binary>>.

read_frames(Sock, Buf, Status, Body) ->
    case Buf of
        <<Len:24, Type:8, Flags:8, _:1, Stream:31, Payload:Len/binary, Rest/binary>> ->
            case {Type, Stream} of
                {4, 0} when Flags band 1 =:= 0 -> % the server's SETTINGS: acknowledged
                    ok = ssl:send(Sock, frame(4, 1, 0, <<>>)),
                    read_frames(Sock, Rest, Status, Body);
                {1, 1} ->
                    <<First:1/binary, _/binary>> = Payload,
                    read_frames(Sock, Rest, First, Body);
                {0, 1} when Flags band 1 =:= 1 -> {Status, <<Body/binary, Payload/binary>>};
                {0, 1} -> read_frames(Sock, Rest, Status, <<Body/binary, Payload/binary>>);
                _ -> read_frames(Sock, Rest, Status, Body)
            end;
        _ ->
            {ok, More} = ssl:recv(Sock, 0, 5000),
            read_frames(Sock, <<Buf/binary, More/binary>>, Status, Body)
    end.

recv_all(Sock, Acc) ->
    case ssl:recv(Sock, 0, 5000) of
        {ok, D} -> recv_all(Sock, <<Acc/binary, D/binary>>);
        {error, closed} -> Acc
    end.

%%% docs/tls.md's table

%% Each row's client options (the SNI name; the first row is the default options, the last an
%% unknown name) and the OTP column's pattern.
sni_rows() ->
    {ok, Doc} = file:read_file(filename:join([repo_root(), "docs", "tls.md"])),
    [_, From] = binary:split(Doc, <<"<!-- sni -->\n">>),
    [Table | _] = binary:split(From, <<"<!-- /sni -->">>),
    [_Header, _Rule | Lines] = [L || L <- binary:split(Table, <<"\n">>, [global]), L =/= <<>>],
    Rows = [sni_row(L) || L <- Lines],
    ?assertEqual(9, length(Rows)),
    Rows.

sni_row(Line) ->
    [<<>>, Name, _Leaf, _Curl, Otp, <<>>] = [string:trim(C) || C <- binary:split(Line, <<"|">>, [global])],
    Opts = case Name of
               <<"(none", _/binary>> -> #{};
               <<"any other name">> -> #{sni => "other.localhost"};
               _ -> #{sni => unquote(Name)}
           end,
    {Opts, unquote(Otp)}.

unquote(<<"`", Rest/binary>>) -> binary_to_list(binary:part(Rest, 0, byte_size(Rest) - 1)).

matches_pattern(Text, Value) ->
    {ok, Tokens, _} = erl_scan:string("case V of " ++ Text ++ " -> true; _ -> false end."),
    {ok, [Expr]} = erl_parse:parse_exprs(Tokens),
    {value, Result, _} = erl_eval:expr(Expr, #{'V' => Value}),
    Result.

%%% Helpers

%% The server's CA in a file, for curl.
ca_file(S, Config) ->
    F = filename:join(?config(priv_dir, Config), atom_to_list(?config(engine, Config)) ++ "-ca.pem"),
    #{ca_pem := Pem} = cbench:tls(S),
    ok = file:write_file(F, Pem),
    F.

%% A program's exit status and output (stdout and stderr), killed after 10 s.
run(Exe, Args) ->
    Port = open_port({spawn_executable, Exe}, [{args, Args}, exit_status, stderr_to_stdout, binary]),
    collect(Port, [], erlang:monotonic_time(millisecond) + 10000).

collect(Port, Out, Deadline) ->
    Left = max(0, Deadline - erlang:monotonic_time(millisecond)),
    receive
        {Port, {data, D}} -> collect(Port, [Out, D], Deadline);
        {Port, {exit_status, St}} -> {St, iolist_to_binary(Out)}
    after Left ->
            catch port_close(Port),
            {timeout, iolist_to_binary(Out)}
    end.
