%%% @doc The request journal: the ring of the ehttpd engine, and the filter every engine's entries
%%% go through (the C engines keep their own rings; their entries arrive as the same maps).
%%%
%%% The ehttpd ring is an ordered_set ets table keyed by sequence number, written by the connection
%%% processes (an atomic counter hands out the numbers; the entry `max' numbers back is deleted,
%%% so the ring holds the last `max' requests) and read in sequence order. When someone awaits
%%% requests, the connection that recorded one tells the server process, which re-checks its
%%% waiters: the flag that asks for it is one atomics read per request.
-module(cbench_journal).

-export([new/3, delete/1, record/2, read/2, clear/1, notify/2, body_bytes/1, next_conn/1]).
-export([filter/2, matches/2]).

-export_type([journal/0, entry/0]).

-record(j, {tab :: ets:tid(), seq :: atomics:atomics_ref(), max :: pos_integer(),
            body_bytes :: non_neg_integer(), listener :: pid()}).
-opaque journal() :: #j{}.

%% One recorded request (docs/beam.md): route is the name of the route that answered (an atom for
%% the fixture routes and not_found, a binary for a stub), also for a 405 (the first route whose
%% path matched); stub is the id of the stub that answered; bytes_out counts the response body.
-type entry() :: #{seq := pos_integer(), time_us := integer(),
                   proto := http1 | h2c_prior | h2c_upgrade, conn := pos_integer(),
                   stream := non_neg_integer(), peer := binary(),
                   method := binary(), path := binary(), query := binary(),
                   headers := [{binary(), binary()}], body := binary(),
                   body_length := non_neg_integer(), route := atom() | binary(),
                   stub := pos_integer() | undefined, status := 0 | 100..599,
                   bytes_out := non_neg_integer(), duration_us := non_neg_integer(),
                   fault := cbench_fault:kind() | undefined,
                   %% The delay a stub waited before answering (0 for none).
                   delay_ms := non_neg_integer()}.

%% Atomics slots.
-define(SEQ, 1).
-define(AWAIT, 2).
-define(CONN, 3).

%% @doc A ring of Max entries keeping BodyBytes of each body, whose waiters live in the process
%% Listener; `undefined' when Max is 0 (journaling off).
-spec new(non_neg_integer(), non_neg_integer(), pid()) -> journal() | undefined.
new(0, _BodyBytes, _Listener) -> undefined;
new(Max, BodyBytes, Listener) ->
    Tab = ets:new(cbench_journal, [ordered_set, public, {write_concurrency, true},
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
-spec read(journal() | undefined, non_neg_integer()) -> [entry()].
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

%% @doc The entries that match a canonical filter (cbench_spec:filter/1), in their order.
-spec filter(cbench_spec:canon_filter(), [entry()]) -> [entry()].
filter(F, Entries) ->
    [E || E <- Entries, matches(F, E)].

%% @doc Whether one entry matches a canonical filter.
-spec matches(cbench_spec:canon_filter(), entry()) -> boolean().
matches(#{methods := Ms, path := P, stub := Stub, since := Since},
        #{seq := Seq, method := M, path := Path, stub := S}) ->
    Seq > Since andalso
        (Ms =:= any orelse lists:member(M, Ms)) andalso
        (Stub =:= any orelse Stub =:= S) andalso
        (P =:= any orelse cbench_router:path_matches(P, Path)).
