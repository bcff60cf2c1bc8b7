%% @doc The cbench benchmark harness: `make bench' (quick), `make bench FULL=1',
%% `make bench-h1', `make bench-node', `make bench-h2'. See docs/bench.md.
%%
%% One run: start the servers (the node with the cbench engines and inets httpd,
%% cbench-server, nginx, h2o, targets), probe what each serves, measure throughput
%% case by case with h2load while sampling the servers' resources, then walk the
%% latency ladder, and write report.md, data.json, data.csv and SVG charts under
%% bench/results/<timestamp>-<profile>/.
%%
%% The cases are cbench_bench_cases'; the command line's frame, notes and progress line
%% (cbench_bench_harness) and the CPU lists (cbench_bench_cpus) are shared with make
%% bench-clients (cbench_clients).
-module(cbench_bench).

-export([main/0, main/1, parse_args/1, profile/1, usage/0]).

-define(ENGINES, ["nif", "port", "ehttpd", "cbench-server", "httpd", "mochiweb", "yaws", "nginx", "h2o"]).
-define(PEERS, ["httpd", "mochiweb", "yaws", "nginx", "h2o"]).
-define(NODE, ["nif", "port", "ehttpd", "httpd", "mochiweb", "yaws"]).

%% ---------------------------------------------------------------------------
%% Profiles

%% The roadrunner case set over a profile's timing: roadrunner's lists per protocol, and
%% no latency ladder (its table has none).
roadrunner_set(Cfg) ->
    Cfg#{cases => cbench_bench_roadrunner:cases(), latency_cases => [], latency => false,
         only => #{h1 => cbench_bench_roadrunner:h1_cases(), h2c => cbench_bench_roadrunner:h2c_cases()}}.

%% @doc The settings of a profile; options given on the command line override them.
-spec profile(atom()) -> map() | undefined.
profile(quick) ->
    %% About 6 minutes on 2 CPUs: every quick case over HTTP/1.1, hello and echo_1kb
    %% over h2c, and the latency ladder for hello over both.
    #{profile => quick,
      cases => [hello, echo_1kb, file_small, stream, sse] ++ cbench_bench_cases:erl_cases(),
      protos => [h1, h2c], only => #{h2c => [hello, echo_1kb, erl_hello, erl_hello_unbatched]}, runs => 1,
      duration => 5, warmup => 2, latency => true, latency_cases => [hello],
      latency_protos => [h1, h2c], latency_duration => 2, latency_warmup => 1};
profile(full) ->
    %% The 15, then the roadrunner scenarios (each over the protocols of roadrunner's lists).
    RR = roadrunner_set(#{}),
    #{only := #{h1 := RRh1, h2c := RRh2}} = RR,
    Ours = cbench_bench_cases:cases() ++ cbench_bench_cases:erl_cases(),
    #{profile => full, cases => cbench_bench_cases:all_cases(), protos => [h1, h2c], runs => 3,
      only => #{h1 => Ours ++ RRh1, h2c => Ours ++ RRh2},
      duration => 10, warmup => 3, latency => true, latency_cases => cbench_bench_cases:cases(),
      latency_duration => 3, latency_warmup => 1};
profile(h1) ->
    #{profile => h1, cases => [hello, file_small], protos => [h1], runs => 1,
      duration => 10, warmup => 3, latency => false,
      engines => ["cbench-server", "nginx"], reference => ["nginx"]};
profile(node) ->
    #{profile => node, cases => [hello, echo_1kb] ++ cbench_bench_cases:erl_cases(), protos => [h1],
      runs => 1,
      duration => 10, warmup => 3, latency => false,
      engines => ["nif", "port", "ehttpd", "cbench-server"], reference => ["cbench-server", "ehttpd"]};
profile(h2) ->
    #{profile => h2, cases => [hello, echo_1kb, file_big], protos => [h1, h2c],
      only => #{h1 => [file_big]}, runs => 1, duration => 10, warmup => 3,
      latency => false, engines => ["cbench-server", "h2o"], reference => ["h2o"]};
profile(smoke) ->
    #{profile => smoke, cases => [hello], protos => [h1], runs => 1, duration => 1,
      warmup => 0, latency => true, latency_cases => [hello],
      latency_duration => 1, latency_warmup => 0, smoke => true};
profile(_) -> undefined.

defaults() ->
    Cpus = cbench_bench_cpus:online_cpus(),
    {S, L} = lists:split(max(1, length(Cpus) div 2), Cpus),
    Load = case L of [] -> S; _ -> L end,
    #{engines => ?ENGINES, peers => true, targets => [], clients => 50, streams => 10,
      server_cpus => S, load_cpus => Load, threads => undefined, out => undefined,
      keep_tmp => false, reference => ["cbench-server", "nginx", "h2o"], only => #{},
      tool => cbench_load}.

