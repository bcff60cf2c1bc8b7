%% @doc cbench-load as the harness's load generator: its command line, running it
%% bounded in time, and reading its JSON (docs/bench.md, "cbench-load").
%%
%% The throughput phase runs it closed loop (connections x depth, as fast as the
%% server answers); the latency ladder runs it open loop at a fixed rate and reads
%% the corrected percentiles (from each request's intended send time). The
%% result is also given the shape of h2load's parsed summary (parsed/1) so that
%% the same classification (ok, errors, stalled) applies to both tools.
-module(cbench_bench_load).

-export([path/0, version/0, args/1, run/3, parsed/1, latency/1]).

%% @doc build/cbench-load of the source tree the harness runs from.
-spec path() -> string().
path() ->
    Root = case os:getenv("CBENCH_ROOT") of
               false -> {ok, D} = file:get_cwd(), D;
               D -> D
           end,
    filename:join([Root, "build", "cbench-load"]).

%% @doc cbench-load's version line, or undefined when it is not built.
-spec version() -> string() | undefined.
version() ->
    case filelib:is_regular(path()) of
        false -> undefined;
        true -> string:trim(os:cmd(path() ++ " --version"))
    end.

%% @doc The argument list for one run. Spec keys: url, proto (h1 | h2c), clients,
%% threads, streams (h2c streams per connection), depth (HTTP/1.1 pipelining depth,
%% default 1), paths (requested round robin instead of the URL's), ws_size (WebSocket
%% echo of messages of that size on the URL as ws://), duration,
%% warmup, headers, data (a body file or undefined), rate (requests per second in
%% all: open loop; undefined: closed loop), json (the results file).
-spec args(map()) -> [string()].
args(Spec = #{url := Url, proto := Proto, json := Json}) ->
    Clients = maps:get(clients, Spec, 50),
    Depth = case Proto of h1 -> maps:get(depth, Spec, 1); h2c -> maps:get(streams, Spec, 10) end,
    %% WebSocket messages (websocket_msg_throughput): the ws mode on the same URL as ws://.
    {P, Target, Ws} = case maps:get(ws_size, Spec, undefined) of
                          undefined -> {atom_to_list(Proto), Url, []};
                          Size -> {"ws", "ws://" ++ string:prefix(Url, "http://"),
                                   ["--ws-size", integer_to_list(Size)]}
                      end,
    Base = ["--proto", P, "--connections", integer_to_list(Clients),
            "--depth", integer_to_list(Depth),
            "--threads", integer_to_list(min(maps:get(threads, Spec, 1), Clients)),
            "--duration", num(maps:get(duration, Spec)), "--warmup", num(maps:get(warmup, Spec, 0))],
    Hdrs = lists:append([["--header", N ++ ": " ++ V] || {N, V} <- maps:get(headers, Spec, [])]),
    Data = case maps:get(data, Spec, undefined) of
               undefined -> [];
               Path -> ["--body-file", Path]
           end,
    Rate = case maps:get(rate, Spec, undefined) of
               undefined -> [];
               R -> ["--rate", num(R)]
           end,
    Paths = lists:append([["--path", Pa] || Pa <- maps:get(paths, Spec, [])]),
    Base ++ Hdrs ++ Data ++ Rate ++ Paths ++ Ws ++ ["--json", Json, "--quiet", Target].

num(N) when is_integer(N) -> integer_to_list(N);
num(F) when is_float(F) -> float_to_list(F, [{decimals, 3}, compact]).

%% @doc Runs cbench-load pinned to the load CPUs, bounded by the run's duration,
%% warm-up and its 10 s answer timeout plus a margin. Notify (a pid or undefined) is
%% sent {os_pid, Runner, OsPid}. Returns the decoded JSON (binary keys), also after
%% exit status 3 (a run without a successful request: its errors are classified).
-spec run(map(), string(), pid() | undefined) -> {ok, map()} | {error, term(), binary()}.
run(Spec, LoadCpus, Notify) ->
    Bound = maps:get(duration, Spec, 1) + maps:get(warmup, Spec, 0) + 10 + 15,
    Args = ["-c", LoadCpus, path() | args(Spec)],
    Json = maps:get(json, Spec),
    _ = file:delete(Json),
    Ran = case cbench_bench_os:run_bounded("/usr/bin/taskset", Args, round(Bound * 1000), "cbench-load", Notify) of
              %% 3: no request succeeded; the results are written all the same.
              {error, {exit_status, 3}, O} -> {ok, O};
              Other -> Other
          end,
    case Ran of
        {ok, Out} ->
            Res = case file:read_file(Json) of
                      {ok, B} ->
                          try {ok, cbench_bench_json:decode(B)}
                          catch throw:{json, Why} -> {error, {bad_json, Why}, Out}
                          end;
                      {error, Why} -> {error, {no_json, Why}, Out}
                  end,
            _ = file:delete(Json),
            Res;
        Error -> Error
    end.

%% @doc The result in the shape of cbench_bench_h2load:parse/1's, for classify/2:
%% succeeded = answered; failed = reset + timeout + protocol errors; errored =
%% connect + reset + protocol errors; rps = answered requests per second.
-spec parsed(map()) -> cbench_bench_h2load:parsed().
parsed(J) ->
    #{<<"requests">> := Req = #{<<"sent">> := Sent, <<"completed">> := Done, <<"unsent">> := Unsent},
      <<"errors">> := #{<<"connect">> := Con, <<"reset">> := Re, <<"timeout">> := To,
                        <<"protocol">> := Pr},
      <<"status">> := Status, <<"bytes">> := #{<<"read">> := Read},
      <<"achieved_rps">> := Rps, <<"duration_s">> := D, <<"proto">> := P} = J,
    Class = fun(Lo) -> lists:sum([N || {K, N} <- maps:to_list(Status),
                                       binary_to_integer(K) div 100 =:= Lo]) end,
    %% A WebSocket echo has no status: the echoes that matched count as the 2xx.
    S2 = case P of
             <<"ws">> -> maps:get(<<"ok">>, Req, 0);
             _ -> Class(2)
         end,
    #{rps => float(Rps), total => Sent + Unsent, started => Sent, done => Done + Re + To + Pr,
      succeeded => Done, failed => Re + To + Pr, errored => Con + Re + Pr, timeout => To,
      s2xx => S2, s3xx => Class(3), s4xx => Class(4) + Class(1), s5xx => Class(5),
      bytes => Read, finished_s => float(D), protocol => P}.

%% @doc The latency figures of an open-loop run, in microseconds: p50, p99 and
%% p99.9 corrected (from the intended send time, as the tables show them), the
%% uncorrected ones beside them, the client's own send lag, and the rates.
-spec latency(map()) -> map().
latency(J) ->
    #{<<"latency_us">> := #{<<"corrected">> := C, <<"uncorrected">> := U, <<"send_lag">> := L},
      <<"achieved_rps">> := A, <<"requests">> := #{<<"completed">> := N}} = J,
    G = fun(M, K) -> maps:get(K, M) end,
    #{p50 => G(C, <<"p50">>), p99 => G(C, <<"p99">>), p999 => G(C, <<"p999">>),
      max => G(C, <<"max">>), u_p50 => G(U, <<"p50">>), u_p99 => G(U, <<"p99">>),
      u_p999 => G(U, <<"p999">>), lag_p50 => G(L, <<"p50">>), lag_p99 => G(L, <<"p99">>),
      answered => float(A), samples => N,
      offered => case maps:get(<<"offered_rps">>, J) of null -> undefined; O -> O end}.
