%%% @doc cbench-load end to end, through cbench:load/2: every request counted once against a
%%% server that counts too (the nif engine); answers parsed byte for byte (pipelined, chunked, h2
%%% DATA, HEAD, echoed bodies, WebSocket echoes); errors classified against small gen_tcp servers
%%% that reset, stall, refuse or answer 500; coordinated omission corrected when cbench-server is
%%% frozen with SIGSTOP for 300 ms; and the program's and the API's answers to bad input.
%%%
%%% The group hostile (issue 22) runs the program itself against gen_tcp servers that attack it
%%% (a WebSocket ping flood that never reads, three answers per request, a 200 instead of the 101,
%%% endless heads, chunked bodies and 100 Continues (before an answer, and before a WebSocket 101),
%%% two echoes per message, a second h2 answer on a stream the client did not open) and asserts its exit status, its error counters and its peak
%%% RSS against a run with a silent server.
%%%
%%% Loads are short (0.3-1 s, 3 s for the SIGSTOP case) and no timing is asserted except the one
%%% the issue specifies: the corrected p99.9 of a run with a 300 ms freeze is at least 250 ms.
-module(cbench_load_SUITE).

-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, init_per_suite/1, end_per_suite/1]).
-export([h1_keep_alive/1, h1_pipelined_chunked/1, h1_head/1, h1_new_conn/1, h2c_new_conn/1, h1_paths_round_robin/1,
         echo_with_headers/1, h2c_streams/1, h2c_head_and_echo/1, h2c_server_stream_limit/1,
         h2c_big_body/1, h2_goaway_reconnects/1, open_loop_schedule/1, open_loop_tiny_rate/1,
         api_small_rate/1, open_loop_rate_unreachable/1,
         status_500/1, reset_server/1, stalled_server/1, late_answer/1, refused_connect/1, ws_echo/1,
         ws_bad_echo/1, ws_interim_1xx/1, ws_long_path/1, ws_host_header/1, ws_route_missing/1, ws_engine/1, coordinated_omission/1, cli_usage/1, cli_cpus/1,
         api_bad_input/1]).
-export([init_per_group/2, end_per_group/2]).
-export([tls_h1/1, tls_h2/1, tls_wss/1, tls_new_conn_resumed/1, tls_new_conn_full/1, tls_new_conn_h2/1, tls_bad_ca/1,
         tls_wrong_host/1, tls_stalled_and_closed/1, tls_h2_no_alpn/1]).
-export([ws_ping_flood/1, three_answers/1, ws_200_not_101/1, endless_head/1, endless_chunked/1,
         endless_continue/1, ws_two_echoes/1, h2_unsolicited/1, h2_ping_flood/1, h2_goaway_then_silence/1,
         status_over_599/1, ws_endless_continue/1]).

all() -> [{group, server}, {group, faults}, {group, hostile}, {group, tls}, coordinated_omission,
          cli_usage, cli_cpus, api_bad_input].

