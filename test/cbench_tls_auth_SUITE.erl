%%% @doc TLS client certificates (`client_auth') and session resumption on the C engine's nif and
%%% port engines (docs/tls.md), through OTP `ssl': what each mode answers a client with and
%%% without a certificate (the exact error terms), cbench:client_cert/2, and the handshakes
%%% counted full and resumed in stats/1.
-module(cbench_tls_auth_SUITE).

-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, init_per_suite/1, end_per_suite/1, init_per_group/2, end_per_group/2]).
-export([require_without_cert_tls13/1, require_without_cert_tls12/1, require_with_cert/1,
         require_stranger_cert/1, request_without_cert/1, request_with_cert/1, none_asks_nothing/1,
         client_cert_map/1, journal_client_cert/1, client_cert_errors/1, client_auth_option/1, resumption_tls13/1,
         resumption_tls12/1, resumption_with_client_cert/1]).

-define(config(K, C), proplists:get_value(K, C)).
-define(REQ, <<"GET /hello HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n">>).

all() -> [{group, nif}, {group, port}].

groups() ->
    Cases = [require_without_cert_tls13, require_without_cert_tls12, require_with_cert,
             require_stranger_cert, request_without_cert, request_with_cert, none_asks_nothing,
             client_cert_map, journal_client_cert, client_cert_errors, client_auth_option, resumption_tls13,
             resumption_tls12, resumption_with_client_cert],
    [{nif, [], Cases}, {port, [], Cases}].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(ssl),
    {ok, _} = application:ensure_all_started(cbench),
    Config.

end_per_suite(_Config) -> ok.

init_per_group(Engine, Config) -> [{engine, Engine} | Config].

end_per_group(_, _Config) -> ok.

%%% Helpers

start(Config, Mode) ->
    {ok, S} = cbench:start_server(?config(engine, Config), #{tls => true, client_auth => Mode,
                                                            threads => 1}),
    S.

%% The client's options for server S: the server verified with its test CA.
client_opts(S) ->
    [binary, {active, false} | cbench:client_tls_opts(S)].

%% The client CA of server S as PEM.
client_ca(S) ->
    maps:get(client_ca_pem, cbench:tls(S)).

