%% @doc Runs inside the node under test (a peer started by the harness): starts the
%% cbench engines that have been built, OTP's inets httpd, and mochiweb and yaws when
%% they are installed, and reports what it started, on which ports, with which settings.
-module(cbench_bench_node).

-export([setup/1, memory_total/0, engine_pids/0]).

%% @doc Opts: threads (engine threads), docroot (fixture files for httpd), engines
%% (the names wanted among nif, port, ehttpd, httpd, mochiweb, yaws), router (add the 100 stubs of
%% the varied_paths_router case to each cbench engine). Returns a map with, per
%% engine, {ok, Port} or {skip, Reason}, and the node's settings.
-spec setup(map()) -> map().
setup(Opts = #{threads := Threads, docroot := DocRoot, engines := Wanted}) ->
    HaveCbench = code:ensure_loaded(cbench) =:= {module, cbench},
    _ = HaveCbench andalso application:ensure_all_started(cbench),
    Engines = [{E, start_engine(E, HaveCbench, Threads, DocRoot)} || E <- Wanted],
    %% varied_paths_router: the 100 routes, added through the stub API of each cbench engine.
    [ok = router_stubs(get({server, E}))
     || {E, {ok, _}} <- Engines, lists:member(E, [nif, port, ehttpd]), maps:get(router, Opts, false)],
    #{engines => maps:from_list(Engines),
      os_pid => list_to_integer(os:getpid()),
      otp => erlang:system_info(otp_release),
      erts => erlang:system_info(version),
      schedulers => erlang:system_info(schedulers_online),
      bindings => tuple_to_list(erlang:system_info(scheduler_bindings)),
      cbench_settings => cbench_settings(HaveCbench),
      cbench_vsn => app_vsn(cbench),
      inets_vsn => app_vsn(inets),
      mochiweb_vsn => app_vsn(mochiweb),
      yaws_vsn => app_vsn(yaws)}.

start_engine(httpd, _, _Threads, DocRoot) ->
    start_httpd(DocRoot);
%% The other BEAM servers, each with as many acceptors as the cbench engines have threads (at
%% least their own defaults).
start_engine(mochiweb, _, Threads, DocRoot) ->
    cbench_bench_mochiweb:start(DocRoot, Threads);
start_engine(yaws, _, Threads, DocRoot) ->
    cbench_bench_yaws:start(DocRoot, Threads);
start_engine(E, false, _, _) ->
    {skip, iolist_to_binary(io_lib:format("~s: the cbench Erlang application is not built", [E]))};
start_engine(E, true, Threads, _) ->
    try cbench:start_server(E, #{port => 0, threads => Threads}) of
        {ok, S} ->
            put({server, E}, S),
            install_handlers(S),
            {ok, cbench:port(S)};
        Other ->
            {skip, iolist_to_binary(io_lib:format("~s: start_server returned ~0p", [E, Other]))}
    catch
        C:R ->
            {skip, iolist_to_binary(io_lib:format("~s: start_server raised ~0p:~0p", [E, C, R]))}
    end.

router_stubs(S) ->
    Resp = #{status => 200, headers => [{<<"content-type">>, <<"text/plain">>}], body => <<"Hello, Joe!">>},
    lists:foreach(fun(I) ->
                          Path = "/r/" ++ integer_to_list(I),
                          {ok, _} = cbench:stub(S, #{method => get, path => Path, name => <<"r">>}, Resp)
                  end, lists:seq(0, 99)).
%% The routes of the erl_* cases (issue 14): one handler process per route kind, in this node.
%% Every engine serves them (a case an engine cannot serve is probed and shown as `-').
install_handlers(S) ->
    Batched = spawn(fun erl_handler/0),
    Single = spawn(fun erl_handler/0),
    _ = cbench:handle(S, "/erl/hello", Batched, #{batch => true}),
    _ = cbench:handle(S, "/erl/echo", Batched, #{batch => true}),
    _ = cbench:handle(S, "/erl/hello1", Single, #{batch => false}),
    ok.

erl_handler() ->
    receive
        {cbench_requests, Reqs} -> _ = cbench:replies([erl_answer(R) || R <- Reqs]);
        {cbench_request, Req} -> {R, St, H, B} = erl_answer(Req), _ = cbench:reply(R, St, H, B)
    end,
    erl_handler().

erl_answer(R = #{path := <<"/erl/echo">>, body := B}) ->
    {R, 200, [{<<"content-type">>, <<"application/octet-stream">>}], B};
erl_answer(R) ->
    {R, 200, [{<<"content-type">>, <<"text/plain">>}], <<"Hello, Joe!">>}.

%% httpd with nodelay: without it, Nagle's algorithm caps it near 1k req/s.
start_httpd(DocRoot) ->
    _ = inets:start(),
    Conf = [{port, 0}, {bind_address, {127, 0, 0, 1}}, {server_name, "cbench-bench"},
            {server_root, DocRoot}, {document_root, DocRoot},
            {socket_type, {ip_comm, [{nodelay, true}]}},
            {modules, [cbench_bench_httpd, mod_get]},
            {mime_types, [{"txt", "text/plain"}]},
            {default_type, "application/octet-stream"},
            {keep_alive, true}, {max_keep_alive_request, 1000000000},
            {keep_alive_timeout, 120}, {max_clients, 1000}],
    try inets:start(httpd, Conf) of
        {ok, Pid} ->
            [{port, P}] = httpd:info(Pid, [port]),
            {ok, P};
        Other ->
            {skip, iolist_to_binary(io_lib:format("httpd: ~0p", [Other]))}
    catch
        C:R -> {skip, iolist_to_binary(io_lib:format("httpd: ~0p:~0p", [C, R]))}
    end.

cbench_settings(false) -> undefined;
cbench_settings(true) ->
    try cbench:settings() of
        S -> iolist_to_binary(io_lib:format("~0p", [S]))
    catch _:_ -> undefined
    end.

app_vsn(App) ->
    _ = application:load(App),
    case application:get_key(App, vsn) of
        {ok, V} -> list_to_binary(V);
        undefined -> undefined
    end.

%% @doc erlang:memory(total), sampled by the harness during a run.
memory_total() -> erlang:memory(total).

%% @doc The OS pids of the engines' own processes outside the node (the port
%% program); the harness finds them as descendants of the node too.
engine_pids() -> [].
