%% @doc The mixed soak (issue 22): one nif server in this node under everything at once for a bounded
%% time, its resident memory sampled, and every failure sorted into "asked for" (a fault) or not.
%%
%% What runs side by side for Seconds:
%%   - cbench-load over HTTP/1.1 (`/hello', and `POST /echo' with a 4 KiB body), over h2c (`-m 10')
%%     and over WebSocket (`/ws', 1 KiB messages), each at a fixed open-loop rate, so that the two
%%     CPUs are shared and not saturated; each must end with zero errors;
%%   - a fault client: raw gen_tcp requests of `/fault/' specs of every HTTP/1.1 kind (resets,
%%     closes, garbage, truncated and overlong bodies, short delays and dribbles), counted by what
%%     the client saw; between them `GET /hello' on a fresh connection, which must be answered;
%%   - stub churn: a stub added, requested (its exact body expected), removed, over and over;
%%   - journal reads: `cbench:requests/2' since the last sequence seen, ten times a second.
%% The node's VmRSS (the engine's threads live in it) and erlang:memory(total) are sampled every 5 s.
%% RSS is "flat" when the last sample exceeds the largest of the first quarter (after the start-up
%% samples) by at most FLAT_KB: the journal's rings and the allocators' first pages are reached
%% during that quarter, and only growth that goes on after it is a leak.
%%
%% Run: `make soak' (SOAK_SECONDS=600 by default); `make soak SOAK_SECONDS=30' for a short one. The
%% report is printed and written to bench/results/soak-TIMESTAMP.txt; the exit status is 0 when no
%% failure was outside the faults and RSS was flat.
-module(cbench_soak).

-export([main/1]).

-define(FLAT_KB, 8192).
-define(SAMPLE_MS, 5000).
-define(BODY_4K, binary:copy(<<"0123456789abcdef">>, 256)).

%% The /fault/ specs of the fault client: every HTTP/1.1 kind, small enough to go quickly.
-define(FAULTS, [<<"reset">>, <<"reset?at=head">>, <<"reset?at=body&bytes=100&length=1000">>,
                 <<"empty">>, <<"garbage?bytes=200&seed=3">>, <<"truncated?length=1000">>,
                 <<"overlong?length=100">>, <<"malformed_chunk?bytes=10">>,
                 <<"missing_last_chunk?length=100">>, <<"raw?preset=bare_lf">>,
                 <<"delay?ms=5">>, <<"delay?ms=2&sigma=1&seed=7">>,
                 <<"dribble?pieces=8&ms=16&length=4000">>, <<"drip?length=20&ms=10">>,
                 <<"trailers?length=10">>, <<"slow_head?pieces=4&ms=8">>,
                 <<"hang?ms=20">>, <<"dribble?pieces=100000&ms=50&length=100000">>]).

