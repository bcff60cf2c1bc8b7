%% @doc The outputs of a run: report.md in the layout of the published BEAM server
%% benchmarks (setup, servers, cases, a throughput and a latency table per
%% protocol, resources, legend), data.json, data.csv, SVG charts, and the summary
%% printed on the terminal.
-module(cbench_bench_report).

-export([write/2, cell/1, lat_cell/1, md_table/2]).
%% Shared with the client benchmark's report (cbench_clients_report).
-export([text_table/2, csv_line/1, machine/0]).

-import(cbench_bench_stats, [fmt_int/1, fmt_us/1, fmt_float/2]).

%% @doc Writes every output of a run into its directory and prints the summary.
-spec write(map(), map()) -> ok.
write(Cfg = #{out := Out}, St) ->
    Setup = setup(Cfg, St),
    Engines = [N || #{name := N} <- maps:get(engines, St)],
    Protos = maps:get(protos, Cfg),
    Charts = charts(Out, Protos, Engines, Cfg, St),
    ok = file:write_file(filename:join(Out, "report.md"), report(Cfg, St, Setup, Engines, Protos, Charts)),
    ok = file:write_file(filename:join(Out, "data.json"), [cbench_bench_json:encode(json(Cfg, St, Setup)), $\n]),
    ok = file:write_file(filename:join(Out, "data.csv"), csv(St)),
    terminal(Cfg, St, Engines, Protos),
    io:format("~nwrote ~s/{report.md,data.json,data.csv~s}~n",
              [Out, [[",", F] || F <- Charts]]),
    ok.

%% ---------------------------------------------------------------------------
%% Setup

setup(Cfg, St) ->
    Info = maps:get(node_info, St, #{}),
    NodeArgs = maps:get(args, Info, undefined),
    #{machine => machine(),
      otp => erlang:system_info(otp_release),
      erts => erlang:system_info(version),
      h2load => binary_to_list(cbench_bench_h2load:version()),
      load_tool => maps:get(tool, Cfg, cbench_load),
      cbench_load => cbench_bench_load:version(),
      server_cpus => maps:get(server_cpus_s, Cfg),
      load_cpus => maps:get(load_cpus_s, Cfg),
      node => case NodeArgs of
                  undefined -> "not started";
                  _ -> "erl " ++ string:join([A || A <- NodeArgs, not lists:prefix("/", A), A =/= "-pa"], " ")
                       ++ " (schedulers " ++ integer_to_list(maps:get(schedulers, Info, 0))
                       ++ ", bound to CPUs " ++ lists:flatten(io_lib:format("~w", [maps:get(bindings, Info, [])]))
                       ++ ")"
              end,
      cbench_settings => maps:get(cbench_settings, Info, undefined),
      threads => maps:get(threads, Cfg),
      clients => maps:get(clients, Cfg),
      streams => maps:get(streams, Cfg),
      runs => maps:get(runs, Cfg), duration => maps:get(duration, Cfg),
      warmup => maps:get(warmup, Cfg),
      latency => maps:get(latency, Cfg),
      latency_duration => maps:get(latency_duration, Cfg, undefined),
      latency_warmup => maps:get(latency_warmup, Cfg, undefined),
      profile => maps:get(profile, Cfg),
      command => maps:get(command, Cfg, ""),
      timestamp => maps:get(timestamp, Cfg)}.

%% @doc The machine's line of a report's setup: CPU model, CPUs online, kernel.
-spec machine() -> string().
machine() ->
    Model = case file:read_file("/proc/cpuinfo") of
                {ok, B} ->
                    case re:run(B, "model name\\s*:\\s*(.*)", [{capture, all_but_first, list}]) of
                        {match, [M]} -> M;
                        nomatch -> "unknown CPU"
                    end;
                _ -> "unknown CPU"
            end,
    lists:flatten(io_lib:format("~s, ~b CPUs online, Linux ~s",
                                [Model, erlang:system_info(logical_processors_online),
                                 cbench_bench_os:cmd("uname -r")])).

%% ---------------------------------------------------------------------------
%% Cells

%% @doc The throughput cell of a row, as the published tables write it.
cell(undefined) -> "-";
cell(#{status := unsupported}) -> "-";
cell(#{status := ok, rps := R} = Row) ->
    fmt_int(R) ++ case maps:get(spread, Row, false) of true -> " ~"; false -> "" end
        ++ case maps:get(load_bound, Row, false) of true -> " ^"; false -> "" end;
cell(#{status := S}) -> atom_to_list(S).

%% @doc The latency cell: p99 when the rate was held, else the status.
lat_cell(undefined) -> "-";
lat_cell(#{status := ok, p99 := P} = R) -> fmt_us(P) ++ load_mark(R);
lat_cell(#{status := S} = R) -> atom_to_list(S) ++ load_mark(R).

load_mark(#{load_bound := true}) -> " ^";
load_mark(_) -> "".

cpu_cell(#{status := ok, cpu_us := U}) when is_number(U) -> fmt_float(U, 2);
cpu_cell(#{status := ok}) -> "n/a";
cpu_cell(R) -> cell(R).

find(Rows, P, C, E) ->
    case [R || R = #{proto := P1, 'case' := C1, engine := E1} <- Rows, P1 =:= P, C1 =:= C, E1 =:= E] of
        [R | _] -> R;
        [] -> undefined
    end.

proto_name(h1) -> "HTTP/1.1";
proto_name(h2c) -> "HTTP/2 (h2c, prior knowledge)".

%% @doc A Markdown table.
md_table(Header, Rows) ->
    Line = fun(Cells) -> ["| ", lists:join(" | ", Cells), " |\n"] end,
    [Line(Header), Line(["---" || _ <- Header]) | [Line(R) || R <- Rows]].

text_table(Header, Rows) ->
    All = [Header | Rows],
    Widths = [lists:max([string:length(lists:nth(I, R)) || R <- All])
              || I <- lists:seq(1, length(Header))],
    Fmt = fun(Cells) ->
                  [[string:pad(C, W + 2) || {C, W} <- lists:zip(Cells, Widths)], "\n"]
          end,
    [Fmt(R) || R <- All].

cases_in(Cfg, P, Rows) ->
    [C || C <- maps:get(cases, Cfg),
          [] =/= [x || #{proto := P1, 'case' := C1} <- Rows, P1 =:= P, C1 =:= C]].

throughput_rows(Cfg, St, P, Engines, CellF) ->
    Rows = maps:get(results, St),
    [[atom_to_list(C) | [CellF(find(Rows, P, C, E)) || E <- Engines]] || C <- cases_in(Cfg, P, Rows)].

%% ---------------------------------------------------------------------------
%% report.md

report(Cfg, St, S, Engines, Protos, Charts) ->
    Rows = maps:get(results, St),
    Lat = maps:get(latency, St),
    ["# cbench benchmark, ", maps:get(timestamp, Cfg), "\n\n",
     "Profile `", atom_to_list(maps:get(profile, Cfg)), "` of `make bench`, measured on this machine in one run: ",
     "every engine below was measured by the same harness, with the same load, one after another. ",
     "Figures from other machines (the published BEAM benchmarks) can be compared by shape and ratio only.\n\n",
     "## Setup\n\n```\n", setup_block(S), "```\n\n",
     "## Servers\n\n",
     md_table(["server", "version", "HTTP/1.1", "HTTP/2"],
              [[N, V, yes(Protos, Rows, h1, N), yes(Protos, Rows, h2c, N)]
               || #{name := N, version := V} <- maps:get(engines, St)]),
     "\n## Cases\n\n",
     md_table(["case", "request", "response"], [case_row(C) || C <- maps:get(cases, Cfg)]),
     "\n## Throughput\n\nRequests per second, higher is better. One load-generator thread is the limit near the ",
     "top of the HTTP/1.1 range here: where engines tie near that ceiling (`^`), compare CPU per request instead.\n\n",
     [["### ", proto_name(P), "\n\n",
       md_table(["case" | Engines], throughput_rows(Cfg, St, P, Engines, fun cell/1)), "\n"]
      || P <- Protos],
     "## CPU time per request\n\nMicroseconds of server CPU (user + system, all the server's processes) per ",
     "answered request over the measured window, lower is better.\n\n",
     [["### ", proto_name(P), "\n\n",
       md_table(["case" | Engines], throughput_rows(Cfg, St, P, Engines, fun cpu_cell/1)), "\n"]
      || P <- Protos],
     charts_md(Charts),
     ratios_md(Cfg, St, Engines, Protos),
     proto_ratios_md(Cfg, St, Engines),
     latency_md(Cfg, Lat, Engines, Protos),
     "## Resources\n\nSampled every 100 ms during the measured window: peak RSS of the server's processes ",
     "(the node plus the port program for `port`; nginx's master and worker), peak `erlang:memory(total)` ",
     "of the node (`beam`), average CPU% of those processes (100% = one CPU busy), and CPU time per request.\n\n",
     [["### ", proto_name(P), "\n\n",
       md_table(["scenario", "server", "req/s", "rss", "beam", "cpu%", "cpu us/req", "load cpu%"],
                [[code(atom_to_list(C)), E, cell(R), kb(maps:get(rss_kb, R, undefined)),
                  cbench_bench_stats:fmt_bytes(maps:get(beam, R, undefined)),
                  pct(maps:get(cpu_pct, R, undefined)), cpu_cell(R),
                  pct(maps:get(load_cpu_pct, R, undefined))]
                 || C <- maps:get(cases, Cfg), E <- Engines,
                    R <- [find(Rows, P, C, E)], R =/= undefined, maps:is_key(rps, R)]), "\n"]
      || P <- Protos],
     cbench_bench_roadrunner:report_md(Cfg, St, Engines),
     notes_md(maps:get(notes, St)),
     "## Legend\n\n",
     "- `~` the runs for the median were more than 5% apart (max - min > 5% of the median).\n",
     "- `stalled` none of the connections completed a second request (at most one success per connection).\n",
     "- `overloaded` the server answered less than 98% of the offered rate.\n",
     "- `errors` failed requests or non-2xx responses.\n",
     "- `^` the load generator kept its CPUs over 90% busy: it may have been the limit, not the server ",
     "(compare CPU per request; in a latency cell, `overloaded ^` may be the client falling behind).\n",
     "- `died` the server exited during the case.\n",
     "- `-` the server does not serve the case (its probe did not get a 2xx), or was not measured.\n"].

setup_block(S) ->
    Tool = case maps:get(load_tool, S, cbench_load) of
               h2load -> "h2load (" ++ strip_h2load(maps:get(h2load, S)) ++ ")";
               cbench_load -> maps:get(cbench_load, S) ++ " closed loop"
           end,
    Thr = io_lib:format("~s, ~s thread(s), ~b connections, ~b streams per connection on h2c, ~b run(s) of ~bs, back to back after one ~bs warm-up~s",
                        [S2 || S2 <- [Tool, integer_to_list(length(string:lexemes(maps:get(load_cpus, S), ","))),
                                      maps:get(clients, S), maps:get(streams, S), maps:get(runs, S),
                                      maps:get(duration, S), maps:get(warmup, S),
                                      case maps:get(runs, S) of 1 -> ""; _ -> ", median reported" end]]),
    Lat = case maps:get(latency, S) of
              true -> io_lib:format("cbench-load open loop at 25/50/75% of the best peak per case, ~b connections (~b streams each on h2c), ~bs per rate, one ~bs warm-up per engine at the lowest rate; percentiles corrected for coordinated omission",
                                    [maps:get(clients, S), maps:get(streams, S), maps:get(latency_duration, S), maps:get(latency_warmup, S)]);
              false -> "not measured in this profile"
          end,
    Lines = [{"machine", maps:get(machine, S)},
             {"toolchain", io_lib:format("Erlang/OTP ~s (erts ~s)", [maps:get(otp, S), maps:get(erts, S)])},
             {"cpu", io_lib:format("servers pinned to CPU ~s, load generator and harness to CPU ~s",
                                   [maps:get(server_cpus, S), maps:get(load_cpus, S)])},
             {"node", maps:get(node, S)},
             {"threads", io_lib:format("~b engine thread(s) per cbench engine; nginx 1 worker; h2o 1 thread", [maps:get(threads, S)])},
             {"throughput", Thr},
             {"latency", Lat},
             {"resources", "sampled every 100 ms during the measured window"},
             {"command", maps:get(command, S)}]
        ++ case maps:get(cbench_settings, S) of
               undefined -> [];
               CS -> [{"settings", CS}]
           end,
    [[string:pad(K, 12), V, "\n"] || {K, V} <- Lines].

strip_h2load(V) ->
    case re:run(V, "nghttp2/([0-9.]+)", [{capture, all_but_first, list}]) of
        {match, [N]} -> "nghttp2 " ++ N;
        nomatch -> V
    end.

yes(Protos, Rows, P, N) ->
    case lists:member(P, Protos) andalso [R || R = #{proto := P1, engine := E} <- Rows, P1 =:= P, E =:= N,
               maps:get(status, R) =/= unsupported] of
        false -> "not measured";
        [] -> "no";
        _ -> "yes"
    end.

case_row(C) ->
    case cbench_bench_roadrunner:is_case(C) of
        true ->
            {Req, Resp} = cbench_bench_roadrunner:case_text(C),
            [code(atom_to_list(C)), code(Req), Resp];
        false -> ewe_case_row(C)
    end.

ewe_case_row(C) ->
    {Path, Body, Hdrs} = cbench_bench_cases:case_spec(C),
    Req = case Body of
              undefined -> "GET " ++ Path;
              "body_1k" -> "POST " ++ Path ++ ", 1KiB body";
              "body_10k" -> "POST " ++ Path ++ ", 10KiB body"
          end ++ case Hdrs of [] -> ""; _ -> ", 7 extra headers" end,
    Resp = case C of
               hello -> "`Hello, Joe!`"; hello_headers -> "`Hello, Joe!`";
               echo_chunked_10kb -> "the body, chunked, read incrementally";
               echo_1kb -> "the body"; echo_1kb_headers -> "the body"; echo_10kb -> "the body";
               file_tiny -> "1KiB file"; file_small -> "100KiB file"; file_big -> "5MiB file";
               stream -> "2 chunks"; stream_small -> "100 x 64B chunks"; stream_big -> "64 x 16KiB chunks";
               sse -> "32 events"; sse_small -> "100 events"; sse_big -> "64 x 16KiB events";
               erl_hello -> "`Hello, Joe!` from an Erlang process (batched)";
               erl_hello_unbatched -> "`Hello, Joe!` from an Erlang process (one message per request)";
               erl_echo_1kb -> "the body, from an Erlang process (batched)"
           end,
    [code(atom_to_list(C)), code(Req), Resp].

code(S) -> "`" ++ S ++ "`".

kb(undefined) -> "-";
kb(K) -> cbench_bench_stats:fmt_bytes(K * 1024).

pct(undefined) -> "-";
pct(P) -> integer_to_list(round(P)) ++ " %".

charts_md([]) -> [];
charts_md(Charts) ->
    ["## Charts\n\n", [["![", C, "](", C, ")\n\n"] || C <- Charts]].

notes_md([]) -> [];
notes_md(Notes) ->
    ["## Notes\n\n", [["- ", N, "\n"] || N <- Notes], "\n"].

%% Each engine against each reference present (cbench-server, nginx, h2o): one row
%% per protocol, case and engine, one column per reference, each cell the req/s
%% ratio (higher is better) and the CPU-per-request ratio (lower is better).
ratio_matrix(Cfg, St, Engines, Protos) ->
    Rows = maps:get(results, St),
    Refs = [R || R <- maps:get(reference, Cfg), lists:member(R, Engines)],
    Lines = [[atom_to_list(P), atom_to_list(C), E |
              [case find(Rows, P, C, Ref) of
                   RR when Ref =/= E -> case ok_row(RR) of
                                            true -> {A, B} = ratio_cells(RE, RR), A ++ " / " ++ B;
                                            false -> "-"
                                        end;
                   _ -> "-"
               end || Ref <- Refs]]
             || P <- Protos, C <- maps:get(cases, Cfg), E <- Engines,
                not lists:member(E, ["nginx", "h2o"]),
                RE <- [find(Rows, P, C, E)], ok_row(RE)],
    Useful = [L || L <- Lines, lists:any(fun(X) -> X =/= "-" end, lists:nthtail(3, L))],
    {["protocol", "case", "engine" | ["vs " ++ R || R <- Refs]], Useful}.

ok_row(#{status := ok, rps := _}) -> true;
ok_row(_) -> false.

%% The same engine and case over h2c and over HTTP/1.1.
proto_ratios(Cfg, St, Engines) ->
    Rows = maps:get(results, St),
    [{C, E, R1, R2} || C <- maps:get(cases, Cfg), E <- Engines,
                       R1 <- [find(Rows, h1, C, E)], ok_row(R1),
                       R2 <- [find(Rows, h2c, C, E)], ok_row(R2)].

ratio_cells(RE, RR) ->
    Rps = fmt_float(maps:get(rps, RE) / maps:get(rps, RR), 2) ++ "x",
    Cpu = case {maps:get(cpu_us, RE), maps:get(cpu_us, RR)} of
              {A, B} when is_number(A), is_number(B), B > 0 -> fmt_float(A / B, 2) ++ "x";
              _ -> "n/a"
          end,
    {Rps, Cpu}.

ratios_md(Cfg, St, Engines, Protos) ->
    case ratio_matrix(Cfg, St, Engines, Protos) of
        {_, []} -> [];
        {Header, Lines} ->
            ["## Ratios\n\nEach engine against each reference measured in this run, as ",
             "`req/s ratio / CPU-per-request ratio`: above 1x is faster for the first, below 1x is cheaper ",
             "for the second.\n\n", md_table(Header, Lines), "\n"]
    end.

proto_ratios_md(Cfg, St, Engines) ->
    case proto_ratios(Cfg, St, Engines) of
        [] -> [];
        Rs ->
            ["## h2c against HTTP/1.1\n\n",
             md_table(["case", "engine", "h1 req/s", "h2c req/s", "h2c / h1"],
                      [[atom_to_list(C), E, fmt_int(maps:get(rps, R1)), fmt_int(maps:get(rps, R2)),
                        fmt_float(maps:get(rps, R2) / maps:get(rps, R1), 2) ++ "x"]
                       || {C, E, R1, R2} <- Rs]),
             "\n"]
    end.

latency_md(_Cfg, [], _Engines, _Protos) -> [];
latency_md(Cfg, Lat, Engines, Protos) ->
    ["## Latency\n\n",
     "p99 latency at a fixed offered rate (25%, 50% and 75% of the best engine's peak for the case), ",
     "lower is better. Every engine gets the same rates. Measured open loop with `cbench-load`: every ",
     "request has an intended send time on an even schedule over the connections, and its latency is ",
     "counted from that time (corrected for coordinated omission, as wrk2 and zrk do), so a request that ",
     "waited behind a slow one counts its wait. `uncorrected p99` (from the actual send) is shown beside it ",
     "for comparison, and `send lag p99` is how late cbench-load itself sent (its own pacing error). ",
     "`overloaded`: less than 98% of the offered rate was answered (see docs/bench.md).\n\n",
     [begin
          Rows = [R || R = #{proto := P1} <- Lat, P1 =:= P],
          Keys = lists:usort([{index(C, maps:get(cases, Cfg)), C, Rate} || #{'case' := C, rate := Rate} <- Rows]),
          case Keys of
              [] -> [];
              _ ->
                  ["### ", proto_name(P), "\n\n",
                   md_table(["case", "req/s" | Engines],
                            [[atom_to_list(C), fmt_int(Rate) |
                              [lat_cell(find_lat(Rows, C, Rate, E)) || E <- Engines]]
                             || {_, C, Rate} <- Keys]),
                   "\n#### Percentiles\n\n",
                   md_table(["case", "req/s", "server", "p50", "p99", "p99.9", "uncorrected p99",
                             "send lag p99", "answered req/s", "status", "server cpu%", "load cpu%"],
                            [[atom_to_list(C), fmt_int(Rate), E, fmt_us(maps:get(p50, R, undefined)),
                              fmt_us(maps:get(p99, R, undefined)), fmt_us(maps:get(p999, R, undefined)),
                              fmt_us(maps:get(u_p99, R, undefined)), fmt_us(maps:get(lag_p99, R, undefined)),
                              case maps:get(answered, R, undefined) of undefined -> "-"; A -> fmt_int(A) end,
                              atom_to_list(maps:get(status, R)),
                              pct(maps:get(cpu_pct, R, undefined)), pct(maps:get(load_cpu_pct, R, undefined))]
                             || {_, C, Rate} <- Keys, E <- Engines,
                                R <- [find_lat(Rows, C, Rate, E)], R =/= undefined]),
                   "\n"]
          end
      end || P <- Protos]].

index(X, L) -> length(lists:takewhile(fun(Y) -> Y =/= X end, L)).

find_lat(Rows, C, Rate, E) ->
    case [R || R = #{'case' := C1, rate := R1, engine := E1} <- Rows, C1 =:= C, R1 =:= Rate, E1 =:= E] of
        [R | _] -> R;
        [] -> undefined
    end.

%% ---------------------------------------------------------------------------
%% Charts

charts(Out, Protos, Engines, Cfg, St) ->
    Rows = maps:get(results, St),
    lists:append(
      [begin
           Cases = cases_in(Cfg, P, Rows),
           Thr = [{atom_to_list(C),
                   [bar(find(Rows, P, C, E), E, rps) || E <- Engines]} || C <- Cases],
           Cpu = [{atom_to_list(C),
                   [bar(find(Rows, P, C, E), E, cpu_us) || E <- Engines]} || C <- Cases],
           Ps = atom_to_list(P),
           F1 = "throughput-" ++ Ps ++ ".svg",
           F2 = "cpu-" ++ Ps ++ ".svg",
           Note = "cbench " ++ maps:get(timestamp, Cfg) ++ ", profile " ++ atom_to_list(maps:get(profile, Cfg))
               ++ "; bars scaled per case",
           ok = file:write_file(filename:join(Out, F1),
                                cbench_bench_svg:bars("Throughput, " ++ proto_name(P) ++ " (req/s, higher is better)",
                                                      Engines, Thr, Note)),
           ok = file:write_file(filename:join(Out, F2),
                                cbench_bench_svg:bars("Server CPU per request, " ++ proto_name(P) ++ " (us, lower is better)",
                                                      Engines, Cpu, Note)),
           [F1, F2]
       end || P <- Protos, cases_in(Cfg, P, Rows) =/= []]).

bar(undefined, E, _) -> {E, undefined, "-"};
bar(R = #{status := ok}, E, rps) -> {E, maps:get(rps, R), cell(R)};
bar(R = #{status := ok}, E, cpu_us) ->
    case maps:get(cpu_us, R, undefined) of
        U when is_number(U) -> {E, U, fmt_float(U, 2) ++ " us"};
        _ -> {E, undefined, "n/a"}
    end;
bar(R, E, _) -> {E, undefined, cell(R)}.

%% ---------------------------------------------------------------------------
%% data.json and data.csv

json(Cfg, St, Setup) ->
    Clean = fun(R) -> maps:map(fun(runs, Rs) -> [maps:remove(tail, X) || X <- Rs];
                                  (_, V) -> V end, R) end,
    #{setup => Setup#{cases => maps:get(cases, Cfg), protocols => maps:get(protos, Cfg)},
      engines => [#{name => N, version => V, kind => K} || #{name := N, version := V, kind := K} <- maps:get(engines, St)],
      throughput => [Clean(R) || R <- maps:get(results, St)],
      latency => maps:get(latency, St),
      notes => maps:get(notes, St)}.

csv(St) ->
    Header = "kind,protocol,case,engine,rate,run,status,rps,cpu_pct,cpu_us_per_req,rss_kb,beam_bytes,p50_us,p99_us,p999_us,answered_rps,load_cpu_pct\n",
    Thr = [case maps:get(runs, R, []) of
               [] -> [csv_line(["throughput", P, C, E, "", "", maps:get(status, R)])];
               Runs ->
                   [csv_line(["throughput", P, C, E, "", I, maps:get(status, Run), g(rps, Run),
                              g(cpu_pct, Run), g(cpu_us, Run), g(rss_kb, Run), g(beam, Run),
                              "", "", "", "", g(load_cpu_pct, Run)])
                    || {I, Run} <- lists:zip(lists:seq(1, length(Runs)), Runs)]
           end || R = #{proto := P, 'case' := C, engine := E} <- maps:get(results, St)],
    Lat = [csv_line(["latency", P, C, E, Rate, "", maps:get(status, R), "", g(cpu_pct, R), g(cpu_us, R),
                     "", "", g(p50, R), g(p99, R), g(p999, R), g(answered, R), g(load_cpu_pct, R)])
           || R = #{proto := P, 'case' := C, engine := E, rate := Rate} <- maps:get(latency, St)],
    [Header, Thr, Lat].

g(K, M) -> maps:get(K, M, "").

csv_line(Fields) ->
    [lists:join(",", [csv_field(F) || F <- Fields]), "\n"].

csv_field(undefined) -> "";
csv_field(F) when is_atom(F) -> atom_to_list(F);
csv_field(F) when is_integer(F) -> integer_to_list(F);
csv_field(F) when is_float(F) -> fmt_float(F, 3);
csv_field(F) -> F.

%% ---------------------------------------------------------------------------
%% Terminal

terminal(Cfg, St, Engines, Protos) ->
    Rows = maps:get(results, St),
    io:format("~n== throughput (req/s) ==~n"),
    [io:format("~n~s~n~s", [proto_name(P), text_table(["case" | Engines], throughput_rows(Cfg, St, P, Engines, fun cell/1))])
     || P <- Protos, cases_in(Cfg, P, Rows) =/= []],
    io:format("~n== server CPU per request (us) ==~n"),
    [io:format("~n~s~n~s", [proto_name(P), text_table(["case" | Engines], throughput_rows(Cfg, St, P, Engines, fun cpu_cell/1))])
     || P <- Protos, cases_in(Cfg, P, Rows) =/= []],
    case ratio_matrix(Cfg, St, Engines, Protos) of
        {_, []} -> ok;
        {Header, Lines} ->
            io:format("~n== ratios (req/s ratio / CPU-per-request ratio) ==~n~s", [text_table(Header, Lines)])
    end,
    case proto_ratios(Cfg, St, Engines) of
        [] -> ok;
        PRs ->
            io:format("~n== h2c / HTTP/1.1 ==~n~s",
                      [text_table(["case", "engine", "h1 req/s", "h2c req/s", "h2c/h1"],
                                  [[atom_to_list(C), E, fmt_int(maps:get(rps, R1)), fmt_int(maps:get(rps, R2)),
                                    fmt_float(maps:get(rps, R2) / maps:get(rps, R1), 2) ++ "x"]
                                   || {C, E, R1, R2} <- PRs])])
    end,
    Lat = maps:get(latency, St),
    case Lat of
        [] -> ok;
        _ ->
            io:format("~n== latency p99 at fixed rates ==~n"),
            [begin
                 LR = [R || R = #{proto := P1} <- Lat, P1 =:= P],
                 Keys = lists:usort([{index(C, maps:get(cases, Cfg)), C, Rate} || #{'case' := C, rate := Rate} <- LR]),
                 case Keys of
                     [] -> ok;
                     _ ->
                         io:format("~n~s~n~s", [proto_name(P),
                                                text_table(["case", "req/s" | Engines],
                                                           [[atom_to_list(C), fmt_int(Rate) |
                                                             [lat_cell(find_lat(LR, C, Rate, E)) || E <- Engines]]
                                                            || {_, C, Rate} <- Keys])])
                 end
             end || P <- Protos]
    end,
    case maps:get(notes, St) of
        [] -> ok;
        Ns -> io:format("~nnotes:~n~s", [[["  - ", N, "\n"] || N <- Ns]])
    end,
    ok.
