%%% @doc The `port' engine: the C engine in its own OS process (priv/cbench_port), spoken to over
%%% `{packet, 4}' with external-term frames that the program decodes with ei. The process that
%%% calls start/1 owns the port; when it dies the port closes, the program reads EOF and exits 0.
-module(cbench_port).
-behaviour(cbench_engine).

-export([start/1, stop/1, port/1, tls_port/1, stats/1, info/1, tls/1, handle_info/2, exe_path/0]).
-export([route_add/3, route_remove/2, routes_reset/1, stubs/1, journal/2, journal_clear/1,
         journal_notify/2, down/1, up/1]).
%% Lower level, for tests of the program itself.
-export([open/0, request/3]).
-export([handler_add/4, handler_fail/2]).
-export([scenario/2, scenario_set/3, scenarios_reset/1]).
-export([client_cert/2, client_ca/1]).
%% Recordings (docs/record.md): optional callbacks of cbench_engine.
-export([recorded/1, save_stubs/2, load_stubs/2, clear_recorded/1]).
-ignore_xref([{recorded, 1}, {save_stubs, 2}, {load_stubs, 2}, {clear_recorded, 1}]).
-ignore_xref([{client_cert, 2}, {client_ca, 1}]).
-ignore_xref([{scenario, 2}, {scenario_set, 3}, {scenarios_reset, 1}]).
-ignore_xref([{handler_add, 4}, {handler_fail, 2}]).

%% Erlang handlers (docs/erlang.md): the owner's side of them (the routes' targets, the requests
%% in flight, the answers batched into frames) is in cbench_port_handler.

%% cbench_engine callbacks, called as Mod:F(...) by cbench_server.
-ignore_xref([{start, 1}, {stop, 1}, {port, 1}, {tls_port, 1}, {stats, 1}, {info, 1}, {tls, 1}, {handle_info, 2},
              {route_add, 3}, {route_remove, 2}, {routes_reset, 1}, {stubs, 1}, {journal, 2},
              {journal_clear, 1}, {journal_notify, 2}, {down, 1}, {up, 1},
              %% For the test suites of the program itself.
              {exe_path, 0}, {open, 0}, {request, 3}]).

-export_type([handle/0]).

-record(h, {port :: port(), tcp_port :: inet:port_number(), threads :: pos_integer(),
            cpus :: [integer()], stop_timeout :: non_neg_integer(),
            admin_port :: inet:port_number(), tls_port :: inet:port_number(),
            ktls :: boolean(), ktls_why :: binary()}).
-opaque handle() :: #h{}.

%% Engine calls wait for every worker, normally microseconds.
-define(CALL_TIMEOUT, 30000).

%% @doc Where the port program is: priv/ of the cbench application, or next to ebin/.
-spec exe_path() -> file:filename().
exe_path() ->
    Priv = case code:priv_dir(cbench) of
               {error, bad_name} ->
                   filename:join(filename:dirname(filename:dirname(code:which(?MODULE))), "priv");
               Dir ->
                   Dir
           end,
    filename:join(Priv, "cbench_port").

%% @doc Starts the program and the engine in it with options validated by cbench_opts.
-spec start(map()) -> {ok, handle()} | {error, term()}.
start(Opts = #{stop_timeout_ms := StopMs}) ->
    case open() of
        {ok, Port} ->
            case request(Port, {start, cbench_opts:engine_map(Opts)}, 30000) of
                {ok, TcpPort, Threads, Cpus, AdminPort, TlsPort, Ktls, KtlsWhy} ->
                    {ok, #h{port = Port, tcp_port = TcpPort, threads = Threads, cpus = Cpus,
                            stop_timeout = StopMs, admin_port = AdminPort, tls_port = TlsPort,
                            ktls = Ktls, ktls_why = KtlsWhy}};
                {error, _} = Error ->
                    close(Port),
                    cbench_c_terms:start_result(Error, Opts)
            end;
        Error ->
            Error
    end.

%% @doc Opens the program; {error, {not_built, Path}} when it is missing.
-spec open() -> {ok, port()} | {error, term()}.
open() ->
    Exe = exe_path(),
    case filelib:is_regular(Exe) of
        false ->
            {error, {not_built, Exe}};
        true ->
            try {ok, open_port({spawn_executable, Exe},
                               [{packet, 4}, binary, exit_status, use_stdio])}
            catch error:Reason -> {error, {open_port, Reason}}
            end
    end.

