%%% @doc Automatic verification: the Common Test hook cbench_cth, the EUnit fixtures of
%%% cbench_eunit and with_server/3's verification. The hook and the fixtures are checked by running
%%% generated suites and EUnit modules in a node of their own (Common Test cannot run inside a
%%% Common Test run): a suite whose case forgot verify/1 with an unmet expectation must fail with
%%% the report, a suite whose expectations are met must pass, and every server is stopped.
-module(cbench_autoverify_SUITE).

-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0]).
-export([cth_fails_forgotten_verify/1, cth_passes_met_expectations/1, eunit_fixture/1,
         with_server_verifies/1]).

all() -> [cth_fails_forgotten_verify, cth_passes_met_expectations, eunit_fixture,
          with_server_verifies].

suite() -> [{timetrap, {minutes, 3}}].

%% A suite with the hook: a case that forgot verify/1 (an expectation nobody met), a case whose
%% request matched nothing, a case that passes, and a case that checks the hook stopped the
%% servers of the cases before it; the suite's own server has an unmet expectation, so
%% end_per_suite fails too.
cth_fails_forgotten_verify(Config) ->
    Suite = suite_source(
              "forgot_SUITE",
              "init_per_suite(C) ->\n"
              "    {ok, S} = cbench:start_server(nif, #{port => 0, threads => 1}),\n"
              "    {ok, _} = cbench:expect(S, \"/suite-level\", #{}, #{at_least => 1}),\n"
              "    [{suite_server, S} | C].\n"
              "end_per_suite(_C) -> ok.\n"
              "all() -> [forgot_verify, stray_request, met, none_left].\n"
              "forgot_verify(_C) ->\n"
              "    {ok, S} = cbench:start_server(nif, #{port => 0, threads => 1}),\n"
              "    {ok, _} = cbench:expect(S, #{method => post, path => \"/orders\"},\n"
              "                            #{status => 201}, #{times => 1}),\n"
              "    ok.\n"
              "stray_request(_C) ->\n"
              "    {ok, S} = cbench:start_link_server(port, #{port => 0, threads => 1}),\n"
              "    {ok, {{_, 404, _}, _, _}} = get(S, \"/nothing-here\"),\n"
              "    ok.\n"
              "met(_C) ->\n"
              "    {ok, S} = cbench:start_server(ehttpd, #{port => 0, threads => 1}),\n"
              "    {ok, _} = cbench:expect(S, \"/ping\", #{}, #{times => 1}),\n"
              "    {ok, {{_, 200, _}, _, _}} = get(S, \"/ping\"),\n"
              "    ok.\n"
              "none_left(C) ->\n"
              "    %% Only the suite's server runs: the hook stopped those of the cases before.\n"
              "    [S] = cbench_server_sup:servers(),\n"
              "    S = proplists:get_value(suite_server, C),\n"
              "    ok.\n"),
    {Result, Log} = run_ct(Config, "forgot", "forgot_SUITE", Suite),
    %% forgot_verify and stray_request fail; met and none_left pass.
    ?assertMatch({2, 2, _}, Result),
    ?assertEqual(failed, case_result(Log, "forgot_verify")),
    ?assertEqual(failed, case_result(Log, "stray_request")),
    ?assertEqual(ok, case_result(Log, "met")),
    ?assertEqual(ok, case_result(Log, "none_left")),
    %% The reports: the expectation and the stray request, named.
    ?assertMatch({match, _}, re:run(Log, "cbench_verify.*no_request_arrived.*POST /orders",
                                    [dotall])),
    ?assertMatch({match, _}, re:run(Log, "unexpected_request.*<<\"GET\">>.*<<\"/nothing-here\">>",
                                    [dotall])),
    %% end_per_suite fails with the suite's server's report.
    ?assertEqual(failed, case_result(Log, "end_per_suite")),
    ?assertMatch({match, _}, re:run(Log, "no_request_arrived.*/suite-level", [dotall])).

