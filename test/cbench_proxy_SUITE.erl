%%% @doc Proxy stubs (docs/proxy.md) through the Erlang API: a nif or port server proxying to a
%%% second cbench server answers what that server answers (bytes compared, dates masked), lists the
%%% stub back, journals the upstream and counts it, on nif, port and ehttpd (whose proxy is
%%% cbench_ehttpd_proxy, reading the answer whole, and for h2c upstreams cbench_h2_upstream, tried
%%% here against exact frames too); a bad proxy term gets the same `{error, {bad_stub, ...}}' on
%%% every engine.
-module(cbench_proxy_SUITE).

-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1]).
-export([proxy_nif/1, proxy_port/1, proxy_ehttpd/1, refused_502/1, bad_terms/1, hostile_upstream/1,
         https_nif/1, https_port/1, https_ehttpd/1, https_bad_terms/1, trailers/1,
         h2c_upstream_nif/1, h2c_upstream_port/1, h2c_upstream_ehttpd/1, h2c_hostile_upstream_ehttpd/1,
         h2c_goaway_ehttpd/1, h2_alpn_refused/1, pipeline_nif/1, pipeline_port/1, pipeline_ehttpd/1]).

all() -> [proxy_nif, proxy_port, proxy_ehttpd, refused_502, bad_terms, hostile_upstream,
          https_nif, https_port, https_ehttpd, https_bad_terms, trailers,
          h2c_upstream_nif, h2c_upstream_port, h2c_upstream_ehttpd, h2c_hostile_upstream_ehttpd,
          h2c_goaway_ehttpd, h2_alpn_refused, pipeline_nif, pipeline_port, pipeline_ehttpd].

suite() -> [{timetrap, {minutes, 2}}].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(cbench),
    Config.

end_per_suite(_Config) ->
    ok.

proxy_nif(_Config) -> proxy(nif).
proxy_port(_Config) -> proxy(port).
proxy_ehttpd(_Config) -> proxy(ehttpd).

%% The proxy on Engine, the upstream a nif server: each answer as the upstream's own.
proxy(Engine) ->
    {ok, Up} = cbench:start_server(nif, #{port => 0, threads => 1}),
    {ok, Px} = cbench:start_server(Engine, #{port => 0, threads => 1}),
    To = <<"http://127.0.0.1:", (integer_to_binary(cbench:port(Up)))/binary>>,
    {ok, Id} = cbench:stub(Px, #{path => <<"/*">>}, #{proxy => #{to => To}}),
    {ok, _} = cbench:stub(Up, <<"/up">>, #{status => 201, headers => [{<<"x-up">>, <<"1">>}],
                                          body => <<"from upstream">>}),
    [Direct, Proxied] = [exchange(P, <<"GET /up?q=1 HTTP/1.1\r\nhost: x\r\n\r\n">>)
                         || P <- [cbench:port(Up), cbench:port(Px)]],
    ?assertEqual(<<"HTTP/1.1 201 Created\r\ndate: MASK\r\nx-up: 1\r\ncontent-length: 13\r\n\r\n"
                   "from upstream">>, Proxied),
    ?assertEqual(Direct, Proxied),
    Hello = <<"HTTP/1.1 200 OK\r\ndate: MASK\r\ncontent-type: text/plain\r\ncontent-length: 11\r\n\r\n"
              "Hello, Joe!">>,
    ?assertEqual(Hello, exchange(cbench:port(Px), <<"GET /hello HTTP/1.1\r\nhost: x\r\n\r\n">>)),
    %% Listed back as given, with the defaults filled in.
    [#{id := Id, response := #{proxy := Canon}}] = cbench:stubs(Px),
    ?assertEqual(#{to => To, protocol => http1, timeout_ms => 10000, max_body_bytes => 1 bsl 30,
                   record => false, record_headers => [], record_body_file_bytes => 0,
                   record_status => [], insecure => false}, Canon),
    %% The journal has both sides; the counters the forwards.
    [_, #{status := 200, upstream := #{to := To, status := 200, error := none}}] =
        wait_entries(Px, 2),
    #{proxy_requests := 2, proxy_upstream_connects := C, proxy_upstream_reused := R,
      proxy_502 := 0, proxy_504 := 0} = cbench:stats(Px),
    ?assertEqual(2, C + R),
    head_as_upstream(Engine, Up, Px),
    ok = cbench:stop_server(Px),
    ok = cbench:stop_server(Up).

%% A proxied HEAD is answered as the upstream answers it: its head, the length it declared, no body
%% (on every engine and over both upstream protocols).
head_as_upstream(Engine, Up, Px) ->
    Req = <<"HEAD /up HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n">>,
    [Direct, Proxied] = [head_exchange(P, Req) || P <- [cbench:port(Up), cbench:port(Px)]],
    ?assertMatch(<<"HTTP/1.1 201 Created\r\ndate: MASK\r\nx-up: 1\r\n", _/binary>>, Direct),
    ?assertEqual({Engine, Direct}, {Engine, Proxied}).

head_exchange(Port, Req) ->
    {ok, S} = gen_tcp:connect({127, 0, 0, 1}, Port, [binary, {active, false}]),
    ok = gen_tcp:send(S, Req),
    Got = read_to_close(S, <<>>),
    ok = gen_tcp:close(S),
    mask(Got).

https_nif(_Config) -> https(nif).
https_port(_Config) -> https(port).
https_ehttpd(_Config) -> https(ehttpd).

%% @doc An https:// upstream (a nif server's TLS port, its CA given as ca_pem from cbench:tls/1):
%% the answers as the upstream's own over one kept TLS connection, the stub listed back with its CA;
%% without the CA a 502 whose reason is OpenSSL's (nif, port) or OTP's alert (ehttpd), journaled
%% as `tls'; `insecure' answers without it.
https(Engine) ->
    {ok, Up} = cbench:start_server(nif, #{port => 0, threads => 1, tls_port => 0}),
    #{ca_pem := Ca} = cbench:tls(Up),
    {ok, Px} = cbench:start_server(Engine, #{port => 0, threads => 1}),
    To = <<"https://localhost:", (integer_to_binary(cbench:tls_port(Up)))/binary>>,
    {ok, Id} = cbench:stub(Px, #{path => <<"/ok/*">>}, #{proxy => #{to => <<To/binary, "/">>, ca_pem => Ca}}),
    {ok, _} = cbench:stub(Px, #{path => <<"/noca/*">>}, #{proxy => #{to => To}}),
    {ok, _} = cbench:stub(Px, #{path => <<"/insecure/*">>}, #{proxy => #{to => To, insecure => true}}),
    [{ok, _} = cbench:stub(Up, #{path => P, method => any},
                           #{status => 201, headers => [{<<"x-up">>, <<"1">>}], body => <<"from upstream">>})
     || P <- [<<"/ok/up">>, <<"/insecure/up">>, <<"/h2/up">>]],
    Want = <<"HTTP/1.1 201 Created\r\ndate: MASK\r\nx-up: 1\r\ncontent-length: 13\r\n\r\nfrom upstream">>,
    {ok, S} = gen_tcp:connect({127, 0, 0, 1}, cbench:port(Px), [binary, {active, false}]),
    [begin
         ok = gen_tcp:send(S, <<"GET /ok/up HTTP/1.1\r\nhost: x\r\n\r\n">>),
         ?assertEqual({Engine, Want}, {Engine, mask(read_answer(S, <<>>))})
     end || _ <- [1, 2]],
    ok = gen_tcp:close(S),
    #{proxy_upstream_connects := 1, proxy_upstream_reused := 1} = cbench:stats(Px),
    #{tls_handshakes_full := 1} = cbench:stats(Up),
    ?assertEqual({Engine, Want}, {Engine, exchange(cbench:port(Px), <<"GET /insecure/up HTTP/1.1\r\nhost: x\r\n\r\n">>)}),
    %% protocol h2c to an https:// upstream: h2 by ALPN (ehttpd: cbench_h2_upstream over OTP ssl).
    H2 = #{proxy => #{to => To, ca_pem => Ca, protocol => h2c}},
    {ok, _} = cbench:stub(Px, #{path => <<"/h2/*">>}, H2),
    ?assertEqual({Engine, Want}, {Engine, exchange(cbench:port(Px), <<"GET /h2/up HTTP/1.1\r\nhost: x\r\n\r\n">>)}),
    #{requests_by_proto := #{h2_tls := 1}} = cbench:stats(Up),
    Why = case Engine of
              ehttpd -> <<"unknown_ca">>;
              _ -> <<"certificate verify failed: unable to get local issuer certificate">>
          end,
    Body = <<"cbench proxy: tls handshake failed: ", Why/binary, " (", To/binary, ")\n">>,
    ?assertEqual({Engine, <<"HTTP/1.1 502 Bad Gateway\r\ndate: MASK\r\ncontent-type: text/plain\r\n"
                            "content-length: ", (integer_to_binary(byte_size(Body)))/binary, "\r\n\r\n", Body/binary>>},
                 {Engine, exchange(cbench:port(Px), <<"GET /noca/x HTTP/1.1\r\nhost: x\r\n\r\n">>)}),
    [#{status := 502, upstream := #{to := To, status := 0, error := tls}} | _] =
        lists:reverse(wait_entries(Px, 5)),
    [#{response := #{proxy := #{ca_pem := Ca, insecure := false}}}] = [St || St = #{id := I} <- cbench:stubs(Px), I =:= Id],
    ok = cbench:stop_server(Px),
    ok = cbench:stop_server(Up).

%% @doc The https options' bad values: the same error on every engine.
https_bad_terms(_Config) ->
    Dir = filename:join(["/tmp", "cbench_proxy_SUITE_" ++ os:getpid()]),
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    NoCert = filename:join(Dir, "nocert.pem"),
    ok = file:write_file(NoCert, <<"not a certificate\n">>),
    T = <<"https://127.0.0.1:1">>,
    Cases = [{#{to => T, ca_pem => <<"junk">>}, {{response, proxy, ca_pem}, <<"junk">>, bad_ca}},
             {#{to => T, ca_file => <<"/nonexistent/ca.pem">>},
              {{response, proxy, ca_file}, <<"/nonexistent/ca.pem">>, bad_ca}},
             {#{to => T, ca_file => list_to_binary(NoCert)}, {{response, proxy, ca_file}, list_to_binary(NoCert), bad_ca}},
             {#{to => T, insecure => yes}, {{response, proxy, insecure}, yes, wrong_type}},
             {#{to => T, server_name => <<"a b">>}, {{response, proxy, server_name}, <<"a b">>, bad_char}},
             {#{to => T, server_name => 7}, {{response, proxy, server_name}, 7, wrong_type}},
             {#{to => <<"http://127.0.0.1:1">>, insecure => true}, {{response, proxy, insecure}, true, conflict}},
             {#{to => <<"http://127.0.0.1:1">>, ca_pem => <<"x">>}, {{response, proxy, ca_pem}, <<"x">>, conflict}},
             {#{to => <<"https://">>}, {{response, proxy, to}, <<"https://">>, bad_url}},
             %% Pipelining is cleartext HTTP/1.1's (docs/proxy.md "Pipelining").
             {#{to => T, pipeline => 2}, {{response, proxy, pipeline}, 2, conflict}},
             {#{to => T, protocol => h2c, pipeline => 64}, {{response, proxy, pipeline}, 64, conflict}}],
    [begin
         {ok, S} = cbench:start_server(Engine, #{port => 0, threads => 1}),
         [?assertEqual({Engine, P, {error, {bad_stub, Bad}}}, {Engine, P, cbench:stub(S, <<"/p">>, #{proxy => P})})
          || {P, Bad} <- Cases],
         ?assertEqual([], cbench:stubs(S)),
         ok = cbench:stop_server(S)
     end || Engine <- [nif, port, ehttpd]],
    ok = file:delete(NoCert),
    ok.

%% @doc An upstream nobody listens on: 502 with the reason, journaled as `refused', on every engine.
refused_502(_Config) ->
    {ok, L} = gen_tcp:listen(0, [{ip, {127, 0, 0, 1}}]),
    {ok, Free} = inet:port(L),
    ok = gen_tcp:close(L),
    To = <<"http://127.0.0.1:", (integer_to_binary(Free))/binary>>,
    [begin
         {ok, Px} = cbench:start_server(Engine, #{port => 0, threads => 1}),
         {ok, _} = cbench:stub(Px, #{path => <<"/*">>}, #{proxy => #{to => To, timeout_ms => 2000}}),
         Body = <<"cbench proxy: connection refused (", To/binary, ")\n">>,
         ?assertEqual(<<"HTTP/1.1 502 Bad Gateway\r\ndate: MASK\r\ncontent-type: text/plain\r\n"
                        "content-length: ", (integer_to_binary(byte_size(Body)))/binary, "\r\n\r\n",
                        Body/binary>>,
                      exchange(cbench:port(Px), <<"GET /x HTTP/1.1\r\nhost: x\r\n\r\n">>)),
         [#{status := 502, upstream := #{to := To, status := 0, error := refused}}] = wait_entries(Px, 1),
         #{proxy_502 := 1} = cbench:stats(Px),
         ok = cbench:stop_server(Px)
     end || Engine <- [nif, port, ehttpd]],
    ok.

%% @doc A raw-socket upstream on every engine: the request it gets (method, target, hop-by-hop
%% fields gone, host rewritten, the x-forwarded-* fields, the body), then answers that must become
%% a 502 with its reason (garbage, a 101, a head over 64 KiB, a body over max_body_bytes) or a 504
%% (silence past timeout_ms); each journaled with its reason.
hostile_upstream(_Config) ->
    {ok, L} = gen_tcp:listen(0, [binary, {active, false}, {ip, {127, 0, 0, 1}}, {reuseaddr, true}]),
    {ok, UpPort} = inet:port(L),
    To = <<"http://127.0.0.1:", (integer_to_binary(UpPort))/binary>>,
    Cases = [{ok, <<"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok">>, 200, none},
             {garbage, <<"SMTP ready\r\n\r\n">>, 502, bad_response},
             {switch, <<"HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\nconnection: upgrade\r\n\r\n">>, 502,
              bad_response},
             {big_head, [<<"HTTP/1.1 200 OK\r\n">>, lists:duplicate(2000, <<"x-pad: 0123456789012345678901234567890123456789\r\n">>), <<"\r\n">>],
              502, head_too_big},
             {big_body, <<"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n">>, 502, body_too_big},
             {silent, <<>>, 504, timeout}],
    [begin
         {ok, Px} = cbench:start_server(Engine, #{port => 0, threads => 1}),
         {ok, _} = cbench:stub(Px, #{path => <<"/*">>, method => any},
                               #{proxy => #{to => To, timeout_ms => 500, max_body_bytes => 10}}),
         [begin
              Self = self(),
              Up = spawn_link(fun() ->
                                      {ok, A} = gen_tcp:accept(L, 5000),
                                      %% The head and the 3 body bytes may come in more than one read.
                                      Self ! {forwarded, recv_request(A, <<>>)},
                                      ok = gen_tcp:send(A, Answer),
                                      receive stop -> gen_tcp:close(A) end
                              end),
              Got = exchange(cbench:port(Px), <<"POST /in?a=1 HTTP/1.1\r\nhost: front.example\r\n"
                                                 "connection: keep-alive, x-hop\r\nx-hop: 1\r\nx-keep: 2\r\n"
                                                 "content-length: 3\r\n\r\nabc">>),
              Forwarded = receive {forwarded, F} -> F after 5000 -> none end,
              Up ! stop,
              %% The C engines send the upstream's own host once; the fields in the client's order.
              {match, _} = re:run(Forwarded, <<"^POST /in\\?a=1 HTTP/1.1\r\n">>),
              nomatch = re:run(Forwarded, <<"x-hop|keep-alive|front.example\r\nhost">>),
              [{match, _} = re:run(Forwarded, F) || F <- [<<"\r\nhost: 127.0.0.1:", (integer_to_binary(UpPort))/binary, "\r\n">>,
                                                         <<"\r\nx-keep: 2\r\n">>, <<"\r\nx-forwarded-for: 127.0.0.1\r\n">>,
                                                         <<"\r\nx-forwarded-proto: http\r\n">>,
                                                         <<"\r\nx-forwarded-host: front.example\r\n">>,
                                                         <<"\r\ncontent-length: 3\r\n">>, <<"\r\n\r\nabc$">>]],
              Status = binary_to_integer(binary:part(Got, 9, 3)),
              ?assertEqual({Engine, Name, Want}, {Engine, Name, Status}),
              case Why of
                  none -> ok;
                  _ ->
                      Text = case Why of
                                 bad_response -> <<"bad response">>;
                                 head_too_big -> <<"response head too big">>;
                                 body_too_big -> <<"response body too big">>;
                                 timeout -> <<"timeout">>
                             end,
                      ?assertEqual({Engine, Name, <<"cbench proxy: ", Text/binary, " (", To/binary, ")\n">>},
                                   {Engine, Name, lists:last(binary:split(Got, <<"\r\n\r\n">>))})
              end,
              [#{upstream := #{error := Why}} | _] = lists:reverse(wait_entries(Px, length(cbench:requests(Px)))),
              unlink(Up)
          end || {Name, Answer, Want, Why} <- Cases],
         ok = cbench:stop_server(Px)
     end || Engine <- [nif, port, ehttpd]],
    ok = gen_tcp:close(L).

%% @doc A chunked answer's trailer fields reach an HTTP/1.1 client after the last chunk, the same
%% bytes on every engine: hop-by-hop and framing fields (`content-length') left out, names as the
%% upstream sent them. (The C engines stream the chunks as they come; ehttpd reads the answer whole
%% and sends its body as one chunk: with one chunk upstream, the bytes are the same.)
trailers(_Config) ->
    {ok, L} = gen_tcp:listen(0, [binary, {active, false}, {ip, {127, 0, 0, 1}}, {reuseaddr, true}]),
    {ok, UpPort} = inet:port(L),
    To = <<"http://127.0.0.1:", (integer_to_binary(UpPort))/binary>>,
    Answer = <<"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntrailer: x-t\r\n\r\n3\r\nabc\r\n"
               "0\r\nx-t: 1\r\nX-Up:  2 \r\ncontent-length: 9\r\nconnection: close\r\n\r\n">>,
    Want = <<"HTTP/1.1 200 OK\r\ndate: MASK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
             "3\r\nabc\r\n0\r\nx-t: 1\r\nX-Up: 2\r\n\r\n">>,
    [begin
         {ok, Px} = cbench:start_server(Engine, #{port => 0, threads => 1}),
         {ok, _} = cbench:stub(Px, #{path => <<"/*">>}, #{proxy => #{to => To, timeout_ms => 5000}}),
         Up = spawn_link(fun() ->
                                 {ok, A} = gen_tcp:accept(L, 5000),
                                 {ok, _} = gen_tcp:recv(A, 0, 5000),
                                 ok = gen_tcp:send(A, Answer),
                                 receive stop -> gen_tcp:close(A) end
                         end),
         {ok, S} = gen_tcp:connect({127, 0, 0, 1}, cbench:port(Px), [binary, {active, false}]),
         ok = gen_tcp:send(S, <<"GET /t HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n">>),
         Got = re:replace(read_to_close(S, <<>>), <<"\r\ndate: [^\r]+\r\n">>, <<"\r\ndate: MASK\r\n">>,
                          [{return, binary}]),
         ?assertEqual({Engine, Want}, {Engine, Got}),
         Up ! stop,
         unlink(Up),
         ok = cbench:stop_server(Px)
     end || Engine <- [nif, port, ehttpd]],
    ok = gen_tcp:close(L).

read_to_close(S, Acc) ->
    case gen_tcp:recv(S, 0, 5000) of
        {ok, More} -> read_to_close(S, <<Acc/binary, More/binary>>);
        {error, closed} -> Acc
    end.

%% @doc Bad proxy terms: the same error on every engine.
bad_terms(_Config) ->
    Cases = [{#{proxy => #{}}, {{response, proxy, to}, undefined, missing}},
             {#{proxy => #{to => <<"ftp://h:1">>}}, {{response, proxy, to}, <<"ftp://h:1">>, bad_url}},
             {#{proxy => #{to => <<"http://127.0.0.1:0">>}},
              {{response, proxy, to}, <<"http://127.0.0.1:0">>, bad_url}},
             {#{proxy => #{to => <<"http://no-such-host.invalid">>}},
              {{response, proxy, to}, <<"http://no-such-host.invalid">>, bad_url}},
             {#{proxy => #{to => <<"http://a b">>}}, {{response, proxy, to}, <<"http://a b">>, bad_char}},
             {#{proxy => #{to => 42}}, {{response, proxy, to}, 42, wrong_type}},
             {#{proxy => #{to => <<"http://127.0.0.1:1">>, protocol => h3}},
              {{response, proxy, protocol}, h3, out_of_range}},
             {#{proxy => #{to => <<"http://127.0.0.1:1">>, timeout_ms => 0}},
              {{response, proxy, timeout_ms}, 0, out_of_range}},
             {#{proxy => #{to => <<"http://127.0.0.1:1">>, record => yes}},
              {{response, proxy, record}, yes, wrong_type}},
             {#{proxy => #{to => <<"http://127.0.0.1:1">>, record_headers => [<<"a b">>]}},
              {{response, proxy, record_headers}, <<"a b">>, not_a_token}},
             {#{proxy => #{to => <<"http://127.0.0.1:1">>, record_status => [99]}},
              {{response, proxy, record_status}, 99, out_of_range}},
             {#{proxy => #{to => <<"http://127.0.0.1:1">>, pipeline => 65}},
              {{response, proxy, pipeline}, 65, out_of_range}},
             {#{proxy => #{to => <<"http://127.0.0.1:1">>, pipeline => -1}},
              {{response, proxy, pipeline}, -1, out_of_range}},
             {#{proxy => #{to => <<"http://127.0.0.1:1">>, pipeline => four}},
              {{response, proxy, pipeline}, four, wrong_type}},
             {#{proxy => #{to => <<"http://127.0.0.1:1">>, pipeline => 2.0}},
              {{response, proxy, pipeline}, 2.0, wrong_type}},
             {#{proxy => #{to => <<"http://127.0.0.1:1">>, protocol => h2c, pipeline => 2}},
              {{response, proxy, pipeline}, 2, conflict}},
             {#{proxy => #{to => <<"http://127.0.0.1:1">>, color => red}},
              {{response, proxy, color}, red, unknown_key}},
             {#{proxy => #{to => <<"http://127.0.0.1:1">>}, status => 200},
              {{response, status}, 200, conflict}},
             {#{proxy => #{to => <<"http://127.0.0.1:1">>}, fault => drip},
              {{response, fault}, drip, conflict}},
             {#{proxy => not_a_map}, {{response, proxy}, not_a_map, wrong_type}},
             {#{responses => [#{proxy => #{to => <<"http://127.0.0.1:1">>}}]},
              {{response, proxy}, #{to => <<"http://127.0.0.1:1">>}, conflict}}],
    [begin
         {ok, S} = cbench:start_server(Engine, #{port => 0, threads => 1}),
         [?assertEqual({Engine, R, {error, {bad_stub, Bad}}}, {Engine, R, cbench:stub(S, <<"/p">>, R)})
          || {R, Bad} <- Cases],
         ?assertEqual([], cbench:stubs(S)),
         ok = cbench:stop_server(S)
     end || Engine <- [nif, port, ehttpd]],
    ok.

pipeline_nif(_Config) -> pipeline(nif).
pipeline_port(_Config) -> pipeline(port).
pipeline_ehttpd(_Config) -> pipeline(ehttpd).

%% @doc `pipeline' (docs/proxy.md "Pipelining") on Engine: 0, 1, 2 and 64 are taken with an http://
%% upstream over http1, 0 and 1 with h2c or an https:// one too; the stub list shows it above 1 only,
%% so that a stub with 0 or 1 is listed as one without it. A stub with pipeline 4 answers what the
%% upstream answers, one request after another on one client connection (a GET, a POST with a body,
%% a GET again) and a HEAD; which requests go pipelined is the engine's, not looked at here.
pipeline(Engine) ->
    {ok, Up} = cbench:start_server(nif, #{port => 0, threads => 1}),
    {ok, Px} = cbench:start_server(Engine, #{port => 0, threads => 1}),
    To = <<"http://127.0.0.1:", (integer_to_binary(cbench:port(Up)))/binary>>,
    Given = [#{to => To, pipeline => 0}, #{to => To, pipeline => 1}, #{to => To, pipeline => 2},
             #{to => To, pipeline => 64}, #{to => To, protocol => h2c, pipeline => 1},
             #{to => <<"https://127.0.0.1:1">>, pipeline => 0}],
    Added = [begin
                 {ok, Id} = cbench:stub(Px, #{path => <<"/given/", (integer_to_binary(I))/binary>>}, #{proxy => P}),
                 {Id, P}
             end || {I, P} <- lists:enumerate(Given)],
    Listed = maps:from_list([{Id, P} || #{id := Id, response := #{proxy := P}} <- cbench:stubs(Px)]),
    [begin
         {ok, #{proxy := Without}} = cbench_spec:response(#{proxy => maps:remove(pipeline, P)}),
         Want = case P of
                    #{pipeline := N} when N > 1 -> Without#{pipeline => N};
                    _ -> Without
                end,
         ?assertEqual({Engine, P, Want}, {Engine, P, maps:get(Id, Listed)})
     end || {Id, P} <- Added],
    [{_, #{pipeline := 2}}, {_, #{pipeline := 64}}] =
        [{Id, L} || {Id, L} <- maps:to_list(Listed), is_map_key(pipeline, L)],
    {ok, Id4} = cbench:stub(Px, #{path => <<"/*">>, method => any}, #{proxy => #{to => To, pipeline => 4}}),
    {ok, _} = cbench:stub(Up, #{path => <<"/up">>, method => any},
                          #{status => 201, headers => [{<<"x-up">>, <<"1">>}], body => <<"from upstream">>}),
    Reqs = [<<"GET /up?q=1 HTTP/1.1\r\nhost: x\r\n\r\n">>,
            <<"POST /up HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\n\r\nabc">>,
            <<"GET /up HTTP/1.1\r\nhost: x\r\n\r\n">>],
    Direct = [exchange(cbench:port(Up), R) || R <- Reqs],
    ?assertMatch([<<"HTTP/1.1 201 Created\r\n", _/binary>> | _], Direct),
    {ok, S} = gen_tcp:connect({127, 0, 0, 1}, cbench:port(Px), [binary, {active, false}]),
    Proxied = [begin ok = gen_tcp:send(S, R), mask(read_answer(S, <<>>)) end || R <- Reqs],
    ok = gen_tcp:close(S),
    ?assertEqual({Engine, Direct}, {Engine, Proxied}),
    head_as_upstream(Engine, Up, Px),
    [#{response := #{proxy := #{pipeline := 4}}}] = [St || St = #{id := I} <- cbench:stubs(Px), I =:= Id4],
    #{proxy_requests := 4, proxy_502 := 0, proxy_504 := 0} = cbench:stats(Px),
    ok = cbench:stop_server(Px),
    ok = cbench:stop_server(Up).

h2c_upstream_nif(_Config) -> h2c_upstream(nif).
h2c_upstream_port(_Config) -> h2c_upstream(port).
h2c_upstream_ehttpd(_Config) -> h2c_upstream(ehttpd).

%% A proxy stub with `protocol => h2c': the upstream (a nif server) is spoken to over prior-knowledge
%% HTTP/2, and the answers are what it answers over HTTP/1.1 itself (bytes compared, dates masked);
%% a 200,000-byte body echoed (over the upstream's 65,535-byte windows: the proxy's DATA waits for
%% its WINDOW_UPDATEs) and a GET on one kept client connection; the stub is listed back with its
%% protocol, and the upstream counts h2c requests only. The C engines pool upstream connections
%% per worker (one for all five requests); ehttpd keeps one per client connection (three).
h2c_upstream(Engine) ->
    {ok, Up} = cbench:start_server(nif, #{port => 0, threads => 1}),
    {ok, Px} = cbench:start_server(Engine, #{port => 0, threads => 1}),
    To = <<"http://127.0.0.1:", (integer_to_binary(cbench:port(Up)))/binary>>,
    {ok, Id} = cbench:stub(Px, #{path => <<"/*">>, method => any}, #{proxy => #{to => To, protocol => h2c}}),
    {ok, _} = cbench:stub(Up, #{path => <<"/up">>, method => any},
                          #{status => 201, headers => [{<<"x-up">>, <<"1">>}], body => <<"from upstream">>}),
    [Direct, Proxied] = [exchange(P, <<"GET /up?q=1 HTTP/1.1\r\nhost: x\r\n\r\n">>)
                         || P <- [cbench:port(Up), cbench:port(Px)]],
    ?assertEqual(<<"HTTP/1.1 201 Created\r\ndate: MASK\r\nx-up: 1\r\ncontent-length: 13\r\n\r\n"
                   "from upstream">>, Proxied),
    ?assertEqual(Direct, Proxied),
    ?assertEqual(<<"HTTP/1.1 200 OK\r\ndate: MASK\r\ncontent-type: application/octet-stream\r\n"
                   "content-length: 5\r\n\r\nhello">>,
                 exchange(cbench:port(Px), <<"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\n"
                                             "hello">>)),
    Big = << <<(I rem 251)>> || I <- lists:seq(1, 200000) >>,
    {ok, S} = gen_tcp:connect({127, 0, 0, 1}, cbench:port(Px), [binary, {active, false}]),
    ok = gen_tcp:send(S, [<<"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 200000\r\n\r\n">>, Big]),
    ?assertEqual({Engine, <<"HTTP/1.1 200 OK\r\ndate: MASK\r\ncontent-type: application/octet-stream\r\n"
                            "content-length: 200000\r\n\r\n", Big/binary>>},
                 {Engine, mask(read_answer(S, <<>>))}),
    ok = gen_tcp:send(S, <<"GET /up HTTP/1.1\r\nhost: x\r\n\r\n">>),
    ?assertEqual({Engine, Proxied}, {Engine, mask(read_answer(S, <<>>))}),
    ok = gen_tcp:close(S),
    [#{id := Id, response := #{proxy := #{protocol := h2c, to := To}}}] = cbench:stubs(Px),
    [_, #{status := 200, upstream := #{to := To, status := 200, error := none}}, _, _] = wait_entries(Px, 4),
    {Connects, Reused} = case Engine of ehttpd -> {3, 1}; _ -> {1, 3} end,
    ?assertMatch({Engine, #{proxy_requests := 4, proxy_upstream_connects := Connects,
                            proxy_upstream_reused := Reused, proxy_502 := 0}}, {Engine, cbench:stats(Px)}),
    #{requests_by_proto := #{h2c_prior := 4, http1 := 1}} = cbench:stats(Up),
    head_as_upstream(Engine, Up, Px),
    ok = cbench:stop_server(Px),
    ok = cbench:stop_server(Up).

%% @doc ehttpd's HTTP/2 client against a raw-socket upstream that writes exact frames: the request
%% it gets (preface, SETTINGS, the header block decoded: pseudo-fields, the fields forwarded in
%% HTTP/2's form, then the body as DATA), then answers that must pass through (an interim 103, a
%% padded DATA, a PING answered, trailer fields) or become a 502 with their reason (bytes that are
%% not HTTP/2, no SETTINGS first, a bad HPACK index, a PUSH_PROMISE, RST_STREAM, 129 fields, a
%% header block of 80 KiB, a content-length or DATA over max_body_bytes, a GOAWAY covering the
%% stream then the close) or a 504 (silence past timeout_ms); each journaled with its reason, and
%% the client's GOAWAY code after a protocol error (COMPRESSION_ERROR for the bad index).
h2c_hostile_upstream_ehttpd(_Config) ->
    {ok, L} = gen_tcp:listen(0, [binary, {active, false}, {ip, {127, 0, 0, 1}}, {reuseaddr, true}]),
    {ok, UpPort} = inet:port(L),
    To = <<"http://127.0.0.1:", (integer_to_binary(UpPort))/binary>>,
    {ok, Px} = cbench:start_server(ehttpd, #{port => 0, threads => 1}),
    {ok, _} = cbench:stub(Px, #{path => <<"/*">>, method => any},
                          #{proxy => #{to => To, protocol => h2c, timeout_ms => 500, max_body_bytes => 10}}),
    S = h2f(4, 0, 0, <<>>),
    Ok = h2f(1, 4, 1, <<16#88, 0, 3, "x-a", 1, "1">>),
    Pad = h2f(0, 8, 1, <<3, "he", 0, 0, 0>>),
    Cases = [{ok, [S, h2f(1, 4, 1, <<16#08, 3, "103">>), Ok, Pad, h2f(6, 0, 0, <<"pingpong">>),
                   h2f(0, 0, 1, <<"llo">>), h2f(1, 5, 1, <<0, 3, "x-t", 1, "1">>)], 200, none, none},
             {garbage, <<"SMTP ready\r\n\r\n">>, 502, bad_response, 6},
             {no_settings, [Ok, h2f(0, 1, 1, <<"x">>)], 502, bad_response, 1},
             {bad_index, [S, h2f(1, 5, 1, <<16#80>>)], 502, bad_response, 9},
             {push_promise, [S, h2f(5, 4, 1, <<0, 0, 0, 2, 16#82>>)], 502, bad_response, 1},
             {rst_stream, [S, h2f(3, 0, 1, <<2:32>>)], 502, reset, none},
             {many_fields, [S, h2f(1, 5, 1, [16#88 | lists:duplicate(129, <<0, 1, "x", 1, "1">>)])], 502,
              head_too_big, none},
             {big_block, [S, h2f(1, 0, 1, <<0:16384/unit:8>>) | lists:duplicate(4, h2f(9, 0, 1, <<0:16384/unit:8>>))],
              502, head_too_big, none},
             {big_length, [S, h2f(1, 4, 1, <<16#88, 16#0f, 16#0d, 3, "100">>)], 502, body_too_big, none},
             {big_data, [S, h2f(1, 4, 1, <<16#88>>), h2f(0, 0, 1, <<0:11/unit:8>>)], 502, body_too_big, none},
             {goaway_cut, [S, h2f(1, 4, 1, <<16#88>>), h2f(0, 0, 1, <<"ab">>), h2f(7, 0, 0, <<1:32, 0:32>>)],
              502, truncated, none},
             {silent, [S], 504, timeout, none}],
    [begin
         Self = self(),
         Up = spawn_link(fun() ->
                                 {ok, A} = gen_tcp:accept(L, 5000),
                                 Self ! {forwarded, h2_request(A)},
                                 ok = gen_tcp:send(A, Answer),
                                 %% goaway_cut: the upstream closes after its GOAWAY.
                                 _ = Name =:= goaway_cut andalso gen_tcp:shutdown(A, write),
                                 %% Then what the client sends back, until it closes.
                                 Self ! {after_answer, h2_frames(read_until_closed(A, <<>>, 1000))},
                                 receive stop -> gen_tcp:close(A) end
                         end),
         {ok, C} = gen_tcp:connect({127, 0, 0, 1}, cbench:port(Px), [binary, {active, false}]),
         ok = gen_tcp:send(C, <<"POST /in?a=1 HTTP/1.1\r\nhost: front.example\r\nconnection: keep-alive, x-hop\r\n"
                                "x-hop: 1\r\nX-Keep: 2\r\nte: trailers\r\ncontent-length: 3\r\n\r\nabc">>),
         Got = mask(case Name of ok -> read_chunked(C, <<>>); _ -> read_answer(C, <<>>) end),
         ok = gen_tcp:close(C),
         Forwarded = receive {forwarded, F} -> F after 5000 -> none end,
         ?assertEqual({Name, [{<<":method">>, <<"POST">>}, {<<":scheme">>, <<"http">>},
                              {<<":authority">>, <<"127.0.0.1:", (integer_to_binary(UpPort))/binary>>},
                              {<<":path">>, <<"/in?a=1">>}, {<<"x-keep">>, <<"2">>}, {<<"content-length">>, <<"3">>},
                              {<<"x-forwarded-for">>, <<"127.0.0.1">>}, {<<"x-forwarded-proto">>, <<"http">>},
                              {<<"x-forwarded-host">>, <<"front.example">>}], <<"abc">>},
                      {Name, element(1, Forwarded), element(2, Forwarded)}),
         Want = case Name of
                    ok -> <<"HTTP/1.1 200 OK\r\ndate: MASK\r\nx-a: 1\r\ntransfer-encoding: chunked\r\n\r\n"
                            "5\r\nhello\r\n0\r\nx-t: 1\r\n\r\n">>;
                    _ ->
                        Body = <<"cbench proxy: ", (cbench_ehttpd_proxy:why_text(Why))/binary, " (", To/binary, ")\n">>,
                        <<"HTTP/1.1 ", (integer_to_binary(Status))/binary,
                           (case Status of 502 -> <<" Bad Gateway">>; 504 -> <<" Gateway Timeout">> end)/binary,
                           "\r\ndate: MASK\r\ncontent-type: text/plain\r\ncontent-length: ",
                           (integer_to_binary(byte_size(Body)))/binary, "\r\n\r\n", Body/binary>>
                end,
         ?assertEqual({Name, Want}, {Name, Got}),
         Back = receive {after_answer, Fs} -> Fs after 5000 -> none end,
         %% The upstream's SETTINGS acknowledged; its PING answered; after a protocol error a
         %% GOAWAY with the error's code.
         ?assertEqual({Name, true}, {Name, Name =:= garbage orelse Name =:= no_settings
                                               orelse lists:member({4, 1, 0, <<>>}, Back)}),
         ?assertEqual({Name, Name =:= ok}, {Name, lists:member({6, 1, 0, <<"pingpong">>}, Back)}),
         ?assertEqual({Name, Code}, {Name, case [C0 || {7, 0, 0, <<_:32, C0:32>>} <- Back] of
                                               [C1] when C1 =/= 0 -> C1;
                                               _ -> none
                                           end}),
         Up ! stop,
         unlink(Up),
         [#{upstream := #{error := Why}} | _] = lists:reverse(wait_entries(Px, length(cbench:requests(Px))))
     end || {Name, Answer, Status, Why, Code} <- Cases],
    ok = cbench:stop_server(Px),
    ok = gen_tcp:close(L).

%% @doc ehttpd's kept h2c connection and GOAWAY: a second request on the same client connection goes
%% as stream 3 on the same upstream connection; a GOAWAY whose last stream id (1) is below it means
%% the upstream did not process it, so it goes once more as stream 1 on a new connection. On a new
%% connection too, a GOAWAY (last stream 0) sends the request once more on another; a second
%% GOAWAY there is a 502 reset. RST_STREAM with REFUSED_STREAM before any answer is retried the
%% same way. Each answer that came is counted as one connect.
h2c_goaway_ehttpd(_Config) ->
    {ok, L} = gen_tcp:listen(0, [binary, {active, false}, {ip, {127, 0, 0, 1}}, {reuseaddr, true}]),
    {ok, UpPort} = inet:port(L),
    To = <<"http://127.0.0.1:", (integer_to_binary(UpPort))/binary>>,
    {ok, Px} = cbench:start_server(ehttpd, #{port => 0, threads => 1}),
    {ok, _} = cbench:stub(Px, #{path => <<"/*">>}, #{proxy => #{to => To, protocol => h2c, timeout_ms => 2000}}),
    S = h2f(4, 0, 0, <<>>),
    Answer = fun(Text) -> [h2f(1, 4, 1, <<16#88>>), h2f(0, 1, 1, Text)] end,
    GoAway0 = [S, h2f(7, 0, 0, <<0:32, 0:32>>)],
    Self = self(),
    Up = spawn_link(
           fun() ->
                   {ok, A} = gen_tcp:accept(L, 5000),
                   {1, <<"/a">>} = h2_request(A),
                   ok = gen_tcp:send(A, [S, Answer(<<"one">>)]),
                   Second = h2_request(A),
                   ok = gen_tcp:send(A, h2f(7, 0, 0, <<1:32, 0:32>>)),
                   Again = [begin
                                {ok, B} = gen_tcp:accept(L, 5000),
                                Got = h2_request(B),
                                ok = gen_tcp:send(B, Send),
                                Got
                            end || Send <- [[S, Answer(<<"two">>)], GoAway0, [S, Answer(<<"three">>)], GoAway0,
                                            GoAway0, [S, h2f(3, 0, 1, <<7:32>>)], [S, Answer(<<"four">>)]]],
                   Self ! {streams, [Second | Again]},
                   receive stop -> ok end
           end),
    Ok = fun(Text) -> <<"HTTP/1.1 200 OK\r\ndate: MASK\r\ncontent-length: ",
                        (integer_to_binary(byte_size(Text)))/binary, "\r\n\r\n", Text/binary>> end,
    {ok, K} = gen_tcp:connect({127, 0, 0, 1}, cbench:port(Px), [binary, {active, false}]),
    [begin
         ok = gen_tcp:send(K, <<"GET /", Path/binary, " HTTP/1.1\r\nhost: x\r\n\r\n">>),
         ?assertEqual(Want, mask(read_answer(K, <<>>)))
     end || {Path, Want} <- [{<<"a">>, Ok(<<"one">>)}, {<<"b">>, Ok(<<"two">>)}]],
    ok = gen_tcp:close(K),
    ?assertEqual(Ok(<<"three">>), exchange(cbench:port(Px), <<"GET /c HTTP/1.1\r\nhost: x\r\n\r\n">>)),
    Body = <<"cbench proxy: connection reset (", To/binary, ")\n">>,
    ?assertEqual(<<"HTTP/1.1 502 Bad Gateway\r\ndate: MASK\r\ncontent-type: text/plain\r\ncontent-length: ",
                   (integer_to_binary(byte_size(Body)))/binary, "\r\n\r\n", Body/binary>>,
                 exchange(cbench:port(Px), <<"GET /d HTTP/1.1\r\nhost: x\r\n\r\n">>)),
    %% RST_STREAM REFUSED_STREAM before any answer: not processed either, so sent once more.
    ?assertEqual(Ok(<<"four">>), exchange(cbench:port(Px), <<"GET /e HTTP/1.1\r\nhost: x\r\n\r\n">>)),
    %% The streams the upstream saw after the first: /b as stream 3, then as 1 on a new connection.
    receive {streams, Streams} ->
            ?assertEqual([{3, <<"/b">>}, {1, <<"/b">>}, {1, <<"/c">>}, {1, <<"/c">>}, {1, <<"/d">>}, {1, <<"/d">>},
                          {1, <<"/e">>}, {1, <<"/e">>}], Streams)
    after 5000 -> ct:fail(no_upstream_report)
    end,
    [#{status := 200}, #{status := 200}, #{status := 200}, #{status := 502, upstream := #{error := reset}},
     #{status := 200}] = wait_entries(Px, 5),
    #{proxy_upstream_connects := 4, proxy_upstream_reused := 0, proxy_502 := 1} = cbench:stats(Px),
    Up ! stop,
    ok = cbench:stop_server(Px),
    ok = gen_tcp:close(L).

%% @doc protocol h2c to an https:// upstream that does not choose h2 by ALPN, on every engine: one
%% that speaks HTTP/1.1 only refuses the offer (its no_application_protocol alert: OpenSSL's words
%% on nif and port, OTP's alert name on ehttpd), one without ALPN completes the handshake without
%% choosing; each a 502 journaled as `tls'.
h2_alpn_refused(_Config) ->
    Certs = cbench_certs:new(),
    #{ca_pem := Ca} = cbench_certs:tls_info(Certs),
    Base = cbench_certs:ssl_opts(Certs, none, none, [<<"http/1.1">>]),
    Ups = [begin
               {ok, L} = ssl:listen(0, [binary, {active, false}, {ip, {127, 0, 0, 1}}, {reuseaddr, true} | Opts]),
               {ok, {_, P}} = ssl:sockname(L),
               Pid = spawn_link(fun() -> tls_acceptor(L, []) end),
               {Name, L, Pid, <<"https://localhost:", (integer_to_binary(P))/binary>>}
           end || {Name, Opts} <- [{h1_only, Base}, {no_alpn, lists:keydelete(alpn_preferred_protocols, 1, Base)}]],
    [begin
         {ok, Px} = cbench:start_server(Engine, #{port => 0, threads => 1}),
         [begin
              {ok, _} = cbench:stub(Px, #{path => <<"/", (atom_to_binary(Name))/binary>>},
                                    #{proxy => #{to => To, ca_pem => Ca, protocol => h2c, timeout_ms => 5000}}),
              Why = case {Name, Engine} of
                        {h1_only, ehttpd} -> <<"no_application_protocol">>;
                        {h1_only, _} -> <<"tlsv1 alert no application protocol">>;
                        {no_alpn, _} -> <<"the upstream did not choose h2 by ALPN">>
                    end,
              Body = <<"cbench proxy: tls handshake failed: ", Why/binary, " (", To/binary, ")\n">>,
              ?assertEqual({Engine, Name, <<"HTTP/1.1 502 Bad Gateway\r\ndate: MASK\r\ncontent-type: text/plain\r\n"
                                            "content-length: ", (integer_to_binary(byte_size(Body)))/binary,
                                            "\r\n\r\n", Body/binary>>},
                           {Engine, Name, exchange(cbench:port(Px), <<"GET /", (atom_to_binary(Name))/binary,
                                                                      " HTTP/1.1\r\nhost: x\r\n\r\n">>)}),
              [#{status := 502, upstream := #{to := To, status := 0, error := tls}} | _] =
                  lists:reverse(wait_entries(Px, length(cbench:requests(Px))))
          end || {Name, _, _, To} <- Ups],
         ok = cbench:stop_server(Px)
     end || Engine <- [nif, port, ehttpd]],
    [begin unlink(Pid), exit(Pid, kill), ssl:close(L) end || {_, L, Pid, _} <- Ups],
    ok.

%% Accepts TLS connections on L and tries their handshakes one after another, holding the sockets.
tls_acceptor(L, Held) ->
    case ssl:transport_accept(L, 30000) of
        {ok, T} ->
            case ssl:handshake(T, 5000) of
                {ok, S} -> tls_acceptor(L, [S | Held]);
                _ -> tls_acceptor(L, Held)
            end;
        _ -> ok
    end.

%% An HTTP/2 frame (RFC 9113 4.1).
h2f(Type, Flags, Id, Payload) ->
    P = iolist_to_binary(Payload),
    <<(byte_size(P)):24, Type, Flags, 0:1, Id:31, P/binary>>.

%% The client's preface and frames up to its stream's END_STREAM: the header block decoded (all
%% its fields) and the body; for h2c_goaway_ehttpd, the stream id and :path instead.
h2_request(A) -> h2_request(A, <<>>, [], <<>>).

h2_request(A, Buf, Block, Body) ->
    case Buf of
        <<"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", Rest/binary>> -> h2_request(A, Rest, Block, Body);
        <<Len:24, Type, Flags, _:1, Id:31, P:Len/binary, Rest/binary>> ->
            Block1 = case Type of 1 -> P; 9 -> <<Block/binary, P/binary>>; _ -> Block end,
            Body1 = case Type of 0 -> <<Body/binary, P/binary>>; _ -> Body end,
            case Type =< 1 andalso Flags band 1 =:= 1 of
                true ->
                    {ok, Fields, _} = cbench_hpack:decode(Block1, cbench_hpack:new_decoder(4096), {128, 65536}),
                    case lists:keyfind(<<"x-keep">>, 1, Fields) of
                        false -> {Id, element(2, lists:keyfind(<<":path">>, 1, Fields))};
                        _ -> {Fields, Body1}
                    end;
                false -> h2_request(A, Rest, Block1, Body1)
            end;
        _ ->
            {ok, More} = gen_tcp:recv(A, 0, 5000),
            h2_request(A, <<Buf/binary, More/binary>>, Block, Body)
    end.

%% Frames in Bin as {Type, Flags, Id, Payload}.
h2_frames(<<Len:24, Type, Flags, _:1, Id:31, P:Len/binary, Rest/binary>>) -> [{Type, Flags, Id, P} | h2_frames(Rest)];
h2_frames(_) -> [].

read_until_closed(A, Acc, Ms) ->
    case gen_tcp:recv(A, 0, Ms) of
        {ok, More} -> read_until_closed(A, <<Acc/binary, More/binary>>, Ms);
        {error, _} -> Acc
    end.

%% A chunked answer, up to its last chunk and trailer fields.
read_chunked(S, Acc) ->
    case binary:match(Acc, <<"\r\n0\r\n">>) =/= nomatch
        andalso binary:longest_common_suffix([Acc, <<"\r\n\r\n">>]) =:= 4 of
        true -> Acc;
        false ->
            {ok, B} = gen_tcp:recv(S, 0, 10000),
            read_chunked(S, <<Acc/binary, B/binary>>)
    end.

%%% Helpers

%% A request with a 3-byte body, read whole: the head, then 3 bytes after it.
recv_request(A, Acc) ->
    case binary:split(Acc, <<"\r\n\r\n">>) of
        [_, Body] when byte_size(Body) >= 3 -> Acc;
        _ ->
            case gen_tcp:recv(A, 0, 5000) of
                {ok, More} -> recv_request(A, <<Acc/binary, More/binary>>);
                {error, _} -> Acc
            end
    end.

%% One request on a new connection; the whole answer (read until it is complete by its
%% content-length), date masked.
exchange(Port, Req) ->
    {ok, S} = gen_tcp:connect({127, 0, 0, 1}, Port, [binary, {active, false}]),
    ok = gen_tcp:send(S, Req),
    Got = read_answer(S, <<>>),
    ok = gen_tcp:close(S),
    mask(Got).

mask(Got) ->
    re:replace(Got, <<"\r\ndate: [^\r]+\r\n">>, <<"\r\ndate: MASK\r\n">>, [{return, binary}]).

read_answer(S, Acc) ->
    case binary:split(Acc, <<"\r\n\r\n">>) of
        [Head, Body] ->
            {match, [Len]} = re:run(Head, <<"content-length: ([0-9]+)">>,
                                    [{capture, all_but_first, binary}]),
            case byte_size(Body) >= binary_to_integer(Len) of
                true -> Acc;
                false -> more(S, Acc)
            end;
        _ -> more(S, Acc)
    end.

more(S, Acc) ->
    {ok, B} = gen_tcp:recv(S, 0, 10000),
    read_answer(S, <<Acc/binary, B/binary>>).

wait_entries(S, N) -> wait_entries(S, N, 200).

wait_entries(S, N, Tries) ->
    case cbench:requests(S) of
        Es when length(Es) >= N; Tries =:= 0 -> Es;
        _ -> timer:sleep(10), wait_entries(S, N, Tries - 1)
    end.
