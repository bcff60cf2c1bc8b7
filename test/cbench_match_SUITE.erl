%%% @doc Body matchers (issue 25, docs/routes.md "Body matchers") on every engine: the same stubs
%%% and requests on nif, port and ehttpd over HTTP/1.1 (and h2c on the C engines) give the same
%%% bytes; a body none matches goes on to the next route (an /echo gets it whole); bad matcher terms
%%% are the same {error, {bad_stub, {Field, Value, Why}}} everywhere; the JSON module reads what
%%% jansson reads.
-module(cbench_match_SUITE).

-include_lib("stdlib/include/assert.hrl").

-export([all/0, init_per_suite/1, end_per_suite/1]).
-export([body_kinds_every_engine/1, body_kinds_h2c/1, falls_through_with_the_body/1,
         bad_body_matchers/1, json_decoder/1, json_long_integer/1, regex_subset/1, near_miss_404/1,
         verify_pairs_nearest/1, near_misses_listed/1,
         near_miss_query_index/1]).

all() -> [body_kinds_every_engine, body_kinds_h2c, falls_through_with_the_body, bad_body_matchers,
          json_decoder, json_long_integer, regex_subset, near_miss_404, verify_pairs_nearest, near_misses_listed,
          near_miss_query_index].

init_per_suite(Config) ->
    Config.

end_per_suite(_Config) ->
    ok.

engines() -> [nif, port, ehttpd].