%% The same hook on a suite whose expectations are met passes, and stops every server (those of
%% a group included) so that the node has none left when the suite ends.
cth_passes_met_expectations(Config) ->
    Suite = suite_source(
              "met_SUITE",
              "all() -> [met, {group, g}, none_left].\n"
              "groups() -> [{g, [parallel], [met, met2]}].\n"
              "init_per_group(g, C) ->\n"
              "    {ok, S} = cbench:start_server(nif, #{port => 0, threads => 1}),\n"
              "    {ok, _} = cbench:expect(S, \"/group\", #{}, #{at_least => 0}),\n"
              "    C.\n"
              "end_per_group(g, _C) -> ok.\n"
              "met(_C) ->\n"
              "    {ok, S} = cbench:start_server(nif, #{port => 0, threads => 1}),\n"
              "    {ok, _} = cbench:expect(S, \"/ping\", #{}, #{times => 2}),\n"
              "    {ok, {{_, 200, _}, _, _}} = get(S, \"/ping\"),\n"
              "    {ok, {{_, 200, _}, _, _}} = get(S, \"/ping\"),\n"
              "    ok.\n"
              "met2(C) -> met(C).\n"
              "none_left(_C) ->\n"
              "    [] = cbench_server_sup:servers(),\n"
              "    ok.\n"),
    {Result, Log} = run_ct(Config, "met", "met_SUITE", Suite),
    ?assertMatch({4, 0, _}, Result),
    ?assertEqual(nomatch, re:run(Log, "cbench_verify")).

%% EUnit: a setup fixture whose test forgot verify/1 fails in its cleanup with the report; a
%% foreach fixture whose expectations are met passes.
eunit_fixture(Config) ->
    Dir = filename:join(proplists:get_value(priv_dir, Config), "eunit"),
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    Source =
        "-module(fixture_eunit_tests).\n"
        "-include_lib(\"eunit/include/eunit.hrl\").\n"
        "forgot_test_() ->\n"
        "    cbench_eunit:setup(nif, #{port => 0, threads => 1}, fun(S) ->\n"
        "        ?_test({ok, _} = cbench:expect(S, \"/never\", #{}, #{times => 1}))\n"
        "    end).\n"
        "met_test_() ->\n"
        "    cbench_eunit:foreach(port, #{port => 0, threads => 1}, [fun(S) ->\n"
        "        ?_test(begin\n"
        "            {ok, _} = cbench:expect(S, \"/once\", #{}, #{times => 1}),\n"
        "            inets:start(),\n"
        "            {ok, {{_, 200, _}, _, _}} = httpc:request(cbench:url(S, \"/once\"))\n"
        "        end)\n"
        "    end]).\n",
    File = filename:join(Dir, "fixture_eunit_tests.erl"),
    ok = file:write_file(File, Source),
    Eval = io_lib:format(
             "{ok, M} = compile:file(~p, [{outdir, ~p}]), code:add_patha(~p), "
             "R = eunit:test(M, [verbose]), "
             "io:format(\"~~nEUNIT-RESULT ~~p SERVERS ~~p~~n\", [R, cbench_server_sup:servers()]), "
             "halt().", [File, Dir, Dir]),
    Out = run_erl(Eval),
    ct:log("eunit:~n~s", [Out]),
    ?assertMatch({match, _}, re:run(Out, "EUNIT-RESULT error SERVERS \\[\\]")),
    ?assertMatch({match, _}, re:run(Out, "cbench_verify.*no_request_arrived.*/never", [dotall])),
    %% One passing test (met) of two.
    ?assertMatch({match, _}, re:run(Out, "met_test_.*ok", [dotall])).

