%% @doc The client node's log during a client benchmark. Clients under overload crash their own
%% processes (httpc's manager does at 16,384 concurrent requests), and OTP logs each crash with the
%% whole state of the process: thousands of lines that would bury the progress on the terminal. The
%% log goes to client-node.log in the results directory instead (one line per event, bounded in
%% size), and the events of level error and above are counted, so that each cell can report how
%% many it caused.
-module(cbench_clients_log).

-export([start/1, count/0]).
%% The logger handler callback.
-export([log/2]).

-define(COUNTER, {?MODULE, errors}).

%% @doc Sends the node's log to File and starts counting its errors.
-spec start(file:filename()) -> ok.
start(File) ->
    persistent_term:put(?COUNTER, counters:new(1, [write_concurrency])),
    _ = logger:remove_handler(default),
    ok = logger:add_handler(cbench_clients_file, logger_std_h,
                            #{config => #{file => File, max_no_bytes => 4000000, max_no_files => 1},
                              formatter => {logger_formatter, #{single_line => true, max_size => 4000,
                                                                depth => 30}}}),
    ok = logger:add_handler(cbench_clients_count, ?MODULE, #{level => error}),
    ok.

%% @doc The errors logged so far.
-spec count() -> non_neg_integer().
count() ->
    case persistent_term:get(?COUNTER, undefined) of
        undefined -> 0;
        C -> counters:get(C, 1)
    end.

%% @private
log(_Event, _Config) ->
    case persistent_term:get(?COUNTER, undefined) of
        undefined -> ok;
        C -> counters:add(C, 1, 1)
    end.