groups() ->
    [{server, [], [h1_keep_alive, h1_pipelined_chunked, h1_head, h1_new_conn, h2c_new_conn, h1_paths_round_robin,
                   echo_with_headers, h2c_streams, h2c_head_and_echo, h2c_server_stream_limit, h2c_big_body,
                   open_loop_schedule, open_loop_tiny_rate, api_small_rate, open_loop_rate_unreachable,
                   status_500, ws_engine]},
     {faults, [], [reset_server, stalled_server, late_answer, refused_connect, ws_echo, ws_bad_echo, ws_interim_1xx, ws_long_path,
                   ws_host_header, ws_route_missing]},
     {tls, [], [tls_h1, tls_h2, tls_wss, tls_new_conn_resumed, tls_new_conn_full, tls_new_conn_h2, tls_bad_ca,
                tls_wrong_host, tls_stalled_and_closed, tls_h2_no_alpn]},
     {hostile, [], [ws_ping_flood, three_answers, ws_200_not_101, endless_head, endless_chunked,
                    endless_continue, ws_two_echoes, h2_unsolicited, h2_ping_flood, h2_goaway_reconnects,
                    h2_goaway_then_silence, status_over_599, ws_endless_continue]}].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(cbench),
    {ok, S} = cbench:start_server(nif, #{port => 0, threads => 1}),
    [{server, S} | Config].

end_per_suite(Config) ->
    ok = cbench:stop_server(proplists:get_value(server, Config)),
    application:stop(cbench).

%% The hostile group's yardstick: cbench-load's peak RSS in a run as long as theirs against a server
%% that accepts and never reads or answers (the same binary, so a sanitizer build compares with
%% itself).
init_per_group(hostile, Config) ->
    {Port, Stop} = fault_server(fun(_S) -> receive after infinity -> ok end end),
    {3, R, Hwm} = watched(url_of(Port, "/hello"), #{}),
    Stop(),
    #{requests := #{sent := N, completed := 0}, errors := #{timeout := N}} = R,
    ct:log("silent server: VmHWM ~b kB, ~p", [Hwm, R]),
    [{base_hwm, Hwm} | Config];
init_per_group(_, Config) ->
    Config.

end_per_group(_, _Config) -> ok.

url(Config, Path) -> cbench:url(proplists:get_value(server, Config), Path).

%% Runs a load and checks the bookkeeping every run must satisfy: each measured request is
%% answered or counted under exactly one error kind (or left unsent by an open loop).
load(Url, Opts) ->
    {ok, R} = cbench:load(Url, Opts),
    #{requests := #{sent := Sent, completed := Done},
      errors := #{reset := Re, timeout := To, protocol := Pr}} = R,
    ?assertEqual(Sent, Done + Re + To + Pr, R),
    R.

%% The server's request count moves by exactly what cbench-load sent: counted once, none lost.
counted(Config, Fun) ->
    S = proplists:get_value(server, Config),
    #{requests := Before} = cbench:stats(S),
    R = Fun(),
    #{requests := After} = cbench:stats(S),
    #{requests := #{sent := Sent}} = R,
    ?assertEqual(Sent, After - Before, R),
    R.

no_errors(#{errors := #{total := 0}, requests := #{sent := S, completed := S, ok := S}} = R) when S > 0 -> R;
no_errors(R) -> ct:fail({errors, R}).

h1_keep_alive(Config) ->
    R = counted(Config, fun() -> load(url(Config, "/hello"), #{connections => 4, duration => 0.5}) end),
    #{requests := #{completed := N}, bytes := #{body := Body}, connects := 4,
      status := Status, mode := <<"closed">>, proto := <<"h1">>} = no_errors(R),
    ?assertEqual(#{200 => N}, Status),
    ?assertEqual(N * byte_size(<<"Hello, Joe!">>), Body),
    #{latency_us := #{corrected := C, uncorrected := U}, timeline := [_]} = R,
    %% Closed loop: intended = actual send, so the two histograms are the same.
    ?assertEqual(C, U),
    #{count := N, p50 := P50, p99 := P99, p999 := P999, max := Max} = C,
    ?assert(P50 > 0 andalso P50 =< P99 andalso P99 =< P999 andalso P999 =< Max).

%% /stream/small: 100 chunks of 64 bytes, chunked; 8 requests pipelined on each connection. Every
%% answer is the same bytes but for the Date header's value (same length), so the bytes read are
%% exactly the answers times one answer's size.
h1_pipelined_chunked(Config) ->
    {Head, Chunked} = raw(Config, <<"GET /stream/small HTTP/1.1\r\nhost: x\r\n\r\n">>),
    One = byte_size(Head) + byte_size(Chunked),
    R = counted(Config, fun() ->
                                load(url(Config, "/stream/small"),
                                     #{connections => 2, depth => 8, duration => 0.5})
                        end),
    #{requests := #{completed := N}, bytes := #{body := Body, read := Read}} = no_errors(R),
    ?assertEqual(N * 6400, Body),
    ?assertEqual(N * One, Read).

h1_head(Config) ->
    R = counted(Config, fun() ->
                                load(url(Config, "/file/small"),
                                     #{method => "HEAD", connections => 2, depth => 4, duration => 0.3})
                        end),
    #{requests := #{completed := N}, bytes := #{body := 0, read := Read}} = no_errors(R),
    {One, <<>>} = raw(Config, <<"HEAD /file/small HTTP/1.1\r\nhost: x\r\n\r\n">>),
    ?assertEqual(N * byte_size(One), Read).

h1_new_conn(Config) ->
    S = proplists:get_value(server, Config),
    #{conns_accepted := A0} = cbench:stats(S),
    R = counted(Config, fun() ->
                                load(url(Config, "/hello"),
                                     #{new_conn => true, connections => 2, duration => 0.3})
                        end),
    #{requests := #{completed := N}, connects := Connects, new_conn := true} = no_errors(R),
    #{conns_accepted := A1} = cbench:stats(S),
    %% One connection per request: each answered request had its own, and a connection is opened
    %% again after each answer, so at the end each of the 2 may be open (counted) or still
    %% connecting (accepted by the server, not yet counted by the client) without a request.
    ?assert(Connects >= N andalso Connects =< N + 2, R),
    ?assert(A1 - A0 >= Connects andalso A1 - A0 =< N + 2, {A1 - A0, R}).

%% --new-conn over h2c: one stream per connection, the connection closed once its stream is done;
%% the same bounds as h1_new_conn, and the server counts each one under h2c_prior.
h2c_new_conn(Config) ->
    S = proplists:get_value(server, Config),
    #{conns_accepted := A0, conns_by_proto := #{h2c_prior := P0}} = cbench:stats(S),
    R = counted(Config, fun() ->
                                load(url(Config, "/hello"),
                                     #{proto => h2c, new_conn => true, connections => 2, duration => 0.3})
                        end),
    #{requests := #{completed := N}, connects := Connects, new_conn := true, proto := <<"h2c">>} = no_errors(R),
    #{conns_accepted := A1, conns_by_proto := #{h2c_prior := P1}} = cbench:stats(S),
    ?assert(N > 2, R),
    ?assert(Connects >= N andalso Connects =< N + 2, R),
    ?assert(A1 - A0 >= Connects andalso A1 - A0 =< N + 2, {A1 - A0, R}),
    ?assert(P1 - P0 >= N andalso P1 - P0 =< N + 2, {P1 - P0, R}).

h1_paths_round_robin(Config) ->
    S = proplists:get_value(server, Config),
    #{requests_by_route := #{hello := H0, json := J0}} = cbench:stats(S),
    R = load(url(Config, "/"), #{paths => ["/hello", "/json"], connections => 1, duration => 0.3}),
    #{requests := #{completed := N}, bytes := #{body := Body}} = no_errors(R),
    #{requests_by_route := #{hello := H1, json := J1}} = cbench:stats(S),
    {H, J} = {H1 - H0, J1 - J0},
    ?assertEqual(N, H + J),
    ?assert(abs(H - J) =< 1),
    ?assertEqual(H * 11 + J * byte_size(<<"{\"message\":\"Hello, Joe!\"}">>), Body).

%% POST /echo with a 1 KiB body and the seven headers of the benchmark's *_headers cases.
echo_with_headers(Config) ->
    Body = binary:copy(<<"0123456789abcdef">>, 64),
    Hdrs = [{"cookie", "session=7f3a9c2e41b84d0f; theme=dark"},
            {"cookie", "cart=3fa85f64-5717-4562-b3fc-2c963f66afa6"},
            {"cookie", "consent=analytics:0,ads:0"},
            {"x-request-id", "b7e4c2a0-6f1d-4c3e-9a58-1d2e3f4a5b6c"},
            {"x-client-version", "cbench-bench/1.0"},
            {"accept-language", "en-GB,en;q=0.9,fr;q=0.8"},
            {"x-forwarded-for", "203.0.113.7, 198.51.100.23"}],
    [begin
         R = counted(Config, fun() ->
                                     load(url(Config, "/echo"),
                                          #{proto => P, body => Body, headers => Hdrs,
                                            connections => 2, depth => 2, duration => 0.3})
                             end),
         #{requests := #{completed := N}, bytes := #{body := Got}} = no_errors(R),
         ?assertEqual(N * 1024, Got)
     end || P <- [h1, h2c]],
    %% The headers arrive as sent: /headers echoes them as JSON.
    R2 = load(url(Config, "/headers"), #{headers => Hdrs, connections => 1, duration => 0.2}),
    #{requests := #{completed := N2}, bytes := #{body := B2}} = no_errors(R2),
    Port = cbench:port(proplists:get_value(server, Config)),
    Req = ["GET /headers HTTP/1.1\r\nhost: 127.0.0.1:", integer_to_list(Port), "\r\n",
           [[N, ": ", V, "\r\n"] || {N, V} <- Hdrs], "\r\n"],
    {_, Json} = raw(Config, iolist_to_binary(Req)),
    ?assertEqual(N2 * byte_size(Json), B2).

%% h2c: 10 streams on each of 2 connections; /stream/small's 6,400 bytes come as DATA frames.
h2c_streams(Config) ->
    R = counted(Config, fun() ->
                                load(url(Config, "/stream/small"),
                                     #{proto => h2c, connections => 2, depth => 10, duration => 0.5})
                        end),
    #{requests := #{completed := N}, bytes := #{body := Body}, proto := <<"h2c">>, connects := 2} =
        no_errors(R),
    ?assertEqual(N * 6400, Body),
    ?assert(N > 20).

h2c_head_and_echo(Config) ->
    R = counted(Config, fun() ->
                                load(url(Config, "/file/tiny"),
                                     #{proto => h2c, method => "HEAD", connections => 1, depth => 4,
                                       duration => 0.3})
                        end),
    #{bytes := #{body := 0}} = no_errors(R),
    R2 = counted(Config, fun() ->
                                 load(url(Config, "/file/tiny"),
                                      #{proto => h2c, connections => 1, depth => 4, duration => 0.3})
                         end),
    #{requests := #{completed := N}, bytes := #{body := B}} = no_errors(R2),
    ?assertEqual(N * 1024, B).

%% A server that allows 3 streams at once, 10 in flight per connection: the requests past its limit
%% wait in the client for a stream to end (a stream over it would be refused: a protocol error).
h2c_server_stream_limit(_Config) ->
    {ok, S} = cbench:start_server(nif, #{port => 0, threads => 1, h2_max_concurrent_streams => 3}),
    try
        R = load(cbench:url(S, "/hello"), #{proto => h2c, connections => 1, depth => 10, duration => 0.3}),
        #{requests := #{completed := N}, connects := 1} = no_errors(R),
        ?assert(N > 10, R)
    after
        ok = cbench:stop_server(S)
    end.

%% Bodies larger than the server's windows (1 MiB each, 2 streams): DATA goes as the server's
%% WINDOW_UPDATEs open them, and every echo comes back whole.
h2c_big_body(Config) ->
    Body = binary:copy(<<"0123456789abcdef">>, 65536),
    R = counted(Config, fun() ->
                                load(url(Config, "/echo"), #{proto => h2c, body => Body, connections => 1,
                                                             depth => 2, duration => 0.5})
                        end),
    #{requests := #{completed := N}, bytes := #{body := B}} = no_errors(R),
    ?assertEqual(N * byte_size(Body), B).

%% h2c: each connection's first request answered, then GOAWAY with that stream as the last: no new
%% stream starts on it, and once its last stream is done the connection is opened again. With one
%% request in flight nothing fails.
h2_goaway_reconnects(_Config) ->
    {Port, Stop} = fault_server(fun(S) ->
                                        {ok, _} = gen_tcp:recv(S, 24, 5000),
                                        ok = gen_tcp:send(S, h2_frame(4, 0, 0, <<>>)),
                                        h2_answer_then_goaway(S, <<>>)
                                end),
    R = load(url_of(Port, "/hello"), #{proto => h2c, connections => 1, depth => 1, duration => 0.3}),
    Stop(),
    #{requests := #{ok := Ok}, connects := Connects} = no_errors(R),
    ?assert(Ok >= 2 andalso Connects >= Ok, R).

h2_answer_then_goaway(S, <<Len:24, Type, Flags, _:1, Sid:31, _:Len/binary, Rest/binary>>) ->
    case {Type, Flags band 1} of
        {4, 0} -> ok = gen_tcp:send(S, h2_frame(4, 1, 0, <<>>));
        {1, 1} -> ok = gen_tcp:send(S, [h2_frame(1, 5, Sid, <<16#88>>), h2_frame(7, 0, 0, <<0:1, Sid:31, 0:32>>)]);
        _ -> ok
    end,
    h2_answer_then_goaway(S, Rest);
h2_answer_then_goaway(S, Buf) ->
    case gen_tcp:recv(S, 0) of
        {ok, D} -> h2_answer_then_goaway(S, <<Buf/binary, D/binary>>);
        {error, _} -> ok
    end.

%% A rate so low that the run holds one request: request 0 of connection 0 is due at the start and
%% every later one long after the end. The program's own argument (cbench:load/2 writes rates with 6
%% decimals). Before: the second request's time, 10^20 ns after the start, did not fit the integer
%% it was converted to (undefined; on x86-64 it came out as 0, the start), so every request was due
%% at once and the schedule's loop never ended: the run never did.
open_loop_tiny_rate(Config) ->
    Url = url(Config, "/hello"),
    {Exit, R, _} = watched_args(Url, ["--rate", "1e-11", "--connections", "1", "--duration", "0.3",
                                      "--timeout", "0.5", Url], 20000),
    #{requests := #{sent := 1, completed := 1, ok := 1, unsent := 0}, errors := #{total := 0},
      mode := <<"open">>} = R,
    ?assertEqual(0, Exit, R).

%% The highest rate the program takes, 10^9 req/s for 3 s, against a port that refuses: nothing is
%% sent, and each of the 3 * 10^9 requests due in the window is counted unsent, exactly (request k
%% is intended k ns after the start). The run ends within its duration and timeout: the bound
%% here is 10 s more. Before: the schedule was walked request by request, twice (handing them out,
%% then counting them), 30 s for 1 s on a 2-CPU VM.
open_loop_rate_unreachable(_Config) ->
    Url = url_of(1, "/hello"),
    {Exit, R, _} = watched_args(Url, ["--rate", "1000000000", "--connections", "1", "--duration", "3",
                                      "--timeout", "0.2", Url], 13200),
    #{requests := #{sent := 0, unsent := 3000000000}, mode := <<"open">>} = R,
    ?assertEqual(3, Exit, R).

%% cbench:load/2 hands the program a rate (and any seconds) as written, not rounded to 6 decimals:
%% 1.0e-7 req/s is an open loop with one request due in the run. Before: "--rate 0.000000", a closed
%% loop sending as fast as the server answered; and the --erl file wrote its offered_rps as 0.000.
api_small_rate(Config) ->
    Url = url(Config, "/hello"),
    ?assertMatch({ok, ["--rate", "1.0e-7", Url], _}, cbench_load:args(Url, #{rate => 1.0e-7})),
    R = load(Url, #{rate => 1.0e-7, connections => 1, duration => 0.3}),
    #{requests := #{sent := 1, completed := 1, ok := 1, unsent := 0}, mode := <<"open">>} = no_errors(R),
    %% The results file keeps it too (it wrote 3 decimals: 0.0).
    ?assertEqual(1.0e-7, maps:get(offered_rps, R)).

%% Open loop: 400 req/s over 2 connections for 1 s is 400 intended requests. Each is sent, or
%% (when the client was not scheduled in the last 2.5 ms of the window, on a busy machine)
%% counted unsent; every one sent is answered and in the histograms, and in the timeline unless it
%% was answered after the window (late: the last request's answer may come after it ended).
open_loop_schedule(Config) ->
    R = counted(Config, fun() ->
                                load(url(Config, "/hello"),
                                     #{rate => 400, connections => 2, duration => 1})
                        end),
    #{requests := #{sent := N, unsent := Unsent, late := Late}, mode := <<"open">>, offered_rps := 400.0,
      achieved_rps := A, timeline := [#{second := 1, rps := Rps}],
      latency_us := #{corrected := #{count := N, p50 := C50},
                      uncorrected := #{count := N, p50 := U50},
                      send_lag := #{count := N}}} = no_errors(R),
    ?assertEqual(400, N + Unsent),
    ?assert(N >= 390, R),
    ?assertEqual(float(N), A),
    ?assertEqual(float(N - Late), Rps),
    ?assert(C50 >= U50).

status_500(Config) ->
    R = load(url(Config, "/status/500"), #{connections => 2, duration => 0.3}),
    #{requests := #{sent := N, completed := N, ok := 0}, errors := #{status := St, total := N}} = R,
    ?assert(N > 0),
    ?assertEqual(#{500 => N}, St).

%% ---- fault servers ----------------------------------------------------------------------------

%% Reads each request, then resets the connection (SO_LINGER 0): every request is a reset.
reset_server(_Config) ->
    {Port, Stop} = fault_server(fun(S) ->
                                        {ok, _, _} = recv_head(S, <<>>),
                                        ok = inet:setopts(S, [{linger, {true, 0}}]),
                                        gen_tcp:close(S)
                                end),
    R = load(url_of(Port, "/hello"), #{connections => 2, duration => 0.4}),
    Stop(),
    #{requests := #{sent := N, completed := 0}, errors := #{reset := N}} = R,
    ?assert(N >= 2, R).

%% Reads each request and never answers: with a 0.3 s timeout, every request is a timeout.
stalled_server(_Config) ->
    {Port, Stop} = fault_server(fun(S) ->
                                        {ok, _, _} = recv_head(S, <<>>),
                                        receive after infinity -> ok end
                                end),
    R = load(url_of(Port, "/hello"), #{connections => 2, duration => 1, timeout => 0.3}),
    Stop(),
    #{requests := #{sent := N, completed := 0}, errors := #{timeout := N, reset := 0}} = R,
    ?assert(N >= 4, R).

%% An answer that comes after the window closes (the run's duration) but within --timeout: counted
%% as answered and in the latency, and under requests.late, but in no second of the timeline, whose
%% seconds are those of the window. The server answers the first request at once and holds the
%% second 1.5 s, past the 1 s window; nothing more is sent after the window. Before: the late answer
%% was counted in the last second, rps 2.0 for the 1.0 that came in it.
late_answer(_Config) ->
    Ok = <<"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok">>,
    {Port, Stop} = fault_server(fun(S) ->
                                        {ok, _, Rest} = recv_head(S, <<>>),
                                        ok = gen_tcp:send(S, Ok),
                                        {ok, _, _} = recv_head(S, Rest),
                                        timer:sleep(1500),
                                        ok = gen_tcp:send(S, Ok),
                                        receive after infinity -> ok end
                                end),
    R = load(url_of(Port, "/hello"), #{connections => 1, duration => 1, timeout => 3}),
    Stop(),
    #{requests := #{sent := 2, completed := 2, ok := 2, late := 1}, errors := #{total := 0},
      timeline := [#{second := 1, rps := 1.0}], latency_us := #{corrected := #{count := 2, max := Max}}} = R,
    ?assert(Max >= 1.0e6, R).

refused_connect(_Config) ->
    {ok, L} = gen_tcp:listen(0, [{ip, {127, 0, 0, 1}}]),
    {ok, Port} = inet:port(L),
    ok = gen_tcp:close(L),
    R = load(url_of(Port, "/hello"), #{connections => 2, duration => 0.3}),
    #{requests := #{sent := 0}, errors := #{connect := C}, connects := 0} = R,
    ?assert(C >= 2, R).

%% A WebSocket echo server (RFC 6455) on gen_tcp: the 101, then every masked frame echoed
%% unmasked. Until issue 16 adds GET /ws to the engines, this is the server the mode is tested on.
ws_echo(_Config) ->
    %% A second, not less: the echo server is a gen_tcp process of this node, and on a loaded
    %% machine (make test beside other builds) 0.4 s once passed before it answered a handshake,
    %% a run with nothing sent, which proves nothing about the echo.
    {Port, Stop} = fault_server(fun(S) -> ws_serve(S, fun(M) -> M end) end),
    R = until_sent("ws://127.0.0.1:" ++ integer_to_list(Port) ++ "/ws",
                   #{connections => 2, depth => 2, duration => 1}),
    Stop(),
    #{requests := #{completed := N}, bytes := #{body := Body}, proto := <<"ws">>, status := St} =
        no_errors(R),
    ?assertEqual(N * 1024, Body),
    ?assertEqual(#{}, St),
    %% Any size, one message at a time.
    {Port2, Stop2} = fault_server(fun(S) -> ws_serve(S, fun(M) -> M end) end),
    R2 = until_sent("http://127.0.0.1:" ++ integer_to_list(Port2) ++ "/ws",
                    #{proto => ws, ws_size => 70000, connections => 1, duration => 1}),
    Stop2(),
    #{requests := #{completed := N2}, bytes := #{body := B2}} = no_errors(R2),
    ?assertEqual(N2 * 70000, B2).

%% A run against this node's echo server that sent nothing (with both CPUs busy, the node answered
%% no handshake within the run: a clean-clone CI run with its CPUs kept busy failed so) proves
%% nothing about the echo: it runs again, twice as long, at most three times; the last run is
%% judged as it is.
until_sent(Url, Opts) -> until_sent(Url, Opts, 3).

until_sent(Url, Opts = #{duration := D}, Tries) ->
    case load(Url, Opts) of
        #{requests := #{sent := 0}} = R when Tries > 1 ->
            ct:log("nothing sent in ~p s (~p): again for ~p s", [D, R, 2 * D]),
            until_sent(Url, Opts#{duration => 2 * D}, Tries - 1);
        R ->
            R
    end.

%% Interim answers before the 101 (RFC 9110 15.2: a client parses 1xx before the final answer): a 100
%% Continue and a 103 Early Hints with a field, each connection's, then the 101 and the echoes. Before:
%% the 100 failed the upgrade (a protocol error counted under status 100), nothing was sent.
ws_interim_1xx(_Config) ->
    Interim = <<"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a.css>; rel=preload\r\n\r\n">>,
    {Port, Stop} = fault_server(fun(S) ->
                                        {ok, Head, Early} = recv_head(S, <<>>),
                                        ok = gen_tcp:send(S, Interim),
                                        ws_accept(S, Head),
                                        ws_loop(S, Early, fun(M) -> M end)
                                end),
    R = until_sent("ws://127.0.0.1:" ++ integer_to_list(Port) ++ "/ws",
                   #{connections => 2, depth => 2, duration => 1}),
    Stop(),
    #{requests := #{completed := N}, bytes := #{body := Body}, status := St} = no_errors(R),
    ?assertEqual(N * 1024, Body),
    ?assertEqual(#{}, St).

%% The upgrade request on a path longer than the 2 KiB the request was once formatted into: the
%% server reads exactly the request, and echoes. Before: snprintf truncated it there and the length it
%% would have had was appended from that buffer, a read past its end (ASan: stack-buffer-overflow)
%% that sent the stack's bytes to the server in place of the rest of the head.
ws_long_path(_Config) ->
    Path = "/" ++ lists:duplicate(3000, $p),
    {Port, R, Head} = ws_upgrade_request(#{paths => [Path]}),
    #{requests := #{completed := N}} = no_errors(R),
    ?assertEqual(iolist_to_binary(["GET ", Path, " HTTP/1.1\r\nhost: 127.0.0.1:", integer_to_list(Port),
                                   "\r\nupgrade: websocket\r\nconnection: Upgrade\r\n"
                                   "sec-websocket-key: Y2JlbmNoLWxvYWQta2V5IQ==\r\nsec-websocket-version: 13\r\n\r\n"]),
                 Head),
    ?assert(N >= 1, R).

%% -H 'host: ...' replaces the URL's authority in the upgrade request as in every other request.
%% Before: both went, two host fields, which a server answers with a 400 (RFC 9112 3.2).
ws_host_header(_Config) ->
    {_, R, Head} = ws_upgrade_request(#{headers => [{"Host", "example.test"}]}),
    #{requests := #{completed := N}} = no_errors(R),
    ?assertEqual(<<"GET /ws HTTP/1.1\r\nupgrade: websocket\r\nconnection: Upgrade\r\n"
                   "sec-websocket-key: Y2JlbmNoLWxvYWQta2V5IQ==\r\nsec-websocket-version: 13\r\n"
                   "Host: example.test\r\n\r\n">>, Head),
    ?assert(N >= 1, R).

%% A WebSocket run on one connection against an echo server that keeps the first upgrade request
%% it reads: {Port, Results, Request}.
ws_upgrade_request(Opts) ->
    Self = self(),
    {Port, Stop} = fault_server(fun(S) ->
                                        {ok, Head, Early} = recv_head(S, <<>>),
                                        Self ! {ws_head, Head},
                                        ws_accept(S, Head),
                                        ws_loop(S, Early, fun(M) -> M end)
                                end),
    R = until_sent("ws://127.0.0.1:" ++ integer_to_list(Port) ++ "/ws",
                   maps:merge(#{connections => 1, duration => 1}, Opts)),
    Stop(),
    Head = receive {ws_head, H} -> H after 0 -> ct:fail({no_upgrade_request, R}) end,
    {Port, R, Head}.

%% An echo that is not what was sent is a protocol error.
ws_bad_echo(_Config) ->
    {Port, Stop} = fault_server(fun(S) -> ws_serve(S, fun(<<_, M/binary>>) -> <<"X", M/binary>> end) end),
    R = load("ws://127.0.0.1:" ++ integer_to_list(Port) ++ "/ws", #{connections => 1, duration => 0.3}),
    Stop(),
    #{requests := #{sent := N, completed := 0}, errors := #{protocol := N}} = R,
    ?assert(N >= 1, R).

%% A path without the route answers the upgrade with 404: counted by status (not again as an
%% upgrade error), nothing sent; cbench:load/2 returns the results of the run that exited 3.
ws_route_missing(Config) ->
    Url = "ws" ++ string:prefix(url(Config, "/no-ws"), "http"),
    R = load(Url, #{connections => 1, duration => 0.2}),
    #{requests := #{sent := 0}, errors := #{status := #{404 := N}, upgrade := 0, total := N}} = R,
    ?assert(N >= 1, R).

%% The engine's own /ws (docs/wire.md): every message echoed byte for byte, one upgrade per
%% connection counted under the route ws.
ws_engine(Config) ->
    S = proplists:get_value(server, Config),
    #{requests_by_route := #{ws := Before}} = cbench:stats(S),
    Url = "ws" ++ string:prefix(url(Config, "/ws"), "http"),
    R = load(Url, #{connections => 2, depth => 2, duration => 0.3, ws_size => 300}),
    #{requests := #{sent := N, completed := N, ok := N}, errors := #{total := 0}, connects := 2} = R,
    ?assert(N >= 2, R),
    #{requests_by_route := #{ws := After}} = cbench:stats(S),
    ?assertEqual(2, After - Before).

%% ---- TLS (issue 24): cbench-server --tls, a fresh one per case -------------------------------------

%% The server's own count of requests and connections, read from the stats it prints when it stops,
%% moves by exactly what cbench-load sent: counted once, none lost, as counted/2 checks on the nif
%% engine.
tls_run(Url0, Opts, Check) ->
    {_Os, Port, Ca, Stop} = start_cbench_server(["--tls"]),
    Url = re:replace(Url0, "PORT", integer_to_list(Port), [{return, list}]),
    R = load(Url, Opts#{cacert => Ca}),
    Stats = Stop(),
    ct:log("~s ~p:~n~p~n~s", [Url, Opts, R, Stats]),
    Check(R, server_counts(Stats)).

%% {Requests, ConnectionsAccepted} from the line "cbench-server stats: conns accepted A ..., requests N".
server_counts(Stats) ->
    {match, [A, N]} = re:run(Stats, "conns accepted ([0-9]+) .* requests ([0-9]+)",
                             [{capture, all_but_first, binary}]),
    {binary_to_integer(N), binary_to_integer(A)}.

tls_h1(_Config) ->
    tls_run("https://localhost:PORT/hello", #{connections => 2, duration => 0.3},
            fun(R, {Served, Accepted}) ->
                    #{requests := #{sent := N, completed := N}, status := St, proto := <<"h1">>, connects := 2,
                      bytes := #{body := Body},
                      tls := #{version := <<"TLSv1.3">>, alpn := <<"http/1.1">>, verify := true,
                               handshakes := #{full := 2, resumed := 0, failed := 0}, error := undefined}} =
                        no_errors(R),
                    ?assertEqual(#{200 => N}, St),
                    ?assertEqual(N * 11, Body),
                    ?assertEqual({N, 2}, {Served, Accepted})
            end).

%% -p h2 over https: ALPN h2, 10 streams on each of 2 connections; h2c is the same option.
tls_h2(_Config) ->
    tls_run("https://127.0.0.1:PORT/stream/small", #{proto => h2, connections => 2, depth => 10, duration => 0.3},
            fun(R, {Served, Accepted}) ->
                    #{requests := #{sent := N}, status := St, proto := <<"h2">>, connects := 2,
                      bytes := #{body := Body}, tls := #{alpn := <<"h2">>, handshakes := #{full := 2}}} =
                        no_errors(R),
                    ?assertEqual(#{200 => N}, St),
                    ?assertEqual(N * 6400, Body),
                    ?assertEqual({N, 2}, {Served, Accepted})
            end),
    tls_run("https://localhost:PORT/echo", #{proto => h2c, body => binary:copy(<<"e">>, 1024), connections => 1,
                                             depth => 4, duration => 0.3, tls13_ciphers => "TLS_AES_128_GCM_SHA256"},
            fun(R, {Served, _}) ->
                    #{requests := #{sent := N}, bytes := #{body := Body}, proto := <<"h2">>,
                      tls := #{cipher := <<"TLS_AES_128_GCM_SHA256">>}} = no_errors(R),
                    ?assertEqual(N * 1024, Body),
                    ?assertEqual(N, Served)
            end).

%% wss://: the engine's /ws over TLS, every message echoed; the upgrades are the server's requests.
tls_wss(_Config) ->
    tls_run("wss://localhost:PORT/ws", #{connections => 2, depth => 2, duration => 0.3, ws_size => 300},
            fun(R, {Served, Accepted}) ->
                    #{requests := #{completed := N}, bytes := #{body := Body}, proto := <<"ws">>,
                      tls := #{alpn := <<"http/1.1">>}} = no_errors(R),
                    ?assertEqual(N * 300, Body),
                    ?assertEqual({2, 2}, {Served, Accepted})
            end).

%% A connection per request, resumption on (the default): each connection's first handshake is a
%% full one, the next ones resume the session (the ticket) its previous connection got. One
%% handshake per request, and one TCP connection per handshake: at the end each of the 2 may have
%% reconnected without a request (the server accepted it, the handshake may have completed), so
%% the counts may exceed the requests by 2 at most, as in h1_new_conn.
tls_new_conn_resumed(_Config) ->
    tls_run("https://localhost:PORT/hello", #{new_conn => true, connections => 2, duration => 0.3},
            fun(R, {Served, Accepted}) ->
                    #{requests := #{sent := N}, connects := Connects,
                      tls := #{resume := true, handshakes := #{full := Full, resumed := Resumed, failed := 0}}} =
                        no_errors(R),
                    ?assertEqual(N, Served),
                    ?assert(N > 2, R),
                    ?assert(Full >= 1 andalso Resumed > 0, R),
                    ?assert(Full + Resumed >= N andalso Full + Resumed =< N + 2, R),
                    ?assert(Connects >= Full + Resumed andalso Connects =< N + 2, R),
                    ?assert(Accepted >= Connects andalso Accepted =< N + 2, {Accepted, R})
            end).

%% Over h2 (ALPN): a connection, a handshake and a stream per request, resumed as over HTTP/1.1.
tls_new_conn_h2(_Config) ->
    tls_run("https://localhost:PORT/hello", #{proto => h2, new_conn => true, connections => 2, duration => 0.3},
            fun(R, {Served, Accepted}) ->
                    #{requests := #{sent := N}, proto := <<"h2">>, connects := Connects,
                      tls := #{alpn := <<"h2">>, handshakes := #{full := Full, resumed := Resumed, failed := 0}}} =
                        no_errors(R),
                    ?assertEqual(N, Served),
                    ?assert(N > 2, R),
                    ?assert(Full >= 1 andalso Resumed > 0, R),
                    ?assert(Full + Resumed >= N andalso Full + Resumed =< N + 2, R),
                    ?assert(Connects >= Full + Resumed andalso Connects =< N + 2, R),
                    ?assert(Accepted >= Connects andalso Accepted =< N + 2, {Accepted, R})
            end).

%% resume => false (--no-resume): every handshake a full one.
tls_new_conn_full(_Config) ->
    tls_run("https://localhost:PORT/hello", #{new_conn => true, resume => false, connections => 2, duration => 0.3},
            fun(R, {Served, _}) ->
                    #{requests := #{sent := N},
                      tls := #{resume := false, handshakes := #{full := Full, resumed := 0}}} = no_errors(R),
                    ?assertEqual(N, Served),
                    ?assert(Full >= N andalso Full =< N + 2, R)
            end).

%% A CA that did not sign the server's certificate (the system's CAs): every handshake fails
%% verification, no request is sent; the program says why on stderr and exits 3, and the results
%% name the reason.
tls_bad_ca(_Config) ->
    {_Os, Port, _Ca, Stop} = start_cbench_server(["--tls"]),
    Url = "https://localhost:" ++ integer_to_list(Port) ++ "/hello",
    {Exit, Out, R} = run_program(Url, ["--connections", "1", "--duration", "0.3"]),
    Stop(),
    ?assertEqual(3, Exit, Out),
    #{requests := #{sent := 0}, errors := #{tls := F, total := F},
      tls := #{error := <<"certificate verify failed: unable to get local issuer certificate">>,
               handshakes := #{full := 0, resumed := 0, failed := F}}} = R,
    ?assert(F >= 1, R),
    ?assertMatch({match, _}, re:run(Out, "cbench-load: [0-9]+ TLS handshakes? failed; the first: certificate "
                                         "verify failed: unable to get local issuer certificate \\(--cacert FILE"),
                 Out).

%% The name checked is the URL's host. wrong-host.localhost gets a leaf for another name, and a name
%% the server has no leaf for gets the leaf for localhost: both fail the check (--connect-to reaches
%% the server whatever the name resolves to); --insecure does not check.
tls_wrong_host(_Config) ->
    {_Os, Port, Ca, Stop} = start_cbench_server(["--tls"]),
    P = integer_to_list(Port),
    Opts = #{connections => 1, duration => 0.2, cacert => Ca, connect_to => "127.0.0.1"},
    [begin
         R = load("https://" ++ Host ++ ":" ++ P ++ "/hello", Opts),
         ct:log("~s: ~p", [Host, R]),
         #{requests := #{sent := 0}, errors := #{tls := F},
           tls := #{error := <<"certificate verify failed: hostname mismatch">>}} = R,
         ?assert(F >= 1, R)
     end || Host <- ["wrong-host.localhost", "nomatch.localhost"]],
    R2 = load("https://wrong-host.localhost:" ++ P ++ "/hello",
              maps:without([cacert], Opts#{insecure => true})),
    Stop(),
    #{tls := #{verify := false}} = no_errors(R2).

%% A server that never answers the ClientHello: a handshake error at --timeout, not a request's
%% timeout; one that closes after reading it: a handshake error at once.
tls_stalled_and_closed(_Config) ->
    {Port, Stop} = fault_server(fun(_S) -> receive after infinity -> ok end end),
    R = load("https://127.0.0.1:" ++ integer_to_list(Port) ++ "/hello",
             #{connections => 1, duration => 0.5, timeout => 0.2, insecure => true}),
    Stop(),
    #{requests := #{sent := 0}, errors := #{tls := F1, timeout := 0},
      tls := #{error := <<"no TLS handshake within --timeout">>}} = R,
    ?assert(F1 >= 1, R),
    {Port2, Stop2} = fault_server(fun(S) -> {ok, _} = gen_tcp:recv(S, 0, 5000), gen_tcp:close(S) end),
    R2 = load("https://127.0.0.1:" ++ integer_to_list(Port2) ++ "/hello",
              #{connections => 1, duration => 0.3, insecure => true}),
    Stop2(),
    #{requests := #{sent := 0}, errors := #{tls := F2},
      tls := #{error := <<"the server closed the connection during the handshake">>}} = R2,
    ?assert(F2 >= 1, R2).

%% h2 over TLS against a server that chooses no ALPN protocol (an OTP ssl listener without
%% alpn_preferred_protocols, as a server without ALPN support answers): it does not speak h2 there
%% (RFC 9113 3.2), so each handshake is a TLS error, named, and no byte of h2 is sent: the server
%% reads nothing before the close. Before: the preface went out and the server got PRI * HTTP/2.0.
tls_h2_no_alpn(_Config) ->
    {ok, _} = application:ensure_all_started(ssl),
    Key = [{key, {namedCurve, secp256r1}}, {digest, sha256}],
    #{server_config := SOpts} =
        public_key:pkix_test_data(#{server_chain => #{root => Key, intermediates => [], peer => Key},
                                    client_chain => #{root => Key, intermediates => [], peer => Key}}),
    Self = self(),
    Pid = spawn(fun() ->
                        {ok, L} = ssl:listen(0, [binary, {active, false}, {reuseaddr, true},
                                                 {ip, {127, 0, 0, 1}} | SOpts]),
                        {ok, {_, Port}} = ssl:sockname(L),
                        Self ! {self(), Port},
                        no_alpn_accept(L, Self)
                end),
    Port = receive {Pid, P} -> P end,
    %% One handshake from this node first: the listener's first one loads ssl's modules, which on a
    %% loaded machine (or beside an ASan build) once took longer than the run.
    {ok, Warm} = ssl:connect({127, 0, 0, 1}, Port, [{verify, verify_none}, {active, false}], 10000),
    ok = ssl:close(Warm),
    {Exit, Text, R} = run_program("https://127.0.0.1:" ++ integer_to_list(Port) ++ "/hello",
                                  ["-p", "h2", "-c", "1", "-d", "1", "--timeout", "1", "--insecure"]),
    exit(Pid, kill),
    Why = <<"no application protocol negotiated: the server chose none, and h2 over TLS needs ALPN h2 "
            "(RFC 9113 3.2)">>,
    #{requests := #{sent := 0}, errors := #{tls := F, total := F},
      tls := #{alpn := undefined, error := Why, handshakes := #{full := 0, resumed := 0, failed := F}}} = R,
    ?assertEqual(3, Exit, R),
    ?assert(F >= 1, R),
    %% stderr names it with what to do.
    Line = iolist_to_binary([" failed; the first: ", Why, " (the server speaks no h2 over TLS; -p h1 speaks "
                             "HTTP/1.1 to it)\n"]),
    ?assertMatch({_, _}, binary:match(Text, Line), Text),
    %% The server read no byte of h2 on any connection: each ended in the handshake (the client
    %% closes as soon as it sees no ALPN, its Finished unsent) or with the close and nothing read.
    Got = no_alpn_reads([]),
    ct:log("the server's connections: ~p", [Got]),
    ?assert(Got =/= [], R),
    ?assertEqual([], [G || {ok, _} = G <- Got]).

no_alpn_accept(L, Test) ->
    {ok, T} = ssl:transport_accept(L),
    spawn(fun() ->
                  case ssl:handshake(T, 5000) of
                      {ok, S} -> Test ! {no_alpn_read, ssl:recv(S, 0, 5000)};
                      {error, E} -> Test ! {no_alpn_read, {handshake, E}}
                  end
          end),
    no_alpn_accept(L, Test).

%% What the server's connections said, until none has said anything for a second.
no_alpn_reads(Acc) ->
    receive {no_alpn_read, G} -> no_alpn_reads([G | Acc])
    after 1000 -> lists:reverse(Acc)
    end.

%% The program itself on a URL with extra arguments: {ExitStatus, Output, Results}.
run_program(Url, Args) ->
    {ok, Exe} = cbench_load:exe_path(),
    Out = filename:join(os:getenv("TMPDIR", "/tmp"),
                        "cbench-load-tls-" ++ integer_to_list(erlang:unique_integer([positive])) ++ ".erl"),
    P = open_port({spawn_executable, Exe}, [{args, Args ++ ["--quiet", "--erl", Out, Url]}, exit_status,
                                            stderr_to_stdout, binary]),
    {Exit, Text} = drain(P, <<>>),
    {ok, [R]} = file:consult(Out),
    ok = file:delete(Out),
    ct:log("~s ~p: exit ~p~n~s~n~p", [Url, Args, Exit, Text, R]),
    {Exit, Text, R}.

%% ---- hostile servers (issue 22) -------------------------------------------------------------------

%% The 101, then empty pings (2 bytes each) as fast as gen_tcp sends them, never reading: the pings
%% are coalesced into one pending pong, so memory stays flat; the message never echoed is a timeout.
%% Before: a pong queued per ping (574 MB after 10 s at the issue's measurement).
ws_ping_flood(Config) ->
    Pings = binary:copy(<<16#89, 0>>, 32768),
    {Port, Stop} = fault_server(fun(S) -> {ok, _} = ws_handshake(S), flood(S, Pings) end),
    %% 3 s in all: before the fix, 21 MB in 1.5 s on a busy 2-CPU VM; now flat.
    {Exit, R, Hwm} = watched("ws://127.0.0.1:" ++ integer_to_list(Port) ++ "/ws", #{duration => 2, timeout => 1}),
    Stop(),
    #{requests := #{sent := N, completed := 0, ok := 0},
      errors := #{timeout := N, protocol := 0, unsolicited := 0, upgrade := 0}, bytes := #{read := Read}} = R,
    ?assertEqual(3, Exit, R),
    ?assert(N >= 1, R),
    %% It read the flood all along (at least the first 1 MiB of pings).
    ?assert(Read > 1 bsl 20, R),
    bounded(Config, Hwm, R).

%% Three answers to every request: the second has no request in flight and is counted
%% unsolicited, which ends the connection. Before: a new connection per request and 0 errors.
three_answers(Config) ->
    One = <<"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok">>,
    {Port, Stop} = fault_server(fun(S) -> answer_each(S, <<>>, binary:copy(One, 3)) end),
    {Exit, R, Hwm} = watched(url_of(Port, "/hello"), #{}),
    Stop(),
    #{requests := #{sent := N, completed := Done, ok := Ok},
      errors := #{unsolicited := U, protocol := 0, total := Total}} = R,
    ?assertEqual(0, Exit, R),
    ?assert(Ok >= 1 andalso Ok =:= Done andalso Done =< N, R),
    %% One unsolicited answer per connection, after the answer it follows (fewer when the three
    %% came in two reads and the next request took the second).
    ?assert(U >= 1 andalso U =< Done andalso Total =:= U, R),
    bounded(Config, Hwm, R).

%% A 200 where the 101 should be: a failed upgrade each time, and no request. Before: 0 requests,
%% 0 errors, exit 0.
ws_200_not_101(Config) ->
    One = <<"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok">>,
    {Port, Stop} = fault_server(fun(S) -> answer_each(S, <<>>, One) end),
    {Exit, R, Hwm} = watched("ws://127.0.0.1:" ++ integer_to_list(Port) ++ "/ws", #{}),
    Stop(),
    #{requests := #{sent := 0}, errors := #{upgrade := U, status := Bad, total := U}, status := St} = R,
    ?assertEqual(3, Exit, R),
    ?assert(U >= 1, R),
    %% Counted once: by the upgrade error, the 200 in the statuses but not among the errors.
    ?assertEqual({#{}, #{200 => U}}, {Bad, St}),
    bounded(Config, Hwm, R).

%% A status llhttp takes but HTTP has not (RFC 9110 15: 100 to 599) is a protocol error, as over h2.
%% Before: each such answer was completed, not ok, and under no error nor status: 0 errors in a run
%% that exits 3 for having no success.
status_over_599(Config) ->
    {Port, Stop} = fault_server(fun(S) ->
                                        answer_each(S, <<>>, <<"HTTP/1.1 700 Odd\r\ncontent-length: 0\r\n\r\n">>)
                                end),
    {Exit, R, Hwm} = watched(url_of(Port, "/hello"), #{}),
    Stop(),
    #{requests := #{sent := N, completed := 0}, errors := #{protocol := N, total := N}, status := #{}} = R,
    ?assertEqual(3, Exit, R),
    ?assert(N >= 1, R),
    bounded(Config, Hwm, R).

%% A head that never ends: a protocol error once it passes 1 MiB, long before the timeout.
endless_head(Config) ->
    Line = binary:copy(<<"x-a: ", (binary:copy(<<"a">>, 1000))/binary, "\r\n">>, 64),
    {Port, Stop} = fault_server(fun(S) ->
                                        {ok, _, _} = recv_head(S, <<>>),
                                        ok = gen_tcp:send(S, <<"HTTP/1.1 200 OK\r\n">>),
                                        flood(S, Line)
                                end),
    {Exit, R, Hwm} = watched(url_of(Port, "/hello"), #{}),
    Stop(),
    #{requests := #{sent := N, completed := 0}, errors := #{protocol := N, timeout := 0}} = R,
    ?assertEqual(3, Exit, R),
    ?assert(N >= 1, R),
    bounded(Config, Hwm, R).

%% A chunked body that never ends: counted, not kept, and a timeout.
endless_chunked(Config) ->
    Chunk = <<"1000\r\n", (binary:copy(<<"z">>, 4096))/binary, "\r\n">>,
    {Port, Stop} = fault_server(fun(S) ->
                                        {ok, _, _} = recv_head(S, <<>>),
                                        ok = gen_tcp:send(S, <<"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n">>),
                                        flood(S, binary:copy(Chunk, 16))
                                end),
    {Exit, R, Hwm} = watched(url_of(Port, "/hello"), #{}),
    Stop(),
    #{requests := #{sent := N, completed := 0}, errors := #{timeout := N, protocol := 0},
      bytes := #{body := Body}} = R,
    ?assertEqual(3, Exit, R),
    ?assert(N >= 1 andalso Body > 1 bsl 20, R),
    bounded(Config, Hwm, R).

%% 100 Continue after 100 Continue, never the answer: a timeout.
endless_continue(Config) ->
    {Port, Stop} = fault_server(fun(S) ->
                                        {ok, _, _} = recv_head(S, <<>>),
                                        flood(S, binary:copy(<<"HTTP/1.1 100 Continue\r\n\r\n">>, 1000))
                                end),
    {Exit, R, Hwm} = watched(url_of(Port, "/hello"), #{}),
    Stop(),
    #{requests := #{sent := N, completed := 0}, errors := #{timeout := N, protocol := 0}} = R,
    ?assertEqual(3, Exit, R),
    ?assert(N >= 1, R),
    bounded(Config, Hwm, R).

%% 100 Continue after 100 Continue before the 101, never the 101: the interim answers count toward
%% the head's 1 MiB bound, so each connection's upgrade fails once they pass it, long before the
%% timeout; nothing is sent and no status is counted (a 1xx is no final answer).
ws_endless_continue(Config) ->
    {Port, Stop} = fault_server(fun(S) ->
                                        {ok, _, _} = recv_head(S, <<>>),
                                        flood(S, binary:copy(<<"HTTP/1.1 100 Continue\r\n\r\n">>, 1000))
                                end),
    {Exit, R, Hwm} = watched("ws://127.0.0.1:" ++ integer_to_list(Port) ++ "/ws", #{}),
    Stop(),
    #{requests := #{sent := 0}, errors := #{upgrade := U, total := U}, status := #{}} = R,
    ?assertEqual(3, Exit, R),
    ?assert(U >= 1, R),
    bounded(Config, Hwm, R).

%% Every message echoed twice: the second echo has no message in flight (depth 1): unsolicited.
ws_two_echoes(Config) ->
    {Port, Stop} = fault_server(fun(S) -> {ok, Early} = ws_handshake(S), echo_twice(S, Early) end),
    {Exit, R, Hwm} = watched("ws://127.0.0.1:" ++ integer_to_list(Port) ++ "/ws", #{}),
    Stop(),
    #{requests := #{ok := Ok}, errors := #{unsolicited := U, protocol := 0}} = R,
    ?assertEqual(0, Exit, R),
    ?assert(Ok >= 1 andalso U >= 1, R),
    bounded(Config, Hwm, R).

echo_twice(S, Buf) ->
    case ws_frame(Buf) of
        {ok, _, M, Rest} ->
            ok = gen_tcp:send(S, [ws_encode(1, M), ws_encode(1, M)]),
            echo_twice(S, Rest);
        more ->
            {ok, D} = gen_tcp:recv(S, 0),
            echo_twice(S, <<Buf/binary, D/binary>>)
    end.

%% h2c: each request answered (a HEADERS frame with :status 200, END_STREAM), then a second answer
%% on the next stream, which the client has not opened: unsolicited. Before: nghttp2 ended the
%% session and, with nothing in flight, the connection closed cleanly with 0 errors.
h2_unsolicited(Config) ->
    {Port, Stop} = fault_server(fun(S) ->
                                        {ok, <<"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n">>} = gen_tcp:recv(S, 24, 5000),
                                        ok = gen_tcp:send(S, h2_frame(4, 0, 0, <<>>)),
                                        h2_answer_twice(S, <<>>)
                                end),
    {Exit, R, Hwm} = watched(url_of(Port, "/hello"), #{proto => h2c}),
    Stop(),
    #{requests := #{ok := Ok, completed := Done}, errors := #{unsolicited := U, total := U}} = R,
    ?assertEqual(0, Exit, R),
    ?assert(Ok >= 1 andalso Ok =:= Done andalso U >= 1 andalso U =< Done, R),
    bounded(Config, Hwm, R).

%% h2c: PING frames as fast as gen_tcp sends them, never reading. src/load/h2.c answers each while
%% less than 256 KiB of output wait for the socket and fails the connection at the next one: a
%% protocol error for the request in flight, memory flat. Before (an nghttp2 session then): the
%% same errors, and exit status 0.
h2_ping_flood(Config) ->
    Pings = iolist_to_binary(lists:duplicate(4096, h2_frame(6, 0, 0, <<0:64>>))),
    {Port, Stop} = fault_server(fun(S) ->
                                        {ok, _} = gen_tcp:recv(S, 24, 5000),
                                        ok = gen_tcp:send(S, h2_frame(4, 0, 0, <<>>)),
                                        flood(S, Pings)
                                end),
    {Exit, R, Hwm} = watched(url_of(Port, "/hello"), #{proto => h2c, duration => 2, timeout => 1}),
    Stop(),
    #{requests := #{sent := N, completed := 0}, errors := #{protocol := Pr, timeout := To}} = R,
    ?assertEqual(3, Exit, R),
    ?assert(Pr >= 1 andalso Pr + To =:= N, R),
    bounded(Config, Hwm, R).

%% h2c: each request draws a GOAWAY that keeps every stream (last stream id 2^31-1, the first of a
%% graceful shutdown), and then nothing: the request in flight may still be answered, so it is a
%% timeout. Before: once the connection was --timeout old, the check for a WebSocket handshake that
%% never completes took the GOAWAY's "no new streams" for one, and counted an upgrade error and the
%% request as a protocol error.
h2_goaway_then_silence(Config) ->
    {Port, Stop} = fault_server(fun(S) ->
                                        {ok, _} = gen_tcp:recv(S, 24, 5000),
                                        ok = gen_tcp:send(S, h2_frame(4, 0, 0, <<>>)),
                                        h2_goaway_on_headers(S, <<>>)
                                end),
    {Exit, R, Hwm} = watched(url_of(Port, "/hello"), #{proto => h2c}),
    Stop(),
    #{requests := #{sent := N, completed := 0},
      errors := #{timeout := N, protocol := 0, upgrade := 0, unsolicited := 0, total := N}} = R,
    ?assertEqual(3, Exit, R),
    ?assert(N >= 1, R),
    bounded(Config, Hwm, R).

h2_goaway_on_headers(S, <<Len:24, Type, Flags, _:1, _Sid:31, _:Len/binary, Rest/binary>>) ->
    case {Type, Flags band 1} of
        {4, 0} -> ok = gen_tcp:send(S, h2_frame(4, 1, 0, <<>>));
        {1, _} -> ok = gen_tcp:send(S, h2_frame(7, 0, 0, <<0:1, 16#7fffffff:31, 0:32>>));
        _ -> ok
    end,
    h2_goaway_on_headers(S, Rest);
h2_goaway_on_headers(S, Buf) ->
    case gen_tcp:recv(S, 0) of
        {ok, D} -> h2_goaway_on_headers(S, <<Buf/binary, D/binary>>);
        {error, _} -> ok
    end.

h2_answer_twice(S, <<Len:24, Type, Flags, _:1, Sid:31, Payload:Len/binary, Rest/binary>>) ->
    case {Type, Flags band 1} of
        {4, 0} -> ok = gen_tcp:send(S, h2_frame(4, 1, 0, <<>>));  % SETTINGS: ACK
        {1, 1} -> ok = gen_tcp:send(S, [h2_frame(1, 5, Sid, <<16#88>>), h2_frame(1, 5, Sid + 2, <<16#88>>)]);
        _ -> ok
    end,
    _ = Payload,
    h2_answer_twice(S, Rest);
h2_answer_twice(S, Buf) ->
    {ok, D} = gen_tcp:recv(S, 0),
    h2_answer_twice(S, <<Buf/binary, D/binary>>).

h2_frame(Type, Flags, Sid, Payload) -> [<<(byte_size(Payload)):24, Type, Flags, 0:1, Sid:31>>, Payload].

%% Answers each request head with Answer (as one send).
answer_each(S, Buf, Answer) ->
    {ok, _, Rest} = recv_head(S, Buf),
    ok = gen_tcp:send(S, Answer),
    answer_each(S, Rest, Answer).

flood(S, Bin) ->
    ok = gen_tcp:send(S, Bin),
    flood(S, Bin).

%% The peak RSS bound: what a hostile server can make cbench-load hold is its output bound (256
%% KiB) per connection and nothing of a head or body; 8 MiB over the silent run (2.9 MB, and 3.1 MB
%% at most under attack, in a release build) leaves room for the allocator and a sanitizer's
%% bookkeeping, and is far below what the unbounded pong queue reached (21 MB after 1.5 s).
bounded(Config, Hwm, R) ->
    Base = proplists:get_value(base_hwm, Config),
    Bound = Base + 8 * 1024,
    case Hwm =< Bound of
        true -> ct:log("VmHWM ~b kB (silent server: ~b kB)", [Hwm, Base]);
        false ->
            ct:fail("cbench-load's peak RSS (VmHWM, sampled every 10 ms) was ~b kB, over the bound of "
                    "~b kB: the ~b kB of a run against a silent server + 8 MiB. cbench-load holds at most "
                    "256 KiB of output per connection against any server, and no head or body, so this means "
                    "a queue or buffer grew without a bound (under ASan, whose quarantine is capped at 1 MB "
                    "here, check whether its bookkeeping grew instead). Results: ~0p",
                    [Hwm, Bound, Base, R])
    end.

%% Runs the program on one connection for 1 s with a 0.5 s timeout (more Opts on top), sampling
%% its /proc/PID/status every 10 ms: {ExitStatus, Results, peak VmHWM in kB}. The run must end
%% within its duration and timeout; the bound here (+ 20 s) only catches one that never ends.
watched(Url, Opts0) ->
    Opts = maps:merge(#{connections => 1, duration => 1, timeout => 0.5}, Opts0),
    {ok, Args, _} = cbench_load:args(Url, Opts),
    Limit = round((maps:get(duration, Opts) + maps:get(timeout, Opts)) * 1000) + 20000,
    watched_args(Url, Args, Limit).

%% The same with the program's own arguments (Url last among them), for values cbench:load/2 would
%% write otherwise, and a bound of Limit ms.
watched_args(Url, Args, Limit) ->
    {ok, Exe} = cbench_load:exe_path(),
    Out = filename:join(os:getenv("TMPDIR", "/tmp"),
                        "cbench-load-hostile-" ++ integer_to_list(erlang:unique_integer([positive])) ++ ".erl"),
    %% Under ASan (make load-asan), freed memory waits in a quarantine of 256 MB before reuse and
    %% would be measured as growth by a run that reconnects 8,000 times a second; a 1 MB quarantine
    %% still catches a use of anything freed recently.
    Env = case os:getenv("ASAN_OPTIONS") of
              false -> [];
              A -> [{"ASAN_OPTIONS", A ++ ":quarantine_size_mb=1"}]
          end,
    P = open_port({spawn_executable, Exe}, [{args, Args ++ ["--quiet", "--erl", Out]}, {env, Env},
                                            exit_status, stderr_to_stdout, binary]),
    {os_pid, Os} = erlang:port_info(P, os_pid),
    T0 = erlang:monotonic_time(millisecond),
    {Exit, Text, Hwm} = watch(P, "/proc/" ++ integer_to_list(Os) ++ "/status", T0 + Limit, <<>>, 0),
    Ms = erlang:monotonic_time(millisecond) - T0,
    {ok, [R]} = file:consult(Out),
    ok = file:delete(Out),
    ct:log("~s ~p: exit ~p, VmHWM ~b kB, ~b ms~n~s~n~p", [Url, Args, Exit, Hwm, Ms, Text, R]),
    {Exit, R, Hwm}.

watch(P, Status, Deadline, Text, Hwm) ->
    receive
        {P, {data, D}} -> watch(P, Status, Deadline, <<Text/binary, D/binary>>, Hwm);
        {P, {exit_status, S}} -> {S, Text, Hwm}
    after 10 ->
        case erlang:monotonic_time(millisecond) > Deadline of
            true ->
                {os_pid, Os} = erlang:port_info(P, os_pid),
                os:cmd("kill -9 " ++ integer_to_list(Os)),
                ct:fail({did_not_end, Text});
            false ->
                Now = case file:read_file(Status) of
                          {ok, B} ->
                              case re:run(B, "VmHWM:\\s+([0-9]+) kB", [{capture, all_but_first, binary}]) of
                                  {match, [K]} -> binary_to_integer(K);
                                  nomatch -> 0
                              end;
                          _ -> 0
                      end,
                watch(P, Status, Deadline, Text, max(Hwm, Now))
        end
    end.

%% ---- coordinated omission -------------------------------------------------------------------------

%% 1,000 req/s over 2 connections for 3 s against cbench-server, frozen (SIGSTOP) for 300 ms after
%% 1 s. The ~300 requests intended during the freeze wait for it; measured from their intended
%% time (corrected), 50 of them (1.7% of 3,000) waited 250 ms or more, so p99.9 is at least
%% 250 ms. Measured from the actual send (uncorrected), only the 2 requests in flight when it froze
%% (0.07%) waited: p99.9 stays far below.
coordinated_omission(_Config) ->
    {Os, Port, _, Close} = start_cbench_server([]),
    Self = self(),
    Url = url_of(Port, "/hello"),
    Runner = spawn_link(fun() -> Self ! {self(), load(Url, #{rate => 1000, connections => 2, duration => 3})} end),
    timer:sleep(1000),
    "" = os:cmd("kill -STOP " ++ Os),
    timer:sleep(300),
    "" = os:cmd("kill -CONT " ++ Os),
    R = receive {Runner, Res} -> Res after 60000 -> ct:fail(no_result) end,
    Close(),
    ct:log("~p", [R]),
    #{requests := #{sent := Sent, unsent := Unsent},
      latency_us := #{corrected := #{p999 := C999, max := CMax}, uncorrected := #{p999 := U999}}} =
        no_errors(R),
    ?assertEqual(3000, Sent + Unsent),
    %% The backlog of the freeze is sent once the server resumes; on a loaded machine (an ASan build
    %% beside other work) the last few may be left unsent when the 3 s end: a bound, not a timing.
    ?assert(Sent >= 2700, R),
    ?assert(C999 >= 250000, {corrected_p999, C999}),
    ?assert(CMax >= 300000, {corrected_max, CMax}),
    ?assert(U999 < C999 / 2, {uncorrected_p999, U999, corrected_p999, C999}).

%% cbench-server with Args: {OsPid, Port, CaFile (with --tls) | undefined, Close}; Close() stops it
%% (SIGINT) and returns what it printed from then on (its stats).
start_cbench_server(Args) ->
    Exe = filename:join([root(), "build", "cbench-server"]),
    P = open_port({spawn_executable, Exe}, [{args, ["--port", "0", "--threads", "1" | Args]}, {line, 256},
                                            exit_status, binary]),
    {os_pid, Os} = erlang:port_info(P, os_pid),
    Port = receive
               {P, {data, {eol, <<"cbench-server listening on ", Url/binary>>}}} ->
                   {match, [PortB]} = re:run(Url, "^https?://127\\.0\\.0\\.1:([0-9]+) ",
                                             [{capture, all_but_first, binary}]),
                   binary_to_integer(PortB)
           after 10000 -> ct:fail(cbench_server_not_ready)
           end,
    Ca = case lists:member("--tls", Args) of
             true ->
                 receive {P, {data, {eol, <<"cbench-server TLS CA in ", F/binary>>}}} -> binary_to_list(F)
                 after 10000 -> ct:fail(cbench_server_no_ca)
                 end;
             false -> undefined
         end,
    Close = fun() ->
                    os:cmd("kill -CONT " ++ integer_to_list(Os)),
                    os:cmd("kill -INT " ++ integer_to_list(Os)),
                    server_output(P, [])
            end,
    {integer_to_list(Os), Port, Ca, Close}.

server_output(P, Acc) ->
    receive
        {P, {data, {_, Line}}} -> server_output(P, [Acc, Line, "\n"]);
        {P, {exit_status, _}} -> iolist_to_binary(Acc)
    after 10000 -> iolist_to_binary(Acc)
    end.

%% The repository: where rebar3's _build/.../cbench/erl link points (as cbench_consumer_SUITE).
root() ->
    {ok, Erl} = file:read_link_all(filename:join(code:lib_dir(cbench), "erl")),
    filename:dirname(filename:absname(Erl, code:lib_dir(cbench))).

%% ---- bad input ------------------------------------------------------------------------------------

cli_usage(_Config) ->
    {ok, Exe} = cbench_load:exe_path(),
    Bad = [[], ["--rate", "x", "http://127.0.0.1:1/"], ["--proto", "h3", "http://127.0.0.1:1/"],
           ["--frobnicate", "http://127.0.0.1:1/"], ["ftp://127.0.0.1/"], ["-c", "0", "http://127.0.0.1:1/"],
           ["--new-conn", "--proto", "ws", "http://127.0.0.1:1/"], ["-H", "no colon", "http://127.0.0.1:1/"],
           ["--duration", "-1", "http://127.0.0.1:1/"], ["http://127.0.0.1:1/", "http://127.0.0.1:2/"],
           ["--body-file", "/nonexistent/file", "http://127.0.0.1:1/"],
           %% TLS options need a TLS URL; bad values; a CA file that cannot be read.
           ["--insecure", "http://127.0.0.1:1/"], ["--no-resume", "ws://127.0.0.1:1/"],
           ["--tls-version", "1.4", "https://127.0.0.1:1/"], ["--cacert", "/nonexistent/ca.pem", "https://127.0.0.1:1/"],
           ["--cacert", "/dev/null", "--insecure", "https://127.0.0.1:1/"], ["--connect-to", "", "https://127.0.0.1:1/"],
           %% A path goes on the request line as it is: a space or a line end would end it early or add
           %% a field, and a byte that is not ASCII would leave the results' url out (not UTF-8). Short
           %% runs (against nothing) if they are taken.
           ["-d", "0.05", "http://127.0.0.1:1/a b"], ["-d", "0.05", "http://127.0.0.1:1/a\r\nx-injected: 1"],
           ["-d", "0.05", "http://127.0.0.1:1/caf\x{e9}"], ["-d", "0.05", "--path", "/a\tb", "http://127.0.0.1:1/"],
           %% What OpenSSL refuses when the run is set up: a bad argument as well (it exited 1).
           ["-d", "0.05", "--ciphers", "BOGUS", "https://127.0.0.1:1/"],
           ["-d", "0.05", "--tls13-ciphers", "BOGUS", "https://127.0.0.1:1/"],
           ["-d", "0.05", "--cacert", filename:join(root(), "rebar.config"), "https://127.0.0.1:1/"]],
    [begin
         P = open_port({spawn_executable, Exe}, [{args, A}, exit_status, stderr_to_stdout, binary]),
         {Status, Out} = drain(P, <<>>),
         ?assertEqual({2, A}, {Status, A}),
         ?assertMatch({match, _}, re:run(Out, "usage: cbench-load"), {A, Out})
     end || A <- Bad],
    P = open_port({spawn_executable, Exe}, [{args, ["--help"]}, exit_status, binary]),
    ?assertMatch({0, _}, drain(P, <<>>)).

%% --cpus takes only CPUs it can pin a thread to: a number a CPU set cannot hold (CPU_SETSIZE, 1024,
%% and over) and a CPU this process may not run on are bad arguments (exit 2, the usage), the CPU
%% named with the reason. The second depends on the machine the program runs on, which cbench:load/2
%% over several nodes may not be this one, so the API checks only the first (api_bad_input). Before:
%% both were taken (up to 4095), and each thread ran unpinned after a warning.
cli_cpus(_Config) ->
    {ok, Exe} = cbench_load:exe_path(),
    Run = fun(Cpus) ->
                  A = ["-d", "0.05", "--cpus", Cpus, "http://127.0.0.1:1/"],
                  P = open_port({spawn_executable, Exe}, [{args, A}, exit_status, stderr_to_stdout, binary]),
                  {Status, Out} = drain(P, <<>>),
                  ct:log("--cpus ~s: exit ~p~n~s", [Cpus, Status, Out]),
                  ?assertEqual(2, Status, Out),
                  ?assertMatch({match, _}, re:run(Out, "usage: cbench-load"), Out),
                  [First | _] = binary:split(Out, <<"\n">>),
                  First
          end,
    ?assertEqual(<<"cbench-load: bad --cpus '1024': CPU 1024 is over 1023, the highest a CPU set holds">>,
                 Run("1024")),
    ?assertEqual(<<"cbench-load: bad --cpus '0,4095': CPU 4095 is over 1023, the highest a CPU set holds">>,
                 Run("0,4095")),
    Allowed = allowed_cpus(),
    ?assertNot(lists:member(1023, Allowed)),
    Names = lists:join(",", [integer_to_list(C) || C <- Allowed]),
    Ok = integer_to_list(hd(Allowed)),
    ?assertEqual(iolist_to_binary(["cbench-load: bad --cpus '", Ok, ",1023': CPU 1023 is not one this process may "
                                   "run on (CPUs ", Names, ")"]),
                 Run(Ok ++ ",1023")).

%% The CPUs this node (and so a program it starts) may run on: /proc/self/status's list.
allowed_cpus() ->
    {ok, Status} = file:read_file("/proc/self/status"),
    {match, [List]} = re:run(Status, "Cpus_allowed_list:\\s*([0-9,-]+)", [{capture, all_but_first, list}]),
    lists:append([case string:split(R, "-") of
                      [A] -> [list_to_integer(A)];
                      [A, B] -> lists:seq(list_to_integer(A), list_to_integer(B))
                  end || R <- string:split(List, ",", all)]).

drain(P, Acc) ->
    receive
        {P, {data, D}} -> drain(P, <<Acc/binary, D/binary>>);
        {P, {exit_status, S}} -> {S, Acc}
    after 10000 -> ct:fail(no_exit)
    end.

api_bad_input(_Config) ->
    U = "http://127.0.0.1:1/",
    ?assertError(badarg, cbench:load(U, [])),
    ?assertError(badarg, cbench:load(42, #{})),
    ?assertError(badarg, cbench:load([foo], #{})),
    [?assertEqual({error, {bad_option, K, V, A}}, cbench:load(U, #{K => V}))
     || {K, V, A} <- [{connections, 0, {integer, 1, infinity}}, {connections, "4", {integer, 1, infinity}},
                      {depth, -1, {integer, 1, infinity}}, {proto, h3, {one_of, [h1, h2c, h2, ws]}},
                      {insecure, yes, boolean}, {resume, 1, boolean}, {cacert, 42, string},
                      {ca_pem, "PEM", binary}, {tls_version, tlsv1, {one_of, ['tlsv1.2', 'tlsv1.3']}},
                      {tls13_ciphers, [x], string}, {connect_to, 7, string},
                      {duration, 0, {seconds, greater_than_0}}, {rate, -5, {seconds, at_least_0}},
                      {headers, [bad], {list, {string, string}}}, {paths, [], {list, string}},
                      {cpus, [a], {list, {integer, 0, 1023}}}, {new_conn, yes, boolean},
                      %% A CPU set holds CPUs 0 to 1023 (CPU_SETSIZE): no machine's program pins a higher one.
                      {cpus, [0, 1024], {list, {integer, 0, 1023}}}, {cpus, [-1], {list, {integer, 0, 1023}}},
                      {body, "not a binary", binary}, {method, 42, string},
                      %% Improper lists are bad values too (they raised bad_generator in the caller).
                      {cpus, [0 | 1], {list, {integer, 0, 1023}}}, {paths, ["/a" | "/b"], {list, string}},
                      {paths, ["/a" | <<"/b">>], {list, string}},
                      {headers, [{"a", "b"} | x], {list, {string, string}}}]],
    %% An unknown key names the keys load/2 takes, as start_server/2 does.
    ?assertMatch({error, {bad_option, bogus, 1, {known, [proto | _]}}}, cbench:load(U, #{bogus => 1})),
    %% What the program refuses comes back as its usage text.
    ?assertMatch({error, {usage, _}}, cbench:load(U, #{new_conn => true, proto => ws})),
    ?assertMatch({error, {usage, _}}, cbench:load("gopher://x/", #{})),
    %% A CPU this machine's program may not run on: the program's refusal, naming the CPU.
    Ok = hd(allowed_cpus()),
    {error, {usage, Text}} = cbench:load(U, #{cpus => [Ok, 1023], duration => 0.05}),
    ?assertMatch({match, _}, re:run(Text, "^cbench-load: bad --cpus '[0-9]+,1023': CPU 1023 is not one this process may "
                                          "run on \\(CPUs [0-9,]+\\)\n"), Text).

%% ---- helpers --------------------------------------------------------------------------------------

url_of(Port, Path) -> "http://127.0.0.1:" ++ integer_to_list(Port) ++ Path.

%% One request on a fresh keep-alive connection: the answer's head and its body as they came on
%% the wire (chunked framing included); HEAD answers have no body.
raw(Config, Req) ->
    Port = cbench:port(proplists:get_value(server, Config)),
    {ok, S} = gen_tcp:connect({127, 0, 0, 1}, Port, [binary, {active, false}]),
    ok = gen_tcp:send(S, Req),
    {ok, Head, Rest} = recv_head(S, <<>>),
    Body = case {Req, re:run(Head, "(?i)content-length: *([0-9]+)", [{capture, all_but_first, binary}])} of
               {<<"HEAD", _/binary>>, _} -> <<>>;
               {_, {match, [Len]}} -> recv_n(S, Rest, binary_to_integer(Len));
               {_, nomatch} -> recv_until(S, Rest, <<"\r\n0\r\n\r\n">>)
           end,
    gen_tcp:close(S),
    {Head, Body}.

recv_n(_, Acc, N) when byte_size(Acc) >= N -> Acc;
recv_n(S, Acc, N) ->
    {ok, D} = gen_tcp:recv(S, 0, 5000),
    recv_n(S, <<Acc/binary, D/binary>>, N).

recv_until(S, Acc, End) ->
    case binary:longest_common_suffix([Acc, End]) =:= byte_size(End) of
        true -> Acc;
        false ->
            {ok, D} = gen_tcp:recv(S, 0, 5000),
            recv_until(S, <<Acc/binary, D/binary>>, End)
    end.

recv_head(S, Acc) ->
    case binary:match(Acc, <<"\r\n\r\n">>) of
        {Pos, 4} -> {ok, binary:part(Acc, 0, Pos + 4), binary:part(Acc, Pos + 4, byte_size(Acc) - Pos - 4)};
        nomatch ->
            case gen_tcp:recv(S, 0, 5000) of
                {ok, D} -> recv_head(S, <<Acc/binary, D/binary>>);
                Error -> Error
            end
    end.
%% A listener on an ephemeral port whose every connection runs Handle(Socket) in a process linked
%% to the acceptor. Stop() kills the acceptor and so every connection with it.
fault_server(Handle) ->
    Self = self(),
    Pid = spawn(fun() ->
                        {ok, L} = gen_tcp:listen(0, [binary, {ip, {127, 0, 0, 1}}, {active, false},
                                                     {reuseaddr, true}, {backlog, 128}]),
                        {ok, Port} = inet:port(L),
                        Self ! {self(), Port},
                        accept_loop(L, Handle)
                end),
    Port = receive {Pid, P} -> P end,
    {Port, fun() -> exit(Pid, kill), ok end}.

accept_loop(L, Handle) ->
    {ok, S} = gen_tcp:accept(L),
    C = spawn_link(fun() -> receive go -> ok end, catch Handle(S) end),
    ok = gen_tcp:controlling_process(S, C),
    C ! go,
    accept_loop(L, Handle).

%% The server side of RFC 6455: check the upgrade, answer 101 with the accept key, then echo each
%% message (unmasked, as a server sends) after Transform.
ws_serve(S, Transform) ->
    {ok, Early} = ws_handshake(S),
    ws_loop(S, Early, Transform).

%% Reads the upgrade request and answers the 101: {ok, BytesReadAfterTheHead}.
ws_handshake(S) ->
    {ok, Head, Early} = recv_head(S, <<>>),
    ws_accept(S, Head),
    {ok, Early}.

%% Answers the upgrade request Head with the 101.
ws_accept(S, Head) ->
    {match, [Key]} = re:run(Head, "(?i)sec-websocket-key: *([^\\r]+)\\r\\n", [{capture, all_but_first, binary}]),
    {match, _} = re:run(Head, "(?i)upgrade: *websocket"),
    Accept = base64:encode(crypto:hash(sha, <<Key/binary, "258EAFA5-E914-47DA-95CA-C5AB0DC85B11">>)),
    ok = gen_tcp:send(S, ["HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n"
                          "connection: Upgrade\r\nsec-websocket-accept: ", Accept, "\r\n\r\n"]).

ws_loop(S, Buf, Transform) ->
    case ws_frame(Buf) of
        {ok, Op, Payload, Rest} ->
            case Op of
                8 -> gen_tcp:close(S);
                _ ->
                    ok = gen_tcp:send(S, ws_encode(Op, Transform(Payload))),
                    ws_loop(S, Rest, Transform)
            end;
        more ->
            {ok, D} = gen_tcp:recv(S, 0),
            ws_loop(S, <<Buf/binary, D/binary>>, Transform)
    end.

%% One client frame (FIN set, masked); `more' until it is complete.
ws_frame(<<1:1, 0:3, Op:4, 1:1, 127:7, Len:64, Mask:4/binary, Rest/binary>>) -> ws_payload(Op, Len, Mask, Rest);
ws_frame(<<1:1, 0:3, Op:4, 1:1, 126:7, Len:16, Mask:4/binary, Rest/binary>>) -> ws_payload(Op, Len, Mask, Rest);
ws_frame(<<1:1, 0:3, Op:4, 1:1, Len:7, Mask:4/binary, Rest/binary>>) when Len < 126 -> ws_payload(Op, Len, Mask, Rest);
ws_frame(_) -> more.

ws_payload(Op, Len, Mask, Data) when byte_size(Data) >= Len ->
    <<Masked:Len/binary, Rest/binary>> = Data,
    {ok, Op, unmask(Masked, Mask), Rest};
ws_payload(_, _, _, _) -> more.

unmask(Data, <<M:32>>) ->
    Words = byte_size(Data) div 4,
    <<Body:Words/binary-unit:32, Tail/binary>> = Data,
    Head = << <<(W bxor M):32>> || <<W:32>> <= Body >>,
    <<M1, M2, M3, _>> = <<M:32>>,
    TailU = list_to_binary([B bxor K || {B, K} <- lists:zip(binary_to_list(Tail),
                                                            lists:sublist([M1, M2, M3], byte_size(Tail)))]),
    <<Head/binary, TailU/binary>>.

ws_encode(Op, P) when byte_size(P) < 126 -> [<<1:1, 0:3, Op:4, 0:1, (byte_size(P)):7>>, P];
ws_encode(Op, P) when byte_size(P) < 65536 -> [<<1:1, 0:3, Op:4, 0:1, 126:7, (byte_size(P)):16>>, P];
ws_encode(Op, P) -> [<<1:1, 0:3, Op:4, 0:1, 127:7, (byte_size(P)):64>>, P].