%% with_server/3 verifies before it returns: an unmet expectation raises
%% {cbench_verify, Problems} and the server is stopped all the same; a met one returns Fun's result.
with_server_verifies(_Config) ->
    Self = self(),
    ?assertError({cbench_verify, [{no_request_arrived, <<"* /x">>, expected, 1}]},
                 cbench:with_server(nif, #{port => 0, threads => 1}, fun(S) ->
                     Self ! {server, S},
                     {ok, _} = cbench:expect(S, "/x", #{}, #{times => 1}),
                     done
                 end)),
    S = receive {server, Pid} -> Pid end,
    ?assertNot(lists:member(S, cbench_server_sup:servers())),
    ?assertEqual(done, cbench:with_server(ehttpd, #{port => 0, threads => 1}, fun(S2) ->
                     {ok, _} = cbench:expect(S2, "/x", #{}, #{times => 0}),
                     done
                 end)),
    %% An exception of Fun wins over the verification.
    ?assertError(oops, cbench:with_server(nif, #{port => 0, threads => 1}, fun(S3) ->
                     {ok, _} = cbench:expect(S3, "/x", #{}, #{times => 1}),
                     error(oops)
                 end)).

%% Helpers.

suite_source(Name, Body) ->
    ["-module(", Name, ").\n"
     "-compile([export_all, nowarn_export_all]).\n"
     "suite() -> [{ct_hooks, [cbench_cth]}, {timetrap, {seconds, 60}}].\n"
     "get(S, Path) ->\n"
     "    {ok, _} = application:ensure_all_started(inets),\n"
     "    httpc:request(get, {cbench:url(S, Path), []}, [], []).\n",
     Body].

%% Runs the suite with ct:run_test in a node of its own; its result and its suite.log.
run_ct(Config, Dir0, Name, Source) ->
    Dir = filename:join(proplists:get_value(priv_dir, Config), Dir0),
    Logs = filename:join(Dir, "logs"),
    ok = filelib:ensure_dir(filename:join(Logs, "x")),
    ok = file:write_file(filename:join(Dir, Name ++ ".erl"), Source),
    Eval = io_lib:format("R = ct:run_test([{dir, ~p}, {logdir, ~p}, {auto_compile, true}]), "
                         "io:format(\"~~nCT-RESULT ~~p.~~n\", [R]), halt().", [Dir, Logs]),
    Out = run_erl(Eval),
    ct:log("ct_run:~n~s", [Out]),
    {match, [R]} = re:run(Out, "CT-RESULT (.*)\\.\n", [{capture, all_but_first, list}]),
    {ok, Toks, _} = erl_scan:string(R ++ "."),
    {ok, Result} = erl_parse:parse_term(Toks),
    [SuiteLog] = filelib:wildcard(filename:join(Logs, "ct_run.*/*/run.*/suite.log")),
    {ok, Log} = file:read_file(SuiteLog),
    ct:log("suite.log:~n~s", [Log]),
    {Result, Log}.

%% A case's result in a suite.log: ok, failed or skipped.
case_result(Log, Case) ->
    {match, [R]} = re:run(Log, "=case +(?:[A-Za-z_]+:)?" ++ Case ++ "\n(?:=[a-z]+.*\n)*?=result +(\\w+)",
                          [{capture, all_but_first, list}]),
    case R of
        "ok" -> ok;
        "failed" -> failed;
        _ -> skipped
    end.

%% An erl with cbench's code path, running Eval; its output.
run_erl(Eval) ->
    Erl = os:find_executable("erl"),
    Paths = lists:append([["-pa", filename:dirname(code:which(M))] || M <- [cbench]]),
    Port = open_port({spawn_executable, Erl},
                     [{args, ["-noshell" | Paths] ++ ["-eval", lists:flatten(Eval)]},
                      exit_status, stderr_to_stdout, binary]),
    collect(Port, [], erlang:monotonic_time(millisecond) + 150000).

collect(Port, Out, Deadline) ->
    Left = max(0, Deadline - erlang:monotonic_time(millisecond)),
    receive
        {Port, {data, D}} -> collect(Port, [Out, D], Deadline);
        {Port, {exit_status, _}} -> binary_to_list(iolist_to_binary(Out))
    after Left ->
        catch port_close(Port),
        binary_to_list(iolist_to_binary(Out))
    end.
