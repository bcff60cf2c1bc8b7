%%% @doc The admin API from Erlang (docs/routes.md, "The admin API"): `admin => true' on the nif and
%%% port engines serves it on a loopback port of its own (cbench:admin_url/1); stubs added through it
%%% answer on the data port and are listed by cbench:stubs/1; its POST /verify checks their
%%% "expect"; it stops with the server. The ehttpd engine refuses the option (cbench_api_SUITE).
%%% The CLI's admin API is driven by test/e2e.sh and test/admin_client.py.
-module(cbench_admin_SUITE).

-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1]).
-export([admin_nif/1, admin_port/1, off_by_default/1]).

all() -> [admin_nif, admin_port, off_by_default].

suite() -> [{timetrap, {minutes, 2}}].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(inets),
    Config.

end_per_suite(_Config) ->
    ok.

admin_nif(_Config) -> drive(nif).
admin_port(_Config) -> drive(port).

drive(Engine) ->
    {ok, S} = cbench:start_server(Engine, #{port => 0, threads => 1, admin => true}),
    Admin = cbench:admin_url(S),
    ?assertMatch("http://127.0.0.1:" ++ _, Admin),
    ?assertNotEqual(cbench:url(S, ""), Admin),
    Stub = <<"{\"name\": \"order\", \"match\": {\"method\": \"POST\", \"path\": \"/orders\"},"
             " \"response\": {\"status\": 201, \"body\": \"made\"}, \"expect\": {\"times\": 1}}">>,
    ?assertEqual({201, <<"{\"ids\":[1]}">>}, req(post, Admin ++ "/stubs", Stub)),
    %% The stub is the engine's like any other: listed by the Erlang API, answered on the data port.
    ?assertMatch([#{id := 1, name := <<"order">>, hits := 0}], cbench:stubs(S)),
    ?assertEqual({409, <<"{\"ok\":false,\"problems\":[{\"problem\":\"no_request_arrived\","
                         "\"stub\":\"POST /orders\",\"id\":1,\"expected\":{\"times\":1},\"got\":0}]}">>},
                 req(post, Admin ++ "/verify", <<>>)),
    ?assertEqual({201, <<"made">>}, req(post, cbench:url(S, "/orders"), <<"x">>)),
    ?assertEqual({200, <<"{\"ok\":true,\"problems\":[]}">>}, req(post, Admin ++ "/verify", <<>>)),
    {200, Requests} = req(get, Admin ++ "/requests?path=/orders", <<>>),
    ?assertMatch({match, _}, re:run(Requests, "\"method\":\"POST\",\"path\":\"/orders\",.*\"body\":\"x\"")),
    ?assertMatch([#{method := <<"POST">>, path := <<"/orders">>}], cbench:requests(S)),
    %% Bad input: 400 naming the field.
    ?assertEqual({400, <<"{\"field\":\"stubs[0].match.pathx\",\"why\":\"unknown_key\",\"message\":"
                         "\"body:1: stubs[0].match.pathx: unknown_key: unknown field\"}">>},
                 req(post, Admin ++ "/stubs", <<"{\"match\": {\"path\": \"/a\", \"pathx\": 1}}">>)),
    ?assertEqual({204, <<>>}, req(post, Admin ++ "/reset", <<>>)),
    ?assertEqual([], cbench:stubs(S)),
    ok = cbench:stop_server(S),
    %% The admin listener stopped with the server.
    ?assertMatch({error, _}, httpc:request(get, {Admin ++ "/stubs", []}, [{timeout, 2000}], [])).

off_by_default(_Config) ->
    {ok, S} = cbench:start_server(nif, #{port => 0, threads => 1}),
    ?assertEqual({error, no_admin}, cbench:admin_url(S)),
    ok = cbench:stop_server(S),
    ?assertEqual({error, no_admin}, cbench:with_server(ehttpd, #{port => 0, threads => 1},
                                                       fun cbench:admin_url/1)).

req(Method, Url, Body) ->
    Request = case Method of
                  get -> {Url, []};
                  _ -> {Url, [], "application/json", Body}
              end,
    {ok, {{_, Status, _}, _, RespBody}} = httpc:request(Method, Request, [{timeout, 10000}],
                                                        [{body_format, binary}]),
    {Status, RespBody}.
