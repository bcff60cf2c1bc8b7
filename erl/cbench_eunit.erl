%%% @doc EUnit fixtures that verify a cbench server when its tests are done, so that a test that
%%% forgot cbench:verify/1 fails: `{setup, ...}' and `{foreach, ...}' with setup/2 and cleanup/1,
%%% or the fixtures setup/3 and foreach/3 build.
%%%
%%% ```
%%% orders_test_() ->
%%%     cbench_eunit:foreach(nif, #{port => 0},
%%%                          [fun(S) -> ?_test(...) end, ...]).
%%% '''
%%%
%%% cleanup/1 verifies the server, stops it, and raises `error({cbench_verify, Problems})' when
%%% verify/1 was not `ok'; EUnit reports that as a failed cleanup of the fixture, and the run fails.
-module(cbench_eunit).

-export([setup/2, cleanup/1, setup/3, foreach/3]).
%% The API: called by users' tests, not from this application.
-ignore_xref([{setup, 2}, {cleanup, 1}, {setup, 3}, {foreach, 3}]).

%% @doc Starts a server (not linked: EUnit runs a fixture's setup and its tests in different
%% processes) and returns it; a server that cannot start raises `error({start_server, Reason})'.
-spec setup(cbench:engine(), cbench:opts()) -> cbench:server().
setup(Engine, Opts) ->
    case cbench:start_server(Engine, Opts) of
        {ok, Server} -> Server;
        {error, Reason} -> error({start_server, Reason})
    end.

%% @doc Verifies the server, stops it, and raises `error({cbench_verify, Problems})' when an
%% expectation was not met or a request matched nothing.
-spec cleanup(cbench:server()) -> ok.
cleanup(Server) ->
    Verdict = cbench:verify(Server),
    ok = cbench:stop_server(Server),
    case Verdict of
        {error, Problems} when is_list(Problems) -> error({cbench_verify, Problems});
        _ -> ok
    end.

%% @doc `{setup, ...}': one server for all the tests Instantiator makes from it.
-spec setup(cbench:engine(), cbench:opts(), fun((cbench:server()) -> term())) -> tuple().
setup(Engine, Opts, Instantiator) when is_function(Instantiator, 1) ->
    {setup, fun() -> setup(Engine, Opts) end, fun cleanup/1, Instantiator}.

%% @doc `{foreach, ...}': a server of its own for each instantiator.
-spec foreach(cbench:engine(), cbench:opts(), [fun((cbench:server()) -> term())]) -> tuple().
foreach(Engine, Opts, Instantiators) when is_list(Instantiators) ->
    {foreach, fun() -> setup(Engine, Opts) end, fun cleanup/1, Instantiators}.