%% @doc Entry point of `make soak': [Seconds] as strings (erl -run) or atoms (erl -s).
-spec main([string() | atom()]) -> no_return().
main(Args) ->
    Seconds = case Args of
                  [S | _] when is_atom(S) -> list_to_integer(atom_to_list(S));
                  [S | _] -> list_to_integer(S);
                  [] -> 600
              end,
    Code = try run(Seconds) of
               ok -> 0;
               {failed, _} -> 1
           catch C:R:St ->
                   io:format("soak: crashed: ~p:~p~n~p~n", [C, R, St]),
                   2
           end,
    halt(Code).

run(Seconds) ->
    {ok, _} = application:ensure_all_started(cbench),
    {ok, S} = cbench:start_server(nif, #{port => 0, ip => {127, 0, 0, 1}}),
    Port = cbench:port(S),
    Base = "http://127.0.0.1:" ++ integer_to_list(Port),
    Deadline = erlang:monotonic_time(millisecond) + Seconds * 1000,
    Self = self(),
    Loads = [{h1_hello, #{proto => h1, paths => ["/hello"], rate => 1500, connections => 8}},
             {h1_echo, #{proto => h1, method => "POST", paths => ["/echo"], body => ?BODY_4K,
                         rate => 500, connections => 4}},
             {h2c_hello, #{proto => h2c, paths => ["/hello"], rate => 1500, connections => 4,
                           depth => 10}},
             {ws_echo, #{proto => ws, paths => ["/ws"], rate => 300, connections => 4,
                         ws_size => 1024}}],
    LoadPids = [spawn_link(fun() -> Self ! {load, Name, load(Base, Opts, Seconds)} end)
                || {Name, Opts} <- Loads],
    Workers = [spawn_link(fun() -> Self ! {worker, Name, F(Port, S, Deadline, #{})} end)
               || {Name, F} <- [{faults, fun faults/4}, {stub_churn, fun churn/4},
                                {journal_reads, fun journal_reads/4}]],
    Samples = sample(Deadline, []),
    LoadResults = collect(load, length(LoadPids), []),
    WorkerResults = collect(worker, length(Workers), []),
    Stats = cbench:stats(S),
    ok = cbench:stop_server(S),
    report(Seconds, Samples, LoadResults, WorkerResults, Stats).

load(Base, Opts, Seconds) ->
    {Paths, Rest} = maps:take(paths, Opts),
    Url = Base ++ hd(Paths),
    case cbench:load(Url, Rest#{duration => Seconds, timeout => 5}) of
        {ok, R} -> maps:with([requests, errors, achieved_rps], R);
        {error, Why} -> #{error => Why}
    end.

collect(_Tag, 0, Acc) -> lists:sort(Acc);
collect(Tag, N, Acc) ->
    receive {Tag, Name, R} -> collect(Tag, N - 1, [{Name, R} | Acc])
    after 120000 -> collect(Tag, 0, [{timeout, N} | Acc])
    end.

%% RSS in kB of this node and the BEAM's own total, every SAMPLE_MS until the deadline.
sample(Deadline, Acc) ->
    Now = erlang:monotonic_time(millisecond),
    Acc1 = [{rss_kb(), erlang:memory(total) div 1024} | Acc],
    case Now + ?SAMPLE_MS > Deadline of
        true -> lists:reverse(Acc1);
        false -> timer:sleep(?SAMPLE_MS), sample(Deadline, Acc1)
    end.

rss_kb() ->
    {ok, B} = file:read_file("/proc/self/status"),
    [_, Rest] = binary:split(B, <<"VmRSS:">>),
    [Kb | _] = string:lexemes(Rest, " \t\nkB"),
    binary_to_integer(Kb).

%% --- the fault client ----------------------------------------------------------------------------

faults(Port, S, Deadline, Acc) ->
    case erlang:monotonic_time(millisecond) >= Deadline of
        true -> Acc;
        false ->
            Spec = lists:nth(rand:uniform(length(?FAULTS)), ?FAULTS),
            Seen = exchange(Port, [<<"GET /fault/">>, Spec,
                                   <<" HTTP/1.1\r\nhost: soak\r\nconnection: close\r\n\r\n">>], 2000),
            Acc1 = bump({fault, Spec, Seen}, Acc),
            Hello = case exchange(Port, <<"GET /hello HTTP/1.1\r\nhost: soak\r\nconnection: close\r\n\r\n">>, 5000) of
                        {closed, <<"HTTP/1.1 200 OK\r\n", _/binary>>} -> ok;
                        Other -> {failed, Other}
                    end,
            faults(Port, S, Deadline, bump({hello_between_faults, Hello}, Acc1))
    end.

%% What a client sees of one request on a fresh connection: {closed, Bytes} (EOF after Bytes),
%% {reset, Bytes}, {timeout, Bytes}, or {connect, Why}.
exchange(Port, Req, TimeoutMs) ->
    case gen_tcp:connect({127, 0, 0, 1}, Port, [binary, {active, false}, {nodelay, true}], 2000) of
        {ok, Sock} ->
            ok = gen_tcp:send(Sock, Req),
            R = read_all(Sock, erlang:monotonic_time(millisecond) + TimeoutMs, []),
            gen_tcp:close(Sock),
            R;
        {error, Why} -> {connect, Why}
    end.

read_all(Sock, Deadline, Acc) ->
    Left = max(0, Deadline - erlang:monotonic_time(millisecond)),
    case gen_tcp:recv(Sock, 0, Left) of
        {ok, B} -> read_all(Sock, Deadline, [Acc, B]);
        {error, closed} -> {closed, iolist_to_binary(Acc)};
        {error, econnreset} -> {reset, iolist_to_binary(Acc)};
        {error, timeout} -> {timeout, iolist_to_binary(Acc)};
        {error, Why} -> {Why, iolist_to_binary(Acc)}
    end.

%% Counts by outcome class (bytes dropped, so that the report stays small).
bump({fault, Spec, {Class, _}}, Acc) -> maps:update_with({fault, Spec, Class}, fun(N) -> N + 1 end, 1, Acc);
bump(Key, Acc) -> maps:update_with(Key, fun(N) -> N + 1 end, 1, Acc).

%% --- stub churn ------------------------------------------------------------------------------------

churn(Port, S, Deadline, Acc) ->
    case erlang:monotonic_time(millisecond) >= Deadline of
        true -> Acc;
        false ->
            N = integer_to_binary(erlang:unique_integer([positive])),
            Path = <<"/soak/", N/binary>>,
            Body = <<"stub ", N/binary>>,
            R = case cbench:stub(S, #{path => Path}, #{status => 201, body => Body}) of
                    {ok, Id} ->
                        Got = exchange(Port, [<<"GET ">>, Path, <<" HTTP/1.1\r\nhost: soak\r\n"
                                                                  "connection: close\r\n\r\n">>], 5000),
                        Ok = case Got of
                                 {closed, <<"HTTP/1.1 201 Created\r\n", _/binary>> = B} ->
                                     binary:longest_common_suffix([B, Body]) =:= byte_size(Body);
                                 _ -> false
                             end,
                        case {Ok, cbench:unstub(S, Id)} of
                            {true, ok} -> ok;
                            {Ok1, U} -> {failed, Ok1, U, Got}
                        end;
                    Error -> {failed, Error}
                end,
            churn(Port, S, Deadline, bump({stub, result_class(R)}, Acc))
    end.

result_class(ok) -> ok;
result_class(R) -> R.

%% --- journal reads -----------------------------------------------------------------------------------

journal_reads(_Port, S, Deadline, Acc) ->
    read_journal(S, Deadline, 0, Acc).

read_journal(S, Deadline, Since, Acc) ->
    case erlang:monotonic_time(millisecond) >= Deadline of
        true -> Acc;
        false ->
            timer:sleep(100),
            case cbench:requests(S, #{since => Since}) of
                L when is_list(L) ->
                    Since1 = lists:foldl(fun(#{seq := Q}, M) -> max(Q, M) end, Since, L),
                    Acc1 = maps:update_with(entries_read, fun(N) -> N + length(L) end, length(L), Acc),
                    read_journal(S, Deadline, Since1, bump({journal, ok}, Acc1));
                Other ->
                    read_journal(S, Deadline, Since, bump({journal, Other}, Acc))
            end
    end.

%% --- the report ----------------------------------------------------------------------------------------

report(Seconds, Samples, Loads, Workers, Stats) ->
    Rss = [R || {R, _} <- Samples],
    Quarter = lists:sublist(Rss, 2, max(1, length(Rss) div 4)),
    Last = lists:last(Rss),
    Flat = Last =< lists:max(Quarter) + ?FLAT_KB,
    LoadFailures = [{N, R} || {N, R} <- Loads, not clean_load(R)],
    WorkerMaps = maps:from_list(Workers),
    Unasked = [{K, V} || {_, M} <- Workers, is_map(M), {K, V} <- maps:to_list(M), unasked(K)]
        ++ [{W, timeout} || {timeout, W} <- Workers],
    Lines = [io_lib:format("soak: ~b s, nif engine, VmRSS sampled every ~b s~n", [Seconds, ?SAMPLE_MS div 1000]),
             io_lib:format("rss_kb: ~w~n", [Rss]),
             io_lib:format("beam_total_kb: ~w~n", [[B || {_, B} <- Samples]]),
             io_lib:format("rss flat: ~s (last ~b kB, largest of the first quarter ~b kB, allowed +~b kB)~n",
                           [Flat, Last, lists:max(Quarter), ?FLAT_KB]),
             [io_lib:format("load ~s: ~0p~n", [N, R]) || {N, R} <- Loads],
             [io_lib:format("~s: ~0p~n", [N, maps:get(N, WorkerMaps, missing)])
              || N <- [faults, stub_churn, journal_reads]],
             io_lib:format("server stats: requests ~b, faults ~b, resets ~b~n",
                           [maps:get(requests, Stats, 0), maps:get(faults, Stats, 0),
                            maps:get(resets, Stats, 0)]),
             io_lib:format("failures not asked for: ~0p~n", [LoadFailures ++ Unasked])],
    Text = iolist_to_binary(Lines),
    io:put_chars(Text),
    Dir = "bench/results",
    _ = filelib:ensure_dir(filename:join(Dir, "x")),
    {{Y, Mo, D}, {H, Mi, Se}} = calendar:universal_time(),
    File = filename:join(Dir, io_lib:format("soak-~4..0b~2..0b~2..0bT~2..0b~2..0b~2..0b.txt",
                                            [Y, Mo, D, H, Mi, Se])),
    ok = file:write_file(File, Text),
    io:format("written to ~s~n", [File]),
    case Flat andalso LoadFailures =:= [] andalso Unasked =:= [] of
        true -> ok;
        false -> {failed, LoadFailures ++ Unasked}
    end.

clean_load(#{errors := #{total := 0}, requests := #{completed := N, ok := N}}) -> N > 0;
clean_load(_) -> false.

%% Outcomes that only a fault may cause: anything else is a failure of the soak.
unasked({fault, _, _}) -> false;
unasked({hello_between_faults, ok}) -> false;
unasked({stub, ok}) -> false;
unasked({journal, ok}) -> false;
unasked(entries_read) -> false;
unasked(_) -> true.
