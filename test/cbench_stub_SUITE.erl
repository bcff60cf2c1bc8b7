%%% @doc Routes as data, beyond one engine: bad stub terms (badarg or {bad_stub, Why}), the canonical
%%% form every engine takes, the Erlang fixture route list against the C table (same requests to the
%%% nif and ehttpd engines, same answers and route names), and the NIF and the port program given
%%% terms that do not decode (badarg or {error, badarg}, never a crash).
-module(cbench_stub_SUITE).

-include_lib("stdlib/include/assert.hrl").

-export([all/0, init_per_suite/1, end_per_suite/1]).
-export([bad_stubs/1, canonical_forms/1, fixture_routes_as_in_c/1, nif_survives_any_term/1,
         port_survives_any_term/1]).

all() -> [bad_stubs, canonical_forms, fixture_routes_as_in_c, nif_survives_any_term,
          port_survives_any_term].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(inets),
    {ok, S} = cbench:start_server(ehttpd, #{port => 0, threads => 1}),
    [{server, S} | Config].

end_per_suite(Config) ->
    cbench:stop_server(proplists:get_value(server, Config)).

%% @doc Wrong types at the top are badarg; anything wrong inside Match or Response is
%% {error, {bad_stub, Why}} with Why naming the field; nothing is added.
bad_stubs(Config) ->
    S = proplists:get_value(server, Config),
    Dir = proplists:get_value(priv_dir, Config),
    ?assertError(badarg, cbench:stub(S, 42, #{})),
    ?assertError(badarg, cbench:stub(S, "/x", [{status, 200}])),
    ?assertError(badarg, cbench:stub(S, #{path => "/x"}, not_a_map)),
    ?assertError(badarg, cbench:stub(self_not_pid, "/x", #{})),
    ?assertError(badarg, cbench:unstub(S, "1")),
    ?assertError(badarg, cbench:stubs(42)),
    ?assertError(badarg, cbench:reset("s")),
    ?assertError(badarg, cbench:down(42)),
    ?assertError(badarg, cbench:up(42)),
    ?assertError(badarg, cbench:verify(42)),
    ?assertError(badarg, cbench:clear_requests(42)),
    ?assertError(badarg, cbench:await(S, #{}, 1, -1)),
    ?assertError(badarg, cbench:await(S, [], 1, 10)),
    Params9 = "/" ++ lists:join("/", ["{p" ++ integer_to_list(I) ++ "}" || I <- lists:seq(1, 9)]),
    BadMatch =
        [{#{method => get}, {missing, path}},
         {#{path => "/x", bogus => 1}, {unknown_key, bogus}},
         {"x", {path, "x"}},
         {<<>>, {path, <<>>}},
         {"/a b", {path, "/a b"}},
         {"/a?b", {path, "/a?b"}},
         {"/a#b", {path, "/a#b"}},
         {"/a*", {path, "/a*"}},
         {"/*/x", {path, "/*/x"}},
         {"/a/{b", {path, "/a/{b"}},
         {"/a/x{id}", {path, "/a/x{id}"}},
         {"/a/{i-d}", {path, "/a/{i-d}"}},
         {"/a/{id}/*", {path, "/a/{id}/*"}},
         {<<"/caf", 233>>, {path, <<"/caf", 233>>}},
         {Params9, {path, Params9}},
         {#{path => 42}, {path, 42}},
         {#{path => "/x", method => purge}, {method, purge}},
         {#{path => "/x", method => <<"get">>}, {method, <<"get">>}},
         {#{path => "/x", method => []}, {method, []}},
         {#{path => "/x", method => [get, 42]}, {method, 42}},
         {#{path => "/x", headers => [{"bad name", present}]}, {headers, <<"bad name">>}},
         {#{path => "/x", headers => [{"x", "a\r\nb"}]}, {headers, <<"a\r\nb">>}},
         {#{path => "/x", headers => [{"x", " lead"}]}, {headers, <<" lead">>}},
         {#{path => "/x", headers => [x]}, {headers, x}},
         {#{path => "/x", headers => lists:duplicate(33, {"x", present})},
          {headers, lists:duplicate(33, {"x", present})}},
         {#{path => "/x", query => [{"", present}]}, {query, {"", present}}},
         {#{path => "/x", query => nope}, {query, nope}},
         {#{path => "/x", priority => 1.5}, {priority, 1.5}},
         {#{path => "/x", priority => 1000001}, {priority, 1000001}},
         {#{path => "/x", name => "has space"}, {name, "has space"}},
         {#{path => "/x", name => ""}, {name, ""}}],
    [?assertEqual({M, {error, {bad_stub, Why}}}, {M, cbench:stub(S, M, #{})}) || {M, Why} <- BadMatch],
    Missing = filename:join(Dir, "missing.bin"),
    {Small, _} = cbench_stubs:tmp_file(Config, "small.bin", 3),
    BadResponse =
        [{#{bogus => 1}, {unknown_key, bogus}},
         {#{status => 199}, {status, 199}},
         {#{status => 600}, {status, 600}},
         {#{status => "200"}, {status, "200"}},
         {#{headers => [{"x", "a\nb"}]}, {headers, <<"a\nb">>}},
         {#{headers => [{"x y", "1"}]}, {headers, <<"x y">>}},
         {#{headers => [{"Content-Length", "1"}]}, {reserved_header, <<"content-length">>}},
         {#{headers => [{"transfer-encoding", "chunked"}]}, {reserved_header, <<"transfer-encoding">>}},
         {#{headers => [{"date", "x"}]}, {reserved_header, <<"date">>}},
         {#{headers => [{"connection", "close"}]}, {reserved_header, <<"connection">>}},
         {#{headers => x}, {headers, x}},
         {#{body => 42}, {body, 42}},
         {#{body => {bytes, -1}}, {body, {bytes, -1}}},
         {#{body => {file, Missing}}, {file, list_to_binary(Missing), enoent}},
         {#{body => {file, Dir}}, {file, list_to_binary(Dir), eisdir}},
         {#{body => {file, Small}, chunks => {4, 0}}, {chunks, {4, 0}}},
         {#{delay_ms => -1}, {delay_ms, -1}},
         {#{delay_ms => 3600001}, {delay_ms, 3600001}},
         {#{chunks => {0, 1}}, {chunks, {0, 1}}},
         {#{chunks => 3}, {chunks, 3}},
         {#{body => <<"0123456789">>, chunks => {11, 0}}, {chunks, {11, 0}}},
         {#{chunks => {2, 0}}, {chunks, {2, 0}}},
         {#{times => 0}, {times, 0}},
         {#{times => forever}, {times, forever}},
         {#{status => 204, body => <<"x">>}, {body_not_allowed, 204}},
         {#{status => 304, chunks => {1, 0}}, {body_not_allowed, 304}}],
    [?assertEqual({R, {error, {bad_stub, Why}}}, {R, cbench:stub(S, "/x", R)})
     || {R, Why} <- BadResponse],
    ?assertEqual([], cbench:stubs(S)).

%% @doc The canonical form: methods uppercased, sorted and unique; header names lowercased; paths
%% parsed; defaults filled in; the pattern text and the description of a match; how `chunks'
%% splits a body.
canonical_forms(_Config) ->
    {ok, M, R} = cbench_spec:stub(#{path => "/u/{id}", method => [post, get, "GET"],
                                    headers => #{"X-Token" => present, "Accept" => "a/b"},
                                    query => [{"q", "x y"}], name => <<"users">>},
                                  #{body => ["a", <<"b">>], headers => [{'X-A', 1}]}),
    ?assertEqual(#{methods => [<<"GET">>, <<"POST">>], path => {segments, [<<"u">>, {param, <<"id">>}]},
                   headers => [{<<"accept">>, {equal, <<"a/b">>}}, {<<"x-token">>, present}],
                   query => [{<<"q">>, {equal, <<"x y">>}}], priority => 0, name => <<"users">>}, M),
    ?assertEqual(#{status => 200, headers => [{<<"x-a">>, <<"1">>}], body => {data, <<"ab">>},
                   delay_ms => 0, chunks => none, times => infinity}, R),
    ?assertEqual({ok, #{methods => any, path => {exact, <<"/">>}, headers => [], query => [],
                        priority => 0, name => undefined}}, cbench_spec:match("/")),
    ?assertEqual({ok, {prefix, <<"/files/">>}}, cbench_spec:path("/files/*")),
    ?assertEqual({ok, {prefix, <<"/">>}}, cbench_spec:path(<<"/*">>)),
    [?assertEqual(P, cbench_spec:path_text(element(2, cbench_spec:path(P))))
     || P <- [<<"/">>, <<"/a/b">>, <<"/files/*">>, <<"/u/{id}/x/{n}">>]],
    ?assertEqual(<<"GET,POST /u/{id} header accept=a/b header x-token query q=x y">>,
                 cbench_spec:describe(M)),
    ?assertEqual([{0, 3}, {3, 3}, {6, 4}], cbench_spec:pieces(10, 3)),
    ?assertEqual([{0, 5}], cbench_spec:pieces(5, 1)),
    ?assertEqual([], cbench_spec:pieces(0, 1)),
    ?assertEqual([<<"GET">>, <<"HEAD">>, <<"PUT">>, <<"TRACE">>],
                 cbench_spec:methods_order([<<"TRACE">>, <<"PUT">>, <<"GET">>])),
    ?assertEqual({ok, #{methods => [<<"GET">>], path => {prefix, <<"/a/">>}, stub => 3, since => 7}},
                 cbench_spec:filter(#{method => get, path => "/a/*", stub => 3, since => 7})).

%% @doc cbench_fixture_routes describes the C engine's fixture table: the same route names, and for
%% a request on each route's path with each method, the nif and ehttpd engines give the same status
%% and allow header and journal the same route.
fixture_routes_as_in_c(_Config) ->
    {ok, Nif} = cbench:start_server(nif, #{port => 0, threads => 1}),
    {ok, Erl} = cbench:start_server(ehttpd, #{port => 0, threads => 1}),
    ?assertEqual(lists:sort(cbench_fixture_routes:names()),
                 lists:sort(maps:keys(maps:get(requests_by_route, cbench:stats(Nif))))),
    Methods = [<<"GET">>, <<"HEAD">>, <<"POST">>, <<"PUT">>, <<"DELETE">>],
    Requests = [{Name, Method, sample_path(Path)}
                || #{name := Name, match := #{path := Path}} <- cbench_fixture_routes:routes(),
                   Method <- Methods],
    Answers = fun(Server) ->
                      [head_of(cbench:port(Server), Method, Path) || {_, Method, Path} <- Requests]
              end,
    NifAnswers = Answers(Nif),
    ?assertEqual(NifAnswers, Answers(Erl)),
    Routes = fun(Server) -> [{M, P, R, St} || #{method := M, path := P, route := R, status := St}
                                                  <- cbench:requests(Server)] end,
    ?assertEqual(Routes(Nif), Routes(Erl)),
    %% Each route answers its own method under its own name (/ws answers 400 to a request that is not
    %% a WebSocket handshake).
    [?assert(lists:member({M, P, Name, 200}, Routes(Nif)) orelse Name =:= status
             orelse (Name =:= ws andalso lists:member({M, P, ws, 400}, Routes(Nif))))
     || {Name, M, P} <- Requests,
        #{name := N, match := #{methods := Ms}} <- cbench_fixture_routes:routes(), N =:= Name,
        Ms =:= any orelse lists:member(M, Ms)],
    ok = cbench:stop_server(Nif),
    ok = cbench:stop_server(Erl).

sample_path({exact, P}) -> P;
sample_path({prefix, <<"/fault/">>}) -> <<"/fault/delay">>; % a fault that answers 200 (docs/faults.md)
sample_path({prefix, P}) -> <<P/binary, "200">>.

%% The status and allow header of one request on its own connection.
head_of(Port, Method, Path) ->
    {ok, C} = gen_tcp:connect({127, 0, 0, 1}, Port, [binary, {active, false}]),
    ok = gen_tcp:send(C, [Method, " ", Path, " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                          "Content-Length: 0\r\n\r\n"]),
    All = recv_all(C, <<>>),
    gen_tcp:close(C),
    [Head | _] = binary:split(All, <<"\r\n\r\n">>),
    [StatusLine | Lines] = binary:split(Head, <<"\r\n">>, [global]),
    {Method, Path, StatusLine, [L || L = <<"allow: ", _/binary>> <- Lines]}.

recv_all(C, Acc) ->
    case gen_tcp:recv(C, 0, 10000) of
        {ok, B} -> recv_all(C, <<Acc/binary, B/binary>>);
        {error, closed} -> Acc
    end.

%% Terms for the glue that do not decode: each field of a valid stub replaced by bad values.
corrupted() ->
    {ok, M0, R0} = cbench_spec:stub(#{path => "/z", method => get, headers => [{"x", "1"}]},
                                    #{body => <<"z">>, chunks => {1, 0}}),
    M = cbench_c_terms:match(M0),
    Bad = [foo, -1, <<"x">>, [1 | 2], {a}, 1 bsl 70, [], #{}, [{<<"x">>, bad}], {equal, 1}, 3.5,
           [<<"GET">>, <<"BREW">>], {data, x}, {file, <<>>}, {bytes, -5}, {0, 0}],
    [{M#{K := B}, R0} || K <- maps:keys(M), B <- Bad]
        ++ [{M, R0#{K := B}} || K <- maps:keys(R0), B <- Bad]
        ++ [{maps:remove(K, M), R0} || K <- maps:keys(M)]
        ++ [{M, maps:remove(K, R0)} || K <- maps:keys(R0)]
        ++ [{M#{extra => 1}, R0}, {M, R0#{extra => 1}}, {not_a_map, R0}, {M, [x]}].

%% @doc Every corrupted stub term given to route_add_nif/3 is badarg or an engine error; the other
%% NIFs refuse bad terms with badarg; the server goes on serving.
nif_survives_any_term(_Config) ->
    {ok, Opts} = cbench_opts:validate(nif, #{port => 0, threads => 1}),
    {ok, H} = cbench_nif:start(Opts),
    [case catch cbench_nif:route_add_nif(H, M, R) of
         {'EXIT', {badarg, _}} -> ok;
         {ok, Id} -> ok = cbench_nif:route_remove_nif(H, Id);
         {error, einval} -> ok
     end || {M, R} <- corrupted()],
    Filter = #{since => 0, method => undefined, path => undefined, stub => undefined},
    [?assertError(badarg, cbench_nif:requests_nif(H, F))
     || F <- [x, #{}, Filter#{since := -1}, Filter#{method := 1}, Filter#{stub := a},
              maps:remove(path, Filter)]],
    %% An integer that cannot be an id names nothing: no entry, not found (issue 21: these were
    %% badarg, which ended the server process that made the call).
    [?assertEqual([], cbench_nif:requests_nif(H, Filter#{stub := Id}))
     || Id <- [0, -1, 1 bsl 64, -(1 bsl 70)]],
    [?assertEqual({error, enoent}, cbench_nif:route_remove_nif(H, Id))
     || Id <- [0, -1, 1 bsl 64, (1 bsl 64) - 1]],
    ?assertError(badarg, cbench_nif:route_remove_nif(H, 1.0)),
    %% Reply items as the port program takes them: {Ref, unavailable} decodes (here: no such
    %% request), and any int status reaches the engine, which refuses it (issue 21: the NIF took
    %% neither, the port program both).
    ?assertEqual([{error, gone}], cbench_nif:reply_nif(H, [{1, unavailable}])),
    ?assertEqual([{error, badarg}, {error, badarg}],
                 cbench_nif:reply_nif(H, [{1, reply, 1000, [], <<>>}, {1, stream, -5, []}])),
    ?assertError(badarg, cbench_nif:reply_nif(H, [{1, reply, 1 bsl 40, [], <<>>}])),
    ?assertError(badarg, cbench_nif:journal_listen_nif(H, yes)),
    ?assertError(badarg, cbench_nif:route_add_nif(make_ref(), #{}, #{})),
    ?assertError(badarg, cbench_nif:down_nif(x)),
    ?assertEqual([], cbench_nif:stubs_nif(H)),
    {ok, C} = gen_tcp:connect({127, 0, 0, 1}, cbench_nif:port(H), [binary, {active, false}]),
    ok = gen_tcp:send(C, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"),
    {ok, <<"HTTP/1.1 200 OK", _/binary>>} = gen_tcp:recv(C, 0, 5000),
    gen_tcp:close(C),
    ok = cbench_nif:stop(H),
    ?assertEqual({error, stopped}, cbench_nif:route_add_nif(H, cbench_c_terms:match(
                                                                  element(2, cbench_spec:match("/x"))),
                                                          element(2, cbench_spec:response(#{})))),
    ?assertEqual({error, stopped}, cbench_nif:requests_nif(H, Filter)),
    ?assertEqual({error, stopped}, cbench_nif:down_nif(H)).

%% @doc The port program answers {error, badarg} to route and journal commands whose arguments
%% do not decode, and goes on.
port_survives_any_term(_Config) ->
    {ok, Port} = cbench_port:open(),
    {ok, Opts} = cbench_opts:validate(port, #{port => 0, threads => 1}),
    ?assertEqual({error, stopped}, cbench_port:request(Port, stubs, 5000)),
    {ok, _, 1, _} = cbench_port:request(Port, {start, cbench_opts:engine_map(Opts)}, 10000),
    [case cbench_port:request(Port, {route_add, M, R}, 5000) of
         {error, badarg} -> ok;
         {ok, Id} -> ok = cbench_port:request(Port, {route_remove, Id}, 5000);
         {error, einval} -> ok
     end || {M, R} <- corrupted()],
    Filter = #{since => 0, method => undefined, path => undefined, stub => undefined},
    [?assertEqual({error, badarg}, cbench_port:request(Port, {requests, F}, 5000))
     || F <- [x, #{}, Filter#{since := -1}, Filter#{method := 1}, Filter#{stub := a},
              maps:remove(path, Filter)]],
    [?assertEqual({ok, []}, cbench_port:request(Port, {requests, Filter#{stub := Id}}, 5000))
     || Id <- [0, -1, 1 bsl 64, -(1 bsl 70)]],
    [?assertEqual({error, enoent}, cbench_port:request(Port, {route_remove, Id}, 5000))
     || Id <- [0, -1, 1 bsl 64, (1 bsl 64) - 1]],
    ?assertEqual({error, badarg}, cbench_port:request(Port, {route_remove, 1.0}, 5000)),
    %% Any int status in a reply frame reaches the engine, which refuses it, as the NIF's do; the
    %% program goes on (a status over 999 was a malformed frame: exit). A status past a C int is
    %% still malformed, for both.
    true = port_command(Port, term_to_binary({reply, [{1, reply, 1000, [], <<>>},
                                                      {1, stream, -5, []}, {1, unavailable}]})),
    ?assertEqual({error, badarg}, cbench_port:request(Port, {journal_listen, yes}, 5000)),
    ?assertEqual({ok, []}, cbench_port:request(Port, stubs, 5000)),
    ?assertMatch({ok, #{requests := 0}}, cbench_port:request(Port, stats, 5000)),
    ok = cbench_port:request(Port, stop, 10000),
    port_close(Port).
