%%% @doc The supervisor of running servers: one temporary cbench_server child per server, so that
%%% a server outlives the process that started it (a CT init_per_suite, a shell) until stopped.
-module(cbench_server_sup).
-behaviour(supervisor).

-export([start_link/0, start_server/3, stop_server/1, servers/0]).
-export([init/1]).
-ignore_xref([{start_link, 0}]). %% the child spec of cbench_sup

%% @doc Starts the supervisor (under cbench_sup).
-spec start_link() -> {ok, pid()}.
start_link() ->
    supervisor:start_link({local, ?MODULE}, ?MODULE, []).

%% @doc Starts a server with validated options; Owner (a pid, or none) is linked to it and the
%% server stops when Owner exits. The server remembers the caller's group leader: Common Test gives
%% each test case its own, so that cbench_cth tells which case started a server (also in parallel
%% groups).
-spec start_server(cbench:engine(), map(), pid() | none) -> {ok, pid()} | {error, term()}.
start_server(Engine, Opts, Owner) ->
    supervisor:start_child(?MODULE, [Engine, Opts, Owner, group_leader()]).

%% @doc Stops a server and waits until its engine is stopped; unknown or stopped servers are fine.
-spec stop_server(pid()) -> ok.
stop_server(Pid) ->
    _ = supervisor:terminate_child(?MODULE, Pid),
    ok.

%% @doc The pids of the running servers.
-spec servers() -> [pid()].
servers() ->
    [Pid || {_, Pid, _, _} <- supervisor:which_children(?MODULE), is_pid(Pid)].

%% @private
init([]) ->
    Child = #{id => cbench_server,
              start => {cbench_server, start_link, []},
              restart => temporary,
              %% The server's own stop is bounded: the engine's graceful stop lasts stop_timeout_ms
              %% (up to 2^32-1 ms; the port engine waits 10 s more for its program), ehttpd does not
              %% wait. A fixed shutdown (it was 30000) killed a server whose stop_timeout_ms was
              %% longer before its held responses could finish, and one spec serves every server of
              %% a simple_one_for_one supervisor: the supervisor waits for terminate/2 instead.
              shutdown => infinity,
              type => worker},
    {ok, {#{strategy => simple_one_for_one, intensity => 10, period => 10}, [Child]}}.
