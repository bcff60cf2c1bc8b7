%% @doc The client benchmark: `make bench-clients' (quick) and `make bench-clients FULL=1' (the
%% grid of httpc_bench). See docs/bench.md.
%%
%% Every HTTP client adapter (a cbench_client module) runs GET requests against the fixture's
%% `/delay/10' over a grid of pool count x pool size x concurrency; each cell reports req/s, errors
%% by kind and the client's own latency percentiles, with the fixture's CPU and memory sampled in
%% its own node. After the grid, the fixture itself is measured at the top concurrency (the
%% `hold' phase): the nif engine against the ehttpd engine's Erlang-process `/delay', with the
%% reference client, to show whether the fixture could have been the limit. This node is the
%% client node; the fixture runs in another (cbench_clients_fixture).
-module(cbench_clients).

-export([main/0, main/1, parse_args/1, profile/1, usage/0, plan/1, cell_row/2, hold_row/2,
         server_errors/2]).

-define(BUILTIN, [{"httpc", cbench_client_httpc}, {"tcp", cbench_client_tcp}]).
-define(ENGINES, [nif, port, ehttpd]).
%% The counters of cbench:stats/1 that count something going wrong on the server's side.
-define(SERVER_ERRORS, [status_400, status_404, status_405, status_413, status_431, timeouts,
                        resets, h2_errors, accept_backoffs]).
%% A server is taken as the limit when it kept its CPUs this busy (percent of one CPU, per CPU).
-define(SATURATED_PCT, 90).
-define(SETTLE_MS, 5000).

%% ---------------------------------------------------------------------------
%% Profiles

%% @doc The settings of a profile; options given on the command line override them.
-spec profile(atom()) -> map() | undefined.
profile(quick) ->
    %% About 5 minutes on 2 CPUs: both clients, two pool counts, three pool sizes, four
    %% concurrencies up to the top one; the hold phase with /delay/10 and with /delay/5000, long
    %% enough that every connection's request is held at once.
    #{profile => quick, clients => ["httpc", "tcp"], concurrency => [256, 1024, 4096, 16384],
      pool_sizes => [16, 64, 256], pool_counts => [1, 4], iterations => 32768, min_rounds => 4,
      max_seconds => 15, hold => true, hold_delays => [10, 5000], hold_rounds => 4};
profile(full) ->
    %% httpc_bench's grid: concurrency 256..16384, pool sizes 1..512, pool counts 1..32.
    #{profile => full, clients => ["httpc", "tcp"],
      concurrency => [256, 512, 1024, 2048, 4096, 8192, 16384],
      pool_sizes => [1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
      pool_counts => [1, 2, 4, 8, 16, 32], iterations => 100000, min_rounds => 4, max_seconds => 60,
      hold => true, hold_delays => [10, 5000], hold_rounds => 10};
profile(smoke) ->
    %% A few seconds, for make test.
    #{profile => smoke, clients => ["httpc", "tcp"], concurrency => [8, 32], pool_sizes => [4],
      pool_counts => [1, 2], iterations => 400, max_seconds => 10, hold => true,
      hold_delays => [10], hold_rounds => 2};
profile(_) -> undefined.

defaults() ->
    Cpus = cbench_bench_cpus:online_cpus(),
    {S, L} = lists:split(max(1, length(Cpus) div 2), Cpus),
    Client = case L of [] -> S; _ -> L end,
    #{timeout => 1000, delay => 10, min_rounds => 0, engine => nif, url => undefined, server_node => undefined,
      cookie => undefined, server_ip => "127.0.0.1", server_cpus => S, client_cpus => Client,
      hold_engines => [nif, ehttpd], hold_timeout => 30000, pa => [], out => undefined,
      dry_run => false}.

%% @doc The help text.
-spec usage() -> string().
usage() ->
    "usage: make bench-clients [FULL=1] [BENCH_ARGS='...']   (or CBENCH_BENCH_MAIN=cbench_clients bench/run.sh ...)\n"
    "  --profile quick|full|smoke    what to run (default quick)\n"
    "  --clients a,b,...        client adapters: httpc, tcp, or any module implementing cbench_client\n"
    "  --pa DIR                 add DIR (wildcards allowed) to the code path, for your adapters (repeatable)\n"
    "  --concurrency N,...  --pool-sizes N,...  --pool-counts N,...   the grid\n"
    "  --iterations N           requests per cell, shared by its workers\n"
    "  --min-rounds N           but at least N per worker (so that every worker of a large cell makes some)\n"
    "  --timeout MS             a request's time limit (default 1000)\n"
    "  --delay MS               the fixture's /delay/MS (default 10)\n"
    "  --max-seconds S          a cell's time bound: no request starts after it\n"
    "  --engine nif|port|ehttpd the fixture's engine (default nif)\n"
    "  --url URL                request URL instead of starting a fixture (nothing measured server-side)\n"
    "  --server-node NAME@HOST  run the fixture on this running node (cbench in its code path)\n"
    "  --cookie C               the cookie for --server-node and --nodes\n"
    "  --nodes N@H,...          run each cell's workers on these nodes, split evenly (NODES=...; started\n"
    "                           here, or over ssh, when not running)\n"
    "  --server-ip IP           the address the fixture listens on and the clients use (default 127.0.0.1)\n"
    "  --server-cpus L  --client-cpus L   placement on this machine (default: first half / rest)\n"
    "  --hold-engines a,b  --hold-delays MS,...  --hold-rounds N  --no-hold   the fixture at the top concurrency\n"
    "  --out DIR                results directory (default bench/results/<timestamp>-clients-<profile>)\n"
    "  --dry-run                print the plan and exit\n".

%% @doc Parses the command line into the run's configuration.
-spec parse_args([string()]) -> {ok, map()} | {error, string()} | help.
parse_args(Args) ->
    case lists:member("--help", Args) orelse lists:member("-h", Args) of
        true -> help;
        false ->
            try check(opts(Args, maps:merge(defaults(), chosen_profile(Args))))
            catch throw:{usage, Msg} -> {error, Msg}
            end
    end.

%% The settings of the profile named by --profile (quick when none is).
chosen_profile(["--profile", Name | _]) ->
    case profile(list_to_atom(Name)) of
        undefined -> throw({usage, "unknown profile '" ++ Name ++ "' (quick, full, smoke)"});
        P -> P
    end;
chosen_profile([_ | Rest]) -> chosen_profile(Rest);
chosen_profile([]) -> profile(quick).

opts([], Cfg) -> Cfg;
opts(["--profile", _ | R], Cfg) -> opts(R, Cfg);
opts(["--clients", L | R], Cfg) -> opts(R, Cfg#{clients => lexemes(L, "--clients")});
opts(["--pa", D | R], Cfg = #{pa := Pa}) -> opts(R, Cfg#{pa => Pa ++ [D]});
opts(["--concurrency", L | R], Cfg) -> opts(R, Cfg#{concurrency => ints(L, "--concurrency")});
opts(["--pool-sizes", L | R], Cfg) -> opts(R, Cfg#{pool_sizes => ints(L, "--pool-sizes")});
opts(["--pool-counts", L | R], Cfg) -> opts(R, Cfg#{pool_counts => ints(L, "--pool-counts")});
opts(["--min-rounds", N | R], Cfg) -> opts(R, Cfg#{min_rounds => cbench_bench_harness:pos(N, "--min-rounds")});
opts(["--iterations", N | R], Cfg) -> opts(R, Cfg#{iterations => cbench_bench_harness:pos(N, "--iterations")});
opts(["--timeout", N | R], Cfg) -> opts(R, Cfg#{timeout => cbench_bench_harness:pos(N, "--timeout")});
opts(["--delay", N | R], Cfg) -> opts(R, Cfg#{delay => delay(N, "--delay")});
opts(["--max-seconds", N | R], Cfg) -> opts(R, Cfg#{max_seconds => cbench_bench_harness:pos(N, "--max-seconds")});
opts(["--engine", E | R], Cfg) -> opts(R, Cfg#{engine => engine(E)});
opts(["--url", U | R], Cfg) ->
    case uri_string:parse(U) of
        #{scheme := "http", host := H} when H =/= "" -> opts(R, Cfg#{url => U});
        _ -> throw({usage, "bad --url '" ++ U ++ "' (expected http://HOST:PORT/PATH)"})
    end;
opts(["--server-node", N | R], Cfg) ->
    case string:split(N, "@") of
        [A, B] when A =/= "", B =/= "" -> opts(R, Cfg#{server_node => list_to_atom(N)});
        _ -> throw({usage, "bad --server-node '" ++ N ++ "' (expected NAME@HOST)"})
    end;
opts(["--cookie", C | R], Cfg) -> opts(R, Cfg#{cookie => list_to_atom(C)});
opts(["--nodes", L | R], Cfg) -> opts(R, Cfg#{nodes => cbench_bench_nodes:parse(L)});
opts(["--server-ip", Ip | R], Cfg) ->
    case inet:parse_ipv4strict_address(Ip) of
        {ok, _} -> opts(R, Cfg#{server_ip => Ip});
        _ -> throw({usage, "bad --server-ip '" ++ Ip ++ "' (an IPv4 address)"})
    end;
opts(["--server-cpus", L | R], Cfg) -> opts(R, Cfg#{server_cpus => cbench_bench_cpus:cpus(L, "--server-cpus")});
opts(["--client-cpus", L | R], Cfg) -> opts(R, Cfg#{client_cpus => cbench_bench_cpus:cpus(L, "--client-cpus")});
opts(["--hold-engines", L | R], Cfg) ->
    opts(R, Cfg#{hold_engines => [engine(E) || E <- lexemes(L, "--hold-engines")]});
opts(["--hold-delays", L | R], Cfg) ->
    opts(R, Cfg#{hold_delays => [delay(D, "--hold-delays") || D <- lexemes(L, "--hold-delays")]});
opts(["--hold-rounds", N | R], Cfg) -> opts(R, Cfg#{hold_rounds => cbench_bench_harness:pos(N, "--hold-rounds")});
opts(["--no-hold" | R], Cfg) -> opts(R, Cfg#{hold => false});
opts(["--out", D | R], Cfg) -> opts(R, Cfg#{out => D});
opts(["--dry-run" | R], Cfg) -> opts(R, Cfg#{dry_run => true});
opts([Opt | _], _) -> throw({usage, "unknown or incomplete option '" ++ Opt ++ "'"}).

lexemes(L, Opt) ->
    case string:lexemes(L, ",") of
        [] -> throw({usage, Opt ++ " is empty"});
        Ls -> Ls
    end.

ints(L, Opt) -> lists:usort([cbench_bench_harness:pos(N, Opt) || N <- lexemes(L, Opt)]).

delay(N, Opt) ->
    case string:to_integer(N) of
        {I, []} when I >= 0, I =< 60000 -> I;
        _ -> throw({usage, Opt ++ " needs milliseconds from 0 to 60000, got '" ++ N ++ "'"})
    end.

engine(E) ->
    case [X || X <- ?ENGINES, atom_to_list(X) =:= E] of
        [X] -> X;
        [] -> throw({usage, "unknown engine '" ++ E ++ "' (nif, port, ehttpd)"})
    end.

%% Adapters are resolved once the --pa directories are on the path: a built-in name, or a module
%% that implements the behaviour's three callbacks.
check(Cfg = #{clients := Names, pa := Pa}) ->
    %% cbench's own application (the behaviour and the shipped adapters), as rebar3 builds it.
    _ = code:add_patha(filename:join([cbench_bench_harness:root(), "_build", "default", "lib", "cbench", "ebin"])),
    [code:add_pathsa(filelib:wildcard(P)) || P <- Pa],
    Clients = [client(N) || N <- Names],
    {ok, Cfg#{clients => Clients}}.

client(Name) ->
    Mod = case lists:keyfind(Name, 1, ?BUILTIN) of
              {_, M} -> M;
              false -> list_to_atom(Name)
          end,
    _ = code:ensure_loaded(Mod),
    case [F || F <- [{start, 1}, {get, 2}, {stop, 1}], not erlang:function_exported(Mod, element(1, F), element(2, F))] of
        [] -> #{name => Name, module => Mod, pooled => cbench_client:pooled(Mod)};
        _ -> throw({usage, "client '" ++ Name ++ "': no module " ++ atom_to_list(Mod)
                    ++ " with start/1, get/2 and stop/1 in the code path (see --pa)"})
    end.

%% @doc The cells of the grid, in the order they run: per client, pool count, pool size, then
%% concurrency; a client without pools once per concurrency (its pool shape shown as 1 x 1).
-spec plan(map()) -> [map()].
plan(#{clients := Clients, concurrency := Cs, pool_sizes := Sizes, pool_counts := Counts}) ->
    lists:append(
      [case P of
           true -> [#{client => N, module => M, pool_count => PC, pool_size => PS, concurrency => C}
                    || PC <- Counts, PS <- Sizes, C <- Cs];
           false -> [#{client => N, module => M, pool_count => 1, pool_size => 1, concurrency => C,
                       pooled => false} || C <- Cs]
       end || #{name := N, module := M, pooled := P} <- Clients]).

%% ---------------------------------------------------------------------------
%% Entry point

%% @doc Called by bench/run.sh (CBENCH_BENCH_MAIN=cbench_clients).
-spec main() -> no_return().
main() ->
    main(init:get_plain_arguments()).

%% @doc Runs the benchmark and halts with 0, 1 (a failure) or 2 (bad input).
-spec main([string()]) -> no_return().
main(Args) ->
    cbench_bench_harness:cli("bench-clients", Args, fun parse_args/1, fun usage/0,
                     fun(Cfg) -> run(Cfg#{command => string:join(["bench-clients" | Args], " ")}) end).

run(Cfg0) ->
    Root = cbench_bench_harness:root(),
    Ts = cbench_bench_harness:timestamp(),
    Out = case maps:get(out, Cfg0) of
              undefined -> filename:join([Root, "bench", "results",
                                          Ts ++ "-clients-" ++ atom_to_list(maps:get(profile, Cfg0))]);
              O -> O
          end,
    Plan = plan(Cfg0),
    Cfg = Cfg0#{root => Root, out => Out, timestamp => Ts},
    #{client_cpus := CC, server_cpus := SC} = Cfg,
    io:format("cbench bench-clients: profile ~s, ~b cells (each at most ~b s), clients on CPU ~s, ~s~n",
              [maps:get(profile, Cfg), length(Plan), maps:get(max_seconds, Cfg), cpu_list(CC),
               case {maps:get(url, Cfg), maps:get(server_node, Cfg)} of
                   {undefined, undefined} -> "fixture in a peer node on CPU " ++ cpu_list(SC);
                   {undefined, N} -> "fixture on " ++ atom_to_list(N);
                   {U, _} -> "requests to " ++ U
               end ++ case maps:get(nodes, Cfg, undefined) of
                          undefined -> "";
                          Ns -> ", workers on " ++ string:join([atom_to_list(N) || N <- Ns], ", ")
                      end]),
    case maps:get(dry_run, Cfg) of
        true ->
            [io:format("  ~s ~s c=~b~n", [N, shape(Cell), C]) || Cell = #{client := N, concurrency := C} <- Plan],
            0;
        false ->
            pin_clients(CC),
            ok = filelib:ensure_path(Out),
            Log = filename:join(Out, "client-node.log"),
            ok = cbench_clients_log:start(Log),
            {ok, _} = application:ensure_all_started(inets),
            St0 = #{notes => [], cells => [], hold => [], client_info => cbench_clients_server:info(),
                    time_wait => time_wait()},
            %% The client nodes first: this node turns distributed for them, and the fixture's
            %% pids must be read after that, or they would be taken for this node's own.
            ClientNodes = client_nodes(Cfg),
            St1 = try open_fixture(Cfg, St0)
                  catch throw:Fatal -> cbench_bench_nodes:stop(ClientNodes), throw(Fatal)
                  end,
            try
                St2 = grid(Cfg, Plan, St1#{client_nodes => ClientNodes}),
                St3 = log_note(Log, hold(Cfg, St2)),
                close_fixture(St3),
                cbench_clients_report:write(Cfg, St3),
                0
            after
                cbench_bench_nodes:stop(ClientNodes),
                close_fixture(St1)
            end
    end.

%% --nodes: the nodes the cells' workers run on, started when they are not running (those on this
%% machine pinned to the client CPUs), with the cell's module and the adapters loaded there and
%% inets started (httpc's profiles live in it).
client_nodes(#{nodes := Nodes} = Cfg) ->
    io:format("client nodes: ~s~n", [string:join([atom_to_list(N) || N <- Nodes], ", ")]),
    Opts = #{root => maps:get(root, Cfg), cookie => maps:get(cookie, Cfg),
             pin => cpu_list(maps:get(client_cpus, Cfg))},
    case cbench_bench_nodes:start(Nodes, Opts) of
        {ok, Placement} ->
            Mods = [cbench_clients_cell | [M || #{module := M} <- maps:get(clients, Cfg)]],
            try
                [begin
                     [ship(N, M) || M <- Mods],
                     {ok, _} = erpc:call(N, application, ensure_all_started, [inets], 60000)
                 end || N <- Nodes],
                Placement
            catch C:R ->
                    cbench_bench_nodes:stop(Placement),
                    throw({fatal, lists:flatten(io_lib:format("the client nodes could not be set up: ~0p:~0p", [C, R]))})
            end;
        {error, Why} -> throw({fatal, Why})
    end;
client_nodes(_) -> undefined.

%% A module as this node has it (a node already running may lack the harness's modules, or hold older ones).
ship(Node, M) ->
    case code:get_object_code(M) of
        {M, Bin, File} -> {module, M} = erpc:call(Node, code, load_binary, [M, File, Bin], 60000);
        error -> ok
    end.

%% The client node: pinned to the client CPUs (as the server harness pins itself), one scheduler
%% online per CPU.
pin_clients(Cpus) ->
    cbench_bench_cpus:pin_self(cpu_list(Cpus)),
    _ = erlang:system_flag(schedulers_online, min(length(Cpus), erlang:system_info(schedulers))),
    ok.

cpu_list(Cs) -> cbench_bench_cpus:cpu_list(Cs).

%% Sockets in TIME_WAIT on this machine: each holds an ephemeral port for a minute after a client
%% closed its connection, and a run opens tens of thousands.
time_wait() ->
    case cbench_clients_server:proc_number("/proc/net/sockstat", "TCP:.* tw ([0-9]+)") of
        N when is_integer(N) -> N;
        _ -> undefined
    end.

%% The client node's log is kept only when something was logged.
log_note(Log, St) ->
    case {cbench_clients_log:count(), filelib:file_size(Log)} of
        {0, 0} -> _ = file:delete(Log), St;
        {N, _} -> note(St, "the client node logged ~b errors (client-node.log, one line each; httpc's manager "
                       "crashes under overload, for one)", [N])
    end.

note(St, Fmt, Args) -> cbench_bench_harness:note(St, Fmt, Args).

%% ---------------------------------------------------------------------------
%% The fixture

open_fixture(#{url := Url}, St) when Url =/= undefined ->
    limits(St#{place => undefined, fixture => undefined, url => Url}, undefined);
open_fixture(Cfg, St) ->
    io:format("starting the fixture's node...~n"),
    Open = cbench_clients_fixture:open(#{server_node => maps:get(server_node, Cfg),
                                         cookie => maps:get(cookie, Cfg),
                                         server_cpus => cpu_list(maps:get(server_cpus, Cfg)),
                                         schedulers => length(maps:get(server_cpus, Cfg)),
                                         root => maps:get(root, Cfg)}),
    case Open of
        {error, Why} -> throw({fatal, Why});
        {ok, Place = #{info := Info}} ->
            St1 = St#{place => Place, server_info => Info},
            case start_engine(Cfg, Place, maps:get(engine, Cfg)) of
                {ok, Fx} ->
                    Url = maps:get(base, Fx) ++ "/delay/" ++ integer_to_list(maps:get(delay, Cfg)),
                    limits(St1#{fixture => Fx, url => Url}, Info);
                {error, Why} ->
                    cbench_clients_fixture:close(Place),
                    throw({fatal, lists:flatten(io_lib:format("the ~s engine did not start on the fixture's node: ~0p",
                                                              [maps:get(engine, Cfg), Why]))})
            end
    end.

start_engine(Cfg, Place, Engine) ->
    cbench_clients_fixture:start(Place, Engine, maps:get(server_ip, Cfg)).

close_fixture(St) ->
    case St of
        #{place := Place} when Place =/= undefined ->
            _ = case maps:get(fixture, St, undefined) of
                    undefined -> ok;
                    Fx -> cbench_clients_fixture:stop(Place, Fx)
                end,
            cbench_clients_fixture:close(Place);
        _ -> ok
    end.

%% File descriptors and ports: what the top concurrency needs on each side, and what was granted.
limits(St = #{client_info := CI}, SI) ->
    St1 = limit_note(St, "client", CI),
    St2 = case SI of undefined -> St1; _ -> limit_note(St1, "fixture", SI) end,
    St2.

limit_note(St, Side, Info) ->
    St#{limits => maps:get(limits, St, []) ++ [{Side, maps:get(fd_limit, Info, undefined),
                                                maps:get(port_limit, Info, undefined)}]}.

%% Notes on limits that the top concurrency exceeds, once the grid is known.
limit_notes(Cfg, St) ->
    Need = lists:max(maps:get(concurrency, Cfg)) + 256,
    lists:foldl(
      fun({Side, Fd, Ports}, S) ->
              S1 = case is_integer(Fd) andalso Fd < Need of
                       true -> note(S, "the ~s node may open ~b files (ulimit -n) but the top concurrency needs about ~b: "
                                    "raise the limit (ulimit -n, or /etc/security/limits.conf) or expect emfile errors",
                                    [Side, Fd, Need]);
                       false -> S
                   end,
              case is_integer(Ports) andalso Ports < Need of
                  true -> note(S1, "the ~s node's port limit is ~b (+Q): below the ~b the top concurrency needs",
                               [Side, Ports, Need]);
                  false -> S1
              end
      end, St, maps:get(limits, St, [])).

%% ---------------------------------------------------------------------------
%% The grid

grid(Cfg, Plan, St0) ->
    St = limit_notes(Cfg, St0),
    T0 = erlang:monotonic_time(second),
    Total = length(Plan) + hold_count(Cfg, St),
    {Cells, St1} =
        lists:foldl(
          fun(Cell, {Acc, S}) ->
                  I = length(Acc),
                  case maps:get(fixture_died, S, false) of
                      true -> {Acc ++ [Cell#{status => not_run}], S};
                      false ->
                          progress(I, Total, T0, "~s ~s c=~b", [maps:get(client, Cell), shape(Cell),
                                                               maps:get(concurrency, Cell)]),
                          {Row, S1} = run_cell(Cfg, Cell, S),
                          print_cell(Row),
                          {Acc ++ [Row], S1}
                  end
          end, {[], St#{t0 => T0, total => Total}}, Plan),
    St1#{cells => Cells}.

shape(#{pooled := false}) -> "(no pool)";
shape(#{pool_count := PC, pool_size := PS}) -> integer_to_list(PC) ++ "x" ++ integer_to_list(PS).

progress(Done, Total, T0, Fmt, Args) ->
    cbench_bench_harness:progress(#{done => Done, total => Total, t0 => T0}, Fmt, Args).

%% One cell through the real path: the fixture's counters before and after, its node's CPU and
%% memory sampled over the cell's window, this node's CPU too.
run_cell(Cfg, Cell = #{module := Mod, concurrency := C, pool_size := PS, pool_count := PC}, St) ->
    Opts = #{concurrency => C, iterations => max(maps:get(iterations, Cfg), maps:get(min_rounds, Cfg) * C),
             timeout => maps:get(timeout, Cfg),
             pool_size => PS, pool_count => PC, max_seconds => maps:get(max_seconds, Cfg)},
    measured(Cfg, Cell, Mod, maps:get(url, St), Opts, St, fun cell_row/2).

measured(_Cfg, Cell, Mod, Url, Opts, St, RowF) ->
    Place = maps:get(place, St),
    Fx = maps:get(fixture, St),
    Leftover = case Fx of
                   undefined -> undefined;
                   _ -> cbench_clients_fixture:wait_idle(Place, Fx, ?SETTLE_MS)
               end,
    Before = stats(Place, Fx),
    Kernel0 = kernel_counters(),
    Logged0 = cbench_clients_log:count(),
    Self = list_to_integer(os:getpid()),
    %% The samplers start when the workers are told to go and stop when the last one is done; the
    %% cell runs in this process, so the two funs pass their state through its dictionary.
    Key = make_ref(),
    OnGo = fun() ->
                   _ = Fx =/= undefined andalso cbench_clients_fixture:sample_start(Place, Fx),
                   CS = cbench_bench_sampler:start([Self], undefined),
                   receive {CS, started} -> ok end,
                   put(Key, {CS, open_poller(Place, Fx, maps:get(poll_open, Cell, false))})
           end,
    OnDone = fun() ->
                     {CS, Poller} = erase(Key),
                     Client = cbench_bench_sampler:stop(CS),
                     Server = case Fx of
                                  undefined -> #{};
                                  _ -> cbench_clients_fixture:sample_stop(Place)
                              end,
                     #{client => Client, server => Server, open_peak => stop_poller(Poller)}
             end,
    Raw = case maps:get(client_nodes, St, undefined) of
              undefined -> cbench_clients_cell:run(Mod, Url, Opts#{on_go => OnGo, on_done => OnDone});
              Placement -> cbench_clients_cell:run_on(maps:get(nodes, Placement), Mod, Url,
                                                      Opts#{on_go => OnGo, on_done => OnDone})
          end,
    After = stats(Place, Fx),
    Alive = Fx =:= undefined orelse cbench_clients_fixture:alive(Place, Fx),
    Kernel1 = kernel_counters(),
    Server = #{before => Before, 'after' => After, leftover => Leftover,
               cpus => server_cpus(St),
               kernel => maps:map(fun(K, V) -> V - maps:get(K, Kernel0, V) end, Kernel1),
               logged => cbench_clients_log:count() - Logged0},
    Row = RowF(maps:merge(Cell, Raw), Server),
    case Alive of
        true -> {Row, St};
        false ->
            St1 = note(St, "the fixture stopped answering during ~s ~s c=~b: that cell shows the errors it caused, "
                       "the cells after it were not run", [maps:get(client, Cell, "hold"), shape(Cell),
                                                           maps:get(concurrency, Cell)]),
            {Row#{status => fixture_died}, St1#{fixture_died => true}}
    end.

%% This machine's TCP counters that tell connections were slow to open: SYNs sent again (no answer
%% within the retransmission timeout, usually a full accept queue) and accept queue overflows (when
%% the fixture runs here).
kernel_counters() ->
    case file:read_file("/proc/net/netstat") of
        {ok, B} ->
            Lines = [string:lexemes(L, " ") || L <- string:lexemes(binary_to_list(B), "\n")],
            case [{Ks, Vs} || ["TcpExt:" | Ks] <- Lines, ["TcpExt:" | Vs] <- Lines,
                              Vs =/= Ks, length(Vs) =:= length(Ks)] of
                [{Ks, Vs} | _] ->
                    M = maps:from_list(lists:zip(Ks, Vs)),
                    maps:from_list([{Key, list_to_integer(maps:get(Name, M, "0"))}
                                    || {Key, Name} <- [{syn_retrans, "TCPSynRetrans"},
                                                       {listen_overflows, "ListenOverflows"}]]);
                [] -> #{}
            end;
        _ -> #{}
    end.

stats(_Place, undefined) -> undefined;
stats(Place, Fx) -> cbench_clients_fixture:stats(Place, Fx).

server_cpus(#{server_info := #{cpus := N}}) -> N;
server_cpus(_) -> undefined.

%% The largest number of connections the server held open, polled every 200 ms (for the hold
%% phase's cells, which ask for it with poll_open).
open_poller(_Place, undefined, _) -> undefined;
open_poller(_Place, _Fx, false) -> undefined;
open_poller(Place, Fx, true) ->
    Parent = self(),
    spawn_link(fun() -> poll_open(Parent, Place, Fx, 0) end).

poll_open(Parent, Place, Fx, Peak) ->
    receive
        {stop, Ref} -> Parent ! {Ref, Peak}
    after 200 ->
            P = case cbench_clients_fixture:stats(Place, Fx) of
                    #{conns_open := N} -> max(N, Peak);
                    _ -> Peak
                end,
            poll_open(Parent, Place, Fx, P)
    end.

stop_poller(undefined) -> undefined;
stop_poller(P) ->
    Ref = make_ref(),
    P ! {stop, Ref},
    receive {Ref, Peak} -> Peak after 15000 -> undefined end.

%% @doc A cell's row from its raw measurements and the server's figures: the cell's figures
%% (cbench_clients_cell:figures/1), the connections and requests the server saw, its errors, CPU
%% (percent of one CPU, and microseconds per request it answered), peak RSS, and whether it was
%% saturated (over 90% of its CPUs busy).
-spec cell_row(map(), map()) -> map().
cell_row(Raw, Server) ->
    F = cbench_clients_cell:figures(Raw),
    Probe = case maps:get(probe, Raw, undefined) of P when is_map(P) -> P; _ -> #{} end,
    Samp = maps:get(server, Probe, #{}),
    Before = maps:get(before, Server, undefined),
    After = maps:get('after', Server, undefined),
    Delta = fun(K) -> delta(K, Before, After) end,
    Requests = Delta(requests),
    CpuPct = maps:get(cpu_pct, Samp, undefined),
    CpuS = maps:get(cpu_s, Samp, undefined),
    Cpus = maps:get(cpus, Server, undefined),
    Row0 = case maps:without([latencies_us, probe, examples, on_go, on_done], Raw) of
               R0 = #{why := Why} -> R0#{why := iolist_to_binary(io_lib:format("~0p", [Why]))};
               R0 -> R0
           end,
    maps:merge(Row0#{examples => [iolist_to_binary(io_lib:format("~s: ~0p", [K, R]))
                                  || {K, Rs} <- maps:to_list(maps:get(examples, Raw, #{})), R <- Rs]},
               F#{server_conns => Delta(conns_accepted),
                  server_requests => Requests,
                  server_errors => server_errors(Before, After),
                  server_cpu_pct => CpuPct,
                  server_cpu_us => case {CpuS, Requests} of
                                       {S, N} when is_number(S), is_integer(N), N > 0 -> S / N * 1.0e6;
                                       _ -> undefined
                                   end,
                  server_rss_kb => maps:get(rss_peak_kb, Samp, undefined),
                  server_beam => maps:get(beam_peak, Samp, undefined),
                  server_saturated => is_number(CpuPct) andalso is_integer(Cpus)
                      andalso CpuPct >= ?SATURATED_PCT * Cpus,
                  server_leftover => maps:get(leftover, Server, undefined),
                  server_open_peak => maps:get(open_peak, Probe, undefined),
                  syn_retrans => maps:get(syn_retrans, maps:get(kernel, Server, #{}), undefined),
                  listen_overflows => maps:get(listen_overflows, maps:get(kernel, Server, #{}), undefined),
                  client_logged_errors => maps:get(logged, Server, undefined),
                  client_cpu_pct => maps:get(cpu_pct, maps:get(client, Probe, #{}), undefined)}).

delta(K, #{} = B, #{} = A) ->
    case {maps:get(K, B, undefined), maps:get(K, A, undefined)} of
        {X, Y} when is_integer(X), is_integer(Y) -> Y - X;
        _ -> undefined
    end;
delta(_, _, _) -> undefined.

%% @doc The server's error counters that grew between two readings, as a map (empty: none); undefined
%% when the counters could not be read.
-spec server_errors(map() | undefined, map() | undefined) -> map() | undefined.
server_errors(#{} = B, #{} = A) ->
    maps:from_list([{K, D} || K <- ?SERVER_ERRORS, D <- [delta(K, B, A)], is_integer(D), D =/= 0]);
server_errors(_, _) -> undefined.

print_cell(R = #{status := S}) when S =:= start_failed; S =:= not_run ->
    io:format("~s~s~n", [S, case maps:get(why, R, undefined) of undefined -> ""; W -> io_lib:format(" (~0p)", [W]) end]);
print_cell(R) ->
    io:format("~s req/s, ~s% errors~s, p99 ~s~s~s~n",
              [cbench_bench_stats:fmt_int(maps:get(rps, R)), cbench_bench_stats:fmt_float(maps:get(error_pct, R), 1),
               kinds(R), cbench_bench_stats:fmt_us(maps:get(p99_us, R)),
               case maps:get(server_cpu_pct, R) of
                   undefined -> "";
                   P -> io_lib:format(", server CPU ~b%", [round(P)])
               end,
               case maps:get(status, R) of ok -> ""; St -> io_lib:format(" (~s)", [St]) end]).

kinds(#{errors := E}) ->
    case [io_lib:format("~s ~b", [K, N]) || {K, N} <- maps:to_list(E), N > 0] of
        [] -> "";
        L -> [" (", lists:join(", ", L), ")"]
    end.

%% ---------------------------------------------------------------------------
%% The hold phase: the fixture at the top concurrency

hold_count(Cfg, St) ->
    case hold_wanted(Cfg, St) of
        true -> length(maps:get(hold_engines, Cfg)) * length(maps:get(hold_delays, Cfg));
        false -> 0
    end.

hold_wanted(Cfg, St) ->
    maps:get(hold, Cfg) andalso maps:get(fixture, St, undefined) =/= undefined.

%% Each hold engine in turn, started fresh: the reference client at the top concurrency, a generous
%% timeout (so that a slow client is not counted as a server error), `hold_rounds' requests per
%% worker, for each hold delay.
hold(Cfg, St0) ->
    case hold_wanted(Cfg, St0) andalso not maps:get(fixture_died, St0, false) of
        false -> St0;
        true ->
            Place = maps:get(place, St0),
            cbench_clients_fixture:stop(Place, maps:get(fixture, St0)),
            St1 = St0#{fixture => undefined},
            C = lists:max(maps:get(concurrency, Cfg)),
            lists:foldl(
              fun(Engine, S) ->
                      case maps:get(fixture_died, S, false) of
                          true -> S;
                          false -> hold_engine(Cfg, Place, Engine, C, S)
                      end
              end, St1, maps:get(hold_engines, Cfg))
    end.

