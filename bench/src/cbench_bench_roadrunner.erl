%% @doc The roadrunner case set of `make bench' (`CASES=roadrunner', and in `FULL=1'):
%% the scenarios of roadrunner's resource report (docs/bench.md, "The roadrunner
%% cases"), how each is requested, the 100 routes of `varied_paths_router', and the
%% report's table in roadrunner's layout (scenario, server, req/s, peak RSS, peak
%% BEAM memory, average CPU%) with the ratios nif/ehttpd and cbench-server/nginx.
-module(cbench_bench_roadrunner).

-export([h1_cases/0, h2c_cases/0, cases/0, is_case/1, proto_ok/2, spec/1, load/1,
         router_paths/0, router_stubs_json/1, gzip_json/0, report_md/3, case_text/1]).

-import(cbench_bench_stats, [fmt_float/2]).

%% @doc The HTTP/1.1 scenarios, in roadrunner's order.
-spec h1_cases() -> [atom()].
h1_cases() ->
    [hello, json, echo, large_response, headers_heavy, cookies_heavy, pipelined_h1,
     varied_paths_router, gzip_response, websocket_msg_throughput].

%% @doc The HTTP/2 scenarios (h2c, prior knowledge).
-spec h2c_cases() -> [atom()].
h2c_cases() -> [hello, json, echo, headers_heavy, multi_stream_h2].

%% @doc Every scenario once.
-spec cases() -> [atom()].
cases() -> h1_cases() ++ (h2c_cases() -- h1_cases()).

%% @doc Whether C is a roadrunner scenario that the ewe set does not have.
-spec is_case(atom()) -> boolean().
is_case(hello) -> false;
is_case(C) -> lists:member(C, cases()).

%% @doc Whether a scenario means anything over a protocol: pipelining is HTTP/1.1's,
%% multiple streams per connection HTTP/2's; the others run on both (the case set
%% itself runs roadrunner's lists, h1_cases/0 and h2c_cases/0).
-spec proto_ok(h1 | h2c, atom()) -> boolean().
proto_ok(h2c, pipelined_h1) -> false;
proto_ok(h2c, websocket_msg_throughput) -> false;
proto_ok(h1, multi_stream_h2) -> false;
proto_ok(_, _) -> true.

%% @doc {Path, BodyFile | undefined, ExtraHeaders} of a scenario.
-spec spec(atom()) -> {string(), string() | undefined, [{string(), string()}]}.
spec(json) -> {"/json", undefined, []};
spec(echo) -> {"/echo", "body_64", []};
spec(large_response) -> {"/large", undefined, []};
spec(headers_heavy) -> {"/hello", undefined, headers16()};
spec(cookies_heavy) -> {"/cookies", undefined, [{"cookie", cookies8()}]};
spec(pipelined_h1) -> {"/hello", undefined, []};
spec(varied_paths_router) -> {hd(router_paths()), undefined, []};
spec(gzip_response) -> {"/gzip", undefined, [{"accept-encoding", "gzip, deflate, br"}]};
spec(multi_stream_h2) -> {"/hello", undefined, []};
spec(websocket_msg_throughput) -> {"/ws", undefined, []}.

%% @doc What a scenario changes in the load: HTTP/1.1 pipelining depth, h2c streams
%% per connection, or the paths requested round robin (cbench-load's --depth and
%% --path; the default tool is needed for these).
-spec load(atom()) -> map().
load(pipelined_h1) -> #{depth => 4};
load(multi_stream_h2) -> #{streams => 16};
load(varied_paths_router) -> #{paths => router_paths()};
load(websocket_msg_throughput) -> #{ws_size => 64};
load(_) -> #{}.

%% @doc What the report's case table says about a scenario: {request, response}.
-spec case_text(atom()) -> {string(), string()}.
case_text(json) -> {"GET /json", "`{\"message\":\"Hello, Joe!\"}`"};
case_text(echo) -> {"POST /echo, 64B body", "the body"};
case_text(large_response) -> {"GET /large", "64KiB body"};
case_text(headers_heavy) -> {"GET /hello, 16 extra headers", "`Hello, Joe!`"};
case_text(cookies_heavy) -> {"GET /cookies, 8 cookies in one header", "the cookies as JSON (~200B)"};
case_text(pipelined_h1) -> {"GET /hello, 4 pipelined per connection", "`Hello, Joe!`"};
case_text(varied_paths_router) -> {"GET /r/0 .. /r/99 round robin (100 stubs)", "`Hello, Joe!`"};
case_text(gzip_response) -> {"GET /gzip, accept-encoding: gzip", "16KiB JSON, gzip-coded once (1.6KiB)"};
case_text(multi_stream_h2) -> {"GET /hello, 16 streams per connection", "`Hello, Joe!`"};
case_text(websocket_msg_throughput) -> {"GET /ws upgraded, then 64B text messages", "each message echoed"}.

