%%% @doc The cbench application: starts the supervision tree; at stop, every server has been
%%% stopped by its supervisor (so no engine thread is left) and the fixture files are removed.
-module(cbench_app).
-behaviour(application).

-export([start/2, stop/1]).

%% @private
start(_Type, _Args) ->
    cbench_sup:start_link().

%% @private
stop(_State) ->
    cbench_fixture:cleanup().
