%%% @doc The `nif' engine: the C engine inside this node, its threads in the node's OS process.
%%% start/1 and stop/1 are dirty I/O NIFs; the stub list and big replies (reply_dirty/2: over 256 KiB
%%% of bodies and fields, or over 256 answers) run on a dirty CPU scheduler; the rest return in
%%% microseconds.
%%% The calling process owns the server: when it dies, the server stops (a monitor in the NIF).
-module(cbench_nif).
-behaviour(cbench_engine).

-export([start/1, stop/1, handle_info/2, port/1, tls_port/1, stats/1, info/1, tls/1]).
-export([scenario/2, scenario_set/3, scenarios_reset/1]).
-export([client_cert/2, client_ca/1, client_cert_nif/2, client_ca_nif/1]).
%% Recordings (docs/record.md): optional callbacks of cbench_engine.
-export([recorded/1, save_stubs/2, load_stubs/2, clear_recorded/1, recorded_nif/1, save_stubs_nif/2,
         load_stubs_nif/2, clear_recorded_nif/1]).
-ignore_xref([{recorded, 1}, {save_stubs, 2}, {load_stubs, 2}, {clear_recorded, 1}, {recorded_nif, 1},
              {save_stubs_nif, 2}, {load_stubs_nif, 2}, {clear_recorded_nif, 1}]).
-ignore_xref([{client_cert, 2}, {client_ca, 1}, {client_cert_nif, 2}, {client_ca_nif, 1}]).
-ignore_xref([{scenario, 2}, {scenario_set, 3}, {scenarios_reset, 1}, {scenario_nif, 2},
              {scenario_set_nif, 3}, {scenarios_reset_nif, 1}]).
-export([route_add/3, route_remove/2, routes_reset/1, stubs/1, journal/2, journal_clear/1,
         journal_notify/2, down/1, up/1, handler_add/4, handler_fail/2]).
%% Handlers' answers (cbench_handler).
-export([reply/2, reply_dirty/2]).
-export([start_nif/1, stop_nif/1, stats_nif/1, port_nif/1, info_nif/1, tls_nif/1, down_nif/1, up_nif/1,
         route_add_nif/3, route_remove_nif/2, route_reset_nif/1, stubs_nif/1, requests_nif/2,
         requests_clear_nif/1, journal_listen_nif/2, handler_add_nif/4, handler_fail_nif/2,
         reply_nif/2, scenario_nif/2, scenario_set_nif/3, scenarios_reset_nif/1]).
%% Big replies on a dirty CPU scheduler, and how many took that path (the tests' check).
-export([reply_dirty_nif/2, dirty_replies_nif/0]).
-ignore_xref([{reply_dirty_nif, 2}, {dirty_replies_nif, 0}]).
%% cbench_engine callbacks, called as Mod:F(...) by cbench_server.
-ignore_xref([{start, 1}, {stop, 1}, {handle_info, 2}, {port, 1}, {tls_port, 1}, {stats, 1}, {info, 1}, {tls, 1}, {route_add, 3},
              {route_remove, 2}, {routes_reset, 1}, {stubs, 1}, {journal, 2}, {journal_clear, 1},
              {journal_notify, 2}, {down, 1}, {up, 1}, {handler_add, 4}, {handler_fail, 2},
              %% The NIFs themselves (the test suites call them directly).
              {start_nif, 1}, {stop_nif, 1}, {stats_nif, 1}, {port_nif, 1}, {info_nif, 1}, {tls_nif, 1},
              {down_nif, 1}, {up_nif, 1}, {route_add_nif, 3}, {route_remove_nif, 2},
              {route_reset_nif, 1}, {stubs_nif, 1}, {requests_nif, 2}, {requests_clear_nif, 1},
              {journal_listen_nif, 2}, {handler_add_nif, 4}, {handler_fail_nif, 2}, {reply_nif, 2}]).

-on_load(init/0).

-nifs([start_nif/1, stop_nif/1, stats_nif/1, port_nif/1, info_nif/1, tls_nif/1, down_nif/1, up_nif/1,
       route_add_nif/3, route_remove_nif/2, route_reset_nif/1, stubs_nif/1, requests_nif/2,
       requests_clear_nif/1, journal_listen_nif/2, handler_add_nif/4, handler_fail_nif/2,
       reply_nif/2, scenario_nif/2, scenario_set_nif/3,
       scenarios_reset_nif/1, client_ca_nif/1, client_cert_nif/2, recorded_nif/1, save_stubs_nif/2,
       load_stubs_nif/2, clear_recorded_nif/1, reply_dirty_nif/2, dirty_replies_nif/0]).

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
    try cbench_c_terms:start_result(start_nif(cbench_opts:engine_map(Opts)), Opts)
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

%% @doc No message is the engine's: its threads send the server only the journal's wake-ups, which
%% the server reads itself, and a handler route's requests go to the handler's process.
-spec handle_info(term(), handle()) -> false.
handle_info(_Msg, _H) -> false.

%% @doc The bound TCP port.
-spec port(handle()) -> inet:port_number().
port(H) -> port_nif(H).

%% @doc The TLS listener's port (`tls_port', or the main port when it speaks TLS), or undefined.
-spec tls_port(handle()) -> inet:port_number() | undefined.
tls_port(H) -> maps:get(tls_port, info_nif(H), undefined).