cert_opts(#{cert_der := Der, key := Key}) -> [{cert, Der}, {key, Key}].

%% GET /hello on a new connection: the status, and the socket's session_resumption. Extra options
%% come last: where `ssl' is given an option twice, the last one counts.
hello(S, Extra) ->
    {ok, Sock} = ssl:connect("localhost", cbench:port(S), client_opts(S) ++ Extra, 10000),
    {ok, [{session_resumption, Resumed}]} = ssl:connection_information(Sock, [session_resumption]),
    ok = ssl:send(Sock, ?REQ),
    %% Read to the server's close: TLS 1.3 tickets come after the handshake, before the response.
    Resp = recv_all(Sock, <<>>),
    ssl:close(Sock),
    <<"HTTP/1.1 ", Code:3/binary, _/binary>> = Resp,
    {binary_to_integer(Code), Resumed}.

recv_all(Sock, Acc) ->
    case ssl:recv(Sock, 0, 10000) of
        {ok, Data} -> recv_all(Sock, <<Acc/binary, Data/binary>>);
        {error, closed} -> Acc
    end.

handshakes(S) ->
    #{tls_handshakes_full := F, tls_handshakes_resumed := R} = cbench:stats(S),
    {F, R}.

%% TLS 1.3: the client's handshake ends before the server has seen its (empty) certificate, so
%% connect succeeds and the alert comes after. In active mode it arrives as one message, always
%% the same; a passive recv racing it may read `{error, closed}' instead.
refused_tls13(S, Extra) ->
    {ok, Sock} = ssl:connect("localhost", cbench:port(S),
                             client_opts(S) ++ [{versions, ['tlsv1.3']}, {active, true} | Extra],
                             10000),
    receive
        {ssl_error, Sock, Why} -> Why;
        Other -> {unexpected, Other}
    after 10000 -> timeout
    end.

%%% Cases

%% require, no certificate, TLS 1.3: the certificate_required alert.
require_without_cert_tls13(Config) ->
    S = start(Config, require),
    ?assertEqual({tls_alert, {certificate_required, "TLS client: In state connection received SERVER "
                                                    "ALERT: Fatal - Certificate required\n"}},
                 refused_tls13(S, [])),
    ?assertEqual({0, 0}, handshakes(S)),
    cbench:stop_server(S).

%% require, no certificate, TLS 1.2: the handshake itself fails (handshake_failure).
require_without_cert_tls12(Config) ->
    S = start(Config, require),
    ?assertEqual({error, {tls_alert, {handshake_failure, "TLS client: In state cipher received SERVER "
                                                         "ALERT: Fatal - Handshake Failure\n"}}},
                 ssl:connect("localhost", cbench:port(S), client_opts(S) ++ [{versions, ['tlsv1.2']}],
                             10000)),
    cbench:stop_server(S).

require_with_cert(Config) ->
    S = start(Config, require),
    C = cbench:client_cert(S, #{cn => <<"alice">>}),
    ?assertEqual({200, false}, hello(S, cert_opts(C))),
    ?assertEqual({200, false}, hello(S, [{versions, ['tlsv1.2']} | cert_opts(C)])),
    ?assertEqual({2, 0}, handshakes(S)),
    cbench:stop_server(S).

%% A certificate from another server's client CA: unknown_ca, in both modes that ask.
require_stranger_cert(Config) ->
    [begin
         S = start(Config, Mode),
         Other = start(Config, none),
         C = cbench:client_cert(Other, #{cn => <<"mallory">>}),
         ?assertEqual({tls_alert, {unknown_ca, "TLS client: In state connection received SERVER "
                                               "ALERT: Fatal - Unknown CA\n"}},
                      refused_tls13(S, cert_opts(C))),
         cbench:stop_server(Other),
         cbench:stop_server(S)
     end || Mode <- [require, request]].

request_without_cert(Config) ->
    S = start(Config, request),
    ?assertEqual({200, false}, hello(S, [])),
    cbench:stop_server(S).

request_with_cert(Config) ->
    S = start(Config, request),
    ?assertEqual({200, false}, hello(S, cert_opts(cbench:client_cert(S, #{})))),
    cbench:stop_server(S).

%% none: a client's certificate is not asked for, and the client is served.
none_asks_nothing(Config) ->
    S = start(Config, none),
    ?assertEqual({200, false}, hello(S, [])),
    ?assertEqual({200, false}, hello(S, cert_opts(cbench:client_cert(S, #{cn => <<"x">>})))),
    cbench:stop_server(S).

%% The map: PEM and DER of the same certificate, a PKCS#8 key, the subject and fingerprint the
%% journal records, issued by the client CA for clientAuth, from an hour ago for a week.
client_cert_map(Config) ->
    S = start(Config, require),
    C = #{cert_pem := CertPem, key_pem := KeyPem, cert_der := Der, key := {'PrivateKeyInfo', KeyDer},
          subject := Subject, sha256 := Sha} = cbench:client_cert(S, #{cn => <<"J", 246/utf8, "rg, QA">>}),
    ?assertEqual(6, map_size(C)),
    ?assertEqual([{'Certificate', Der, not_encrypted}], public_key:pem_decode(CertPem)),
    ?assertEqual([{'PrivateKeyInfo', KeyDer, not_encrypted}], public_key:pem_decode(KeyPem)),
    ?assertEqual(<<"CN=J", 246/utf8, "rg\\, QA">>, Subject),
    ?assertEqual(iolist_to_binary([io_lib:format("~2.16.0b", [B]) || <<B>> <= crypto:hash(sha256, Der)]),
                 Sha),
    [{'Certificate', CaDer, not_encrypted}] = public_key:pem_decode(client_ca(S)),
    ?assert(public_key:pkix_is_issuer(Der, CaDer)),
    Ca = public_key:pkix_decode_cert(CaDer, otp),
    ?assert(public_key:pkix_verify(Der, public_key(Ca))),
    Otp = public_key:pkix_decode_cert(Der, otp),
    Tbs = element(2, Otp),
    {'Validity', {utcTime, From}, {utcTime, To}} = element(6, Tbs),
    ?assertEqual(7 * 86400, utc_secs(To) - utc_secs(From)),
    Now = erlang:system_time(second) + 62167219200,
    ?assert(abs(Now - 3600 - utc_secs(From)) < 120),
    %% Each call makes a new key.
    #{sha256 := Sha2} = cbench:client_cert(S, #{cn => <<"J", 246/utf8, "rg, QA">>}),
    ?assertNotEqual(Sha, Sha2),
    cbench:stop_server(S).

%% The journal names the certificate a request's connection presented: the subject and SHA-256
%% that cbench:client_cert/2 gave; a connection without one has client_cert undefined.
journal_client_cert(Config) ->
    S = start(Config, request),
    #{subject := Subject, sha256 := Sha} = C = cbench:client_cert(S, #{cn => <<"dora">>}),
    ?assertEqual({200, false}, hello(S, cert_opts(C))),
    ?assertEqual({200, false}, hello(S, [])),
    [#{proto := h1_tls, tls := #{client_cert := Cert1}}, #{proto := h1_tls, tls := #{client_cert := Cert2}}] =
        cbench:requests(S),
    ?assertEqual(#{subject => <<"CN=dora">>, sha256 => Sha}, Cert1),
    ?assertEqual(<<"CN=dora">>, Subject),
    ?assertEqual(undefined, Cert2),
    cbench:stop_server(S).

public_key(Cert) ->
    {'OTPSubjectPublicKeyInfo', {'PublicKeyAlgorithm', _, Params}, Point} = element(8, element(2, Cert)),
    {Point, Params}.

%% "YYMMDDHHMMSSZ" as Gregorian seconds.
utc_secs([Y1, Y2, M1, M2, D1, D2, H1, H2, Mi1, Mi2, S1, S2, $Z]) ->
    calendar:datetime_to_gregorian_seconds(
      {{2000 + list_to_integer([Y1, Y2]), list_to_integer([M1, M2]), list_to_integer([D1, D2])},
       {list_to_integer([H1, H2]), list_to_integer([Mi1, Mi2]), list_to_integer([S1, S2])}}).

client_cert_errors(Config) ->
    S = start(Config, request),
    [?assertEqual({error, {bad_client_cert, E}}, cbench:client_cert(S, Opts))
     || {Opts, E} <- [{#{cn => 42}, {cn, 42, not_a_binary}},
                      {#{cn => <<>>}, {cn, <<>>, empty}},
                      {#{cn => binary:copy(<<"a">>, 65)}, {cn, binary:copy(<<"a">>, 65), too_long}},
                      {#{cn => <<"a\nb">>}, {cn, <<"a\nb">>, control_character}},
                      {#{cn => <<255>>}, {cn, <<255>>, not_utf8}},
                      {#{cn => <<"a">>, days => 3}, {days, 3, unknown_key}},
                      {[{cn, <<"a">>}], {opts, [{cn, <<"a">>}], not_a_map}}]],
    ?assertError(badarg, cbench:client_cert(not_a_server, #{})),
    %% 64 bytes is the most a common name takes.
    #{subject := <<"CN=", _:64/binary>>} = cbench:client_cert(S, #{cn => binary:copy(<<"a">>, 64)}),
    cbench:stop_server(S),
    {ok, Plain} = cbench:start_server(?config(engine, Config), #{threads => 1}),
    ?assertEqual({error, no_tls}, cbench:client_cert(Plain, #{})),
    cbench:stop_server(Plain).

%% client_auth is checked from the option table, the same on nif and port.
client_auth_option(Config) ->
    E = ?config(engine, Config),
    [?assertEqual({error, {bad_option, client_auth, V, {one_of, [none, request, require]}}},
                  cbench:start_server(E, #{tls => true, client_auth => V}))
     || V <- [maybe, 1, <<"require">>, "require"]],
    %% And the engine itself refuses what the Erlang check would let through (the port program
    %% and the NIF decode the option by the same table).
    ?assertMatch({error, {bad_option, _, _, {one_of, [none, request, require]}}},
                 engine_start(E, #{tls_client_auth => maybe})).

engine_start(nif, Map) ->
    {ok, Opts} = cbench_opts:validate(nif, #{threads => 1}),
    cbench_nif:start_nif(maps:merge(cbench_opts:engine_map(Opts), Map));
engine_start(port, Map) ->
    {ok, Opts} = cbench_opts:validate(port, #{threads => 1}),
    {ok, Port} = cbench_port:open(),
    R = cbench_port:request(Port, {start, maps:merge(cbench_opts:engine_map(Opts), Map)}, 10000),
    port_close(Port),
    R.

%% TLS 1.3: the second connection resumes with a ticket the first one received. The tickets are
%% handed over by hand ({session_tickets, manual}, {use_ticket, [T]}): with `auto', OTP 25's
%% client keeps tickets by host name and offers one of an earlier server (another port) first, so
%% the count would depend on the cases run before (docs/tls.md).
resumption_tls13(Config) ->
    S = start(Config, none),
    resume_tls13(S, []),
    ?assertEqual({1, 1}, handshakes(S)),
    cbench:stop_server(S).

resume_tls13(S, Extra) ->
    Opts = [{versions, ['tlsv1.3']}, {session_tickets, manual} | Extra],
    ?assertEqual({200, false}, hello(S, Opts)),
    %% The server sends its tickets after the handshake, before the response that hello/2 read.
    Ticket = receive {ssl, session_ticket, T} -> T after 10000 -> ct:fail(no_session_ticket) end,
    ?assertEqual({200, true}, hello(S, [{use_ticket, [Ticket]} | Opts])),
    flush_tickets().

flush_tickets() ->
    receive {ssl, session_ticket, _} -> flush_tickets() after 0 -> ok end.

%% TLS 1.2: the session of the first connection ({reuse_session, {Id, Data}}, by hand: OTP 25's
%% {reuse_sessions, true} keeps no session made under verify_none, and client_opts/1 verifies
%% nothing until cbench:client_tls_opts/1 replaces it) resumes on the second, also when the client closed the first one itself (without reading
%% the server's close_notify); the server's cache finds it by id. OTP 25's session_resumption says
%% false for TLS 1.2 even then, so the server's counters tell.
resumption_tls12(Config) ->
    S = start(Config, none),
    Opts = client_opts(S) ++ [{versions, ['tlsv1.2']}],
    {ok, A} = ssl:connect("localhost", cbench:port(S), Opts, 10000),
    {ok, [{session_id, Id}, {session_data, Data}]} = ssl:connection_information(A, [session_id, session_data]),
    ssl:close(A),
    {ok, B} = ssl:connect("localhost", cbench:port(S), Opts ++ [{reuse_session, {Id, Data}}], 10000),
    ?assertEqual({ok, [{session_id, Id}]}, ssl:connection_information(B, [session_id])),
    %% A resumed TLS 1.2 handshake ends on the server when it reads the client's Finished, after
    %% connect returned here: an answer says the server is past it.
    ok = ssl:send(B, ?REQ),
    <<"HTTP/1.1 200", _/binary>> = recv_all(B, <<>>),
    ssl:close(B),
    ?assertEqual({1, 1}, handshakes(S)),
    cbench:stop_server(S).

%% With a client certificate required, the resumed session carries it: served, counted resumed.
resumption_with_client_cert(Config) ->
    S = start(Config, require),
    resume_tls13(S, cert_opts(cbench:client_cert(S, #{cn => <<"carol">>}))),
    ?assertEqual({1, 1}, handshakes(S)),
    cbench:stop_server(S).
