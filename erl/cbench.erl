%%% @doc The cbench API: start HTTP fixture servers of any engine (the C engine as a NIF or as a
%%% port program, or the Erlang ehttpd engine) on a port of their own, read their counters, stop
%%% them. `erl -s cbench' starts all three engines and prints where they listen.
-module(cbench).

-export([start_server/2, start_link_server/2, with_server/3, stop_server/1, port/1, url/2, admin_url/1,
         tls_port/1, tls_url/2, stats/1, servers/0, settings/0, load/2, start/0, stop/0]).
-export([stub/3, unstub/2, stubs/1, reset/1, scenario/2, scenario/3, requests/1, requests/2,
         clear_requests/1, expect/4, verify/1, near_misses/1, await/4, down/1, up/1]).
-export([handle/4, reply/4, reply_stream/3, send/2, finish/1, replies/1]).
-export([tls/1, client_tls_opts/1, client_tls_opts/2, client_cert/2]).
-export([recorded/1, save_stubs/2, load_stubs/2, clear_recorded/1]).

%% The API: called by users, not from this application.
-ignore_xref([{start_server, 2}, {start_link_server, 2}, {with_server, 3}, {stop_server, 1}, {port, 1},
              {url, 2}, {admin_url, 1}, {tls_port, 1}, {tls_url, 2}, {stats, 1}, {servers, 0}, {settings, 0}, {load, 2}, {start, 0},
              {stop, 0}, {stub, 3}, {unstub, 2}, {stubs, 1}, {reset, 1}, {scenario, 2}, {scenario, 3},
              {requests, 1}, {requests, 2}, {clear_requests, 1}, {expect, 4}, {verify, 1}, {near_misses, 1},
              {await, 4}, {down, 1}, {up, 1}, {handle, 4}, {reply, 4}, {reply_stream, 3}, {send, 2},
              {finish, 1}, {replies, 1}, {tls, 1}, {client_tls_opts, 1}, {client_tls_opts, 2},
              {client_cert, 2}, {recorded, 1}, {save_stubs, 2}, {load_stubs, 2}, {clear_recorded, 1}]).

-export_type([engine/0, server/0, opts/0, stats/0, route/0, proto/0, error_reason/0, tls_info/0,
              match/0, response/0, filter/0, entry/0, stub_info/0, problem/0, req/0]).

-type engine() :: nif | port | ehttpd.
-type server() :: pid().
%% The options, with their types from the engine's option table (docs/erlang.md); dialyzer flags a
%% misspelt key or a value of the wrong type in a caller.
-type opts() :: cbench_schema:opts().
%% A fixture route's name; a stub's name is a binary.
-type route() :: root | hello | json | echo | echo_chunked | file_tiny | file_small | file_big |
                 stream | stream_small | stream_big | sse | sse_small | sse_big | delay | status |
                 headers | large | cookies | gzip | ws | fault | not_found.
-type proto() :: http1 | h2c_prior | h2c_upgrade | h1_tls | h2_tls.
%% A TLS server's certificates for a test (tls/1): the CA that signed the server's leaf, as PEM and
%% DER (`undefined' with the user's own certificate files: the test has its CA).
-type tls_info() :: #{ca_pem := binary() | undefined, ca_der := binary() | undefined,
                      client_ca_pem := binary(), client_ca_der := binary()}.
%% The counters of stats/1: the same keys for every engine (those of cb_stats_t); requests_by_route
%% has the fixture routes (atoms) and the stubs by name (binaries).
-type stats() :: #{conns_accepted := non_neg_integer(), conns_open := non_neg_integer(),
                   conns_closed := non_neg_integer(), requests := non_neg_integer(),
                   requests_by_route := #{route() | binary() => non_neg_integer()},
                   conns_by_proto := #{proto() => non_neg_integer()},
                   requests_by_proto := #{proto() => non_neg_integer()},
                   bytes_read := non_neg_integer(), bytes_written := non_neg_integer(),
                   status_400 := non_neg_integer(), status_404 := non_neg_integer(),
                   status_405 := non_neg_integer(), status_413 := non_neg_integer(),
                   status_431 := non_neg_integer(), timeouts := non_neg_integer(),
                   resets := non_neg_integer(), h2_errors := non_neg_integer(),
                   h2_parked := non_neg_integer(), h2_woken := non_neg_integer(),
                   accept_backoffs := non_neg_integer(), faults := non_neg_integer(),
                   handler_unavailable := non_neg_integer(),
                   handler_timeouts := non_neg_integer(),
                   handler_overflows := non_neg_integer(),
                   tls_handshakes_failed := non_neg_integer(),
                   tls_handshakes_refused := non_neg_integer(),
                   tls_ktls := non_neg_integer(),
                   tls_handshakes_full := non_neg_integer(),
                   tls_handshakes_resumed := non_neg_integer(),
                   proxy_requests := non_neg_integer(),
                   proxy_upstream_connects := non_neg_integer(),
                   proxy_upstream_reused := non_neg_integer(),
                   proxy_502 := non_neg_integer(), proxy_504 := non_neg_integer(),
                   recorded := non_neg_integer(),
                   recorded_duplicates := non_neg_integer(),
                   record_skipped := non_neg_integer()}.
