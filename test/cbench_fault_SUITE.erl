%%% @doc Faults (docs/faults.md) against real clients on every engine: the outcome table of
%%% docs/faults.md asserted row by row (httpc, curl over HTTP/1.1 and h2c, nghttp), stub faults byte
%%% for byte with their journal entries and counters, seeded rates that every engine draws alike,
%%% the bounds of /fault/'s parameters, and a server that is back to its baseline (descriptors,
%%% open connections) after a burst of faults while an h2load run beside them had no failure.
-module(cbench_fault_SUITE).

-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1]).
-export([outcomes/1, same_bytes_every_engine/1, stub_faults/1, stub_fault_refused/1, stub_pacing_own_body/1,
         delay_draw_bound/1, seeded_rate/1, bad_params/1, no_harm_under_load/1, no_harm_under_load_ehttpd/1,
         readme_example/1]).

all() -> [outcomes, same_bytes_every_engine, stub_faults, stub_fault_refused, stub_pacing_own_body,
          delay_draw_bound, seeded_rate, bad_params, no_harm_under_load, no_harm_under_load_ehttpd,
          readme_example].

suite() -> [{timetrap, {minutes, 5}}].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(inets),
    {ok, _} = application:ensure_all_started(cbench),
    Config.

end_per_suite(_Config) ->
    ok.

%% The repository (as cbench_consumer_SUITE finds it): docs/faults.md is read there.
repo_root() ->
    {ok, Erl} = file:read_link_all(filename:join(code:lib_dir(cbench), "erl")),
    Root = filename:dirname(filename:absname(Erl, code:lib_dir(cbench))),
    true = filelib:is_regular(filename:join(Root, "rebar.config")),
    Root.

%%% The outcome table

%% One row: the spec, the httpc pattern (text), curl's codes over HTTP/1.1 and h2c, nghttp's texts.
-record(row, {spec :: string(), httpc :: string(), curl :: [integer()], curl_h2 :: [integer()],
              nghttp :: [string()]}).

table() ->
    {ok, Doc} = file:read_file(filename:join([repo_root(), "docs", "faults.md"])),
    [_, From] = binary:split(Doc, <<"<!-- outcomes -->\n">>),
    [Table | _] = binary:split(From, <<"<!-- /outcomes -->">>),
    [_Header, _Rule | Lines] = [L || L <- binary:split(Table, <<"\n">>, [global]), L =/= <<>>],
    Rows = [row(L) || L <- Lines],
    ?assert(length(Rows) >= 25),
    Rows.

row(Line) ->
    [<<>>, Spec, Httpc, Curl, CurlH2, Nghttp, <<>>] =
        [string:trim(C) || C <- binary:split(Line, <<"|">>, [global])],
    #row{spec = unquote(Spec), httpc = unquote(Httpc), curl = codes(Curl), curl_h2 = codes(CurlH2),
         nghttp = quoted(Nghttp)}.

%% The `...` fragments of a cell.
quoted(B) ->
    case re:run(B, "`([^`]+)`", [global, {capture, all_but_first, list}]) of
        {match, Ms} -> [T || [T] <- Ms];
        nomatch -> []
    end.

unquote(<<"`", Rest/binary>>) -> binary_to_list(binary:part(Rest, 0, byte_size(Rest) - 1)).

codes(B) -> [binary_to_integer(C) || C <- binary:split(B, <<" or ">>, [global])].

