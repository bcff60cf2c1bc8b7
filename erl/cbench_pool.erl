%%% @doc A `{M, F}' handler target (docs/erlang.md, "Erlang handlers"): a pool of processes the
%%% server owns. The engine sends to the pool's leader, which hands each request on to one of
%%% its workers, chosen by a hash of the request's handle, so that the pieces of a streamed body
%%% (`{cbench_body, Handle, _}', `{cbench_body_end, Handle}') reach the worker that has the
%%% request. A worker calls M:F(Req) for each request; M:F answers with cbench:reply/4 (or a
%%% stream) and may receive its body pieces itself. An exception in M:F answers 500 when nothing
%%% was sent yet (a stream already begun is cut after timeout_ms), and the worker goes on.
%%% The leader monitors the server process: the pool ends with the server, or when the route is
%%% removed (the server stops it).
-module(cbench_pool).

-export([start/4, stop/1]).

%% @doc Starts the pool of N workers for M:F; returns its leader.
-spec start(module(), atom(), pos_integer(), pid()) -> pid().
start(M, F, N, Server) ->
    spawn(fun() ->
                  Mon = erlang:monitor(process, Server),
                  Workers = list_to_tuple([spawn_link(fun() -> worker(M, F) end)
                                           || _ <- lists:seq(1, N)]),
                  leader(Mon, Workers)
          end).

%% @doc Stops a pool (its workers are linked to the leader).
-spec stop(pid()) -> ok.
stop(Leader) ->
    exit(Leader, shutdown),
    ok.

leader(Mon, Workers) ->
    receive
        {cbench_request, #{handle := H}} = Msg -> pick(Workers, H) ! Msg;
        {cbench_requests, Reqs} -> [pick(Workers, H) ! {cbench_request, R} || R = #{handle := H} <- Reqs];
        {cbench_body, H, _} = Msg -> pick(Workers, H) ! Msg;
        {cbench_body_end, H} = Msg -> pick(Workers, H) ! Msg;
        {'DOWN', Mon, process, _, _} -> exit(shutdown);
        _ -> ok
    end,
    leader(Mon, Workers).

pick(Workers, Handle) ->
    element(1 + erlang:phash2(Handle, tuple_size(Workers)), Workers).

worker(M, F) ->
    receive
        {cbench_request, Req} ->
            try M:F(Req)
            catch _:_ -> _ = cbench:reply(Req, 500, [], <<>>)
            end;
        _ -> ok  % the pieces of a body M:F did not read
    end,
    worker(M, F).
