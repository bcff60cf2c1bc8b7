%%% @doc Sequences, scenarios and drawn delays on stubs (issue 25), the same cases on the nif, port
%%% and ehttpd engines over HTTP/1.1, and on the C engine (nif, port) over h2c: a 503, 503, 200
%%% sequence met by a client's retry loop, `after' (last, cycle, not_found), a three-state scenario
%%% read and set through cbench:scenario/2,3 and put back by reset/1, seeded delay distributions
%%% that draw the same delays twice and on every engine (journaled as delay_ms), and bad terms
%%% refused with the same {error, {bad_stub, {Field, Value, Why}}} everywhere. Timings are never
%%% asserted: a delay is checked as the journal records it.
-module(cbench_sequence_SUITE).

-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, init_per_suite/1, end_per_suite/1, init_per_group/2, end_per_group/2,
         init_per_testcase/2, end_per_testcase/2]).
-export([retry_503_503_200/1, sequence_after/1, scenario_three_states/1, delay_seeded/1,
         bad_terms/1, template_body_and_header/1, template_header_cut/1, sequence_h2c/1, scenario_h2c/1,
         template_h2c/1]).

-define(READ_MS, 10000).

all() -> [{group, nif}, {group, port}, {group, ehttpd}].

groups() ->
    Http1 = [retry_503_503_200, sequence_after, scenario_three_states, delay_seeded, bad_terms,
             template_body_and_header, template_header_cut],
    H2c = [sequence_h2c, scenario_h2c, template_h2c],
    [{nif, [], Http1 ++ H2c},
     {port, [], Http1 ++ H2c},
     {ehttpd, [], Http1}].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(inets),
    Config.

end_per_suite(_Config) -> ok.

