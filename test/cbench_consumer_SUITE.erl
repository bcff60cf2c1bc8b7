%%% @doc cbench used as a dependency: a throwaway rebar3 project with cbench in `_checkouts' and
%%% `{deps, [cbench]}' compiles and runs the Common Test suite of docs/erlang.md ("Use it in your
%%% test suite"), taken from that file itself: a nif fixture on port 0 with stubs, the journal,
%%% expect/verify, await and down/up, and a server for one case with with_server/3. Offline: no hex
%%% access is needed.
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
    Source = readme_suite(repo_root()),
    ok = file:write_file(filename:join([Dir, "test", "fixture_SUITE.erl"]), Source),
    {Status, Out} = run(Dir, ["ct"], 150000),
    ct:log("rebar3 ct in ~s:~n~s", [Dir, Out]),
    ?assertEqual(0, Status),
    %% The suite of docs/erlang.md has four cases.
    ?assertMatch({match, _}, re:run(Out, "All 4 tests passed")),
    %% The pre-compile hook does not flood the consumer's output with compiler commands.
    ?assertEqual(nomatch, re:run(Out, "-std=gnu11|-fPIC")).

%% A dependency is built with its default profile: warnings_as_errors there would let a warning
%% that a newer OTP adds break a consumer's build, so it is only in cbench's own test profile.
warnings_as_errors_only_in_test_profile(_Config) ->
    {ok, Terms} = file:consult(filename:join(repo_root(), "rebar.config")),
    ?assertNot(lists:member(warnings_as_errors, proplists:get_value(erl_opts, Terms))),
    Test = proplists:get_value(test, proplists:get_value(profiles, Terms)),
    ?assert(lists:member(warnings_as_errors, proplists:get_value(erl_opts, Test))).

%% The suite of docs/erlang.md: the erlang code block that starts with -module(fixture_SUITE).
readme_suite(Root) ->
    {ok, Readme} = file:read_file(filename:join([Root, "docs", "erlang.md"])),
    [_, From] = binary:split(Readme, <<"```erlang\n-module(fixture_SUITE).">>),
    [Body | _] = binary:split(From, <<"```">>),
    <<"-module(fixture_SUITE).", Body/binary>>.

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