%% @doc Every row of docs/faults.md's outcome table: the HTTP/1.1 columns on the nif, port and
%% ehttpd engines, the h2c columns on the C engine.
outcomes(_Config) ->
    Rows = table(),
    [begin
         {ok, S} = cbench:start_server(Engine, #{port => 0, threads => 1}),
         [check_row(Engine, S, R) || R <- Rows],
         wait_idle(S),
         ok = cbench:stop_server(S)
     end || Engine <- [nif, port, ehttpd]],
    ok.

check_row(Engine, S, #row{spec = Spec, httpc = Pattern, curl = Curl, curl_h2 = CurlH2,
                          nghttp = Texts}) ->
    Url = cbench:url(S, "/fault/" ++ Spec),
    Got = httpc_result(Url),
    ct:log("~p ~s: httpc ~p", [Engine, Spec, Got]),
    ?assert(matches_pattern(Pattern, Got), {Engine, Spec, httpc, Pattern, Got}),
    C1 = curl(Url, []),
    ?assert(lists:member(C1, Curl), {Engine, Spec, curl, Curl, C1}),
    case Engine of
        ehttpd -> ok;
        _ ->
            C2 = curl(Url, ["--http2-prior-knowledge"]),
            ?assert(lists:member(C2, CurlH2), {Engine, Spec, curl_h2, CurlH2, C2}),
            Out = nghttp(Url),
            [?assert(string:find(Out, T) =/= nomatch, {Engine, Spec, nghttp, T, Out}) || T <- Texts]
    end.

httpc_result(Url) ->
    case httpc:request(get, {Url, [{"connection", "close"}]}, [{timeout, 5000}],
                       [{body_format, binary}]) of
        {ok, {{_, Status, _}, _, Body}} -> {ok, Status, byte_size(Body)};
        Error -> Error
    end.

