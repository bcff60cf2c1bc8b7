%%% @doc cbench used as a dependency: a throwaway rebar3 project with cbench in `_checkouts' and
%%% `{deps, [cbench]}' compiles and runs a Common Test suite that starts a nif fixture on port 0,
%%% requests /hello and /delay/10 with httpc, and stops it. Offline: no hex access is needed.
-module(cbench_consumer_SUITE).

-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0]).
-export([rebar3_checkout_project/1, warnings_as_errors_only_in_test_profile/1]).

all() -> [rebar3_checkout_project, warnings_as_errors_only_in_test_profile].

suite() -> [{timetrap, {minutes, 3}}].

%% The repository: four levels above the cbench lib dir of rebar3's _build (its erl/ is a link
%% into the repository), checked by the presence of rebar.config.
repo_root() ->
    {ok, Erl} = file:read_link_all(filename:join(code:lib_dir(cbench), "erl")),
    Root = filename:dirname(filename:absname(Erl, code:lib_dir(cbench))),
    true = filelib:is_regular(filename:join(Root, "rebar.config")),
    Root.

rebar3_checkout_project(Config) ->
    Dir = filename:join(proplists:get_value(priv_dir, Config), "consumer"),
    ok = filelib:ensure_dir(filename:join([Dir, "test", "x"])),
    ok = filelib:ensure_dir(filename:join([Dir, "src", "x"])),
    ok = filelib:ensure_dir(filename:join([Dir, "_checkouts", "x"])),
    ok = file:make_symlink(repo_root(), filename:join([Dir, "_checkouts", "cbench"])),
    ok = file:write_file(filename:join(Dir, "rebar.config"), "{deps, [cbench]}.\n"),
    ok = file:write_file(filename:join([Dir, "src", "consumer.app.src"]),
                         "{application, consumer, [{vsn, \"0.1.0\"}, {applications, "
                         "[kernel, stdlib, cbench]}, {registered, []}]}.\n"),
    ok = file:write_file(filename:join([Dir, "test", "fixture_SUITE.erl"]), suite_source()),
    {Status, Out} = run(Dir, ["ct"], 150000),
    ct:log("rebar3 ct in ~s:~n~s", [Dir, Out]),
    ?assertEqual(0, Status),
    ?assertMatch({match, _}, re:run(Out, "All 1 tests passed")),
    %% The pre-compile hook does not flood the consumer's output with compiler commands.
    ?assertEqual(nomatch, re:run(Out, "-std=gnu11|-fPIC")).

%% A dependency is built with its default profile: warnings_as_errors there would let a warning
%% that a newer OTP adds break a consumer's build, so it is only in cbench's own test profile.
warnings_as_errors_only_in_test_profile(_Config) ->
    {ok, Terms} = file:consult(filename:join(repo_root(), "rebar.config")),
    ?assertNot(lists:member(warnings_as_errors, proplists:get_value(erl_opts, Terms))),
    Test = proplists:get_value(test, proplists:get_value(profiles, Terms)),
    ?assert(lists:member(warnings_as_errors, proplists:get_value(erl_opts, Test))).

%% The example of docs/beam.md, "Use it in your test suite".
suite_source() ->
    <<"-module(fixture_SUITE).\n"
      "-include_lib(\"common_test/include/ct.hrl\").\n"
      "-export([all/0, init_per_suite/1, end_per_suite/1, hello_and_delay/1]).\n"
      "\n"
      "all() -> [hello_and_delay].\n"
      "\n"
      "init_per_suite(Config) ->\n"
      "    {ok, _} = application:ensure_all_started(inets),\n"
      "    {ok, Server} = cbench:start_server(nif, #{port => 0}),\n"
      "    [{server, Server} | Config].\n"
      "\n"
      "end_per_suite(Config) ->\n"
      "    ok = cbench:stop_server(?config(server, Config)).\n"
      "\n"
      "hello_and_delay(Config) ->\n"
      "    Server = ?config(server, Config),\n"
      "    {ok, {{_, 200, _}, _, \"Hello, Joe!\"}} = httpc:request(cbench:url(Server, \"/hello\")),\n"
      "    {ok, {{_, 200, _}, _, \"ok\"}} = httpc:request(cbench:url(Server, \"/delay/10\")),\n"
      "    #{requests := 2} = cbench:stats(Server),\n"
      "    ok.\n">>.

%% rebar3 in Dir, without the environment of the rebar3 that runs this suite.
run(Dir, Args, Timeout) ->
    Rebar = os:find_executable("rebar3"),
    Env = [{K, false} || KV <- os:getenv(), [K | _] <- [string:split(KV, "=")],
                         lists:prefix("REBAR", K) orelse K =:= "ERL_LIBS"],
    Port = open_port({spawn_executable, Rebar},
                     [{args, Args}, {cd, Dir}, {env, Env}, exit_status, stderr_to_stdout, binary]),
    collect(Port, [], erlang:monotonic_time(millisecond) + Timeout).

collect(Port, Out, Deadline) ->
    Left = max(0, Deadline - erlang:monotonic_time(millisecond)),
    receive
        {Port, {data, D}} -> collect(Port, [Out, D], Deadline);
        {Port, {exit_status, S}} -> {S, binary_to_list(iolist_to_binary(Out))}
    after Left ->
        catch port_close(Port),
        {timeout, binary_to_list(iolist_to_binary(Out))}
    end.
