%%% @doc The request journal as every engine gives it: what one entry holds, and which entries a
%%% filter picks. The engines keep their own rings (the C engines in C, ehttpd in
%%% cbench_ehttpd_journal) and may apply part of a filter while reading (cbench_c_terms:filter/1);
%%% cbench_server and cbench_waiters apply the whole filter here, so it means the same on every
%%% engine.
-module(cbench_journal).

-export([filter/2, matches/2]).

-export_type([entry/0]).

%% One recorded request (docs/erlang.md): route is the name of the route that answered (an atom for
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
