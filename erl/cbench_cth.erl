%%% @doc A Common Test hook that verifies cbench servers when the scope that started them ends:
%%% `{ct_hooks, [cbench_cth]}' in a suite's suite/0 (or a test spec, or `ct_run -ct_hooks').
%%%
%%% A server started during a test case (in init_per_testcase or the case itself) is
%%% verified with cbench:verify/1 just before end_per_testcase runs, and stopped after it; when the
%%% case had passed and a verification was not `ok', the case fails with
%%% `{cbench_verify, [#{server, url, problems}]}'. Servers started in init_per_suite or
%%% init_per_group are verified before end_per_suite or end_per_group, stopped after it, and fail
%%% that function the same way. A test that forgot verify/1 therefore no longer passes silently.
%%%
%%% Which scope started a server: a server remembers the group leader of the process that asked
%%% for it, and Common Test gives each test case its own, so cases of a parallel group are told
%%% apart; a server also counts only when it was not running when the scope began. A server the
%%% test stopped itself before the scope ended is not verified (stop_server/1 throws its state
%%% away): verify before stopping, or leave the stopping to the hook.
-module(cbench_cth).

-export([id/1, init/2, terminate/1]).
-export([pre_init_per_suite/3, post_init_per_suite/4, pre_end_per_suite/3, post_end_per_suite/4]).
-export([pre_init_per_group/4, post_init_per_group/5, pre_end_per_group/4, post_end_per_group/5]).
-export([pre_init_per_testcase/4, post_init_per_testcase/5, pre_end_per_testcase/4,
         post_end_per_testcase/5]).
%% Called by Common Test, not by this application.
-ignore_xref([{id, 1}, {init, 2}, {terminate, 1},
              {pre_init_per_suite, 3}, {post_init_per_suite, 4}, {pre_end_per_suite, 3},
              {post_end_per_suite, 4},
              {pre_init_per_group, 4}, {post_init_per_group, 5}, {pre_end_per_group, 4},
              {post_end_per_group, 5},
              {pre_init_per_testcase, 4}, {post_init_per_testcase, 5}, {pre_end_per_testcase, 4},
              {post_end_per_testcase, 5}]).

-export_type([report/0]).

%% What a failed verification reports, one map per server.
-type report() :: #{server := pid(), url := string(), problems := [cbench:problem()]}.
%% Per open scope: the servers running when it began (and, once its init ran, the servers it
%% started), and the reports of its verification.
-type scope() :: #{before := [pid()], gl := pid(), servers => [pid()], reports => [report()]}.
-type state() :: #{term() => scope()}.

%% @doc One instance per run, whoever installs it twice.
-spec id(term()) -> cbench_cth.
id(_Opts) -> ?MODULE.

%% @doc No state but the open scopes.
-spec init(term(), term()) -> {ok, state()}.
init(_Id, _Opts) -> {ok, #{}}.

%% @doc Stops whatever a scope that never reached its end (a failed init) left running.
-spec terminate(state()) -> ok.
terminate(State) ->
    _ = [stop(maps:get(servers, Scope, [])) || Scope <- maps:values(State)],
    ok.

%% @doc The suite's scope opens.
-spec pre_init_per_suite(atom(), term(), state()) -> {term(), state()}.
pre_init_per_suite(Suite, Config, State) -> open({suite, Suite}, Config, State).

%% @doc What init_per_suite started belongs to the suite.
-spec post_init_per_suite(atom(), term(), term(), state()) -> {term(), state()}.
post_init_per_suite(Suite, _Config, Return, State) -> started({suite, Suite}, Return, State).

%% @doc The suite's servers are verified before end_per_suite stops them.
-spec pre_end_per_suite(atom(), term(), state()) -> {term(), state()}.
pre_end_per_suite(Suite, Config, State) -> verify({suite, Suite}, Config, State).

%% @doc The suite's servers are stopped; end_per_suite fails with the reports.
-spec post_end_per_suite(atom(), term(), term(), state()) -> {term(), state()}.
post_end_per_suite(Suite, _Config, Return, State) -> close({suite, Suite}, ok, Return, State).

%% @doc The group's scope opens.
-spec pre_init_per_group(atom(), atom(), term(), state()) -> {term(), state()}.
pre_init_per_group(Suite, Group, Config, State) -> open({group, Suite, Group}, Config, State).

%% @doc What init_per_group started belongs to the group.
-spec post_init_per_group(atom(), atom(), term(), term(), state()) -> {term(), state()}.
post_init_per_group(Suite, Group, _Config, Return, State) ->
    started({group, Suite, Group}, Return, State).

%% @doc The group's servers are verified before end_per_group.
-spec pre_end_per_group(atom(), atom(), term(), state()) -> {term(), state()}.
pre_end_per_group(Suite, Group, Config, State) -> verify({group, Suite, Group}, Config, State).

%% @doc The group's servers are stopped; end_per_group fails with the reports.
-spec post_end_per_group(atom(), atom(), term(), term(), state()) -> {term(), state()}.
post_end_per_group(Suite, Group, _Config, Return, State) ->
    close({group, Suite, Group}, ok, Return, State).

%% @doc The case's scope opens (keyed by its group leader: parallel cases each have one).
-spec pre_init_per_testcase(atom(), atom(), term(), state()) -> {term(), state()}.
pre_init_per_testcase(Suite, Case, Config, State) ->
    open({testcase, Suite, Case, group_leader()}, Config, State).

%% @doc A failed init_per_testcase skips the case: what it started is stopped now.
-spec post_init_per_testcase(atom(), atom(), term(), term(), state()) -> {term(), state()}.
post_init_per_testcase(Suite, Case, _Config, Return, State) ->
    Key = {testcase, Suite, Case, group_leader()},
    case Return of
        {fail, _} -> stop_scope(Key, Return, State);
        {skip, _} -> stop_scope(Key, Return, State);
        {skipped, _} -> stop_scope(Key, Return, State);
        _ -> {Return, State}
    end.

%% @doc The case's servers are verified before end_per_testcase (which may stop them).
-spec pre_end_per_testcase(atom(), atom(), term(), state()) -> {term(), state()}.
pre_end_per_testcase(Suite, Case, Config, State) ->
    Key = {testcase, Suite, Case, group_leader()},
    started_now(Key, State, fun(S1) -> verify(Key, Config, S1) end, Config).

%% @doc The case's servers are stopped; a case that passed fails with the reports.
-spec post_end_per_testcase(atom(), atom(), term(), term(), state()) -> {term(), state()}.
post_end_per_testcase(Suite, Case, Config, Return, State) ->
    Status = case is_list(Config) of
                 true -> proplists:get_value(tc_status, Config, ok);
                 false -> ok
             end,
    close({testcase, Suite, Case, group_leader()}, Status, Return, State).

%% Scopes.

open(Key, Config, State) ->
    {Config, State#{Key => #{before => running(), gl => group_leader()}}}.

%% The servers started since the scope opened, by a process of the same group leader.
started(Key, Return, State) ->
    case maps:find(Key, State) of
        {ok, Scope} -> {Return, State#{Key := Scope#{servers => mine(Scope)}}};
        error -> {Return, State}
    end.

%% A test case's servers are counted when it ends (the case itself starts most of them).
started_now(Key, State, Then, Config) ->
    case maps:find(Key, State) of
        {ok, Scope} -> Then(State#{Key := Scope#{servers => mine(Scope)}});
        error -> {Config, State}
    end.

mine(#{before := Before, gl := GL}) ->
    [P || P <- running() -- Before, cbench_server:call(P, starter) =:= GL].

verify(Key, Config, State) ->
    case maps:find(Key, State) of
        {ok, Scope = #{servers := Servers}} ->
            Reports = [Report || S <- Servers, Report <- report(S)],
            {Config, State#{Key := Scope#{reports => Reports}}};
        _ ->
            {Config, State}
    end.

report(Server) ->
    case cbench:verify(Server) of
        {error, Problems} when is_list(Problems) ->
            [#{server => Server, url => cbench:url(Server, ""), problems => Problems}];
        _ ->
            []
    end.

%% Stops the scope's servers; fails the scope's last function with the reports when it had
%% passed (a failure of its own is the better message).
close(Key, Status, Return, State) ->
    case maps:take(Key, State) of
        {Scope, State1} ->
            stop(maps:get(servers, Scope, [])),
            case {maps:get(reports, Scope, []), Status, Return} of
                {[], _, _} -> {Return, State1};
                {Reports, ok, R} when not is_tuple(R); element(1, R) =/= fail,
                                                       element(1, R) =/= skip ->
                    {{fail, {cbench_verify, Reports}}, State1};
                _ -> {Return, State1}
            end;
        error ->
            {Return, State}
    end.

stop_scope(Key, Return, State) ->
    case maps:take(Key, State) of
        {Scope, State1} ->
            stop(mine(Scope)),
            {Return, State1};
        error ->
            {Return, State}
    end.

stop(Servers) ->
    _ = [cbench:stop_server(S) || S <- Servers],
    ok.

running() ->
    case whereis(cbench_server_sup) of
        undefined -> [];
        _ -> cbench_server_sup:servers()
    end.