init_per_group(Engine, Config) ->
    {ok, S} = cbench:start_server(Engine, #{port => 0, threads => 2}),
    [{server, S}, {engine, Engine} | Config].

end_per_group(_Engine, Config) ->
    cbench:stop_server(proplists:get_value(server, Config)).

init_per_testcase(_Case, Config) ->
    ok = cbench:reset(proplists:get_value(server, Config)),
    Config.

end_per_testcase(_Case, _Config) -> ok.

%%% Cases

%% @doc A client that retries until it gets a 2xx meets 503, 503, then 201 (and 201 after that:
%% `after' is `last' by default), with the journal holding every answer in order: OTP's httpc,
%% which retries a 503 that carries `retry-after' by itself (its autoretry), and a loop of its own.
retry_503_503_200(Config) ->
    S = proplists:get_value(server, Config),
    Busy = #{status => 503, body => <<"busy">>, headers => [{"retry-after", "0"}]},
    {ok, Auto} = cbench:stub(S, #{path => "/auto", method => post},
                             #{responses => [Busy, Busy, #{status => 201, body => <<"paid">>}]}),
    ?assertEqual({201, <<"paid">>, none}, post(cbench:url(S, "/auto"))),
    ?assertEqual([503, 503, 201],
                 [St || #{status := St} <- cbench:requests(S, #{stub => Auto})]),
    {ok, Id} = cbench:stub(S, #{path => "/pay", method => post},
                           #{responses => [#{status => 503, body => <<"busy">>},
                                           #{status => 503, body => <<"busy">>},
                                           #{status => 201, body => <<"paid">>}]}),
    Url = cbench:url(S, "/pay"),
    ?assertEqual([{503, <<"busy">>, none}, {503, <<"busy">>, none}, {201, <<"paid">>, none}],
                 retry(Url, 5, [])),
    ?assertEqual({201, <<"paid">>, none}, post(Url)),
    ?assertEqual([{503, 0}, {503, 0}, {201, 0}, {201, 0}],
                 [{St, D} || #{status := St, delay_ms := D} <- cbench:requests(S, #{stub => Id})]),
    [#{hits := 4, left := infinity}] = [I || I = #{id := I0} <- cbench:stubs(S), I0 =:= Id].

%% The retry loop of a client: POST until a 2xx, at most N times.
retry(_Url, 0, Acc) -> lists:reverse(Acc);
retry(Url, N, Acc) ->
    case post(Url) of
        {Status, _, _} = R when Status >= 200, Status < 300 -> lists:reverse([R | Acc]);
        R -> retry(Url, N - 1, [R | Acc])
    end.

post(Url) ->
    {ok, {{_, Status, _}, Headers, Body}} =
        httpc:request(post, {Url, [], "text/plain", <<>>}, [], [{body_format, binary}]),
    {Status, Body, proplists:get_value("retry-after", Headers, none)}.

http_get(Url) ->
    {ok, {{_, Status, _}, _Headers, Body}} =
        httpc:request(get, {Url, []}, [], [{body_format, binary}]),
    {Status, Body}.

%% @doc `cycle' starts again, `not_found' is spent (a 404 that names it, docs/routes.md "Near
%% misses"), `times' bounds a sequence in all.
sequence_after(Config) ->
    S = proplists:get_value(server, Config),
    Rs = [#{body => <<"x">>}, #{status => 202, body => <<"y">>}],
    {ok, A} = cbench:stub(S, "/cycle", #{responses => Rs, 'after' => cycle}),
    {ok, B} = cbench:stub(S, "/once", #{responses => Rs, 'after' => not_found}),
    {ok, C} = cbench:stub(S, "/three", #{responses => Rs, times => 3}),
    ?assertEqual([{200, <<"x">>}, {202, <<"y">>}, {200, <<"x">>}, {202, <<"y">>}],
                 [http_get(cbench:url(S, "/cycle")) || _ <- lists:seq(1, 4)]),
    ?assertEqual([{200, <<"x">>}, {202, <<"y">>},
                  near404("/once", [{B, unavailable}, {C, path}, {A, path}])],
                 [http_get(cbench:url(S, "/once")) || _ <- lists:seq(1, 3)]),
    ?assertEqual([{200, <<"x">>}, {202, <<"y">>}, {202, <<"y">>},
                  near404("/three", [{C, unavailable}, {B, path}, {A, path}])],
                 [http_get(cbench:url(S, "/three")) || _ <- lists:seq(1, 4)]).

%% The 404 of a GET that no stub matched, naming the closest stubs (unnamed: stub_ID), newest first
%% among equal scores, with what differed (unavailable: every part matched but the stub was spent
%% or its scenario in another state).
near404(Path, Stubs) ->
    {404, iolist_to_binary(
            ["No stub matched GET ", Path, "\nClosest stubs:\n",
             [io_lib:format("  stub_~b (id ~b): ~s~n",
                            [Id, Id, case Why of
                                         unavailable -> "unavailable (spent, or another scenario state)";
                                         path -> "path"
                                     end]) || {Id, Why} <- Stubs]])}.

%% @doc started -> added -> paid, each stub answering in its own state; scenario/2 reads the
%% state, scenario/3 sets it, reset/1 (with the stubs added again) puts it back to started.
scenario_three_states(Config) ->
    S = proplists:get_value(server, Config),
    [X, Y, Z] = add_cart(S),
    Url = cbench:url(S, "/cart"),
    ?assertEqual(<<"started">>, cbench:scenario(S, cart)),
    ?assertEqual({200, <<"added">>}, http_get(Url)),
    ?assertEqual(<<"added">>, cbench:scenario(S, "cart")),
    ?assertEqual({200, <<"paid">>}, http_get(Url)),
    ?assertEqual({410, <<"closed">>}, http_get(Url)),
    ?assertEqual({410, <<"closed">>}, http_get(Url)),
    ?assertEqual(<<"paid">>, cbench:scenario(S, <<"cart">>)),
    ok = cbench:scenario(S, cart, added),
    ?assertEqual({200, <<"paid">>}, http_get(Url)),
    ok = cbench:scenario(S, cart, <<"nowhere">>),
    ?assertEqual(near404("/cart", [{Z, unavailable}, {Y, unavailable}, {X, unavailable}]), http_get(Url)),
    ok = cbench:reset(S),
    ?assertEqual(<<"started">>, cbench:scenario(S, cart)),
    add_cart(S),
    ?assertEqual({200, <<"added">>}, http_get(Url)),
    ?assertEqual(<<"started">>, cbench:scenario(S, never_used)),
    ?assertEqual({error, {bad_scenario, {{scenario, scenario}, "a b", bad_char}}},
                 cbench:scenario(S, "a b")),
    ?assertEqual({error, {bad_scenario, {{scenario, state}, <<>>, empty}}},
                 cbench:scenario(S, cart, <<>>)).

add_cart(S) ->
    {ok, X} = cbench:stub(S, #{path => "/cart", scenario => cart, 'when' => started,
                               then => added}, #{body => <<"added">>}),
    {ok, Y} = cbench:stub(S, #{path => "/cart", scenario => cart, 'when' => added, then => paid},
                          #{body => <<"paid">>}),
    {ok, Z} = cbench:stub(S, #{path => "/cart", scenario => cart, 'when' => paid},
                          #{status => 410, body => <<"closed">>}),
    [X, Y, Z].

%% @doc Uniform and lognormal delays with a seed: the n-th answer waits the n-th draw of the delay
%% fault's own sequence (cbench_fault:delay_ms/3, which src/kinds/fault.c computes alike), recorded in
%% the journal as delay_ms; the same stub added again draws the same delays. A fixed `delay' and
%% the older `delay_ms' are journaled as they are.
delay_seeded(Config) ->
    S = proplists:get_value(server, Config),
    Uniform = {uniform, 1, 20},
    Lognormal = {lognormal, 4, 0.5},
    First = [delays(S, D, 6) || D <- [Uniform, Lognormal]],
    Second = [delays(S, D, 6) || D <- [Uniform, Lognormal]],
    ?assertEqual(First, Second),
    Expected = [[cbench_fault:delay_ms(F, N, 3600000) || N <- lists:seq(0, 5)]
                || F <- [#{dist => uniform, ms => 1, max => 20, seed => 7},
                         #{dist => lognormal, ms => 4, sigma => 0.5, seed => 7}]],
    ?assertEqual(Expected, First),
    ct:log("uniform [1, 20] and lognormal (4 ms, 0.5) with seed 7: ~p", [First]),
    {ok, Fixed} = cbench:stub(S, "/fixed", #{delay => 3, body => <<"d">>}),
    {ok, Old} = cbench:stub(S, "/old", #{delay_ms => 2, body => <<"d">>}),
    {200, <<"d">>} = http_get(cbench:url(S, "/fixed")),
    {200, <<"d">>} = http_get(cbench:url(S, "/old")),
    ?assertEqual([3], [D || #{delay_ms := D} <- cbench:requests(S, #{stub => Fixed})]),
    ?assertEqual([2], [D || #{delay_ms := D} <- cbench:requests(S, #{stub => Old})]),
    %% A fixture route waits nothing of a stub's.
    {200, _} = http_get(cbench:url(S, "/hello")),
    ?assertEqual([0], [D || #{delay_ms := D} <- cbench:requests(S, #{path => "/hello"})]).

delays(S, Delay, N) ->
    {ok, Id} = cbench:stub(S, "/d", #{delay => Delay, delay_seed => 7, body => <<"d">>}),
    [{200, <<"d">>} = http_get(cbench:url(S, "/d")) || _ <- lists:seq(1, N)],
    Ds = [D || #{delay_ms := D} <- cbench:requests(S, #{stub => Id})],
    ok = cbench:unstub(S, Id),
    Ds.

%% @doc Bad sequence, scenario and delay terms: the same {error, {bad_stub, {Field, Value, Why}}}
%% on every engine, and nothing added.
bad_terms(Config) ->
    S = proplists:get_value(server, Config),
    Many = lists:duplicate(1001, #{}),
    Cases =
        [{"/x", #{responses => []}, {{response, responses}, [], empty}},
         {"/x", #{responses => x}, {{response, responses}, x, wrong_type}},
         {"/x", #{responses => Many}, {{response, responses}, 1001, too_many}},
         {"/x", #{responses => [#{}, 42]}, {{response, responses}, 42, wrong_type}},
         {"/x", #{responses => [#{status => 99}]}, {{response, status}, 99, out_of_range}},
         {"/x", #{responses => [#{times => 2}]}, {{response, times}, 2, unknown_key}},
         {"/x", #{responses => [#{}], 'after' => never}, {{response, 'after'}, never, out_of_range}},
         {"/x", #{responses => [#{}], 'after' => "last"}, {{response, 'after'}, "last", wrong_type}},
         {"/x", #{responses => [#{}], status => 200}, {{response, status}, 200, unknown_key}},
         {#{path => "/x", 'when' => s}, #{}, {{match, 'when'}, s, needs_scenario}},
         {#{path => "/x", then => s}, #{}, {{match, then}, s, needs_scenario}},
         {#{path => "/x", scenario => "a b"}, #{}, {{match, scenario}, "a b", bad_char}},
         {#{path => "/x", scenario => <<>>}, #{}, {{match, scenario}, <<>>, empty}},
         {#{path => "/x", scenario => c, then => 42}, #{}, {{match, then}, 42, wrong_type}},
         {#{path => "/x", scenario => c, 'when' => lists:duplicate(129, $a)}, #{},
          {{match, 'when'}, lists:duplicate(129, $a), too_long}},
         {"/x", #{delay => {uniform, 10, 5}}, {{response, delay}, {uniform, 10, 5}, min_above_max}},
         {"/x", #{delay => {uniform, 0, 3600001}},
          {{response, delay}, {uniform, 0, 3600001}, out_of_range}},
         {"/x", #{delay => {lognormal, 5, 0}}, {{response, delay}, {lognormal, 5, 0}, out_of_range}},
         {"/x", #{delay => {lognormal, 5, 10.5}},
          {{response, delay}, {lognormal, 5, 10.5}, out_of_range}},
         {"/x", #{delay => {normal, 5, 1}}, {{response, delay}, {normal, 5, 1}, wrong_type}},
         {"/x", #{delay => -1}, {{response, delay}, -1, out_of_range}},
         {"/x", #{delay => 5, delay_ms => 5}, {{response, delay_ms}, 5, conflict}},
         {"/x", #{delay => 5, delay_seed => -1}, {{response, delay_seed}, -1, out_of_range}},
         {"/x", #{delay_seed => x}, {{response, delay_seed}, x, wrong_type}}],
    [?assertEqual({M, R, {error, {bad_stub, Bad}}}, {M, R, cbench:stub(S, M, R)})
     || {M, R, Bad} <- Cases],
    ?assertEqual({error, {bad_stub, {{match, scenario}, <<"c">>, unknown_key}}},
                 cbench:handle(S, #{path => "/h", scenario => c}, self(), #{})),
    ?assertEqual([], cbench:stubs(S)).

%% @doc A templated body and header: every placeholder, a missing value empty, {{seq}} counting
%% the answers, a header value rid of the control bytes a query brought; a body without
%% `template' keeps its braces; bad templates refused alike on every engine.
template_body_and_header(Config) ->
    S = proplists:get_value(server, Config),
    add_user(S),
    {ok, _} = cbench:stub(S, "/plain", #{body => <<"{{method}}">>}),
    {ok, {{_, 200, _}, H1, B1}} =
        httpc:request(post, {cbench:url(S, "/users/42?z=1&k=a%20b"), [{"x-k", "V"}],
                             "text/plain", <<"hello">>}, [], [{body_format, binary}]),
    ?assertEqual(<<"id=42 q=a b h=V m=POST s=1 b=hello">>, B1),
    ?assertEqual({"V-1", "<a b>"}, {proplists:get_value("x-echo", H1),
                                    proplists:get_value("x-q", H1)}),
    {ok, {{_, 200, _}, H2, B2}} =
        httpc:request(get, {cbench:url(S, "/users/7?k=+a%0d%0aset-cookie:+x"), []}, [],
                      [{body_format, binary}]),
    ?assertEqual(<<"id=7 q= a\r\nset-cookie: x h= m=GET s=2 b=">>, B2),
    ?assertEqual({"-2", "< aset-cookie: x>", undefined},
                 {proplists:get_value("x-echo", H2), proplists:get_value("x-q", H2),
                  proplists:get_value("set-cookie", H2)}),
    ?assertEqual({200, <<"{{method}}">>}, http_get(cbench:url(S, "/plain"))),
    Bad = [{"/t/{id}", #{template => true, body => <<"{{nope}}">>},
            {{response, body}, <<"{{nope}}">>, bad_template}},
           {"/t/{id}", #{template => true, body => "{{path.other}}"},
            {{response, body}, "{{path.other}}", bad_template}},
           {"/t", #{template => true, body => <<"{{method">>},
            {{response, body}, <<"{{method">>, bad_template}},
           {"/t", #{template => true, headers => [{"x-b", "{{query}}"}]},
            {{response, headers, <<"x-b">>}, <<"{{query}}">>, bad_template}},
           {"/t", #{template => true, body => <<"ab">>, chunks => {2, 0}},
            {{response, template}, true, conflict}},
           {"/t", #{template => true, fault => reset}, {{response, template}, true, conflict}},
           {"/t", #{template => true, body => {bytes, 10}}, {{response, template}, true, conflict}},
           {"/t", #{template => yes}, {{response, template}, yes, wrong_type}},
           {"/t", #{responses => [#{template => true, body => <<"{{x}}">>}]},
            {{response, body}, <<"{{x}}">>, bad_template}}],
    [?assertEqual({M, R, {error, {bad_stub, W}}}, {M, R, cbench:stub(S, M, R)})
     || {M, R, W} <- Bad].

%% @doc A header value is cut at 8,192 bytes and sized only up to the cut: 100 x {{body}} with a
%% 300,000-byte body is the 200 with the first 8,192 bytes a field can hold (0x01 left out, the cut
%% inside the second {{body}}) on every engine, not a 503 for 30 MB charged to the echo budget.
template_header_cut(Config) ->
    S = proplists:get_value(server, Config),
    {ok, _} = cbench:stub(S, "/cut", #{template => true, body => <<"ok">>,
                                       headers => [{"x-b", lists:append(lists:duplicate(100, "{{body}}"))}]}),
    Body = << <<(case I rem 1000 of 999 -> 1; _ -> $a + I rem 26 end)>> || I <- lists:seq(0, 299999) >>,
    Shown = << <<C>> || <<C>> <= Body, C =/= 1 >>,
    {ok, {{_, Status, _}, H, B}} =
        httpc:request(post, {cbench:url(S, "/cut"), [], "text/plain", Body}, [], [{body_format, binary}]),
    ?assertEqual({200, <<"ok">>}, {Status, B}),
    ?assertEqual(binary_to_list(binary:part(Shown, 0, 8192)), proplists:get_value("x-b", H)).

add_user(S) ->
    {ok, _} = cbench:stub(S, "/users/{id}",
                          #{template => true,
                            headers => [{"x-echo", "{{header.x-k}}-{{seq}}"},
                                        {"x-q", "<{{query.k}}>"}],
                            body => <<"id={{path.id}} q={{query.k}} h={{header.X-K}} m={{method}} "
                                      "s={{seq}} b={{body}}">>}).

%% @doc Over h2c: a templated body for each stream.
template_h2c(Config) ->
    S = proplists:get_value(server, Config),
    add_user(S),
    A = h2_connect(cbench:port(S)),
    ?assertEqual([<<"id=1 q= h= m=GET s=1 b=">>, <<"id=2 q=x h= m=GET s=2 b=">>],
                 [h2_body(A, 1, "/users/1"), h2_body(A, 3, "/users/2?k=x")]),
    gen_tcp:close(A).

%% @doc Over h2c (C engine): a sequence's bodies in turn, on streams of one connection and of a
%% second one, with each status in the journal.
sequence_h2c(Config) ->
    S = proplists:get_value(server, Config),
    {ok, Id} = cbench:stub(S, "/h2", #{responses => [#{status => 503, body => <<"one">>},
                                                     #{status => 503, body => <<"two">>},
                                                     #{body => <<"three">>}]}),
    A = h2_connect(cbench:port(S)),
    B = h2_connect(cbench:port(S)),
    ?assertEqual(<<"one">>, h2_body(A, 1, "/h2")),
    ?assertEqual(<<"two">>, h2_body(B, 1, "/h2")),
    ?assertEqual(<<"three">>, h2_body(A, 3, "/h2")),
    ?assertEqual(<<"three">>, h2_body(B, 3, "/h2")),
    gen_tcp:close(A),
    gen_tcp:close(B),
    ?assertEqual([{503, h2c_prior}, {503, h2c_prior}, {200, h2c_prior}, {200, h2c_prior}],
                 [{St, P} || #{status := St, proto := P} <- cbench:requests(S, #{stub => Id})]).

%% @doc Over h2c: a scenario moved by one stream is seen by the next one's dispatch.
scenario_h2c(Config) ->
    S = proplists:get_value(server, Config),
    add_cart(S),
    A = h2_connect(cbench:port(S)),
    ?assertEqual([<<"added">>, <<"paid">>, <<"closed">>],
                 [h2_body(A, Sid, "/cart") || Sid <- [1, 3, 5]]),
    gen_tcp:close(A),
    ?assertEqual(<<"paid">>, cbench:scenario(S, cart)).

%%% h2c over gen_tcp: prior knowledge, header blocks as literals without indexing (no HPACK
%%% state); the answer's DATA payloads are collected, its status is read from the journal.

h2_connect(Port) ->
    {ok, Sock} = gen_tcp:connect({127, 0, 0, 1}, Port, [binary, {active, false}]),
    ok = gen_tcp:send(Sock, [<<"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n">>, frame(4, 0, 0, <<>>)]),
    Sock.

frame(Type, Flags, Sid, Payload) ->
    [<<(iolist_size(Payload)):24, Type, Flags, 0:1, Sid:31>>, Payload].

h2_body(Sock, Sid, Path) ->
    Block = [field(<<":method">>, <<"GET">>), field(<<":scheme">>, <<"http">>),
             field(<<":path">>, list_to_binary(Path)), field(<<":authority">>, <<"x">>)],
    ok = gen_tcp:send(Sock, frame(1, 16#5, Sid, Block)),
    h2_read(Sock, Sid, <<>>, <<>>).

field(Name, Value) -> [0, byte_size(Name), Name, byte_size(Value), Value].

%% DATA of stream Sid until END_STREAM (on DATA or HEADERS); SETTINGS are acknowledged.
h2_read(Sock, Sid, <<Len:24, Type, Flags, _:1, Id:31, Payload:Len/binary, Rest/binary>>, Body) ->
    Type =:= 4 andalso Flags band 1 =:= 0 andalso gen_tcp:send(Sock, frame(4, 1, 0, <<>>)),
    Body1 = case {Type, Id} of
                {0, Sid} -> <<Body/binary, Payload/binary>>;
                _ -> Body
            end,
    case Type =< 1 andalso Id =:= Sid andalso Flags band 1 =:= 1 of
        true -> Rest = <<>>, Body1;
        false -> h2_read(Sock, Sid, Rest, Body1)
    end;
h2_read(Sock, Sid, Buf, Body) ->
    {ok, D} = gen_tcp:recv(Sock, 0, ?READ_MS),
    h2_read(Sock, Sid, <<Buf/binary, D/binary>>, Body).
