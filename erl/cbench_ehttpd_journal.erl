%%% @doc The ehttpd engine's request journal (the C engines keep their own rings; entries of every
%%% engine are the maps of cbench_journal:entry(), filtered by cbench_journal).
%%%
%%% The ring is an ordered_set ets table keyed by sequence number, written by the connection
%%% processes and read in sequence order. As in the C engine, a request is numbered when it is
%%% dispatched (an atomic counter hands out the numbers: next_seq/1) and recorded when its answer
%%% ends, so entries may come in out of order; the ring keeps those among the newest `max' numbers
%%% given (older ones are dropped at once), and a request numbered before a clear is not recorded
%%% after it. When someone awaits
%%% requests, the connection that recorded one tells the server process, which re-checks its
%%% waiters: the flag that asks for it is one atomics read per request.
-module(cbench_ehttpd_journal).

-export([new/3, delete/1, next_seq/1, record/3, read/2, clear/1, notify/2, body_bytes/1, next_conn/1]).

-export_type([journal/0]).

-record(j, {tab :: ets:tid(), seq :: atomics:atomics_ref(), max :: pos_integer(),
            body_bytes :: non_neg_integer(), listener :: pid()}).
-opaque journal() :: #j{}.

%% Atomics slots.
-define(SEQ, 1).
-define(AWAIT, 2).
-define(CONN, 3).
-define(FLOOR, 4). %% the last number given before the last clear

%% @doc A ring of Max entries keeping BodyBytes of each body, whose waiters live in the process
%% Listener; `undefined' when Max is 0 (journaling off).
-spec new(non_neg_integer(), non_neg_integer(), pid()) -> journal() | undefined.
new(0, _BodyBytes, _Listener) -> undefined;
new(Max, BodyBytes, Listener) ->
    Tab = ets:new(cbench_ehttpd_journal, [ordered_set, public, {write_concurrency, true},
                                   {read_concurrency, true}]),
    #j{tab = Tab, seq = atomics:new(4, [{signed, false}]), max = Max, body_bytes = BodyBytes,
       listener = Listener}.

%% @doc Frees the ring.
-spec delete(journal() | undefined) -> ok.
delete(undefined) -> ok;
delete(#j{tab = Tab}) ->
    _ = catch ets:delete(Tab),
    ok.

%% @doc How many bytes of a request body an entry keeps.
-spec body_bytes(journal() | undefined) -> non_neg_integer().
body_bytes(undefined) -> 0;
body_bytes(#j{body_bytes = B}) -> B.

%% @doc A fresh connection number (connections are numbered only when the journal is on).
-spec next_conn(journal() | undefined) -> non_neg_integer().
next_conn(undefined) -> 0;
next_conn(#j{seq = A}) -> atomics:add_get(A, ?CONN, 1).

%% @doc A request's sequence number, given when it is dispatched (0 with the journal off).
-spec next_seq(journal() | undefined) -> non_neg_integer().
next_seq(undefined) -> 0;
next_seq(#j{seq = A}) -> atomics:add_get(A, ?SEQ, 1).

%% @doc Records Entry (without `seq') under Seq and wakes the waiters if there are any; nothing
%% when the journal was cleared since Seq was given or Seq is not among the newest `max' numbers.
-spec record(journal() | undefined, pos_integer(), map()) -> ok.
record(undefined, _Seq, _Entry) -> ok;
record(#j{tab = Tab, seq = A, max = Max, listener = L}, Seq, Entry) ->
    case Seq =< atomics:get(A, ?FLOOR) orelse Seq =< atomics:get(A, ?SEQ) - Max of
        true ->
            ok;
        false ->
            true = ets:insert(Tab, {Seq, Entry#{seq => Seq}}),
            %% After the insert, so that a clear or an eviction that ran meanwhile misses nothing:
            %% the counters only grow, and whatever they say now covers this entry too.
            evict(Tab, atomics:get(A, ?SEQ) - Max),
            Seq =< atomics:get(A, ?FLOOR) andalso ets:delete(Tab, Seq),
            case atomics:get(A, ?AWAIT) of
                0 -> ok;
                _ -> L ! {cbench_journal, Seq}, ok
            end
    end.

%% Drops the entries numbered Limit and below (the oldest first: usually one, or none).
evict(Tab, Limit) ->
    case ets:first(Tab) of
        K when is_integer(K), K =< Limit -> ets:delete(Tab, K), evict(Tab, Limit);
        _ -> ok
    end.

%% @doc The entries after sequence number Since, oldest first.
-spec read(journal() | undefined, non_neg_integer()) -> [cbench_journal:entry()].
read(undefined, _Since) -> [];
read(#j{tab = Tab}, Since) ->
    ets:select(Tab, [{{'$1', '$2'}, [{'>', '$1', Since}], ['$2']}]).

%% @doc Empties the ring; sequence numbers go on from where they were.
-spec clear(journal() | undefined) -> ok.
clear(undefined) -> ok;
clear(#j{tab = Tab, seq = A}) ->
    %% Requests numbered so far and still in flight are not recorded after this.
    atomics:put(A, ?FLOOR, atomics:get(A, ?SEQ)),
    true = ets:delete_all_objects(Tab),
    ok.

%% @doc Turns the wake-ups of the listener on or off.
-spec notify(journal() | undefined, boolean()) -> ok.
notify(undefined, _) -> ok;
notify(#j{seq = A}, On) ->
    atomics:put(A, ?AWAIT, case On of true -> 1; false -> 0 end).