-type error_reason() :: {bad_engine, term()} | cbench_opts:bad_option() | eaddrinuse |
                        {not_built, file:filename()} | term().
-type match() :: cbench_spec:match().
-type response() :: cbench_spec:response().
-type filter() :: cbench_spec:filter().
-type entry() :: cbench_journal:entry().
-type problem() :: cbench_expect:problem().
-type req() :: cbench_handler:req().
%% One entry of stubs/1: a stub's (or an expectation's) carries its `response'; a route of
%% handle/4 carries its `handler' (the Target given) instead.
-type stub_info() :: #{id := pos_integer(), name := binary(), match := cbench_spec:canon_match(),
                       response := cbench_spec:canon_response(), hits := non_neg_integer(),
                       left := non_neg_integer() | infinity} |
                     #{id := pos_integer(), name := binary(), match := cbench_spec:canon_match(),
                       handler := pid() | atom() | {module(), atom()}, hits := non_neg_integer(),
                       left := non_neg_integer() | infinity}.

%% @doc Starts a server under the cbench application (started if needed); it runs until stopped,
%% whoever started it. Opts: see docs/erlang.md. A bad option: {error, {bad_option, Key, Value,
%% Allowed}}; Engine not an atom or Opts not a map: badarg.
-spec start_server(engine(), opts()) -> {ok, server()} | {error, error_reason()}.
start_server(Engine, Opts) ->
    start_server(Engine, Opts, none).

%% @doc As start_server/2, and linked to the caller: the server stops when the caller exits (for
%% any reason), and the caller gets the server's exit signal if the server crashes. stop_server/1
%% unlinks before stopping it.
-spec start_link_server(engine(), opts()) -> {ok, server()} | {error, error_reason()}.
start_link_server(Engine, Opts) ->
    start_server(Engine, Opts, self()).

start_server(Engine, Opts, Owner) when is_atom(Engine), is_map(Opts) ->
    case lists:member(Engine, cbench_opts:engines()) of
        false ->
            {error, {bad_engine, Engine}};
        true ->
            case application:ensure_all_started(cbench) of
                {ok, _} ->
                    case cbench_opts:validate(Engine, Opts) of
                        {ok, Valid} -> cbench_server_sup:start_server(Engine, Valid, Owner);
                        Error -> Error
                    end;
                Error ->
                    Error
            end
    end;
start_server(_, _, _) ->
    error(badarg).

%% @doc Runs Fun(Server) with a server started (linked) for it, verifies the server (verify/1)
%% when Fun returns, and always stops the server: returns Fun's result, or raises
%% `error({cbench_verify, Problems})' when Fun returned but an expectation was not met or a
%% request matched nothing; an exception of Fun is re-raised as it was (not verified: the first
%% failure is the better message). A server that cannot start raises `error({start_server, Reason})'.
-spec with_server(engine(), opts(), fun((server()) -> Result)) -> Result.
with_server(Engine, Opts, Fun) when is_function(Fun, 1) ->
    case start_link_server(Engine, Opts) of
        {ok, Server} ->
            try Fun(Server) of
                Result ->
                    case verify(Server) of
                        {error, Problems} when is_list(Problems) ->
                            error({cbench_verify, Problems});
                        _ ->
                            Result
                    end
            after stop_server(Server)
            end;
        {error, Reason} ->
            error({start_server, Reason})
    end;
with_server(_, _, _) ->
    error(badarg).

%% @doc Stops a server and waits for its engine to stop. Stopping it again is fine.
-spec stop_server(server()) -> ok.
stop_server(Server) when is_pid(Server) ->
    %% A server of start_link_server/2 would take its caller down with it when stopped.
    unlink(Server),
    case whereis(cbench_server_sup) of
        undefined -> ok;
        _ -> cbench_server_sup:stop_server(Server)
    end;
