%%% @doc The top supervisor of the cbench application: the date clock, then the servers.
-module(cbench_sup).
-behaviour(supervisor).

-export([start_link/0]).
-export([init/1]).

%% @doc Starts the supervision tree.
-spec start_link() -> {ok, pid()}.
start_link() ->
    supervisor:start_link({local, ?MODULE}, ?MODULE, []).

%% @private
init([]) ->
    Children = [#{id => cbench_clock, start => {cbench_clock, start_link, []}},
                #{id => cbench_server_sup, start => {cbench_server_sup, start_link, []},
                  type => supervisor, shutdown => infinity}],
    {ok, {#{strategy => rest_for_one, intensity => 10, period => 10}, Children}}.
