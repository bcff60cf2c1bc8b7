%% @doc The load generators of `make bench NODES=...' (`--nodes'): cbench-load runs on those nodes at
%% once through cbench:load/2 with `nodes' (erl/cbench_cluster.erl), and their histograms are merged
%% exactly (docs/bench.md, "More than one machine").
%%
%% A node of the list that answers a ping is used as it is (it must have cbench on its code path,
%% with cbench-load built) and left running; any other is started here with cbench_peers (on this
%% machine when its host is this machine's, over ssh otherwise, with the same cbench build at the
%% same path) and stopped at the end. The harness becomes a distributed node to reach them: long
%% names when the nodes' hosts have a dot (127.0.0.1, a.example), short names otherwise.
-module(cbench_bench_nodes).

-export([parse/1, start/2, stop/1, run/3, shape/1]).

%% @doc Nodes from a comma-separated list of NAME@HOST; throws {usage, Text} on a bad one.
-spec parse(string()) -> [node()].
parse(L) ->
    Ns = [case string:split(N, "@") of
              [A, H] when A =/= "", H =/= "" -> N;
              _ -> throw({usage, "bad node '" ++ N ++ "' in --nodes (expected NAME@HOST)"})
          end || N <- string:lexemes(L, ",")],
    case {Ns, length(lists:usort(Ns)) =:= length(Ns), lists:usort([long(N) || N <- Ns])} of
        {[], _, _} -> throw({usage, "--nodes is empty"});
        {_, false, _} -> throw({usage, "--nodes names a node twice"});
        {_, _, [_, _]} -> throw({usage, "--nodes mixes long (with a dot) and short host names"});
        _ -> [list_to_atom(N) || N <- Ns]
    end.

long(N) -> lists:member($., host(N)).

host(N) when is_atom(N) -> host(atom_to_list(N));
host(N) -> lists:last(string:split(N, "@")).

%% @doc Makes the harness a distributed node and starts the nodes that do not answer yet.
%% Opts: root (the source tree: cbench's ebin under it), cookie (undefined: this node's), pin (a
%% CPU list: the nodes started on this machine are pinned to it with taskset).
%% Returns the placement (for run/3 and stop/1) or {error, Why}.
-spec start([node()], map()) -> {ok, map()} | {error, string()}.
start(Nodes, Opts) ->
    Root = maps:get(root, Opts),
    CbEbin = filename:join([Root, "_build", "default", "lib", "cbench", "ebin"]),
    _ = code:add_patha(CbEbin),
    case code:ensure_loaded(cbench) of
        {module, cbench} -> start_dist(Nodes, Opts#{code_path => [CbEbin]});
        _ -> {error, "cbench is not built (rebar3 compile): " ++ CbEbin ++ " has no cbench module"}
    end.

start_dist(Nodes, Opts) ->
    Long = long(hd(Nodes)),
    AllLocal = lists:all(fun(N) -> local(host(N)) end, Nodes),
    Name = case Long andalso AllLocal of
               true -> list_to_atom("cbench_bench_" ++ os:getpid() ++ "@127.0.0.1");
               false -> list_to_atom("cbench_bench_" ++ os:getpid())
           end,
    case cbench_dist:ensure_started(Name, case Long of true -> longnames; false -> shortnames end) of
        ok ->
            _ = case maps:get(cookie, Opts, undefined) of
                    undefined -> ok;
                    C -> [erlang:set_cookie(N, C) || N <- Nodes]
                end,
            start_nodes(Nodes, Opts, #{nodes => Nodes, local => AllLocal, peers => [], pidfiles => []});
        {error, Why} -> {error, Why}
    end.

start_nodes([N | Rest], Opts, Acc = #{peers := Ps, pidfiles := Fs}) ->
    case net_adm:ping(N) of
        pong ->
            io:format("  load node ~s: running, used as it is~n", [N]),
            start_nodes(Rest, Opts, Acc);
        pang ->
            [Name, Host] = string:split(atom_to_list(N), "@"),
            Spec0 = #{name => Name, host => Host},
            Spec = case local(Host) of
                       true -> Spec0;
                       false -> Spec0#{exec => {"ssh", [Host, os:find_executable("erl")]}}
                   end,
            POpts = maps:with([code_path, cookie], Opts),
            case cbench_peers:start([Spec], maps:filter(fun(_, V) -> V =/= undefined end, POpts)) of
                {ok, [P = #{os_pid := OsPid}]} ->
                    io:format("  load node ~s: started (~s)~n",
                              [N, case local(Host) of true -> "on this machine"; false -> "over ssh" end]),
                    %% A node on this machine is swept by bench/run.sh's trap like every child.
                    F = case local(Host) of
                            true ->
                                _ = case maps:get(pin, Opts, undefined) of
                                        undefined -> ok;
                                        Cpus -> os:cmd("taskset -a -p -c " ++ Cpus ++ " " ++ OsPid ++ " >/dev/null 2>&1")
                                    end,
                                cbench_bench_os:pidfile("load-node", list_to_integer(OsPid));
                            false -> undefined
                        end,
                    start_nodes(Rest, Opts, Acc#{peers => [P | Ps], pidfiles => [F | Fs]});
                {error, Why} ->
                    stop(Acc),
                    {error, lists:flatten(io_lib:format("load node ~s did not start: ~0p", [N, Why]))}
            end
    end;
start_nodes([], _, Acc) ->
    {ok, Acc}.

%% This machine's names for itself.
local(Host) ->
    {ok, Short} = inet:gethostname(),
    lists:member(Host, ["127.0.0.1", "localhost", Short, net_adm:localhost()]).

%% @doc Stops the nodes that start/2 started (the running ones are left as they were).
-spec stop(map() | undefined) -> ok.
stop(undefined) -> ok;
stop(#{peers := Ps, pidfiles := Fs}) ->
    cbench_peers:stop(Ps),
    [cbench_bench_os:rm_pidfile(F) || F <- Fs],
    ok.

%% @doc One load of the harness (a cbench_bench_load spec: url, proto, clients, threads,
%% streams, depth, duration, warmup, headers, data, rate, paths, ws_size) from every node at once.
%% Cpus (the load CPUs) pin cbench-load on each node when the nodes are all on this machine.
%% Returns the merged result in the shape of cbench-load's JSON, as cbench_bench_load:run/3 does,
%% or {error, Why, Output}; a node lost mid-run makes the run an error naming it.
-spec run(map(), map(), [non_neg_integer()]) -> {ok, map()} | {error, term(), binary()}.
run(Spec, #{nodes := Nodes, local := Local}, Cpus) ->
    case cbench:load(target(Spec), opts(Spec, Nodes, Local, Cpus)) of
        {ok, #{failed := Failed}} when map_size(Failed) > 0 ->
            {error, {nodes_failed, Failed}, <<>>};
        {ok, R} -> {ok, shape(maps:without([nodes, failed, hist], R))};
        {error, Why} -> {error, Why, <<>>}
    end.

target(#{url := Url} = Spec) ->
    case maps:get(ws_size, Spec, undefined) of
        undefined -> Url;
        _ -> "ws://" ++ string:prefix(Url, "http://")
    end.

opts(Spec = #{proto := Proto, duration := D}, Nodes, Local, Cpus) ->
    Clients = maps:get(clients, Spec, 50),
    Depth = case Proto of h1 -> maps:get(depth, Spec, 1); h2c -> maps:get(streams, Spec, 10) end,
    Base = #{nodes => Nodes, proto => Proto, connections => Clients, depth => Depth,
             threads => max(1, min(maps:get(threads, Spec, 1), Clients div length(Nodes))),
             duration => D, warmup => maps:get(warmup, Spec, 0),
             headers => maps:get(headers, Spec, [])},
    Opt = fun(_, undefined, M) -> M;
             (_, [], M) -> M;
             (K, V, M) -> M#{K => V}
          end,
    %% The body travels with the call: a generator on another host has no copy of the file.
    Body = case maps:get(data, Spec, undefined) of
               undefined -> undefined;
               F -> {ok, B} = file:read_file(F), B
           end,
    M1 = Opt(body, Body, Opt(rate, maps:get(rate, Spec, undefined), Opt(paths, maps:get(paths, Spec, []), Base))),
    M2 = case maps:get(ws_size, Spec, undefined) of
             undefined -> M1;
             Size -> (maps:without([depth, body], M1))#{proto => ws, ws_size => Size}
         end,
    case Local of
        true -> M2#{cpus => Cpus};
        false -> M2
    end.

%% @doc A result of cbench:load/2 with the keys of cbench-load's JSON as cbench_bench_json
%% decodes it: binaries (atoms and HTTP statuses alike), maps within maps.
-spec shape(term()) -> term().
shape(M) when is_map(M) ->
    maps:from_list([{key(K), shape(V)} || {K, V} <- maps:to_list(M)]);
shape(L) when is_list(L) -> [shape(X) || X <- L];
shape(undefined) -> null;
shape(X) -> X.

key(K) when is_atom(K) -> atom_to_binary(K);
key(K) when is_integer(K) -> integer_to_binary(K);
key(K) -> K.