%% Sixteen extra headers of the sizes a browser behind a proxy sends.
headers16() ->
    [{"accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"},
     {"accept-language", "en-GB,en;q=0.9,fr;q=0.8"},
     {"accept-encoding", "gzip, deflate, br"},
     {"cache-control", "no-cache"},
     {"pragma", "no-cache"},
     {"user-agent", "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"},
     {"referer", "http://127.0.0.1/catalogue/items?page=3"},
     {"dnt", "1"},
     {"sec-fetch-dest", "document"},
     {"sec-fetch-mode", "navigate"},
     {"sec-fetch-site", "same-origin"},
     {"upgrade-insecure-requests", "1"},
     {"x-request-id", "b7e4c2a0-6f1d-4c3e-9a58-1d2e3f4a5b6c"},
     {"x-forwarded-for", "203.0.113.7, 198.51.100.23"},
     {"x-forwarded-proto", "http"},
     {"x-client-version", "cbench-bench/1.0"}].

%% Eight cookies in one header (about 200 bytes of answer).
cookies8() ->
    "session=9f86d081884c7d659a2feaa0c55ad015; theme=dark; lang=en-GB; "
    "csrf=\"tok-e3b0c44298fc1c14\"; consent=analytics; cart=3fa85f64; tz=Europe-London; ab=variant-b".

%% @doc The 100 paths of varied_paths_router.
-spec router_paths() -> [string()].
router_paths() -> ["/r/" ++ integer_to_list(I) || I <- lists:seq(0, 99)].

%% @doc The same 100 routes as a stub file for cbench-server --stubs.
-spec router_stubs_json(file:filename()) -> ok.
router_stubs_json(File) ->
    Stubs = [["{\"name\":\"r\",\"match\":{\"method\":\"GET\",\"path\":\"", P, "\"},"
              "\"response\":{\"headers\":{\"content-type\":\"text/plain\"},\"body\":\"Hello, Joe!\"}}"]
             || P <- router_paths()],
    file:write_file(File, ["[", lists:join(",\n", Stubs), "]\n"]).