matches_pattern(Text, Value) ->
    {ok, Tokens, _} = erl_scan:string("case V of " ++ Text ++ " -> true; _ -> false end."),
    {ok, [Expr]} = erl_parse:parse_exprs(Tokens),
    {value, Result, _} = erl_eval:expr(Expr, #{'V' => Value}),
    Result.

curl(Url, Args) ->
    {Status, _} = run("curl", Args ++ ["-s", "-o", "/dev/null", "-m", "5", Url], 10000),
    Status.

nghttp(Url) ->
    {_, Out} = run("nghttp", ["-v", Url], 10000),
    %% One space between words, as the table writes them.
    re:replace(Out, "[ \t\n]+", " ", [global, {return, list}]).

%% A program's exit status and output (stdout and stderr), killed after Timeout ms.
run(Prog, Args, Timeout) ->
    Exe = os:find_executable(Prog),
    ?assert(Exe =/= false, {missing, Prog}),
    Port = open_port({spawn_executable, Exe},
                     [{args, Args}, exit_status, stderr_to_stdout, binary]),
    collect(Port, [], erlang:monotonic_time(millisecond) + Timeout).

collect(Port, Out, Deadline) ->
    Left = max(0, Deadline - erlang:monotonic_time(millisecond)),
    receive
        {Port, {data, D}} -> collect(Port, [Out, D], Deadline);
        {Port, {exit_status, St}} -> {St, unicode:characters_to_list(iolist_to_binary(Out), latin1)}
    after Left ->
        catch port_close(Port),
        {timeout, binary_to_list(iolist_to_binary(Out))}
    end.

%% Waits (at most 10 s) until the server has no open connection.
wait_idle(S) -> wait_idle(S, 100).
wait_idle(S, 0) -> ?assertMatch(#{conns_open := 0}, cbench:stats(S));
wait_idle(S, N) ->
    case cbench:stats(S) of
        #{conns_open := 0} -> ok;
        _ -> timer:sleep(100), wait_idle(S, N - 1)
    end.

%% @doc Over HTTP/1.1 the engines send the same bytes for each fault (dates masked).
same_bytes_every_engine(_Config) ->
    Specs = ["truncated?length=10&bytes=3", "overlong?length=4&bytes=2", "malformed_chunk?bytes=3",
             "missing_last_chunk?length=5", "garbage?bytes=21&seed=3", "empty", "hang?ms=50",
             "hang?at=head&ms=50&length=3", "raw?preset=obs_fold", "raw?preset=informational",
             "raw?data=HTTP%2F1.1%20204%20No%20Content%0D%0A%0D%0A&close=0",
             "trailers?length=5", "slow_head?length=3&pieces=3&ms=30", "dribble?length=5&ms=20",
             "drip?length=3&ms=30",
             "delay?ms=1&length=3", "rst_stream", "settings?window=0", "violation",
             "reset?rate=0&length=6"],
    Servers = [begin {ok, S} = cbench:start_server(E, #{port => 0, threads => 1}), {E, S} end
               || E <- [nif, port, ehttpd]],
    [begin
         [{_, First} | Rest] = [{E, mask_date(raw_get(cbench:port(S), "/fault/" ++ Spec))}
                                || {E, S} <- Servers],
         ct:log("~s: ~p", [Spec, First]),
         [?assertEqual({Spec, E, First}, {Spec, E, Got}) || {E, Got} <- Rest]
     end || Spec <- Specs],
    [ok = cbench:stop_server(S) || {_, S} <- Servers],
    ok.

%%% Stubs

%% @doc A stub's fault sends the stub's status and headers, byte for byte alike on every engine;
%% the journal names the fault, the stats count it, and a rate of 0 never fires.
stub_faults(_Config) ->
    [begin
         {ok, S} = cbench:start_server(Engine, #{port => 0, threads => 1}),
         P = cbench:port(S),
         {ok, Id} = cbench:stub(S, <<"/t">>, #{status => 201, headers => [{<<"x-a">>, <<"1">>}],
                                               body => <<"never sent">>,
                                               fault => {truncated, #{length => 10, bytes => 3}}}),
         Got = mask_date(raw_get(P, "/t")),
         ?assertEqual(<<"HTTP/1.1 201 Created\r\ndate: *\r\nx-a: 1\r\ncontent-length: 10\r\n"
                        "connection: close\r\n\r\n",
                        0, 1, 2>>, Got),
         {ok, _} = cbench:stub(S, <<"/r">>, #{fault => <<"raw?preset=no_reason">>}),
         ?assertEqual(<<"HTTP/1.1 200\r\ncontent-length: 2\r\n\r\nok">>, raw_get(P, "/r")),
         %% Exact bytes from Erlang: every byte value survives the spec's percent-encoding.
         Raw = <<"HTTP/1.1 299 X\r\ncontent-length: 256\r\n\r\n", (list_to_binary(lists:seq(0, 255)))/binary>>,
         {ok, _} = cbench:stub(S, <<"/b">>, #{fault => {raw, Raw}}),
         ?assertEqual(Raw, raw_get(P, "/b")),
         {ok, _} = cbench:stub(S, <<"/n">>, #{body => <<"fine">>,
                                               fault => {reset, #{rate => 0}}}),
         ?assertMatch(<<"HTTP/1.1 200 OK\r\n", _/binary>>, raw_get(P, "/n")),
         {ok, [_]} = cbench:await(S, #{path => "/n"}, 1, 5000),
         ?assertMatch([#{fault := truncated, status := 201, bytes_out := 3, stub := Id},
                       #{fault := raw, status := 200, bytes_out := 0},
                       #{fault := raw, status := 299, bytes_out := 0},
                       #{fault := undefined, status := 200, bytes_out := 4}],
                      [maps:with([fault, status, bytes_out, stub], Q) || Q <- cbench:requests(S)]),
         ?assertMatch(#{faults := 3, resets := 0}, cbench:stats(S)),
         wait_idle(S),
         ok = cbench:stop_server(S)
     end || Engine <- [nif, port, ehttpd]],
    ok.

%% @doc A fault that does not parse is a bad stub everywhere; the HTTP/2 kinds are refused by the
%% ehttpd engine only.
stub_fault_refused(_Config) ->
    [begin
         {ok, S} = cbench:start_server(Engine, #{port => 0, threads => 1}),
         [?assertEqual({error, {bad_stub, {{response, fault}, F, bad_fault}}}, cbench:stub(S, <<"/x">>, #{fault => F}))
          || F <- [nosuch, {reset, #{at => later}}, {truncated, #{length => 4, bytes => 4}},
                   {garbage, #{bytes => 0}}, <<"raw">>, {raw, #{preset => nosuch}},
                   {delay, #{ms => 5, max => 1}}, <<"reset?at">>, <<"reset?x=1">>,
                   {reset, #{rate => 1.5}}]],
         H2 = cbench:stub(S, <<"/x">>, #{fault => {rst_stream, #{code => 8}}}),
         case Engine of
             ehttpd -> ?assertEqual({error, {unsupported, rst_stream}}, H2);
             _ -> ?assertMatch({ok, _}, H2)
         end,
         ok = cbench:stop_server(S)
     end || Engine <- [nif, port, ehttpd]],
    ok.

%% @doc A stub's pacing faults (dribble, drip, slow_head) pace the stub's own body, with its length,
%% byte for byte alike on every engine; a stub without a body gets `length' generated bytes; a drip
%% of more than 100,000 bytes or a dribble in more pieces than bytes is refused.
stub_pacing_own_body(_Config) ->
    Body = <<"the stub's own body">>,
    Stubs = [{<<"/d">>, <<"dribble?pieces=4&ms=8">>}, {<<"/p">>, <<"drip?ms=5">>},
             {<<"/s">>, <<"slow_head?pieces=3&ms=3">>}],
    Got = [begin
               {ok, S} = cbench:start_server(Engine, #{port => 0, threads => 1}),
               [{ok, _} = cbench:stub(S, Path, #{status => 201, headers => [{<<"x-a">>, <<"1">>}],
                                                 body => Body, fault => F})
                || {Path, F} <- Stubs],
               %% A stub without headers: its fault's head has none either (docs/faults.md: the
               %% fault departs from the stub's declared answer), no content-type on any engine.
               {ok, _} = cbench:stub(S, <<"/n">>, #{fault => <<"dribble?pieces=2&length=5&ms=2">>}),
               ?assertEqual({error, {bad_stub, {{response, fault}, drip, fault_exceeds_body}}},
                            cbench:stub(S, <<"/x">>, #{body => binary:copy(<<"a">>, 100001), fault => drip})),
               ?assertMatch({ok, _}, cbench:stub(S, <<"/y">>, #{body => binary:copy(<<"a">>, 100000),
                                                                fault => drip})),
               ?assertEqual({error, {bad_stub, {{response, fault}, <<"dribble?pieces=4">>, fault_exceeds_body}}},
                            cbench:stub(S, <<"/z">>, #{body => <<"abc">>, fault => <<"dribble?pieces=4">>})),
               Answers = [mask_date(raw_get(cbench:port(S), P)) || P <- [<<"/d">>, <<"/p">>, <<"/s">>, <<"/n">>]],
               ok = cbench:stop_server(S),
               {Engine, Answers}
           end || Engine <- [nif, port, ehttpd]],
    [{nif, First} | Rest] = Got,
    ct:log("~p", [First]),
    [?assertEqual({E, First}, {E, A}) || {E, A} <- Rest],
    [begin
         [Head, B] = binary:split(A, <<"\r\n\r\n">>),
         ?assertEqual(Body, B),
         ?assertMatch({_, _}, binary:match(Head, <<"content-length: 19">>))
     end || A <- lists:sublist(First, 3)],
    [NHead, Generated] = binary:split(lists:last(First), <<"\r\n\r\n">>),
    ?assertEqual(nomatch, binary:match(NHead, <<"content-type">>)),
    ?assertEqual(<<0, 1, 2, 3, 4>>, Generated),
    ok.

%% @doc A lognormal delay's draw is cut at the bound of `ms' on its path: 60,000 through /fault/
%% (the issue's ms=1000&sigma=10&seed=1 draws more than an hour first), 3,600,000 for a stub.
delay_draw_bound(_Config) ->
    {ok, F} = cbench_fault:parse(<<"delay?ms=1000&sigma=10&seed=1">>),
    ?assertEqual(60000, cbench_fault:delay_ms(F, 0, 60000)),
    ?assertEqual(3600000, cbench_fault:delay_ms(F, 0, 3600000)),
    ?assert(lists:all(fun(N) -> cbench_fault:delay_ms(F, N, 60000) =< 60000 end, lists:seq(0, 999))),
    ok.

%% @doc `rate' with a seed: the n-th request of a stub gets the fault exactly when
%% cbench_fault:fires/2 says so, on every engine, in every run.
seeded_rate(_Config) ->
    N = 40,
    {ok, F} = cbench_fault:parse(<<"empty?rate=0.3&seed=42">>),
    Want = [cbench_fault:fires(F, I) || I <- lists:seq(0, N - 1)],
    Hits = length([x || true <- Want]),
    ?assert(Hits > 0 andalso Hits < N),
    [begin
         {ok, S} = cbench:start_server(Engine, #{port => 0, threads => 2}),
         {ok, _} = cbench:stub(S, <<"/u">>, #{body => <<"ok">>,
                                               fault => {empty, #{rate => 0.3, seed => 42}}}),
         Got = [raw_get(cbench:port(S), "/u") =:= <<>> || _ <- lists:seq(1, N)],
         ?assertEqual({Engine, Want}, {Engine, Got}),
         ?assertMatch(#{faults := Hits}, cbench:stats(S)),
         ok = cbench:stop_server(S)
     end || Engine <- [nif, port, ehttpd]],
    ok.

%% @doc Parameters out of bounds or unknown: 400 on /fault/, and the connection goes on.
bad_params(_Config) ->
    Bad = ["nosuch", "reset?at=later", "reset?bytes=16777217", "reset?length=10&bytes=11",
           "garbage?bytes=65537", "garbage?bytes=0", "hang?ms=3600001", "hang?ms=60001",
           "delay?ms=1&max=60001", "truncated?length=0",
           "dribble?pieces=0", "dribble?length=2&pieces=3", "drip?length=0", "drip?length=100001", "delay?ms=10&max=5",
           "delay?max=5&sigma=1", "delay?sigma=10.5", "rst_stream?code=4294967296",
           "goaway?last=2147483648", "reset?rate=1.1", "reset?rate=0.1234567891", "reset?seed=-1",
           "reset?x=1", "reset?at", "reset?=1", "raw", "raw?preset=x", "raw?data=%zz",
           "raw?preset=bare_lf&data=x"],
    [begin
         {ok, S} = cbench:start_server(Engine, #{port => 0, threads => 1}),
         {ok, C} = gen_tcp:connect({127, 0, 0, 1}, cbench:port(S), [binary, {active, false}]),
         [begin
              ok = gen_tcp:send(C, ["GET /fault/", B, " HTTP/1.1\r\nhost: x\r\n\r\n"]),
              ?assertEqual({Engine, B, <<"HTTP/1.1 400 Bad Request\r\ndate: *\r\n"
                                         "content-length: 0\r\n\r\n">>},
                           {Engine, B, mask_date(recv_head(C))})
          end || B <- Bad],
         ok = gen_tcp:close(C),
         ?assertMatch(#{faults := 0}, cbench:stats(S)),
         ok = cbench:stop_server(S)
     end || Engine <- [nif, port, ehttpd]],
    ok.

%%% No harm done

%% @doc Every fault of the table, over both protocols, while h2load runs /hello on the same
%% server: h2load has no failure, and afterwards the node has the descriptors it had before and
%% the server no open connection.
no_harm_under_load(_Config) -> no_harm(nif).

%% @doc The same on the ehttpd engine, HTTP/1.1 only (h2load --h1).
no_harm_under_load_ehttpd(_Config) -> no_harm(ehttpd).

no_harm(Engine) ->
    %% A first server loads the NIF (whose descriptors stay), so that the baseline is the node's own.
    {ok, Warm} = cbench:start_server(Engine, #{port => 0, threads => 2}),
    ok = cbench:stop_server(Warm),
    Fds0 = wait_fds(fd_count(), 10),
    {ok, S} = cbench:start_server(Engine, #{port => 0, threads => 2, idle_timeout_ms => 5000}),
    FdsServing = fd_count(),
    Before = cbench:stats(S),
    H2 = Engine =/= ehttpd,
    Self = self(),
    Args = ["-n", "20000", "-c", "4", "-m", "8"] ++ [A || A <- ["--h1"], not H2],
    Load = spawn_link(fun() ->
                              Self ! {h2load, run("h2load", Args ++ [cbench:url(S, "/hello")], 120000)}
                      end),
    Rows = table(),
    [begin
         Url = cbench:url(S, "/fault/" ++ Spec),
         _ = curl(Url, []),
         H2 andalso curl(Url, ["--http2-prior-knowledge"])
     end || #row{spec = Spec} <- Rows],
    Out = receive {h2load, {0, O}} -> O after 150000 -> error({h2load, timeout, Load}) end,
    ct:log("h2load:~n~s", [Out]),
    ?assertMatch({match, _}, re:run(Out, "20000 total, \\d+ started, 20000 done, 20000 succeeded, "
                                         "0 failed, 0 errored")),
    wait_idle(S),
    After = cbench:stats(S),
    %% Each row's fault fires once per protocol it is sent over, except the 501s of the kinds that
    %% protocol lacks.
    H1Only = [malformed_chunk, missing_last_chunk, raw, slow_head],
    H2Only = [rst_stream, goaway, settings, violation],
    Fired = length([x || #row{spec = Sp} <- Rows, not lists:member(kind(Sp), H2Only)])
        + case H2 of
              true -> length([x || #row{spec = Sp} <- Rows, not lists:member(kind(Sp), H1Only)]);
              false -> 0
          end,
    ?assertEqual(Fired, maps:get(faults, After) - maps:get(faults, Before)),
    ?assertEqual(maps:get(resets, Before), maps:get(resets, After)),
    ?assertEqual(FdsServing, wait_fds(FdsServing, 50)),
    ok = cbench:stop_server(S),
    ?assertEqual(Fds0, wait_fds(Fds0, 50)).

kind(Spec) -> list_to_atom(hd(string:split(Spec, "?"))).

fd_count() -> length(element(2, file:list_dir("/proc/self/fd"))).

wait_fds(_Want, 0) -> fd_count();
wait_fds(Want, N) ->
    case fd_count() of
        Want -> Want;
        _ -> timer:sleep(100), wait_fds(Want, N - 1)
    end.

%%% The example of docs/faults.md

%% @doc The CT suite of docs/faults.md's "Testing a client against a misbehaving server", compiled
%% from that file and run case by case.
readme_example(Config) ->
    {ok, Readme} = file:read_file(filename:join([repo_root(), "docs", "faults.md"])),
    [_, From] = binary:split(Readme, <<"```erlang\n-module(client_faults_SUITE).">>),
    [Body | _] = binary:split(From, <<"```">>),
    Dir = proplists:get_value(priv_dir, Config),
    File = filename:join(Dir, "client_faults_SUITE.erl"),
    ok = file:write_file(File, <<"-module(client_faults_SUITE).", Body/binary>>),
    {ok, Mod} = compile:file(File, [{outdir, Dir}, report, {i, code:lib_dir(stdlib, include)}]),
    {module, Mod} = code:load_abs(filename:join(Dir, "client_faults_SUITE")),
    C0 = Mod:init_per_suite([{priv_dir, Dir}]),
    Cases = Mod:all(),
    ?assert(length(Cases) >= 3),
    [ok = Mod:Case(C0) || Case <- Cases],
    Mod:end_per_suite(C0),
    ok.

%%% Helpers

%% One GET on its own connection; everything the server sent until it closed (or 5 s passed).
raw_get(Port, Path) ->
    {ok, C} = gen_tcp:connect({127, 0, 0, 1}, Port, [binary, {active, false}]),
    ok = gen_tcp:send(C, ["GET ", Path, " HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"]),
    recv_all(C, <<>>).

recv_all(C, Acc) ->
    case gen_tcp:recv(C, 0, 5000) of
        {ok, D} -> recv_all(C, <<Acc/binary, D/binary>>);
        {error, _} -> gen_tcp:close(C), Acc
    end.

%% A response head (up to the blank line) of an empty-bodied answer.
recv_head(C) -> recv_head(C, <<>>).
recv_head(C, Acc) ->
    case binary:match(Acc, <<"\r\n\r\n">>) of
        nomatch ->
            {ok, D} = gen_tcp:recv(C, 0, 5000),
            recv_head(C, <<Acc/binary, D/binary>>);
        _ -> Acc
    end.

mask_date(B) -> re:replace(B, "date: [^\r]*", "date: *", [{return, binary}]).
