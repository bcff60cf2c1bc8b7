%%% @doc The `port' engine: the C engine in its own OS process (priv/cbench_port), spoken to over
%%% `{packet, 4}' with external-term frames that the program decodes with ei. The process that
%%% calls start/1 owns the port; when it dies the port closes, the program reads EOF and exits 0.
-module(cbench_port).

-export([start/1, stop/1, port/1, stats/1, info/1, handle_info/2, exe_path/0]).
%% Lower level, for tests of the program itself.
-export([open/0, request/3]).
%% Engine callbacks, called as Mod:F(...) by cbench_server.
-ignore_xref([{start, 1}, {stop, 1}, {port, 1}, {stats, 1}, {info, 1}, {handle_info, 2},
              %% For the test suites of the program itself.
              {exe_path, 0}, {open, 0}, {request, 3}]).

-export_type([handle/0]).

-record(h, {port :: port(), tcp_port :: inet:port_number(), threads :: pos_integer(),
            cpus :: [integer()], stop_timeout :: non_neg_integer()}).
-opaque handle() :: #h{}.

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
                {ok, TcpPort, Threads, Cpus} ->
                    {ok, #h{port = Port, tcp_port = TcpPort, threads = Threads, cpus = Cpus,
                            stop_timeout = StopMs}};
                {error, _} = Error ->
                    close(Port),
                    Error
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
%% {error, {port_exited, Status}}.
-spec request(port(), term(), timeout()) -> term().
request(Port, Term, Timeout) ->
    try port_command(Port, term_to_binary(Term)) of
        true ->
            receive
                {Port, {data, Bin}} -> binary_to_term(Bin);
                {Port, {exit_status, Status}} -> {error, {port_exited, Status}}
            after Timeout ->
                {error, timeout}
            end
    catch error:badarg ->
            receive {Port, {exit_status, Status}} -> {error, {port_exited, Status}}
            after 0 -> {error, port_closed}
            end
    end.

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

%% @doc Threads and the CPU each is pinned to (-1: not pinned).
-spec info(handle()) -> #{threads := pos_integer(), cpus := [integer()], os_pid := integer()}.
info(#h{port = Port, threads = T, cpus = C}) ->
    OsPid = case erlang:port_info(Port, os_pid) of
                {os_pid, P} -> P;
                undefined -> undefined
            end,
    #{threads => T, cpus => C, os_pid => OsPid}.

%% @doc The engine's counters, or {error, Reason}.
-spec stats(handle()) -> map() | {error, term()}.
stats(#h{port = Port}) ->
    case request(Port, stats, 10000) of
        {ok, Map} -> Map;
        Error -> Error
    end.

%% @doc Messages for the owning cbench_server: the program exiting by itself ends the server.
-spec handle_info(term(), handle()) -> {ok, handle()} | {stop, term()} | false.
handle_info({Port, {exit_status, Status}}, #h{port = Port}) ->
    {stop, {port_exited, Status}};
handle_info({'EXIT', Port, Reason}, #h{port = Port}) when Reason =/= normal ->
    {stop, {port_exited, Reason}};
handle_info(_, H) ->
    {ok, H}.
