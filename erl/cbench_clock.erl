%%% @doc The node's date cache: one ets row refreshed at every second boundary, so that the ehttpd
%%% engine formats the `date' header once a second per node instead of once per request.
-module(cbench_clock).
-behaviour(gen_server).

-export([start_link/0]).
-ignore_xref([{start_link, 0}]). %% the child spec of cbench_sup
-export([init/1, handle_call/3, handle_cast/2, handle_info/2]).

-define(TAB, cbench_clock).

%% @doc Starts the clock process (under cbench_sup) and fills the table before returning.
-spec start_link() -> {ok, pid()}.
start_link() ->
    gen_server:start_link({local, ?MODULE}, ?MODULE, [], []).

%% @private
init([]) ->
    ?TAB = ets:new(?TAB, [named_table, protected, {read_concurrency, true}]),
    tick(),
    {ok, #{}}.

%% @private
handle_call(_Req, _From, State) -> {reply, {error, unknown_call}, State}.

%% @private
handle_cast(_Msg, State) -> {noreply, State}.

%% @private
handle_info(tick, State) ->
    tick(),
    {noreply, State};
handle_info(_Msg, State) ->
    {noreply, State}.

%% Writes the date of this second and schedules the next write just after the next second starts.
tick() ->
    Now = erlang:system_time(millisecond),
    Date = cbench_http:date_value(Now div 1000),
    ets:insert(?TAB, [{date, Date}, {date_line, <<"date: ", Date/binary, "\r\n">>}]),
    erlang:send_after(1000 - Now rem 1000 + 1, self(), tick).
