%%% @doc The HTTP client behaviour of the client benchmark (`make bench-clients', docs/bench.md).
%%%
%%% An adapter wraps one HTTP client library so that the benchmark can drive it: `start/1' sets up
%%% the client's pools for one cell of the grid, `get/2' makes one GET request from the calling
%%% worker process and waits for the whole answer, `stop/1' tears the pools down. Many workers call
%%% `get/2' on the same state at once, so the state must be shareable between processes (names,
%%% ids, ets tables; not a socket owned by one process).
%%%
%%% Two adapters ship with cbench: `cbench_client_httpc' (OTP's httpc, pools as httpc profiles) and
%%% `cbench_client_tcp' (a reference client: one keep-alive gen_tcp connection per worker, no pool).
%%% docs/bench.md ("Benchmarking HTTP clients: your own adapter") shows adapters for gun, hackney and Finch.
%%%
%%% `error_kind/1' sorts any error reason into the four kinds the benchmark reports.
-module(cbench_client).

-export([error_kind/1, pooled/1]).
%% Called by the client benchmark (bench/) and by users' own harnesses, not from this application.
-ignore_xref([{error_kind, 1}, {pooled, 1}]).

-export_type([opts/0, error_kind/0]).

%% pool_size: connections per pool; pool_count: pools the requests are spread over; timeout: the
%% longest a request may take, in ms (get/2 must return by then). The benchmark also gives
%% concurrency, how many workers will call get/2 at once (some clients size their queues with it),
%% and url, the URL every get/2 of the cell will request (clients that open their connections up
%% front need its host and port).
-type opts() :: #{pool_size := pos_integer(), pool_count := pos_integer(),
                  timeout := pos_integer(), concurrency => pos_integer(), url => string()}.
-type error_kind() :: timeout | closed | refused | other.

%% Sets up the client for one cell; the state returned is given to every get/2 and to stop/1. Raise
%% (or return {error, Reason}) when the client cannot start; the cell is then reported as failed.
-callback start(opts()) -> State :: term().

%% One GET of Url (a string, `http://host:port/path'), called by a worker process. ok for a 2xx
%% answer read whole; {error, Reason} otherwise, within the timeout given to start/1.
-callback get(State :: term(), Url :: string()) -> ok | {error, term()}.

%% Tears the client down after the cell, when every worker has finished.
-callback stop(State :: term()) -> term().

%% false for a client without pools (pool_size and pool_count mean nothing to it): the benchmark
%% then runs it once per concurrency instead of once per pool shape. Default: true.
-callback pooled() -> boolean().

-optional_callbacks([pooled/0]).

%% @doc Whether an adapter module has pools (its pooled/0, true when it does not export one).
-spec pooled(module()) -> boolean().
pooled(Mod) when is_atom(Mod) ->
    _ = code:ensure_loaded(Mod),
    case erlang:function_exported(Mod, pooled, 0) of
        true -> Mod:pooled() =:= true;
        false -> true
    end.

%% @doc The kind of an error reason, as the benchmark counts it. The reason is searched (inside
%% tuples, lists and maps, a few levels deep, since libraries wrap their socket errors) for a known
%% atom: `refused' when the connection was refused, else `timeout' when a time limit passed, else
%% `closed' when the connection was closed or reset; anything else (an emfile, a 404, a crash) is
%% `other'.
-spec error_kind(term()) -> error_kind().
error_kind(Reason) ->
    Atoms = atoms(Reason, 6, []),
    Has = fun(Known) -> lists:any(fun(A) -> lists:member(A, Known) end, Atoms) end,
    case {Has(refused_atoms()), Has(timeout_atoms()), Has(closed_atoms())} of
        {true, _, _} -> refused;
        {_, true, _} -> timeout;
        {_, _, true} -> closed;
        _ -> other
    end.

refused_atoms() -> [refused, econnrefused].

%% checkout_timeout (hackney) and pool_timeout (Finch) are waits for a pooled connection.
timeout_atoms() -> [timeout, etimedout, connect_timeout, recv_timeout, checkout_timeout, pool_timeout].

%% socket_closed_remotely is httpc's; server_closed is what some pools say for a connection lost
%% while checked out.
closed_atoms() -> [closed, socket_closed_remotely, econnreset, econnaborted, epipe, enotconn,
                   server_closed, connection_closed].

atoms(_, 0, Acc) -> Acc;
atoms(A, _, Acc) when is_atom(A) -> [A | Acc];
atoms(T, D, Acc) when is_tuple(T) -> atoms(tuple_to_list(T), D, Acc);
atoms(M, D, Acc) when is_map(M) -> atoms(maps:values(M), D, Acc);
atoms([H | T], D, Acc) -> atoms(T, D, atoms(H, D - 1, Acc));
atoms(_, _, Acc) -> Acc.
