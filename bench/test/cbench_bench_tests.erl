%% @doc Unit tests of the harness's parsing and statistics, on h2load outputs and a
%% --log-file recorded from real runs (bench/test/samples/).
-module(cbench_bench_tests).

-include_lib("eunit/include/eunit.hrl").

sample(Name) ->
    Dir = filename:join(filename:dirname(filename:dirname(code:which(?MODULE))), "samples"),
    {ok, B} = file:read_file(filename:join(Dir, Name)),
    B.

parsed(Name) ->
    {ok, P} = cbench_bench_h2load:parse(sample(Name)),
    P.

%% --- h2load output ----------------------------------------------------------

h1_ok_test() ->
    P = parsed("h1_hello_ok.txt"),
    ?assertEqual(69386.0, maps:get(rps, P)),
    ?assertEqual(69386, maps:get(succeeded, P)),
    ?assertEqual(69386, maps:get(s2xx, P)),
    ?assertEqual(0, maps:get(failed, P)),
    ?assertEqual(2.0, maps:get(finished_s, P)),
    ?assertEqual(<<"http/1.1">>, maps:get(protocol, P)),
    ?assert(maps:get(bytes, P) > 0),
    ?assertEqual(ok, cbench_bench_h2load:classify(P, 50)).

h2c_ok_test() ->
    P = parsed("h2c_hello_ok.txt"),
    ?assertEqual(370840.0, maps:get(rps, P)),
    ?assertEqual(<<"h2c">>, maps:get(protocol, P)),
    ?assertEqual(ok, cbench_bench_h2load:classify(P, 50)).

non_2xx_is_errors_test_() ->
    [?_assertEqual(errors, cbench_bench_h2load:classify(parsed("h1_404_errors.txt"), 4)),
     ?_assertEqual(8, maps:get(s4xx, parsed("h1_404_errors.txt"))),
     ?_assertEqual(errors, cbench_bench_h2load:classify(parsed("h2c_4xx_errors.txt"), 50))].

refused_is_errors_test() ->
    P = parsed("refused.txt"),
    ?assertEqual(0, maps:get(started, P)),
    ?assertEqual(8, maps:get(errored, P)),
    ?assert(abs(maps:get(finished_s, P) - 0.000472) < 1.0e-9),
    ?assertEqual(errors, cbench_bench_h2load:classify(P, 4)).

failed_streams_are_errors_test() ->
    %% nginx closing h2 connections after 1000 requests: most succeed, some fail.
    P = parsed("h2c_partial_failures.txt"),
    ?assertEqual(10000, maps:get(succeeded, P)),
    ?assertEqual(75, maps:get(failed, P)),
    ?assertEqual(errors, cbench_bench_h2load:classify(P, 10)).

stalled_test_() ->
    %% Every connection waits on a response that does not come within the run.
    [?_assertEqual(stalled, cbench_bench_h2load:classify(parsed("h1_stalled.txt"), 4)),
     ?_assertEqual(stalled, cbench_bench_h2load:classify(parsed("h2c_not_spoken.txt"), 10)),
     %% One success per connection is still stalled; one more is not.
     ?_assertEqual(stalled, cbench_bench_h2load:classify(counts(50, 0), 50)),
     ?_assertEqual(ok, cbench_bench_h2load:classify(counts(51, 0), 50))].

counts(Ok, Failed) ->
    #{rps => 1.0, total => Ok + Failed, started => Ok + Failed, done => Ok + Failed,
      succeeded => Ok, failed => Failed, errored => 0, timeout => 0,
      s2xx => Ok, s3xx => 0, s4xx => 0, s5xx => 0}.

garbage_test_() ->
    [?_assertMatch({error, _}, cbench_bench_h2load:parse(<<>>)),
     ?_assertMatch({error, _}, cbench_bench_h2load:parse(<<"h2load: command not found\n">>)),
     ?_assertMatch({error, _}, cbench_bench_h2load:parse(<<"finished in soon, lots req/s\n">>))].