%% @doc Sends one request and waits for its reply; a program that exits instead gives
%% {error, {port_exited, Status}}. The journal's wake-ups that arrive meanwhile (unsolicited
%% `{cbench_journal, Seq}' frames) are passed on to the calling process as messages.
-spec request(port(), term(), timeout()) -> term().
request(Port, Term, Timeout) ->
    %% Answers waiting for their flush go first: a {handler_fail, Id} must not overtake the
    %% answers its handler gave before it died.
    cbench_port_handler:flush(Port),
    try port_command(Port, term_to_binary(Term)) of
        true -> reply(Port, erlang:monotonic_time(millisecond) + Timeout)
    catch error:badarg ->
            receive {Port, {exit_status, Status}} -> {error, {port_exited, Status}}
            after 0 -> {error, port_closed}
            end
    end.

reply(Port, Deadline) ->
    receive
        {Port, {data, Bin}} ->
            case binary_to_term(Bin) of
                {cbench_journal, _} = Wake -> self() ! Wake, reply(Port, Deadline);
                %% Handler frames are handled at once, in the order the program wrote them.
                {cbench_requests, _, _} = F -> handler_frame(Port, F, Deadline);
                {cbench_gone, _} = F -> handler_frame(Port, F, Deadline);
                {cbench_body, _, _, _} = F -> handler_frame(Port, F, Deadline);
                Reply -> Reply
            end;
        {Port, {exit_status, Status}} -> {error, {port_exited, Status}}
    after max(0, Deadline - erlang:monotonic_time(millisecond)) ->
        {error, timeout}
    end.

%% A frame for a handler route that came while waiting for a reply.
handler_frame(Port, Frame, Deadline) ->
    cbench_port_handler:frame(Port, Frame),
    reply(Port, Deadline).

%% @doc Stops the engine, then closes the program (which exits 0 on EOF).
-spec stop(handle()) -> ok.
stop(#h{port = Port, stop_timeout = StopMs}) ->
    _ = request(Port, stop, StopMs + 10000),
    close(Port),
    ok.

close(Port) ->
    catch port_close(Port),
    ok.

%% @doc The bound TCP port.
-spec port(handle()) -> inet:port_number().
port(#h{tcp_port = P}) -> P.

%% @doc The TLS listener's port (`tls_port', or the main port when it speaks TLS), or undefined.
-spec tls_port(handle()) -> inet:port_number() | undefined.
tls_port(#h{tls_port = 0}) -> undefined;
tls_port(#h{tls_port = P}) -> P.

%% @doc Threads and the CPU each is pinned to (-1: not pinned), the admin API's port when it is on,
%% and with TLS its port and whether its connections try kernel TLS (docs/tls.md).
-spec info(handle()) -> #{threads := pos_integer(), cpus := [integer()], os_pid := integer(),
                          admin_port => inet:port_number(), tls_port => inet:port_number(),
                          ktls => boolean(), ktls_why => binary()}.
info(#h{port = Port, threads = T, cpus = C, admin_port = A, tls_port = TP, ktls = K, ktls_why = W}) ->
    OsPid = case erlang:port_info(Port, os_pid) of
                {os_pid, P} -> P;
                undefined -> undefined
            end,
    Info0 = #{threads => T, cpus => C, os_pid => OsPid},
    Info = case A of
               0 -> Info0;
               _ -> Info0#{admin_port => A}
           end,
    case {TP, K} of
        {0, _} -> Info;
        {_, true} -> Info#{tls_port => TP, ktls => K};
        {_, false} -> Info#{tls_port => TP, ktls => K, ktls_why => W}
    end.

%% @doc The CA the server made at start, PEM and DER (both undefined with the user's files).
-spec tls(handle()) -> #{ca_pem := binary() | undefined, ca_der := binary() | undefined} |
                       {error, term()}.
tls(#h{port = Port}) -> cbench_c_terms:tls_info(request(Port, tls, ?CALL_TIMEOUT)).

%% @doc The engine's counters, or {error, Reason}.
-spec stats(handle()) -> map() | {error, term()}.
stats(#h{port = Port}) ->
    case request(Port, stats, 10000) of
        {ok, Map} -> Map;
        Error -> Error
    end.

%% @doc Adds an Erlang handler route (docs/erlang.md): requests that Match are sent to Target.
-spec handler_add(handle(), cbench_spec:canon_match(), pid() | atom(),
                  #{timeout_ms := pos_integer(), batch := boolean(), body := whole | stream}) ->
          {{ok, pos_integer()} | {error, term()}, handle()}.
handler_add(H = #h{port = Port}, Match, Target, #{timeout_ms := Timeout, batch := Batch,
                                                   body := Body}) ->
    case request(Port, {handler_add, cbench_c_terms:match(Match), Timeout, Body =:= stream},
                 ?CALL_TIMEOUT) of
        {ok, Id} ->
            cbench_port_handler:route_added(Id, Target, Batch, Body),
            {{ok, Id}, H};
        {error, einval} -> {{error, {bad_handler, einval}}, H};
        {error, elimit} -> {{error, too_many_routes}, H};
        Other -> {Other, H}
    end.

%% @doc The handler of route Id is gone: its parked requests get 503, its streams are cut.
-spec handler_fail(handle(), pos_integer()) -> ok | {error, term()}.
handler_fail(#h{port = Port}, Id) -> request(Port, {handler_fail, Id}, ?CALL_TIMEOUT).

%% @doc Adds a stub (canonical terms); returns once every worker uses the new table.
-spec route_add(handle(), cbench_spec:canon_match(), cbench_spec:canon_response()) ->
          {{ok, pos_integer()} | {error, term()}, handle()}.
route_add(H = #h{port = Port}, Match, Response) ->
    Reply = request(Port, {route_add, cbench_c_terms:match(Match), Response}, ?CALL_TIMEOUT),
    {cbench_c_terms:add_result(Reply, Match, Response, fun() -> stubs(H) end), H}.

%% @doc Removes a stub; {error, not_found} for an unknown id.
-spec route_remove(handle(), pos_integer()) -> {ok | {error, term()}, handle()}.
route_remove(H = #h{port = Port}, Id) ->
    cbench_port_handler:route_removed(Id),
    {cbench_c_terms:remove_result(request(Port, {route_remove, Id}, ?CALL_TIMEOUT)), H}.

%% @doc Removes every stub.
-spec routes_reset(handle()) -> {ok | {error, term()}, handle()}.
routes_reset(H = #h{port = Port}) ->
    cbench_port_handler:routes_reset(),
    {request(Port, route_reset, ?CALL_TIMEOUT), H}.

%% @doc A scenario's state (docs/erlang.md, scenarios).
-spec scenario(handle(), binary()) -> {ok, binary()} | {error, term()}.
scenario(#h{port = Port}, Name) -> request(Port, {scenario, Name}, ?CALL_TIMEOUT).

%% @doc Sets a scenario's state.
-spec scenario_set(handle(), binary(), binary()) -> {ok | {error, term()}, handle()}.
scenario_set(H = #h{port = Port}, Name, State) ->
    {cbench_c_terms:scenario_result(request(Port, {scenario_set, Name, State}, ?CALL_TIMEOUT)), H}.

%% @doc A client certificate issued by the client CA (cbench:client_cert/2).
-spec client_cert(handle(), binary()) -> cbench_tls_auth:client_cert() | {error, term()}.
client_cert(#h{port = Port}, Cn) ->
    case request(Port, {client_cert, Cn}, ?CALL_TIMEOUT) of
        {ok, CertPem, KeyPem, Subject, Sha256} ->
            cbench_tls_auth:cert_map(CertPem, KeyPem, Subject, Sha256);
        Error -> Error
    end.

%% @doc The recordings as stub-file JSON (cb_server_recorded_json).
-spec recorded(handle()) -> {ok, binary()} | {error, term()}.
recorded(#h{port = Port}) -> request(Port, recorded, ?CALL_TIMEOUT).

%% @doc Writes the recordings to File (cb_server_save_stubs): {ok, Count}.
-spec save_stubs(handle(), binary()) -> {ok, non_neg_integer()} | {error, term()}.
save_stubs(#h{port = Port}, File) -> request(Port, {save_stubs, File}, ?CALL_TIMEOUT).

%% @doc Adds the stubs of a stub file (cb_server_stubs_file): {ok, Count}.
-spec load_stubs(handle(), binary()) -> {ok, non_neg_integer()} | {error, term()}.
load_stubs(#h{port = Port}, File) -> request(Port, {load_stubs, File}, ?CALL_TIMEOUT).

%% @doc Drops the recordings.
-spec clear_recorded(handle()) -> ok | {error, term()}.
clear_recorded(#h{port = Port}) -> request(Port, clear_recorded, ?CALL_TIMEOUT).

%% @doc The client CA as PEM; {error, no_tls} without TLS.
-spec client_ca(handle()) -> {ok, binary()} | {error, term()}.
client_ca(#h{port = Port}) -> request(Port, client_ca, ?CALL_TIMEOUT).

%% @doc Every scenario back to `started'.
-spec scenarios_reset(handle()) -> {ok | {error, term()}, handle()}.
scenarios_reset(H = #h{port = Port}) -> {request(Port, scenarios_reset, ?CALL_TIMEOUT), H}.

%% @doc The stubs with their names, hits and uses left.
-spec stubs(handle()) -> [map()] | {error, term()}.
stubs(#h{port = Port}) ->
    case request(Port, stubs, ?CALL_TIMEOUT) of
        {ok, List} -> List;
        Error -> Error
    end.

%% @doc The journal's entries that may match a canonical filter (the engine applies part of it).
-spec journal(handle(), cbench_spec:canon_filter()) -> [cbench_journal:entry()] | {error, term()}.
journal(#h{port = Port}, Filter) ->
    case request(Port, {requests, cbench_c_terms:filter(Filter)}, ?CALL_TIMEOUT) of
        {ok, Entries} -> Entries;
        Error -> Error
    end.

%% @doc Empties the journal.
-spec journal_clear(handle()) -> ok | {error, term()}.
journal_clear(#h{port = Port}) -> request(Port, requests_clear, ?CALL_TIMEOUT).

%% @doc Turns on or off the `{cbench_journal, Seq}' messages to the calling process (the port's
%% owner, which gets the program's frames).
-spec journal_notify(handle(), boolean()) -> ok | {error, term()}.
journal_notify(#h{port = Port}, On) -> request(Port, {journal_listen, On}, ?CALL_TIMEOUT).

%% @doc Closes the listeners and every connection (returns once they are closed).
-spec down(handle()) -> {ok | {error, term()}, handle()}.
down(H = #h{port = Port}) -> {request(Port, down, ?CALL_TIMEOUT), H}.

%% @doc Listens again on the same port.
-spec up(handle()) -> {ok | {error, term()}, handle()}.
up(H = #h{port = Port}) -> {request(Port, up, ?CALL_TIMEOUT), H}.

%% @doc Messages for the owning cbench_server: the program exiting by itself ends the server.
-spec handle_info(term(), handle()) -> {ok, handle()} | {stop, term()} | false.
handle_info({Port, {data, Bin}}, H = #h{port = Port}) ->
    case binary_to_term(Bin) of
        {cbench_journal, _} = Wake -> self() ! Wake;
        {cbench_requests, _, _} = F -> cbench_port_handler:frame(Port, F);
        {cbench_gone, _} = F -> cbench_port_handler:frame(Port, F);
        {cbench_body, _, _, _} = F -> cbench_port_handler:frame(Port, F);
        _ -> ok  % a reply that came after its request timed out
    end,
    {ok, H};
handle_info({cbench_port_reply, Items}, H = #h{port = Port}) ->
    cbench_port_handler:queue(Port, Items),
    {ok, H};
handle_info({cbench_port_flush, Port}, H = #h{port = Port}) ->
    cbench_port_handler:flush(Port),
    {ok, H};
handle_info({Port, {exit_status, Status}}, #h{port = Port}) ->
    {stop, {port_exited, Status}};
handle_info({'EXIT', Port, Reason}, #h{port = Port}) when Reason =/= normal ->
    {stop, {port_exited, Reason}};
handle_info(_, H) ->
    {ok, H}.
