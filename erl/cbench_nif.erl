%%% @doc The `nif' engine: the C engine inside this node, its threads in the node's OS process.
%%% start/1 and stop/1 are dirty I/O NIFs; the rest return in microseconds. The calling process
%%% owns the server: when it dies, the server stops (a monitor in the NIF).
-module(cbench_nif).

-export([start/1, stop/1, port/1, stats/1, info/1]).
-export([start_nif/1, stop_nif/1, stats_nif/1, port_nif/1, info_nif/1]).
%% Engine callbacks, called as Mod:F(...) by cbench_server.
-ignore_xref([{start, 1}, {stop, 1}, {port, 1}, {stats, 1}, {info, 1},
              %% The NIFs themselves (the test suites call them directly).
              {start_nif, 1}, {stop_nif, 1}, {stats_nif, 1}, {port_nif, 1}, {info_nif, 1}]).

-on_load(init/0).

-nifs([start_nif/1, stop_nif/1, stats_nif/1, port_nif/1, info_nif/1]).

-export_type([handle/0]).
-type handle() :: reference().

-define(LOAD_ERROR_KEY, {?MODULE, load_error}).

%% The module loads even when the .so is missing or broken, so that start/1 can say why
%% ({error, {not_built, Path}}) instead of callers getting `undef'.
init() ->
    case erlang:load_nif(filename:rootname(so_path()), 0) of
        ok -> ok;
        {error, Reason} ->
            persistent_term:put(?LOAD_ERROR_KEY, Reason),
            ok
    end.

%% @doc Where the NIF library is: priv/ of the cbench application, or next to ebin/ when the
%% application is not in the code path (running from the source tree).
-spec so_path() -> file:filename().
so_path() ->
    Priv = case code:priv_dir(cbench) of
               {error, bad_name} ->
                   filename:join(filename:dirname(filename:dirname(code:which(?MODULE))), "priv");
               Dir ->
                   Dir
           end,
    filename:join(Priv, "cbench_nif.so").

%% @doc Starts the engine with options validated by cbench_opts; the caller becomes the owner.
-spec start(map()) -> {ok, handle()} | {error, term()}.
start(Opts) ->
    try start_nif(cbench_opts:engine_map(Opts))
    catch error:{not_loaded, ?MODULE} -> {error, not_loaded()}
    end.

not_loaded() ->
    Path = so_path(),
    case filelib:is_regular(Path) of
        false -> {not_built, Path};
        true -> {not_loaded, persistent_term:get(?LOAD_ERROR_KEY, unknown)}
    end.

%% @doc Stops the engine (joins its threads); stopping twice is fine.
-spec stop(handle()) -> ok.
stop(H) -> stop_nif(H).

%% @doc The bound TCP port.
-spec port(handle()) -> inet:port_number().
port(H) -> port_nif(H).

%% @doc The engine's counters (cb_stats_t as a map), or {error, stopped}.
-spec stats(handle()) -> map() | {error, stopped}.
stats(H) -> stats_nif(H).

%% @doc Threads and the CPU each is pinned to (-1: not pinned).
-spec info(handle()) -> #{threads := pos_integer(), cpus := [integer()]}.
info(H) -> info_nif(H).

%% @private
start_nif(_Opts) -> erlang:nif_error({not_loaded, ?MODULE}).
%% @private
stop_nif(_H) -> erlang:nif_error({not_loaded, ?MODULE}).
%% @private
stats_nif(_H) -> erlang:nif_error({not_loaded, ?MODULE}).
%% @private
port_nif(_H) -> erlang:nif_error({not_loaded, ?MODULE}).
%% @private
info_nif(_H) -> erlang:nif_error({not_loaded, ?MODULE}).
