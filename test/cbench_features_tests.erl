%%% @doc Issue 25's features once each, on every engine (nif, port, ehttpd), over HTTP/1.1 with OTP's
%%% httpc, as a user's EUnit module would use them: a json_subset body matcher, the near-miss 404
%%% (plain and JSON) and near_misses/1, verify/1 pairing an unmet expectation with the miss closest
%%% to it, a 503, 503, 200 sequence, a three-state scenario, a templated body, and a seeded drawn
%%% delay as the journal records it. Every assertion is an exact status, body or term; timings are
%%% never asserted. Run by `make beam-eunit' (part of `make test').
-module(cbench_features_tests).

-include_lib("eunit/include/eunit.hrl").

-export([body_matcher_and_near_misses/1, verify_pairs_miss/1, sequence/1, scenario/1, template/1,
         seeded_delay/1]).

%% The first three draws of a uniform delay in [1, 20] ms with seed 7 (src/kinds/fault.c, cbench_fault.erl).
-define(SEEDED_UNIFORM, [20, 19, 3]).

%% One fixture per engine: a server on an ephemeral port, reset before each test.
features_test_() ->
    [{setup,
      fun() -> start(Engine) end,
      fun(S) -> ok = cbench:stop_server(S) end,
      fun(S) ->
              {inorder,
               [{atom_to_list(Engine) ++ " " ++ atom_to_list(T), fun() -> ok = cbench:reset(S), ?MODULE:T(S) end}
                || T <- [body_matcher_and_near_misses, verify_pairs_miss, sequence, scenario, template,
                         seeded_delay]]}
      end}
     || Engine <- [nif, port, ehttpd]].

