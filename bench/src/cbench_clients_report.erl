%% @doc The outputs of a client benchmark run: httpc_bench's table (Client, Pool Count, Pool Size,
%% Concurrency, Req/sec, Error %) sorted by req/s, the details of every cell, the fixture at the top
%% concurrency, report.md, data.json, data.csv, one SVG chart per client (req/s against
%% concurrency, a line per pool shape), and the summary on the terminal.
-module(cbench_clients_report).

-export([write/2, seed_rows/1, rps_cell/1, hold_ratios/1]).

-import(cbench_bench_stats, [fmt_int/1, fmt_us/1, fmt_float/2, fmt_bytes/1]).

%% @doc Writes every output into the run's directory and prints the summary.
-spec write(map(), map()) -> ok.
write(Cfg = #{out := Out}, St) ->
    Setup = setup(Cfg, St),
    Charts = charts(Out, Cfg, St),
    ok = file:write_file(filename:join(Out, "report.md"), report(Cfg, St, Setup, Charts)),
    ok = file:write_file(filename:join(Out, "data.json"),
                         [cbench_bench_json:encode(#{setup => Setup, cells => maps:get(cells, St),
                                                     hold => maps:get(hold, St), notes => maps:get(notes, St)}), $\n]),
    ok = file:write_file(filename:join(Out, "data.csv"), csv(St)),
    terminal(St),
    io:format("~nwrote ~s/{report.md,data.json,data.csv~s}~n", [Out, [[",", F] || F <- Charts]]),
    ok.

%% ---------------------------------------------------------------------------
%% Setup

