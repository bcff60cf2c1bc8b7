%%% @doc The contract between cbench_server and an engine module: cbench_nif (the C engine in this
%%% node), cbench_port (the C engine in a port program) and cbench_ehttpd (the Erlang engine). The
%%% server process calls every callback, so an engine's handle lives in that process and a callback
%%% may use its links, monitors, messages and process dictionary.
%%%
%%% Calls that change an engine's state return `{Reply, Handle1}' and the server keeps Handle1; the
%%% others return the reply alone. Terms reach an engine checked and canonical (cbench_spec,
%%% cbench_opts, cbench_handler:opts/1), so an engine refuses only what it cannot serve, and it
%%% refuses it with the same `{error, Reason}' as the other engines (a fault the ehttpd engine
%%% cannot carry is `{error, {unsupported, Kind}}' from route_add/3).
-module(cbench_engine).

-export([module/1]).

-export_type([handle/0, reply/0]).

%% What an engine keeps between calls: its own type (a NIF resource, a record), opaque here.
-type handle() :: term().
%% The reply of a call that changes the engine: `ok' or why not.
-type reply() :: ok | {error, term()}.

%% Start and stop.

%% Starts the engine with options validated by cbench_opts (cbench_opts:validate/2): the calling
%% process (the server) owns it. {error, Reason} when it cannot start (a port in use, a NIF or
%% program not built), without a crash.
-callback start(Opts :: map()) -> {ok, handle()} | {error, term()}.

%% Stops the engine and frees what it holds; called from the server's terminate/2. Stopping twice
%% is fine.
-callback stop(handle()) -> ok.

%% Messages that reach the server and are not its own: the engine's (a port's frames, a wake-up of
%% its route table). {ok, H1} when the engine took the message, {stop, Why} when it is broken and
%% the server must end, `false' when the message is not the engine's (an `EXIT' of a linked
%% process then ends the server unless its reason is `normal').
-callback handle_info(Msg :: term(), handle()) -> {ok, handle()} | {stop, term()} | false.

%% Where it listens and what it runs on.

%% The bound TCP port.
-callback port(handle()) -> inet:port_number().

%% The TLS listener's port (cbench:tls_port/1): that of `tls_port', the main port when it speaks TLS,
%% `undefined' without TLS. Optional: an engine without it has no TLS listener (undefined).
-callback tls_port(handle()) -> inet:port_number() | undefined.
-optional_callbacks([tls_port/1]).

%% The counters, with the keys of cbench:stats() (those of cb_stats_t), or {error, Reason}.
-callback stats(handle()) -> map() | {error, term()}.

%% TLS client certificates (docs/tls.md). A client certificate for common name Cn (checked by
%% cbench_tls_auth:check/1) issued by the engine's client CA, as cbench:client_cert/2 returns it;
%% {error, no_tls} without TLS. The server's client CA as PEM. Optional: an engine without them
%% answers {error, not_supported} through the server.
-callback client_cert(handle(), Cn :: binary()) -> cbench_tls_auth:client_cert() | {error, term()}.
-callback client_ca(handle()) -> {ok, binary()} | {error, term()}.
-optional_callbacks([client_cert/2, client_ca/1]).

%% Threads and where they run (CPUs or schedulers), and the admin API's port when it is on; the
%% server adds `engine', `port' and `ip'.
-callback info(handle()) -> map().

%% The certificates a test needs (cbench:tls/1): the CA of the server's made leaf as PEM and DER,
%% `undefined' for both when the server serves the user's files (an engine without the client_ca
%% callback gives client_ca_pem and client_ca_der here too). Called only when the server has TLS
%% (`tls => true' or `tls_port'; the server answers {error, no_tls} itself).
-callback tls(handle()) -> #{ca_pem := binary() | undefined, ca_der := binary() | undefined,
                             client_ca_pem => binary(), client_ca_der => binary()} |
                           {error, term()}.

%% Closes the listeners and every connection, and returns once they are closed; down twice is fine.
-callback down(handle()) -> {reply(), handle()}.

%% Listens again on the same port; up while up is fine.
-callback up(handle()) -> {reply(), handle()}.

%% Stubs.

%% Adds a stub from canonical terms (a single response or a sequence) and returns its id once
%% every connection uses the new table. {error, {bad_stub, {Field, Value, Why}}} for what the
%% engine refuses, {error, too_many_routes} at its limit.
-callback route_add(handle(), cbench_spec:canon_match(), cbench_spec:canon_response()) ->
    {{ok, pos_integer()} | {error, term()}, handle()}.

%% Removes a stub or a handler route; {error, not_found} for an id the engine does not know.
-callback route_remove(handle(), Id :: pos_integer()) -> {reply(), handle()}.

%% Removes every stub and handler route (the fixture routes stay).
-callback routes_reset(handle()) -> {reply(), handle()}.

%% The stubs and handler routes, oldest first, each `#{id, name, hits, left}' (left: the uses it
%% has left, or infinity), or {error, Reason}.
-callback stubs(handle()) -> [map()] | {error, term()}.

%% Recordings (docs/record.md). Optional: an engine without them answers {error, not_supported}
%% through the server (the ehttpd engine, which has no proxy yet).

%% The recordings as the stub file's JSON text (cb_server_recorded_json).
-callback recorded(handle()) -> {ok, binary()} | {error, term()}.

%% Writes the recordings to File: {ok, Count}, or {error, {save_failed, Message}}.
-callback save_stubs(handle(), File :: binary()) -> {ok, non_neg_integer()} | {error, term()}.

%% Adds the stubs of a stub file, all or none: {ok, Count}, or {error, {bad_stub_file, Message}}.
-callback load_stubs(handle(), File :: binary()) -> {ok, non_neg_integer()} | {error, term()}.

%% Drops the recordings.
-callback clear_recorded(handle()) -> ok | {error, term()}.
-optional_callbacks([recorded/1, save_stubs/2, load_stubs/2, clear_recorded/1]).

%% Erlang handler routes (docs/erlang.md, "Erlang handlers").

%% Adds a route whose requests go to Target, a pid or a registered name (for an {M, F} target, the
%% leader of the pool the server started), with options checked by cbench_handler:opts/1.
%% {error, {bad_handler, Detail}} or {error, too_many_routes} when the engine refuses it.
-callback handler_add(handle(), cbench_spec:canon_match(), Target :: pid() | atom(),
                      HandlerOpts :: map()) ->
    {{ok, pos_integer()} | {error, term()}, handle()}.

%% The process of route Id is gone (the server's monitor fired): its waiting requests get 503 and
%% its streams are cut.
-callback handler_fail(handle(), Id :: pos_integer()) -> reply().

%% Scenarios (docs/erlang.md, scenarios).

%% A scenario's state (`started' for a name nothing has used).
-callback scenario(handle(), Name :: binary()) -> {ok, binary()} | {error, term()}.

%% Sets a scenario's state; {error, too_many_scenarios} at the engine's limit.
-callback scenario_set(handle(), Name :: binary(), State :: binary()) -> {reply(), handle()}.

%% Every scenario back to `started'.
-callback scenarios_reset(handle()) -> {reply(), handle()}.

%% The request journal.

%% The journal's entries, oldest first, that may match a canonical filter: at least every one
%% after its `since' that matches (cbench_journal:filter/2 then applies the whole filter).
%% Called only while the journal is on (the server answers {error, journal_disabled} itself).
-callback journal(handle(), cbench_spec:canon_filter()) ->
    [cbench_journal:entry()] | {error, term()}.

%% Empties the journal; sequence numbers go on from where they were.
-callback journal_clear(handle()) -> reply().

%% Turns on or off the `{cbench_journal, Seq}' message the server gets for each request recorded
%% (while someone awaits requests).
-callback journal_notify(handle(), boolean()) -> reply().

%% @doc The module implementing an engine.
-spec module(cbench:engine()) -> module().
module(nif) -> cbench_nif;
module(port) -> cbench_port;
module(ehttpd) -> cbench_ehttpd.
