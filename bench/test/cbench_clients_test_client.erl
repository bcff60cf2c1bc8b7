%% @doc A client adapter that misbehaves on purpose, for the tests of the cell runner's guards
%% (cbench_clients_tests): the mode is read from a persistent term the test sets.
%%   stuck:       get/2 never returns (an adapter that ignores its timeout)
%%   crash:       get/2 raises
%%   bad_return:  get/2 returns something else than ok or {error, _}
%%   no_start:    start/1 raises
-module(cbench_clients_test_client).
-behaviour(cbench_client).

-export([start/1, get/2, stop/1, set_mode/1]).

set_mode(Mode) -> persistent_term:put(?MODULE, Mode).

start(_Opts) ->
    case persistent_term:get(?MODULE) of
        no_start -> error(cannot_start);
        Mode -> Mode
    end.

get(stuck, _Url) -> receive after infinity -> ok end;
get(crash, _Url) -> error(boom);
get(bad_return, _Url) -> maybe.

stop(_) -> ok.
