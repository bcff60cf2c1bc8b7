%%% @doc The TLS faults (docs/faults.md, "TLS faults") through the Erlang API, with OTP's own clients and
%%% only cbench:client_tls_opts/1,2 on their side: docs/faults.md's table of what OTP 25's `ssl' and
%%% `httpc' get for each handshake fault (chosen by SNI) and each record-layer fault kind (`/fault/'),
%%% read here and asserted cell by cell on the nif, port and ehttpd engines (ehttpd: HTTP/1.1 only,
%% so without the `h2' rows), with the counters and journal
%%% entries each row leaves; stubs with `fault => tls_bad_record | tls_truncate' over TLS, the stub
%%% faults that do not parse, and `501' for both kinds on cleartext servers of every engine.
-module(cbench_tls_fault_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1, init_per_group/2,
         end_per_group/2]).
-export([otp_table/1, stub_bad_record/1, stub_truncate/1, stub_refused/1, cleartext_501/1]).

all() -> [{group, nif}, {group, port}, {group, ehttpd}, cleartext_501].

groups() ->
    Cases = [otp_table, stub_bad_record, stub_truncate, stub_refused],
    [{nif, [], Cases}, {port, [], Cases}, {ehttpd, [], Cases}].

suite() -> [{timetrap, {minutes, 3}}].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(ssl),
    {ok, _} = application:ensure_all_started(inets),
    {ok, _} = application:ensure_all_started(cbench),
    Config.

end_per_suite(_Config) ->
    ok.

%% The server the table's text names: a header timeout of 2 s, which ends the stalled handshake.
init_per_group(Engine, Config) ->
    {ok, S} = cbench:start_server(Engine, #{tls => true, threads => 1, header_timeout_ms => 2000}),
    [{server, S}, {engine, Engine} | Config].

end_per_group(_Engine, Config) ->
    ok = cbench:stop_server(?config(server, Config)).

%% The repository (as cbench_fault_SUITE finds it): docs/faults.md is read there.
repo_root() ->
    {ok, Erl} = file:read_link_all(filename:join(code:lib_dir(cbench), "erl")),
    Root = filename:dirname(filename:absname(Erl, code:lib_dir(cbench))),
    true = filelib:is_regular(filename:join(Root, "rebar.config")),
    Root.

%%% The table

%% One row: the target (an SNI name or a /fault/ path), the client call, the patterns of the OTP
%% column (any one may match), the pattern of the cleartext column (none when empty).
-record(row, {target :: string(), client :: string(), otp :: [string()], clear :: string() | none}).

table() ->
    {ok, Doc} = file:read_file(filename:join([repo_root(), "docs", "faults.md"])),
    [_, From] = binary:split(Doc, <<"<!-- tls-otp-outcomes -->\n">>),
    [Table | _] = binary:split(From, <<"<!-- /tls-otp-outcomes -->">>),
    [_Header, _Rule | Lines] = [L || L <- binary:split(Table, <<"\n">>, [global]), L =/= <<>>],
    Rows = [row(L) || L <- Lines],
    ?assert(length(Rows) >= 17),
    Rows.

row(Line) ->
    [<<>>, Target, Client, Otp, Clear, <<>>] =
        [string:trim(C) || C <- binary:split(Line, <<"|">>, [global])],
    [T] = quoted(Target),
    [C] = quoted(Client),
    Os = quoted(Otp),
    ?assert(Os =/= [], {no_otp_pattern, Line}),
    #row{target = T, client = C, otp = Os,
         clear = case quoted(Clear) of [P] -> P; [] -> none end}.

%% The `...` fragments of a cell.
quoted(B) ->
    case re:run(B, "`([^`]+)`", [global, {capture, all_but_first, list}]) of
        {match, Ms} -> [T || [T] <- Ms];
        nomatch -> []
    end.

matches_pattern(Text, Value) ->
    {ok, Tokens, _} = erl_scan:string("case V of " ++ Text ++ " -> true; _ -> false end."),
    {ok, [Expr]} = erl_parse:parse_exprs(Tokens),
    {value, Result, _} = erl_eval:expr(Expr, #{'V' => Value}),
    Result.

%% @doc Every row of docs/faults.md's OTP table: the client call's result matches one of the OTP
%% column's patterns. Each row leaves its trace, asserted as it goes: a handshake fault none in the
%% journal nor `faults', and `tls_handshakes_failed' one more unless the handshake succeeded (the
%% stall closed by the header timeout counted in `timeouts' too); a /fault/ row its journal entry
%% (h1_tls, or h2_tls for `h2'; the kind, status 200, the body bytes it let out) and one more `faults'.
otp_table(Config) ->
    S = ?config(server, Config),
    [begin
         Before = cbench:stats(S),
         Seq = last_seq(S),
         Got = client(S, Row),
         ct:log("~s ~s: ~p", [Target, Client, Got]),
         ?assert(lists:any(fun(P) -> matches_pattern(P, Got) end, Otp), {Target, Client, Otp, Got}),
         wait_idle(S),
         After = cbench:stats(S),
         Delta = fun(K) -> maps:get(K, After) - maps:get(K, Before) end,
         case Target of
             "/fault/" ++ Spec ->
                 {Kind, Bytes} = expected_entry(Spec),
                 Proto = case Client of "h2" -> h2_tls; _ -> h1_tls end,
                 ?assertMatch({_, [#{proto := Proto, fault := Kind, status := 200, bytes_out := Bytes,
                                     route := fault}]},
                              {Target, cbench:requests(S, #{since => Seq})}),
                 ?assertEqual({Target, 1, 0}, {Target, Delta(faults), Delta(tls_handshakes_failed)});
             _ ->
                 Failed = case Got of {ok, _} -> 0; _ -> 1 end,
                 Timeouts = case {Target, Got} of {"tls-stall.localhost", {error, closed}} -> 1; _ -> 0 end,
                 ?assertEqual({Target, Client, [], 0, Failed, Timeouts},
                              {Target, Client, cbench:requests(S, #{since => Seq}), Delta(faults),
                               Delta(tls_handshakes_failed), Delta(timeouts)})
         end
     end || Row = #row{target = Target, client = Client, otp = Otp} <- table(),
            ?config(engine, Config) =/= ehttpd orelse Client =/= "h2"],
    ok.

%% The fault kind and the body bytes (`bytes_out') a /fault/ spec's journal entry has: `bytes', by
%% default 0 for tls_bad_record and half of `length' (1024) for tls_truncate.
expected_entry(Spec) ->
    {ok, F = #{kind := Kind}} = cbench_fault:parse(list_to_binary(Spec)),
    {Kind, maps:get(bytes, F)}.

%% The client call a row's `client' cell names (docs/faults.md says what each does).
client(S, #row{target = Target, client = Client}) ->
    case string:lexemes(Client, " ") of
        ["connect", T | Alpn] ->
            Opts = maps:merge(#{sni => Target}, case Alpn of
                                                    [] -> #{};
                                                    [A] -> #{alpn => [list_to_binary(A)]}
                                                end),
            case ssl:connect("localhost", cbench:port(S), cbench:client_tls_opts(S, Opts),
                             list_to_integer(T)) of
                {ok, Sock} -> ssl:close(Sock), {ok, Sock};
                Error -> Error
            end;
        ["httpc"] ->
            httpc_get(tls_url(S, Target), [{ssl, cbench:client_tls_opts(S)}]);
        ["active"] ->
            active_get(S, Target);
        ["recv"] ->
            passive_get(S, Target);
        ["h2"] ->
            h2_get(S, Target)
    end.

tls_url(S, Path) -> "https://localhost:" ++ integer_to_list(cbench:port(S)) ++ Path.

httpc_get(Url, HttpOpts) ->
    case httpc:request(get, {Url, [{"connection", "close"}]}, [{timeout, 5000} | HttpOpts],
                       [{body_format, binary}]) of
        {ok, {{_, Status, _}, _, Body}} -> {ok, Status, byte_size(Body)};
        Error -> Error
    end.

%% `active': {BodyBytes, Message}, the body bytes after the head's blank line (none when no whole
%% head came) and the first message that is not data.
active_get(S, Path) ->
    Sock = send_get(S, Path, true),
    {Data, Last} = active_collect(Sock, <<>>),
    _ = ssl:close(Sock),
    {body_bytes(Data), Last}.

%% `recv': the same in passive mode, with the first error ssl:recv/3 gives.
passive_get(S, Path) ->
    Sock = send_get(S, Path, false),
    {Data, Error} = passive_collect(Sock, <<>>),
    _ = ssl:close(Sock),
    {body_bytes(Data), Error}.

%% `h2': over ALPN h2 in active mode, the client preface, an empty SETTINGS and a HEADERS frame for
%% GET Path written here (HPACK: indexed :method GET and :scheme https, literal :path and
%% :authority); then {DataBytes, Message}: the DATA bytes of stream 1 (none when its HEADERS did not
%% come) and the first message that is not data.
h2_get(S, Path) ->
    {ok, Sock} = ssl:connect("localhost", cbench:port(S),
                             [binary, {active, true}
                              | cbench:client_tls_opts(S, #{alpn => [<<"h2">>]})], 5000),
    {ok, <<"h2">>} = ssl:negotiated_protocol(Sock),
    P = list_to_binary(Path),
    Block = <<16#82, 16#87, 16#04, (byte_size(P)), P/binary, 16#01, 9, "localhost">>,
    ok = ssl:send(Sock, [<<"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n">>, frame(4, 0, 0, <<>>),
                         frame(1, 16#5, 1, Block)]),
    {Data, Last} = active_collect(Sock, <<>>),
    _ = ssl:close(Sock),
    {stream1_data(Data, none), Last}.

frame(Type, Flags, Stream, Payload) ->
    <<(byte_size(Payload)):24, Type:8, Flags:8, 0:1, Stream:31, Payload/binary>>.

%% The DATA bytes of stream 1 in whole frames: none until its HEADERS.
stream1_data(<<Len:24, Type:8, _Flags:8, _:1, Stream:31, _:Len/binary, Rest/binary>>, N) ->
    case {Type, Stream, N} of
        {1, 1, none} -> stream1_data(Rest, 0);
        {0, 1, _} when is_integer(N) -> stream1_data(Rest, N + Len);
        _ -> stream1_data(Rest, N)
    end;
stream1_data(_, N) ->
    N.

send_get(S, Path, Active) ->
    {ok, Sock} = ssl:connect("localhost", cbench:port(S),
                             [binary, {active, Active} | cbench:client_tls_opts(S)], 5000),
    ok = ssl:send(Sock, ["GET ", Path, " HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n"]),
    Sock.

body_bytes(Data) ->
    case binary:split(Data, <<"\r\n\r\n">>) of
        [_Head, Body] -> byte_size(Body);
        [_] -> none
    end.

passive_collect(Sock, Acc) ->
    case ssl:recv(Sock, 0, 5000) of
        {ok, D} -> passive_collect(Sock, <<Acc/binary, D/binary>>);
        Error -> {Acc, Error}
    end.

active_collect(Sock, Acc) ->
    receive
        {ssl, Sock, D} -> active_collect(Sock, <<Acc/binary, D/binary>>);
        Other when element(2, Other) =:= Sock -> {Acc, Other}
    after 5000 -> {Acc, timeout}
    end.

%%% Stubs over TLS

%% @doc A stub with `fault => tls_bad_record' over TLS: httpc gets one of the table's outcomes for
%% `/fault/tls_bad_record', never the stub's body; the journal names the fault and the stub, with
%% the stub's status, and `faults' counts it.
stub_bad_record(Config) ->
    S = ?config(server, Config),
    Seq = last_seq(S),
    #{faults := F0} = cbench:stats(S),
    {ok, Id} = cbench:stub(S, <<"/tls-bad">>, #{status => 202, body => <<"never sent">>,
                                                 fault => tls_bad_record}),
    Got = httpc_get(tls_url(S, "/tls-bad"), [{ssl, cbench:client_tls_opts(S)}]),
    [#row{otp = Otp} | _] = [R || R = #row{target = "/fault/tls_bad_record", client = "httpc"} <- table()],
    ?assert(lists:any(fun(P) -> matches_pattern(P, Got) end, Otp), {Otp, Got}),
    wait_idle(S),
    ?assertMatch([#{proto := h1_tls, fault := tls_bad_record, status := 202, bytes_out := 0, stub := Id}],
                 cbench:requests(S, #{since => Seq})),
    ?assertMatch(#{faults := F} when F =:= F0 + 1, cbench:stats(S)),
    ok = cbench:unstub(S, Id).

%% @doc A stub with `{tls_truncate, #{length => 100, bytes => 10}}': exactly 10 body bytes of the
%% declared 100, then `ssl_closed' (no close_notify, no alert); httpc reports the short body as
%% `{shutdown, server_closed}'; the journal has both with their 10 bytes.
stub_truncate(Config) ->
    S = ?config(server, Config),
    Seq = last_seq(S),
    #{faults := F0} = cbench:stats(S),
    {ok, Id} = cbench:stub(S, <<"/tls-cut">>, #{status => 203, headers => [{<<"x-a">>, <<"1">>}],
                                                 fault => {tls_truncate, #{length => 100, bytes => 10}}}),
    ?assertMatch({10, {ssl_closed, _}}, active_get(S, "/tls-cut")),
    ?assertEqual({error, {shutdown, server_closed}},
                 httpc_get(tls_url(S, "/tls-cut"), [{ssl, cbench:client_tls_opts(S)}])),
    wait_idle(S),
    ?assertMatch([#{fault := tls_truncate, status := 203, bytes_out := 10, stub := Id},
                  #{fault := tls_truncate, status := 203, bytes_out := 10, stub := Id}],
                 cbench:requests(S, #{since => Seq})),
    ?assertMatch(#{faults := F} when F =:= F0 + 2, cbench:stats(S)),
    ok = cbench:unstub(S, Id).

%% @doc TLS fault terms that do not parse are bad stubs (the bounds of src/kinds/fault.c: `bytes'
%% below `length' for tls_truncate, at most `length' for tls_bad_record, no unknown parameter).
stub_refused(Config) ->
    S = ?config(server, Config),
    [?assertEqual({error, {bad_stub, {{response, fault}, F, bad_fault}}}, cbench:stub(S, <<"/x">>, #{fault => F}))
     || F <- [{tls_truncate, #{length => 4, bytes => 4}}, {tls_truncate, #{length => 0}},
              {tls_bad_record, #{length => 1, bytes => 2}}, <<"tls_truncate?x=1">>,
              {tls_bad_record, #{at => later}}]],
    ?assertEqual([], cbench:stubs(S)).

%%% Cleartext

%% @doc On a cleartext server of every engine both kinds answer `501', empty, through /fault/ (the
%% cleartext column of the table) and through a stub, counted as no fault and journaled without
%% one; the connection goes on.
cleartext_501(_Config) ->
    Rows = [R || R = #row{clear = P} <- table(), P =/= none],
    ?assert(length(Rows) >= 4),
    [begin
         {ok, S} = cbench:start_server(Engine, #{port => 0, threads => 1}),
         [begin
              Got = httpc_get(cbench:url(S, Target), []),
              ?assert(matches_pattern(Clear, Got), {Engine, Target, Clear, Got})
          end || #row{target = Target, clear = Clear} <- Rows],
         {ok, Id} = cbench:stub(S, <<"/s">>, #{body => <<"x">>, fault => tls_bad_record}),
         {ok, Id2} = cbench:stub(S, <<"/t">>, #{body => <<"x">>, fault => {tls_truncate, #{length => 8}}}),
         {ok, C} = gen_tcp:connect({127, 0, 0, 1}, cbench:port(S), [binary, {active, false}]),
         [begin
              ok = gen_tcp:send(C, ["GET ", P, " HTTP/1.1\r\nhost: x\r\n\r\n"]),
              ?assertEqual({Engine, P, <<"HTTP/1.1 501 Not Implemented\r\ndate: *\r\ncontent-length: 0\r\n\r\n">>},
                           {Engine, P, mask_date(recv_head(C, <<>>))})
          end || P <- ["/s", "/t", "/fault/tls_truncate"]],
         ok = gen_tcp:close(C),
         wait_idle(S),
         Entries = cbench:requests(S),
         ?assertEqual({Engine, lists:duplicate(length(Rows) + 3, {undefined, 501, 0})},
                      {Engine, [{F, St, B} || #{fault := F, status := St, bytes_out := B} <- Entries]}),
         ?assertMatch([Id, Id2], [I || #{stub := I} <- Entries, I =/= undefined]),
         ?assertMatch({_, #{faults := 0}}, {Engine, cbench:stats(S)}),
         ok = cbench:stop_server(S)
     end || Engine <- [nif, port, ehttpd]],
    ok.

%%% Helpers

last_seq(S) ->
    case cbench:requests(S) of
        [] -> 0;
        Es -> maps:get(seq, lists:last(Es))
    end.

%% Waits (at most 10 s) until the server has no open connection.
wait_idle(S) -> wait_idle(S, 100).
wait_idle(S, 0) -> ?assertMatch(#{conns_open := 0}, cbench:stats(S));
wait_idle(S, N) ->
    case cbench:stats(S) of
        #{conns_open := 0} -> ok;
        _ -> timer:sleep(100), wait_idle(S, N - 1)
    end.

%% A response head (up to the blank line) of an empty-bodied answer.
recv_head(C, Acc) ->
    case binary:match(Acc, <<"\r\n\r\n">>) of
        nomatch ->
            {ok, D} = gen_tcp:recv(C, 0, 5000),
            recv_head(C, <<Acc/binary, D/binary>>);
        _ -> Acc
    end.

mask_date(B) -> re:replace(B, "date: [^\r]*", "date: *", [{return, binary}]).
