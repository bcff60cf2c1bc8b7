%%% @doc The callers of cbench:await/4 waiting on one server, kept by its server process: each waits
%%% for Count journal entries that match its filter. The engine wakes the server process with a
%%% `{cbench_journal, Seq}' message from whoever recorded a request (a connection process of ehttpd,
%%% a worker thread of the NIF, the port program's worker threads through an unsolicited frame);
%%% the server then reads the entries after the oldest sequence number a waiter has seen and feeds
%%% them here. Nothing polls.
-module(cbench_waiters).

-export([new/0, is_empty/1, add/5, feed/3, expire/2, caller_down/2, since/1, cancel_all/1]).

-export_type([waiters/0]).

%% mon: the monitor of the caller (a caller that dies takes its waiter with it: caller_down/2).
-record(w, {ref :: reference(), from :: gen_server:from(), filter :: cbench_spec:canon_filter(),
            count :: pos_integer(), got = [] :: [cbench_journal:entry()], ngot = 0 :: integer(),
            seen :: non_neg_integer(), timer :: reference(), mon :: reference()}).
-opaque waiters() :: [#w{}].

%% @doc No waiters.
-spec new() -> waiters().
new() -> [].

%% @doc Whether nobody waits (then the engine need not wake the server).
-spec is_empty(waiters()) -> boolean().
is_empty(Ws) -> Ws =:= [].

%% @doc A new waiter, given the journal's entries as they are now. Returns the waiters and the
%% replies due at once (a waiter whose entries are already there).
-spec add(waiters(), gen_server:from(), cbench_spec:canon_filter(), pos_integer(),
          {[cbench_journal:entry()], timeout()}) -> {waiters(), [{gen_server:from(), term()}]}.
add(Ws, From = {Caller, _}, Filter = #{since := Since}, Count, {Entries, Timeout}) ->
    Ref = make_ref(),
    W = #w{ref = Ref, from = From, filter = Filter, count = Count, seen = Since,
           timer = erlang:send_after(Timeout, self(), {cbench_await_timeout, Ref}),
           mon = erlang:monitor(process, Caller)},
    feed([W | Ws], Entries, []).

%% @doc New journal entries (in sequence order): the waiters still waiting, and the replies of
%% those whose count is reached (`{ok, Entries}', the first Count matching entries, oldest first).
%% Recorded are the sequence numbers of the entries the engine announced as just recorded: an entry
%% is recorded when its answer ends, so it may come after newer entries that a waiter has seen
%% already; those are taken too (once: a waiter skips an entry it holds).
-spec feed(waiters(), [cbench_journal:entry()], [pos_integer()]) ->
          {waiters(), [{gen_server:from(), term()}]}.
feed(Ws, Entries, Recorded) ->
    Late = maps:from_keys(Recorded, true),
    lists:foldr(fun(W, {Waiting, Replies}) ->
                        case take(W, Entries, Late) of
                            W1 = #w{ngot = N, count = C} when N >= C ->
                                ended(W1),
                                {Waiting, [{W1#w.from, {ok, lists:sublist(oldest_first(W1#w.got),
                                                                         C)}} | Replies]};
                            W1 ->
                                {[W1 | Waiting], Replies}
                        end
                end, {[], []}, Ws).

take(W = #w{seen = Seen, filter = F}, Entries, Late) ->
    lists:foldl(fun(E = #{seq := Seq}, Acc = #w{got = Got, ngot = N}) when Seq > Seen ->
                        case cbench_journal:matches(F, E) of
                            true -> Acc#w{got = [E | Got], ngot = N + 1, seen = Seq};
                            false -> Acc#w{seen = Seq}
                        end;
                   (E = #{seq := Seq}, Acc = #w{got = Got, ngot = N}) ->
                        case is_map_key(Seq, Late) andalso cbench_journal:matches(F, E) andalso
                            not lists:any(fun(#{seq := S}) -> S =:= Seq end, Got) of
                            true -> Acc#w{got = [E | Got], ngot = N + 1};
                            false -> Acc
                        end
                end, W, Entries).

%% Taken entries (newest first, or out of order for those recorded late) in sequence order.
oldest_first(Got) ->
    lists:sort(fun(#{seq := A}, #{seq := B}) -> A =< B end, Got).

%% @doc A waiter's time is up: it gets `{error, {timeout, EntriesSoFar}}'.
-spec expire(waiters(), reference()) -> {waiters(), [{gen_server:from(), term()}]}.
expire(Ws, Ref) ->
    case lists:keytake(Ref, #w.ref, Ws) of
        {value, W, Rest} ->
            ended(W),
            {Rest, [{W#w.from, {error, {timeout, oldest_first(W#w.got)}}}]};
        false -> {Ws, []}
    end.

%% @doc A monitor fired: the waiter of a caller that died is dropped (nobody takes its answer).
%% `false' when the monitor is not a waiter's.
-spec caller_down(waiters(), reference()) -> {true, waiters()} | false.
caller_down(Ws, Mon) ->
    case lists:keytake(Mon, #w.mon, Ws) of
        {value, W, Rest} -> ended(W), {true, Rest};
        false -> false
    end.

%% A waiter leaves: its timer and its monitor go with it.
ended(#w{timer = T, mon = Mon}) ->
    _ = erlang:cancel_timer(T),
    erlang:demonitor(Mon, [flush]).


%% @doc The sequence number after which the waiters need entries.
-spec since(waiters()) -> non_neg_integer().
since(Ws) -> lists:min([S || #w{seen = S} <- Ws]).

%% @doc Every waiter answered with what it has so far (the server is stopping).
-spec cancel_all(waiters()) -> [{gen_server:from(), term()}].
cancel_all(Ws) ->
    [begin ended(W), {From, {error, {timeout, oldest_first(Got)}}} end
     || W = #w{from = From, got = Got} <- Ws].
