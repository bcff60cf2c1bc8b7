%% @doc What the benchmark harnesses (make bench: cbench_bench; make bench-clients: cbench_clients)
%% share around their measurements: running a command line (parse, run, exit code), option values,
%% where they run (the repository's root, the results directory's timestamp), and what they print
%% as they go (notes for the report, the progress line).
-module(cbench_bench_harness).

-export([cli/5, pos/2, nonneg/2, root/0, timestamp/0, note/3, progress/3, fmt_secs/1]).

%% @doc A harness's command line (make bench, make bench-clients): parsed by Parse, run by Run, then
%% halt with Run's code, 1 when it throws {fatal, Message} or crashes, 2 for bad input. (The run is
%% inside the try, not in an `of' clause, whose exceptions a try does not catch.)
-spec cli(string(), [string()], fun(), fun(), fun()) -> no_return().
cli(Tag, Args, Parse, Usage, Run) ->
    Code = try
               case Parse(Args) of
                   help -> io:put_chars(Usage()), 0;
                   {error, Bad} ->
                       io:format(standard_error, "~s: ~s~n~s", [Tag, Bad, Usage()]),
                       2;
                   {ok, Cfg} -> Run(Cfg)
               end
           catch
               throw:{fatal, Msg} ->
                   io:format(standard_error, "~s: ~s~n", [Tag, Msg]),
                   1;
               C:R:St ->
                   io:format(standard_error, "~s: internal error ~p:~p~n~p~n", [Tag, C, R, St]),
                   1
           end,
    halt(Code).

%% @doc The value of an option that takes a positive integer, or throw({usage, Message}).
-spec pos(string(), string()) -> pos_integer().
pos(N, Opt) ->
    case string:to_integer(N) of
        {I, []} when I > 0 -> I;
        _ -> throw({usage, Opt ++ " needs a positive integer, got '" ++ N ++ "'"})
    end.

%% @doc The value of an option that takes an integer >= 0, or throw({usage, Message}).
-spec nonneg(string(), string()) -> non_neg_integer().
nonneg(N, Opt) ->
    case string:to_integer(N) of
        {I, []} when I >= 0 -> I;
        _ -> throw({usage, Opt ++ " needs an integer >= 0, got '" ++ N ++ "'"})
    end.

%% @doc The repository's root: $CBENCH_ROOT (set by the scripts), or the working directory.
-spec root() -> file:filename().
root() ->
    case os:getenv("CBENCH_ROOT") of
        false -> {ok, D} = file:get_cwd(), D;
        D -> D
    end.

%% @doc The time now in UTC as a results directory's name takes it (20260101T120000Z).
-spec timestamp() -> string().
timestamp() ->
    {{Y, Mo, D}, {H, Mi, S}} = calendar:universal_time(),
    lists:flatten(io_lib:format("~4..0b~2..0b~2..0bT~2..0b~2..0b~2..0bZ", [Y, Mo, D, H, Mi, S])).

%% @doc A note for the report: printed now, and kept in the run's state (its `notes').
-spec note(#{notes := [string()], _ => _}, io:format(), [term()]) -> map().
note(St = #{notes := Ns}, Fmt, Args) ->
    N = lists:flatten(io_lib:format(Fmt, Args)),
    io:format("  note: ~s~n", [N]),
    St#{notes => Ns ++ [N]}.

%% @doc The progress line of the next run: its number, the estimated time left, what it measures
%% (the result follows on the same line).
-spec progress(#{done := non_neg_integer(), total := pos_integer(), t0 := integer(), _ => _},
               io:format(), [term()]) -> ok.
progress(#{done := D, total := T, t0 := T0}, Fmt, Args) ->
    Elapsed = erlang:monotonic_time(second) - T0,
    Eta = case D of
              0 -> "";
              _ -> " ETA " ++ fmt_secs(round(Elapsed / D * (T - D)))
          end,
    io:format("[~b/~b~s] " ++ Fmt ++ " ... ", [D + 1, T, Eta | Args]).

%% @doc A duration in seconds as the progress line and the plan print it (45s, 3m07s).
-spec fmt_secs(non_neg_integer()) -> iolist().
fmt_secs(S) when S < 60 -> integer_to_list(S) ++ "s";
fmt_secs(S) -> io_lib:format("~bm~2..0bs", [S div 60, S rem 60]).