start(Engine) ->
    {ok, S} = cbench:start_server(Engine, #{port => 0, threads => 1}),
    S.

%% Stubs of every kind on /b, in priority order, and a last one without a body matcher.
add_kinds(S) ->
    Stubs = [{60, #{equal => <<"exact">>}, <<"equal">>},
             {50, #{json => #{a => 1, <<"b">> => [true, null]}}, <<"json">>},
             {40, #{json_subset => #{order => #{id => 7}}}, <<"subset">>},
             {30, #{regex => "^id=[0-9]{3}(&|$)"}, <<"regex">>},
             {20, #{contains => [<<"nee">>, "dle"]}, <<"contains">>}],
    [{ok, _} = cbench:stub(S, #{path => "/b", method => post, priority => P, body => B},
                           #{body => Answer}) || {P, B, Answer} <- Stubs],
    {ok, _} = cbench:stub(S, #{path => "/b", method => post, priority => 10}, #{body => <<"plain">>}),
    ok.

kind_cases() ->
    [{<<"exact">>, <<"equal">>},
     {<<"exact ">>, <<"plain">>},
     {<<"{\"b\": [true, null], \"a\": 1}">>, <<"json">>},
     {<<"{\"a\":1.0,\"b\":[true,null]}">>, <<"plain">>},
     {<<"{\"a\":1,\"b\":[true,null],\"c\":2}">>, <<"plain">>},
     {<<"{\"x\":0,\"order\":{\"qty\":2,\"id\":7}}">>, <<"subset">>},
     {<<"{\"order\":{\"id\":\"7\"}}">>, <<"plain">>},
     {<<"{\"order\":[7]}">>, <<"plain">>},
     {<<"id=123">>, <<"regex">>},
     {<<"id=123&x=needle">>, <<"regex">>},
     {<<"id=1234">>, <<"plain">>},
     {<<"xx\nid=999">>, <<"plain">>},
     {<<"a needle", 0, " in bytes">>, <<"contains">>},
     {<<>>, <<"plain">>},
     {<<"not json {">>, <<"plain">>}].

post(Path, Body) ->
    ["POST ", Path, " HTTP/1.1\r\nHost: x\r\ncontent-length: ", integer_to_list(byte_size(Body)),
     "\r\n\r\n", Body].

ok200(Body) ->
    cbench_routes:resp(<<"200 OK">>, [], iolist_to_binary(["content-length: ",
                                                           integer_to_list(byte_size(Body))]), Body).

%% @doc Each kind, and bodies that match none of them, byte for byte on the three engines.
body_kinds_every_engine(_Config) ->
    [begin
         S = start(E),
         ok = add_kinds(S),
         Port = cbench:port(S),
         [begin
              ct:log("~p ~p", [E, Body]),
              Sock = cbench_routes:exchange(Port, post("/b", Body), ok200(Answer)),
              gen_tcp:close(Sock)
          end || {Body, Answer} <- kind_cases()],
         ok = cbench:stop_server(S)
     end || E <- engines()],
    ok.

%% @doc The same over h2c (curl, prior knowledge) on the C engines.
body_kinds_h2c(Config) ->
    Dir = proplists:get_value(priv_dir, Config),
    [begin
         S = start(E),
         ok = add_kinds(S),
         [begin
              In = filename:join(Dir, "h2.in"),
              Out = filename:join(Dir, "h2.out"),
              ok = file:write_file(In, Body),
              _ = file:delete(Out),
              Cmd = io_lib:format("curl -sS --max-time 20 --http2-prior-knowledge --data-binary @'~s' "
                                  "-o '~s' -w '%{http_code}' '~s' 2>&1",
                                  [In, Out, cbench:url(S, "/b")]),
              Code = os:cmd(lists:flatten(Cmd)),
              {ok, Got} = file:read_file(Out),
              ?assertEqual({E, Body, "200", Answer}, {E, Body, Code, Got})
          end || {Body, Answer} <- kind_cases()],
         ok = cbench:stop_server(S)
     end || E <- [nif, port]],
    ok.

%% @doc A body stub on /echo that does not match: the fixture /echo echoes the body whole; one
%% that matches answers; a body none matches on a path with no other route is 404, and a GET
%% on the POST-only body stub's path 405 (a body matcher is not looked at for 405).
falls_through_with_the_body(_Config) ->
    [begin
         S = start(E),
         Port = cbench:port(S),
         {ok, _} = cbench:stub(S, #{path => "/echo", body => #{contains => "magic"}},
                               #{body => <<"stubbed">>}),
         {ok, _} = cbench:stub(S, #{path => "/p", method => post, body => #{equal => "x"}},
                               #{body => <<"x">>}),
         Echo = cbench_routes:resp(<<"200 OK">>, [<<"content-type: application/octet-stream">>],
                                   <<"content-length: 11">>, <<"hello world">>),
         Sock = cbench_routes:exchange(Port, post("/echo", <<"hello world">>), Echo),
         _ = cbench_routes:exchange(Sock, post("/echo", <<"say magic">>), ok200(<<"stubbed">>)),
         Near = <<"No stub matched POST /p\nClosest stubs:\n  stub_2 (id 2): body\n"
                  "  stub_1 (id 1): path, body\n">>,
         _ = cbench_routes:exchange(Sock, post("/p", <<"y">>),
                                    cbench_routes:resp(<<"404 Not Found">>,
                                                       [<<"content-type: text/plain">>],
                                                       len(Near), Near)),
         _ = cbench_routes:exchange(Sock, "GET /p HTTP/1.1\r\nHost: x\r\n\r\n",
                                    cbench_routes:resp(<<"405 Method Not Allowed">>,
                                                       [<<"allow: POST">>],
                                                       <<"content-length: 0">>, <<>>)),
         gen_tcp:close(Sock),
         %% Journaled under the route that answered, with the whole body.
         {ok, _} = cbench:await(S, #{}, 4, 5000),
         ?assertEqual({E, [{echo, <<"hello world">>}, {<<"stub_1">>, <<"say magic">>},
                           {not_found, <<"y">>}, {<<"stub_2">>, <<>>}]},
                      {E, [{R, B} || #{route := R, body := B} <- cbench:requests(S)]}),
         %% Counted once, under the route that answered.
         #{requests_by_route := ByRoute} = cbench:stats(S),
         ct:log("~p ~p", [E, ByRoute]),
         ?assertEqual({E, 1}, {E, maps:get(echo, ByRoute)}),
         ?assertEqual({E, 1}, {E, maps:get(not_found, ByRoute)}),
         ok = cbench:stop_server(S)
     end || E <- engines()],
    ok.

%% @doc Bad matcher terms: the same error on every engine, nothing added.
bad_body_matchers(_Config) ->
    F = {match, body},
    Long = binary:copy(<<"a">>, 1025),
    Cases = [{#{regex => "\\d+"}, {F, "\\d+", bad_regex}},
             {#{regex => "a**"}, {F, "a**", bad_regex}},
             {#{regex => "(?:a)"}, {F, "(?:a)", bad_regex}},
             {#{regex => "(a"}, {F, "(a", bad_regex}},
             {#{regex => "a{2,1}"}, {F, "a{2,1}", bad_regex}},
             {#{regex => "[[:word:]]"}, {F, "[[:word:]]", bad_regex}},
             %% Over the C matcher's 16,384 instructions with its counted repetitions written out
             %% ("(a{255}){64}" is 16,321 of them and is taken, below).
             {#{regex => "(a{255}){65}"}, {F, "(a{255}){65}", bad_regex}},
             {#{regex => "((a|b){255}){40}"}, {F, "((a|b){255}){40}", bad_regex}},
             {#{regex => Long}, {F, Long, too_long}},
             {#{regex => 42}, {F, 42, wrong_type}},
             {#{equal => {x}}, {F, {x}, wrong_type}},
             {#{json => {1, 2}}, {F, {1, 2}, bad_json}},
             {#{json_subset => #{a => undefined}}, {F, #{a => undefined}, bad_json}},
             {#{json => #{a => 1, <<"a">> => 2}}, {F, #{a => 1, <<"a">> => 2}, bad_json}},
             {#{json => 1 bsl 64}, {F, 1 bsl 64, bad_json}},
             {#{json => <<255>>}, {F, <<255>>, bad_json}},
             {#{xml => "<a/>"}, {F, #{xml => "<a/>"}, unknown_key}},
             {#{equal => "a", contains => "b"}, {F, #{equal => "a", contains => "b"}, wrong_type}},
             {"x", {F, "x", wrong_type}}],
    [begin
         S = start(E),
         [?assertEqual({E, B, {error, {bad_stub, Bad}}},
                       {E, B, cbench:stub(S, #{path => "/x", body => B}, #{})})
          || {B, Bad} <- Cases],
         ?assertEqual({E, []}, {E, cbench:stubs(S)}),
         ?assertMatch({E, {ok, _}}, {E, cbench:stub(S, #{path => "/x", body => #{regex => "(a{255}){64}"}}, #{})}),
         ok = cbench:stop_server(S)
     end || E <- engines()],
    ok.

%% @doc cbench_json reads what jansson reads, and encodes what it parses back.
json_decoder(_Config) ->
    Ok = [{<<" {\"b\": [true, null], \"a\": 1} ">>, #{<<"a">> => 1, <<"b">> => [true, null]}},
          {<<"1.0">>, 1.0}, {<<"-0">>, 0}, {<<"1e2">>, 100.0}, {<<"2E-1">>, 0.2},
          {<<"\"\\ud83d\\ude00\\u0000\\n\"">>, <<240, 159, 152, 128, 0, $\n>>},
          {<<"{\"a\":1,\"a\":2}">>, #{<<"a">> => 2}},
          {<<"9223372036854775807">>, 9223372036854775807},
          {<<"[]">>, []}, {<<"{}">>, #{}}],
    [?assertEqual({T, {ok, V}}, {T, cbench_json:decode(T)}) || {T, V} <- Ok],
    Bad = [<<>>, <<"01">>, <<"1.">>, <<".5">>, <<"+1">>, <<"[1,]">>, <<"{\"a\" 1}">>, <<"tru">>,
           <<"\"\\ud800\"">>, <<"\"a\nb\"">>, <<"\"", 255, "\"">>, <<"9223372036854775808">>,
           <<"[1] x">>, <<"{,}">>, <<"1e999">>],
    [?assertEqual({T, error}, {T, cbench_json:decode(T)}) || T <- Bad],
    {ok, J} = cbench_json:normalize(#{a => [1, 2.5, <<"x\"\n">>], b => null, c => #{}}),
    %% jansson's escapes (a stub file's {"json": ...} body is these bytes on every engine).
    ?assertEqual(<<"{\"a\":[1,2.5,\"x\\\"\\n\"],\"b\":null,\"c\":{}}">>, cbench_json:encode(J)),
    ?assertEqual(<<"\"\\b\\f\\n\\r\\t\\u0001\\u001F/\"">>, cbench_json:encode(<<"\b\f\n\r\t", 1, 31, "/">>)),
    ?assertEqual({ok, J}, cbench_json:decode(cbench_json:encode(J))),
    ?assert(cbench_json:holds(#{<<"a">> => #{<<"b">> => 1, <<"c">> => 2}}, #{<<"a">> => #{<<"b">> => 1}})),
    ?assertNot(cbench_json:holds(#{<<"a">> => 1.0}, #{<<"a">> => 1})),
    ok.

%% @doc An integer of more than 19 digits is past 64 bits: refused, as jansson refuses it, without
%% converting its digits. list_to_integer/1 is quadratic in them and does not yield, so a request
%% body of digits sent to a stub with a JSON matcher held the connection's scheduler (and every
%% connection bound to it) for minutes: 10 MB of digits, half an hour. The conversions are traced.
json_long_integer(_Config) ->
    Digits = binary:copy(<<"7">>, 100000),
    Self = self(),
    Tracer = spawn_link(fun() -> trace_collect(Self, []) end),
    erlang:trace_pattern({erlang, list_to_integer, 1}, true, [global]),
    erlang:trace(self(), true, [call, {tracer, Tracer}]),
    Results = [cbench_json:decode(T) || T <- [Digits, <<"[-", Digits/binary, "]">>,
                                              <<"12345678901234567890">>, <<"1234567890123456789">>]],
    erlang:trace(self(), false, [call]),
    erlang:trace_pattern({erlang, list_to_integer, 1}, false, [global]),
    Delivered = erlang:trace_delivered(self()),
    receive {trace_delivered, _, Delivered} -> ok end,
    Tracer ! {done, self()},
    Converted = receive {traced, Lens} -> Lens end,
    ?assertEqual([error, error, error, {ok, 1234567890123456789}], Results),
    ?assertEqual([], [L || L <- Converted, L > 20]),
    ok.

trace_collect(Test, Lens) ->
    receive
        {trace, Test, call, {erlang, list_to_integer, [Arg]}} -> trace_collect(Test, [length(Arg) | Lens]);
        {done, Test} -> Test ! {traced, Lens}
    end.

%% @doc The regex subset (the same list as test/c/test_body_match.c).
regex_subset(_Config) ->
    Good = [<<"a|b">>, <<"^$">>, <<"(a|b)*c{2}">>, <<"[]a-]">>, <<"[^]x]">>, <<"x\\{1\\}">>,
            <<"a{3,}">>, <<".+">>],
    Bad = [<<"\\d+">>, <<"a**">>, <<"(?:a)">>, <<"(a">>, <<"a{2,1}">>, <<"[a\\]]">>, <<"a}">>,
           <<"[[:word:]]">>],
    [?assertEqual({R, true}, {R, cbench_spec:regex_ok(R)}) || R <- Good],
    [?assertEqual({R, false}, {R, cbench_spec:regex_ok(R)}) || R <- Bad],
    ok.

%% @doc The 404 of a request no stub matched names the three closest stubs and what differs, the
%% same bytes on every engine: plain text, JSON with accept: application/json; no stub, no body.
near_miss_404(_Config) ->
    Text = <<"No stub matched GET /orders/1?verbose=0&x=%22\nClosest stubs:\n"
             "  orders_get (id 1): header x-tenant, header x-key\n"
             "  orders_post (id 4): method, header x-tenant\n"
             "  orders_put (id 3): method, query verbose, body (not read)\n">>,
    Json = <<"{\"method\":\"GET\",\"target\":\"/orders/1?verbose=0&x=%22\",\"near_misses\":["
             "{\"name\":\"orders_get\",\"id\":1,\"differs\":[\"header x-tenant\",\"header x-key\"]},"
             "{\"name\":\"orders_post\",\"id\":4,\"differs\":[\"method\",\"header x-tenant\"]},"
             "{\"name\":\"orders_put\",\"id\":3,\"differs\":[\"method\",\"query verbose\",\"body (not read)\"]}]}\n">>,
    Req = "GET /orders/1?verbose=0&x=%22 HTTP/1.1\r\nHost: x\r\nx-tenant: other\r\n",
    Empty = cbench_routes:resp(<<"404 Not Found">>, [], <<"content-length: 0">>, <<>>),
    [begin
         S = start(E),
         Port = cbench:port(S),
         gen_tcp:close(cbench_routes:exchange(Port, [Req, "\r\n"], Empty)),
         {ok, _} = cbench:stub(S, #{path => "/orders/{id}", method => get, name => "orders_get",
                                    headers => [{"x-tenant", "acme"}, {"x-key", present}]}, #{}),
         {ok, _} = cbench:stub(S, #{path => "/users/{id}", name => users}, #{}),
         {ok, _} = cbench:stub(S, #{path => "/orders/{id}", method => put, name => "orders_put",
                                    query => [{"verbose", "1"}], body => #{json_subset => #{a => 1}}},
                               #{}),
         {ok, _} = cbench:stub(S, #{path => "/orders/{id}", method => post, name => "orders_post",
                                    headers => [{"x-tenant", "acme"}]}, #{}),
         ct:log("~p", [E]),
         Sock = cbench_routes:exchange(Port, [Req, "\r\n"],
                                       cbench_routes:resp(<<"404 Not Found">>,
                                                          [<<"content-type: text/plain">>],
                                                          len(Text), Text)),
         _ = cbench_routes:exchange(Sock, [Req, "accept: application/json\r\n\r\n"],
                                    cbench_routes:resp(<<"404 Not Found">>,
                                                       [<<"content-type: application/json">>],
                                                       len(Json), Json)),
         gen_tcp:close(Sock),
         ok = cbench:stop_server(S)
     end || E <- engines()],
    ok.

len(B) -> iolist_to_binary(["content-length: ", integer_to_list(byte_size(B))]).

%% @doc The query matchers of a 404's near misses, looked up in an index of the request's query
%% (docs/routes.md "Near misses"), are met as the dispatch meets them, the same bytes on every
%% engine: the second of two fields with one name, a name alone (its value empty), a name with any
%% value, `+' and `%20' decoded; a value that no field of that name has differs.
near_miss_query_index(_Config) ->
    Text = <<"No stub matched GET /x?dup=1&dup=2&flag&k=a+b%20c\nClosest stubs:\n"
             "  met (id 1): path\n"
             "  unmet (id 2): path, query dup, query k\n">>,
    Req = "GET /x?dup=1&dup=2&flag&k=a+b%20c HTTP/1.1\r\nHost: x\r\n\r\n",
    [begin
         S = start(E),
         {ok, _} = cbench:stub(S, #{path => "/met", name => met,
                                    query => [{"dup", "2"}, {"flag", ""}, {"k", "a b c"},
                                              {"flag", present}]}, #{}),
         {ok, _} = cbench:stub(S, #{path => "/unmet", name => unmet,
                                    query => [{"dup", "3"}, {"flag", present}, {"k", "abc"}]},
                               #{}),
         ct:log("~p", [E]),
         gen_tcp:close(cbench_routes:exchange(cbench:port(S), Req,
                                              cbench_routes:resp(<<"404 Not Found">>,
                                                                 [<<"content-type: text/plain">>],
                                                                 len(Text), Text))),
         ok = cbench:stop_server(S)
     end || E <- engines()],
    ok.

%% @doc verify/1 pairs an expectation that got too few requests with the stray request that came
%% closest to it (its path matched), naming what differed; that request is not listed again; a
%% stray whose path matches no expectation stays an unexpected request.
verify_pairs_nearest(_Config) ->
    [begin
         S = start(E),
         Port = cbench:port(S),
         {ok, _} = cbench:expect(S, #{path => "/orders/{id}", method => post,
                                      headers => [{"x-tenant", "acme"}],
                                      body => #{json_subset => #{qty => 2}}}, #{}, #{times => 1}),
         {ok, _} = cbench:expect(S, "/other", #{}, #{at_least => 1}),
         Sock = cbench_routes:exchange(Port, "GET /elsewhere HTTP/1.1\r\nHost: x\r\n\r\n",
                                       cbench_routes:resp(<<"404 Not Found">>,
                                                          [<<"content-type: text/plain">>],
                                                          <<"content-length: 132">>,
                                                          <<"No stub matched GET /elsewhere\nClosest stubs:\n"
                                                            "  stub_2 (id 2): path\n"
                                                            "  stub_1 (id 1): method, path, header x-tenant, body (not read)\n">>)),
         gen_tcp:close(Sock),
         Body = <<"{\"qty\":3}">>,
         {ok, C} = gen_tcp:connect({127, 0, 0, 1}, Port, [binary, {active, false}]),
         ok = gen_tcp:send(C, ["POST /orders/1?v=1 HTTP/1.1\r\nHost: x\r\nx-tenant: other\r\n"
                               "content-length: ", integer_to_list(byte_size(Body)), "\r\n\r\n", Body]),
         {ok, <<"HTTP/1.1 404", _/binary>>} = gen_tcp:recv(C, 12, 5000),
         gen_tcp:close(C),
         {ok, _} = cbench:await(S, #{}, 2, 5000),
         ?assertEqual({E, {error, [{no_request_arrived, <<"POST /orders/{id} header x-tenant=acme">>,
                                    expected, 1},
                                   {nearest_request, <<"POST /orders/{id} header x-tenant=acme">>,
                                    #{method => <<"POST">>, path => <<"/orders/1">>,
                                      query => <<"v=1">>,
                                      differs => [<<"header x-tenant">>, <<"body">>]}},
                                   {no_request_arrived, <<"* /other">>, expected, {at_least, 1}},
                                   {unexpected_request, <<"GET">>, <<"/elsewhere">>}]}},
                      {E, cbench:verify(S)}),
         ok = cbench:stop_server(S)
     end || E <- engines()],
    ok.

%% @doc near_misses/1: the journal's 404s, oldest first, each with the closest stubs now, the same
%% on every engine; a matched request is not listed. A body the 404 could not judge (it was not held:
%% the query failed first) is judged from the journal's copy here.
near_misses_listed(_Config) ->
    [begin
         S = start(E),
         Port = cbench:port(S),
         {ok, _} = cbench:stub(S, #{path => "/orders/{id}", method => post, name => "orders",
                                    query => [{"v", "2"}], body => #{contains => "qty"}}, #{}),
         {ok, _} = cbench:stub(S, #{path => "/users", name => "users", priority => 1}, #{}),
         Sock = cbench_routes:exchange(Port, post("/orders/1?v=1", <<"{\"qty\":1}">>),
                                       <<"HTTP/1.1 404 Not Found\r\ndate: X\r\ncontent-type: text/plain\r\n"
                                         "content-length: 113\r\n\r\nNo stub matched POST /orders/1?v=1\n"
                                         "Closest stubs:\n  orders (id 1): query v, body (not read)\n"
                                         "  users (id 2): path\n">>),
         _ = cbench_routes:exchange(Sock, "GET /users HTTP/1.1\r\nHost: x\r\n\r\n", ok200(<<>>)),
         _ = cbench_routes:exchange(Sock, "GET /user HTTP/1.1\r\nHost: x\r\n\r\n",
                                    <<"HTTP/1.1 404 Not Found\r\ndate: X\r\ncontent-type: text/plain\r\n"
                                      "content-length: 118\r\n\r\nNo stub matched GET /user\nClosest stubs:\n"
                                      "  users (id 2): path\n  orders (id 1): method, path, query v, body (not read)\n">>),
         gen_tcp:close(Sock),
         {ok, _} = cbench:await(S, #{}, 3, 5000),
         ?assertMatch({E, [#{seq := _, method := <<"POST">>, path := <<"/orders/1">>, query := <<"v=1">>,
                             near := [#{id := 1, name := <<"orders">>, differs := [<<"query v">>]},
                                      #{id := 2, name := <<"users">>, differs := [<<"path">>]}]},
                           #{method := <<"GET">>, path := <<"/user">>, query := <<>>,
                             near := [#{id := 2, name := <<"users">>, differs := [<<"path">>]},
                                      #{id := 1, name := <<"orders">>,
                                        differs := [<<"method">>, <<"path">>, <<"query v">>, <<"body">>]}]}]},
                      {E, cbench:near_misses(S)}),
         ok = cbench:stop_server(S)
     end || E <- engines()],
    ?assertError(badarg, cbench:near_misses(42)),
    ok.