start(Engine) ->
    {ok, _} = application:ensure_all_started(inets),
    {ok, S} = cbench:start_server(Engine, #{port => 0, threads => 2}),
    S.

%% @doc A json_subset matcher takes a body that holds its object; a body that does not gets the
%% near-miss 404 naming the stub and `body' (plain text, and JSON when the client accepts it), and
%% near_misses/1 lists both misses with the stubs closest to them now.
body_matcher_and_near_misses(S) ->
    {ok, Id} = cbench:stub(S, #{path => "/orders", method => post, name => "orders",
                                body => #{json_subset => #{qty => 2}}},
                           #{status => 201, body => <<"taken">>}),
    Url = cbench:url(S, "/orders"),
    ?assertEqual({201, <<"taken">>}, post(Url, [], <<"{\"qty\":2,\"note\":\"x\"}">>)),
    ?assertEqual({404, iolist_to_binary(["No stub matched POST /orders\nClosest stubs:\n  orders (id ",
                                         integer_to_list(Id), "): body\n"])},
                 post(Url, [], <<"{\"qty\":3}">>)),
    ?assertEqual({404, iolist_to_binary(["{\"method\":\"POST\",\"target\":\"/orders?x=1\",\"near_misses\":"
                                         "[{\"name\":\"orders\",\"id\":", integer_to_list(Id),
                                         ",\"differs\":[\"body\"]}]}\n"])},
                 post(Url ++ "?x=1", [{"accept", "application/json"}], <<"[]">>)),
    {ok, Entries} = cbench:await(S, #{path => "/orders"}, 3, 5000),
    [A, B] = [Seq || #{seq := Seq, route := not_found} <- Entries],
    Near = [#{id => Id, name => <<"orders">>, differs => [<<"body">>]}],
    ?assertEqual([#{seq => A, method => <<"POST">>, path => <<"/orders">>, query => <<>>, near => Near},
                  #{seq => B, method => <<"POST">>, path => <<"/orders">>, query => <<"x=1">>,
                    near => Near}],
                 cbench:near_misses(S)).

%% @doc verify/1: an expectation no request met, paired with the stray request that came closest
%% (only its header differed), which is not listed again as unexpected.
verify_pairs_miss(S) ->
    {ok, _} = cbench:expect(S, #{path => "/pay", method => post, headers => [{"x-tenant", "acme"}]},
                            #{body => <<"paid">>}, #{times => 1}),
    {404, _} = post(cbench:url(S, "/pay"), [{"x-tenant", "other"}], <<"1">>),
    {ok, _} = cbench:await(S, #{path => "/pay"}, 1, 5000),
    What = <<"POST /pay header x-tenant=acme">>,
    ?assertEqual({error, [{no_request_arrived, What, expected, 1},
                          {nearest_request, What, #{method => <<"POST">>, path => <<"/pay">>,
                                                    query => <<>>, differs => [<<"header x-tenant">>]}}]},
                 cbench:verify(S)).

%% @doc A sequence answers 503, 503, then 200 (and 200 again: `after' is `last').
sequence(S) ->
    Busy = #{status => 503, body => <<"busy">>},
    {ok, Id} = cbench:stub(S, "/flaky", #{responses => [Busy, Busy, #{body => <<"ok">>}]}),
    Url = cbench:url(S, "/flaky"),
    ?assertEqual([{503, <<"busy">>}, {503, <<"busy">>}, {200, <<"ok">>}, {200, <<"ok">>}],
                 [http_get(Url) || _ <- lists:seq(1, 4)]),
    ?assertEqual([503, 503, 200, 200], [St || #{status := St} <- cbench:requests(S, #{stub => Id})]).

%% @doc started -> added -> paid: each stub answers in its own state and moves the scenario on.
scenario(S) ->
    {ok, _} = cbench:stub(S, #{path => "/cart", scenario => cart, 'when' => started, then => added},
                          #{body => <<"added">>}),
    {ok, _} = cbench:stub(S, #{path => "/cart", scenario => cart, 'when' => added, then => paid},
                          #{body => <<"paid">>}),
    {ok, _} = cbench:stub(S, #{path => "/cart", scenario => cart, 'when' => paid},
                          #{status => 410, body => <<"closed">>}),
    Url = cbench:url(S, "/cart"),
    ?assertEqual(<<"started">>, cbench:scenario(S, cart)),
    ?assertEqual([{200, <<"added">>}, {200, <<"paid">>}, {410, <<"closed">>}, {410, <<"closed">>}],
                 [http_get(Url) || _ <- lists:seq(1, 4)]),
    ?assertEqual(<<"paid">>, cbench:scenario(S, cart)).

%% @doc A templated body: a path parameter, the method, a decoded query value, the answer's number.
template(S) ->
    {ok, _} = cbench:stub(S, "/users/{id}",
                          #{template => true,
                            body => <<"id={{path.id}} m={{method}} k={{query.k}} s={{seq}}">>}),
    ?assertEqual([{200, <<"id=42 m=GET k=a b s=1">>}, {200, <<"id=7 m=GET k= s=2">>}],
                 [http_get(cbench:url(S, "/users/42?k=a%20b")), http_get(cbench:url(S, "/users/7"))]).

%% @doc A uniform delay drawn with seed 7: the n-th answer waits the n-th draw, recorded in the
%% journal as delay_ms (the same draws as cbench_fault:delay_ms/3 on every engine).
seeded_delay(S) ->
    {ok, Id} = cbench:stub(S, "/slow", #{delay => {uniform, 1, 20}, delay_seed => 7, body => <<"d">>}),
    ?assertEqual(lists:duplicate(3, {200, <<"d">>}), [http_get(cbench:url(S, "/slow")) || _ <- lists:seq(1, 3)]),
    Drawn = [cbench_fault:delay_ms(#{dist => uniform, ms => 1, max => 20, seed => 7}, N, 3600000)
             || N <- lists:seq(0, 2)],
    ?assertEqual(?SEEDED_UNIFORM, Drawn),
    ?assertEqual(Drawn, [D || #{delay_ms := D} <- cbench:requests(S, #{stub => Id})]).

http_get(Url) ->
    {ok, {{_, Status, _}, _, Body}} = httpc:request(get, {Url, []}, [], [{body_format, binary}]),
    {Status, Body}.

post(Url, Headers, Body) ->
    {ok, {{_, Status, _}, _, RBody}} =
        httpc:request(post, {Url, Headers, "application/json", Body}, [], [{body_format, binary}]),
    {Status, RBody}.
