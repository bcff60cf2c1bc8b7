%%% @doc The pure parts of the ehttpd engine's proxy (erl/cbench_ehttpd_proxy.erl): the upstream URL,
%%% the forwarded request head, the fields forwarded either way, and the words of its failures, byte
%%% for byte (docs/proxy.md, "What is forwarded"). The exchanges themselves are cbench_proxy_SUITE's.
-module(cbench_ehttpd_proxy_tests).

-include_lib("eunit/include/eunit.hrl").

upstream_test() ->
    ?assertEqual({<<"127.0.0.1">>, 8080, <<>>}, cbench_ehttpd_proxy:upstream("http://127.0.0.1:8080")),
    ?assertEqual({<<"127.0.0.1">>, 8080, <<"/base">>}, cbench_ehttpd_proxy:upstream(<<"http://127.0.0.1:8080/base/">>)),
    ?assertEqual({<<"example.test">>, 80, <<>>}, cbench_ehttpd_proxy:upstream("http://example.test")).

request_head_test() ->
    Req = #{method => <<"POST">>, target => <<"/in?a=1">>, body => <<"abc">>, peer => <<"10.0.0.7">>,
            headers => [{<<"host">>, <<"front.example">>}, {<<"connection">>, <<"keep-alive, x-hop">>},
                        {<<"x-hop">>, <<"1">>}, {<<"te">>, <<"trailers">>}, {<<"expect">>, <<"100-continue">>},
                        {<<"content-length">>, <<"3">>}, {<<"x-keep">>, <<"2">>}]},
    ?assertEqual(<<"POST /in?a=1 HTTP/1.1\r\nhost: 127.0.0.1:8080\r\nx-keep: 2\r\n"
                   "x-forwarded-for: 10.0.0.7\r\nx-forwarded-proto: https\r\nx-forwarded-host: front.example\r\n"
                   "content-length: 3\r\n\r\n">>,
                 iolist_to_binary(cbench_ehttpd_proxy:request_head(Req, #{authority => <<"127.0.0.1:8080">>,
                                                                          tls => true}))),
    %% A GET without a body has no content-length; without a host, no x-forwarded-host.
    ?assertEqual(<<"GET / HTTP/1.1\r\nhost: up\r\nx-forwarded-for: 1\r\nx-forwarded-proto: http\r\n"
                   "\r\n">>,
                 iolist_to_binary(cbench_ehttpd_proxy:request_head(
                                    #{method => <<"GET">>, target => <<"/">>, body => <<>>, peer => <<"1">>,
                                      headers => []}, #{authority => <<"up">>, tls => false}))).

forwarded_headers_test() ->
    ?assertEqual([{<<"accept">>, <<"*/*">>}, {<<"x-forwarded-for">>, <<"p">>},
                  {<<"x-forwarded-proto">>, <<"http">>}, {<<"x-forwarded-host">>, <<"h">>}],
                 cbench_ehttpd_proxy:forwarded_headers([{<<"host">>, <<"h">>}, {<<"accept">>, <<"*/*">>},
                                                        {<<"upgrade">>, <<"websocket">>}],
                                                       #{peer => <<"p">>}, false)),
    %% No host at all (HTTP/1.0): no x-forwarded-host, as the C engines; an empty host field is passed on.
    ?assertEqual([{<<"x-forwarded-for">>, <<"p">>}, {<<"x-forwarded-proto">>, <<"https">>}],
                 cbench_ehttpd_proxy:forwarded_headers([], #{peer => <<"p">>}, true)),
    ?assertEqual([{<<"x-forwarded-for">>, <<"p">>}, {<<"x-forwarded-proto">>, <<"http">>},
                  {<<"x-forwarded-host">>, <<>>}],
                 cbench_ehttpd_proxy:forwarded_headers([{<<"host">>, <<>>}], #{peer => <<"p">>}, false)).

answer_headers_test() ->
    ?assertEqual([{<<"content-type">>, <<"text/plain">>}, {<<"x-a">>, <<"1">>}],
                 cbench_ehttpd_proxy:answer_headers([{<<"date">>, <<"x">>}, {<<"content-type">>, <<"text/plain">>},
                                                     {<<"connection">>, <<"x-b">>}, {<<"x-b">>, <<"2">>},
                                                     {<<"content-length">>, <<"5">>}, {<<"keep-alive">>, <<"t">>},
                                                     {<<"transfer-encoding">>, <<"chunked">>},
                                                     {<<"x-a">>, <<"1">>}])).

%% A `connection' field whose token list holds obs-text (bytes 0x80-0xFF): bytes like any other,
%% the tokens after them still dropped (string:trim/1 raised badarg on them, so the client's
%% connection, or the upstream's answer, ended without an answer).
obs_text_connection_test() ->
    ?assertEqual([{<<"x-keep">>, <<"\xff">>}, {<<"x-forwarded-for">>, <<"p">>},
                  {<<"x-forwarded-proto">>, <<"http">>}],
                 cbench_ehttpd_proxy:forwarded_headers([{<<"connection">>, <<"\xff, x-hop">>},
                                                        {<<"x-hop">>, <<"1">>}, {<<"x-keep">>, <<"\xff">>}],
                                                       #{peer => <<"p">>}, false)),
    ?assertEqual([{<<"x-a">>, <<"\xfe">>}],
                 cbench_ehttpd_proxy:answer_headers([{<<"connection">>, <<"\xff, x-b">>}, {<<"x-b">>, <<"2">>},
                                                     {<<"x-a">>, <<"\xfe">>}])).

why_text_test() ->
    ?assertEqual([<<"connection refused">>, <<"connection reset">>, <<"timeout">>, <<"bad response">>,
                  <<"response head too big">>, <<"response body too big">>,
                  <<"connection closed before the answer ended">>],
                 [cbench_ehttpd_proxy:why_text(W)
                  || W <- [refused, reset, timeout, bad_response, head_too_big, body_too_big, truncated]]).

%% The h2c form of the forwarded fields (src/kinds/proxy.c cb__px_h2_fields): hop-by-hop ones (te
%% too) and host gone, names lowercase, content-length when the request had a body or declared
%% one, then the x-forwarded-* fields.
h2_fields_test() ->
    Req = #{method => <<"POST">>, target => <<"/in">>, body => <<"abc">>, peer => <<"10.0.0.7">>,
            headers => [{<<"host">>, <<"front.example">>}, {<<"te">>, <<"trailers">>}, {<<"X-Keep">>, <<"2">>},
                        {<<"transfer-encoding">>, <<"chunked">>}]},
    ?assertEqual([{<<"x-keep">>, <<"2">>}, {<<"content-length">>, <<"3">>}, {<<"x-forwarded-for">>, <<"10.0.0.7">>},
                  {<<"x-forwarded-proto">>, <<"https">>}, {<<"x-forwarded-host">>, <<"front.example">>}],
                 cbench_ehttpd_proxy:h2_fields(Req, true)),
    ?assertEqual([{<<"x-forwarded-for">>, <<"p">>}, {<<"x-forwarded-proto">>, <<"http">>},
                  {<<"x-forwarded-host">>, <<"h">>}],
                 cbench_ehttpd_proxy:h2_fields(#{method => <<"GET">>, target => <<"/">>, body => <<>>, peer => <<"p">>,
                                                 headers => [{<<"host">>, <<"h">>}]}, false)),
    ?assertEqual([{<<"content-length">>, <<"0">>}, {<<"x-forwarded-for">>, <<"p">>},
                  {<<"x-forwarded-proto">>, <<"http">>}],
                 cbench_ehttpd_proxy:h2_fields(#{method => <<"POST">>, target => <<"/">>, body => <<>>, peer => <<"p">>,
                                                 headers => [{<<"content-length">>, <<"0">>}]}, false)).

%% :authority is the authority of `to' as written, as the C engine sends it.
to_authority_test() ->
    ?assertEqual([<<"127.0.0.1:8080">>, <<"[::1]:8443">>, <<"example.test">>],
                 [cbench_ehttpd_proxy:to_authority(T)
                  || T <- [<<"http://127.0.0.1:8080/base">>, <<"https://[::1]:8443">>, <<"http://example.test/">>]]).

%% An upstream's obs-text (bytes 0x80-0xFF, RFC 9110 5.5) where OTP's string functions read UTF-8:
%% a trailer field's value is a value like any other, and a transfer-encoding of such bytes is not
%% chunked (bad_response). Both crashed the client's connection process (badarg from string:trim/3
%% and string:lowercase/1) instead of passing the trailer on or answering 502.
upstream_obs_text_test() ->
    ?assertMatch({ok, 200, _, <<"abc">>, [{<<"x-t">>, <<"\xff">>}], connected},
                 forward_to(<<"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                              "3\r\nabc\r\n0\r\nx-t: \xff \r\n\r\n">>)),
    ?assertEqual({error, 502, bad_response},
                 forward_to(<<"HTTP/1.1 200 OK\r\ntransfer-encoding: \xff\r\n\r\n">>)).

%% GET / forwarded to a one-shot upstream that reads the request and writes Answer.
forward_to(Answer) ->
    {ok, L} = gen_tcp:listen(0, [binary, {active, false}, {ip, {127, 0, 0, 1}}]),
    {ok, Port} = inet:port(L),
    Up = spawn(fun() ->
                       {ok, S} = gen_tcp:accept(L),
                       {ok, _} = gen_tcp:recv(S, 0),
                       ok = gen_tcp:send(S, Answer),
                       receive stop -> gen_tcp:close(S) end
               end),
    To = iolist_to_binary(["http://127.0.0.1:", integer_to_list(Port)]),
    Req = #{method => <<"GET">>, target => <<"/">>, headers => [], body => <<>>, peer => <<"p">>,
            host => <<"h">>},
    Result = cbench_ehttpd_proxy:forward(#{to => To, timeout_ms => 5000}, Req, false),
    Up ! stop,
    gen_tcp:close(L),
    [gen_tcp:close(Sock) || {{cbench_ehttpd_proxy, _, _, _}, Sock} <- get()],
    [erase(K) || {K = {cbench_ehttpd_proxy, _, _, _}, _} <- get()],
    Result.
