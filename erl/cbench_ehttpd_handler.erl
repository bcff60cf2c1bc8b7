%%% @doc Erlang handlers on the ehttpd engine (docs/erlang.md, "Erlang handlers"), both sides of one
%%% request: the connection process (cbench_ehttpd_conn) sends the request to the handler and waits
%%% here for the answer, and the handler's answers (cbench_handler, checked there) reach that
%%% connection as `{cbench_reply, Ref, Op}' messages.
%%%
%%% The request's handle is `{cbench_ehttpd, Conn, Ref, State}': State is its state word
%%% (cbench_handler_state), so that one answer wins against another and against the connection
%%% taking the request back for a 503 or 504. The word's array holds three more slots: the
%%% request's number (Ref, a unique integer: a handle with another is refused), the bytes of a
%%% streamed answer sent by the handler and not yet written by the connection, and the server's
%%% max_queued_reply_bytes. The pieces wait in the connection's mailbox while gen_tcp:send waits for
%%% a client that does not read; a send/2 that finds that many waiting cuts the answer, as the C
%%% engines do (docs/erlang.md, "Failure statuses").
-module(cbench_ehttpd_handler).

-export([answer/2]).
-export([await/3, send/3, body/3, wait/1, next/1, written/2, done/1]).

-export_type([ctx/0]).

%% What the connection keeps of a request it sent: the number of its answers (also in the slot
%% after its state word: cbench_handler_state:owned/2), its state word,
%% the monitor of the handler's process and the handler's timeout_ms.
-opaque ctx() :: {pos_integer(), cbench_handler_state:state(), reference(), pos_integer()}.
-type handler_opts() :: #{timeout_ms := pos_integer(), batch := boolean(),
                          max_queued_reply_bytes := pos_integer(), _ => _}.
-define(TAG, 2). %% the slot after the state word: the request's number (Ref)
-define(QUEUED, 3). %% bytes sent by the handler, not yet written
-define(MAX_QUEUED, 4).

-type answer() :: {reply, cbench_handler:status(), [{binary(), binary()}], binary(), ctx()} |
                  {stream, cbench_handler:status(), [{binary(), binary()}], ctx()} |
                  {fail, 503 | 504}.

%%% The handler's side

%% @doc A checked answer (cbench_handler) to an ehttpd request: claimed on its state word, then
%% sent to the connection that waits for it.
%% A connection process that is gone (its client closed, or the server stopped and killed it) has
%% no request: {error, gone}, as the C engines answer for a request of a stopped server.
-spec answer({cbench_ehttpd, pid(), pos_integer(), cbench_handler_state:state()},
             cbench_handler_state:op()) -> ok | {error, gone | not_streaming}.
%% A real state word with another request's number (a forged handle) is {error, gone} too, and the
%% request stays open.
answer(H = {cbench_ehttpd, Pid, Ref, A}, Op) ->
    case cbench_handler_state:owned(A, Ref) of
        false -> {error, gone};
        true ->
            case is_process_alive(Pid) of
                true -> to_conn(H, Op);
                false -> cbench_handler_state:done(A), {error, gone}
            end
    end.

to_conn({cbench_ehttpd, Pid, Ref, A = {Arr, I}}, Op = {send, Data}) ->
    Size = byte_size(Data),
    case atomics:add_get(Arr, I + ?QUEUED - 1, Size) - Size >= atomics:get(Arr, I + ?MAX_QUEUED - 1) of
        false ->
            case cbench_handler_state:answer(A, Op, fun(Op1) -> Pid ! {cbench_reply, Ref, Op1} end) of
                ok -> ok;
                Error -> atomics:sub(Arr, I + ?QUEUED - 1, Size), Error
            end;
        true ->
            atomics:sub(Arr, I + ?QUEUED - 1, Size),
            case cbench_handler_state:cut(A) of
                true -> Pid ! {cbench_reply, Ref, overflow}, {error, gone};
                false -> cbench_handler_state:answer(A, Op, fun(_) -> ok end)
            end
    end;
to_conn({cbench_ehttpd, Pid, Ref, A}, Op) ->
    cbench_handler_state:answer(A, Op, fun(Op1) -> Pid ! {cbench_reply, Ref, Op1} end).

%%% The connection's side

%% @doc Sends the request (Info, without its handle) to Target and waits for the head of the
%% answer. Returns the answer, or {fail, 503 | 504}.
-spec await(pid() | atom(), handler_opts(), map()) -> answer().
await(Target, HOpts, Info) ->
    case send(Target, HOpts, Info) of
        {ok, Ctx, _To} -> wait(Ctx);
        Fail -> Fail
    end.

