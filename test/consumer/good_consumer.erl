%% The same consumer spelt right: dialyzer finds nothing (test/dialyzer.sh).
-module(good_consumer).
-export([start/0, requests/1]).

start() ->
    cbench:start_server(nif, #{port => 0, threads => 2, ip => "localhost"}).

requests(Server) ->
    #{requests := N} = cbench:stats(Server),
    N.