stop_server(_) ->
    error(badarg).

%% @doc The TCP port a server listens on.
-spec port(server()) -> inet:port_number() | {error, not_running}.
port(Server) when is_pid(Server) ->
    cbench_server:call(Server, port);
port(_) ->
    error(badarg).

%% @doc `http://IP:PORT' joined with Path by one slash (`"hello"' and `"/hello"' give the same
%% URL; `""' gives the bare `http://IP:PORT'), as a string for a string path, a binary for a binary.
-spec url(server(), string() | binary()) -> string() | binary() | {error, not_running}.
url(Server, Path) when is_pid(Server), is_binary(Path) ->
    case url(Server, binary_to_list(Path)) of
        Url when is_list(Url) -> list_to_binary(Url);
        Error -> Error
    end;
url(Server, Path) when is_pid(Server), is_list(Path) ->
    case io_lib:printable_latin1_list(Path) of
        false -> error(badarg);
        true ->
            case cbench_server:call(Server, info) of
                #{ip := Ip, port := Port} -> "http://" ++ host(Ip) ++ ":" ++
                                                 integer_to_list(Port) ++ path(Path);
                Error -> Error
            end
    end;
url(_, _) ->
    error(badarg).

%% @doc The TCP port of the server's TLS listener: `tls_port' when it was given (the bound one for
%% 0), `port/1' when the main listener speaks TLS (`tls => true' alone), `undefined' without TLS.
-spec tls_port(server()) -> inet:port_number() | undefined | {error, not_running}.
tls_port(Server) when is_pid(Server) ->
    cbench_server:call(Server, tls_port);
tls_port(_) ->
    error(badarg).

%% @doc `https://localhost:P' of the server's TLS listener joined with Path as url/2 joins it (the
%% name the made certificate is for), or {error, no_tls}.
-spec tls_url(server(), string() | binary()) -> string() | binary() | {error, no_tls | not_running}.
tls_url(Server, Path) when is_pid(Server), is_binary(Path) ->
    case tls_url(Server, binary_to_list(Path)) of
        Url when is_list(Url) -> list_to_binary(Url);
        Error -> Error
    end;
tls_url(Server, Path) when is_pid(Server), is_list(Path) ->
    case io_lib:printable_latin1_list(Path) of
        false -> error(badarg);
        true ->
            case tls_port(Server) of
                undefined -> {error, no_tls};
                P when is_integer(P) -> "https://localhost:" ++ integer_to_list(P) ++ path(Path);
                Error -> Error
            end
    end;
tls_url(_, _) ->
    error(badarg).

%% @doc `http://127.0.0.1:PORT' of the server's admin API (started with `admin => true' on nif or
%% port: docs/routes.md, "The admin API"), or {error, no_admin}.
-spec admin_url(server()) -> string() | {error, no_admin | not_running}.
admin_url(Server) when is_pid(Server) ->
    case cbench_server:call(Server, info) of
        #{admin_port := P} -> "http://127.0.0.1:" ++ integer_to_list(P);
        #{} -> {error, no_admin};
        Error -> Error
    end;
admin_url(_) ->
    error(badarg).

%%% TLS (docs/tls.md).