%% @doc Sends the request to Target (the first half of await/3, for a body that follows in pieces
%% with body/3): {ok, Ctx, To}, or {fail, 503} when there is no process.
-spec send(pid() | atom(), handler_opts(), map()) ->
          {ok, ctx(), {pid(), cbench_handler:handle()}} | {fail, 503}.
send(Target, #{timeout_ms := Timeout, batch := Batch, max_queued_reply_bytes := Max}, Info) ->
    case target_pid(Target) of
        undefined ->
            {fail, 503};
        Pid ->
            Mon = erlang:monitor(process, Pid),
            Ref = erlang:unique_integer([positive]),
            Arr = atomics:new(?MAX_QUEUED, []),
            atomics:put(Arr, ?MAX_QUEUED, Max),
            atomics:put(Arr, ?TAG, Ref),
            A = {Arr, 1},
            Handle = {cbench_ehttpd, self(), Ref, A},
            Req = Info#{handle => Handle},
            Pid ! case Batch of
                      true -> {cbench_requests, [Req]};
                      false -> {cbench_request, Req}
                  end,
            {ok, {Ref, A, Mon, Timeout}, {Pid, Handle}}
    end.

%% @doc One piece of a streamed request body (Data), or its end (eof), to the handler; nothing once
%% the request is answered whole or over (as on the C engines).
-spec body(ctx(), {pid(), cbench_handler:handle()}, binary() | eof) -> ok.
body({_, A, _, _}, {Pid, Handle}, Data) ->
    case cbench_handler_state:is_open(A) of
        true ->
            Pid ! case Data of
                      eof -> {cbench_body_end, Handle};
                      _ -> {cbench_body, Handle, Data}
                  end,
            ok;
        false -> ok
    end.

%% @doc Waits for the head of the answer (the second half of await/3).
-spec wait(ctx()) -> answer().
wait(Ctx) ->
    case receive_op(Ctx) of
        {reply, S, H, B} -> {reply, S, H, B, Ctx};
        {stream, S, H} -> {stream, S, H, Ctx};
        {cut, Status} -> done(Ctx), {fail, Status};
        %% A cut that overtook its stream's head (two processes answering): nothing began.
        overflow -> done(Ctx), {fail, 503}
    end.

%% @doc The next piece of a streamed answer: {send, Data}, finish, {cut, 503 | 504} (the
%% handler died, or sent nothing for timeout_ms), or overflow (a send/2 found
%% max_queued_reply_bytes waiting: the request is over).
-spec next(ctx()) -> {send, binary()} | finish | {cut, 503 | 504} | overflow.
next(Ctx) ->
    receive_op(Ctx).

%% @doc Size bytes of a piece left the connection (written, or dropped for a HEAD request).
-spec written(ctx(), non_neg_integer()) -> ok.
written(_Ctx, 0) -> ok;
written({_, {Arr, I}, _, _}, Size) -> atomics:sub(Arr, I + ?QUEUED - 1, Size).

%% @doc The request is over: later answers get {error, gone}.
-spec done(ctx()) -> ok.
done({Ref, A, Mon, _}) ->
    cbench_handler_state:done(A),
    erlang:demonitor(Mon, [flush]),
    flush(Ref).

flush(Ref) ->
    receive {cbench_reply, Ref, _} -> flush(Ref)
    after 0 -> ok
    end.

target_pid(Pid) when is_pid(Pid) -> Pid;
target_pid(Name) when is_atom(Name) -> whereis(Name).

%% The handler's next message for this request, or the cut that takes its place.
receive_op(Ctx = {Ref, _, Mon, Timeout}) ->
    receive
        {cbench_reply, Ref, Op} -> Op;
        {'DOWN', Mon, process, _, _} -> take_back(Ctx, 503)
    after Timeout ->
            take_back(Ctx, 504)
    end.

%% The connection takes the request back for a 503 or 504; when an answer won the race its
%% message is on the way (or the handler died sending it: then the monitor says so).
take_back(Ctx = {Ref, A, Mon, _}, Status) ->
    case cbench_handler_state:take_back(A) of
        true -> {cut, Status};
        false ->
            receive
                {cbench_reply, Ref, Op} -> Op;
                {'DOWN', Mon, process, _, _} -> {cut, 503}
            after 0 -> wait_more(Ctx)
            end
    end.

wait_more({Ref, _A, Mon, _}) ->
    receive
        {cbench_reply, Ref, Op} -> Op;
        {'DOWN', Mon, process, _, _} -> {cut, 503}
    end.
