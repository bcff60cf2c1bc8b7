%%% @doc The ehttpd-style Erlang engine: one gen_tcp acceptor per scheduler, spawned with
%%% `{scheduler, I}', each connection a process on its acceptor's scheduler (cbench_ehttpd_conn).
%%% It serves the route table of docs/wire.md byte for byte, plus the stubs added at run time;
%%% with `close => true' it is the original ehttpd (one canned answer, then close).
%%%
%%% This module owns the engine's lifecycle and tables, and runs in the server process
%%% (cbench_server): the listener and acceptors, the counters, the route table (the stubs and the
%%% fixture routes, compiled by cbench_router and published for the connections to read), the
%%% journal ring, and down/up.
%%%
%%% A change to the stubs only marks the published table stale (O(1)); the first request after
%%% it asks this process to compile and publish it (handle_info/2), so that N stub/3 calls in a
%%% row cost one compile and one persistent_term:put, not N of each (cbench_router:table/1).
%%%
%%% Process tree: the server process (which traps exits) links to the acceptors; each connection is
%%% linked to its acceptor and always exits normally, so stop/1 (killing the acceptors) takes every
%%% connection and its socket down with it, while a closing connection never disturbs its acceptor.
-module(cbench_ehttpd).
-behaviour(cbench_engine).

-export([start/1, stop/1, port/1, stats/1, info/1]).
-export([tls/1, tls_port/1, client_cert/2]).
-export([recorded/1, save_stubs/2, clear_recorded/1]).
-ignore_xref([{recorded, 1}, {save_stubs, 2}, {clear_recorded, 1}]).
-export([handler_add/4, handler_fail/2]).
-export([scenario/2, scenario_set/3, scenarios_reset/1]).
-ignore_xref([{scenario, 2}, {scenario_set, 3}, {scenarios_reset, 1}]).
-export([route_add/3, route_remove/2, routes_reset/1, stubs/1, journal/2, journal_clear/1,
         journal_notify/2, down/1, up/1, handle_info/2]).
%% cbench_engine callbacks, called as Mod:F(...) by cbench_server.
-ignore_xref([{handler_add, 4}, {handler_fail, 2}]).
-ignore_xref([{tls, 1}, {tls_port, 1}, {client_cert, 2}]).
-ignore_xref([{start, 1}, {stop, 1}, {port, 1}, {stats, 1}, {info, 1}, {route_add, 3},
              {route_remove, 2}, {routes_reset, 1}, {stubs, 1}, {journal, 2}, {journal_clear, 1},
              {journal_notify, 2}, {down, 1}, {up, 1}, {handle_info, 2}]).
%% Process entry points.
-export([acceptor/4, acceptor_tls/5]).

-export_type([handle/0]).

-include_lib("kernel/include/file.hrl").
-include("cbench_ehttpd.hrl").

%% CB_MAX_SCENARIOS in include/cbench.h: names, and states.
-define(MAX_SCENARIOS, 4096).
%% tls_max_handshakes's default (the C engine's, per worker).
-define(TLS_MAX_HANDSHAKES, 256).
-record(h, {listen :: gen_tcp:socket() | ssl:sslsocket() | undefined, acceptors :: [pid()],
            %% TLS (docs/tls.md): the certificates, the listener beside the cleartext one
            %% (tls_port) or undefined (none, or the main listener is TLS), its port and options.
            certs :: cbench_certs:certs() | undefined, user_cert = false :: boolean(),
            tls_only = false :: boolean(),
            tls_listen :: ssl:sslsocket() | undefined, tls_port :: inet:port_number() | undefined,
            tls_listen_opts = [] :: list(), tls_cnt :: counters:counters_ref() | undefined,
            tls_sessions :: ets:tid() | undefined,
            cnt :: counters:counters_ref(), port :: inet:port_number(),
            threads :: pos_integer(), scheds :: [pos_integer()], cfg :: #cfg{},
            listen_opts :: list(), ip :: inet:ip_address(),
            %% Stubs, the newest first (an add is O(1)).
            stubs = [] :: [map()], next_id = 1 :: pos_integer(),
            %% Scenarios (issue 25): each name's slot in the atomics, which hold each one's
            %% state as a number; the numbers of the state names both ways (0: started).
            scen_atomics = atomics:new(?MAX_SCENARIOS, []) :: atomics:atomics_ref(),
            scen_slots = #{} :: #{binary() => pos_integer()},
            state_ids = #{<<"started">> => 0} :: #{binary() => non_neg_integer()},
            state_names = #{0 => <<"started">>} :: #{non_neg_integer() => binary()},
            %% Pending handshakes per acceptor of a TLS listener (tls_max_handshakes).
            tls_max = ?TLS_MAX_HANDSHAKES :: pos_integer()}).
-opaque handle() :: #h{}.

-define(TCP_DEFER_ACCEPT, {raw, 6, 9, <<1:32/native>>}).