args_test_() ->
    Base = #{url => "http://127.0.0.1:1/hello", duration => 5, warmup => 2},
    H1 = cbench_bench_h2load:args(Base#{proto => h1}),
    H2 = cbench_bench_h2load:args(Base#{proto => h2c, streams => 10}),
    Lat = cbench_bench_h2load:args(Base#{proto => h1, rps => 300, log => "/tmp/l"}),
    Post = cbench_bench_h2load:args(Base#{proto => h1, data => "/tmp/b",
                                          headers => [{"cookie", "a=1"}, {"cookie", "b=2"}]}),
    [?_assertEqual(["-t", "1", "-c", "50", "-m", "1", "--h1", "-D", "5", "--warm-up-time", "2",
                    "http://127.0.0.1:1/hello"], H1),
     ?_assert(lists:member("h2c", H2)),
     ?_assertEqual("10", lists:nth(6, H2)),
     ?_assertMatch([_, _ | _], lists:dropwhile(fun(A) -> A =/= "--rps" end, Lat)),
     ?_assertEqual("300", hd(tl(lists:dropwhile(fun(A) -> A =/= "--rps" end, Lat)))),
     ?_assert(lists:member("--log-file", Lat)),
     ?_assertEqual(2, length([A || A <- Post, A =:= "-H"])),
     ?_assert(lists:member("-d", Post)),
     ?_assertEqual(["-n", "2"], lists:sublist(lists:dropwhile(fun(A) -> A =/= "-n" end,
                                                               cbench_bench_h2load:args(Base#{proto => h1, requests => 2})), 2))].

%% --- log-file percentiles ---------------------------------------------------

log_file_test() ->
    #{durations := Ds, bad := Bad} = cbench_bench_h2load:parse_log(sample("latency_log.tsv")),
    ?assertEqual(100, length(Ds)),
    ?assertEqual(0, Bad),
    ?assertEqual(lists:sort(Ds), Ds),
    P50 = cbench_bench_h2load:percentile(Ds, 50),
    P99 = cbench_bench_h2load:percentile(Ds, 99),
    P999 = cbench_bench_h2load:percentile(Ds, 99.9),
    ?assert(P50 =< P99 andalso P99 =< P999),
    ?assertEqual(lists:max(Ds), P999),
    ?assertEqual(lists:nth(50, Ds), P50),
    ?assertEqual(lists:nth(99, Ds), P99).

log_failures_and_window_test() ->
    Log = <<"1000\t200\t50\n1001\t-1\t0\n1002\t503\t70\n1003\t200\t40\n900\t200\t9999\n">>,
    ?assertMatch(#{durations := [40, 50, 9999], bad := 2, first_us := 900, last_us := 1003},
                 cbench_bench_h2load:parse_log(Log)),
    ?assertMatch(#{durations := [40, 50], bad := 2, first_us := 1000},
                 cbench_bench_h2load:parse_log(Log, 1000)).

percentile_test_() ->
    L = lists:seq(1, 1000),
    P = fun cbench_bench_h2load:percentile/2,
    [?_assertEqual(500, P(L, 50)),
     ?_assertEqual(990, P(L, 99)),
     ?_assertEqual(999, P(L, 99.9)),
     ?_assertEqual(1000, P(L, 100)),
     ?_assertEqual(1, P(L, 0.01)),
     ?_assertEqual(7, P([7], 99.9)),
     ?_assertEqual(undefined, P([], 50)),
     ?_assertEqual(2, P([1, 2, 3], 50))].

%% --- medians, spread, ladder ------------------------------------------------

median_test_() ->
    M = fun cbench_bench_stats:median/1,
    [?_assertEqual(2, M([3, 1, 2])),
     ?_assertEqual(2.5, M([4, 1, 3, 2])),
     ?_assertEqual(5, M([5])),
     ?_assertError(badarg, M([]))].

spread_test_() ->
    S = fun cbench_bench_stats:spread_mark/1,
    [?_assertNot(S([100])),
     ?_assertNot(S([100, 104, 102])),           % 4 / 102 = 3.9%
     ?_assert(S([100, 106, 103])),              % 6 / 103 = 5.8%
     ?_assertNot(S([100, 105, 100])),           % exactly 5% of the median is not "more than"
     ?_assertNot(S([0, 0, 0])),
     ?_assertEqual(0.0, cbench_bench_stats:spread([42]))].

ladder_test_() ->
    L = fun cbench_bench_stats:ladder/2,
    [?_assertEqual([15000, 30000, 45000], L(60000, 50)),
     ?_assertEqual([15000, 30000, 45000], L(60049.0, 50)),
     ?_assertEqual([50], L(100, 50)),
     ?_assertEqual([900, 1850, 2750], L(3700, 50)),
     ?_assertEqual(300, cbench_bench_stats:rps_per_client(15000, 50))].

overloaded_test_() ->
    O = fun cbench_bench_stats:overloaded/2,
    [?_assert(O(1000, 979)), ?_assertNot(O(1000, 980)), ?_assertNot(O(1000, 1003))].

format_test_() ->
    [?_assertEqual("266,046", cbench_bench_stats:fmt_int(266046)),
     ?_assertEqual("999", cbench_bench_stats:fmt_int(999)),
     ?_assertEqual("1,000", cbench_bench_stats:fmt_int(999.7)),
     ?_assertEqual("1,234,567", cbench_bench_stats:fmt_int(1234567)),
     ?_assertEqual("169us", cbench_bench_stats:fmt_us(169)),
     ?_assertEqual("1.35ms", cbench_bench_stats:fmt_us(1350)),
     ?_assertEqual("355.71ms", cbench_bench_stats:fmt_us(355710)),
     ?_assertEqual("-", cbench_bench_stats:fmt_us(undefined)),
     ?_assertEqual("266,046 ~", cbench_bench_report:cell(#{status => ok, rps => 266046.0, spread => true})),
     ?_assertEqual("100,000 ^", cbench_bench_report:cell(#{status => ok, rps => 1.0e5, load_bound => true})),
     ?_assertEqual("overloaded ^", cbench_bench_report:lat_cell(#{status => overloaded, load_bound => true})),
     ?_assertEqual("stalled", cbench_bench_report:cell(#{status => stalled})),
     ?_assertEqual("-", cbench_bench_report:cell(#{status => unsupported})),
     ?_assertEqual("overloaded", cbench_bench_report:lat_cell(#{status => overloaded})),
     ?_assertEqual("1.35ms", cbench_bench_report:lat_cell(#{status => ok, p99 => 1350}))].

%% --- command line -----------------------------------------------------------

cli_test_() ->
    P = fun cbench_bench:parse_args/1,
    [?_assertMatch({ok, #{profile := quick, runs := 1}}, P([])),
     ?_assertMatch({ok, #{profile := full, runs := 3, duration := 10}}, P(["--profile", "full"])),
     ?_assertMatch({ok, #{engines := ["nif", "port", "ehttpd", "cbench-server"]}}, P(["--no-peers"])),
     ?_assertMatch({ok, #{targets := [{"mine", "http://127.0.0.1:9000"}]}},
                   P(["--target", "mine=http://127.0.0.1:9000"])),
     ?_assertMatch({ok, #{cases := [hello, sse_big]}}, P(["--cases", "hello,sse_big"])),
     ?_assertEqual({error, "unknown case 'nope'"}, P(["--cases", "hello,nope"])),
     ?_assertEqual({error, "unknown engine 'apache'"}, P(["--engines", "apache"])),
     ?_assertMatch({error, "unknown profile" ++ _}, P(["--profile", "huge"])),
     ?_assertMatch({error, "bad --target" ++ _}, P(["--target", "nourl"])),
     ?_assertMatch({error, "--runs needs" ++ _}, P(["--runs", "0"])),
     ?_assertMatch({error, "unknown or incomplete option '--duration'"}, P(["--duration"])),
     ?_assertMatch({error, "unknown or incomplete option '--frobnicate'"}, P(["--frobnicate"])),
     ?_assertMatch({error, "--server-cpus" ++ _}, P(["--server-cpus", "4096"])),
     ?_assertEqual({error, "no engine left to measure"}, P(["--engines", "nginx", "--no-peers"])),
     ?_assertEqual({error, "no engine left to measure"}, P(["--engines", "mochiweb,yaws", "--no-peers"])),
     ?_assertMatch({ok, #{engines := ["mochiweb", "yaws"]}}, P(["--engines", "mochiweb,yaws"])),
     ?_assertMatch({ok, #{nodes := ['g1@127.0.0.1', 'g2@127.0.0.1']}}, P(["--nodes", "g1@127.0.0.1,g2@127.0.0.1"])),
     ?_assertMatch({ok, #{nodes := [g@host], cookie := c}}, P(["--nodes", "g@host", "--cookie", "c"])),
     ?_assertEqual({error, "bad node 'gen1' in --nodes (expected NAME@HOST)"}, P(["--nodes", "gen1"])),
     ?_assertEqual({error, "--nodes names a node twice"}, P(["--nodes", "g@h,g@h"])),
     ?_assertEqual({error, "--nodes mixes long (with a dot) and short host names"},
                   P(["--nodes", "a@127.0.0.1,b@host"])),
     ?_assertEqual({error, "--nodes is empty"}, P(["--nodes", ","])),
     ?_assertEqual(help, P(["--help"]))].

%% --- The load from other nodes ----------------------------------------------

%% cbench:load/2's result, with atom keys and integer statuses, reads as cbench-load's JSON does.
nodes_shape_test() ->
    R = #{achieved_rps => 10.0, proto => <<"h1">>, offered_rps => undefined,
          requests => #{sent => 3, completed => 3, unsent => 0, ok => 3},
          errors => #{connect => 0, reset => 0, timeout => 0, protocol => 0},
          status => #{200 => 3}, bytes => #{read => 300}, duration_s => 1.0,
          latency_us => #{corrected => #{p50 => 1.0, p99 => 2.0, p999 => 3.0, max => 4.0},
                          uncorrected => #{p50 => 1.0, p99 => 2.0, p999 => 3.0},
                          send_lag => #{p50 => 0.1, p99 => 0.2}},
          timeline => [#{second => 1, rps => 3}]},
    J = cbench_bench_nodes:shape(R),
    ?assertMatch(#{<<"status">> := #{<<"200">> := 3}, <<"offered_rps">> := null,
                   <<"timeline">> := [#{<<"second">> := 1}]}, J),
    ?assertMatch(#{succeeded := 3, s2xx := 3, failed := 0, rps := 10.0}, cbench_bench_load:parsed(J)),
    ?assertMatch(#{p99 := 2.0, lag_p99 := 0.2, offered := undefined}, cbench_bench_load:latency(J)).

%% --- mochiweb and yaws: every case once, byte for byte ----------------------

%% Each case of the route contract requested once from the two servers as the node under test
%% starts them: the status and the body (chunked answers decoded) exactly as the contract says;
%% mochiweb has no event-stream API, so /sse* are 404 there (shown `-'). Skipped, with a line that
%% says so, when the Debian package is not installed.
beam_peers_test_() ->
    {timeout, 60, fun beam_peers/0}.

beam_peers() ->
    Doc = filename:join(tmp_dir(), "www"),
    ok = cbench_bench_servers:write_fixtures(Doc),
    {ok, _} = application:ensure_all_started(inets),
    {ok, _} = inets:start(httpc, [{profile, cbench_bench_tests}]),
    try
        [check_peer(Name, Start(Doc, 1), Doc)
         || {Name, Start} <- [{mochiweb, fun cbench_bench_mochiweb:start/2},
                              {yaws, fun cbench_bench_yaws:start/2}]]
    after
        inets:stop(httpc, cbench_bench_tests),
        %% yaws writes its report.log until it stops.
        _ = application:stop(yaws),
        file:del_dir_r(filename:dirname(Doc))
    end.

check_peer(Name, {skip, Why}, _) ->
    io:format(user, "~nbench-unit: ~s skipped: ~s~n", [Name, Why]);
check_peer(Name, {ok, Port}, Doc) ->
    Base = "http://127.0.0.1:" ++ integer_to_list(Port),
    [begin
         {Path, BodyFile, Hdrs} = cbench_bench_cases:case_spec(C),
         Req = case BodyFile of
                   undefined -> {get, {Base ++ Path, Hdrs}};
                   F ->
                       {ok, B} = file:read_file(filename:join(Doc, F)),
                       {post, {Base ++ Path, Hdrs, "application/octet-stream", B}}
               end,
         {Method, R} = Req,
         {ok, {{_, Status, _}, _, Body}} =
             httpc:request(Method, R, [{timeout, 10000}], [{body_format, binary}], cbench_bench_tests),
         ?assertEqual({Name, C, expected(Name, C, Doc)}, {Name, C, {Status, Body}})
     end || C <- cbench_bench_cases:cases()],
    io:format(user, "~nbench-unit: ~s served the 15 cases as the route contract says~n", [Name]).

expected(mochiweb, C, _) when C =:= sse; C =:= sse_small; C =:= sse_big -> {404, <<"Not found.">>};
expected(_, C, Doc) -> {200, contract_body(C, Doc)}.

contract_body(C, _) when C =:= hello; C =:= hello_headers -> <<"Hello, Joe!">>;
contract_body(C, Doc) when C =:= echo_1kb; C =:= echo_1kb_headers -> read(Doc, "body_1k");
contract_body(C, Doc) when C =:= echo_10kb; C =:= echo_chunked_10kb -> read(Doc, "body_10k");
contract_body(file_tiny, Doc) -> read(Doc, "file/tiny");
contract_body(file_small, Doc) -> read(Doc, "file/small");
contract_body(file_big, Doc) -> read(Doc, "file/big");
contract_body(stream, _) -> <<"hello, Joe!">>;
contract_body(stream_small, _) -> binary:copy(line(), 100);
contract_body(stream_big, _) -> binary:copy(line(), 256 * 64);
contract_body(sse, _) -> events(line(), 32);
contract_body(sse_small, _) -> events(line(), 100);
contract_body(sse_big, _) -> events(binary:copy(line(), 256), 64).

events(Data, N) -> binary:copy(<<"event: tick\ndata: ", Data/binary, "\n\n">>, N).

line() -> <<"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef">>.

read(Doc, F) ->
    {ok, B} = file:read_file(filename:join(Doc, F)),
    B.

tmp_dir() ->
    Base = case os:getenv("TMPDIR") of false -> "/tmp"; "" -> "/tmp"; T -> T end,
    D = filename:join(Base, "cbench-bench-tests-" ++ os:getpid()),
    ok = filelib:ensure_path(D),
    D.

%% --- JSON and SVG -----------------------------------------------------------

json_test() ->
    Term = #{a => 1, b => [1.5, <<"x\"y\n">>, true, null], c => #{d => "text"}, e => undefined},
    Bin = iolist_to_binary(cbench_bench_json:encode(Term)),
    ?assertEqual(#{<<"a">> => 1, <<"b">> => [1.5, <<"x\"y\n">>, true, null],
                   <<"c">> => #{<<"d">> => <<"text">>}, <<"e">> => null},
                 cbench_bench_json:decode(Bin)),
    ?assertThrow({json, _}, cbench_bench_json:decode(<<"{\"a\":}">>)),
    ?assertEqual([1.0e5, -2], cbench_bench_json:decode(<<" [1e5, -2] ">>)).

svg_test() ->
    Svg = cbench_bench_svg:bars("Throughput <h1> & more", ["nif", "nginx"],
                                [{"hello", [{"nif", 100.0, "100"}, {"nginx", undefined, "-"}]},
                                 {"file_big", [{"nif", 3.5, "3.5"}, {"nginx", 0, "0"}]}], "note"),
    {Doc, _} = xmerl_scan:string(unicode:characters_to_list(iolist_to_binary(Svg)), [{quiet, true}]),
    ?assertEqual(svg, element(2, Doc)).

%% --- cbench-load (closed loop for throughput, open loop for the ladder) ------

load_json(Name) -> cbench_bench_json:decode(sample(Name)).

load_args_test_() ->
    Base = #{url => "http://127.0.0.1:1/hello", duration => 5, warmup => 2, json => "/tmp/r.json"},
    H1 = cbench_bench_load:args(Base#{proto => h1, clients => 50, threads => 1}),
    H2 = cbench_bench_load:args(Base#{proto => h2c, clients => 50, streams => 10, rate => 15000}),
    Post = cbench_bench_load:args(Base#{proto => h1, data => "/tmp/b",
                                        headers => [{"cookie", "a=1"}, {"cookie", "b=2"}]}),
    After = fun(Opt, L) -> hd(tl(lists:dropwhile(fun(A) -> A =/= Opt end, L))) end,
    [?_assertEqual(["--proto", "h1", "--connections", "50", "--depth", "1", "--threads", "1",
                    "--duration", "5", "--warmup", "2", "--json", "/tmp/r.json", "--quiet",
                    "http://127.0.0.1:1/hello"], H1),
     ?_assertEqual("10", After("--depth", H2)),
     ?_assertEqual("15000", After("--rate", H2)),
     ?_assertNot(lists:member("--rate", H1)),
     ?_assertEqual(2, length([A || A <- Post, A =:= "--header"])),
     ?_assertEqual("cookie: a=1", After("--header", Post)),
     ?_assertEqual("/tmp/b", After("--body-file", Post)),
     ?_assertEqual("0.5", After("--duration", cbench_bench_load:args(Base#{proto => h1, duration => 0.5}))),
     %% The roadrunner scenarios: pipelining depth over HTTP/1.1, paths round robin.
     ?_assertEqual("4", After("--depth", cbench_bench_load:args(Base#{proto => h1, depth => 4}))),
     ?_assertEqual(["--path", "/r/0", "--path", "/r/1"],
                   [A || A <- cbench_bench_load:args(Base#{proto => h1, paths => ["/r/0", "/r/1"]}),
                         A =:= "--path" orelse lists:prefix("/r/", A)])].

roadrunner_cases_test_() ->
    P = fun cbench_bench:parse_args/1,
    {ok, RR} = P(["--case-set", "roadrunner"]),
    {ok, Full} = P(["--profile", "full"]),
    [?_assertEqual([hello, json, echo, large_response, headers_heavy, cookies_heavy, pipelined_h1,
                    varied_paths_router, gzip_response, websocket_msg_throughput],
                   maps:get(h1, maps:get(only, RR))),
     ?_assertEqual([hello, json, echo, headers_heavy, multi_stream_h2], maps:get(h2c, maps:get(only, RR))),
     ?_assertEqual([], maps:get(latency_cases, RR)),
     %% FULL=1: the 15, the Erlang handler cases, then the roadrunner scenarios the 15 lack.
     ?_assertEqual(cbench_bench_cases:cases() ++ cbench_bench_cases:erl_cases() ++ [json, echo, large_response, headers_heavy, cookies_heavy,
                                            pipelined_h1, varied_paths_router, gzip_response,
                                            websocket_msg_throughput, multi_stream_h2],
                   maps:get(cases, Full)),
     ?_assertNot(lists:member(multi_stream_h2, maps:get(h1, maps:get(only, Full)))),
     ?_assertMatch({ok, #{cases := [gzip_response]}}, P(["--cases", "gzip_response"])),
     ?_assertEqual({error, "unknown case set 'x' (ewe, roadrunner)"}, P(["--case-set", "x"])),
     ?_assertEqual(100, length(cbench_bench_roadrunner:router_paths())),
     ?_assertEqual(#{depth => 4}, cbench_bench_roadrunner:load(pipelined_h1)),
     ?_assertEqual(["--proto", "ws"], lists:sublist(cbench_bench_load:args(
                                                      #{url => "http://127.0.0.1:1/ws", proto => h1, json => "/tmp/j",
                                                        duration => 1, ws_size => 64}), 2)),
     ?_assertEqual("ws://127.0.0.1:1/ws", lists:last(cbench_bench_load:args(
                                                    #{url => "http://127.0.0.1:1/ws", proto => h1, json => "/tmp/j",
                                                      duration => 1, ws_size => 64}))),
     ?_assertEqual(#{streams => 16}, cbench_bench_roadrunner:load(multi_stream_h2)),
     ?_assertNot(cbench_bench_roadrunner:proto_ok(h2c, pipelined_h1)),
     ?_assertNot(cbench_bench_roadrunner:proto_ok(h1, multi_stream_h2)),
     ?_assertEqual(16384, byte_size(cbench_bench_roadrunner:gzip_json())),
     %% The request of headers_heavy carries 16 extra headers, cookies_heavy 8 cookies in one.
     ?_assertEqual(16, length(element(3, cbench_bench_cases:case_spec(headers_heavy)))),
     ?_assertMatch({"/cookies", undefined, [{"cookie", _}]}, cbench_bench_cases:case_spec(cookies_heavy)),
     ?_assertEqual(8, length(string:split(element(2, hd(element(3, cbench_bench_cases:case_spec(cookies_heavy)))),
                                          ";", all)))].

load_parsed_ok_test() ->
    P = cbench_bench_load:parsed(load_json("cbench_load_h1.json")),
    #{succeeded := N, s2xx := N2, failed := 0, errored := 0, rps := Rps, bytes := B} = P,
    ?assertEqual(N, N2),
    ?assert(N > 1000 andalso is_float(Rps) andalso B > 0),
    ?assertEqual(ok, cbench_bench_h2load:classify(P, 4)),
    %% The same figures as h2load's summary gives: answered per second of the window.
    ?assert(abs(Rps - N / maps:get(finished_s, P)) < 1.0).

load_parsed_errors_test() ->
    %% /status/503: every answer is a 5xx, so the run is `errors'.
    P = cbench_bench_load:parsed(load_json("cbench_load_500.json")),
    #{succeeded := N, s5xx := N, s2xx := 0} = P,
    ?assert(N > 0),
    ?assertEqual(errors, cbench_bench_h2load:classify(P, 2)),
    %% No answer at all, connect errors only: errors; answers but a reset: errors.
    Refused = #{<<"requests">> => #{<<"sent">> => 0, <<"completed">> => 0, <<"unsent">> => 0},
                <<"errors">> => #{<<"connect">> => 9, <<"reset">> => 0, <<"timeout">> => 0, <<"protocol">> => 0},
                <<"status">> => #{}, <<"bytes">> => #{<<"read">> => 0}, <<"achieved_rps">> => 0,
                <<"duration_s">> => 1.0, <<"proto">> => <<"h1">>},
    ?assertEqual(errors, cbench_bench_h2load:classify(cbench_bench_load:parsed(Refused), 2)),
    Reset = Refused#{<<"requests">> => #{<<"sent">> => 101, <<"completed">> => 100, <<"unsent">> => 0},
                     <<"errors">> => #{<<"connect">> => 0, <<"reset">> => 1, <<"timeout">> => 0, <<"protocol">> => 0},
                     <<"status">> => #{<<"200">> => 100}},
    ?assertEqual(errors, cbench_bench_h2load:classify(cbench_bench_load:parsed(Reset), 2)),
    %% Answers on only as many connections as there are: stalled.
    Stalled = Reset#{<<"requests">> => #{<<"sent">> => 4, <<"completed">> => 2, <<"unsent">> => 0},
                     <<"errors">> => #{<<"connect">> => 0, <<"reset">> => 0, <<"timeout">> => 2, <<"protocol">> => 0},
                     <<"status">> => #{<<"200">> => 2}},
    ?assertEqual(stalled, cbench_bench_h2load:classify(cbench_bench_load:parsed(Stalled), 2)).

load_latency_test() ->
    J = load_json("cbench_load_open_h2c.json"),
    L = cbench_bench_load:latency(J),
    #{p50 := P50, p99 := P99, p999 := P999, u_p99 := U99, answered := A, offered := O, samples := N} = L,
    ?assertEqual(1000.0, float(O)),
    ?assertEqual(1000, N),
    ?assert(P50 > 0 andalso P50 =< P99 andalso P99 =< P999),
    %% Corrected latency counts from the intended time, never later than the actual send.
    ?assert(U99 =< P99),
    ?assertNot(cbench_bench_stats:overloaded(O, A)).

load_tool_option_test_() ->
    P = fun cbench_bench:parse_args/1,
    [?_assertMatch({ok, #{tool := cbench_load}}, P([])),
     ?_assertMatch({ok, #{tool := h2load}}, P(["--tool", "h2load"])),
     ?_assertEqual({error, "unknown tool 'wrk' (cbench-load, h2load)"}, P(["--tool", "wrk"]))].

lag_bound_test_() ->
    L = fun cbench_bench_stats:lag_bound/2,
    [?_assertNot(L(0.3, 120.0)),             % on time
     ?_assertNot(L(900.0, 1200.0)),          % under 1 ms
     ?_assert(L(4898.8, 5390.3)),            % the tail is the client's lateness
     ?_assertNot(L(2000.0, 90000.0)),        % late, but the server's tail dominates
     ?_assertNot(L(undefined, 100))].
