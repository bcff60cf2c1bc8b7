%%% @doc cbench:load/2: runs the cbench-load program (priv/cbench_load, or build/cbench-load of a
%%% source tree) against a URL for a bounded time and returns its results as a map.
%%%
%%% The program writes its results as an Erlang term (`--erl FILE', read back with
%%% file:consult/1) beside the JSON a shell user gets with `--json': OTP 25 has no json module, and
%%% a term file needs no decoder here. The keys are those of the JSON (docs/bench.md,
%%% "cbench-load"): atoms, with HTTP statuses as integer keys.
-module(cbench_load).

-export([run/2, args/2, exe_path/0]).
%% args/2 and exe_path/0: the command line and the program, for the benchmark harness and tests.
-ignore_xref([{args, 2}, {exe_path, 0}]).

-define(KEYS, [proto, connections, depth, new_conn, threads, cpus, duration, warmup, rate,
               method, paths, headers, body, body_file, timeout, ws_size,
               cacert, ca_pem, insecure, resume, tls_version, ciphers, tls13_ciphers, connect_to]).

%% @doc Runs a load; see cbench:load/2.
-spec run(string() | binary(), map()) -> {ok, map()} | {error, term()}.
run(Url, Opts) when is_binary(Url), is_map(Opts) ->
    run(binary_to_list(Url), Opts);
run(Url, Opts) when is_list(Url), is_map(Opts) ->
    case io_lib:printable_latin1_list(Url) of
        false -> error(badarg);
        true ->
            case exe_path() of
                {error, _} = E -> E;
                {ok, Exe} -> with_tmp(fun(Tmp) -> run(Exe, Url, Opts, Tmp) end)
            end
    end;
run(_, _) ->
    error(badarg).

run(Exe, Url, Opts, Tmp) ->
    BodyFile = filename:join(Tmp, "body"),
    CaFile = filename:join(Tmp, "ca.pem"),
    case args(Url, Opts#{'$body_file' => BodyFile, '$ca_file' => CaFile}) of
        {error, _} = E -> E;
        {ok, Args, Bound} ->
            ok = case Opts of
                     #{body := Body} -> file:write_file(BodyFile, Body);
                     _ -> ok
                 end,
            ok = case Opts of
                     #{ca_pem := Pem} -> file:write_file(CaFile, Pem);
                     _ -> ok
                 end,
            Out = filename:join(Tmp, "result.erl"),
            exec(Exe, Args ++ ["--quiet", "--erl", Out], Bound, Out)
    end.

%% @doc The command line for a URL and options, and how long the run may take at most (ms);
%% {error, {bad_option, Key, Value, Allowed}} for an unknown key or a bad value, the shape of
%% cbench:start_server/2's option errors (Allowed: allowed/1, or `{known, Keys}').
-spec args(string(), map()) ->
          {ok, [string()], pos_integer()} | {error, {bad_option, term(), term(), term()}}.
args(Url, Opts) ->
    case [K || K <- maps:keys(Opts), not lists:member(K, ['$body_file', '$ca_file' | ?KEYS])] of
        [Bad | _] -> {error, {bad_option, Bad, maps:get(Bad, Opts), {known, ?KEYS}}};
        [] ->
            try
                A = lists:append([opt(K, maps:get(K, Opts), Opts) || K <- ?KEYS, maps:is_key(K, Opts)]),
                Secs = maps:get(duration, Opts, 10) + maps:get(warmup, Opts, 0) + maps:get(timeout, Opts, 10),
                {ok, A ++ [Url], round(Secs * 1000) + 30000}
            catch throw:{bad, K} -> {error, {bad_option, K, maps:get(K, Opts), allowed(K)}}
            end
    end.

%% What each option takes, in the words of cbench_opts (docs/bench.md).
allowed(proto) -> {one_of, [h1, h2c, h2, ws]};
allowed(K) when K =:= connections; K =:= depth; K =:= threads; K =:= ws_size -> {integer, 1, infinity};
allowed(K) when K =:= new_conn; K =:= insecure; K =:= resume -> boolean;
allowed(tls_version) -> {one_of, ['tlsv1.2', 'tlsv1.3']};
allowed(K) when K =:= cacert; K =:= ciphers; K =:= tls13_ciphers; K =:= connect_to -> string;
allowed(ca_pem) -> binary;
%% CPUs 0 to 1023: what a CPU set holds (CPU_SETSIZE), on any machine. Whether the CPU is one the program
%% may run on is for the program to say on the node it runs on ({error, {usage, Text}}).
allowed(cpus) -> {list, {integer, 0, 1023}};
allowed(K) when K =:= duration; K =:= timeout -> {seconds, greater_than_0};
allowed(K) when K =:= warmup; K =:= rate -> {seconds, at_least_0};
allowed(K) when K =:= method; K =:= body_file -> string;
allowed(paths) -> {list, string};
allowed(headers) -> {list, {string, string}};
allowed(body) -> binary.

opt(proto, P, _) when P =:= h1; P =:= h2c; P =:= h2; P =:= ws -> ["--proto", atom_to_list(P)];
opt(connections, N, _) -> ["--connections", pos(connections, N)];
opt(depth, N, _) -> ["--depth", pos(depth, N)];
opt(new_conn, true, _) -> ["--new-conn"];
opt(new_conn, false, _) -> [];
opt(threads, N, _) -> ["--threads", pos(threads, N)];
opt(cpus, [_ | _] = Cs, _) ->
    ["--cpus", string:join([case is_integer(C) andalso C >= 0 andalso C =< 1023 of
                                true -> integer_to_list(C);
                                false -> throw({bad, cpus})
                            end || C <- list(cpus, Cs)], ",")];
opt(duration, S, _) -> ["--duration", secs(duration, S, false)];
opt(warmup, S, _) -> ["--warmup", secs(warmup, S, true)];
opt(rate, R, _) -> ["--rate", secs(rate, R, true)];
opt(timeout, S, _) -> ["--timeout", secs(timeout, S, false)];
opt(ws_size, N, _) -> ["--ws-size", pos(ws_size, N)];
opt(method, M, _) -> ["--method", str(method, M)];
opt(paths, [_ | _] = Ps, _) -> lists:append([["--path", str(paths, P)] || P <- list(paths, Ps)]);
opt(headers, Hs, _) when is_list(Hs) ->
    lists:append([case H of
                      {N, V} -> ["--header", str(headers, N) ++ ": " ++ str(headers, V)];
                      _ -> throw({bad, headers})
                  end || H <- list(headers, Hs)]);
opt(body, B, #{'$body_file' := F}) when is_binary(B) -> ["--body-file", F];
opt(body_file, F, _) -> ["--body-file", str(body_file, F)];
%% TLS (https:// and wss:// URLs): the CA as a file, or as PEM (written to a file of the run's).
opt(cacert, F, _) -> ["--cacert", str(cacert, F)];
opt(ca_pem, P, #{'$ca_file' := F}) when is_binary(P) -> ["--cacert", F];
opt(insecure, true, _) -> ["--insecure"];
opt(insecure, false, _) -> [];
opt(resume, true, _) -> [];
opt(resume, false, _) -> ["--no-resume"];
opt(tls_version, 'tlsv1.2', _) -> ["--tls-version", "1.2"];
opt(tls_version, 'tlsv1.3', _) -> ["--tls-version", "1.3"];
opt(ciphers, L, _) -> ["--ciphers", str(ciphers, L)];
opt(tls13_ciphers, L, _) -> ["--tls13-ciphers", str(tls13_ciphers, L)];
opt(connect_to, H, _) -> ["--connect-to", str(connect_to, H)];
opt(K, _, _) -> throw({bad, K}).

%% L when it is a proper list (a generator over an improper one raises bad_generator).
list(K, L) ->
    try length(L) of
        _ -> L
    catch error:badarg -> throw({bad, K})
    end.

pos(_, N) when is_integer(N), N > 0 -> integer_to_list(N);
pos(K, _) -> throw({bad, K}).

secs(_, S, _) when is_integer(S), S > 0 -> integer_to_list(S);
%% The shortest text that reads back as S (strtod takes "1.0e-7"): a fixed number of decimals turned a rate
%% of 1.0e-7 into "0.000000", the closed loop.
secs(_, S, _) when is_float(S), S > 0 -> float_to_list(S, [short]);
secs(_, 0, true) -> "0";
secs(K, _, _) -> throw({bad, K}).

str(_, A) when is_atom(A) -> atom_to_list(A);
str(K, B) when is_binary(B) -> str(K, binary_to_list(B));
str(K, S) when is_list(S) ->
    case io_lib:printable_latin1_list(S) of
        true -> S;
        false -> throw({bad, K})
    end;
str(K, _) -> throw({bad, K}).

exec(Exe, Args, Bound, Out) ->
    Port = open_port({spawn_executable, Exe},
                     [{args, Args}, exit_status, stderr_to_stdout, binary, hide]),
    {os_pid, OsPid} = erlang:port_info(Port, os_pid),
    Deadline = erlang:monotonic_time(millisecond) + Bound,
    case collect(Port, [], Deadline) of
        %% 3: a run in which no request succeeded; its results say how (requests.ok is 0).
        {S, _} when S =:= 0; S =:= 3 ->
            case file:consult(Out) of
                {ok, [Map]} when is_map(Map) -> {ok, Map};
                Other -> {error, {bad_result, Other}}
            end;
        {2, Text} -> {error, {usage, Text}};
        {timeout, Text} ->
            _ = os:cmd("kill -9 " ++ integer_to_list(OsPid)),
            catch port_close(Port),
            {error, {timeout, Text}};
        {Status, Text} -> {error, {exit, Status, Text}}
    end.

collect(Port, Acc, Deadline) ->
    Left = max(0, Deadline - erlang:monotonic_time(millisecond)),
    receive
        {Port, {data, D}} -> collect(Port, [D | Acc], Deadline);
        {Port, {exit_status, S}} -> {S, iolist_to_binary(lists:reverse(Acc))}
    after Left ->
        {timeout, iolist_to_binary(lists:reverse(Acc))}
    end.

with_tmp(Fun) ->
    Dir = cbench_fixture:fresh_dir("cbench-load"),
    try Fun(Dir)
    after _ = file:del_dir_r(Dir)
    end.

%% @doc Where the program is: $CBENCH_LOAD when set (the sanitizer run of the tests uses it),
%% else priv/cbench_load of the cbench application, or build/cbench-load of the source tree its
%% ebin/ sits in (under _build/ too), or cbench-load on the PATH.
-spec exe_path() -> {ok, file:filename()} | {error, {not_built, file:filename()}}.
exe_path() ->
    case os:getenv("CBENCH_LOAD") of
        false -> find_exe();
        "" -> find_exe();
        Exe ->
            case filelib:is_regular(Exe) of
                true -> {ok, Exe};
                false -> {error, {not_built, Exe}}
            end
    end.

find_exe() ->
    Ebin = filename:dirname(code:which(?MODULE)),
    Priv = case code:priv_dir(cbench) of
               {error, bad_name} -> filename:join(filename:dirname(Ebin), "priv");
               Dir -> Dir
           end,
    Candidates = [filename:join(Priv, "cbench_load") |
                  [filename:join([Root, "build", "cbench-load"]) || Root <- source_roots(Ebin)]],
    case [F || F <- Candidates, filelib:is_regular(F)] of
        [F | _] -> {ok, F};
        [] ->
            case os:find_executable("cbench-load") of
                false -> {error, {not_built, hd(Candidates)}};
                F -> {ok, F}
            end
    end.

%% ebin/ in the source tree, or _build/PROFILE/lib/cbench/ebin under it.
source_roots(Ebin) ->
    App = filename:dirname(Ebin),
    [App, filename:dirname(filename:dirname(filename:dirname(filename:dirname(App))))].
