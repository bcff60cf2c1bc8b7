%%% @doc The cbench API: every function with good and bad input, settings, the `erl -s cbench'
%%% entry point and the application's stop.
-module(cbench_api_SUITE).

-include_lib("stdlib/include/assert.hrl").

-export([all/0, init_per_suite/1, end_per_suite/1]).
-export([start_bad_input/1, other_calls_bad_input/1, url_and_port/1, servers_list/1,
         stop_twice/1, settings_map/1, start_banner/1, app_stop_stops_servers/1,
         same_stats_keys/1, bounds_table_drives_all_engines/1, cpu_pin_refused/1,
         cpu_pin_reported/1, url_join/1, host_names/1, threads_zero/1, start_link_server/1,
         with_server/1, h2c_only_listener/1, journal_filter_improper_list/1,
         reply_forged_handle/1, reply_wrong_number/1, reply_after_stop/1, stop_timeout_not_cut/1, json_matcher_alike/1,
         load_stubs_place_and_reason/1, scenario_limit/1, handler_not_local/1,
         record_skips_query_nul/1]).

all() ->
    [start_bad_input, other_calls_bad_input, url_and_port, servers_list, stop_twice,
     settings_map, same_stats_keys, bounds_table_drives_all_engines, cpu_pin_refused,
     cpu_pin_reported, url_join, host_names, threads_zero, start_link_server, with_server,
     h2c_only_listener, journal_filter_improper_list, reply_forged_handle, reply_wrong_number, stop_timeout_not_cut,
     reply_after_stop, json_matcher_alike, load_stubs_place_and_reason, scenario_limit,
     handler_not_local, record_skips_query_nul,
     start_banner, app_stop_stops_servers].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(inets),
    {ok, _} = application:ensure_all_started(cbench),
    Config.

end_per_suite(_Config) ->
    application:stop(cbench).

%% Wrong types raise badarg; wrong values are {error, ...}.
start_bad_input(_Config) ->
    ?assertError(badarg, cbench:start_server("nif", #{})),
    ?assertError(badarg, cbench:start_server(nif, [])),
    ?assertError(badarg, cbench:start_server(nif, [{port, 0}])),
    ?assertEqual({error, {bad_engine, nginx}}, cbench:start_server(nginx, #{})),
    Bad = [{port, -1, {integer, 0, 65535}}, {port, 65536, {integer, 0, 65535}},
           {port, "80", {integer, 0, 65535}}, {ip, "not an ip.invalid", address},
           {ip, {1, 2, 3}, address}, {ip, 42, address}, {threads, -1, {integer, 0, 256}},
           {threads, 257, {integer, 0, 256}}, {threads, two, {integer, 0, 256}},
           {max_header_bytes, 0, {integer, 64, 16777216}},
           {max_header_bytes, 16777217, {integer, 64, 16777216}},
           {max_body_bytes, 0, {integer, 1, 1 bsl 62}},
           {header_timeout_ms, 0, {integer, 1, 4294967295}},
           {idle_timeout_ms, -5, {integer, 1, 4294967295}},
           {stop_timeout_ms, infinity, {integer, 0, 4294967295}}, {enable_h2, yes, boolean},
           {h2_max_concurrent_streams, 0, {integer, 1, 1048576}},
           {h2_max_concurrent_streams, 1048577, {integer, 1, 1048576}},
           {backlog, 0, {integer, 1, 65535}}, {journal, -1, {integer, 0, 10000000}},
           {journal, 10000001, {integer, 0, 10000000}}, {journal, off, {integer, 0, 10000000}},
           {journal_body_bytes, -1, {integer, 0, 67108864}},
           {journal_body_bytes, 67108865, {integer, 0, 67108864}}],
    [?assertEqual({{error, {bad_option, K, V, A}}, E}, {cbench:start_server(E, #{K => V}), E})
     || {K, V, A} <- Bad, E <- [nif, port, ehttpd]],
    [?assertEqual({{error, {bad_option, cpus, V, {list, {integer, 0, 1023}}}}, E},
                  {cbench:start_server(E, #{cpus => V}), E})
     || V <- [[a], [-1], x, [1024]], E <- [nif, port]],
    %% Unknown keys name the keys the engine takes; an option of another engine names those.
    [?assertMatch({error, {bad_option, K, 1, {known, [First | _]}}},
                  cbench:start_server(E, #{K => 1}))
     || K <- [bogus, "port", fixture_dir, admin_host],
        {E, First} <- [{nif, admin}, {port, admin}, {ehttpd, backlog}]],
    %% The admin API is the C engine's (docs/routes.md): the ehttpd engine names those that have it.
    [?assertEqual({error, {bad_option, K, V, {engines, [nif, port]}}}, cbench:start_server(ehttpd, #{K => V}))
     || {K, V} <- [{admin, true}, {admin_port, 0}]],
    ?assertEqual({error, {bad_option, close, true, {engines, [ehttpd]}}},
                 cbench:start_server(nif, #{close => true})),
    ?assertEqual({error, {bad_option, close, false, {engines, [ehttpd]}}},
                 cbench:start_server(port, #{close => false})),
    ?assertEqual({error, {bad_option, close, 1, boolean}}, cbench:start_server(ehttpd, #{close => 1})),
    %% An h2c-only listener: the ehttpd engine has no HTTP/2; a C engine needs h2c on for it.
    ?assertEqual({error, {bad_option, enable_h1, false, {engines, [nif, port]}}},
                 cbench:start_server(ehttpd, #{enable_h1 => false})),
    [?assertEqual({error, {bad_option, enable_h1, false, {requires, {enable_h2, true}}}},
                  cbench:start_server(E, #{enable_h1 => false, enable_h2 => false}))
     || E <- [nif, port]],
    ?assertEqual({error, {bad_option, enable_h1, yes, boolean}}, cbench:start_server(nif, #{enable_h1 => yes})),
    ?assertEqual([], cbench:servers()).

%% The bounds come from the engine's table (cbench_schema, generated from src/options.c), and the
%% NIF and the port program, given a value Erlang would let through, answer with the same term as
%% the Erlang check: one table drives every engine. Each bound is accepted at min and max.
bounds_table_drives_all_engines(_Config) ->
    Rows = [R || R = #{type := integer, engines := [nif | _]} <- cbench_schema:options()],
    ?assert(length(Rows) >= 9),
    {ok, Valid} = cbench_opts:validate(nif, #{threads => 1}),
    Engine = cbench_opts:engine_map(Valid),
    [begin
         Out = [V || V <- [Min - 1, Max + 1], V >= 0],
         [begin
              Expected = {error, {bad_option, K, V, {integer, Min, Max}}},
              [?assertEqual({E, Expected}, {E, cbench:start_server(E, #{K => V})})
               || E <- Engines],
              ?assertEqual({nif, {error, {bad_option, Name, V, {integer, Min, Max}}}},
                           {nif, cbench_nif:start_nif(Engine#{Name => V})}),
              ?assertEqual({port, {error, {bad_option, Name, V, {integer, Min, Max}}}},
                           {port, port_start(Engine#{Name => V})})
          end || V <- Out],
         [?assertMatch({ok, #{K := V}}, cbench_opts:validate(E, #{K => V}))
          || V <- [Min, Max], E <- Engines,
             {K, V} =/= {threads, 0}] %% threads 0 becomes the online CPUs (threads_zero)
     end || #{key := K, name := Name, min := Min, max := Max, engines := Engines} <- Rows],
    %% The engines decode every option of the table (a key they did not know would be refused).
    {ok, S} = cbench:start_server(nif, maps:from_list(
                                         [{K, D} || #{key := K, default := D, engines := [nif | _]}
                                                        <- cbench_schema:options(),
                                                    K =/= ip, K =/= port, K =/= cpus] ++
                                             [{port, 0}])),
    ok = cbench:stop_server(S),
    ?assertMatch({error, {bad_option, bogus, 1, {known, _}}}, port_start(Engine#{bogus => 1})),
    ?assertMatch({error, {bad_option, bogus, 1, {known, _}}}, cbench_nif:start_nif(Engine#{bogus => 1})).

%% The port program's own answer to a start request, without the Erlang check in front of it.
port_start(Opts) ->
    {ok, P} = cbench_port:open(),
    R = cbench_port:request(P, {start, Opts}, 10000),
    _ = cbench_port:request(P, stop, 10000),
    catch port_close(P),
    R.

%% A pin the kernel refuses (a CPU the node may not run on) is an error on the C engines, with
%% the CPUs that are available; nothing keeps running.
cpu_pin_refused(_Config) ->
    Avail = available_cpus(),
    [Cpu | _] = [C || C <- lists:seq(1023, 0, -1), not lists:member(C, Avail)],
    [?assertEqual({E, {error, {bad_option, cpus, Cpus, {available, Avail}}}},
                  {E, cbench:start_server(E, #{cpus => Cpus, threads => 2})})
     || E <- [nif, port], Cpus <- [[Cpu], [hd(Avail), Cpu]]],
    ?assertEqual({error, {bad_option, cpus, [Cpu], {engines, [nif, port]}}},
                 cbench:start_server(ehttpd, #{cpus => [Cpu]})),
    ?assertEqual([], cbench:servers()).

%% What servers() reports for a pinned server is what the kernel applied.
cpu_pin_reported(_Config) ->
    [Cpu | _] = available_cpus(),
    [begin
         {ok, S} = cbench:start_server(E, #{cpus => [Cpu], threads => 2}),
         ?assertMatch([#{cpus := [Cpu, Cpu], threads := 2}],
                      [I || I = #{server := S1} <- cbench:servers(), S1 =:= S]),
         ok = cbench:stop_server(S)
     end || E <- [nif, port]].

%% The CPUs this node may run on, as the kernel says (Cpus_allowed_list: "0-1,4").
available_cpus() ->
    {ok, Status} = file:read_file("/proc/self/status"),
    {match, [List]} = re:run(Status, "Cpus_allowed_list:\\s*(\\S+)", [{capture, all_but_first, list}]),
    lists:append([case string:split(R, "-") of
                      [A] -> [list_to_integer(A)];
                      [A, B] -> lists:seq(list_to_integer(A), list_to_integer(B))
                  end || R <- string:split(List, ",", all)]).

%% A journal filter's `proto' that is an improper list is a bad filter, as a `method' one is, on
%% every engine and in requests/2 and await/4 alike (it raised function_clause from lists:all/2
%% in the caller).
journal_filter_improper_list(_Config) ->
    [begin
         {ok, S} = cbench:start_server(E, #{port => 0, threads => 1}),
         [?assertEqual({E, {error, {bad_filter, {{filter, K}, V, wrong_type}}}},
                       {E, cbench:requests(S, #{K => V})})
          || {K, V} <- [{proto, [http1 | h2c_prior]}, {proto, [http1, h2c_prior | x]},
                        {method, [get | post]}]],
         ?assertEqual({E, {error, {bad_filter, {{filter, proto}, [http1 | x], wrong_type}}}},
                      {E, cbench:await(S, #{proto => [http1 | x]}, 1, 0)}),
         ok = cbench:stop_server(S)
     end || E <- [nif, port, ehttpd]].

%% A request handle that an engine cannot have given is badarg on every engine, before anything
%% reaches the engine: a request number outside 0..2^64-1 (the port program took it in its frame,
%% could not decode it and exited, ending the server) or a state word that is not one (a
%% function_clause). The server then serves the real answer.
reply_forged_handle(_Config) ->
    [begin
         {ok, S} = cbench:start_server(E, #{port => 0, threads => 1}),
         {ok, _} = cbench:handle(S, "/h", self(), #{}),
         {ok, Sock} = gen_tcp:connect({127, 0, 0, 1}, cbench:port(S), [binary, {active, false}]),
         ok = gen_tcp:send(Sock, <<"GET /h HTTP/1.1\r\nhost: x\r\n\r\n">>),
         Req = #{handle := H} = receive {cbench_request, R} -> R after 10000 -> error(no_request) end,
         Forged = forged_handles(H),
         ?assert(length(Forged) >= 2),
         [begin
              ?assertError(badarg, cbench:reply(Req#{handle := F}, 200, [], <<"forged">>)),
              ?assertError(badarg, cbench:reply_stream(F, 200, [])),
              ?assertError(badarg, cbench:send(F, <<"x">>)),
              ?assertError(badarg, cbench:finish(F)),
              ?assertError(badarg, cbench:replies([{Req, 200, [], <<"real">>}, {F, 200, [], <<>>}]))
          end || F <- Forged],
         ?assertEqual({E, ok}, {E, cbench:reply(Req, 200, [], <<"real">>)}),
         {ok, Answer} = gen_tcp:recv(Sock, 0, 10000),
         ?assertMatch({E, {match, _}}, {E, re:run(Answer, <<"^HTTP/1.1 200 .*\r\n\r\nreal$">>,
                                                  [dotall])}),
         ?assertMatch({E, #{requests := 1}}, {E, cbench:stats(S)}),
         gen_tcp:close(Sock),
         ok = cbench:stop_server(S)
     end || E <- [nif, port, ehttpd]].

%% A handle with the real state word and another request's number is {error, gone} on every engine,
%% as the nif engine answers (port and ehttpd said ok: the word was claimed, the answer went to no
%% request, and the real one was lost); the real request is still answered.
reply_wrong_number(_Config) ->
    [begin
         {ok, S} = cbench:start_server(E, #{port => 0, threads => 1}),
         {ok, _} = cbench:handle(S, "/h", self(), #{}),
         {ok, Sock} = gen_tcp:connect({127, 0, 0, 1}, cbench:port(S), [binary, {active, false}]),
         ok = gen_tcp:send(Sock, <<"GET /h HTTP/1.1\r\nhost: x\r\n\r\n">>),
         Req = #{handle := H} = receive {cbench_request, R} -> R after 10000 -> error(no_request) end,
         F = setelement(3, H, element(3, H) + 1), %% the request number, on every engine
         ?assertEqual({E, {error, gone}}, {E, cbench:reply(Req#{handle := F}, 200, [], <<"forged">>)}),
         ?assertEqual({E, {error, gone}}, {E, cbench:reply_stream(F, 200, [])}),
         ?assertEqual({E, ok}, {E, cbench:reply(Req, 200, [], <<"real">>)}),
         {ok, Answer} = gen_tcp:recv(Sock, 0, 10000),
         ?assertMatch({E, {match, _}}, {E, re:run(Answer, <<"^HTTP/1.1 200 .*\r\n\r\nreal$">>,
                                                  [dotall])}),
         gen_tcp:close(Sock),
         ok = cbench:stop_server(S)
     end || E <- [nif, port, ehttpd]].

%% stop_timeout_ms takes up to 2^32-1 ms: the supervisor must not kill the server before that stop
%% has run out (its child spec said shutdown => 30000, which cut a longer graceful stop).
stop_timeout_not_cut(_Config) ->
    [begin
         {ok, S} = cbench:start_server(E, #{port => 0, threads => 1, stop_timeout_ms => 4294967295}),
         {ok, Spec} = supervisor:get_childspec(cbench_server_sup, S),
         ?assertEqual({E, infinity}, {E, maps:get(shutdown, Spec)}),
         ok = cbench:stop_server(S)
     end || E <- [nif, port, ehttpd]].

%% Once stop_server/1 has returned, every request a handler holds is gone on every engine: an
%% answer, a streamed answer's piece and end are {error, gone}, as the docs say for a request whose
%% client is gone (the ehttpd engine said ok: the connection process had been killed with the state
%% word of its request still open, and the answer went to a dead pid).
reply_after_stop(_Config) ->
    [begin
         {ok, S} = cbench:start_server(E, #{port => 0, threads => 1}),
         {ok, _} = cbench:handle(S, "/h", self(), #{}),
         Socks = [begin
                      {ok, Sock} = gen_tcp:connect({127, 0, 0, 1}, cbench:port(S), [binary, {active, false}]),
                      ok = gen_tcp:send(Sock, <<"GET /h HTTP/1.1\r\nhost: x\r\n\r\n">>),
                      Sock
                  end || _ <- [1, 2, 3]],
         [Whole, Streamed, Many] = [receive {cbench_request, R} -> R after 10000 -> error(no_request) end
                                    || _ <- Socks],
         ok = cbench:reply_stream(Streamed, 200, []),
         ok = cbench:send(Streamed, <<"piece">>),
         ok = cbench:stop_server(S),
         ?assertEqual({E, [{error, gone}, {error, gone}, {error, gone}, {error, gone}, [{error, gone}]]},
                      {E, [cbench:reply(Whole, 200, [], <<"late">>), cbench:reply_stream(Whole, 200, []),
                           cbench:send(Streamed, <<"late">>), cbench:finish(Streamed),
                           cbench:replies([{Many, 200, [], <<"late">>}])]}),
         [gen_tcp:close(Sock) || Sock <- Socks]
     end || E <- [nif, port, ehttpd]].

%% A JSON body matcher is JSON to every engine alike, as jansson reads it (the C engines' parser):
%% at most 2048 levels with the top value the first (2048 arrays around a number are too deep, 2048
%% around an empty one are not), no NUL in an object's key (in a string, yes). The Erlang check took
%% one level more and NUL in keys; the C engines then refused the stub with the JSON text as the
%% value, and ehttpd served it. A request body is read the same way: 2049 levels do not match.
json_matcher_alike(_Config) ->
    Nest = fun(N, In) -> lists:foldl(fun(_, Acc) -> [Acc] end, In, lists:seq(1, N)) end,
    Bad = [Nest(2048, 1), Nest(2048, []), #{<<"a", 0>> => 1}, #{<<"k">> => [#{<<0>> => 1}]},
           #{<<"k">> => Nest(2047, 1)}],
    Good = [Nest(2047, 1), Nest(2047, []), #{<<"a">> => <<"b", 0>>}, #{<<"k">> => Nest(2046, 1)}],
    Body = fun(N) -> iolist_to_binary([<<"{\"k\":">>, lists:duplicate(N, $[), <<"1">>,
                                       lists:duplicate(N, $]), <<"}">>]) end,
    [begin
         {ok, S} = cbench:start_server(E, #{port => 0, threads => 1}),
         [?assertEqual({E, {error, {bad_stub, {{match, body}, J, bad_json}}}},
                       {E, cbench:stub(S, #{path => "/j", body => #{K => J}}, #{})})
          || J <- Bad, K <- [json, json_subset]],
         [?assertMatch({E, {ok, _}}, {E, cbench:stub(S, #{path => "/j", body => #{K => J}}, #{})})
          || J <- Good, K <- [json, json_subset]],
         {ok, _} = cbench:stub(S, #{path => "/m", method => post, body => #{json_subset => #{}}},
                               #{status => 201}),
         ?assertEqual({E, [201, 404]},
                      {E, [post_status(cbench:port(S), "/m", Body(N)) || N <- [2046, 2047]]}),
         ok = cbench:stop_server(S)
     end || E <- [nif, port, ehttpd]].

%% load_stubs/2 names the same place and reason on every engine (the C engines' loader adds the line
%% and a description, docs/record.md): a stub that is not an object, a match or a path of the wrong
%% type are wrong_type, not missing (ehttpd's said `stubs[0].match: missing' for all three).
load_stubs_place_and_reason(_Config) ->
    File = filename:join(filename:basedir(user_cache, "cbench_api_SUITE"), "stubs.json"),
    ok = filelib:ensure_dir(File),
    Cases = [{<<"[5]">>, <<"stubs[0]">>, <<"wrong_type">>},
             {<<"[{\"match\": 5}]">>, <<"stubs[0].match">>, <<"wrong_type">>},
             {<<"[{\"response\": {}}]">>, <<"stubs[0].match">>, <<"missing">>},
             {<<"[{\"match\": {\"path\": 5}}]">>, <<"stubs[0].match.path">>, <<"wrong_type">>},
             {<<"[{\"match\": {}}]">>, <<"stubs[0].match.path">>, <<"missing">>}],
    [begin
         {ok, S} = cbench:start_server(E, #{port => 0, threads => 1}),
         [begin
              ok = file:write_file(File, Text),
              {error, {bad_stub_file, Msg}} = cbench:load_stubs(S, File),
              %% FILE[:LINE]: PLACE: REASON[: description]
              [_, Rest] = binary:split(Msg, <<": ">>),
              [P, R | _] = binary:split(Rest, <<": ">>, [global]),
              ?assertEqual({E, Text, Place, Reason}, {E, Text, P, R})
          end || {Text, Place, Reason} <- Cases],
         ?assertEqual({E, []}, {E, cbench:stubs(S)}),
         ok = cbench:stop_server(S)
     end || E <- [nif, port, ehttpd]].

%% Past CB_MAX_SCENARIOS (4096) names or states, scenario/3 and a stub that names a new scenario
%% are {error, too_many_scenarios} on every engine (cbench_engine's word); nif and port said
%% {error, elimit} for the one and {error, too_many_routes} for the other.
scenario_limit(_Config) ->
    [begin
         {ok, S} = cbench:start_server(E, #{port => 0, threads => 1}),
         ?assertEqual({E, [ok]}, {E, lists:usort([cbench:scenario(S, integer_to_binary(I), <<"s">>)
                                                  || I <- lists:seq(1, 4096)])}),
         ?assertEqual({E, {error, too_many_scenarios}}, {E, cbench:scenario(S, <<"new">>, <<"s">>)}),
         ?assertEqual({E, {error, too_many_scenarios}},
                      {E, cbench:stub(S, #{path => "/x", scenario => <<"new">>, 'when' => <<"s">>,
                                           then => <<"t">>}, #{})}),
         %% A stub of a scenario that exists, with states that exist, is added.
         ?assertMatch({E, {ok, _}}, {E, cbench:stub(S, #{path => "/x", scenario => <<"1">>,
                                                         'when' => started, then => <<"s">>}, #{})}),
         ok = cbench:stop_server(S)
     end || E <- [nif, port, ehttpd]].

%% A handler's pid on another node is refused by handle/4 on every engine, naming the target: the
%% engines send to local processes (the NIF cannot send to another node, and said {error, badarg});
%% the port engine took it, and its server process crashed on the route's first request
%% (is_process_alive/1 of a remote pid), ehttpd took it and answered 503. Nothing is added.
handler_not_local(_Config) ->
    %% A pid of a node that is not connected (NEW_PID_EXT): a term a test can hold from elsewhere.
    Remote = binary_to_term(<<131, 88, 119, 9, "x@nowhere", 1:32, 0:32, 1:32>>),
    [begin
         {ok, S} = cbench:start_server(E, #{port => 0, threads => 1}),
         ?assertEqual({E, {error, {bad_handler, {{handler, target}, Remote, not_local}}}},
                      {E, cbench:handle(S, "/r", Remote, #{})}),
         ?assertEqual({E, []}, {E, cbench:stubs(S)}),
         {ok, Sock} = gen_tcp:connect({127, 0, 0, 1}, cbench:port(S), [binary, {active, false}]),
         ok = gen_tcp:send(Sock, <<"GET /r HTTP/1.1\r\nhost: x\r\n\r\n">>),
         ?assertEqual({E, {ok, <<"HTTP/1.1 404">>}}, {E, gen_tcp:recv(Sock, 12, 10000)}),
         gen_tcp:close(Sock),
         ?assertMatch({E, #{requests := 1}}, {E, cbench:stats(S)}),
         ok = cbench:stop_server(S)
     end || E <- [nif, port, ehttpd]].

%% A proxied request whose query has a name with NUL (or over 256 bytes) is not recorded, on every
%% engine: the C recorder skipped it, ehttpd's checked the values only and recorded it, and its
%% recorded/1 then raised badarg (a stub file key with \u0000 is JSON no loader reads).
record_skips_query_nul(_Config) ->
    {ok, Up} = cbench:start_server(ehttpd, #{port => 0, threads => 1}),
    To = "http://127.0.0.1:" ++ integer_to_list(cbench:port(Up)),
    Long = binary:copy(<<"n">>, 257),
    [begin
         {ok, S} = cbench:start_server(E, #{port => 0, threads => 1}),
         {ok, _} = cbench:stub(S, "/*", #{proxy => #{to => To, record => true}}),
         [begin
              {ok, Sock} = gen_tcp:connect({127, 0, 0, 1}, cbench:port(S), [binary, {active, false}]),
              ok = gen_tcp:send(Sock, [<<"GET /hello?">>, Q, <<" HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n">>]),
              {ok, <<"HTTP/1.1 200">>} = gen_tcp:recv(Sock, 12, 10000),
              gen_tcp:close(Sock)
          end || Q <- [<<"a%00b=1">>, <<Long/binary, "=1">>]],
         ?assertEqual({E, []}, {E, cbench:recorded(S)}),
         ?assertMatch({E, #{recorded := 0, record_skipped := 2}}, {E, cbench:stats(S)}),
         ok = cbench:stop_server(S)
     end || E <- [nif, port, ehttpd]],
    ok = cbench:stop_server(Up).

%% The status of a POST (one request on its own connection).
post_status(Port, Path, Body) ->
    {ok, Sock} = gen_tcp:connect({127, 0, 0, 1}, Port, [binary, {active, false}]),
    ok = gen_tcp:send(Sock, [<<"POST ">>, Path, <<" HTTP/1.1\r\nhost: x\r\ncontent-length: ">>,
                             integer_to_binary(byte_size(Body)), <<"\r\n\r\n">>, Body]),
    {ok, <<"HTTP/1.1 ", Status:3/binary, _/binary>>} = gen_tcp:recv(Sock, 12, 10000),
    gen_tcp:close(Sock),
    binary_to_integer(Status).

forged_handles({cbench_nif, Srv, _}) ->
    [{cbench_nif, Srv, 1 bsl 64}, {cbench_nif, Srv, -1}];
forged_handles({cbench_port, Owner, Ref, St = {A, _}}) ->
    [{cbench_port, Owner, 1 bsl 64, St}, {cbench_port, Owner, -1, St}, {cbench_port, Owner, Ref, x},
     {cbench_port, Owner, Ref, {A, one}}];
forged_handles({cbench_ehttpd, Conn, Ref, {A, _}}) ->
    [{cbench_ehttpd, Conn, 1 bsl 64, {A, 1}}, {cbench_ehttpd, Conn, Ref, x},
     {cbench_ehttpd, Conn, Ref, {A, one}}].

%% A path without a leading slash is joined with one; "" is the bare base URL.
url_join(_Config) ->
    {ok, S} = cbench:start_server(ehttpd, #{port => 0, threads => 1}),
    Base = "http://127.0.0.1:" ++ integer_to_list(cbench:port(S)),
    ?assertEqual(Base ++ "/hello", cbench:url(S, "hello")),
    ?assertEqual(Base ++ "/hello", cbench:url(S, "/hello")),
    ?assertEqual(list_to_binary(Base ++ "/hello"), cbench:url(S, <<"hello">>)),
    ?assertEqual(Base ++ "/", cbench:url(S, "/")),
    ?assertEqual(Base, cbench:url(S, "")),
    ok = cbench:stop_server(S).

%% ip => "localhost" resolves (its IPv4 address); a name that does not resolve is a bad option.
host_names(_Config) ->
    [begin
         {ok, S} = cbench:start_server(E, #{port => 0, threads => 1, ip => Name}),
         ?assertMatch("http://127.0.0.1:" ++ _, cbench:url(S, "/")),
         {ok, {{_, 200, _}, _, "Hello, Joe!"}} = httpc:request(cbench:url(S, "/hello")),
         ok = cbench:stop_server(S)
     end || E <- [nif, port, ehttpd], Name <- ["localhost", <<"localhost">>, localhost]],
    [?assertEqual({error, {bad_option, ip, "nosuch.invalid", address}},
                  cbench:start_server(E, #{ip => "nosuch.invalid"}))
     || E <- [nif, port, ehttpd]].

%% threads => 0 is the online CPUs, as in the C API.
threads_zero(_Config) ->
    Online = erlang:system_info(logical_processors_online),
    [begin
         {ok, S} = cbench:start_server(E, #{port => 0, threads => 0}),
         ?assertMatch([#{threads := Online}], [I || I = #{server := S1} <- cbench:servers(), S1 =:= S]),
         ok = cbench:stop_server(S)
     end || E <- [nif, port, ehttpd]].

%% start_link_server/2: the server stops when its caller exits, normally or not; stopping it
%% from the caller does not take the caller down.
start_link_server(_Config) ->
    [begin
         Self = self(),
         {Pid, Ref} = spawn_monitor(fun() ->
                                            {ok, S} = cbench:start_link_server(nif, #{port => 0, threads => 1}),
                                            Self ! {server, S},
                                            receive go -> ok end,
                                            exit(Why)
                                    end),
         S = receive {server, S0} -> S0 end,
         SRef = monitor(process, S),
         Pid ! go,
         receive {'DOWN', Ref, process, Pid, _} -> ok end,
         receive {'DOWN', SRef, process, S, _} -> ok after 10000 -> ct:fail(server_alive) end,
         ?assertEqual([], cbench:servers())
     end || Why <- [normal, kill_me]],
    {ok, S2} = cbench:start_link_server(port, #{port => 0, threads => 1}),
    ?assert(lists:member(S2, element(2, process_info(self(), links)))),
    ok = cbench:stop_server(S2),
    ?assertEqual([], cbench:servers()).

%% with_server/3 returns Fun's result and stops the server; an exception in Fun is re-raised and
%% the server stopped all the same.
with_server(_Config) ->
    {Port, Hello} = cbench:with_server(ehttpd, #{port => 0, threads => 1},
                                       fun(S) ->
                                               {ok, {{_, 200, _}, _, B}} = httpc:request(cbench:url(S, "hello")),
                                               {cbench:port(S), B}
                                       end),
    ?assertEqual("Hello, Joe!", Hello),
    ?assertEqual({error, econnrefused}, gen_tcp:connect({127, 0, 0, 1}, Port, [], 1000)),
    ?assertError(oops, cbench:with_server(nif, #{port => 0, threads => 1}, fun(_) -> error(oops) end)),
    ?assertThrow(t, cbench:with_server(port, #{port => 0, threads => 1}, fun(_) -> throw(t) end)),
    ?assertEqual([], cbench:servers()),
    ?assertError({start_server, {bad_option, port, -1, {integer, 0, 65535}}},
                 cbench:with_server(nif, #{port => -1}, fun(_) -> ok end)),
    ?assertError(badarg, cbench:with_server(nif, #{}, not_a_fun)).

%% enable_h1 => false (nif and port): the HTTP/2 preface is served, anything else gets
%% GOAWAY(PROTOCOL_ERROR) and a close (h2spec 3.5/2).
h2c_only_listener(_Config) ->
    [begin
         {ok, S} = cbench:start_server(E, #{port => 0, threads => 1, enable_h1 => false}),
         {ok, C} = gen_tcp:connect({127, 0, 0, 1}, cbench:port(S), [binary, {active, false}]),
         ok = gen_tcp:send(C, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"),
         Frames = recv_all(C, <<>>),
         ?assertEqual({E, [{4, 0}, {7, 1}]}, {E, frame_types(Frames)}), %% SETTINGS, GOAWAY(PROTOCOL_ERROR)
         {ok, S2} = cbench:start_server(E, #{port => 0, threads => 1}),
         ok = cbench:stop_server(S2),
         ok = cbench:stop_server(S)
     end || E <- [nif, port]],
    ok.

recv_all(C, Acc) ->
    case gen_tcp:recv(C, 0, 5000) of
        {ok, B} -> recv_all(C, <<Acc/binary, B/binary>>);
        {error, closed} -> Acc
    end.

%% [{Type, GoawayCode or 0}] of the frames in B.
frame_types(<<Len:24, Type:8, _Flags:8, _:32, Payload:Len/binary, Rest/binary>>) ->
    Code = case {Type, Payload} of {7, <<_:32, C:32, _/binary>>} -> C; _ -> 0 end,
    [{Type, Code} | frame_types(Rest)];
frame_types(<<>>) -> [].

other_calls_bad_input(_Config) ->
    [?assertError(badarg, F(X)) || F <- [fun cbench:stop_server/1, fun cbench:port/1,
                                         fun cbench:stats/1],
                                   X <- [foo, "pid", 1, make_ref()]],
    ?assertError(badarg, cbench:url(foo, "/")),
    {ok, S} = cbench:start_server(ehttpd, #{port => 0}),
    ?assertError(badarg, cbench:url(S, 42)),
    ?assertError(badarg, cbench:url(S, [<<"x">>])),
    %% A pid that is not a server.
    ?assertEqual({error, not_running}, cbench:port(self())),
    ?assertEqual({error, not_running}, cbench:stats(self())),
    ?assertEqual({error, not_running}, cbench:url(self(), "/")),
    ?assertEqual(ok, cbench:stop_server(self())),
    ok = cbench:stop_server(S).

url_and_port(_Config) ->
    [begin
         {ok, S} = cbench:start_server(E, #{port => 0, threads => 1}),
         P = cbench:port(S),
         ?assert(is_integer(P) andalso P > 0),
         Url = "http://127.0.0.1:" ++ integer_to_list(P) ++ "/hello",
         ?assertEqual(Url, cbench:url(S, "/hello")),
         ?assertEqual(list_to_binary(Url), cbench:url(S, <<"/hello">>)),
         ok = cbench:stop_server(S),
         ?assertEqual({error, not_running}, cbench:port(S))
     end || E <- [nif, port, ehttpd]],
    %% IPv6 literals are bracketed.
    {ok, S6} = cbench:start_server(ehttpd, #{port => 0, ip => "::1"}),
    ?assertMatch("http://[::1]:" ++ _, cbench:url(S6, "/")),
    ok = cbench:stop_server(S6).

servers_list(_Config) ->
    {ok, A} = cbench:start_server(ehttpd, #{port => 0, threads => 1}),
    {ok, B} = cbench:start_server(nif, #{port => 0, threads => 1}),
    Servers = cbench:servers(),
    ?assertEqual([{A, ehttpd}, {B, nif}],
                 lists:sort([{S, E} || #{server := S, engine := E} <- Servers])),
    [?assertMatch(#{port := P, url := "http://127.0.0.1:" ++ _} when is_integer(P), I)
     || I <- Servers],
    ok = cbench:stop_server(A),
    ok = cbench:stop_server(B),
    ?assertEqual([], cbench:servers()).

stop_twice(_Config) ->
    [begin
         {ok, S} = cbench:start_server(E, #{port => 0, threads => 1}),
         ok = cbench:stop_server(S),
         ok = cbench:stop_server(S)
     end || E <- [nif, port, ehttpd]],
    ok.

settings_map(_Config) ->
    S = cbench:settings(),
    ?assertMatch(#{schedulers := N, schedulers_online := N, bound := false,
                   busy_wait := _, bindings := _, engines := #{nif := #{threads := N},
                                                              port := #{threads := N},
                                                              ehttpd := #{threads := N}}}
                   when is_integer(N), S),
    %% Unbound schedulers: no pinning by default.
    ?assertMatch(#{engines := #{nif := #{cpus := []}}}, S).

%% The counters have the same keys whatever the engine.
same_stats_keys(_Config) ->
    Keys = [begin
                {ok, S} = cbench:start_server(E, #{port => 0, threads => 1}),
                St = cbench:stats(S),
                ok = cbench:stop_server(S),
                {lists:sort(maps:keys(St)),
                 lists:sort(maps:keys(maps:get(requests_by_route, St))),
                 lists:sort(maps:keys(maps:get(requests_by_proto, St)))}
            end || E <- [nif, port, ehttpd]],
    ?assertMatch([K, K, K], Keys).

%% cbench:start/0 (`erl -s cbench') starts the three engines on the ports of the env and prints
%% the banner; cbench:stop/0 stops them all.
start_banner(_Config) ->
    ok = application:set_env(cbench, ports, [{ehttpd, 0}, {nif, 0}, {port, 0}]),
    ok = cbench:start(),
    ?assertEqual([ehttpd, nif, port], lists:sort([E || #{engine := E} <- cbench:servers()])),
    [begin
         {ok, {{_, 200, _}, _, "Hello, Joe!"}} = httpc:request(Url ++ "hello")
     end || #{url := Url} <- cbench:servers()],
    ok = cbench:stop(),
    ?assertEqual([], cbench:servers()),
    {ok, _} = application:ensure_all_started(cbench),
    ok = application:unset_env(cbench, ports).

%% application:stop stops every engine: nothing listens afterwards.
app_stop_stops_servers(_Config) ->
    {ok, _} = application:ensure_all_started(cbench),
    Ports = [begin {ok, S} = cbench:start_server(E, #{port => 0, threads => 1}), cbench:port(S) end
             || E <- [nif, port, ehttpd]],
    ok = application:stop(cbench),
    [?assertEqual({error, econnrefused}, gen_tcp:connect({127, 0, 0, 1}, P, [], 1000))
     || P <- Ports],
    {ok, _} = application:ensure_all_started(cbench).
