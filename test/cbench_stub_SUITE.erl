%%% @doc Routes as data, beyond one engine: bad stub terms (badarg or {bad_stub, {Field, Value, Why}},
%%% the same on every engine and from the C engine's own checks), the canonical
%%% form every engine takes, the Erlang fixture route list against the C table (same requests to the
%%% nif and ehttpd engines, same answers and route names), and the NIF and the port program given
%%% terms that do not decode (badarg or {error, badarg}, never a crash).
-module(cbench_stub_SUITE).

-include_lib("stdlib/include/assert.hrl").

-export([all/0, init_per_suite/1, end_per_suite/1]).
-export([bad_stubs/1, c_engine_detail/1, whys_agree_with_c/1, canonical_forms/1,
         fixture_routes_as_in_c/1, nif_survives_any_term/1, port_survives_any_term/1,
         many_stubs_one_by_one/1, nif_and_port_decode_alike/1, fields_agree_with_c/1]).

all() -> [bad_stubs, c_engine_detail, whys_agree_with_c, canonical_forms, fixture_routes_as_in_c,
          nif_survives_any_term, port_survives_any_term, many_stubs_one_by_one,
          nif_and_port_decode_alike, fields_agree_with_c].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(inets),
    {ok, S} = cbench:start_server(ehttpd, #{port => 0, threads => 1}),
    [{server, S} | Config].

end_per_suite(Config) ->
    cbench:stop_server(proplists:get_value(server, Config)).

%% @doc Wrong types at the top are badarg; anything wrong inside Match or Response is
%% {error, {bad_stub, {Field, Value, Why}}} naming the field, the value and why, the same term on
%% every engine; nothing is added.
bad_stubs(Config) ->
    S = proplists:get_value(server, Config),
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
    {ok, Nif} = cbench:start_server(nif, #{port => 0, threads => 1}),
    {ok, Port} = cbench:start_server(port, #{port => 0, threads => 1}),
    [begin
         [?assertEqual({E, M, {error, {bad_stub, Bad}}}, {E, M, cbench:stub(Server, M, #{})})
          || {M, Bad} <- bad_matches()],
         [?assertEqual({E, R, {error, {bad_stub, Bad}}}, {E, R, cbench:stub(Server, "/x", R)})
          || {R, Bad} <- bad_responses(Config)],
         ?assertEqual({E, []}, {E, cbench:stubs(Server)})
     end || {E, Server} <- [{ehttpd, S}, {nif, Nif}, {port, Port}]],
    ok = cbench:stop_server(Nif),
    ok = cbench:stop_server(Port).

bad_matches() ->
    Params9 = "/" ++ lists:join("/", ["{p" ++ integer_to_list(I) ++ "}" || I <- lists:seq(1, 9)]),
    P = {match, path},
    [{#{method => get}, {P, undefined, missing}},
     {#{path => "/x", bogus => 1}, {{match, bogus}, 1, unknown_key}},
     {"x", {P, "x", no_leading_slash}},
     {<<>>, {P, <<>>, empty}},
     {"/a b", {P, "/a b", bad_char}},
     {"/a?b", {P, "/a?b", bad_char}},
     {"/a#b", {P, "/a#b", bad_char}},
     {"/a\r\nb", {P, "/a\r\nb", bad_char}},
     {"/" ++ lists:duplicate(4096, $a), {P, "/" ++ lists:duplicate(4096, $a), too_long}},
     {"/a*", {P, "/a*", misplaced_star}},
     {"/*/x", {P, "/*/x", misplaced_star}},
     {"/a/{b", {P, "/a/{b", unclosed_brace}},
     {"/a/{b/c}", {P, "/a/{b/c}", unclosed_brace}},
     {"/a/b}", {P, "/a/b}", stray_brace}},
     {"/a/x{id}", {P, "/a/x{id}", param_not_segment}},
     {"/a/{}", {P, "/a/{}", empty_param_name}},
     {"/a/{i-d}", {P, "/a/{i-d}", bad_param_name}},
     {"/a/{id}/*", {P, "/a/{id}/*", star_with_param}},
     {<<"/caf", 233>>, {P, <<"/caf", 233>>, bad_char}},
     {Params9, {P, Params9, too_many_params}},
     {#{path => 42}, {P, 42, wrong_type}},
     {#{path => "/x", method => purge}, {{match, method}, purge, unknown_method}},
     {#{path => "/x", method => <<"get">>}, {{match, method}, <<"get">>, unknown_method}},
     {#{path => "/x", method => []}, {{match, method}, [], empty}},
     {#{path => "/x", method => [get, 42]}, {{match, method}, 42, wrong_type}},
     {#{path => "/x", method => lists:duplicate(17, get)}, {{match, method}, 17, too_many}},
     {#{path => "/x", headers => [{"bad name", present}]},
      {{match, headers, <<"bad name">>}, <<"bad name">>, not_a_token}},
     {#{path => "/x", headers => [{"", present}]}, {{match, headers, <<>>}, <<>>, empty}},
     {#{path => "/x", headers => [{"X", "a\r\nb"}]}, {{match, headers, <<"x">>}, <<"a\r\nb">>, control_char}},
     {#{path => "/x", headers => [{"x", " lead"}]}, {{match, headers, <<"x">>}, <<" lead">>, edge_space}},
     {#{path => "/x", headers => [x]}, {{match, headers}, x, wrong_type}},
     {#{path => "/x", headers => [{"x", present} | y]}, {{match, headers}, [{"x", present} | y], wrong_type}},
     {#{path => "/x", headers => lists:duplicate(33, {"x", present})}, {{match, headers}, 33, too_many}},
     {#{path => "/x", query => [{"", present}]}, {{match, query, <<>>}, <<>>, empty}},
     {#{path => "/x", query => [{lists:duplicate(257, $q), present}]},
      {{match, query, list_to_binary(lists:duplicate(257, $q))}, list_to_binary(lists:duplicate(257, $q)),
       too_long}},
     {#{path => "/x", query => [{"q", {1}}]}, {{match, query, <<"q">>}, {1}, wrong_type}},
     {#{path => "/x", query => nope}, {{match, query}, nope, wrong_type}},
     {#{path => "/x", priority => 1.5}, {{match, priority}, 1.5, wrong_type}},
     {#{path => "/x", priority => 1000001}, {{match, priority}, 1000001, out_of_range}},
     {#{path => "/x", name => "has space"}, {{match, name}, "has space", bad_char}},
     {#{path => "/x", name => ""}, {{match, name}, "", empty}},
     {#{path => "/x", name => {1}}, {{match, name}, {1}, wrong_type}},
     {#{path => "/x", name => lists:duplicate(129, $n)}, {{match, name}, lists:duplicate(129, $n), too_long}}].

bad_responses(Config) ->
    Dir = proplists:get_value(priv_dir, Config),
    Missing = filename:join(Dir, "missing.bin"),
    {Small, _} = cbench_stubs:tmp_file(Config, "small.bin", 3),
    %% A body file is a regular file of at most 1 TiB (issue 22): a sparse file one byte over, a
    %% FIFO (never opened: an open would wait for a writer), a device.
    Huge = filename:join(Dir, "huge.bin"),
    {ok, HF} = file:open(Huge, [write]),
    {ok, _} = file:position(HF, (1 bsl 40) + 1),
    ok = file:truncate(HF),
    ok = file:close(HF),
    Fifo = filename:join(Dir, "body.fifo"),
    _ = file:delete(Fifo),
    [] = os:cmd("mkfifo " ++ Fifo),
    H = {response, headers},
    Big = lists:duplicate(8193, $v),
    [{#{bogus => 1}, {{response, bogus}, 1, unknown_key}},
     {#{status => 199}, {{response, status}, 199, out_of_range}},
     {#{status => 600}, {{response, status}, 600, out_of_range}},
     {#{status => "200"}, {{response, status}, "200", wrong_type}},
     {#{headers => [{"x", "a\nb"}]}, {{response, headers, <<"x">>}, <<"a\nb">>, control_char}},
     {#{headers => [{"x", <<"a", 0, "b">>}]}, {{response, headers, <<"x">>}, <<"a", 0, "b">>, control_char}},
     {#{headers => [{"x", "b "}]}, {{response, headers, <<"x">>}, <<"b ">>, edge_space}},
     {#{headers => [{"x", Big}]}, {{response, headers, <<"x">>}, list_to_binary(Big), too_long}},
     {#{headers => [{"x-" ++ integer_to_list(I), lists:duplicate(8000, $v)} || I <- lists:seq(1, 9)]},
      {H, 9 * 8003, too_long}},
     {#{headers => [{"x y", "1"}]}, {{response, headers, <<"x y">>}, <<"x y">>, not_a_token}},
     {#{headers => [{"Content-Length", "1"}]},
      {{response, headers, <<"content-length">>}, <<"content-length">>, forbidden_header}},
     {#{headers => [{"transfer-encoding", "chunked"}]},
      {{response, headers, <<"transfer-encoding">>}, <<"transfer-encoding">>, forbidden_header}},
     {#{headers => [{"date", "x"}]}, {{response, headers, <<"date">>}, <<"date">>, forbidden_header}},
     {#{headers => [{"connection", "close"}]},
      {{response, headers, <<"connection">>}, <<"connection">>, forbidden_header}},
     {#{headers => x}, {H, x, wrong_type}},
     {#{headers => [x]}, {H, x, wrong_type}},
     {#{headers => lists:duplicate(65, {"x", "1"})}, {H, 65, too_many}},
     {#{body => 42}, {{response, body}, 42, wrong_type}},
     {#{body => {bytes, -1}}, {{response, body}, {bytes, -1}, out_of_range}},
     {#{body => {file, ""}}, {{response, body}, {file, ""}, empty}},
     {#{body => {file, Missing}}, {{response, body}, {file, list_to_binary(Missing)}, enoent}},
     {#{body => {file, Dir}}, {{response, body}, {file, list_to_binary(Dir)}, eisdir}},
     {#{body => {file, "/dev/null"}}, {{response, body}, {file, <<"/dev/null">>}, not_regular}},
     {#{body => {file, "/dev/zero"}}, {{response, body}, {file, <<"/dev/zero">>}, not_regular}},
     {#{body => {file, Fifo}}, {{response, body}, {file, list_to_binary(Fifo)}, not_regular}},
     {#{body => {file, Huge}}, {{response, body}, {file, list_to_binary(Huge)}, efbig}},
     {#{body => {file, Small}, chunks => {4, 0}}, {{response, chunks}, {4, 0}, chunks_exceed_body}},
     {#{delay_ms => -1}, {{response, delay_ms}, -1, out_of_range}},
     {#{delay_ms => 3600001}, {{response, delay_ms}, 3600001, out_of_range}},
     {#{chunks => {0, 1}}, {{response, chunks}, {0, 1}, out_of_range}},
     {#{chunks => 3}, {{response, chunks}, 3, wrong_type}},
     {#{body => <<"0123456789">>, chunks => {11, 0}}, {{response, chunks}, {11, 0}, chunks_exceed_body}},
     {#{chunks => {2, 0}}, {{response, chunks}, {2, 0}, chunks_exceed_body}},
     {#{times => 0}, {{response, times}, 0, out_of_range}},
     {#{times => forever}, {{response, times}, forever, wrong_type}},
     {#{fault => {reset, #{at => nowhere}}}, {{response, fault}, {reset, #{at => nowhere}}, bad_fault}},
     {#{status => 204, body => <<"x">>}, {{response, status}, 204, body_not_allowed}},
     {#{status => 304, chunks => {1, 0}}, {{response, status}, 304, body_not_allowed}}].

%% @doc The C engine names a refused field with the same term as cbench_spec: terms that only the
%% engine's checks see (cbench_spec would have refused them first) given straight to the NIF and to
%% the port program come back as {bad_stub, {Field, Value, Why}}, equal on both and to what
%% cbench:stub/3 answers for the same values.
c_engine_detail(Config) ->
    {ok, Opts} = cbench_opts:validate(nif, #{port => 0, threads => 1}),
    {ok, H} = cbench_nif:start(Opts),
    {ok, Port} = cbench_port:open(),
    {ok, POpts} = cbench_opts:validate(port, #{port => 0, threads => 1}),
    {ok, _, 1, _, 0, 0, false, _} = cbench_port:request(Port, {start, cbench_opts:engine_map(POpts)}, 10000),
    {ok, M0, R0} = cbench_spec:stub(#{path => "/z", headers => [{"x", "1"}]}, #{body => <<"z">>}),
    M = cbench_c_terms:match(M0),
    {ok, Px0 = #{proxy := PxOpts}} = cbench_spec:response(#{proxy => #{to => "http://127.0.0.1:1"}}),
    Params9 = iolist_to_binary(["/{p" ++ integer_to_list(I) ++ "}" || I <- lists:seq(1, 9)]),
    Cases =
        [{M#{path := <<"/a/{b">>}, R0, {{match, path}, <<"/a/{b">>, unclosed_brace}},
         {M#{path := Params9}, R0, {{match, path}, Params9, too_many_params}},
         {M#{path := <<"/a b">>}, R0, {{match, path}, <<"/a b">>, bad_char}},
         {M#{path := <<"/a/{i-d}">>}, R0, {{match, path}, <<"/a/{i-d}">>, bad_param_name}},
         {M#{name := <<"a b">>}, R0, {{match, name}, <<"a b">>, bad_char}},
         {M#{headers := [{<<"x">>, present}, {<<"a b">>, present}]}, R0,
          {{match, headers, <<"a b">>}, <<"a b">>, not_a_token}},
         {M#{headers := [{<<"x">>, {equal, <<"v ">>}}]}, R0, {{match, headers, <<"x">>}, <<"v ">>, edge_space}},
         {M, R0#{status := 204}, {{response, status}, 204, body_not_allowed}},
         {M, R0#{headers := [{<<"x">>, <<"a\r\nb">>}]}, {{response, headers, <<"x">>}, <<"a\r\nb">>, control_char}},
         {M, R0#{headers := [{<<"date">>, <<"x">>}]}, {{response, headers, <<"date">>}, <<"date">>, forbidden_header}},
         {M, R0#{chunks := {2, 0}}, {{response, chunks}, {2, 0}, chunks_exceed_body}},
         {M, R0#{delay_ms := 3600001}, {{response, delay_ms}, 3600001, out_of_range}},
         {M, R0#{fault => <<"reset?at=nowhere">>}, {{response, fault}, <<"reset?at=nowhere">>, bad_fault}},
         {M, R0#{body := {file, <<"/dev/null">>}}, {{response, body}, {file, <<"/dev/null">>}, not_regular}},
         %% A proxy's pipeline reaches the engine, which names every proxy option but `to' {response, proxy}.
         {M, Px0#{proxy := PxOpts#{pipeline => 65}}, {{response, proxy}, 65, out_of_range}},
         {M, Px0#{proxy := PxOpts#{pipeline => 2, protocol := h2c}}, {{response, proxy}, 2, conflict}}],
    [begin
         Want = {error, {bad_stub, Bad}},
         ?assertEqual({nif, Bad, Want}, {nif, Bad, cbench_nif:route_add_nif(H, Mx, Rx)}),
         ?assertEqual({port, Bad, Want}, {port, Bad, cbench_port:request(Port, {route_add, Mx, Rx}, 5000)})
     end || {Mx, Rx, Bad} <- Cases],
    %% The same values through cbench:stub/3 (cbench_spec refuses them first) give the same terms.
    S = proplists:get_value(server, Config),
    ?assertEqual({error, {bad_stub, {{match, path}, <<"/a/{b">>, unclosed_brace}}},
                 cbench:stub(S, <<"/a/{b">>, #{})),
    ?assertEqual({error, {bad_stub, {{match, path}, Params9, too_many_params}}}, cbench:stub(S, Params9, #{})),
    ?assertEqual({error, {bad_stub, {{response, headers, <<"x">>}, <<"a\r\nb">>, control_char}}},
                 cbench:stub(S, "/z", #{headers => [{<<"x">>, <<"a\r\nb">>}]})),
    %% A handler route (a deferred route in the engine) too.
    ?assertEqual({error, {bad_stub, {{match, path}, <<"/a/{b">>, unclosed_brace}}},
                 cbench_nif:handler_add_nif(H, M#{path := <<"/a/{b">>}, self(),
                                            #{timeout_ms => 1000, batch => false, body => whole})),
    ?assertEqual([], cbench_nif:stubs_nif(H)),
    ?assertEqual({ok, []}, cbench_port:request(Port, stubs, 5000)),
    ok = cbench_nif:stop(H),
    ok = cbench_port:request(Port, stop, 10000),
    port_close(Port).

%% @doc The reasons of cbench_spec:whys/0 are include/cbench.h's CB_WHY_* names, in order: one list
%% for the C API, the JSON loader and every Erlang engine.
whys_agree_with_c(_Config) ->
    Src = proplists:get_value(source, cbench_spec:module_info(compile)),
    Header = filename:join([filename:dirname(filename:dirname(Src)), "include", "cbench.h"]),
    {ok, Text} = file:read_file(Header),
    {match, Names} = re:run(Text, "^\\s*CB_WHY_([A-Z_]+)[ ,=]", [multiline, global, {capture, all_but_first, list}]),
    C = [list_to_atom(string:lowercase(N)) || [N] <- Names, N =/= "NONE", N =/= "COUNT"],
    ?assertEqual(C, cbench_spec:whys()).

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
         {error, {bad_stub, {_, _, Why}}} -> true = lists:member(Why, cbench_spec:whys())
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
    {ok, _, 1, _, 0, 0, false, _} = cbench_port:request(Port, {start, cbench_opts:engine_map(Opts)}, 10000),
    [case cbench_port:request(Port, {route_add, M, R}, 5000) of
         {error, badarg} -> ok;
         {ok, Id} -> ok = cbench_port:request(Port, {route_remove, Id}, 5000);
         {error, {bad_stub, {_, _, Why}}} -> true = lists:member(Why, cbench_spec:whys())
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

%% @doc Issue 22: 3,000 stubs added with one stub/3 call each (the C engines publish their route table
%% lazily: one build for the run, at the first request after it) all answer on every engine, with
%% their ids in order; the newer of two stubs on one path answers; after that, one more stub and one
%% removal are each seen by the next request.
many_stubs_one_by_one(_Config) ->
    N = 3000,
    Path = fun(I) -> case I rem 3 of
                         0 -> {"/many/" ++ integer_to_list(I), "/many/" ++ integer_to_list(I)};
                         1 -> {"/pre" ++ integer_to_list(I) ++ "/*", "/pre" ++ integer_to_list(I) ++ "/x/y"};
                         2 -> {"/p/{id}/" ++ integer_to_list(I), "/p/7/" ++ integer_to_list(I)}
                     end end,
    Body = fun(I) -> <<"stub ", (integer_to_binary(I))/binary>> end,
    Get = fun(Target) -> ["GET ", Target, " HTTP/1.1\r\nHost: x\r\n\r\n"] end,
    %% The near misses of /many/6: every stub's path differs, so the three first in matching order.
    Near = <<"No stub matched GET /many/6\nClosest stubs:\n  stub_3000 (id 3000): path\n"
             "  stub_2999 (id 2999): path\n  stub_2998 (id 2998): path\n">>,
    E404 = cbench_routes:resp(<<"404 Not Found">>, [<<"content-type: text/plain">>],
                              iolist_to_binary(["content-length: ", integer_to_list(byte_size(Near))]),
                              Near),
    [begin
         {ok, S} = cbench:start_server(E, #{port => 0, threads => 2}),
         Port = cbench:port(S),
         Ids = [begin
                    {P, _} = Path(I),
                    {ok, Id} = cbench:stub(S, #{path => P}, #{body => Body(I)}),
                    Id
                end || I <- lists:seq(1, N)],
         ?assertEqual({E, lists:seq(hd(Ids), hd(Ids) + N - 1)}, {E, Ids}),
         ok = cbench_stubs:raw(Port, [{Get(element(2, Path(I))), cbench_stubs:ok200(Body(I))}
                                      || I <- lists:seq(1, N)]),
         {ok, Newer} = cbench:stub(S, #{path => "/many/3"}, #{body => <<"newer">>}),
         ok = cbench_stubs:raw(Port, [{Get("/many/3"), cbench_stubs:ok200(<<"newer">>)}]),
         ok = cbench:unstub(S, Newer),
         ok = cbench:unstub(S, lists:nth(6, Ids)),
         ok = cbench_stubs:raw(Port, [{Get("/many/3"), cbench_stubs:ok200(Body(3))},
                                      {Get("/many/6"), E404}]),
         ?assertEqual({E, N - 1}, {E, length(cbench:stubs(S))}),
         ok = cbench:stop_server(S)
     end || E <- [nif, port, ehttpd]],
    ok.

%% @doc The NIF and the port program decode with one codec (terms/codec.c): every corrupted stub,
%% filter and reply term gets the same answer from both. Before the codec they differed on 43 of
%% these stubs and one filter (a key the term does not take, `after' on a single response, a
%% single response's keys beside a sequence's, priority -2^31: the NIF took them, the port
%% program refused them) and on reply items given as iolists (the NIF took them, the program
%% exited 2); both now refuse the first and take the second (docs/erlang.md, "One codec").
nif_and_port_decode_alike(_Config) ->
    {ok, Opts} = cbench_opts:validate(nif, #{port => 0, threads => 1}),
    {ok, H} = cbench_nif:start(Opts),
    {ok, Port} = cbench_port:open(),
    {ok, POpts} = cbench_opts:validate(port, #{port => 0, threads => 1}),
    {ok, _, 1, _, 0, 0, false, _} = cbench_port:request(Port, {start, cbench_opts:engine_map(POpts)}, 10000),
    Class = fun({'EXIT', {badarg, _}}) -> badarg;
               ({error, badarg}) -> badarg;
               ({ok, Id}) when is_integer(Id) -> ok;
               ({ok, List}) when is_list(List) -> List;
               (Other) -> Other
            end,
    {ok, M0, R0} = cbench_spec:stub(#{path => "/z", method => get, headers => [{"x", "1"}]},
                                    #{body => <<"z">>, chunks => {1, 0}}),
    M = cbench_c_terms:match(M0),
    Seq = #{responses => [R0], 'after' => last, times => infinity},
    Stubs = corrupted()
        ++ [{M#{K => B}, R0} || K <- [scenario, priority], B <- odd_values()]
        ++ [{M, R0#{K => B}} || K <- [fault, delay, template, 'after'], B <- odd_values()]
        ++ [{M, Seq#{K => B}} || K <- [status, responses, 'after', times], B <- odd_values()]
        ++ [{M, Seq#{responses := [R0#{responses => []}]}}, {M, Seq#{responses := [R0 | R0]}},
            {M#{priority := -(1 bsl 31)}, R0}, {M#{priority := (1 bsl 31)}, R0}, {M, Seq}],
    Answers = [begin
                   N = Class(catch cbench_nif:route_add_nif(H, Mx, Rx)),
                   P = Class(cbench_port:request(Port, {route_add, Mx, Rx}, 5000)),
                   _ = cbench_nif:route_reset_nif(H),
                   ok = cbench_port:request(Port, route_reset, 5000),
                   {Mx, Rx, N, P}
               end || {Mx, Rx} <- Stubs],
    ?assertEqual([], [A || A = {_, _, N, P} <- Answers, N =/= P]),
    %% Both refuse a key a term does not take, and take the extremes of a C int's priority.
    ?assertEqual([{badarg, badarg}], lists:usort([{N, P} || {#{extra := _}, _, N, P} <- Answers])),
    ?assertEqual([{ok, ok}], lists:usort([{N, P} || {#{priority := Pr}, _, N, P} <- Answers,
                                                    Pr =:= -(1 bsl 31) orelse Pr =:= (1 bsl 31) - 1])),
    F0 = #{since => 0, method => undefined, path => undefined, stub => undefined},
    [?assertEqual({F, Class(catch cbench_nif:requests_nif(H, F))},
                  {F, Class(cbench_port:request(Port, {requests, F}, 5000))})
     || F <- [F0, F0#{extra => 1}, F0#{method => <<>>}, F0#{path => [<<"a">>]}, F0#{since => 1 bsl 64},
              F0#{stub => 1.0}, F0#{stub => 1 bsl 64}, F0#{method => "GET"}, maps:remove(stub, F0)]],
    ?assertError(badarg, cbench_nif:requests_nif(H, F0#{extra => 1})),
    %% Reply items: iodata is taken by both (here the request is gone); a term that is not an item
    %% is badarg for the NIF and a malformed frame (exit 2) for the program.
    Items = [{1, reply, 200, [{["x-", <<"a">>], [<<"b">>, $c]}], ["he", [<<"l">>], "lo"]},
             {2, stream, 200, [{<<"x">>, "y"}]}, {3, send, [<<"a">> | <<"b">>]}, {4, finish}, {5, unavailable}],
    ?assertEqual([{error, gone} || _ <- Items], cbench_nif:reply_nif(H, Items)),
    true = port_command(Port, term_to_binary({reply, Items})),
    ?assertMatch({ok, #{requests := 0}}, cbench_port:request(Port, stats, 5000)),
    ?assertError(badarg, cbench_nif:reply_nif(H, [{1, reply, 200, [{x, <<"y">>}], <<>>}])),
    %% The program exits 2 on the frame. Its status is awaited without writing again: a request
    %% written after it may find the pipe closed, and the port, linked to this process, then ends
    %% with epipe and takes the test with it (seen once in CI).
    true = port_command(Port, term_to_binary({reply, [{1, reply, 200, [{x, <<"y">>}], <<>>}]})),
    ?assertEqual({exit_status, 2}, receive {Port, {exit_status, St}} -> {exit_status, St} after 5000 -> timeout end),
    catch port_close(Port),
    ok = cbench_nif:stop(H).

odd_values() ->
    [foo, -1, <<"x">>, [1 | 2], {a}, 1 bsl 70, [], #{}, 3.5, undefined, any, true, infinity, 0, 600,
     -(1 bsl 31), (1 bsl 31) - 1, 1 bsl 32, {uniform, 1, 2, 3}, {lognormal, 1, 0.5, 3}, {lognormal, 1, 1, 3},
     {<<"s">>, undefined, undefined}, {<<"s">>, <<"a">>, 1}, "ab", last, cycle, not_found, {1, 0}, none].

%% @doc The field table and the codec's keys (test/cbench_fields.erl, generated from src/base/names.c
%% and terms/codec.c; make fields-check) are what the Erlang side names and builds, on every
%% engine: the Field of every refusal the nif, port and ehttpd engines give for a bad value of
%% each field is the table's; a journal entry, the counters and the stub list have the table's keys
%% on the three engines; the terms cbench_c_terms, cbench_spec and cbench_handler build for the C
%% glue have the codec's keys.
fields_agree_with_c(Config) ->
    S = proplists:get_value(server, Config),
    {ok, Nif} = cbench:start_server(nif, #{port => 0, threads => 1}),
    {ok, Port} = cbench:start_server(port, #{port => 0, threads => 1}),
    Engines = [{ehttpd, S}, {nif, Nif}, {port, Port}],
    %% One bad value per field Erlang can give.
    BadStubs = [{#{path => "/x", name => ""}, #{}}, {#{path => "/x", method => purge}, #{}}, {"x", #{}},
                {#{path => "/x", headers => nope}, #{}}, {#{path => "/x", query => nope}, #{}},
                {#{path => "/x", scenario => ""}, #{}}, {#{path => "/x", 'when' => "a"}, #{}},
                {#{path => "/x", then => "a"}, #{}}, {#{path => "/x", body => #{regex => "("}}, #{}},
                {"/x", #{status => 99}}, {"/x", #{headers => x}}, {"/x", #{body => {bytes, -1}}},
                {"/x", #{delay_ms => -1}}, {"/x", #{chunks => {0, 0}}}, {"/x", #{chunks => {1, -1}}},
                {"/x", #{fault => <<"nope">>}}, {"/x", #{responses => []}},
                {"/x", #{responses => [#{}], 'after' => x}}, {"/x", #{delay => {uniform, 5, 1}}},
                {"/x", #{template => maybe}}, {"/x", #{proxy => nope}}],
    Table = lists:usort([F || #{erl := F} <- cbench_fields:fields(), F =/= undefined]),
    [begin
         Given = [field(cbench:stub(Server, Mx, Rx)) || {Mx, Rx} <- BadStubs]
             ++ [field(cbench:handle(Server, "/h", self(), #{timeout_ms => 0}))],
         ?assertEqual({E, Table}, {E, lists:usort(Given)})
     end || {E, Server} <- Engines],
    %% A journal entry, the counters and the stub list, from each engine.
    {ok, _} = application:ensure_all_started(inets),
    Keys = fun(T) -> {Req, Opt} = cbench_fields:keys(T), lists:sort(Req ++ Opt) end,
    [begin
         {ok, Id} = cbench:stub(Server, "/fields", #{body => <<"f">>}),
         {ok, {{_, 200, _}, _, "f"}} =
             httpc:request("http://127.0.0.1:" ++ integer_to_list(cbench:port(Server)) ++ "/fields"),
         [Entry] = cbench:requests(Server, #{stub => Id}),
         ?assertEqual({E, Keys(entry)}, {E, lists:sort(maps:keys(Entry))}),
         ?assertEqual({E, Keys(stats)}, {E, lists:sort(maps:keys(cbench:stats(Server)))}),
         [Info] = [I || I = #{id := I1} <- cbench:stubs(Server), I1 =:= Id],
         ?assertEqual({E, Keys(stub_info)}, {E, lists:sort(maps:keys(maps:without([match, response], Info)))}),
         ok = cbench:unstub(Server, Id)
     end || {E, Server} <- Engines],
    %% What the Erlang side builds for the C glue.
    {ok, M, R1} = cbench_spec:stub(#{path => "/x", scenario => "s", body => #{equal => "b"}},
                                   #{body => "b", fault => <<"reset">>, delay => {uniform, 1, 2}}),
    {ok, R2} = cbench_spec:response(#{body => "b", template => true}),
    R = maps:merge(R1, R2),
    {ok, _, Sq} = cbench_spec:stub("/x", #{responses => [#{}], times => 2}),
    {ok, F} = cbench_spec:filter(#{method => get}),
    {ok, HOpts} = cbench_handler:opts(#{}),
    {ok, Px = #{proxy := PxOpts}} = cbench_spec:response(#{proxy => #{to => "http://127.0.0.1:1"},
                                                             fault => <<"reset">>}),
    %% An https proxy's optional keys: ca_pem and ca_file never together, so two terms between them.
    #{ca_pem := CaPem} = cbench_certs:tls_info(cbench_certs:new()),
    CaFile = filename:join(proplists:get_value(priv_dir, Config), "ca.pem"),
    ok = file:write_file(CaFile, CaPem),
    {ok, #{proxy := PxPem}} = cbench_spec:response(#{proxy => #{to => "https://127.0.0.1:1", ca_pem => CaPem,
                                                                server_name => "localhost"}}),
    {ok, #{proxy := PxFile}} = cbench_spec:response(#{proxy => #{to => "https://127.0.0.1:1", ca_file => CaFile}}),
    %% pipeline, there above 1 only, goes with an http:// one.
    {ok, #{proxy := PxPipe}} = cbench_spec:response(#{proxy => #{to => "http://127.0.0.1:1", pipeline => 2}}),
    ?assertEqual({proxy, Keys(proxy)},
                 {proxy, lists:usort(maps:keys(PxPem) ++ maps:keys(PxFile) ++ maps:keys(PxPipe))}),
    [?assertEqual({T, Keys(T)}, {T, lists:sort(maps:keys(Term))})
     || {T, Term} <- [{match, cbench_c_terms:match(M)}, {response, R}, {sequence, Sq},
                      {filter, cbench_c_terms:filter(F)}, {handler, HOpts},
                      {proxy_response, Px}]],
    %% An http one has the required keys alone.
    ?assertEqual({proxy, lists:sort(element(1, cbench_fields:keys(proxy)))}, {proxy, lists:sort(maps:keys(PxOpts))}),
    ok = cbench:stop_server(Nif),
    ok = cbench:stop_server(Port).

field({error, {Family, {{T, K}, _, _}}}) when Family =:= bad_stub; Family =:= bad_handler -> {T, K};
field({error, {bad_stub, {{T, K, _Item}, _, _}}}) -> {T, K};
field(Other) -> Other.