%% @doc The help text.
-spec usage() -> string().
usage() ->
    "usage: bench/run.sh [options]   (make bench [FULL=1] [PEERS=0] [BENCH_ARGS=...])\n"
    "  --profile quick|full|h1|node|h2|smoke   what to run (default quick)\n"
    "  --cases a,b,...        cases (of: "
        ++ string:join([atom_to_list(C) || C <- cbench_bench_cases:all_cases()], ",") ++ ")\n"
    "  --case-set ewe|roadrunner  the profile's cases, or roadrunner's scenarios (CASES=roadrunner)\n"
    "  --engines a,b,...      engines (of: " ++ string:join(?ENGINES, ",") ++ ")\n"
    "  --protocols h1,h2c     protocols\n"
    "  --no-peers             skip httpd, mochiweb, yaws, nginx and h2o (PEERS=0)\n"
    "  --target NAME=URL      also measure a running server (repeatable)\n"
    "  --runs N  --duration S  --warmup S     throughput runs\n"
    "  --latency-duration S  --latency-warmup S  --no-latency\n"
    "  --clients N  --streams N  --threads N (engine threads; default: server CPUs)\n"
    "  --tool cbench-load|h2load   throughput load generator (default cbench-load; the latency\n"
    "                         ladder always runs cbench-load open loop)\n"
    "  --server-cpus 0,..  --load-cpus 1,..   placement (default: first half / rest)\n"
    "  --nodes N@H,...        run the load generator on these nodes at once (NODES=...; started\n"
    "                         here, or over ssh, when not running; cbench:load/2 with nodes)\n"
    "  --cookie C             the cookie for --nodes\n"
    "  --out DIR              results directory (default bench/results/<timestamp>-<profile>)\n"
    "  --keep-tmp             keep configs, fixture files and h2load logs\n"
    "  --dry-run              start and probe the servers, print the plan and its duration, measure nothing\n".

%% @doc Parses the command line into the run's configuration.
-spec parse_args([string()]) -> {ok, map()} | {error, string()} | help.
parse_args(Args) ->
    case lists:member("--help", Args) orelse lists:member("-h", Args) of
        true -> help;
        false ->
            Prof = case lists:dropwhile(fun(A) -> A =/= "--profile" end, Args) of
                       ["--profile", P | _] -> P;
                       _ -> "quick"
                   end,
            case profile(list_to_atom(Prof)) of
                undefined -> {error, "unknown profile '" ++ Prof ++ "' (quick, full, h1, node, h2, smoke)"};
                PM ->
                    try opts(Args, maps:merge(defaults(), PM)) of
                        Cfg -> check(Cfg)
                    catch throw:{usage, Msg} -> {error, Msg}
                    end
            end
    end.

