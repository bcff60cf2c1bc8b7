%%% @doc The client benchmark's adapter for OTP's httpc (see cbench_client).
%%%
%%% A pool is an httpc profile: `pool_count' profiles, each with `max_sessions' = `pool_size'
%%% keep-alive connections to the server, and requests spread over the profiles round robin (each
%%% profile has its own httpc_manager process, the usual bottleneck of a single profile).
%%%
%%% httpc has no queue for a free connection: a request goes to the open session with the shortest
%%% queue if that queue is at most `max_keep_alive_length' long; otherwise a new session is opened,
%%% and once `max_sessions' are open, a one-shot `connection: close' connection outside any limit.
%%% So that a pool stays a pool, `max_keep_alive_length' is set to let the pool's sessions queue
%%% the requests that one profile gets at once (ceil(concurrency / (pool_size * pool_count)) - 1):
%%% with room for everyone it is 0 (idle sessions only, new ones up to `pool_size'); below that
%%% requests wait in the sessions' queues, as in a pool's checkout queue.
%%%
%%% httpc's own `timeout' starts when a request is written to its connection, not while it waits in a
%%% session's queue, and a synchronous httpc:request/5 waits without a limit. The adapter makes the
%%% request asynchronously and waits itself until `timeout' ms after the call (the time the call
%%% waited for the profile's manager included), then cancels it: a request gets `timeout' ms from
%%% the call, as with the other clients. httpc stops the connection of a cancelled request that was
%%% already sent.
-module(cbench_client_httpc).
-behaviour(cbench_client).

-export([start/1, get/2, stop/1, profiles/1]).
%% profiles/1: the profile names, for tests and harnesses that inspect the pools.
-ignore_xref([{profiles, 1}]).

%% @doc Starts pool_count httpc profiles (inets is started if needed).
-spec start(cbench_client:opts()) -> map().
start(Opts = #{pool_size := Size, pool_count := Count, timeout := Timeout})
  when is_integer(Size), Size >= 1, is_integer(Count), Count >= 1, is_integer(Timeout), Timeout >= 1 ->
    {ok, _} = application:ensure_all_started(inets),
    Concurrency = maps:get(concurrency, Opts, Size * Count),
    QueueLen = max(0, ceil_div(Concurrency, Size * Count) - 1),
    Profiles = profiles(Count),
    [begin
         %% A profile left over from an earlier cell (stop/1 not reached) is restarted clean.
         _ = inets:stop(httpc, P),
         {ok, _} = inets:start(httpc, [{profile, P}]),
         ok = httpc:set_options([{max_sessions, Size}, {max_keep_alive_length, QueueLen},
                                 {keep_alive_timeout, 120000}], P)
     end || P <- Profiles],
    Next = atomics:new(1, []),
    #{profiles => list_to_tuple(Profiles), next => Next, timeout => Timeout}.

%% @doc One GET through the next profile in turn.
-spec get(map(), string()) -> ok | {error, term()}.
get(#{profiles := Ps, next := Next, timeout := Timeout}, Url) ->
    Deadline = erlang:monotonic_time(millisecond) + Timeout,
    flush_stale(),
    P = element(atomics:add_get(Next, 1, 1) rem tuple_size(Ps) + 1, Ps),
    HttpOpts = [{timeout, Timeout}, {connect_timeout, Timeout}, {autoredirect, false}],
    case httpc:request(get, {Url, []}, HttpOpts, [{sync, false}, {body_format, binary}], P) of
        {ok, Id} ->
            receive
                {http, {Id, {{_, Status, _}, _Headers, _Body}}} when Status >= 200, Status < 300 -> ok;
                {http, {Id, {{_, Status, _}, _Headers, _Body}}} -> {error, {status, Status}};
                {http, {Id, {error, Reason}}} -> {error, Reason}
            after max(0, Deadline - erlang:monotonic_time(millisecond)) ->
                    ok = httpc:cancel_request(Id, P),
                    {error, timeout}
            end;
        {error, Reason} ->
            {error, Reason}
    end.

%% An answer to a request cancelled after its timeout may still arrive; a worker has one request at
%% a time, so any answer in its mailbox before a new request is such a late one.
flush_stale() ->
    receive {http, {_, _}} -> flush_stale()
    after 0 -> ok
    end.

%% @doc Stops the profiles and their connections. A profile's connection handlers live under
%% inets' one httpc_handler_sup, not under the profile, and outlive it (until their keep-alive
%% timeout): they are stopped first, found through the profile's sessions.
-spec stop(map()) -> ok.
stop(#{profiles := Ps}) ->
    [begin
         Handlers = try httpc:which_sessions(P) of
                        Sessions -> pids(Sessions, [])
                    catch _:_ -> []
                    end,
         [supervisor:terminate_child(httpc_handler_sup, H) || H <- Handlers],
         inets:stop(httpc, P)
     end || P <- tuple_to_list(Ps)],
    ok.

%% The pids in a term (the handlers in httpc's session records, whatever their layout).
pids(P, Acc) when is_pid(P) -> [P | Acc];
pids(T, Acc) when is_tuple(T) -> pids(tuple_to_list(T), Acc);
pids([H | T], Acc) -> pids(T, pids(H, Acc));
pids(_, Acc) -> Acc.

%% @doc The profile names of a pool count: cbench_httpc_1 ... cbench_httpc_N (a fixed set of atoms,
%% reused by every cell).
-spec profiles(pos_integer()) -> [atom()].
profiles(Count) ->
    [list_to_atom("cbench_httpc_" ++ integer_to_list(I)) || I <- lists:seq(1, Count)].

ceil_div(A, B) -> (A + B - 1) div B.