%% @doc Listens and spawns the acceptors, linked to the caller (the server process, which also
%% receives the journal's wake-ups). Opts is validated by cbench_opts.
-spec start(map()) -> {ok, handle()} | {error, term()}.
start(Opts = #{ip := Ip, threads := Threads, backlog := Backlog,
               max_header_bytes := MaxHeader}) ->
    Family = case tuple_size(Ip) of 4 -> inet; 8 -> inet6 end,
    ListenOpts = [Family, binary, {ip, Ip}, {active, false}, {packet, http_bin},
                  {packet_size, MaxHeader}, {backlog, Backlog}, {reuseaddr, true},
                  {nodelay, true}, ?TCP_DEFER_ACCEPT,
                  %% A head line over packet_size fails the read with emsgsize; the socket must
                  %% stay open for writing so that the peer gets its 431.
                  {exit_on_close, false},
                  %% A peer that stops reading must not pin a connection process forever.
                  {send_timeout, maps:get(idle_timeout_ms, Opts)}, {send_timeout_close, true}],
    case tls_setup(Opts, ListenOpts) of
        {ok, Tls} -> start(Opts, ListenOpts, Tls, Threads);
        {error, _} = Error -> Error
    end.

start(Opts, ListenOpts0, Tls, Threads) ->
    #{ip := Ip, port := Port, max_header_bytes := MaxHeader} = Opts,
    TlsOnly = Tls =/= none andalso maps:get(tls_port, Opts, undefined) =:= undefined,
    ListenOpts = case TlsOnly of
                     true -> tls_socket_opts(ListenOpts0) ++ element(2, Tls);
                     false -> ListenOpts0
                 end,
    case listen(TlsOnly, Port, ListenOpts) of
        {ok, L} ->
            {ok, Bound} = sockport(L),
            case tls_listen(Tls, TlsOnly, Opts, ListenOpts0) of
                {ok, TL, TlsPort, TlsOpts} ->
                    _ = cbench_fixture:ensure(),
                    Fixture = cbench_fixture_routes:routes(),
                    Cnt = counters:new(length(?STAT_KEYS) + length(Fixture) + 1, [write_concurrency]),
                    Cfg = #cfg{cnt = Cnt, max_header = MaxHeader,
                               max_body = maps:get(max_body_bytes, Opts),
                               header_timeout = maps:get(header_timeout_ms, Opts),
                               idle_timeout = maps:get(idle_timeout_ms, Opts),
                               max_queued_reply = maps:get(max_queued_reply_bytes, Opts),
                               close_mode = maps:get(close, Opts, false),
                               table = make_ref(),
                               not_found_stat = length(?STAT_KEYS) + length(Fixture) + 1,
                               journal = cbench_ehttpd_journal:new(maps:get(journal, Opts, 0),
                                                                   maps:get(journal_body_bytes, Opts, 0),
                                                                   self()),
                               echo_held = atomics:new(1, [{signed, true}]),
                               recorder = cbench_ehttpd_record:new()},
                    Online = erlang:system_info(schedulers_online),
                    Scheds = [(I - 1) rem Online + 1 || I <- lists:seq(1, Threads)],
                    H0 = #h{listen = L, cnt = Cnt, port = Bound, threads = Threads, scheds = Scheds,
                            cfg = Cfg, listen_opts = ListenOpts, ip = Ip, acceptors = []},
                    H = case Tls of
                            none -> H0;
                            {Certs, _SslOpts, User} ->
                                H0#h{certs = Certs, user_cert = User, tls_only = TlsOnly,
                                     tls_listen = TL, tls_port = TlsPort, tls_listen_opts = TlsOpts,
                                     tls_cnt = counters:new(3, [write_concurrency]),
                                     tls_sessions = ets:new(cbench_ehttpd_sessions,
                                                            [set, public, {write_concurrency, true}])}
                        end,
                    cbench_router:publish(Cfg#cfg.table, compile([])),
                    cbench_router:lazy(Cfg#cfg.table, self()),
                    {ok, spawn_acceptors(H, Opts)};
                {error, Reason} ->
                    _ = close_listener(L),
                    {error, Reason}
            end;
        {error, Reason} ->
            {error, Reason}
    end.

%% The certificates and the ssl options of a TLS server, or none without `tls'. The user's files
%% replace the default identity; the bad leaves and the client CA are made all the same.
tls_setup(#{tls := true} = Opts, _ListenOpts) ->
    case application:ensure_all_started(ssl) of
        {ok, _} ->
            Certs = cbench_certs:new(),
            Files = case Opts of
                        #{tls_cert_file := C, tls_key_file := K} when C =/= undefined,
                                                                       K =/= undefined -> {C, K};
                        _ -> none
                    end,
            %% The handshake pauses after the ClientHello ({handshake, hello}): the connection
            %% reads the name it asks for and runs a handshake fault for it (docs/faults.md).
            SslOpts = [{handshake, hello}
                       | cbench_certs:ssl_opts(Certs, Files, maps:get(client_auth, Opts, none),
                                               [<<"http/1.1">>])],
            {ok, {Certs, SslOpts, Files =/= none}};
        {error, _} = Error -> Error
    end;
tls_setup(_Opts, _ListenOpts) ->
    {ok, none}.

%% The TCP options of a TLS listener: those of a cleartext one but exit_on_close, which there
%% keeps a 431's socket open after a head line too long, and under `ssl' hides the peer's close
%% from the session (a recv then waits for its timeout instead of seeing the close).
tls_socket_opts(ListenOpts) -> lists:keydelete(exit_on_close, 1, ListenOpts).

listen(false, Port, Opts) -> gen_tcp:listen(Port, Opts);
listen(true, Port, Opts) -> ssl:listen(Port, Opts).

sockport(L) when is_port(L) -> inet:port(L);
sockport(L) ->
    case ssl:sockname(L) of
        {ok, {_, P}} -> {ok, P};
        Error -> Error
    end.

close_listener(L) when is_port(L) -> gen_tcp:close(L);
close_listener(L) -> ssl:close(L).

%% The TLS listener beside the cleartext one (tls_port), when there is one.
tls_listen({_Certs, SslOpts, _}, false, #{tls_port := TlsPort}, ListenOpts) ->
    Opts = tls_socket_opts(ListenOpts) ++ SslOpts,
    case ssl:listen(TlsPort, Opts) of
        {ok, TL} ->
            {ok, Bound} = sockport(TL),
            {ok, TL, Bound, Opts};
        {error, _} = Error -> Error
    end;
tls_listen(_Tls, _TlsOnly, _Opts, _ListenOpts) ->
    {ok, undefined, undefined, []}.

spawn_acceptors(H) ->
    spawn_acceptors(H, #{}).

%% One acceptor per scheduler on each listener. A TLS listener's connections share a fresh count
%% of pending handshakes per acceptor (at most tls_max_handshakes each).
spawn_acceptors(H = #h{listen = L, scheds = Scheds, cfg = Cfg0, tls_only = TlsOnly,
                       tls_listen = TL}, Opts) ->
    Server = self(),
    TlsCfg = fun() ->
                     Max = maps:get(tls_max_handshakes, Opts, tls_max_handshakes(H)),
                     Cfg0#cfg{tls = #tls{handshake_timeout = Cfg0#cfg.header_timeout,
                                         pending = atomics:new(length(Scheds), [{signed, true}]),
                                         max_pending = Max, cnt = H#h.tls_cnt,
                                         sessions = H#h.tls_sessions}}
             end,
    Accept = fun(Listener, false) ->
                     [spawn_opt(?MODULE, acceptor, [Listener, S, Cfg0, Server],
                                [link, {scheduler, S}]) || S <- Scheds];
                (Listener, true) ->
                     Cfg = TlsCfg(),
                     [spawn_opt(?MODULE, acceptor_tls, [Listener, S, Slot, Cfg, Server],
                                [link, {scheduler, S}])
                      || {Slot, S} <- lists:zip(lists:seq(1, length(Scheds)), Scheds)]
             end,
    Main = Accept(L, TlsOnly),
    Beside = case TL of
                 undefined -> [];
                 _ -> Accept(TL, true)
             end,
    H#h{acceptors = Main ++ Beside, tls_max = maps:get(tls_max_handshakes, Opts,
                                                        tls_max_handshakes(H))}.

tls_max_handshakes(#h{tls_max = Max}) -> Max.

%% @doc Closes the listener and kills the acceptors, which takes every connection with them.
%% Unlike the C engine, in-flight responses are not given stop_timeout_ms to finish.
-spec stop(handle()) -> ok.
stop(#h{listen = L, tls_listen = TL, acceptors = Accs, stubs = Stubs, tls_sessions = Sessions,
        cfg = #cfg{table = Key, journal = J, recorder = Rec}}) ->
    _ = L =/= undefined andalso close_listener(L),
    _ = TL =/= undefined andalso close_listener(TL),
    Refs = [monitor(process, A) || A <- Accs],
    [exit(A, kill) || A <- Accs],
    [receive {'DOWN', R, process, _, _} -> ok end || R <- Refs],
    cbench_router:unpublish(Key),
    cbench_ehttpd_journal:delete(J),
    cbench_ehttpd_record:delete(Rec),
    _ = Sessions =/= undefined andalso ets:delete(Sessions),
    close_stub_files(Stubs).

%%% Recordings (docs/record.md): the exchanges proxy stubs with `record => true' captured,
%%% cbench_ehttpd_record's, as the stub file the C engines write.

%% @doc The recordings as the stub file's JSON text, bodies inline.
-spec recorded(handle()) -> {ok, binary()}.
recorded(#h{cfg = #cfg{recorder = Rec}}) ->
    {ok, cbench_ehttpd_record:recorded(Rec)}.

%% @doc Writes the recordings to File (bodies above their proxy's record_body_file_bytes beside
%% it): how many, or `{error, {save_failed, Message}}'.
-spec save_stubs(handle(), binary()) -> {ok, non_neg_integer()} | {error, term()}.
save_stubs(#h{cfg = #cfg{recorder = Rec}}, File) ->
    case cbench_ehttpd_record:save(Rec, File) of
        ok -> {ok, maps:get(recorded, cbench_ehttpd_record:counts(Rec))};
        {error, {Path, Why}} ->
            %% As the C engine says it: the path that failed and strerror(3)'s words.
            [C | Rest] = file:format_error(Why),
            {error, {save_failed, iolist_to_binary(io_lib:format("~ts: ~ts", [Path, [string:to_upper(C) | Rest]]))}}
    end.

-spec clear_recorded(handle()) -> ok.
clear_recorded(#h{cfg = #cfg{recorder = Rec}}) ->
    cbench_ehttpd_record:clear(Rec).

%% @doc The bound TCP port (the TLS one when the server is TLS only).
-spec port(handle()) -> inet:port_number().
port(#h{port = P}) -> P.

%% @doc The TLS port: the TLS listener's beside the cleartext one, port/1 when the server is TLS
%% only, undefined without TLS.
-spec tls_port(handle()) -> inet:port_number() | undefined.
tls_port(#h{tls_only = true, port = P}) -> P;
tls_port(#h{tls_port = P}) -> P.

%% @doc The CAs a test is given (cbench:tls/1); with the user's certificate the server's CA is
%% the user's (undefined here), the client CA is still ours.
-spec tls(handle()) -> cbench:tls_info() | {error, no_tls}.
tls(#h{certs = undefined}) -> {error, no_tls};
tls(#h{certs = Certs, user_cert = User}) ->
    Info = cbench_certs:tls_info(Certs),
    case User of
        true -> Info#{ca_pem := undefined, ca_der := undefined};
        false -> Info
    end.

%% @doc A client certificate issued by the client CA (cbench:client_cert/2).
-spec client_cert(handle(), binary()) -> cbench_tls_auth:client_cert() | {error, term()}.
client_cert(#h{certs = undefined}, _Cn) -> {error, no_tls};
client_cert(#h{certs = Certs}, Cn) ->
    {ok, M} = cbench_certs:client_cert(Certs, Cn),
    M.

%% @doc Threads (acceptors) and the scheduler each one runs on.
-spec info(handle()) -> #{threads := pos_integer(), schedulers := [pos_integer()]}.
info(#h{threads = T, scheds = S}) -> #{threads => T, schedulers => S}.

%% @doc The counters, with the keys of cbench:stats/1. Bytes are added when a connection closes.
%% requests_by_route has the fixture routes and not_found (atoms), then the stubs' names (binaries;
%% stubs of one name add up).
-spec stats(handle()) -> map().
stats(#h{cnt = Cnt, stubs = Stubs, tls_cnt = TlsCnt, cfg = #cfg{recorder = Rec}}) ->
    Keys = ?STAT_KEYS,
    Base = maps:from_list([{K, counters:get(Cnt, I)}
                           || {I, K} <- lists:zip(lists:seq(1, length(Keys)), Keys)]),
    Names = cbench_fixture_routes:names(),
    Fixture = maps:from_list([{R, counters:get(Cnt, length(Keys) + I)}
                              || {I, R} <- lists:zip(lists:seq(1, length(Names)), Names)]),
    ByRoute = lists:foldl(fun(#{name := N, counts := C}, Acc) ->
                                  maps:update_with(N, fun(V) -> V + route_count(C) end,
                                                   route_count(C), Acc)
                          end, Fixture, Stubs),
    #{conns_accepted := Acc, conns_closed := Closed, requests := Reqs} = Base,
    Stats = Base#{conns_open => Acc - Closed,
                  requests_by_route => ByRoute,
                  conns_by_proto => #{http1 => Acc, h2c_prior => 0, h2c_upgrade => 0, h1_tls => 0,
                                      h2_tls => 0},
                  requests_by_proto => #{http1 => Reqs, h2c_prior => 0, h2c_upgrade => 0, h1_tls => 0,
                                         h2_tls => 0},
                  h2_errors => 0,
                  %% No HTTP/2 here: no session to park.
                  h2_parked => 0,
                  h2_woken => 0,
                  %% OTP ssl keeps the record layer: no kernel TLS.
                  tls_ktls => 0},
    %% recorded, recorded_duplicates, record_skipped (docs/record.md).
    tls_stats(maps:merge(Stats, cbench_ehttpd_record:counts(Rec)), TlsCnt).

%% A server with TLS counts its TLS connections and requests under h1_tls (h2_tls: 0, ehttpd has no
%% HTTP/2); a connection whose handshake failed or was refused is in neither http1 nor h1_tls.
tls_stats(Stats, undefined) ->
    Stats;
tls_stats(Stats = #{conns_accepted := Acc, requests := Reqs}, TlsCnt) ->
    [TlsConns, TlsReqs, TlsAccepted] = [counters:get(TlsCnt, I) || I <- [1, 2, 3]],
    Stats#{conns_by_proto := #{http1 => Acc - TlsAccepted, h2c_prior => 0, h2c_upgrade => 0,
                               h1_tls => TlsConns, h2_tls => 0},
           requests_by_proto := #{http1 => Reqs - TlsReqs, h2c_prior => 0, h2c_upgrade => 0,
                                  h1_tls => TlsReqs, h2_tls => 0}}.

%% A stub's fault, parsed once for the connections (the HTTP/2 kinds cannot be served here).
fault_run({ok, R = #{fault := Text}}) ->
    {ok, F0 = #{kind := Kind}} = cbench_fault:parse(Text),
    %% Fitted to the stub's own body, which the pacing faults pace (as stub.c does).
    case {cbench_ehttpd_conn:own_size(R), cbench_fault:h2_only(Kind)} of
        {_, true} -> {error, {unsupported, Kind}};
        {Size, false} ->
            case cbench_fault:fit(F0, Size) of
                {ok, F} -> {ok, R#{fault_run => F, fault_draws => atomics:new(1, [])}};
                error -> {error, {bad_stub, {{response, fault}, Text, fault_exceeds_body}}}
            end
    end;
fault_run(Other) ->
    Other.

route_count(Counts) -> counters:get(Counts, 1) + counters:get(Counts, 2).

%%% Routes

%% @doc Adds a stub (canonical terms of cbench_spec) and publishes the new table.
-spec route_add(handle(), cbench_spec:canon_match(), cbench_spec:canon_response()) ->
          {{ok, pos_integer()} | {error, term()}, handle()}.
route_add(H0, Match, Response = #{responses := Items}) ->
    %% A sequence: each response prepared as a single one; the router hands them out in turn.
    Prepared = [template(Match, prepare(I)) || I <- Items],
    case [E || {error, _} = E <- Prepared] of
        [Error | _] -> {Error, H0};
        [] ->
            Rs = [R || {ok, R} <- Prepared],
            Seq = Response#{seq_items => list_to_tuple(Rs), seq_n => length(Rs),
                            seq_next => atomics:new(1, [])},
            add(H0, Match, {ok, Seq})
    end;
route_add(H, Match, Response) ->
    add(H, Match, prepare(Response)).

%% A single response as the connections serve it: a body file's size, the fault parsed, and the
%% counter of its drawn delays. A proxy stub needs nothing more: an h2c one is spoken to by
%% cbench_h2_upstream, an HTTP/1.1 one by cbench_ehttpd_proxy (docs/proxy.md, "On the ehttpd engine").
prepare(Response) ->
    Response1 = case Response of
                    #{body := {file, Path}, chunks := Chunks} ->
                        %% The file is opened once, here, and its size fixed, as the C engine keeps
                        %% its descriptor: what is put under its name later (a FIFO, another file)
                        %% changes nothing. A raw descriptor serves its owner only, so the
                        %% connections open /proc/self/fd/N, the same open file, and check it is.
                        case open_stub_file(Path) of
                            {ok, Fd, ProcPath, FileId, Size} ->
                                case cbench_spec:chunks_fit_size(Chunks, Size) of
                                    true -> {ok, Response#{body := {file, ProcPath}, file_size => Size,
                                                           file_fd => Fd, file_id => FileId}};
                                    false ->
                                        ok = file:close(Fd),
                                        {error, {bad_stub, {{response, chunks}, Chunks,
                                                            chunks_exceed_body}}}
                                end;
                            {error, E} -> {error, {bad_stub, {{response, body}, {file, Path}, E}}}
                        end;
                    _ -> {ok, Response}
                end,
    case fault_run(Response1) of
        {ok, R = #{delay := {Dist, Ms, P, Seed}}} ->
            %% Drawn as the delay fault draws (cbench_fault:delay_ms/3): its parameters as a fault's.
            {ok, Base} = cbench_fault:parse(<<"delay">>),
            F = case Dist of
                    uniform -> Base#{dist := uniform, ms := Ms, max := P, seed := Seed};
                    lognormal -> Base#{dist := lognormal, ms := Ms, sigma := P, seed := Seed}
                end,
            {ok, R#{delay_run => F, delay_draws => atomics:new(1, [])}};
        Other -> Other
    end.

%% A template's pieces (cbench_spec:template_pieces/1, checked already), with what a request needs
%% to render them: the stub's path (for its parameters) and the count of its answers ({{seq}}).
template(Match, {ok, R = #{template := true, body := {data, B}, headers := Hs}}) ->
    {ok, BodyT} = cbench_spec:template_pieces(B),
    HeadersT = [{N, element(2, cbench_spec:template_pieces(V))} || {N, V} <- Hs],
    {ok, R#{tpl_body => BodyT, tpl_headers => HeadersT, tpl_seq => atomics:new(1, []),
            tpl_path => maps:get(path, Match),
            tpl_uses_body => lists:member(body, lists:append([BodyT | [T || {_, T} <- HeadersT]]))}};
template(_Match, Other) -> Other.

add(H0 = #h{next_id = Id}, Match, Prepared0) ->
    Prepared = template(Match, Prepared0),
    case {Prepared, scenario_of(H0, Match)} of
        {{ok, R}, {ok, Scen, H = #h{stubs = Stubs}}} ->
            Left = case R of
                       #{times := infinity} -> undefined;
                       #{times := N} -> A = atomics:new(1, []), atomics:put(A, 1, N), A
                   end,
            Name = case Match of
                       #{name := undefined} -> <<"stub_", (integer_to_binary(Id))/binary>>;
                       #{name := N0} -> N0
                   end,
            Stub0 = #{id => Id, name => Name, match => Match, response => R,
                      counts => counters:new(2, [write_concurrency]), left => Left},
            Stub = case Scen of
                       undefined -> Stub0;
                       _ -> Stub0#{scen => Scen}
                   end,
            H1 = H#h{stubs = [Stub | Stubs], next_id = Id + 1},
            stale(H1),
            {{ok, Id}, H1};
        {{ok, _}, Error} ->
            {Error, H0};
        {Error, _} ->
            {Error, H0}
    end.

%% A stub's body file, opened by this process (which owns the descriptor until the stub goes):
%% the descriptor, the path the connections open it by, its identity and its size. The checks of
%% cbench_spec (a regular file) are made again on the descriptor.
open_stub_file(Path) ->
    %% Erlang's file has no O_NONBLOCK: the path is looked at first, so that only a FIFO put there
    %% between this look and the open can block the add.
    case file:read_file_info(Path) of
        {ok, #file_info{type = regular}} -> open_stub_fd(Path);
        {ok, _} -> {error, not_regular};
        {error, E} -> {error, E}
    end.

open_stub_fd(Path) ->
    case file:open(Path, [read, raw, binary]) of
        {ok, Fd} ->
            case file:read_file_info(Fd) of
                {ok, #file_info{type = regular, size = Size, major_device = Dev, inode = Ino}} ->
                    <<N:32/native>> = prim_file:get_handle(Fd),
                    {ok, Fd, <<"/proc/self/fd/", (integer_to_binary(N))/binary>>, {Dev, Ino}, Size};
                {ok, _} -> ok = file:close(Fd), {error, not_regular};
                {error, E} -> ok = file:close(Fd), {error, E}
            end;
        {error, E} -> {error, E}
    end.

%% Closes the body files of stubs that are gone.
close_stub_files(Stubs) ->
    _ = [file:close(Fd) || #{response := #{file_fd := Fd}} <- Stubs],
    ok.

%%% Scenarios (issue 25): names and states interned here, in the server process; the router reads
%%% and swaps a scenario's state in the atomics.

scenario_of(H, #{scenario := {Name, When, Then}}) ->
    case slot(H, Name) of
        {ok, Slot, H1} ->
            case state_id(H1, When) of
                {ok, W, H2} ->
                    case state_id(H2, Then) of
                        {ok, T, H3} ->
                            {ok, {H3#h.scen_atomics, Slot,
                                  case When of undefined -> any; _ -> W end,
                                  case Then of undefined -> undefined; _ -> T end}, H3};
                        Error -> Error
                    end;
                Error -> Error
            end;
        Error -> Error
    end;
scenario_of(H, _Match) -> {ok, undefined, H}.

slot(H = #h{scen_slots = Slots}, Name) ->
    case Slots of
        #{Name := Slot} -> {ok, Slot, H};
        _ when map_size(Slots) >= ?MAX_SCENARIOS -> {error, too_many_scenarios};
        _ ->
            Slot = map_size(Slots) + 1,
            {ok, Slot, H#h{scen_slots = Slots#{Name => Slot}}}
    end.

state_id(H, undefined) -> {ok, 0, H};
state_id(H = #h{state_ids = Ids, state_names = Names}, State) ->
    case Ids of
        #{State := N} -> {ok, N, H};
        _ when map_size(Ids) >= ?MAX_SCENARIOS -> {error, too_many_scenarios};
        _ ->
            N = map_size(Ids),
            {ok, N, H#h{state_ids = Ids#{State => N}, state_names = Names#{N => State}}}
    end.

%% @doc A scenario's state: `started' for a name no stub or call used.
-spec scenario(handle(), binary()) -> {ok, binary()}.
scenario(#h{scen_slots = Slots, scen_atomics = A, state_names = Names}, Name) ->
    case Slots of
        #{Name := Slot} -> {ok, maps:get(atomics:get(A, Slot), Names)};
        _ -> {ok, <<"started">>}
    end.

%% @doc Sets a scenario's state.
-spec scenario_set(handle(), binary(), binary()) -> {ok | {error, term()}, handle()}.
scenario_set(H0, Name, State) ->
    case slot(H0, Name) of
        {ok, Slot, H1} ->
            case state_id(H1, State) of
                {ok, N, H2} ->
                    atomics:put(H2#h.scen_atomics, Slot, N),
                    {ok, H2};
                Error -> {Error, H0}
            end;
        Error -> {Error, H0}
    end.

%% @doc Every scenario back to `started'.
-spec scenarios_reset(handle()) -> {ok, handle()}.
scenarios_reset(H = #h{scen_slots = Slots, scen_atomics = A}) ->
    _ = [atomics:put(A, Slot, 0) || Slot <- maps:values(Slots)],
    {ok, H}.

%% @doc Adds an Erlang handler route: a stub whose response is the handler (the connection
%% process sends the request to Target and waits, cbench_ehttpd_handler:await/3).
-spec handler_add(handle(), cbench_spec:canon_match(), pid() | atom(), map()) ->
          {{ok, pos_integer()}, handle()}.
handler_add(H = #h{stubs = Stubs, next_id = Id}, Match, Target, Opts) ->
    Name = case Match of
               #{name := undefined} -> <<"handler_", (integer_to_binary(Id))/binary>>;
               #{name := N0} -> N0
           end,
    Stub = #{id => Id, name => Name, match => Match, response => {handler, Target, Opts},
             counts => counters:new(2, [write_concurrency]), left => undefined},
    H1 = H#h{stubs = [Stub | Stubs], next_id = Id + 1},
    stale(H1),
    {{ok, Id}, H1}.

%% @doc Nothing to do: each waiting connection monitors the handler itself.
-spec handler_fail(handle(), pos_integer()) -> ok.
handler_fail(_H, _Id) -> ok.

%% @doc Removes a stub; `{error, not_found}' for an id that is not (or no longer) there.
-spec route_remove(handle(), pos_integer()) -> {ok | {error, not_found}, handle()}.
route_remove(H = #h{stubs = Stubs}, Id) ->
    case [S || S = #{id := I} <- Stubs, I =/= Id] of
        Stubs -> {{error, not_found}, H};
        Left ->
            H1 = H#h{stubs = Left},
            stale(H1),
            close_stub_files([S || S = #{id := I} <- Stubs, I =:= Id]),
            {ok, H1}
    end.

%% @doc Back to the fixture table: every stub removed.
-spec routes_reset(handle()) -> {ok, handle()}.
routes_reset(H = #h{stubs = Stubs}) ->
    H1 = H#h{stubs = []},
    stale(H1),
    close_stub_files(Stubs),
    {ok, H1}.

%% @doc The stubs, oldest first: name, the requests each answered and the uses it has left.
-spec stubs(handle()) -> [#{id := pos_integer(), name := binary(), hits := non_neg_integer(),
                            left := non_neg_integer() | infinity}].
stubs(#h{stubs = Stubs}) ->
    [#{id => Id, name => Name, hits => counters:get(Counts, 1),
       left => case Left of
                   undefined -> infinity;
                   _ -> max(0, atomics:get(Left, 1))
               end}
     || #{id := Id, name := Name, counts := Counts, left := Left} <- lists:reverse(Stubs)].

%% @doc A connection found the table stale (cbench_router:table/1): it is compiled and published
%% once, then every connection that asked meanwhile is answered.
-spec handle_info(term(), handle()) -> {ok, handle()} | false.
handle_info({cbench_router, publish, From, Ref}, H = #h{stubs = Stubs, cfg = #cfg{table = Key}}) ->
    cbench_router:refresh(Key, fun() -> compile(Stubs) end),
    From ! {Ref, published},
    {ok, H};
handle_info(_Msg, _H) -> false.

stale(#h{cfg = #cfg{table = Key}}) -> cbench_router:stale(Key).

compile(Stubs) ->
    Fixture = cbench_fixture_routes:routes(),
    Stats = lists:seq(length(?STAT_KEYS) + 1, length(?STAT_KEYS) + length(Fixture)),
    cbench_router:compile(Stubs, lists:zip(Fixture, Stats)).

%%% Journal

%% @doc The journal's entries after the filter's `since' (cbench_server applies the rest).
-spec journal(handle(), cbench_spec:canon_filter()) -> [cbench_journal:entry()].
journal(#h{cfg = #cfg{journal = J}}, #{since := Since}) -> cbench_ehttpd_journal:read(J, Since).

%% @doc Empties the journal.
-spec journal_clear(handle()) -> ok.
journal_clear(#h{cfg = #cfg{journal = J}}) -> cbench_ehttpd_journal:clear(J).

%% @doc Turns on or off the `{cbench_journal, Seq}' messages to the server process.
-spec journal_notify(handle(), boolean()) -> ok.
journal_notify(#h{cfg = #cfg{journal = J}}, On) -> cbench_ehttpd_journal:notify(J, On).

%%% Down and up

%% @doc Closes the listener and every connection, and returns once they are all closed: new
%% connections are refused until up/1. Down twice is fine.
-spec down(handle()) -> {ok, handle()}.
down(H = #h{listen = undefined}) -> {ok, H};
down(H = #h{listen = L, tls_listen = TL, acceptors = Accs}) ->
    Refs = [monitor(process, A) || A <- Accs],
    %% Each acceptor sees its accept fail with `closed', closes its connections and exits.
    ok = close_listener(L),
    _ = TL =/= undefined andalso close_listener(TL),
    [receive {'DOWN', R, process, _, _} -> ok end || R <- Refs],
    {ok, H#h{listen = undefined, tls_listen = undefined, acceptors = []}}.

%% @doc Listens again on the same port (and address) with new acceptors. Up while up is fine.
-spec up(handle()) -> {ok | {error, term()}, handle()}.
up(H = #h{listen = undefined, port = Port, listen_opts = Opts, tls_only = TlsOnly}) ->
    case listen(TlsOnly, Port, Opts) of
        {ok, L} ->
            case H#h.tls_port of
                undefined -> {ok, spawn_acceptors(H#h{listen = L})};
                TlsPort ->
                    case ssl:listen(TlsPort, H#h.tls_listen_opts) of
                        {ok, TL} -> {ok, spawn_acceptors(H#h{listen = L, tls_listen = TL})};
                        {error, _} = Error -> _ = close_listener(L), {Error, H}
                    end
            end;
        {error, _} = Error -> {Error, H}
    end;
up(H) -> {ok, H}.

%%% Acceptor

%% @private
-spec acceptor(gen_tcp:socket(), pos_integer(), #cfg{}, pid()) -> no_return().
acceptor(L, Sched, Cfg = #cfg{cnt = Cnt}, Server) ->
    case gen_tcp:accept(L) of
        {ok, S} ->
            counters:add(Cnt, ?CONNS_ACCEPTED, 1),
            Pid = spawn_opt(cbench_ehttpd_conn, conn, [self(), Cfg, S],
                            [link, {scheduler, Sched}]),
            %% sendfile needs the socket's owner; the connection waits for this handoff.
            case gen_tcp:controlling_process(S, Pid) of
                ok -> Pid ! {go, S};
                {error, _} -> exit(Pid, kill), gen_tcp:close(S)
            end,
            acceptor(L, Sched, Cfg, Server);
        {error, closed} ->
            close_conns(Cfg, Server),
            exit(normal);
        {error, E} when E =:= emfile; E =:= enfile ->
            %% Back off instead of spinning while descriptors are exhausted.
            counters:add(Cnt, ?ACCEPT_BACKOFFS, 1),
            receive after 100 -> ok end,
            acceptor(L, Sched, Cfg, Server);
        {error, _} ->
            acceptor(L, Sched, Cfg, Server)
    end.

%% @private The acceptor of a TLS listener: the TCP accept only; the handshake is the connection
%% process's (cbench_ehttpd_conn:conn_tls/4), so a client that stalls it holds no acceptor. Over
%% max_pending handshakes of its own under way, a new connection is closed at once (counted in
%% tls_handshakes_refused): a flood of handshakes cannot grow memory without bound.
-spec acceptor_tls(ssl:sslsocket(), pos_integer(), pos_integer(), #cfg{}, pid()) -> no_return().
acceptor_tls(L, Sched, Slot, Cfg = #cfg{cnt = Cnt, tls = Tls}, Server) ->
    case ssl:transport_accept(L) of
        {ok, T} ->
            counters:add(Cnt, ?CONNS_ACCEPTED, 1),
            counters:add(Tls#tls.cnt, 3, 1),
            case atomics:add_get(Tls#tls.pending, Slot, 1) > Tls#tls.max_pending of
                true ->
                    atomics:sub(Tls#tls.pending, Slot, 1),
                    counters:add(Cnt, ?TLS_REFUSED, 1),
                    _ = ssl:close(T),
                    counters:add(Cnt, ?CONNS_CLOSED, 1);
                false ->
                    Pid = spawn_opt(cbench_ehttpd_conn, conn_tls, [self(), Cfg, T, Slot],
                                    [link, {scheduler, Sched}]),
                    case ssl:controlling_process(T, Pid) of
                        ok -> Pid ! {go, T};
                        {error, _} ->
                            unlink(Pid),
                            exit(Pid, kill),
                            atomics:sub(Tls#tls.pending, Slot, 1),
                            _ = ssl:close(T),
                            counters:add(Cnt, ?CONNS_CLOSED, 1)
                    end
            end,
            acceptor_tls(L, Sched, Slot, Cfg, Server);
        {error, closed} ->
            close_conns(Cfg, Server),
            exit(normal);
        {error, E} when E =:= emfile; E =:= enfile ->
            counters:add(Cnt, ?ACCEPT_BACKOFFS, 1),
            receive after 100 -> ok end,
            acceptor_tls(L, Sched, Slot, Cfg, Server);
        {error, _} ->
            acceptor_tls(L, Sched, Slot, Cfg, Server)
    end.

%% The listener closed (down/1): every connection of this acceptor (its linked processes) is killed
%% and waited for, so that down/1 returns with every socket closed. A killed connection could not
%% count itself closed, so it is counted here.
close_conns(#cfg{cnt = Cnt}, Server) ->
    {links, Links} = process_info(self(), links),
    Conns = [P || P <- Links, is_pid(P), P =/= Server],
    Refs = [monitor(process, P) || P <- Conns],
    %% Unlinked first: a killed link would kill this acceptor too, and through it the server.
    [begin unlink(P), exit(P, kill) end || P <- Conns],
    [receive
         {'DOWN', R, process, _, killed} -> counters:add(Cnt, ?CONNS_CLOSED, 1);
         {'DOWN', R, process, _, _} -> ok
     end || R <- Refs],
    ok.