%% @doc The certificates a test needs to trust a TLS server (started with `tls => true' on nif or
%% port): the CA that signed its leaf, PEM and DER, both `undefined' when the server serves the
%% user's own files (`tls_cert_file'); and the client CA that `client_auth' verifies client
%% certificates against (client_ca_pem, client_ca_der: cbench:client_cert/2 issues them).
%% {error, no_tls} for a server without TLS.
-spec tls(server()) -> tls_info() | {error, no_tls | not_running}.
tls(Server) when is_pid(Server) ->
    cbench_server:call(Server, tls);
tls(_) ->
    error(badarg).

%% @doc OTP `ssl' client options that trust the server's CA and verify it as `localhost', as they
%% are for httpc (`[{ssl, Opts}]'), ssl:connect/3, gun, hackney: client_tls_opts(S, #{}).
-spec client_tls_opts(server()) -> [ssl:tls_client_option()] | {error, term()}.
client_tls_opts(Server) ->
    client_tls_opts(Server, #{}).

%% @doc As client_tls_opts/1, with `sni => Name' (a string or binary: the name sent and verified,
%% `"localhost"' by default; the bad-certificate names of docs/tls.md choose their leaf) and `alpn
%% => [Protocol]' (binaries such as `<<"h2">>', `<<"http/1.1">>': offered by ALPN, none by
%% default). With the user's own certificate files there is no `cacerts': add your CA. A bad key or
%% value: {error, {bad_option, Key, Value, Allowed}}.
-spec client_tls_opts(server(), #{sni => string() | binary(), alpn => [binary()]}) ->
          [ssl:tls_client_option()] | {error, term()}.
client_tls_opts(Server, Opts) when is_pid(Server), is_map(Opts) ->
    case client_opts(maps:to_list(Opts), #{sni => "localhost", alpn => []}) of
        {ok, #{sni := Sni, alpn := Alpn}} ->
            case tls(Server) of
                #{ca_der := Der} ->
                    Ca = case Der of
                             undefined -> [];
                             _ -> [{cacerts, [Der]}]
                         end,
                    Ca ++ [{verify, verify_peer}, {server_name_indication, Sni},
                           {customize_hostname_check,
                            [{match_fun, public_key:pkix_verify_hostname_match_fun(https)}]}]
                        ++ [{alpn_advertised_protocols, Alpn} || Alpn =/= []];
                Error ->
                    Error
            end;
        Error ->
            Error
    end;
client_tls_opts(_, _) ->
    error(badarg).

client_opts([], Acc) ->
    {ok, Acc};
client_opts([{sni, V} | Rest], Acc) ->
    case catch unicode:characters_to_list(V) of
        L when is_list(L), L =/= [] -> client_opts(Rest, Acc#{sni := L});
        _ -> {error, {bad_option, sni, V, string}}
    end;
client_opts([{alpn, V} | Rest], Acc) ->
    case is_list(V) andalso lists:all(fun(P) -> is_binary(P) andalso P =/= <<>> andalso
                                                  byte_size(P) < 256 end, V) of
        true -> client_opts(Rest, Acc#{alpn := V});
        false -> {error, {bad_option, alpn, V, {list, binary}}}
    end;
client_opts([{K, V} | _], _) ->
    {error, {bad_option, K, V, {known, [alpn, sni]}}}.

path("") -> "";
path(P = "/" ++ _) -> P;
path(P) -> "/" ++ P.

host(Ip) when tuple_size(Ip) =:= 8 -> "[" ++ inet:ntoa(Ip) ++ "]";
host(Ip) -> inet:ntoa(Ip).

%% @doc The counters of a server; the same keys for every engine (those of cb_stats_t).
-spec stats(server()) -> stats() | {error, term()}.
stats(Server) when is_pid(Server) ->
    cbench_server:call(Server, stats);
stats(_) ->
    error(badarg).

%% @doc A client certificate issued by the server's client CA, for a TLS server started with
%% `client_auth => request | require' (docs/tls.md): `#{cn => Cn}' (default `<<"cbench client">>'),
%% ECDSA P-256, valid from an hour ago for a week. Give `{cert, CertDer}' and `{key, Key}' to
%% `ssl', or write `cert_pem' and `key_pem' to files for curl. `{error, no_tls}' for a server
%% without TLS; `{error, {bad_client_cert, {Field, Value, Why}}}' for bad options.
-spec client_cert(server(), #{cn => binary()}) -> cbench_tls_auth:client_cert() | {error, term()}.
client_cert(Server, Opts) when is_pid(Server) ->
    case cbench_tls_auth:check(Opts) of
        {ok, Cn} -> cbench_server:call(Server, {client_cert, Cn});
        Error -> Error
    end;
client_cert(_, _) ->
    error(badarg).

%%% Routes as data: stubs, the journal, expectations, down/up (docs/erlang.md).

%% @doc Adds a stub: requests that Match get Response (both described in docs/erlang.md), before
%% the fixture routes and older stubs of the same priority. Match or Response not a map (Match may
%% also be a bare path): badarg; anything wrong inside them: {error, {bad_stub, {Field, Value,
%% Why}}} (cbench_spec, docs/erlang.md).
-spec stub(server(), match(), response()) -> {ok, pos_integer()} | {error, term()}.
stub(Server, Match, Response) when is_pid(Server) ->
    case cbench_spec:stub(Match, Response) of
        {ok, M, R} -> cbench_server:call(Server, {stub, M, R});
        Error -> Error
    end;
stub(_, _, _) ->
    error(badarg).

%%% Erlang handlers (docs/erlang.md): a route answered by a process.

%% @doc Sends the requests that Match (as stub/3's) to Target, a pid or a registered name, as
%% `{cbench_request, Req}', or `{cbench_requests, [Req]}' with `#{batch => true}'; the process
%% answers with reply/4 or reply_stream/3, send/2 and finish/1. Target `{M, F}': M:F(Req) is
%% called for each request in a pool of `pool' processes (default: the schedulers online) that
%% the server owns. Opts: `timeout_ms' (default 5000: then 504), `batch', `body' (`whole' or
%% `stream') and `pool'. No process, or it dies before answering: 503. Removed with unstub/2
%% like a stub. A pid of another node: {error, {bad_handler, {{handler, target}, Pid, not_local}}}.
-spec handle(server(), match(), pid() | atom() | {module(), atom()}, map()) ->
          {ok, pos_integer()} | {error, term()}.
handle(Server, Match, Target, Opts) when is_pid(Server), is_map(Opts),
                                         is_pid(Target) orelse is_atom(Target) orelse
                                         (is_tuple(Target) andalso tuple_size(Target) =:= 2 andalso
                                          is_atom(element(1, Target)) andalso
                                          is_atom(element(2, Target))) ->
    case {cbench_spec:match(Match), cbench_handler:opts(Opts)} of
        {{ok, #{scenario := {Name, _, _}}}, _} ->
            %% A scenario moves on a stub's answer; a handler's is the process's own.
            {error, {bad_stub, {{match, scenario}, Name, unknown_key}}};
        {{ok, _}, {ok, _}} when is_pid(Target), node(Target) =/= node() ->
            %% The engines send to local processes (the NIF cannot send to another node).
            {error, {bad_handler, {{handler, target}, Target, not_local}}};
        {{ok, M}, {ok, O}} -> cbench_server:call(Server, {handle, M, Target, O});
        {{error, _} = Error, _} -> Error;
        {_, Error} -> Error
    end;
handle(_, _, _, _) ->
    error(badarg).

%% @doc Answers a request whole: the same bytes a stub with this status, headers and body sends.
%% {error, gone}: answered already, timed out, or its client or stream is gone. A term of the
%% wrong type: badarg; a status, header or size the engine refuses: {error, {bad_reply, {Field,
%% Value, Why}}} or {error, {too_large, {Field, Size, Max}}}, the same on every engine (docs/erlang.md).
-spec reply(req() | cbench_handler:handle(), 200..599, [{iodata(), iodata()}], iodata()) ->
          ok | {error, cbench_handler:reply_error()}.
reply(Req, Status, Headers, Body) -> cbench_handler:reply(Req, Status, Headers, Body).

%% @doc Begins a streamed answer; send/2 adds pieces, finish/1 ends it.
-spec reply_stream(req() | cbench_handler:handle(), 200..599, [{iodata(), iodata()}]) ->
          ok | {error, cbench_handler:reply_error()}.
reply_stream(Req, Status, Headers) -> cbench_handler:reply_stream(Req, Status, Headers).

%% @doc One piece of a streamed answer; {error, not_streaming} before reply_stream/3 (the request
%% still waits for its answer).
-spec send(req() | cbench_handler:handle(), iodata()) -> ok | {error, cbench_handler:reply_error()}.
send(Req, Data) -> cbench_handler:send(Req, Data).

%% @doc Ends a streamed answer; {error, not_streaming} before reply_stream/3.
-spec finish(req() | cbench_handler:handle()) -> ok | {error, cbench_handler:reply_error()}.
finish(Req) -> cbench_handler:finish(Req).

%% @doc Many whole answers in one call (one post per engine worker): [{Req, Status, Headers,
%% Body}] -> one result each, in order.
-spec replies([{req() | cbench_handler:handle(), 200..599, [{iodata(), iodata()}], iodata()}]) ->
          [ok | {error, cbench_handler:reply_error()}].
replies(Answers) -> cbench_handler:replies(Answers).

%% @doc Removes a stub (or an expectation); {error, not_found} for an unknown id.
-spec unstub(server(), pos_integer()) -> ok | {error, not_found | not_running}.
unstub(Server, Id) when is_pid(Server), is_integer(Id) ->
    cbench_server:call(Server, {unstub, Id});
unstub(_, _) ->
    error(badarg).

%% @doc The stubs, oldest first, in canonical form, with the requests each answered and the uses
%% it has left; the routes of handle/4 among them carry `handler' instead of `response'.
-spec stubs(server()) -> [stub_info()] | {error, not_running}.
stubs(Server) when is_pid(Server) ->
    cbench_server:call(Server, stubs);
stubs(_) ->
    error(badarg).

%% @doc Back to the fixture table: every stub and expectation removed, the journal cleared.
-spec reset(server()) -> ok | {error, not_running}.
reset(Server) when is_pid(Server) ->
    cbench_server:call(Server, reset);
reset(_) ->
    error(badarg).

%% @doc The state of scenario Name (an atom, binary or string; docs/erlang.md): a binary,
%% `<<"started">>' until a stub's answer or scenario/3 moves it. Bad names: `{error,
%% {bad_scenario, {Field, Value, Why}}}'.
-spec scenario(server(), atom() | iodata()) -> binary() | {error, term()}.
scenario(Server, Name) when is_pid(Server) ->
    case cbench_spec:scenario_label(scenario, Name) of
        {ok, N} ->
            case cbench_server:call(Server, {scenario, N}) of
                {ok, State} -> State;
                Error -> Error
            end;
        Error -> Error
    end;
scenario(_, _) ->
    error(badarg).

%% @doc Sets the state of scenario Name. reset/1 puts every scenario back to `started'.
-spec scenario(server(), atom() | iodata(), atom() | iodata()) -> ok | {error, term()}.
scenario(Server, Name, State) when is_pid(Server) ->
    case {cbench_spec:scenario_label(scenario, Name), cbench_spec:scenario_label(state, State)} of
        {{ok, N}, {ok, St}} -> cbench_server:call(Server, {scenario, N, St});
        {{ok, _}, Error} -> Error;
        {Error, _} -> Error
    end;
scenario(_, _, _) ->
    error(badarg).

%% @doc Every request in the journal, oldest first.
-spec requests(server()) -> [entry()] | {error, term()}.
requests(Server) ->
    requests(Server, #{}).

%% @doc The journal's requests that match Filter: `method', `path' (a path pattern), `stub' (an
%% id), `since' (a sequence number: the entries after it). {error, journal_disabled} when the
%% server runs with `journal => 0'.
-spec requests(server(), filter()) -> [entry()] | {error, term()}.
requests(Server, Filter) when is_pid(Server), is_map(Filter) ->
    case cbench_spec:filter(Filter) of
        {ok, F} -> cbench_server:call(Server, {requests, F});
        Error -> Error
    end;
requests(_, _) ->
    error(badarg).

%% @doc Empties the journal (sequence numbers go on).
-spec clear_requests(server()) -> ok | {error, not_running}.
clear_requests(Server) when is_pid(Server) ->
    cbench_server:call(Server, clear_requests);
clear_requests(_) ->
    error(badarg).

%% @doc A stub that must answer exactly N requests (`#{times => N}') or at least N
%% (`#{at_least => N}'); verify/1 checks. Count not one of those maps: {error, {bad_stub,
%% {expect, Count, wrong_type}}}.
-spec expect(server(), match(), response(),
             #{times => non_neg_integer()} | #{at_least => non_neg_integer()}) ->
          {ok, pos_integer()} | {error, term()}.
expect(Server, Match, Response, Count) when is_pid(Server), is_map(Count) ->
    case cbench_spec:stub(Match, Response) of
        {ok, M, R} ->
            case cbench_expect:count(Count) of
                {ok, C} -> cbench_server:call(Server, {expect, M, R, C});
                error -> {error, {bad_stub, {expect, Count, wrong_type}}}
            end;
        Error -> Error
    end;
expect(_, _, _, _) ->
    error(badarg).

%%% Recordings (docs/record.md): what proxy stubs with `record => true' captured.

%% @doc The recordings, oldest first, each `#{name, match, response}' with terms that stub/3 takes
%% as they are (the match holds the name too). nif and port; the ehttpd engine answers
%% `{error, not_supported}' (it has no proxy yet).
-spec recorded(server()) -> [cbench_stub_json:stub()] | {error, term()}.
recorded(Server) when is_pid(Server) ->
    case cbench_server:call(Server, recorded) of
        {ok, Json} ->
            case cbench_stub_json:from_json(element(2, cbench_json:decode(Json)), ".") of
                {ok, Stubs} -> Stubs;
                Error -> Error
            end;
        Error -> Error
    end;
recorded(_) ->
    error(badarg).

%% @doc Writes the recordings to File as a stub file (bodies above a proxy's
%% `record_body_file_bytes' into File.bodies/N.bin), each file written whole and renamed into
%% place. `{error, {save_failed, Message}}' names the file and why.
-spec save_stubs(server(), file:name_all()) -> ok | {error, term()}.
save_stubs(Server, File) when is_pid(Server) ->
    cbench_server:call(Server, {save_stubs, file_arg(File)});
save_stubs(_, _) ->
    error(badarg).

%% @doc Adds the stubs of a stub file (what save_stubs/2 and cbench-server --record-to write, or
%% --stubs reads), all or none: their ids in file order, or `{error, {bad_stub_file, Message}}'
%% with the file, line, field and why.
-spec load_stubs(server(), file:name_all()) -> {ok, [pos_integer()]} | {error, term()}.
load_stubs(Server, File) when is_pid(Server) ->
    cbench_server:call(Server, {load_stubs, file_arg(File)});
load_stubs(_, _) ->
    error(badarg).

%% @doc Drops the recordings and zeroes their counters (`recorded', `recorded_duplicates',
%% `record_skipped'); names start from rec_1 again.
-spec clear_recorded(server()) -> ok | {error, term()}.
clear_recorded(Server) when is_pid(Server) ->
    cbench_server:call(Server, clear_recorded);
clear_recorded(_) ->
    error(badarg).

%% A file name as the engines take it: an absolute path (the port program's working directory is
%% not the caller's concern), a binary of 1 to 4095 bytes without NUL; badarg otherwise.
file_arg(File) when is_binary(File); is_list(File); is_atom(File) ->
    Bin = try unicode:characters_to_binary(filename:absname(File))
          catch error:_ -> error(badarg)
          end,
    case is_binary(Bin) andalso Bin =/= <<>> andalso byte_size(Bin) < 4096 andalso
        binary:match(Bin, <<0>>) =:= nomatch andalso File =/= "" andalso File =/= <<>> of
        true -> Bin;
        false -> error(badarg)
    end;
file_arg(_) ->
    error(badarg).

%% @doc The recent requests no route matched (the journal's 404s, oldest first), each with the three
%% stubs closest to it now and the parts that differ (docs/routes.md, "Near misses").
-spec near_misses(server()) -> [cbench_expect:near_miss()] | {error, term()}.
near_misses(Server) when is_pid(Server) ->
    cbench_server:call(Server, near_misses);
near_misses(_) ->
    error(badarg).

%% @doc `ok' when every expectation got its count and the journal holds no request that nothing
%% was set up for (a 404, or a 405 by the method rule); else `{error, Problems}':
%% `{expected, What, N, got, M}', `{no_request_arrived, What, expected, N}' (then
%% `{nearest_request, What, Request}' when a stray request came close), `{unexpected_request,
%% Method, Path}'.
-spec verify(server()) -> ok | {error, [problem()] | not_running}.
verify(Server) when is_pid(Server) ->
    cbench_server:call(Server, verify);
verify(_) ->
    error(badarg).

%% @doc Waits until the journal holds Count requests that match Filter (those already there
%% count), at most TimeoutMs: `{ok, Entries}' (the first Count), or `{error, {timeout, SoFar}}'.
%% The engine wakes the waiter when it records a request; nothing polls. A Count above the
%% server's `journal' option: `{error, {bad_await, {count, Count, out_of_range}}}'.
-spec await(server(), filter(), pos_integer(), non_neg_integer()) ->
          {ok, [entry()]} | {error, term()}.
await(Server, Filter, Count, TimeoutMs)
  when is_pid(Server), is_map(Filter), is_integer(Count), Count >= 1, is_integer(TimeoutMs),
       TimeoutMs >= 0, TimeoutMs < 1 bsl 32 ->
    case cbench_spec:filter(Filter) of
        {ok, F} -> cbench_server:call(Server, {await, F, Count, TimeoutMs}, TimeoutMs + 60000);
        Error -> Error
    end;
await(_, _, _, _) ->
    error(badarg).

%% @doc Closes the listener and every connection; returns once they are closed. Connections are
%% refused until up/1. The stubs, journal and counters stay.
-spec down(server()) -> ok | {error, not_running}.
down(Server) when is_pid(Server) ->
    cbench_server:call(Server, down);
down(_) ->
    error(badarg).

%% @doc Listens again on the same port; returns once the server accepts connections.
%% {error, eaddrinuse} when another socket took the port meanwhile.
-spec up(server()) -> ok | {error, term()}.
up(Server) when is_pid(Server) ->
    cbench_server:call(Server, up);
up(_) ->
    error(badarg).

%% @doc The running servers.
-spec servers() -> [#{server := server(), engine := engine(), port := inet:port_number(),
                      url := string()}].
servers() ->
    case whereis(cbench_server_sup) of
        undefined -> [];
        _ ->
            lists:append(
              [case cbench_server:call(Pid, info) of
                   #{engine := E, port := P} = Info ->
                       [maps:merge(Info, #{server => Pid, engine => E, port => P,
                                           url => url(Pid, "/")})];
                   _ -> []
               end || Pid <- cbench_server_sup:servers()])
    end.

%% @doc What the node applies: schedulers, bindings, busy-wait, threads and CPUs per engine.
-spec settings() -> map().
settings() ->
    cbench_settings:settings().

%% @doc Runs cbench-load against Url for a bounded time and returns its results (the keys of its
%% JSON: achieved_rps, requests, errors, latency_us, timeline, ...; see docs/bench.md). Opts:
%% proto (h1 | h2c | h2 | ws), connections, depth, new_conn, threads, cpus, duration, warmup (seconds),
%% rate (requests per second in all: open loop; absent: closed loop), method, paths, headers
%% ([{Name, Value}]), body (a binary) or body_file, timeout (seconds), ws_size; for https:// and
%% wss:// URLs cacert (a file) or ca_pem (a binary), insecure, resume (booleans), tls_version
%% ('tlsv1.2' | 'tlsv1.3'), ciphers, tls13_ciphers, connect_to (docs/load.md, "Over TLS"). Url or Opts of the
%% wrong type: badarg; an unknown key or a bad value: {error, {bad_option, Key, Value, Allowed}}
%% (as start_server/2's; Allowed `{known, Keys}' for an unknown key); the program
%% missing: {error, {not_built, Path}}; it refusing the arguments: {error, {usage, Text}}.
%% With `nodes => [Node | {Node, Weight}]' the load runs from those nodes at once (cbench on their
%% code path), connections and rate split by weight, and the histograms merged exactly; the map
%% adds `nodes' (each node's own results) and `failed' (node => why) (cbench_cluster; docs/bench.md,
%% "More than one machine").
-spec load(string() | binary(), map()) -> {ok, map()} | {error, term()}.
load(Url, #{nodes := _} = Opts) ->
    cbench_cluster:run(Url, Opts);
load(Url, Opts) ->
    cbench_load:run(Url, Opts).

%% @doc For `erl -s cbench': starts the application and the three engines on the ports of the
%% application env `ports' (8080 ehttpd, 8081 nif, 8082 port), then prints the banner.
-spec start() -> ok.
start() ->
    {ok, _} = application:ensure_all_started(cbench),
    Ports = ports(),
    Ip = application:get_env(cbench, ip, {127, 0, 0, 1}),
    Started = [start_named(E, Ip, maps:get(E, Ports)) || E <- [ehttpd, nif, port]],
    S = settings(),
    Bound = case maps:get(bound, S) of
                true -> io_lib:format("bound: ~w", [maps:get(bindings, S)]);
                false -> "unbound"
            end,
    io:format("cbench ready with ~b schedulers (~s):~s~n",
              [maps:get(schedulers_online, S), Bound,
               [io_lib:format(" ~s ~s", [E, U]) || {E, U} <- Started]]),
    case maps:get(busy_wait, S) of
        none -> ok;
        W -> io:format("warning: scheduler busy-wait is ~s; start the node with +sbwt none "
                       "(and +sbwtdcpu none +sbwtdio none) so that spinning schedulers do not steal "
                       "CPU from the engine threads~n", [W])
    end,
    io:format("stop with cbench:stop() or q().~n"),
    ok.

start_named(Engine, Ip, Port) ->
    case start_server(Engine, #{port => Port, ip => Ip}) of
        {ok, Pid} -> {Engine, url(Pid, "")};
        {error, Reason} ->
            io:format("cbench: ~s engine not started on port ~b: ~p~n", [Engine, Port, Reason]),
            {Engine, io_lib:format("(not started: ~0p)", [Reason])}
    end.

ports() ->
    Default = #{ehttpd => 8080, nif => 8081, port => 8082},
    case application:get_env(cbench, ports, #{}) of
        M when is_map(M) -> maps:merge(Default, M);
        L when is_list(L) -> maps:merge(Default, maps:from_list(L))
    end.

%% @doc Stops every server and the application.
-spec stop() -> ok.
stop() ->
    _ = application:stop(cbench),
    ok.
