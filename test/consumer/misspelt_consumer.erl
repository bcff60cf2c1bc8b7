%% A consumer's module with a misspelt option and a misspelt stats key: dialyzer must flag both
%% (test/dialyzer.sh), because cbench:start_server/2 takes cbench:opts() and cbench:stats/1
%% returns cbench:stats(), map types that list their keys.
-module(misspelt_consumer).
-export([start/0, requests/1]).

start() ->
    cbench:start_server(nif, #{prot => 0}).

requests(Server) ->
    #{requsts := N} = cbench:stats(Server),
    N.
