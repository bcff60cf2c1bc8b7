%%% @doc Recordings from Erlang (docs/record.md) on the nif, port and ehttpd engines: load_stubs/2 of a file as
%%% the recorder writes it (a query, a chosen header, a base64 body, a body file, repeated response
%%% headers) answers byte for byte; recorded/1 of a server that recorded nothing; save_stubs/2 and
%%% clear_recorded/1; the same stubs through cbench_stub_json and stub/3; bad arguments. Recording
%%% itself is driven by the C tests record_* and, record then replay on every engine, by
%%% cbench_record_replay_SUITE and test/e2e.sh.
-module(cbench_record_SUITE).

-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0, init_per_group/2, end_per_group/2, init_per_testcase/2,
         end_per_testcase/2]).
-export([load_saved_file/1, nothing_recorded/1, via_terms/1, bad_arguments/1,
         stub_json_round_trip/1, stub_json_same_reasons/1, stub_json_strict_text/1,
         stub_json_body_bytes/1, replay_helper/1,
         replay_missing/1,
         mode_choice/1, stub_file_features/1, stub_file_header_order/1, stub_file_feature_reasons/1,
         stub_file_h2_fault/1,
         stub_json_round_trip_all/1]).

all() -> [{group, nif}, {group, port}, {group, ehttpd}, stub_json_round_trip, stub_json_same_reasons,
          stub_json_strict_text, stub_json_body_bytes, replay_missing, mode_choice, stub_file_features,
          stub_file_header_order, stub_file_feature_reasons, stub_file_h2_fault, stub_json_round_trip_all].

groups() ->
    Cases = [load_saved_file, nothing_recorded, via_terms, bad_arguments, replay_helper],
    [{nif, [], Cases}, {port, [], Cases}, {ehttpd, [], Cases}].

suite() -> [{timetrap, {minutes, 2}}].

init_per_group(Engine, Config) -> [{engine, Engine} | Config].

end_per_group(_, _Config) -> ok.

init_per_testcase(_, Config) ->
    Dir = filename:join(proplists:get_value(priv_dir, Config), "rec"),
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    [{dir, Dir} | Config].

end_per_testcase(_, _Config) -> ok.

%% Bytes that are not UTF-8, and a body above the file threshold.
-define(BIN, <<0, 1, 255, 254, " abc">>).

big() -> << <<(I * 7 band 255)>> || I <- lists:seq(0, 99999) >>.

%% The stub file as cb_server_save_stubs writes it for these exchanges (test/c/test_record.c holds
%% the recorder to this text).
saved_file(Dir) ->
    File = filename:join(Dir, "api.json"),
    Bodies = File ++ ".bodies",
    ok = filelib:ensure_dir(filename:join(Bodies, "x")),
    ok = file:write_file(filename:join(Bodies, "5.bin"), big()),
    Text = [<<"{\"stubs\": [\n">>,
            <<"{\"name\": \"rec_1\", \"match\": {\"method\": \"GET\", \"path\": \"/a\"}, \"response\": {\"status\": 200, "
              "\"headers\": [[\"content-type\", \"text/plain\"]], \"body\": \"hello a\"}},\n">>,
            <<"{\"name\": \"rec_2\", \"match\": {\"method\": \"GET\", \"path\": \"/a\", \"query\": {\"x\": \"1\", \"y\": "
              "\"two\"}, \"priority\": 2}, \"response\": {\"status\": 200, \"headers\": [[\"x-q\", \"1\"]], \"body\": "
              "\"with query\"}},\n">>,
            <<"{\"name\": \"rec_3\", \"match\": {\"method\": \"GET\", \"path\": \"/a\", \"headers\": {\"accept\": "
              "\"application/json\"}, \"priority\": 1}, \"response\": {\"status\": 200, \"body\": \"{\\\"json\\\":1}\"}},\n">>,
            <<"{\"name\": \"rec_4\", \"match\": {\"method\": \"POST\", \"path\": \"/bin\"}, \"response\": {\"status\": 201, "
              "\"body\": {\"base64\": \"AAH//iBhYmM=\"}}},\n">>,
            <<"{\"name\": \"rec_5\", \"match\": {\"method\": \"GET\", \"path\": \"/big\"}, \"response\": {\"status\": 200, "
              "\"body\": {\"file\": \"api.json.bodies/5.bin\"}}},\n">>,
            <<"{\"name\": \"rec_6\", \"match\": {\"method\": \"DELETE\", \"path\": \"/gone\"}, \"response\": {\"status\": "
              "404, \"headers\": [[\"set-cookie\", \"a=1\"], [\"set-cookie\", \"b=2\"]]}}\n">>,
            <<"]}\n">>],
    ok = file:write_file(File, Text),
    File.

%% Each request and the answer it gets back, dates masked.
cases() ->
    [{"GET /a HTTP/1.1\r\nhost: x\r\n\r\n",
      answer(200, "content-type: text/plain\r\n", <<"hello a">>)},
     {"GET /a?y=two&x=1 HTTP/1.1\r\nhost: x\r\n\r\n", answer(200, "x-q: 1\r\n", <<"with query">>)},
     {"GET /a HTTP/1.1\r\nhost: x\r\naccept: application/json\r\n\r\n", answer(200, "", <<"{\"json\":1}">>)},
     {"POST /bin HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n", answer(201, "", ?BIN)},
     {"GET /big HTTP/1.1\r\nhost: x\r\n\r\n", answer(200, "", big())},
     {"DELETE /gone HTTP/1.1\r\nhost: x\r\n\r\n", answer(404, "set-cookie: a=1\r\nset-cookie: b=2\r\n", <<>>)}].

answer(Status, Headers, Body) ->
    Reason = #{200 => "OK", 201 => "Created", 404 => "Not Found"},
    iolist_to_binary(["HTTP/1.1 ", integer_to_list(Status), " ", maps:get(Status, Reason), "\r\n",
                      "date: Xxx, 00 Xxx 0000 00:00:00 GMT\r\n", Headers,
                      "content-length: ", integer_to_list(byte_size(Body)), "\r\n\r\n", Body]).

%% Every case on one keep-alive connection, each answer read to its exact length.
check_answers(S) ->
    {ok, Sock} = gen_tcp:connect({127, 0, 0, 1}, cbench:port(S), [binary, {active, false}]),
    lists:foreach(fun({Req, Want}) ->
                          ok = gen_tcp:send(Sock, Req),
                          {ok, Got} = gen_tcp:recv(Sock, byte_size(Want), 10000),
                          ?assertEqual(Want, mask_date(Got))
                  end, cases()),
    gen_tcp:close(Sock).

mask_date(Bin) ->
    re:replace(Bin, <<"\r\ndate: [^\r]{29}\r\n">>, <<"\r\ndate: Xxx, 00 Xxx 0000 00:00:00 GMT\r\n">>,
               [{return, binary}]).

