%%% @doc The ehttpd engine's request journal (the C engines keep their own rings; entries of every
%%% engine are the maps of cbench_journal:entry(), filtered by cbench_journal).
%%%
%%% The ring is an ordered_set ets table keyed by sequence number, written by the connection
%%% processes (an atomic counter hands out the numbers; the entry `max' numbers back is deleted,
%%% so the ring holds the last `max' requests) and read in sequence order. When someone awaits
%%% requests, the connection that recorded one tells the server process, which re-checks its
%%% waiters: the flag that asks for it is one atomics read per request.
-module(cbench_ehttpd_journal).

-export([new/3, delete/1, record/2, read/2, clear/1, notify/2, body_bytes/1, next_conn/1]).

-export_type([journal/0]).

-record(j, {tab :: ets:tid(), seq :: atomics:atomics_ref(), max :: pos_integer(),
            body_bytes :: non_neg_integer(), listener :: pid()}).
-opaque journal() :: #j{}.

%% Atomics slots.
-define(SEQ, 1).
-define(AWAIT, 2).
-define(CONN, 3).

%% @doc A ring of Max entries keeping BodyBytes of each body, whose waiters live in the process
%% Listener; `undefined' when Max is 0 (journaling off).
-spec new(non_neg_integer(), non_neg_integer(), pid()) -> journal() | undefined.
new(0, _BodyBytes, _Listener) -> undefined;
new(Max, BodyBytes, Listener) ->
    Tab = ets:new(cbench_ehttpd_journal, [ordered_set, public, {write_concurrency, true},
                                   {read_concurrency, true}]),
    #j{tab = Tab, seq = atomics:new(3, [{signed, false}]), max = Max, body_bytes = BodyBytes,
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

%% @doc Records Entry (without `seq', which is given here) and wakes the waiters if there are any.
-spec record(journal() | undefined, map()) -> ok.
record(undefined, _Entry) -> ok;
record(#j{tab = Tab, seq = A, max = Max, listener = L}, Entry) ->
    Seq = atomics:add_get(A, ?SEQ, 1),
    true = ets:insert(Tab, {Seq, Entry#{seq => Seq}}),
    Seq > Max andalso ets:delete(Tab, Seq - Max),
    case atomics:get(A, ?AWAIT) of
        0 -> ok;
        _ -> L ! {cbench_journal, Seq}, ok
    end.

%% @doc The entries after sequence number Since, oldest first.
-spec read(journal() | undefined, non_neg_integer()) -> [cbench_journal:entry()].
read(undefined, _Since) -> [];
read(#j{tab = Tab}, Since) ->
    ets:select(Tab, [{{'$1', '$2'}, [{'>', '$1', Since}], ['$2']}]).

%% @doc Empties the ring; sequence numbers go on from where they were.
-spec clear(journal() | undefined) -> ok.
clear(undefined) -> ok;
clear(#j{tab = Tab}) ->
    true = ets:delete_all_objects(Tab),
    ok.

%% @doc Turns the wake-ups of the listener on or off.
-spec notify(journal() | undefined, boolean()) -> ok.
notify(undefined, _) -> ok;
notify(#j{seq = A}, On) ->
    atomics:put(A, ?AWAIT, case On of true -> 1; false -> 0 end).