hold_engine(Cfg, Place, Engine, C, St) ->
    case start_engine(Cfg, Place, Engine) of
        {error, Why} ->
            note(St, "hold: the ~s engine did not start (~0p)", [Engine, Why]);
        {ok, Fx} ->
            St1 = lists:foldl(
                    fun(Delay, S = #{hold := Rows}) ->
                            progress(length(maps:get(cells, S)) + length(Rows), maps:get(total, S), maps:get(t0, S),
                                     "hold ~s /delay/~b c=~b", [Engine, Delay, C]),
                            Url = maps:get(base, Fx) ++ "/delay/" ++ integer_to_list(Delay),
                            Opts = #{concurrency => C, iterations => C * maps:get(hold_rounds, Cfg),
                                     timeout => Delay + maps:get(hold_timeout, Cfg), pool_size => 1,
                                     pool_count => 1, max_seconds => maps:get(max_seconds, Cfg) * 4},
                            Cell = #{client => "tcp", module => cbench_client_tcp, engine => Engine,
                                     delay => Delay, pooled => false, concurrency => C,
                                     poll_open => true},
                            {Row, S1} = measured(Cfg, Cell, cbench_client_tcp, Url, Opts, S#{fixture => Fx},
                                                 fun hold_row/2),
                            print_hold(Row),
                            S1#{hold => Rows ++ [Row]}
                    end, St, maps:get(hold_delays, Cfg)),
            cbench_clients_fixture:stop(Place, Fx),
            St1#{fixture => undefined}
    end.