opts([], Cfg) -> Cfg;
opts(["--profile", _ | R], Cfg) -> opts(R, Cfg);
opts(["--case-set", "roadrunner" | R], Cfg) -> opts(R, roadrunner_set(Cfg));
opts(["--case-set", "ewe" | R], Cfg) -> opts(R, Cfg);
opts(["--case-set", S | _], _) -> throw({usage, "unknown case set '" ++ S ++ "' (ewe, roadrunner)"});
opts(["--cases", L | R], Cfg) ->
    Known = [atom_to_list(C) || C <- cbench_bench_cases:all_cases()],
    Cs = [case lists:member(C, Known) of
              true -> list_to_atom(C);
              false -> throw({usage, "unknown case '" ++ C ++ "'"})
          end || C <- lexemes(L)],
    opts(R, Cfg#{cases => Cs, latency_cases => Cs, only => #{}});
opts(["--engines", L | R], Cfg) ->
    Es = [case lists:member(E, ?ENGINES) of
              true -> E;
              false -> throw({usage, "unknown engine '" ++ E ++ "'"})
          end || E <- lexemes(L)],
    opts(R, Cfg#{engines => Es});
opts(["--protocols", L | R], Cfg) ->
    Ps = [case P of
              "h1" -> h1; "http1" -> h1; "h2c" -> h2c; "h2" -> h2c;
              _ -> throw({usage, "unknown protocol '" ++ P ++ "' (h1, h2c)"})
          end || P <- lexemes(L)],
    opts(R, Cfg#{protos => Ps, latency_protos => Ps, only => #{}});
opts(["--no-peers" | R], Cfg) -> opts(R, Cfg#{peers => false});
opts(["--peers", V | R], Cfg) -> opts(R, Cfg#{peers => V =/= "0"});
opts(["--no-latency" | R], Cfg) -> opts(R, Cfg#{latency => false});
opts(["--keep-tmp" | R], Cfg) -> opts(R, Cfg#{keep_tmp => true});
opts(["--dry-run" | R], Cfg) -> opts(R, Cfg#{dry_run => true});
opts(["--target", T | R], Cfg = #{targets := Ts}) ->
    case string:split(T, "=") of
        [Name, "http://" ++ _ = Url] when Name =/= "" -> opts(R, Cfg#{targets => Ts ++ [{Name, Url}]});
        _ -> throw({usage, "bad --target '" ++ T ++ "' (expected NAME=http://HOST:PORT)"})
    end;
opts(["--runs", N | R], Cfg) -> opts(R, Cfg#{runs => cbench_bench_harness:pos(N, "--runs")});
opts(["--duration", N | R], Cfg) -> opts(R, Cfg#{duration => cbench_bench_harness:pos(N, "--duration")});
opts(["--warmup", N | R], Cfg) -> opts(R, Cfg#{warmup => cbench_bench_harness:nonneg(N, "--warmup")});
opts(["--latency-duration", N | R], Cfg) ->
    opts(R, Cfg#{latency_duration => cbench_bench_harness:pos(N, "--latency-duration")});
opts(["--latency-warmup", N | R], Cfg) ->
    opts(R, Cfg#{latency_warmup => cbench_bench_harness:nonneg(N, "--latency-warmup")});
opts(["--clients", N | R], Cfg) -> opts(R, Cfg#{clients => cbench_bench_harness:pos(N, "--clients")});
opts(["--streams", N | R], Cfg) -> opts(R, Cfg#{streams => cbench_bench_harness:pos(N, "--streams")});
opts(["--threads", N | R], Cfg) -> opts(R, Cfg#{threads => cbench_bench_harness:pos(N, "--threads")});
opts(["--server-cpus", L | R], Cfg) ->
    opts(R, Cfg#{server_cpus => cbench_bench_cpus:cpus(L, "--server-cpus")});
opts(["--load-cpus", L | R], Cfg) -> opts(R, Cfg#{load_cpus => cbench_bench_cpus:cpus(L, "--load-cpus")});
opts(["--out", D | R], Cfg) -> opts(R, Cfg#{out => D});
opts(["--nodes", L | R], Cfg) -> opts(R, Cfg#{nodes => cbench_bench_nodes:parse(L)});
opts(["--cookie", C | R], Cfg) -> opts(R, Cfg#{cookie => list_to_atom(C)});
opts(["--tool", "cbench-load" | R], Cfg) -> opts(R, Cfg#{tool => cbench_load});
opts(["--tool", "h2load" | R], Cfg) -> opts(R, Cfg#{tool => h2load});
opts(["--tool", T | _], _) -> throw({usage, "unknown tool '" ++ T ++ "' (cbench-load, h2load)"});
opts([Opt | _], _) -> throw({usage, "unknown or incomplete option '" ++ Opt ++ "'"}).

lexemes(L) -> string:lexemes(L, ",").

check(Cfg = #{engines := Es, peers := Peers, targets := Ts}) ->
    Es1 = case Peers of
              true -> Es;
              false -> Es -- ?PEERS
          end,
    case Es1 =:= [] andalso Ts =:= [] of
        true -> {error, "no engine left to measure"};
        false -> {ok, Cfg#{engines => Es1}}
    end.

%% ---------------------------------------------------------------------------
%% Entry point

%% @doc Called by bench/run.sh through `erl -run cbench_bench main -extra ARGS'.
-spec main() -> no_return().
main() ->
    main(init:get_plain_arguments()).

%% @doc Runs the harness with a command line and halts with 0, 1 (a failure) or 2 (bad input).
-spec main([string()]) -> no_return().
main(Args) ->
    cbench_bench_harness:cli("bench", Args, fun parse_args/1, fun usage/0,
        fun(Cfg) -> run(Cfg#{command => string:join(["bench/run.sh" | Args], " ")}) end).

run(Cfg0) ->
    case cbench_bench_h2load:version() of
        undefined -> throw({fatal, "h2load is not installed (apt-get install nghttp2-client)"});
        _ -> ok
    end,
    case cbench_bench_load:version() of
        undefined -> throw({fatal, cbench_bench_load:path() ++ " is not built (make load)"});
        _ -> ok
    end,
    Root = cbench_bench_harness:root(),
    Ts = cbench_bench_harness:timestamp(),
    Out = case maps:get(out, Cfg0) of
              undefined -> filename:join([Root, "bench", "results",
                                          Ts ++ "-" ++ atom_to_list(maps:get(profile, Cfg0))]);
              O -> O
          end,
    %% Scratch space (configs, fixture files, h2load logs): inside the directory that
    %% bench/run.sh removes on exit, so that even a killed run leaves nothing behind;
    %% under bench/results/tmp/ (never committed) when it is to be kept.
    Tmp = case {maps:get(keep_tmp, Cfg0), os:getenv("CBENCH_BENCH_PIDDIR")} of
              {false, Dir} when is_list(Dir), Dir =/= "" -> filename:join(Dir, "work-" ++ Ts);
              _ -> filename:join([Root, "bench", "results", "tmp", Ts])
          end,
    Doc = filename:join(Tmp, "www"),
    ok = filelib:ensure_path(Out),
    ok = cbench_bench_servers:write_fixtures(Doc),
    #{server_cpus := SC, load_cpus := LC} = Cfg0,
    Threads = case maps:get(threads, Cfg0) of undefined -> length(SC); T -> T end,
    Cfg = Cfg0#{root => Root, out => Out, tmp => Tmp, docroot => Doc, threads => Threads,
                server_cpus_s => cbench_bench_cpus:cpu_list(SC),
                load_cpus_s => cbench_bench_cpus:cpu_list(LC), timestamp => Ts},
    cbench_bench_cpus:pin_self(maps:get(load_cpus_s, Cfg)),
    io:format("cbench bench: profile ~s, server CPUs ~s, load CPUs ~s, results in ~s~n",
              [maps:get(profile, Cfg), maps:get(server_cpus_s, Cfg), maps:get(load_cpus_s, Cfg), Out]),
    St0 = #{engines => [], peer => undefined, notes => [], node_info => #{}},
    St1 = start_servers(Cfg, St0),
    LoadNodes = try start_load_nodes(Cfg)
                catch throw:Fatal -> cbench_bench_servers:stop_all(St1), throw(Fatal)
                end,
    try
        St2 = measure(Cfg#{load_nodes => LoadNodes}, load_nodes_note(Cfg, St1)),
        cbench_bench_servers:stop_all(St2),
        cbench_bench_report:write(Cfg, St2),
        0
    catch
        throw:{dry_run, _} ->
            _ = file:del_dir(Out),
            0
    after
        cbench_bench_nodes:stop(LoadNodes),
        cbench_bench_servers:stop_all(St1),
        case maps:get(keep_tmp, Cfg) of
            true -> ok;
            false ->
                _ = file:del_dir_r(Tmp),
                %% bench/results/tmp itself goes when it is left empty.
                _ = file:del_dir(filename:join([Root, "bench", "results", "tmp"])),
                ok
        end
    end.

%% --nodes: the generator nodes, started when they are not running (a failure ends the run: a
%% measurement from this machine instead would not be the one asked for).
start_load_nodes(#{nodes := Nodes} = Cfg) ->
    io:format("load generator nodes: ~s~n", [string:join([atom_to_list(N) || N <- Nodes], ", ")]),
    case cbench_bench_nodes:start(Nodes, #{root => maps:get(root, Cfg), cookie => maps:get(cookie, Cfg, undefined)}) of
        {ok, Placement} -> Placement;
        {error, Why} -> throw({fatal, Why})
    end;
start_load_nodes(_) -> undefined.

load_nodes_note(#{nodes := Nodes} = Cfg, St) ->
    cbench_bench_harness:note(St, "the load came from ~b node~s at once (~s), merged exactly by cbench:load/2~s",
         [length(Nodes), case Nodes of [_] -> ""; _ -> "s" end,
          string:join([atom_to_list(N) || N <- Nodes], ", "),
          case maps:get(tool, Cfg) of
              h2load -> "; the throughput phase ran h2load on this machine (--tool h2load)";
              _ -> ""
          end]);
load_nodes_note(_, St) -> St.

start_servers(Cfg = #{engines := Wanted}, St0) ->
    %% varied_paths_router's 100 routes are in every cbench engine for the whole run when it is
    %% measured: exact paths are hashed, so the other cases do not pay for them.
    Router = lists:member(varied_paths_router, maps:get(cases, Cfg)),
    NodeWanted = [E || E <- Wanted, lists:member(E, ?NODE)],
    St1 = case NodeWanted of
              [] -> St0;
              _ ->
                  io:format("starting the node (+S ~b, bound, pinned to CPU ~s)...~n",
                            [length(maps:get(server_cpus, Cfg)), maps:get(server_cpus_s, Cfg)]),
                  case cbench_bench_servers:start_node(#{server_cpus => maps:get(server_cpus_s, Cfg),
                                                        schedulers => length(maps:get(server_cpus, Cfg)),
                                                        root => maps:get(root, Cfg)}) of
                      {ok, Peer, NodeArgs} ->
                          {Rs, Info} = cbench_bench_servers:node_engines(
                                         Peer, #{threads => maps:get(threads, Cfg),
                                                 docroot => maps:get(docroot, Cfg),
                                                 engines => NodeWanted, router => Router}),
                          %% The node also exits by itself when the harness dies (its
                          %% stdin closes); the pid file makes the trap's sweep sure.
                          PidFile = cbench_bench_os:pidfile("node", maps:get(os_pid, Info)),
                          add_results(Rs, St0#{peer => Peer, node_pidfile => PidFile,
                                               node_info => Info#{args => NodeArgs}});
                      {error, Why} ->
                          cbench_bench_harness:note(St0, "the node did not start (~0p): ~s skipped",
                                                    [Why, string:join(NodeWanted, ", ")])
                  end
          end,
    Procs = [{"cbench-server", fun cbench_bench_servers:start_cbench_server/1},
             {"nginx", fun cbench_bench_servers:start_nginx/1},
             {"h2o", fun cbench_bench_servers:start_h2o/1}],
    St2 = lists:foldl(
            fun({Name, Start}, Acc) ->
                    case lists:member(Name, Wanted) of
                        true ->
                            io:format("starting ~s...~n", [Name]),
                            add_results([Start(#{root => maps:get(root, Cfg),
                                                 server_cpus => maps:get(server_cpus_s, Cfg),
                                                 threads => maps:get(threads, Cfg),
                                                 tmp => maps:get(tmp, Cfg),
                                                 docroot => maps:get(docroot, Cfg),
                                                 router => Router})], Acc);
                        false -> Acc
                    end
            end, St1, Procs),
    Targets = [cbench_bench_servers:target(N, U) || {N, U} <- maps:get(targets, Cfg)],
    %% Columns in the order of ?ENGINES, then the targets.
    Order = fun(#{name := N}) ->
                    case string:str(string:join(?ENGINES, " "), N) of 0 -> 99; I -> I end
            end,
    Es = lists:sort(fun(A, B) -> Order(A) =< Order(B) end, maps:get(engines, St2)),
    St2#{engines => Es ++ Targets}.

add_results(Rs, St) ->
    lists:foldl(fun({ok, E}, Acc = #{engines := Es}) -> Acc#{engines => Es ++ [E]};
                   ({skip, Name, Why}, Acc) -> cbench_bench_harness:note(Acc, "~s skipped: ~s", [Name, Why])
                end, St, Rs).

%% ---------------------------------------------------------------------------
%% Measuring

measure(_Cfg, St0 = #{engines := []}) ->
    St1 = cbench_bench_harness:note(St0, "nothing to measure: no engine could be started", []),
    St1#{results => [], latency => [], support => []};
measure(Cfg, St0) ->
    io:format("probing what each engine serves...~n"),
    {Plan, St1} = plan(Cfg, St0),
    NThr = length(Plan) * maps:get(runs, Cfg),
    ThrSecs = maps:get(duration, Cfg) + 1,
    LatEst = latency_estimate(Cfg, Plan),
    Total = NThr + LatEst,
    io:format("~b throughput runs of ~bs~s: about ~s~n",
              [NThr, ThrSecs,
               case LatEst of 0 -> ""; _ -> io_lib:format(" and up to ~b latency runs", [LatEst]) end,
               cbench_bench_harness:fmt_secs(length(Plan) * maps:get(warmup, Cfg) + NThr * ThrSecs
                        + LatEst * lat_secs(Cfg))]),
    case maps:get(dry_run, Cfg, false) of
        true ->
            [io:format("  ~s ~s ~s~n", [P, C, N]) || {P, C, #{name := N}} <- Plan],
            throw({dry_run, St1});
        false -> ok
    end,
    Prog = #{done => 0, total => Total, t0 => erlang:monotonic_time(second)},
    {Results, Prog1, St2} = throughput(Cfg, Plan, Prog, St1),
    {Lat, _Prog2, St3} = case maps:get(latency, Cfg) of
                             true -> latency(Cfg, Plan, Results, Prog1, St2);
                             false -> {[], Prog1, St2}
                         end,
    Unsupported = [#{proto => P, 'case' => C, engine => E, status => unsupported}
                   || {P, C, E, false} <- maps:get(support, St3)],
    St3#{results => Results ++ Unsupported, latency => Lat}.

lat_secs(Cfg) -> maps:get(latency_warmup, Cfg, 0) + maps:get(latency_duration, Cfg, 1) + 1.

latency_estimate(Cfg, Plan) ->
    case maps:get(latency, Cfg) of
        false -> 0;
        true ->
            LC = maps:get(latency_cases, Cfg, []),
            LP = maps:get(latency_protos, Cfg, maps:get(protos, Cfg)),
            3 * length([x || {P, C, _} <- Plan, lists:member(C, LC), lists:member(P, LP)])
    end.

%% Which (protocol, case, engine) to measure. cbench's engines serve every route, so
%% one probe per protocol tells whether they speak it; peers and targets are
%% probed case by case and what they do not answer with a 2xx shows `-'.
plan(Cfg, St = #{engines := Es}) ->
    Only = maps:get(only, Cfg),
    Entries =
        [{P, C, E} || P <- maps:get(protos, Cfg), C <- maps:get(cases, Cfg),
                      case maps:find(P, Only) of {ok, L} -> lists:member(C, L); error -> true end,
                      cbench_bench_roadrunner:proto_ok(P, C),
                      E <- Es],
    {Support, St1} =
        lists:foldl(
          fun({P, C, E = #{name := N, cbench := Cb}}, {Acc, S}) ->
                  %% Handler routes exist only where cbench_bench_node installed them.
                  Key = case Cb andalso not lists:member(C, cbench_bench_cases:erl_cases()) of
                            true -> {P, hello, N};
                            false -> {P, C, N}
                        end,
                  case lists:keyfind(Key, 1, Acc) of
                      {Key, Ok} -> {[{{P, C, N}, Ok} | Acc], S};
                      false ->
                          Ok = probe(Cfg, P, element(2, Key), E),
                          S1 = case {Ok, Cb andalso not lists:member(C, cbench_bench_cases:erl_cases())} of
                                   {false, true} ->
                                       cbench_bench_harness:note(
                                         S, "~s does not answer ~s (probe of /hello failed): skipped over ~s",
                                         [N, P, P]);
                                   _ -> S
                               end,
                          {[{{P, C, N}, Ok}, {Key, Ok} | Acc], S1}
                  end
          end, {[], St}, Entries),
    Plan = [{P, C, E} || {P, C, E = #{name := N}} <- Entries,
                         proplists:get_value({P, C, N}, Support) =:= true],
    Sup = lists:usort([{P, C, N, Ok} || {{P, C, N}, Ok} <- Support,
                                        lists:member(C, maps:get(cases, Cfg))]),
    %% Drop the duplicate keys made by the per-protocol probe of cbench engines.
    Sup1 = [{P, C, N, Ok} || {P, C, N, Ok} <- Sup,
                              lists:member({P, C, N}, [{P1, C1, N1} || {P1, C1, #{name := N1}} <- Entries])],
    {Plan, St1#{support => Sup1}}.

probe(Cfg, Proto, Case, E) ->
    case cbench_bench_servers:url(E, Proto, element(1, cbench_bench_cases:case_spec(Case))) of
        undefined -> false;
        Url ->
            Spec = (run_spec(Cfg, Proto, Case, Url))#{clients => 1, threads => 1,
                                                      streams => 1, requests => 2},
            case cbench_bench_h2load:run(Spec#{duration => 5}, maps:get(load_cpus_s, Cfg)) of
                {ok, Out} ->
                    case cbench_bench_h2load:parse(Out) of
                        {ok, #{succeeded := 2, s2xx := 2}} -> true;
                        _ -> false
                    end;
                _ -> false
            end
    end.

run_spec(Cfg, Proto, Case, Url) ->
    {_Path, Body, Hdrs} = cbench_bench_cases:case_spec(Case),
    Data = case Body of
               undefined -> undefined;
               F -> filename:join(maps:get(docroot, Cfg), F)
           end,
    maps:merge(#{url => Url, proto => Proto, clients => maps:get(clients, Cfg),
                 threads => length(maps:get(load_cpus, Cfg)), streams => maps:get(streams, Cfg),
                 headers => Hdrs, data => Data},
               cbench_bench_roadrunner:load(Case)).

throughput(Cfg, Plan, Prog0, St0) ->
    lists:foldl(
      fun({P, C, E = #{name := N}}, {Acc, Prog, St}) ->
              Runs = [begin
                          cbench_bench_harness:progress(Prog, "~s ~s ~s run ~b/~b",
                                                        [P, C, N, I, maps:get(runs, Cfg)]),
                          %% Only the first run warms up: the ones after it follow at once,
                          %% on a server that is already warm.
                          R = maps:without([raw], one_run(Cfg, P, C, E, #{first => I =:= 1})),
                          print_run(R),
                          R
                      end || I <- lists:seq(1, maps:get(runs, Cfg))],
              Prog1 = Prog#{done => maps:get(done, Prog) + length(Runs)},
              Row = summarize(P, C, N, Runs),
              Died = maps:get(died, St, []),
              St1 = case maps:get(status, Row) =:= died andalso not lists:member(N, Died) of
                        true -> (cbench_bench_harness:note(St, "~s died during ~s ~s; its later cases show `died`",
                                      [N, P, C]))#{died => [N | Died]};
                        false -> St
                    end,
              {Acc ++ [Row], Prog1, St1}
      end, {[], Prog0, St0}, Plan).

%% One h2load run with resource sampling over the measured window.
one_run(Cfg, Proto, Case, E = #{alive := Alive, pids := PidsF, mem := Mem}, Extra) ->
    case Alive() of
        false -> #{status => died};
        true ->
            Url = cbench_bench_servers:url(E, Proto, element(1, cbench_bench_cases:case_spec(Case))),
            {Warm, Dur} = case Extra of
                              #{rate := _, warm := true} -> {maps:get(latency_warmup, Cfg), maps:get(latency_duration, Cfg)};
                              #{rate := _} -> {0, maps:get(latency_duration, Cfg)};
                              #{first := false} -> {0, maps:get(duration, Cfg)};
                              _ -> {maps:get(warmup, Cfg), maps:get(duration, Cfg)}
                          end,
            Spec = maps:merge((run_spec(Cfg, Proto, Case, Url))#{duration => Dur, warmup => Warm},
                              maps:without([first, warm], Extra)),
            Self = self(),
            Ref = make_ref(),
            Tool = tool(Extra, Cfg),
            Runner = spawn_link(fun() -> Self ! {Ref, run_tool(Tool, Cfg, Spec, Self)} end),
            LoadPid = receive {os_pid, Runner, LP} -> LP after 5000 -> undefined end,
            Pids = PidsF(),
            timer:sleep(Warm * 1000),
            Sampler = case Pids of
                          [] -> undefined;
                          _ -> S = cbench_bench_sampler:start(Pids, Mem),
                               receive {S, started} -> S end
                      end,
            %% The load generator's own CPU tells whether it, not the server, was the limit.
            LoadSampler = case LoadPid of
                              undefined -> undefined;
                              _ -> LS = cbench_bench_sampler:start([LoadPid], undefined),
                                   receive {LS, started} -> LS end
                          end,
            Res = receive {Ref, R} -> R end,
            unlink(Runner),
            Samp = case Sampler of
                       undefined -> #{};
                       _ -> cbench_bench_sampler:stop(Sampler)
                   end,
            LoadPct = case LoadSampler of
                          undefined -> undefined;
                          _ -> maps:get(cpu_pct, cbench_bench_sampler:stop(LoadSampler), undefined)
                      end,
            Dead = not Alive(),
            R0 = finish_run(Tool, Res, Samp, Dead, maps:get(clients, Cfg)),
            R0#{procs => length(Pids), load_cpu_pct => LoadPct,
                load_bound => load_bound(LoadPct, length(maps:get(load_cpus, Cfg)))}
    end.

%% The load generator is taken as the limit when it kept its CPUs over 90% busy.
load_bound(undefined, _) -> false;
load_bound(Pct, NCpus) -> Pct >= 90 * NCpus.

%% The throughput phase uses --tool (cbench-load by default, closed loop); the latency
%% ladder always uses cbench-load open loop (Extra has its rate).
tool(#{rate := _}, _Cfg) -> cbench_load;
tool(_, Cfg) -> maps:get(tool, Cfg, cbench_load).

run_tool(h2load, Cfg, Spec, Notify) ->
    cbench_bench_h2load:run(Spec, maps:get(load_cpus_s, Cfg), Notify);
run_tool(cbench_load, Cfg = #{load_nodes := #{} = Placement}, Spec, Notify) ->
    %% No cbench-load process here to sample: the nodes report their own CPU time.
    _ = is_pid(Notify) andalso (Notify ! {os_pid, self(), undefined}),
    cbench_bench_nodes:run(Spec, Placement, maps:get(load_cpus, Cfg));
run_tool(cbench_load, Cfg, Spec, Notify) ->
    Json = filename:join(maps:get(tmp, Cfg), "cbench-load-" ++ integer_to_list(erlang:unique_integer([positive])) ++ ".json"),
    cbench_bench_load:run(Spec#{json => Json}, maps:get(load_cpus_s, Cfg), Notify).

%% {ok, h2load-shaped summary, the tool's own result} | {error, Why}, and the output for the notes.
parse_tool(h2load, {ok, Out}) -> {cbench_bench_h2load:parse(Out), undefined, Out};
parse_tool(h2load, {error, _, Out}) -> {cbench_bench_h2load:parse(Out), undefined, Out};
parse_tool(cbench_load, {ok, J}) -> {{ok, cbench_bench_load:parsed(J)}, J, <<>>};
parse_tool(cbench_load, {error, Why, Out}) -> {{error, Why}, undefined, Out}.

finish_run(Tool, Res, Samp, Dead, Clients) ->
    {Parsed, Raw, Out} = parse_tool(Tool, Res),
    case Parsed of
        _ when Dead -> #{status => died};
        {ok, P = #{rps := Rps}} ->
            Status = case Res of
                         {error, timeout, _} -> errors;
                         _ -> cbench_bench_h2load:classify(P, Clients)
                     end,
            CpuUs = case Samp of
                        #{cpu_pct := Pct} when Rps > 0 -> Pct / 100 / Rps * 1.0e6;
                        _ -> undefined
                    end,
            Counts = maps:with([total, succeeded, failed, errored, timeout, s2xx, s3xx, s4xx, s5xx], P),
            maps:merge(#{status => Status, rps => Rps, counts => Counts, cpu_us => CpuUs,
                         cpu_pct => maps:get(cpu_pct, Samp, undefined),
                         rss_kb => maps:get(rss_peak_kb, Samp, undefined),
                         beam => maps:get(beam_peak, Samp, undefined)},
                       case Raw of undefined -> #{}; _ -> #{raw => Raw} end);
        {error, Why} ->
            #{status => errors, why => iolist_to_binary(io_lib:format("~0p", [Why])),
              tail => tail(Out)}
    end.

tail(Out) ->
    S = byte_size(Out),
    binary:part(Out, max(0, S - 300), min(S, 300)).

%% The row of a case and engine: the median run's figures, `~' when the runs are
%% more than 5% apart, and the worst status of the runs.
summarize(P, C, N, Runs) ->
    Base = #{proto => P, 'case' => C, engine => N, runs => Runs},
    Statuses = [maps:get(status, R) || R <- Runs],
    Worst = hd([S || S <- [died, errors, stalled, ok], lists:member(S, Statuses)]),
    Ok = [R || R = #{rps := _} <- Runs],
    case Ok of
        [] -> Base#{status => Worst};
        _ ->
            Rpss = [maps:get(rps, R) || R <- Ok],
            Med = cbench_bench_stats:median(Rpss),
            %% The run nearest the median carries the resource figures.
            {_, MedRun} = hd(lists:sort([{abs(maps:get(rps, R) - Med), R} || R <- Ok])),
            Base#{status => Worst, rps => Med,
                  spread => cbench_bench_stats:spread_mark(Rpss),
                  cpu_us => maps:get(cpu_us, MedRun), cpu_pct => maps:get(cpu_pct, MedRun),
                  rss_kb => maps:get(rss_kb, MedRun), beam => maps:get(beam, MedRun),
                  load_cpu_pct => maps:get(load_cpu_pct, MedRun, undefined),
                  load_bound => maps:get(load_bound, MedRun, false)}
    end.

latency(Cfg, Plan, Results, Prog0, St0) ->
    LC = maps:get(latency_cases, Cfg, []),
    Clients = maps:get(clients, Cfg),
    LP = maps:get(latency_protos, Cfg, maps:get(protos, Cfg)),
    Groups = lists:usort([{P, C} || {P, C, _} <- Plan, lists:member(C, LC), lists:member(P, LP)]),
    lists:foldl(
      fun({P, C}, {Acc, Prog, St}) ->
              Peaks = [R || R = #{proto := P1, 'case' := C1, status := ok, rps := _} <- Results,
                            P1 =:= P, C1 =:= C],
              case Peaks of
                  [] -> {Acc, Prog, St};
                  _ ->
                      Peak = lists:max([maps:get(rps, R) || R <- Peaks]),
                      Rates = cbench_bench_stats:ladder(Peak, Clients),
                      Es = [E || {P1, C1, E} <- Plan, P1 =:= P, C1 =:= C],
                      lists:foldl(
                        fun({Rate, E = #{name := N}}, {A, Pr, S}) ->
                                cbench_bench_harness:progress(Pr, "latency ~s ~s ~s at ~s req/s",
                                         [P, C, N, cbench_bench_stats:fmt_int(Rate)]),
                                %% zrk's method: one warm-up per engine, at the lowest rate.
                                Row = latency_run(Cfg, P, C, E, Rate, Rate =:= hd(Rates)),
                                print_lat(Row),
                                {A ++ [Row], Pr#{done => maps:get(done, Pr) + 1}, S}
                        end, {Acc, Prog, St}, [{R, E} || R <- Rates, E <- Es])
              end
      end, {[], Prog0, St0}, Groups).

%% One open-loop run of cbench-load at Rate (requests per second over all the
%% connections, on an even schedule); p50/p99/p99.9 are corrected for coordinated
%% omission (measured from each request's intended send time).
latency_run(Cfg, P, C, E = #{name := N}, Rate, Warm) ->
    R = one_run(Cfg, P, C, E, #{rate => Rate, warm => Warm}),
    Base = #{proto => P, 'case' => C, engine => N, rate => Rate},
    case R of
        #{status := died} -> Base#{status => died};
        #{raw := J, status := S} ->
            L = cbench_bench_load:latency(J),
            Answered = maps:get(answered, L),
            Status = if
                         S =:= errors -> errors;
                         true ->
                             case cbench_bench_stats:overloaded(Rate, Answered) of
                                 true -> overloaded;
                                 false -> ok
                             end
                     end,
            maps:merge(maps:without([offered, max], L),
                       Base#{status => Status,
                             cpu_us => maps:get(cpu_us, R, undefined),
                             cpu_pct => maps:get(cpu_pct, R, undefined),
                             load_cpu_pct => maps:get(load_cpu_pct, R, undefined),
                             load_bound => cbench_bench_stats:lag_bound(maps:get(lag_p99, L),
                                                                        maps:get(p99, L))});
        _ -> Base#{status => errors}
    end.

%% ---------------------------------------------------------------------------
%% Progress

print_run(#{status := S, rps := Rps} = R) ->
    io:format("~s req/s~s~s~s~n", [cbench_bench_stats:fmt_int(Rps),
                                 case maps:get(cpu_us, R, undefined) of
                                     undefined -> "";
                                     Us -> io_lib:format(", ~.2f us CPU/req", [Us])
                                 end,
                                 case S of ok -> ""; _ -> io_lib:format(" (~s)", [S]) end,
                                 case maps:get(load_bound, R, false) of
                                     true -> " (load generator saturated)";
                                     false -> ""
                                 end]);
print_run(#{status := S}) ->
    io:format("~s~n", [S]).

print_lat(#{status := S, p99 := P99, answered := A}) ->
    io:format("p99 ~s, answered ~s req/s~s~n",
              [cbench_bench_stats:fmt_us(P99), cbench_bench_stats:fmt_int(A),
               case S of ok -> ""; _ -> io_lib:format(" (~s)", [S]) end]);
print_lat(#{status := S}) ->
    io:format("~s~n", [S]).