%% @doc The engine's counters (cb_stats_t as a map), or {error, stopped}.
-spec stats(handle()) -> map() | {error, stopped}.
stats(H) -> stats_nif(H).

%% @doc Threads and the CPU each is pinned to (-1: not pinned), the admin API's port when it is on,
%% and with TLS its port and whether its connections try kernel TLS (docs/tls.md).
-spec info(handle()) -> #{threads := pos_integer(), cpus := [integer()],
                          admin_port => inet:port_number(), tls_port => inet:port_number(),
                          ktls => boolean(), ktls_why => binary()}.
info(H) -> info_nif(H).

%% @doc The CA the server made at start, PEM and DER (both undefined with the user's files).
-spec tls(handle()) -> #{ca_pem := binary() | undefined, ca_der := binary() | undefined} |
                       {error, term()}.
tls(H) -> cbench_c_terms:tls_info(tls_nif(H)).

%% @doc Adds a stub (canonical terms); dirty I/O: returns once every worker uses the new table.
-spec route_add(handle(), cbench_spec:canon_match(), cbench_spec:canon_response()) ->
          {{ok, pos_integer()} | {error, term()}, handle()}.
route_add(H, Match, Response) ->
    {cbench_c_terms:add_result(route_add_nif(H, cbench_c_terms:match(Match), Response), Match,
                               Response, fun() -> stubs_nif(H) end),
     H}.

%% @doc Removes a stub; {error, not_found} for an unknown id.
-spec route_remove(handle(), pos_integer()) -> {ok | {error, term()}, handle()}.
route_remove(H, Id) -> {cbench_c_terms:remove_result(route_remove_nif(H, Id)), H}.

%% @doc Removes every stub.
-spec routes_reset(handle()) -> {ok | {error, term()}, handle()}.
routes_reset(H) -> {route_reset_nif(H), H}.

%% @doc A scenario's state (docs/erlang.md, scenarios).
-spec scenario(handle(), binary()) -> {ok, binary()} | {error, term()}.
scenario(H, Name) -> scenario_nif(H, Name).

%% @doc Sets a scenario's state.
-spec scenario_set(handle(), binary(), binary()) -> {ok | {error, term()}, handle()}.
scenario_set(H, Name, State) -> {cbench_c_terms:scenario_result(scenario_set_nif(H, Name, State)), H}.

%% @doc Every scenario back to `started'.
-spec scenarios_reset(handle()) -> {ok | {error, term()}, handle()}.
scenarios_reset(H) -> {scenarios_reset_nif(H), H}.

%% @doc The recordings as stub-file JSON (cb_server_recorded_json).
-spec recorded(handle()) -> {ok, binary()} | {error, term()}.
recorded(H) -> recorded_nif(H).

%% @doc Writes the recordings to File (cb_server_save_stubs): {ok, Count}.
-spec save_stubs(handle(), binary()) -> {ok, non_neg_integer()} | {error, term()}.
save_stubs(H, File) -> save_stubs_nif(H, File).

%% @doc Adds the stubs of a stub file (cb_server_stubs_file): {ok, Count}.
-spec load_stubs(handle(), binary()) -> {ok, non_neg_integer()} | {error, term()}.
load_stubs(H, File) -> load_stubs_nif(H, File).

%% @doc Drops the recordings.
-spec clear_recorded(handle()) -> ok.
clear_recorded(H) -> clear_recorded_nif(H).

%% @doc A client certificate issued by the client CA (cbench:client_cert/2).
-spec client_cert(handle(), binary()) -> cbench_tls_auth:client_cert() | {error, term()}.
client_cert(H, Cn) ->
    case client_cert_nif(H, Cn) of
        {ok, CertPem, KeyPem, Subject, Sha256} ->
            cbench_tls_auth:cert_map(CertPem, KeyPem, Subject, Sha256);
        Error -> Error
    end.

%% @doc The client CA as PEM; {error, no_tls} without TLS.
-spec client_ca(handle()) -> {ok, binary()} | {error, term()}.
client_ca(H) -> client_ca_nif(H).

%% @doc The stubs with their names, hits and uses left.
-spec stubs(handle()) -> [map()] | {error, stopped}.
stubs(H) -> stubs_nif(H).

%% @doc The journal's entries that may match a canonical filter (the engine applies part of it).
-spec journal(handle(), cbench_spec:canon_filter()) -> [cbench_journal:entry()] | {error, term()}.
journal(H, Filter) -> requests_nif(H, cbench_c_terms:filter(Filter)).

%% @doc Empties the journal.
-spec journal_clear(handle()) -> ok | {error, term()}.
journal_clear(H) -> requests_clear_nif(H).

%% @doc Turns on or off the `{cbench_journal, Seq}' messages to the calling process.
-spec journal_notify(handle(), boolean()) -> ok | {error, term()}.
journal_notify(H, true) -> journal_listen_nif(H, self());
journal_notify(H, false) -> journal_listen_nif(H, false).

%% @doc Closes the listeners and every connection (returns once they are closed).
-spec down(handle()) -> {ok | {error, term()}, handle()}.
down(H) -> {down_nif(H), H}.

%% @doc Listens again on the same port.
-spec up(handle()) -> {ok | {error, term()}, handle()}.
up(H) -> {up_nif(H), H}.

%% @doc Adds an Erlang handler route (docs/erlang.md): requests that Match are sent to Target.
-spec handler_add(handle(), cbench_spec:canon_match(), pid() | atom(), map()) ->
          {{ok, pos_integer()} | {error, term()}, handle()}.
handler_add(H, Match, Target, Opts) ->
    {case handler_add_nif(H, cbench_c_terms:match(Match), Target, Opts) of
         {error, einval} -> {error, {bad_handler, einval}};
         {error, elimit} -> {error, too_many_routes};
         Other -> Other
     end, H}.

%% @doc The handler of route Id is gone: its parked requests get 503, its streams are cut.
-spec handler_fail(handle(), pos_integer()) -> ok | {error, term()}.
handler_fail(H, Id) -> handler_fail_nif(H, Id).

%% @doc Handlers' answers to requests of one server (cbench_handler, which checks types and sizes
%% first), handed to its workers in one call: one result per item, in order. A refusal of the
%% whole call (the server is stopped) is raised as {cbench_reply, Reason}.
-spec reply(handle(), [cbench_c_terms:reply_item()]) -> [ok | {error, term()}].
reply(Server, Items) ->
    case reply_nif(Server, Items) of
        Results when is_list(Results) -> Results;
        {error, Reason} -> error({cbench_reply, Reason})
    end.