load_saved_file(Config) ->
    File = saved_file(proplists:get_value(dir, Config)),
    {ok, S} = cbench:start_server(proplists:get_value(engine, Config), #{port => 0, threads => 1}),
    {ok, Ids} = cbench:load_stubs(S, File),
    ?assertEqual(6, length(Ids)),
    ?assertEqual([<<"rec_1">>, <<"rec_2">>, <<"rec_3">>, <<"rec_4">>, <<"rec_5">>, <<"rec_6">>],
                 [N || #{id := Id, name := N} <- cbench:stubs(S), lists:member(Id, Ids)]),
    check_answers(S),
    %% A file with an error adds nothing and says where.
    Bad = filename:join(proplists:get_value(dir, Config), "bad.json"),
    ok = file:write_file(Bad, <<"[{\"match\": {\"path\": \"/x\"},\n \"response\": {\"body\": {\"base64\": \"AAH\"}}}]">>),
    %% The C engines' loader gives the line and a description; ehttpd's (cbench_stub_json) the place
    %% and the reason.
    Msg = case proplists:get_value(engine, Config) of
              ehttpd -> iolist_to_binary([Bad, ": stubs[0].response.body.base64: bad_char"]);
              _ -> iolist_to_binary([Bad, ":2: stubs[0].response.body.base64: bad_char: not base64: 3 "
                                     "characters, not a multiple of 4 (pad with =)"])
          end,
    ?assertEqual({error, {bad_stub_file, Msg}}, cbench:load_stubs(S, Bad)),
    ?assertEqual(6, length(cbench:stubs(S))),
    ok = cbench:stop_server(S).

nothing_recorded(Config) ->
    {ok, S} = cbench:start_server(proplists:get_value(engine, Config), #{port => 0, threads => 1}),
    ?assertEqual([], cbench:recorded(S)),
    ?assertMatch(#{recorded := 0, recorded_duplicates := 0, record_skipped := 0}, cbench:stats(S)),
    File = filename:join(proplists:get_value(dir, Config), "none.json"),
    ?assertEqual(ok, cbench:save_stubs(S, File)),
    ?assertEqual({ok, <<"{\"stubs\": [\n\n]}\n">>}, file:read_file(File)),
    %% A relative name is the caller's working directory's.
    {ok, Cwd} = file:get_cwd(),
    ok = file:set_cwd(proplists:get_value(dir, Config)),
    try ?assertEqual(ok, cbench:save_stubs(S, <<"rel.json">>))
    after ok = file:set_cwd(Cwd)
    end,
    ?assertEqual({ok, <<"{\"stubs\": [\n\n]}\n">>},
                 file:read_file(filename:join(proplists:get_value(dir, Config), "rel.json"))),
    ?assertEqual({ok, []}, cbench:load_stubs(S, File)),
    ?assertEqual(ok, cbench:clear_recorded(S)),
    ?assertEqual([], cbench:recorded(S)),
    ok = cbench:stop_server(S).

%% The saved file through cbench_stub_json: terms that stub/3 takes as they are, giving the same
%% answers (on this engine, and on ehttpd).
via_terms(Config) ->
    File = saved_file(proplists:get_value(dir, Config)),
    {ok, Text} = file:read_file(File),
    {ok, Json} = cbench_json:decode(Text),
    {ok, Stubs} = cbench_stub_json:from_json(Json, filename:dirname(File)),
    ?assertMatch([#{name := <<"rec_1">>, match := #{path := <<"/a">>, method := <<"GET">>, name := <<"rec_1">>},
                    response := #{status := 200, headers := [{<<"content-type">>, <<"text/plain">>}],
                                  body := <<"hello a">>}} | _], Stubs),
    ?assertMatch(#{response := #{body := ?BIN}}, lists:nth(4, Stubs)),
    ?assertMatch(#{match := #{query := [{<<"x">>, <<"1">>}, {<<"y">>, <<"two">>}], priority := 2}},
                 lists:nth(2, Stubs)),
    lists:foreach(
      fun(Engine) ->
              {ok, S} = cbench:start_server(Engine, #{port => 0, threads => 1}),
              [{ok, _} = cbench:stub(S, M, R) || #{match := M, response := R} <- Stubs],
              ?assertEqual([<<"rec_1">>, <<"rec_2">>, <<"rec_3">>, <<"rec_4">>, <<"rec_5">>, <<"rec_6">>],
                           [N || #{name := N} <- cbench:stubs(S)]),
              check_answers(S),
              ok = cbench:stop_server(S)
      end, [proplists:get_value(engine, Config), ehttpd]).

bad_arguments(Config) ->
    {ok, S} = cbench:start_server(proplists:get_value(engine, Config), #{port => 0, threads => 1}),
    ?assertError(badarg, cbench:recorded(not_a_server)),
    ?assertError(badarg, cbench:save_stubs(not_a_server, "x.json")),
    ?assertError(badarg, cbench:save_stubs(S, 42)),
    ?assertError(badarg, cbench:save_stubs(S, "")),
    ?assertError(badarg, cbench:save_stubs(S, <<"a", 0, "b">>)),
    ?assertError(badarg, cbench:save_stubs(S, [<<"x">>, {y}])),
    ?assertError(badarg, cbench:load_stubs(S, 42)),
    ?assertError(badarg, cbench:load_stubs(S, <<>>)),
    ?assertError(badarg, cbench:load_stubs(not_a_server, "x")),
    ?assertError(badarg, cbench:clear_recorded(42)),
    ?assertEqual({error, {save_failed, <<"/nonexistent/dir/x.json.tmp: No such file or directory">>}},
                 cbench:save_stubs(S, "/nonexistent/dir/x.json")),
    ?assertEqual({error, {bad_stub_file, <<"/nonexistent/x.json: No such file or directory">>}},
                 cbench:load_stubs(S, "/nonexistent/x.json")),
    ?assertEqual({error, {bad_stub_file, <<"/: is a directory">>}}, cbench:load_stubs(S, "/")),
    %% The server went on.
    ?assertEqual([], cbench:recorded(S)),
    ok = cbench:stop_server(S).

%% to_json/1 writes what from_json/2 reads back to the same terms; a body that is not UTF-8 goes
%% as base64.
stub_json_round_trip(_Config) ->
    Stubs = [#{name => <<"a">>, match => #{path => <<"/a">>, method => <<"GET">>, name => <<"a">>,
                                           query => [{<<"q">>, <<"1">>}], headers => [{<<"x-k">>, present}],
                                           priority => 2},
               response => #{status => 201, headers => [{<<"x">>, <<"1">>}, {<<"x">>, <<"2">>}],
                             body => ?BIN}},
             #{name => <<"b">>, match => #{path => <<"/b">>, name => <<"b">>},
               response => #{status => 200, body => <<"h", 16#c3, 16#a9>>, delay_ms => 5}}],
    Text = cbench_stub_json:to_json(Stubs),
    ?assertMatch({match, _}, re:run(Text, "\"base64\":\"AAH//iBhYmM=\"")),
    {ok, Json} = cbench_json:decode(Text),
    ?assertEqual({ok, Stubs}, cbench_stub_json:from_json(Json, "/")),
    %% A fault is read as its spec text (it was {unsupported, <<"fault">>}).
    ?assertEqual({ok, [#{name => <<>>, match => #{path => <<"/">>},
                         response => #{status => 200, fault => <<"reset">>}}]},
                 cbench_stub_json:from_json([#{<<"match">> => #{<<"path">> => <<"/">>},
                                               <<"response">> => #{<<"fault">> => <<"reset">>}}], "/")),
    ?assertEqual({error, {bad_stub_json, {0, response, <<"faults">>}, unknown_key}},
                 cbench_stub_json:from_json([#{<<"match">> => #{<<"path">> => <<"/">>},
                                               <<"response">> => #{<<"faults">> => <<"reset">>}}], "/")),
    ?assertEqual({error, {bad_stub_json, {0, response, body, base64}, bad_char}},
                 cbench_stub_json:from_json([#{<<"match">> => #{<<"path">> => <<"/">>},
                                               <<"response">> => #{<<"body">> => #{<<"base64">> => <<"A">>}}}],
                                            "/")),
    ?assertEqual({error, {bad_stub_json, stubs, wrong_type}}, cbench_stub_json:from_json(7, "/")),
    %% A proxy's pipeline: 0 and 1 (one request at a time, the default) are read as none and not
    %% written; above 1 it goes both ways.
    Px = fun(N) -> [#{<<"match">> => #{<<"path">> => <<"/">>},
                      <<"response">> => #{<<"proxy">> => #{<<"to">> => <<"http://h">>, <<"pipeline">> => N}}}]
         end,
    [?assertEqual({N, {ok, [#{name => <<>>, match => #{path => <<"/">>},
                              response => #{proxy => #{to => <<"http://h">>}}}]}},
                  {N, cbench_stub_json:from_json(Px(N), "/")}) || N <- [0, 1]],
    ?assertEqual(<<"{\"stubs\": [\n{\"match\":{\"path\":\"/\"},\"response\":{\"proxy\":{\"to\":\"http://h\"}}}\n]}\n">>,
                 cbench_stub_json:to_json([#{match => #{path => <<"/">>},
                                             response => #{proxy => #{to => <<"http://h">>, pipeline => 1}}}])),
    {ok, Four} = cbench_stub_json:from_json(Px(4), "/"),
    ?assertMatch([#{response := #{proxy := #{pipeline := 4}}}], Four),
    ?assertEqual({ok, Four}, cbench_stub_json:from_json(element(2, cbench_json:decode(cbench_stub_json:to_json(Four))),
                                                        "/")).

%% A stub file with one wrong field is refused by ehttpd's loader (cbench_stub_json) at the place and
%% for the reason the C engines' loader gives: the same FIELD: WHY in both messages.
stub_json_same_reasons(Config) ->
    Dir = proplists:get_value(dir, Config),
    File = filename:join(Dir, "reasons.json"),
    Cases = [<<"[7]">>,
             <<"[{\"name\": 7, \"match\": {\"path\": \"/a\"}}]">>,
             <<"[{\"match\": 7}]">>,
             <<"[{\"response\": {}}]">>,
             <<"[{\"match\": {\"path\": 7}}]">>,
             <<"[{\"match\": {}}]">>,
             <<"[{\"match\": {\"path\": \"/a\", \"headers\": {\"x\": 1}}}]">>,
             <<"[{\"match\": {\"path\": \"/a\", \"priority\": 2000000}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": 7}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"status\": 99}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"status\": \"200\"}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"delay_ms\": -1}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"delay_ms\": 3600001}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"times\": -1}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"body\": 7}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"body\": {\"bytes\": -1}}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"body\": {\"bytes\": \"1\"}}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"body\": {\"file\": \"\"}}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"body\": {\"bytes\": 1, \"json\": 2}}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"body\": {\"hex\": \"00\"}}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"body\": {\"base64\": 7}}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"body\": {\"base64\": \"AA==\\n\"}}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"body\": {\"base64\": \" AA==\"}}}]">>,
             <<"{\"stubs\": 7}">>,
             <<"{\"stubs\": [{\"match\": {\"path\": \"/a\"}}],\n \"stub\": []}">>,
             %% A response header pair by its index; methods as the C loader names them (an item by
             %% its index); after beside a proxy a conflict, without one an unknown key; a proxy's
             %% own fields.
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"headers\": [[\"a\", \"1\"], [\"b\"]]}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"headers\": [[\"a\", 1]]}}]">>,
             <<"[{\"match\": {\"path\": \"/a\", \"method\": \"FOO\"}}]">>,
             <<"[{\"match\": {\"path\": \"/a\", \"method\": \"get\"}}]">>,
             <<"[{\"match\": {\"path\": \"/a\", \"method\": [\"GET\", \"FOO\"]}}]">>,
             <<"[{\"match\": {\"path\": \"/a\", \"method\": [\"GET\", \"any\"]}}]">>,
             <<"[{\"match\": {\"path\": \"/a\", \"method\": [\"GET\", 7]}}]">>,
             <<"[{\"match\": {\"path\": \"/a\", \"method\": []}}]">>,
             <<"[{\"match\": {\"path\": \"/a\", \"method\": 7}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"proxy\": {\"to\": \"http://127.0.0.1:1\"}, "
               "\"after\": \"last\"}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"proxy\": {\"to\": \"http://127.0.0.1:1\"}, "
               "\"after\": \"last\", \"status\": 200}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"after\": \"last\"}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"proxy\": {\"to\": \"http://127.0.0.1:1\"}, "
               "\"status\": 200}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"proxy\": {\"to\": \"http://127.0.0.1:1\"}, "
               "\"body\": \"x\"}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"proxy\": 7}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"proxy\": {}}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"proxy\": {\"to\": \"http://127.0.0.1:1\", "
               "\"via\": 1}}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"proxy\": {\"to\": \"http://127.0.0.1:1\", "
               "\"protocol\": \"h3\"}}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"proxy\": {\"to\": \"http://127.0.0.1:1\", "
               "\"protocol\": 2}}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"proxy\": {\"to\": \"http://127.0.0.1:1\", "
               "\"timeout_ms\": 0}}}]">>,
             %% pipeline: its type and bound are the loaders' (.proxy.pipeline); above 1 with h2c or
             %% an https:// upstream the engine's conflict (.proxy), ehttpd's from cbench_spec.
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"proxy\": {\"to\": \"http://127.0.0.1:1\", "
               "\"pipeline\": 65}}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"proxy\": {\"to\": \"http://127.0.0.1:1\", "
               "\"pipeline\": -1}}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"proxy\": {\"to\": \"http://127.0.0.1:1\", "
               "\"pipeline\": \"2\"}}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"proxy\": {\"to\": \"http://127.0.0.1:1\", "
               "\"pipeline\": 2.5}}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"proxy\": {\"to\": \"http://127.0.0.1:1\", "
               "\"protocol\": \"h2c\", \"pipeline\": 2}}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"proxy\": {\"to\": \"https://127.0.0.1:1\", "
               "\"pipeline\": 64}}}]">>,
             %% A `to' the engine refuses (not http:// or https://, a bad port, a character a
             %% URL cannot hold unescaped): the field is its `to' on both.
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"proxy\": {\"to\": \"ftp://x\"}}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"proxy\": {\"to\": \"http://127.0.0.1:0\"}}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"proxy\": {\"to\": \"http://127.0.0.1:1/a?b\"}}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"proxy\": {\"to\": \"\"}}}]">>],
    {ok, C} = cbench:start_server(nif, #{port => 0, threads => 1}),
    {ok, E} = cbench:start_server(ehttpd, #{port => 0}),
    Reason = fun(S) ->
                     case cbench:load_stubs(S, File) of
                         {error, {bad_stub_file, Msg}} ->
                             %% "FILE:LINE: FIELD: WHY: ..." (C) and "FILE: FIELD: WHY" (ehttpd).
                             case binary:split(Msg, <<": ">>, [global]) of
                                 [_, Field, Why | _] -> {Field, Why};
                                 _ -> Msg
                             end;
                         Other -> Other
                     end
             end,
    try
        [begin
             ok = file:write_file(File, Text),
             ?assertEqual({Text, Reason(C)}, {Text, Reason(E)})
         end || Text <- Cases],
        %% A proxy stub file loads on both, and its stub forwards (nothing listens there: 502).
        ok = file:write_file(File, <<"[{\"match\": {\"path\": \"/p\"}, \"response\": {\"proxy\": "
                                     "{\"to\": \"http://127.0.0.1:1\", \"protocol\": \"http1\"}, \"times\": 2}}]">>),
        [begin
             ?assertMatch({S, {ok, [_]}}, {S, cbench:load_stubs(S, File)}),
             {ok, Sock} = gen_tcp:connect({127, 0, 0, 1}, cbench:port(S), [binary, {active, false}]),
             ok = gen_tcp:send(Sock, <<"GET /p HTTP/1.1\r\nhost: x\r\n\r\n">>),
             {ok, <<"HTTP/1.1 502", _/binary>>} = gen_tcp:recv(Sock, 12, 10000),
             gen_tcp:close(Sock)
         end || S <- [C, E]]
    after
        ok = cbench:stop_server(C),
        ok = cbench:stop_server(E)
    end.

%% A stub file whose text jansson refuses as the C loader parses it (a key twice in one object, a
%% \u0000 in a string or a key) is refused by ehttpd's loader too, and nothing is added; cbench_json's
%% lax decode/1 (body matchers, JSON_ALLOW_NUL) still takes the first four (a \u0000 in a key is
%% refused by jansson whatever its flags, and so by decode/1).
stub_json_strict_text(Config) ->
    File = filename:join(proplists:get_value(dir, Config), "strict.json"),
    Cases = [<<"[{\"match\": {\"path\": \"/a\", \"path\": \"/b\"}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"match\": {\"path\": \"/b\"}}]">>,
             <<"{\"stubs\": [], \"stubs\": [{\"match\": {\"path\": \"/a\"}}]}">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"body\": \"a\\u0000b\"}}]">>,
             <<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"headers\": {\"x\\u0000\": \"1\"}}}]">>],
    {ok, C} = cbench:start_server(nif, #{port => 0, threads => 1}),
    {ok, E} = cbench:start_server(ehttpd, #{port => 0}),
    try
        [begin
             ok = file:write_file(File, Text),
             case binary:match(Text, <<"x\\u0000\":">>) of
                 nomatch -> ?assertMatch({ok, _}, cbench_json:decode(Text));
                 _ -> ?assertEqual(error, cbench_json:decode(Text))
             end,
             ?assertEqual(error, cbench_json:decode(Text, strict)),
             ?assertMatch({Text, {error, {bad_stub_file, _}}}, {Text, cbench:load_stubs(C, File)}),
             ?assertEqual({Text, {error, {bad_stub_file, iolist_to_binary([File, ": not JSON"])}}},
                          {Text, cbench:load_stubs(E, File)})
         end || Text <- Cases],
        ?assertEqual([], cbench:stubs(C)),
        ?assertEqual([], cbench:stubs(E))
    after
        ok = cbench:stop_server(C),
        ok = cbench:stop_server(E)
    end.

%% A `{"json": ...}' body is served in the same bytes by every engine: members sorted bytewise by
%% key, no white space, jansson's string escapes, integers as they are, each float as the shortest
%% text that reads back to it in float_to_binary(F, [short])'s form. (The C engines kept the file's
%% member order and wrote 0.1 as 0.10000000000000001; ehttpd sorted and wrote the shortest.) 2,000
%% random doubles, half of them given with 17 digits, check the float form beyond the examples.
stub_json_body_bytes(Config) ->
    File = filename:join(proplists:get_value(dir, Config), "json_body.json"),
    Fixed = <<"{\"z\": 1, \"a\": {\"y\": [0.1, 1.5e300, -0.0, 100.0, 1e-7, 1E2, 2.50, 1000.0, 0.0001, 0.000123, "
              "5e-324, 1.7976931348623157e308, 123456789.0, 1e21], "
              "\"b\": \"\\u00e9\\n\\t\\u0001\\u001f/\\/\\\"\\\\ \\ud83d\\ude00 \xc3\xa9\"}, "
              "\"m\": [true, false, null, -9223372036854775808, 9223372036854775807, 0, -0, {\"b\": 1, \"B\": 2}], "
              "\"\xc3\xa9\": 1, \"Z\": {}, \"\": []}">>,
    Want = <<"{\"\":[],\"Z\":{},\"a\":{\"b\":\"\xc3\xa9\\n\\t\\u0001\\u001F//\\\"\\\\ \xf0\x9f\x98\x80 \xc3\xa9\","
             "\"y\":[0.1,1.5e300,-0.0,100.0,1.0e-7,100.0,2.5,1.0e3,0.0001,1.23e-4,5.0e-324,"
             "1.7976931348623157e308,123456789.0,1.0e21]},"
             "\"m\":[true,false,null,-9223372036854775808,9223372036854775807,0,0,{\"B\":2,\"b\":1}],"
             "\"z\":1,\"\xc3\xa9\":1}">>,
    rand:seed(exsss, {1, 2, 3}),
    Floats = random_doubles(2000, []),
    Given = [case I rem 2 of
                 0 -> float_to_binary(F, [short]);
                 1 -> iolist_to_binary(io_lib:format("~.17e", [F]))
             end || {I, F} <- lists:zip(lists:seq(1, length(Floats)), Floats)],
    WantFloats = iolist_to_binary(["[", lists:join(",", [float_to_binary(F, [short]) || F <- Floats]), "]"]),
    ok = file:write_file(File, [<<"[{\"match\": {\"path\": \"/j\"}, \"response\": {\"body\": {\"json\": ">>, Fixed,
                                <<"}}},\n {\"match\": {\"path\": \"/f\"}, \"response\": {\"body\": {\"json\": [">>,
                                lists:join(", ", Given), <<"]}}}]">>]),
    [begin
         {ok, S} = cbench:start_server(E, #{port => 0, threads => 1}),
         try
             ?assertMatch({E, {ok, [_, _]}}, {E, cbench:load_stubs(S, File)}),
             ?assertEqual({E, Want}, {E, get_body(S, <<"/j">>)}),
             ?assertEqual({E, WantFloats}, {E, get_body(S, <<"/f">>)})
         after
             ok = cbench:stop_server(S)
         end
     end || E <- [nif, port, ehttpd]],
    ok.

%% N doubles of random bits (no infinity, no NaN).
random_doubles(0, Acc) -> Acc;
random_doubles(N, Acc) ->
    case <<(rand:uniform(1 bsl 64) - 1):64>> of
        <<_:1, 2047:11, _:52>> -> random_doubles(N, Acc);
        <<F/float>> -> random_doubles(N - 1, [F | Acc])
    end.

%% The body of a GET of Path, read to its content-length.
get_body(S, Path) ->
    {ok, Sock} = gen_tcp:connect({127, 0, 0, 1}, cbench:port(S), [binary, {active, false}]),
    ok = gen_tcp:send(Sock, [<<"GET ">>, Path, <<" HTTP/1.1\r\nhost: x\r\n\r\n">>]),
    Body = read_body(Sock, <<>>),
    gen_tcp:close(Sock),
    Body.

read_body(Sock, Buf) ->
    case binary:split(Buf, <<"\r\n\r\n">>) of
        [Head, Rest] ->
            {match, [Len]} = re:run(Head, "content-length: ([0-9]+)", [{capture, all_but_first, list}, caseless]),
            N = list_to_integer(Len),
            case byte_size(Rest) >= N of
                true -> binary:part(Rest, 0, N);
                false -> {ok, More} = gen_tcp:recv(Sock, N - byte_size(Rest), 10000),
                         <<Rest/binary, More/binary>>
            end;
        _ ->
            {ok, More} = gen_tcp:recv(Sock, 0, 10000),
            read_body(Sock, <<Buf/binary, More/binary>>)
    end.

%% cbench_record in replay mode: the file's stubs answer; stop/1 saves nothing (the file is as it was).
replay_helper(Config) ->
    Dir = proplists:get_value(dir, Config),
    File = saved_file(Dir),
    {ok, Before} = file:read_file(File),
    {ok, S} = cbench_record:server(api, "http://127.0.0.1:1",
                                   #{dir => Dir, record => false, engine => proplists:get_value(engine, Config)}),
    check_answers(S),
    ?assertEqual(ok, cbench_record:stop(S)),
    ?assertEqual({ok, Before}, file:read_file(File)),
    ?assertNot(is_process_alive(S)).

replay_missing(Config) ->
    Dir = proplists:get_value(dir, Config),
    File = filename:join(Dir, "nothing.json"),
    Running = cbench:servers(),
    ?assertEqual({error, {no_recording, unicode:characters_to_binary(File)}},
                 cbench_record:server(<<"nothing">>, "http://127.0.0.1:1", #{dir => Dir, record => false})),
    %% No server was left running.
    ?assertEqual(Running, cbench:servers()),
    ?assertEqual({error, {bad_option, dri}}, cbench_record:server(x, "http://127.0.0.1:1", #{dri => Dir})),
    ?assertError(badarg, cbench_record:server(x, "http://127.0.0.1:1", [])),
    ?assertError(badarg, cbench_record:stop(x)).

%% record => true or false wins; without it, CBENCH_RECORD=1 records and anything else replays.
mode_choice(_Config) ->
    Old = os:getenv("CBENCH_RECORD"),
    try
        os:unsetenv("CBENCH_RECORD"),
        ?assertEqual(replay, cbench_record:mode(#{})),
        ?assertEqual(record, cbench_record:mode(#{record => true})),
        os:putenv("CBENCH_RECORD", "1"),
        ?assertEqual(record, cbench_record:mode(#{})),
        ?assertEqual(replay, cbench_record:mode(#{record => false})),
        os:putenv("CBENCH_RECORD", "0"),
        ?assertEqual(replay, cbench_record:mode(#{})),
        %% Replay mode by the environment: a missing recording is said as such.
        os:unsetenv("CBENCH_RECORD"),
        ?assertMatch({error, {no_recording, _}}, cbench_record:server(absent, "http://127.0.0.1:1", #{dir => "/nonexistent"}))
    after
        case Old of
            false -> os:unsetenv("CBENCH_RECORD");
            _ -> os:putenv("CBENCH_RECORD", Old)
        end
    end.

%%% The stub file's other fields (docs/routes.md "The stub file"): sequences, faults, templates,
%%% scenarios, body matchers, chunks, drawn delays and expectations, read by ehttpd's loader
%%% (cbench_stub_json) as the C engines' loader (src/stub_json.c) reads them.

%% One stub file of every kind of stub, loaded on nif, port and ehttpd: every answer byte for byte
%% the same (dates masked), requests and answers in one order on fresh connections (faults close
%% theirs), and the drawn delays the journal records the same (values, not timings).
features_file(Dir) ->
    File = filename:join(Dir, "features.json"),
    ok = file:write_file(File, <<"{\"stubs\": [\n"
        "{\"name\": \"seq\", \"match\": {\"path\": \"/seq\"}, \"response\": {\"responses\": [\n"
        "   {\"status\": 503, \"headers\": [[\"retry-after\", \"0\"]], \"body\": \"busy\"},\n"
        "   {\"status\": 201, \"body\": \"paid\"}], \"after\": \"cycle\", \"times\": 5}},\n"
        "{\"name\": \"tpl\", \"match\": {\"method\": [\"GET\", \"POST\"], \"path\": \"/users/{id}\"},\n"
        " \"response\": {\"template\": true, \"headers\": [[\"x-id\", \"{{path.id}}\"], [\"x-q\", \"{{query.q}}\"]],\n"
        "              \"body\": \"{{method}} {{path.id}} {{seq}} {{header.x-k}} [{{body}}]\"}},\n"
        "{\"name\": \"raw\", \"match\": {\"path\": \"/raw\"}, \"response\": {\"fault\": \"raw?preset=no_reason\"}},\n"
        "{\"name\": \"trunc\", \"match\": {\"path\": \"/trunc\"},\n"
        " \"response\": {\"headers\": {\"x-t\": \"1\"}, \"fault\": \"truncated?length=10&bytes=4\"}},\n"
        "{\"name\": \"chunks\", \"match\": {\"path\": \"/chunks\"},\n"
        " \"response\": {\"body\": \"abcdefg\", \"chunks\": 3, \"interval_ms\": 1}},\n"
        "{\"name\": \"add\", \"match\": {\"path\": \"/cart\", \"scenario\": \"cart\", \"when\": \"started\", "
        "\"then\": \"full\"},\n"
        " \"response\": {\"status\": 201, \"body\": \"added\"}},\n"
        "{\"name\": \"full\", \"match\": {\"path\": \"/cart\", \"scenario\": \"cart\", \"when\": \"full\"},\n"
        " \"response\": {\"status\": 409, \"body\": \"full\"}},\n"
        "{\"name\": \"body\", \"match\": {\"method\": \"POST\", \"path\": \"/m\",\n"
        "  \"body\": {\"json_subset\": {\"a\": 1}}},\n"
        " \"response\": {\"body\": {\"json\": {\"matched\": true}}}},\n"
        "{\"name\": \"drawn\", \"match\": {\"path\": \"/d\"},\n"
        " \"response\": {\"body\": \"late\", \"delay\": {\"uniform\": [1, 30]}, \"delay_seed\": 7}},\n"
        "{\"name\": \"once\", \"match\": {\"path\": \"/once\"}, \"response\": {\"body\": \"one\", \"times\": 1},\n"
        " \"expect\": {\"at_least\": 1}}\n"
        "]}\n">>),
    File.

features_requests() ->
    Get = fun(Path) -> ["GET ", Path, " HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"] end,
    Post = fun(Path, Body) -> ["POST ", Path, " HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: ",
                               integer_to_list(byte_size(Body)), "\r\n\r\n", Body] end,
    [Get(<<"/seq">>), Get(<<"/seq">>), Get(<<"/seq">>), Get(<<"/seq">>), Get(<<"/seq">>), Get(<<"/seq">>),
     ["GET /users/42?q=a%20b HTTP/1.1\r\nhost: x\r\nx-k: K\r\nconnection: close\r\n\r\n"],
     Post(<<"/users/7">>, <<"hi">>),
     Get(<<"/raw">>), Get(<<"/trunc">>), Get(<<"/chunks">>),
     Get(<<"/cart">>), Get(<<"/cart">>), Get(<<"/cart">>),
     Post(<<"/m">>, <<"{\"a\": 1, \"b\": [2]}">>), Post(<<"/m">>, <<"{\"a\": 2}">>),
     Get(<<"/d">>), Get(<<"/d">>), Get(<<"/d">>), Get(<<"/once">>), Get(<<"/once">>)].

%% The bytes of one exchange on a fresh connection, up to the server's close.
exchange(S, Req) ->
    {ok, Sock} = gen_tcp:connect({127, 0, 0, 1}, cbench:port(S), [binary, {active, false}]),
    ok = gen_tcp:send(Sock, Req),
    Got = recv_all(Sock, <<>>),
    gen_tcp:close(Sock),
    mask_date(Got).

recv_all(Sock, Acc) ->
    case gen_tcp:recv(Sock, 0, 10000) of
        {ok, More} -> recv_all(Sock, <<Acc/binary, More/binary>>);
        {error, _} -> Acc
    end.

stub_file_features(Config) ->
    File = features_file(proplists:get_value(dir, Config)),
    Run = fun(E) ->
                  {ok, S} = cbench:start_server(E, #{port => 0, threads => 1}),
                  try
                      {ok, Ids} = cbench:load_stubs(S, File),
                      ?assertEqual({E, 10}, {E, length(Ids)}),
                      Answers = [exchange(S, R) || R <- features_requests()],
                      [Drawn] = [Id || #{id := Id, name := <<"drawn">>} <- cbench:stubs(S)],
                      {ok, _} = cbench:await(S, #{stub => Drawn}, 3, 10000),
                      Delays = [D || #{delay_ms := D} <- cbench:requests(S, #{stub => Drawn})],
                      {Answers, Delays}
                  after
                      ok = cbench:stop_server(S)
                  end
          end,
    {Answers, Delays} = Run(nif),
    %% What the C engine answers, as the features say (the rest is compared with it).
    [Busy, Paid, Busy, Paid, Busy, NotFound | _] = Answers,
    ?assertMatch(<<"HTTP/1.1 503 Service Unavailable\r\n", _/binary>>, Busy),
    ?assertMatch({match, _}, re:run(Busy, "retry-after: 0\r\n.*\r\n\r\nbusy$", [dotall])),
    ?assertMatch({match, _}, re:run(Paid, "^HTTP/1.1 201 .*\r\n\r\npaid$", [dotall])),
    ?assertMatch(<<"HTTP/1.1 404 ", _/binary>>, NotFound),
    ?assertMatch({match, _}, re:run(lists:nth(7, Answers), "x-id: 42\r\nx-q: a b\r\n.*\r\n\r\nGET 42 1 K \\[\\]$",
                                    [dotall])),
    ?assertMatch({match, _}, re:run(lists:nth(8, Answers), "x-id: 7\r\nx-q: \r\n.*\r\n\r\nPOST 7 2  \\[hi\\]$",
                                    [dotall])),
    ?assertEqual(<<"HTTP/1.1 200\r\ncontent-length: 2\r\n\r\nok">>, lists:nth(9, Answers)),
    ?assertMatch({match, _}, re:run(lists:nth(10, Answers), "x-t: 1\r\ncontent-length: 10\r\n.*\r\n\r\n.{4}$",
                                    [dotall])),
    ?assertMatch({match, _}, re:run(lists:nth(11, Answers), "transfer-encoding: chunked\r\n.*\r\n\r\n"
                                    "2\r\nab\r\n2\r\ncd\r\n3\r\nefg\r\n0\r\n\r\n$", [dotall])),
    ?assertMatch([<<"HTTP/1.1 201 ", _/binary>>, <<"HTTP/1.1 409 ", _/binary>>, <<"HTTP/1.1 409 ", _/binary>>],
                 lists:sublist(Answers, 12, 3)),
    ?assertMatch({match, _}, re:run(lists:nth(15, Answers), "\r\n\r\n\\{\"matched\":true\\}$")),
    ?assertMatch(<<"HTTP/1.1 404 ", _/binary>>, lists:nth(16, Answers)),
    ?assertMatch([<<"HTTP/1.1 200 ", _/binary>>, <<"HTTP/1.1 404 ", _/binary>>], lists:nthtail(19, Answers)),
    ?assertEqual(3, length(Delays)),
    [begin
         {A, D} = Run(E),
         [?assertEqual({E, N, lists:nth(N, Answers)}, {E, N, lists:nth(N, A)}) || N <- lists:seq(1, length(A))],
         ?assertEqual({E, Delays}, {E, D})
     end || E <- [port, ehttpd]],
    ok.

%% Response headers given as an object go out sorted by name on every engine (docs/routes.md, "The
%% stub file"): by the name as sent, lowercased, bytewise (a prefix first), two names equal but for
%% case in the byte order of their names as written. 40 members, more than the 32 up to which an
%% Erlang map keeps its keys sorted, in an order that is not theirs; a sequence's response alike.
%% Before, the C engines sent file order and ehttpd the order of the names as written. A map of
%% headers is no form of stub/3: every engine refuses it alike.
stub_file_header_order(Config) ->
    File = filename:join(proplists:get_value(dir, Config), "header_order.json"),
    Special = [<<"x-a-b">>, <<"X-C">>, <<"x-a">>, <<"x-b">>, <<"X-A">>],
    Names = [iolist_to_binary(io_lib:format("h-~2..0b", [N * 7 rem 37])) || N <- lists:seq(1, 35)] ++ Special,
    40 = length(lists:usort(Names)),
    Hs = [{Name, <<"v", (integer_to_binary(I))/binary>>} || {I, Name} <- lists:enumerate(Names)],
    Object = fun(L) -> ["{", lists:join(", ", [["\"", K, "\": \"", V, "\""] || {K, V} <- L]), "}"] end,
    ok = file:write_file(File, iolist_to_binary(
        ["[{\"match\": {\"path\": \"/o\"}, \"response\": {\"headers\": ", Object(Hs), ", \"body\": \"o\"}},\n",
         " {\"match\": {\"path\": \"/s\"}, \"response\": {\"responses\": [{\"headers\": ",
         Object([{<<"b">>, <<"1">>}, {<<"A">>, <<"2">>}, {<<"a-">>, <<"3">>}]), ", \"body\": \"s\"}]}}]\n"])),
    Head = fun(L) ->
                   Sorted = [{K, V} || {_, K, V} <- lists:sort([{cbench_http:lower(K), K, V} || {K, V} <- L])],
                   iolist_to_binary([[cbench_http:lower(K), ": ", V, "\r\n"] || {K, V} <- Sorted])
           end,
    Get = fun(Path) -> ["GET ", Path, " HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"] end,
    Run = fun(E) ->
                  {ok, S} = cbench:start_server(E, #{port => 0, threads => 1}),
                  try
                      {ok, [_, _]} = cbench:load_stubs(S, File),
                      Bad = cbench:stub(S, #{path => <<"/m">>},
                                        #{headers => #{<<"b">> => <<"1">>, <<"a">> => <<"2">>}}),
                      {[exchange(S, Get(P)) || P <- [<<"/o">>, <<"/s">>]], Bad}
                  after
                      ok = cbench:stop_server(S)
                  end
          end,
    {[O, Seq], Bad} = Run(nif),
    ?assertMatch({error, {bad_stub, {{response, headers}, _, wrong_type}}}, Bad),
    %% The rule written out for the names that show it, so that Head is not checked by itself alone.
    H = Head(Hs),
    Tail = <<"x-a: v40\r\nx-a: v38\r\nx-a-b: v36\r\nx-b: v39\r\nx-c: v37\r\n">>,
    ?assertEqual(Tail, binary:part(H, byte_size(H), -byte_size(Tail))),
    Ok = <<"HTTP/1.1 200 OK\r\ndate: Xxx, 00 Xxx 0000 00:00:00 GMT\r\n">>,
    OHead = <<Ok/binary, H/binary, "content-length: 1\r\n">>,
    ?assertEqual(OHead, binary:part(O, 0, byte_size(OHead))),
    SeqHead = <<Ok/binary, "a: 2\r\na-: 3\r\nb: 1\r\ncontent-length: 1\r\n">>,
    ?assertEqual(SeqHead, binary:part(Seq, 0, byte_size(SeqHead))),
    [?assertEqual({E, [O, Seq], Bad}, begin {A, B} = Run(E), {E, A, B} end) || E <- [port, ehttpd]],
    ok.

%% A wrong field of those is refused by every engine's loader at the same place for the same
%% reason (the C engines' loader adds the line and a description), and nothing is added.
stub_file_feature_reasons(Config) ->
    File = filename:join(proplists:get_value(dir, Config), "feature_reasons.json"),
    P = <<"\"match\": {\"path\": \"/a\"}">>,
    R = fun(Response) -> iolist_to_binary(["[{", P, ", \"response\": ", Response, "}]"]) end,
    Cases = [%% sequences
             {R(<<"{\"responses\": []}">>), <<"stubs[0].response.responses">>, <<"empty">>},
             {R(<<"{\"responses\": {}}">>), <<"stubs[0].response.responses">>, <<"wrong_type">>},
             {R(<<"{\"responses\": [{}, 7]}">>), <<"stubs[0].response.responses[1]">>, <<"wrong_type">>},
             {R(<<"{\"responses\": [{\"times\": 2}]}">>), <<"stubs[0].response.responses[0].times">>,
              <<"unknown_key">>},
             {R(<<"{\"responses\": [{}, {\"status\": 99}]}">>), <<"stubs[0].response.responses[1].status">>,
              <<"out_of_range">>},
             {R(<<"{\"responses\": [{}], \"status\": 200}">>), <<"stubs[0].response.status">>, <<"unknown_key">>},
             {R(<<"{\"responses\": [{}], \"after\": \"never\"}">>), <<"stubs[0].response.after">>,
              <<"out_of_range">>},
             {R(<<"{\"responses\": [{}], \"after\": 1}">>), <<"stubs[0].response.after">>, <<"wrong_type">>},
             {R(<<"{\"responses\": [{}], \"times\": \"2\"}">>), <<"stubs[0].response.times">>, <<"wrong_type">>},
             {R(<<"{\"responses\": [{\"proxy\": {\"to\": \"http://127.0.0.1:1\"}}]}">>),
              <<"stubs[0].response.responses[0].proxy">>, <<"unknown_key">>},
             {R(<<"{\"responses\": [{\"status\": 204, \"body\": \"x\"}]}">>), <<"stubs[0].response.status">>,
              <<"body_not_allowed">>},
             {R(<<"{\"responses\": [{\"headers\": [[\"x\", \"a\\r\\nb\"]]}]}">>), <<"stubs[0].response.headers">>,
              <<"control_char">>},
             %% faults
             {R(<<"{\"fault\": 7}">>), <<"stubs[0].response.fault">>, <<"wrong_type">>},
             {R(<<"{\"fault\": \"\"}">>), <<"stubs[0].response.fault">>, <<"bad_fault">>},
             {R(<<"{\"fault\": \"explode\"}">>), <<"stubs[0].response.fault">>, <<"bad_fault">>},
             {R(<<"{\"fault\": \"dribble?pieces=10\", \"body\": \"abc\"}">>), <<"stubs[0].response.fault">>,
              <<"fault_exceeds_body">>},
             {R(<<"{\"responses\": [{\"fault\": \"reset?at=nowhere\"}]}">>), <<"stubs[0].response.fault">>,
              <<"bad_fault">>},
             {R(<<"{\"proxy\": {\"to\": \"http://127.0.0.1:1\"}, \"fault\": \"drip\"}">>),
              <<"stubs[0].response.fault">>, <<"conflict">>},
             %% templates
             {R(<<"{\"template\": \"yes\"}">>), <<"stubs[0].response.template">>, <<"wrong_type">>},
             {R(<<"{\"template\": true, \"body\": \"{{nope}}\"}">>), <<"stubs[0].response.body">>,
              <<"bad_template">>},
             {R(<<"{\"template\": true, \"headers\": [[\"a\", \"1\"], [\"X-B\", \"{{path.id}}\"]]}">>),
              <<"stubs[0].response.headers[1]">>, <<"bad_template">>},
             {R(<<"{\"template\": true, \"headers\": {\"X-B\": \"{{x\"}}">>),
              <<"stubs[0].response.headers.X-B">>, <<"bad_template">>},
             {R(<<"{\"template\": true, \"chunks\": 2, \"body\": \"ab\"}">>), <<"stubs[0].response.template">>,
              <<"conflict">>},
             {R(<<"{\"template\": true, \"body\": {\"bytes\": 2}}">>), <<"stubs[0].response.template">>,
              <<"conflict">>},
             {R(<<"{\"proxy\": {\"to\": \"http://127.0.0.1:1\"}, \"template\": true}">>),
              <<"stubs[0].response.template">>, <<"conflict">>},
             %% chunks, delays
             {R(<<"{\"chunks\": 1000001}">>), <<"stubs[0].response.chunks">>, <<"out_of_range">>},
             {R(<<"{\"chunks\": 3, \"body\": \"ab\"}">>), <<"stubs[0].response.chunks">>, <<"chunks_exceed_body">>},
             {R(<<"{\"interval_ms\": -1}">>), <<"stubs[0].response.interval_ms">>, <<"out_of_range">>},
             {R(<<"{\"proxy\": {\"to\": \"http://127.0.0.1:1\"}, \"interval_ms\": 5}">>),
              <<"stubs[0].response.interval_ms">>, <<"conflict">>},
             {R(<<"{\"delay\": 5, \"delay_ms\": 5}">>), <<"stubs[0].response.delay_ms">>, <<"conflict">>},
             {R(<<"{\"delay\": {\"uniform\": [9, 1]}}">>), <<"stubs[0].response.delay">>, <<"min_above_max">>},
             {R(<<"{\"delay\": {\"lognormal\": [5, 11]}}">>), <<"stubs[0].response.delay">>, <<"out_of_range">>},
             {R(<<"{\"delay\": {\"normal\": [5, 1]}}">>), <<"stubs[0].response.delay">>, <<"wrong_type">>},
             {R(<<"{\"delay_seed\": -1}">>), <<"stubs[0].response.delay_seed">>, <<"out_of_range">>},
             {R(<<"{\"proxy\": {\"to\": \"http://127.0.0.1:1\"}, \"delay\": {\"uniform\": [1, 2]}}">>),
              <<"stubs[0].response.delay">>, <<"conflict">>},
             %% scenarios, body matchers, expectations, names
             {<<"[{\"match\": {\"path\": \"/a\", \"scenario\": 7}}]">>, <<"stubs[0].match.scenario">>,
              <<"wrong_type">>},
             {<<"[{\"match\": {\"path\": \"/a\", \"scenario\": \"a b\"}}]">>, <<"stubs[0].match.scenario">>,
              <<"bad_char">>},
             {<<"[{\"match\": {\"path\": \"/a\", \"when\": \"s\"}}]">>, <<"stubs[0].match.when">>,
              <<"needs_scenario">>},
             {<<"[{\"match\": {\"path\": \"/a\", \"body\": {\"like\": \"x\"}}}]">>, <<"stubs[0].match.body">>,
              <<"unknown_key">>},
             {<<"[{\"match\": {\"path\": \"/a\", \"body\": {\"equal\": 7}}}]">>, <<"stubs[0].match.body.equal">>,
              <<"wrong_type">>},
             {<<"[{\"match\": {\"path\": \"/a\", \"body\": {\"regex\": \"(a\"}}}]">>, <<"stubs[0].match.body">>,
              <<"bad_regex">>},
             {<<"[{\"match\": {\"path\": \"/a\"}, \"expect\": 7}]">>, <<"stubs[0].expect">>, <<"wrong_type">>},
             {<<"[{\"match\": {\"path\": \"/a\"}, \"expect\": {\"exactly\": 1}}]">>, <<"stubs[0].expect.exactly">>,
              <<"unknown_key">>},
             {<<"[{\"match\": {\"path\": \"/a\"}, \"expect\": {\"times\": -1}}]">>, <<"stubs[0].expect.times">>,
              <<"out_of_range">>},
             {<<"[{\"name\": \"a b\", \"match\": {\"path\": \"/a\"}}]">>, <<"stubs[0].name">>, <<"bad_char">>},
             {<<"[{\"match\": {\"path\": \"/a\", \"headers\": {\"X-A\": \"a\\r\"}}}]">>,
              <<"stubs[0].match.headers.X-A">>, <<"control_char">>},
             {<<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"headers\": [[\"a\", \"1\"], [\"date\", \"x\"]]}}]">>,
              <<"stubs[0].response.headers[1]">>, <<"forbidden_header">>},
             %% a later stub's error after a good one
             {<<"[{\"match\": {\"path\": \"/a\"}, \"response\": {\"responses\": [{}]}},\n"
                " {\"match\": {\"path\": \"/b\"}, \"response\": {\"proxy\": {\"to\": \"http://127.0.0.1:1\", "
                "\"record_status\": [200, 99]}}}]">>,
              <<"stubs[1].response.proxy.record_status[1]">>, <<"out_of_range">>},
             %% a body file that cannot be opened
             {R(<<"{\"body\": {\"file\": \"/nonexistent/x\"}}">>), <<"stubs[0]">>, <<"response.body.file">>},
             {R(<<"{\"responses\": [{\"body\": {\"file\": \"/nonexistent/x\"}}]}">>), <<"stubs[0]">>,
              <<"no such file or directory (ENOENT)">>}],
    [begin
         {ok, S} = cbench:start_server(E, #{port => 0, threads => 1}),
         try
             [begin
                  ok = file:write_file(File, Text),
                  {error, {bad_stub_file, Msg}} = cbench:load_stubs(S, File),
                  %% FILE[:LINE]: PLACE: REASON[: description]
                  [_, Rest] = binary:split(Msg, <<": ">>),
                  [Pl, Re | _] = binary:split(Rest, <<": ">>, [global]),
                  ?assertEqual({E, Text, Place, Reason}, {E, Text, Pl, Re})
              end || {Text, Place, Reason} <- Cases],
             ?assertEqual({E, []}, {E, cbench:stubs(S)})
         after
             ok = cbench:stop_server(S)
         end
     end || E <- [nif, port, ehttpd]],
    ok.

%% The HTTP/2 fault kinds: the C engines take them (answered 501 over HTTP/1.1); ehttpd, which has
%% no HTTP/2, refuses them as stub/3 does, {unsupported, Kind}, naming the stub's fault, and adds
%% none of the file.
stub_file_h2_fault(Config) ->
    File = filename:join(proplists:get_value(dir, Config), "h2_fault.json"),
    [begin
         ok = file:write_file(File, <<"[{\"match\": {\"path\": \"/ok\"}},\n {\"match\": {\"path\": \"/a\"}, ",
                                      Response/binary, "}]">>),
         [begin
              {ok, S} = cbench:start_server(E, #{port => 0, threads => 1}),
              try
                  case E of
                      ehttpd ->
                          ?assertEqual({error, {unsupported, Kind}},
                                       cbench:stub(S, <<"/a">>, #{fault => atom_to_binary(Kind)})),
                          Want = iolist_to_binary([File, ": stubs[1].response.fault: {unsupported,",
                                                   atom_to_list(Kind), "}"]),
                          ?assertEqual({error, {bad_stub_file, Want}}, cbench:load_stubs(S, File)),
                          ?assertEqual([], cbench:stubs(S));
                      _ ->
                          ?assertMatch({E, {ok, [_, _]}}, {E, cbench:load_stubs(S, File)}),
                          ?assertMatch({E, <<"HTTP/1.1 501 ", _/binary>>},
                                       {E, exchange(S, <<"GET /a HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n">>)})
                  end
              after
                  ok = cbench:stop_server(S)
              end
          end || E <- [nif, port, ehttpd]]
     end || {Kind, Response} <- [{rst_stream, <<"\"response\": {\"fault\": \"rst_stream\"}">>},
                                 {goaway, <<"\"response\": {\"responses\": [{\"fault\": \"goaway\"}, "
                                            "{\"body\": \"x\"}]}">>}]],
    ok.

%% Every field from_json/2 reads, proxies and sequences included: to_json/1 writes what reads back to
%% the same terms, and those terms are what stub/3 takes (ehttpd adds them all).
stub_json_round_trip_all(Config) ->
    Dir = proplists:get_value(dir, Config),
    ok = file:write_file(filename:join(Dir, "b.bin"), <<"file body">>),
    Text = <<"{\"stubs\": [\n"
             "{\"name\": \"all\", \"match\": {\"method\": [\"GET\", \"PUT\"], \"path\": \"/all/{id}\", "
             "\"headers\": {\"x-a\": \"1\", \"x-p\": true}, \"query\": {\"q\": \"v\"}, \"priority\": -3, "
             "\"scenario\": \"s\", \"when\": \"started\", \"then\": \"next\", \"body\": {\"regex\": \"^a+$\"}},\n"
             " \"response\": {\"status\": 202, \"headers\": [[\"x-r\", \"{{path.id}}\"], [\"x-r\", \"2\"]], "
             "\"body\": \"{{body}}\", \"template\": true, \"times\": 9, \"delay\": {\"lognormal\": [20, 0.5]}, "
             "\"delay_seed\": 11}, \"expect\": {\"times\": 2}},\n"
             "{\"match\": {\"path\": \"/seq\", \"method\": \"any\", \"body\": {\"json\": {\"k\": [1, null, 2.5]}}},\n"
             " \"response\": {\"responses\": [{\"status\": 500, \"fault\": \"reset?at=body&bytes=2\", \"body\": "
             "{\"base64\": \"AAH//w==\"}}, {\"body\": {\"bytes\": 100}, \"chunks\": 4, \"interval_ms\": 2, "
             "\"delay_ms\": 3}, {\"body\": {\"file\": \"b.bin\"}, \"delay\": {\"uniform\": [1, 2]}}, "
             "{\"body\": {\"json\": {\"z\": 1, \"a\": [true]}}, \"delay\": 4}], \"after\": \"not_found\", "
             "\"times\": 7}},\n"
             "{\"name\": \"px\", \"match\": {\"path\": \"/p/*\", \"body\": {\"json_subset\": {\"a\": 1}}}, "
             "\"expect\": {\"at_least\": 0},\n"
             " \"response\": {\"proxy\": {\"to\": \"http://127.0.0.1:1/up\", \"protocol\": \"h2c\", "
             "\"timeout_ms\": 500, "
             "\"max_body_bytes\": 4096, \"record\": true, \"record_headers\": [\"accept\"], "
             "\"record_body_file_bytes\": 10, \"record_status\": [200, 404]}, \"delay_ms\": 1, \"times\": 3, "
             "\"fault\": \"delay?ms=1\"}},\n"
             "{\"match\": {\"path\": \"/q\"}, \"response\": {\"proxy\": {\"to\": \"https://127.0.0.1:1\", "
             "\"insecure\": true, \"server_name\": \"example.com\"}, \"delay\": 2}},\n"
             "{\"match\": {\"path\": \"/r\"}, \"response\": {\"proxy\": {\"to\": \"http://127.0.0.1:1\", "
             "\"pipeline\": 4}}},\n"
             "{\"match\": {\"path\": \"/c\"}, \"response\": {\"body\": \"abc\", \"chunks\": 3, \"fault\": "
             "\"dribble?pieces=2\", \"delay_seed\": 4}}\n"
             "]}\n">>,
    {ok, Json} = cbench_json:decode(Text, strict),
    {ok, Stubs} = cbench_stub_json:from_json(Json, Dir),
    ?assertMatch([#{expect := #{times := 2},
                    match := #{scenario := <<"s">>, 'when' := <<"started">>, then := <<"next">>,
                               body := #{regex := <<"^a+$">>}},
                    response := #{template := true, delay := {lognormal, 20, 0.5}, delay_seed := 11}},
                  #{response := #{responses := [#{fault := <<"reset?at=body&bytes=2">>},
                                                #{chunks := {4, 2}, body := {bytes, 100}}, _, _],
                                  'after' := not_found, times := 7}},
                  #{expect := #{at_least := 0}, response := #{proxy := #{protocol := h2c, record := true}}},
                  #{response := #{proxy := #{insecure := true}, delay := 2}},
                  #{response := #{proxy := #{pipeline := 4}}},
                  #{response := #{chunks := {3, 0}, fault := <<"dribble?pieces=2">>}}], Stubs),
    Written = cbench_stub_json:to_json(Stubs),
    {ok, Json2} = cbench_json:decode(Written, strict),
    ?assertEqual({ok, Stubs}, cbench_stub_json:from_json(Json2, Dir)),
    %% A second round writes the same text.
    ?assertEqual(Written, cbench_stub_json:to_json(element(2, cbench_stub_json:from_json(Json2, "/")))),
    %% The terms are stub/3's, as they are.
    {ok, S} = cbench:start_server(ehttpd, #{port => 0}),
    try
        [?assertMatch({M, {ok, _}}, {M, cbench:stub(S, M, R)}) || #{match := M, response := R} <- Stubs]
    after
        ok = cbench:stop_server(S)
    end,
    %% Stub/3's own terms too: a fault as a term, atoms for a scenario and a method.
    Terms = [#{match => #{path => "/t", method => [get], scenario => cart, 'when' => started},
               response => #{fault => {reset, #{at => head}}, delay => {uniform, 1, 5}}}],
    {ok, Back} = cbench_stub_json:from_json(element(2, cbench_json:decode(cbench_stub_json:to_json(Terms))), "/"),
    ?assertMatch([#{match := #{path := <<"/t">>, method := [<<"GET">>], scenario := <<"cart">>,
                               'when' := <<"started">>},
                    response := #{fault := <<"reset?at=head">>, delay := {uniform, 1, 5}, status := 200}}], Back).
