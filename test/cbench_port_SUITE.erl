%%% @doc The port engine: the shared route-table checks, EOF, malformed frames, a dying program.
-module(cbench_port_SUITE).

-include_lib("stdlib/include/assert.hrl").

-export([all/0, init_per_suite/1, end_per_suite/1]).
-export([eof_exits_zero/1, eof_status/1, malformed_frames/1, program_killed/1, owner_killed/1]).

-include("cbench_routes_cases.hrl").

all() -> cbench_routes:cases() ++ cbench_roadrunner_wire:cases() ++ cbench_stubs:cases() ++ cbench_stubs:h2_cases() ++ [eof_exits_zero, eof_status, malformed_frames, program_killed, owner_killed].

init_per_suite(Config) -> cbench_routes:start(port, Config).

end_per_suite(Config) -> cbench:stop_server(proplists:get_value(server, Config)).

%% The program exits 0 when its stdin closes (the node went away), with or without a server.
eof_exits_zero(_Config) ->
    {ok, Port} = cbench_port:open(),
    {os_pid, Pid} = erlang:port_info(Port, os_pid),
    true = port_close(Port),
    ok = wait_gone(Pid, 100),
    {ok, Port2} = cbench_port:open(),
    {ok, Opts} = cbench_opts:validate(port, #{port => 0, threads => 1}),
    {ok, TcpPort, 1, [_], 0, 0, false, <<"the server has no TLS">>} = cbench_port:request(Port2, {start, port_opts(Opts)}, 10000),
    %% Closing stdin is what the port sees when the node dies: the program stops the engine.
    {os_pid, Pid2} = erlang:port_info(Port2, os_pid),
    os:cmd("true"),
    true = port_close(Port2),
    ok = wait_gone(Pid2, 100),
    ?assertEqual({error, econnrefused}, gen_tcp:connect({127, 0, 0, 1}, TcpPort, [], 1000)).

%% An exit status is only visible while the port is open: EOF is simulated by a shell that closes
%% the program's stdin and reports its status.
eof_status(_Config) ->
    Exe = cbench_port:exe_path(),
    ?assertEqual("0\n", os:cmd("'" ++ Exe ++ "' </dev/null >/dev/null; echo $?")).

%% A frame that is not a request (not a map of atom keys) makes the program exit non-zero:
%% {error, {port_exited, S}}.
malformed_frames(_Config) ->
    %% A program that exits while a frame is being written closes the port with epipe.
    process_flag(trap_exit, true),
    [begin
         {ok, Port} = cbench_port:open(),
         ?assertMatch({error, {port_exited, S}} when S =/= 0,
                      cbench_port:request(Port, Term, 10000))
     end || Term <- [hello, {start, not_a_map}, {start, #{"port" => 1}}, [stats], <<"raw">>,
                     {stats, extra}]],
    %% A well-formed request with a bad option is answered, from the engine's option table, and
    %% the program goes on.
    {ok, P0} = cbench_port:open(),
    [?assertMatch({error, {bad_option, K, V, _}}, cbench_port:request(P0, {start, #{K => V}}, 10000))
     || {K, V} <- [{bogus, 1}, {port, -1}, {host, 42}, {ip, <<"127.0.0.1">>}, {close, true},
                   {cpus, [a]}, {enable_h2, 1}]],
    ?assertEqual({error, {bad_option, port, 65536, {integer, 0, 65535}}},
                 cbench_port:request(P0, {start, #{port => 65536}}, 10000)),
    ?assertEqual(ok, cbench_port:request(P0, stop, 10000)),
    true = port_close(P0),
    %% Bytes that are not the external term format at all, and a frame over the size limit.
    {ok, P1} = cbench_port:open(),
    true = port_command(P1, <<1, 2, 3>>),
    ?assertMatch({P1, {exit_status, S}} when S =/= 0, receive_exit(P1)),
    {ok, P2} = cbench_port:open(),
    %% Frames may be 65 MiB (a stub's body); the program exits 3 after the length of a larger one
    %% alone, so the port may also die writing the rest.
    true = port_command(P2, binary:copy(<<0>>, 66 bsl 20)),
    receive
        {P2, {exit_status, S2}} -> ?assertEqual(3, S2);
        {'EXIT', P2, epipe} -> ok
    after 10000 -> ct:fail(no_exit)
    end,
    ok.

%% A server of the port engine whose program dies ends; stop_server afterwards is fine.
program_killed(_Config) ->
    {ok, S} = cbench:start_server(port, #{port => 0, threads => 1}),
    [#{os_pid := OsPid}] = [I || I = #{server := Srv} <- cbench:servers(), Srv =:= S],
    Ref = monitor(process, S),
    os:cmd("kill -9 " ++ integer_to_list(OsPid)),
    receive {'DOWN', Ref, process, S, _} -> ok after 10000 -> ct:fail(server_alive) end,
    ok = cbench:stop_server(S),
    ?assertEqual({error, not_running}, cbench:stats(S)).

%% Killing the server process closes the port: the program reads EOF and exits.
owner_killed(_Config) ->
    {ok, S} = cbench:start_server(port, #{port => 0, threads => 1}),
    [#{os_pid := OsPid, port := P}] = [I || I = #{server := Srv} <- cbench:servers(), Srv =:= S],
    exit(S, kill),
    ok = wait_gone(OsPid, 200),
    ?assertEqual({error, econnrefused}, gen_tcp:connect({127, 0, 0, 1}, P, [], 1000)).

port_opts(Opts) ->
    cbench_opts:engine_map(Opts).

receive_exit(Port) ->
    receive {Port, {exit_status, _}} = M -> M after 10000 -> timeout end.

wait_gone(_Pid, 0) -> {error, still_running};
wait_gone(Pid, N) ->
    case filelib:is_dir("/proc/" ++ integer_to_list(Pid)) andalso
        not zombie(Pid) of
        false -> ok;
        true -> timer:sleep(50), wait_gone(Pid, N - 1)
    end.

zombie(Pid) ->
    case file:read_file("/proc/" ++ integer_to_list(Pid) ++ "/stat") of
        {ok, Stat} -> binary:match(Stat, <<") Z ">>) =/= nomatch;
        _ -> true
    end.