%% @doc As reply/2, on a dirty CPU scheduler: for answers whose bytes or number would keep a normal
%% scheduler past about a millisecond (cbench_handler chooses).
-spec reply_dirty(handle(), [cbench_c_terms:reply_item()]) -> [ok | {error, term()}].
reply_dirty(Server, Items) ->
    case reply_dirty_nif(Server, Items) of
        Results when is_list(Results) -> Results;
        {error, Reason} -> error({cbench_reply, Reason})
    end.

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
%% @private
tls_nif(_H) -> erlang:nif_error({not_loaded, ?MODULE}).
%% @private
down_nif(_H) -> erlang:nif_error({not_loaded, ?MODULE}).
%% @private
up_nif(_H) -> erlang:nif_error({not_loaded, ?MODULE}).
%% @private
route_add_nif(_H, _Match, _Response) -> erlang:nif_error({not_loaded, ?MODULE}).
%% @private
route_remove_nif(_H, _Id) -> erlang:nif_error({not_loaded, ?MODULE}).
%% @private
route_reset_nif(_H) -> erlang:nif_error({not_loaded, ?MODULE}).
%% @private
stubs_nif(_H) -> erlang:nif_error({not_loaded, ?MODULE}).
%% @private
requests_nif(_H, _Filter) -> erlang:nif_error({not_loaded, ?MODULE}).
%% @private
requests_clear_nif(_H) -> erlang:nif_error({not_loaded, ?MODULE}).
%% @private
journal_listen_nif(_H, _PidOrFalse) -> erlang:nif_error({not_loaded, ?MODULE}).
%% @private
handler_add_nif(_H, _Match, _Target, _Opts) -> erlang:nif_error({not_loaded, ?MODULE}).
%% @private
handler_fail_nif(_H, _Id) -> erlang:nif_error({not_loaded, ?MODULE}).
%% @private
reply_nif(_H, _Items) -> erlang:nif_error({not_loaded, ?MODULE}).
%% @private
scenario_nif(_H, _Name) -> erlang:nif_error({not_loaded, ?MODULE}).
%% @private
scenario_set_nif(_H, _Name, _State) -> erlang:nif_error({not_loaded, ?MODULE}).
%% @private
scenarios_reset_nif(_H) -> erlang:nif_error({not_loaded, ?MODULE}).
%% @private
recorded_nif(_H) -> erlang:nif_error({not_loaded, ?MODULE}).

save_stubs_nif(_H, _File) -> erlang:nif_error({not_loaded, ?MODULE}).

load_stubs_nif(_H, _File) -> erlang:nif_error({not_loaded, ?MODULE}).

clear_recorded_nif(_H) -> erlang:nif_error({not_loaded, ?MODULE}).
%% @private
reply_dirty_nif(_H, _Items) -> erlang:nif_error({not_loaded, ?MODULE}).
%% @private
dirty_replies_nif() -> erlang:nif_error({not_loaded, ?MODULE}).

client_ca_nif(_H) -> erlang:nif_error({not_loaded, ?MODULE}).
%% @private
client_cert_nif(_H, _Cn) -> erlang:nif_error({not_loaded, ?MODULE}).