%% @doc A hold row: a cell's row plus the server's own req/s (requests it answered over the cell's
%% time) and, by Little's law, how many requests it held at once on average (its req/s x the delay).
-spec hold_row(map(), map()) -> map().
hold_row(Raw, Server) ->
    Row = cell_row(Raw, Server),
    SRps = case {maps:get(server_requests, Row), maps:get(elapsed_us, Row, 0)} of
               {N, Us} when is_integer(N), is_integer(Us), Us > 0 -> N / (Us / 1.0e6);
               _ -> undefined
           end,
    Row#{server_rps => SRps,
         held => case SRps of
                     undefined -> undefined;
                     _ -> SRps * maps:get(delay, Raw) / 1000
                 end}.

print_hold(R = #{status := S}) when S =:= start_failed ->
    io:format("~s (~0p)~n", [S, maps:get(why, R, undefined)]);
print_hold(R) ->
    io:format("~s req/s served, ~s held, server errors ~s, ~s us CPU/req, RSS ~s~s~n",
              [cbench_bench_stats:fmt_int(maps:get(server_rps, R, 0)),
               case maps:get(held, R) of undefined -> "?"; H -> cbench_bench_stats:fmt_int(H) end,
               case maps:get(server_errors, R) of
                   undefined -> "?";
                   M -> integer_to_list(lists:sum(maps:values(M)))
               end,
               case maps:get(server_cpu_us, R) of undefined -> "?"; U -> cbench_bench_stats:fmt_float(U, 2) end,
               case maps:get(server_rss_kb, R) of undefined -> "?"; K -> cbench_bench_stats:fmt_bytes(K * 1024) end,
               case maps:get(status, R) of ok -> ""; St -> io_lib:format(" (~s)", [St]) end]).