%% @doc The /gzip body of docs/wire.md (GZIP_JSON), for the peers that compress it
%% themselves (nginx's gzip module).
-spec gzip_json() -> binary().
gzip_json() ->
    Items = [io_lib:format("{\"id\":~b,\"name\":\"item-~b\",\"price\":~b.~2..0b,\"in_stock\":~s,"
                           "\"tags\":[\"cbench\",\"fixture\"]}",
                           [I, I, I * 37 rem 1000, I * 13 rem 100, I rem 3 =/= 0])
             || I <- lists:seq(0, 149)],
    Head = iolist_to_binary(["{\"items\":[", lists:join(",", Items), "],\"pad\":\""]),
    N = 16384 - byte_size(Head) - 2,
    <<Head/binary, (binary:part(binary:copy(<<"0123456789abcdef">>, N div 16 + 1), 0, N))/binary, "\"}">>.

%% ---------------------------------------------------------------------------
%% The report

%% @doc The roadrunner table (empty when no roadrunner scenario ran): per protocol,
%% each scenario's servers by req/s, then the ratios nif/ehttpd and
%% cbench-server/nginx per scenario.
-spec report_md(map(), map(), [string()]) -> iolist().
report_md(Cfg, St, Engines) ->
    Rows = maps:get(results, St),
    Cases = [C || C <- maps:get(cases, Cfg), lists:member(C, cases())],
    Sections = [{P, [C || C <- Cases, proto_ok(P, C), lists:member(C, proto_cases(P)),
                          [] =/= [x || #{proto := P1, 'case' := C1} <- Rows, P1 =:= P, C1 =:= C]]}
                || P <- maps:get(protos, Cfg)],
    case [S || S = {_, [_ | _]} <- Sections] of
        [] -> [];
        Present ->
            ["## The roadrunner table\n\n",
             "roadrunner's resource report, in its layout: for each scenario, the servers by req/s, with the ",
             "peak RSS of the server's processes, the peak `erlang:memory(total)` of the node (`beam`, for the ",
             "engines inside it: nif, port, ehttpd, httpd, mochiweb, yaws share one node and its memory), and the average CPU% ",
             "(100% = one core busy), sampled every 100 ms in the measured window only. `-`: the server does not ",
             "serve the scenario (nginx and h2o have no echo or cookie parser; inets httpd serves only `/hello` ",
             "and `/echo`) or is not installed.",
             case [P || P <- ["nginx", "h2o"], not lists:member(P, Engines)] of
                 [] -> "";
                 Missing -> [" Not measured in this run (not installed or not asked for): ",
                             lists:join(", ", Missing), "; their rows are absent."]
             end, "\n\n",
             [["### ", proto_title(P), "\n\n",
               cbench_bench_report:md_table(
                 ["scenario", "server", "req/s", "rss", "beam", "cpu%"],
                 lists:append([scenario_rows(Rows, P, C, Engines) || C <- Cs])), "\n",
               ratios(Rows, P, Cs, Engines)]
              || {P, Cs} <- Present]]
    end.

proto_cases(h1) -> h1_cases();
proto_cases(h2c) -> h2c_cases().

proto_title(h1) -> "HTTP/1.1";
proto_title(h2c) -> "HTTP/2 (h2c)".

scenario_rows(Rows, P, C, Engines) ->
    Found = [{E, find(Rows, P, C, E)} || E <- Engines],
    Measured = lists:sort(fun({_, A}, {_, B}) -> maps:get(rps, A) >= maps:get(rps, B) end,
                          [{E, R} || {E, R = #{rps := _}} <- Found]),
    Other = [{E, R} || {E, R} <- Found, not is_map(R) orelse not maps:is_key(rps, R)],
    [["`" ++ atom_to_list(C) ++ "`", E, cbench_bench_report:cell(R), kb(maps:get(rss_kb, R, undefined)),
      cbench_bench_stats:fmt_bytes(maps:get(beam, R, undefined)), pct(maps:get(cpu_pct, R, undefined))]
     || {E, R} <- Measured]
        ++ [["`" ++ atom_to_list(C) ++ "`", E, cbench_bench_report:cell(R), "-", "-", "-"]
            || {E, R} <- Other].

ratios(Rows, P, Cs, Engines) ->
    Pairs = [{"nif", "ehttpd"}, {"cbench-server", "nginx"}],
    %% A pair is shown where both were measured on at least one scenario of this protocol.
    Cols = [{A, B} || {A, B} <- Pairs, lists:member(A, Engines), lists:member(B, Engines),
                      lists:any(fun(C) -> ratio(find(Rows, P, C, A), find(Rows, P, C, B)) =/= "-" end, Cs)],
    case Cols of
        [] -> [];
        _ ->
            ["Ratios, `req/s ratio / CPU-per-request ratio` (above 1x: the first is faster; below 1x: ",
             "the first is cheaper per request):\n\n",
             cbench_bench_report:md_table(
               ["scenario" | [A ++ " / " ++ B || {A, B} <- Cols]],
               [["`" ++ atom_to_list(C) ++ "`" | [ratio(find(Rows, P, C, A), find(Rows, P, C, B)) || {A, B} <- Cols]]
                || C <- Cs]), "\n"]
    end.

ratio(#{status := ok, rps := RA} = A, #{status := ok, rps := RB} = B) when RB > 0 ->
    Cpu = case {maps:get(cpu_us, A, undefined), maps:get(cpu_us, B, undefined)} of
              {X, Y} when is_number(X), is_number(Y), Y > 0 -> fmt_float(X / Y, 2) ++ "x";
              _ -> "n/a"
          end,
    fmt_float(RA / RB, 2) ++ "x / " ++ Cpu;
ratio(_, _) -> "-".

find(Rows, P, C, E) ->
    case [R || R = #{proto := P1, 'case' := C1, engine := E1} <- Rows, P1 =:= P, C1 =:= C, E1 =:= E] of
        [R | _] -> R;
        [] -> undefined
    end.

kb(undefined) -> "-";
kb(K) -> cbench_bench_stats:fmt_bytes(K * 1024).

pct(undefined) -> "-";
pct(P) -> integer_to_list(round(P)) ++ " %".