setup(Cfg, St) ->
    CI = maps:get(client_info, St),
    SI = maps:get(server_info, St, #{}),
    Place = maps:get(place, St, undefined),
    #{machine => cbench_bench_report:machine(),
      otp => erlang:system_info(otp_release), erts => erlang:system_info(version),
      client => fmt("node ~s on CPU ~s, ~b scheduler(s) online, port limit ~w, open files limit ~w",
                    [node(), cpus(maps:get(client_cpus, Cfg)), erlang:system_info(schedulers_online),
                     maps:get(port_limit, CI), maps:get(fd_limit, CI)]),
      fixture => case Place of
                     undefined -> fmt("none started: requests to ~s", [maps:get(url, St)]);
                     #{kind := peer, args := Args} ->
                         fmt("peer node (taskset -c ~s erl ~s), engine ~s, open files limit ~w, ~b CPU(s)",
                             [maps:get(cpus, Place), string:join([A || A <- Args, not lists:prefix("/", A), A =/= "-pa"], " "),
                              maps:get(engine, Cfg), maps:get(fd_limit, SI), maps:get(cpus, SI)]);
                     #{kind := remote, node := N} ->
                         fmt("remote node ~s (OTP ~s, ~b scheduler(s), ~b CPU(s) available), engine ~s, open files limit ~w",
                             [N, maps:get(otp, SI), maps:get(schedulers, SI), maps:get(cpus, SI),
                              maps:get(engine, Cfg), maps:get(fd_limit, SI)])
                 end,
      url => maps:get(url, St),
      kernel => fmt("ephemeral ports ~s, tcp_tw_reuse ~s, somaxconn ~s, ~w sockets in TIME_WAIT at the start",
                    [sysctl("net/ipv4/ip_local_port_range"), sysctl("net/ipv4/tcp_tw_reuse"),
                     sysctl("net/core/somaxconn"), maps:get(time_wait, St, undefined)]),
      grid => fmt("clients ~s; pool counts ~w; pool sizes ~w; concurrency ~w",
                  [string:join([N || #{name := N} <- maps:get(clients, Cfg)], ", "),
                   maps:get(pool_counts, Cfg), maps:get(pool_sizes, Cfg), maps:get(concurrency, Cfg)]),
      cell => fmt("~b requests shared by the workers (at least ~b per worker), timeout ~b ms, /delay/~b, at most ~b s",
                  [maps:get(iterations, Cfg), maps:get(min_rounds, Cfg), maps:get(timeout, Cfg), maps:get(delay, Cfg),
                   maps:get(max_seconds, Cfg)]),
      hold => case maps:get(hold, St) of
                  [] -> "not run";
                  _ -> fmt("engines ~w, delays ~w ms, ~b requests per worker, timeout delay + ~b ms",
                           [maps:get(hold_engines, Cfg), maps:get(hold_delays, Cfg), maps:get(hold_rounds, Cfg),
                            maps:get(hold_timeout, Cfg)])
              end,
      profile => maps:get(profile, Cfg),
      command => maps:get(command, Cfg, ""),
      timestamp => maps:get(timestamp, Cfg)}.

sysctl(Key) ->
    case file:read_file("/proc/sys/" ++ Key) of
        {ok, B} -> lists:flatten(string:replace(string:trim(binary_to_list(B)), "\t", "-", all));
        _ -> "?"
    end.

cpus(Cs) -> string:join([integer_to_list(C) || C <- Cs], ",").

fmt(F, A) -> lists:flatten(io_lib:format(F, A)).

%% ---------------------------------------------------------------------------
%% Cells

measured(#{rps := R}) when is_number(R) -> true;
measured(_) -> false.

%% @doc httpc_bench's table: the measured cells sorted by req/s, highest first.
-spec seed_rows([map()]) -> [[string()]].
seed_rows(Cells) ->
    Sorted = lists:sort(fun(A, B) -> maps:get(rps, A) >= maps:get(rps, B) end,
                        [C || C <- Cells, measured(C)]),
    [[maps:get(client, C), pool(C, pool_count), pool(C, pool_size), integer_to_list(maps:get(concurrency, C)),
      rps_cell(C), fmt_float(maps:get(error_pct, C), 1)] || C <- Sorted].

pool(#{pooled := false}, _) -> "-";
pool(C, K) -> integer_to_list(maps:get(K, C)).

%% @doc The Req/sec cell: the figure, then `!' when the fixture's CPU was saturated, `+' when the
%% cell ran into its time bound, `x' when a request outlived its timeout (the adapter was stuck).
-spec rps_cell(map()) -> string().
rps_cell(C = #{rps := R}) when is_number(R) ->
    fmt_int(R) ++ case maps:get(server_saturated, C, false) of true -> " !"; false -> "" end
        ++ case maps:get(status, C) of capped -> " +"; stuck -> " x"; fixture_died -> " (fixture died)"; _ -> "" end;
rps_cell(C) -> atom_to_list(maps:get(status, C)).

detail_rows(Cells) ->
    [[maps:get(client, C), pool(C, pool_count), pool(C, pool_size), integer_to_list(maps:get(concurrency, C)),
      rps_cell(C)] ++
         case measured(C) of
             true ->
                 E = maps:get(error_pcts, C),
                 [fmt_float(maps:get(K, E, 0.0), 1) || K <- [timeout, closed, refused, other]] ++
                     [fmt_us(maps:get(p50_us, C)), fmt_us(maps:get(p99_us, C)), opt_int(maps:get(server_conns, C)),
                      pct(maps:get(server_cpu_pct, C)), us(maps:get(server_cpu_us, C)),
                      kb(maps:get(server_rss_kb, C)), pct(maps:get(client_cpu_pct, C)),
                      opt_int(maps:get(syn_retrans, C)), opt_int(maps:get(client_logged_errors, C))];
             false -> lists:duplicate(13, "-")
         end || C <- Cells].

hold_rows(Hold) ->
    [[atom_to_list(maps:get(engine, H)), "/delay/" ++ integer_to_list(maps:get(delay, H)),
      integer_to_list(maps:get(concurrency, H)), opt_int(maps:get(server_requests, H, undefined)),
      opt_int(maps:get(server_rps, H, undefined)), opt_int(maps:get(held, H, undefined)),
      opt_int(maps:get(server_open_peak, H, undefined)), server_errors(maps:get(server_errors, H, undefined)),
      opt_int(maps:get(errors_total, H, undefined)),
      pct(maps:get(server_cpu_pct, H, undefined)), us(maps:get(server_cpu_us, H, undefined)),
      kb(maps:get(server_rss_kb, H, undefined)), atom_to_list(maps:get(status, H))] || H <- Hold].

server_errors(undefined) -> "?";
server_errors(M) when map_size(M) =:= 0 -> "0";
server_errors(M) -> string:join([fmt("~s ~b", [K, V]) || {K, V} <- lists:sort(maps:to_list(M))], ", ").

%% @doc For each hold delay, every engine's CPU per request and peak RSS against the first engine's
%% (nif by default): [{Delay, Engine, CpuRatio, RssRatio}].
-spec hold_ratios([map()]) -> [{integer(), atom(), float() | undefined, float() | undefined}].
hold_ratios(Hold) ->
    lists:append(
      [case [H || H = #{delay := D1} <- Hold, D1 =:= D] of
           [Ref | Others] ->
               [{D, maps:get(engine, O), ratio(O, Ref, server_cpu_us), ratio(O, Ref, server_rss_kb)} || O <- Others];
           [] -> []
       end || D <- lists:usort([D || #{delay := D} <- Hold])]).

ratio(A, B, K) ->
    case {maps:get(K, A, undefined), maps:get(K, B, undefined)} of
        {X, Y} when is_number(X), is_number(Y), Y > 0 -> X / Y;
        _ -> undefined
    end.

opt_int(undefined) -> "-";
opt_int(N) -> fmt_int(N).

pct(undefined) -> "-";
pct(P) -> integer_to_list(round(P)) ++ " %".

us(undefined) -> "-";
us(U) -> fmt_float(U, 2).

kb(undefined) -> "-";
kb(K) -> fmt_bytes(K * 1024).

%% ---------------------------------------------------------------------------
%% report.md

-define(SEED_HEADER, ["Client", "Pool Count", "Pool Size", "Concurrency", "Req/sec", "Error %"]).
-define(DETAIL_HEADER, ["client", "pools", "pool size", "concurrency", "req/s", "timeout %", "closed %",
                        "refused %", "other %", "p50", "p99", "server conns", "server cpu", "server us/req",
                        "server rss", "client cpu", "syn retrans", "client log errors"]).
-define(HOLD_HEADER, ["engine", "route", "concurrency", "requests served", "served req/s", "held (avg)",
                      "open conns (peak)", "server errors", "client errors", "server cpu", "server us/req",
                      "server rss", "status"]).

report(Cfg, St, S, Charts) ->
    Cells = maps:get(cells, St),
    Hold = maps:get(hold, St),
    Md = fun cbench_bench_report:md_table/2,
    ["# cbench client benchmark, ", maps:get(timestamp, Cfg), "\n\n",
     "Profile `", atom_to_list(maps:get(profile, Cfg)), "` of `make bench-clients`: every client below ran GET ",
     "requests against the fixture's `/delay/", integer_to_list(maps:get(delay, Cfg)), "` (answered ",
     integer_to_list(maps:get(delay, Cfg)), " ms later from a timer) in another node, over a grid of pool count x ",
     "pool size x concurrency, one cell after another on this machine. Figures from other machines compare by shape ",
     "and ratio only.\n\n",
     "## Setup\n\n```\n",
     [[string:pad(K, 10), maps:get(list_to_atom(K), S), "\n"]
      || K <- ["machine", "client", "fixture", "url", "kernel", "grid", "cell", "hold", "command"]],
     string:pad("otp", 10), maps:get(otp, S), " (erts ", maps:get(erts, S), ")\n```\n\n",
     "## Results\n\nhttpc_bench's table, sorted by req/s (successes over the cell's time); Error % is the share ",
     "of the cell's finished requests that failed (timeouts at ", integer_to_list(maps:get(timeout, Cfg)),
     " ms, closed, refused, other).\n\n",
     Md(?SEED_HEADER, seed_rows(Cells)), "\n",
     "## Cells\n\nIn the order they ran. Errors by kind as % of the finished requests; p50 and p99 of the ",
     "successes as the workers timed them; server conns: connections the fixture accepted during the cell; server ",
     "cpu (100 % = one CPU busy), CPU time per request it answered and peak RSS of the fixture's node; client cpu: ",
     "this node; syn retrans: SYNs this machine sent again during the cell (connections slow to open, usually a ",
     "full accept queue: see somaxconn above); client log errors: errors the client node logged (crashes of the ",
     "client's own processes, in client-node.log).\n\n",
     Md(?DETAIL_HEADER, detail_rows(Cells)), "\n",
     charts_md(Charts),
     hold_md(Hold, Md),
     notes_md(maps:get(notes, St)),
     "## Legend\n\n",
     "- `!` the fixture's CPU was saturated (over 90% of its CPUs busy) during the cell: it, not the client, may ",
     "have been the limit.\n",
     "- `+` the cell reached its time bound (--max-seconds) before its requests were all made; its req/s stands.\n",
     "- `x` a request was still running its timeout + 2 s after the bound: the adapter did not return in time; ",
     "such requests count as timeouts.\n",
     "- `start_failed` the client did not start; `not_run` the cell did not run (the fixture had died); ",
     "`-` not measured.\n"].

charts_md([]) -> [];
charts_md(Charts) -> ["## Charts\n\n", [["![", C, "](", C, ")\n\n"] || C <- Charts]].

hold_md([], _Md) -> [];
hold_md(Hold, Md) ->
    ["## The fixture at the top concurrency\n\n",
     "Each engine in turn, started fresh in the fixture's node: one reference-client (`tcp`) worker per ",
     "connection at the grid's top concurrency, each making a few requests, with a timeout long enough that ",
     "a slow client is not counted as a server error. Requests served and server errors are the fixture's own ",
     "counters (`cbench:stats/1`: 4xx answers, timeouts, resets, accept back-offs); held (avg) is the requests ",
     "it held at once on average (its req/s x the delay, by Little's law); open conns is the peak of ",
     "`conns_open` polled every 200 ms.\n\n",
     Md(?HOLD_HEADER, hold_rows(Hold)), "\n",
     case hold_ratios(Hold) of
         [] -> [];
         Rs ->
             [[fmt("- /delay/~b: ~s uses ~s the CPU per request and ~s the memory of ~s.\n",
                   [D, E, x(Cpu), x(Rss), maps:get(engine, hd(Hold))])] || {D, E, Cpu, Rss} <- Rs] ++ ["\n"]
     end].

x(undefined) -> "?";
x(F) -> fmt_float(F, 2) ++ "x".

notes_md([]) -> [];
notes_md(Notes) -> ["## Notes\n\n", [["- ", N, "\n"] || N <- Notes], "\n"].

%% ---------------------------------------------------------------------------
%% Charts

%% One chart per client: a line per pool shape.
charts(Out, Cfg, St) ->
    Cells = [C || C <- maps:get(cells, St), measured(C)],
    lists:append(
      [case [C || C = #{client := N1} <- Cells, N1 =:= N] of
           [] -> [];
           Mine ->
               Shapes = lists:usort([{maps:get(pool_count, C), maps:get(pool_size, C)} || C <- Mine]),
               Series = [{shape_label(P, PC, PS),
                          [{maps:get(concurrency, C), maps:get(rps, C)}
                           || C = #{pool_count := PC1, pool_size := PS1} <- Mine, PC1 =:= PC, PS1 =:= PS]}
                         || {PC, PS} <- Shapes],
               F = "clients-" ++ safe(N) ++ ".svg",
               Note = "cbench bench-clients " ++ maps:get(timestamp, Cfg) ++ ", profile "
                   ++ atom_to_list(maps:get(profile, Cfg)) ++ ", /delay/" ++ integer_to_list(maps:get(delay, Cfg)),
               ok = file:write_file(filename:join(Out, F),
                                    cbench_clients_svg:lines(N ++ ": req/s against concurrency", Series,
                                                             "req/s", Note)),
               [F]
       end || #{name := N, pooled := P} <- maps:get(clients, Cfg)]).

shape_label(false, _, _) -> "no pool";
shape_label(true, PC, PS) -> fmt("~b pool(s) x ~b", [PC, PS]).

safe(N) -> [case C of C when C >= $a, C =< $z; C >= $0, C =< $9; C =:= $_ -> C; _ -> $- end
            || C <- string:lowercase(N)].

%% ---------------------------------------------------------------------------
%% data.csv

csv(St) ->
    Header = "kind,client,engine,route,pool_count,pool_size,concurrency,status,started,ok,rps,error_pct,"
        "timeouts,closed,refused,other,p50_us,p99_us,elapsed_us,server_conns,server_requests,server_errors,"
        "server_cpu_pct,server_cpu_us,server_rss_kb,server_saturated,client_cpu_pct,held,server_open_peak,"
        "syn_retrans,client_logged_errors\n",
    Line = fun(Kind, R) ->
                   E = maps:get(errors, R, #{}),
                   cbench_bench_report:csv_line(
                     [Kind, maps:get(client, R), maps:get(engine, R, ""),
                      case maps:get(delay, R, undefined) of undefined -> ""; D -> "/delay/" ++ integer_to_list(D) end,
                      pool(R, pool_count), pool(R, pool_size), maps:get(concurrency, R), maps:get(status, R),
                      g(started, R), g(ok, R), g(rps, R), g(error_pct, R),
                      g(timeout, E), g(closed, E), g(refused, E), g(other, E),
                      g(p50_us, R), g(p99_us, R), g(elapsed_us, R), g(server_conns, R), g(server_requests, R),
                      case maps:get(server_errors, R, undefined) of
                          M when is_map(M) -> lists:sum(maps:values(M));
                          _ -> ""
                      end,
                      g(server_cpu_pct, R), g(server_cpu_us, R), g(server_rss_kb, R), g(server_saturated, R),
                      g(client_cpu_pct, R), g(held, R), g(server_open_peak, R), g(syn_retrans, R),
                      g(client_logged_errors, R)])
           end,
    [Header, [Line("cell", R) || R <- maps:get(cells, St)], [Line("hold", R) || R <- maps:get(hold, St)]].

g(K, M) ->
    case maps:get(K, M, "") of
        undefined -> "";
        V -> V
    end.

%% ---------------------------------------------------------------------------
%% Terminal

terminal(St) ->
    T = fun cbench_bench_report:text_table/2,
    io:format("~n== results (sorted by req/s) ==~n~s", [T(?SEED_HEADER, seed_rows(maps:get(cells, St)))]),
    case maps:get(hold, St) of
        [] -> ok;
        Hold ->
            io:format("~n== the fixture at the top concurrency ==~n~s", [T(?HOLD_HEADER, hold_rows(Hold))]),
            [io:format("/delay/~b: ~s uses ~s the CPU per request and ~s the memory of ~s~n",
                       [D, E, x(Cpu), x(Rss), maps:get(engine, hd(Hold))]) || {D, E, Cpu, Rss} <- hold_ratios(Hold)]
    end,
    case maps:get(notes, St) of
        [] -> ok;
        Ns -> io:format("~nnotes:~n~s", [[["  - ", N, "\n"] || N <- Ns]])
    end,
    ok.
