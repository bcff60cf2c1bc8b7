%%% @doc Erlang handlers on the port engine (docs/erlang.md, "Erlang handlers"), both sides of one
%%% request. The owner's side runs in the server process that owns the port (cbench_port calls it):
%%% the program's frames of requests are handed to the handlers, and their answers are batched into
%%% frames back to the program. The handler's side runs in the handler's process (cbench_handler
%%% calls it with answers it has checked): an answer is claimed on the request's state word, then
%%% sent to the owner.
%%%
%%% The request's handle is `{cbench_port, Owner, Ref, State}': Ref is the program's number for the
%%% request and State its state word (cbench_handler_state), set to done when the program reports
%%% the request gone, so that {error, gone} comes back without a round trip.
%%%
%%% The owner keeps, in its process dictionary, each handler route's target
%%% ({?ROUTE, Id} => {Target, Batch, Body}) and each request in flight's state word and process
%%% (Ref => {State, Pid}), so that the program's {cbench_gone, Ref} reaches the request's state word
%%% and {cbench_body, ...} its process. A request's key is its Ref alone, an integer (every other key
%%% of the owner's dictionary is an atom or a tuple): it is put and erased once per request, and an
%%% integer hashes and compares for less than a tuple around it.
-module(cbench_port_handler).

-export([route_added/4, route_removed/1, routes_reset/0, frame/2, queue/2, flush/1]).
-export([answer/2, claim/2, post/1]).

-export_type([frame/0, claimed/0]).

-define(ROUTE, cbench_port_route).
%% A frame of answers is sent at the latest when it holds this many answers or body bytes (the
%% program takes frames of 65 MiB at most).
-define(REPLY_BURST, 4096).
-define(IS_TAG(Ref), (is_integer(Ref) andalso Ref >= 0 andalso Ref < 1 bsl 64)).
-define(REPLY_BYTES, (16 bsl 20)).
%% The answers waiting for the next frame: {Items (newest list first), Count, Bytes}.
-define(OUT, cbench_port_out).

%% The program's frames for handler routes (c_src/port_handler.c).
-type frame() :: {cbench_requests, pos_integer(), [tuple()]} |
                 {cbench_body, pos_integer(), binary(), boolean()} |
                 {cbench_gone, pos_integer()}.
%% An answer claimed for its owner, to be sent by post/1.
-type claimed() :: {claimed, pid(), cbench_c_terms:reply_item()}.
-type handle() :: {cbench_port, pid(), pos_integer(), cbench_handler_state:state()}.

%%% The owner's side

%% @doc A handler route was added: its requests go to Target (a pid or a registered name), batched
%% or not, with the body whole or streamed.
-spec route_added(pos_integer(), pid() | atom(), boolean(), whole | stream) -> ok.
route_added(Id, Target, Batch, Body) ->
    put({?ROUTE, Id}, {Target, Batch, Body}),
    ok.

%% @doc A route was removed (a stub's id finds nothing).
-spec route_removed(pos_integer()) -> ok.
route_removed(Id) ->
    erase({?ROUTE, Id}),
    ok.

%% @doc Every route was removed.
-spec routes_reset() -> ok.
routes_reset() ->
    [erase(K) || {K = {?ROUTE, _}, _} <- get()],
    ok.

%% @doc One of the program's frames for handler routes: requests to hand on, a piece of a streamed
%% request body, a request gone.
-spec frame(port(), frame()) -> ok.
frame(Port, {cbench_requests, Id, Reqs}) ->
    {Pid, Batch, Stream} = case get({?ROUTE, Id}) of
                               {Target, B, S} when is_pid(Target) -> {Target, B, S =:= stream};
                               {Target, B, S} -> {whereis(Target), B, S =:= stream};
                               undefined -> {undefined, false, false}
                           end,
    case is_pid(Pid) andalso is_process_alive(Pid) of
        false ->
            %% No one to send them to: 503 each (counted and journaled by the engine).
            _ = to_program(Port, [{Ref, unavailable} || {Ref, _, _, _, _, _, _, _} <- Reqs]),
            ok;
        true ->
            Owner = self(),
            Tags = [case R of {Ref, _, _, _, _, _, _, _} when ?IS_TAG(Ref) -> Ref; _ -> 0 end
                    || R <- Reqs],
            Maps = requests(Reqs, cbench_handler_state:new(Tags), Owner, Pid, Stream),
            case Batch of
                true -> Pid ! {cbench_requests, Maps};
                false -> [Pid ! {cbench_request, R} || R <- Maps]
            end,
            ok
    end;
frame(_Port, {cbench_body, Ref, Data, End}) ->
    case get(Ref) of
        undefined -> ok;  % answered or gone: the rest of the body is dropped
        {A, Pid} ->
            Handle = {cbench_port, self(), Ref, A},
            Data =:= <<>> orelse (Pid ! {cbench_body, Handle, Data}),
            End andalso (Pid ! {cbench_body_end, Handle}),
            ok
    end;
frame(_Port, {cbench_gone, Ref}) ->
    case erase(Ref) of
        undefined -> ok;
        {A, _} -> cbench_handler_state:done(A)
    end.

%% The handler's request maps of one frame, each request kept in flight (its state word, from the
%% frame's one array, and its handler's process). An element of another shape is passed over, as
%% the list comprehension this replaced did: the server process never crashes on a frame.
requests([{Ref, M, P, Q, Hs, Peer, Proto, Body} | T], [A | As], Owner, Pid, Stream) ->
    put(Ref, {A, Pid}),
    [#{method => M, path => P, query => Q, headers => Hs, peer => Peer, proto => Proto,
       body => case Stream of true -> stream; false -> Body end,
       handle => {cbench_port, Owner, Ref, A}} | requests(T, As, Owner, Pid, Stream)];
requests([_ | T], [_ | As], Owner, Pid, Stream) ->
    requests(T, As, Owner, Pid, Stream);
requests([], [], _, _, _) ->
    [].

%% @doc Answers from handlers (the `{cbench_port_reply, Items}' message, claimed and checked
%% already): the first of a burst sends this process a flush message, so every answer that reaches
%% the mailbox before that message goes to the program in the same frame; no mailbox scan.
-spec queue(port(), [cbench_c_terms:reply_item()]) -> ok.
queue(Port, Items) ->
    {Out, N0, B0} = case get(?OUT) of
                        undefined -> self() ! {cbench_port_flush, Port}, {[], 0, 0};
                        Acc -> Acc
                    end,
    {N, B} = count(Items, N0, B0),
    put(?OUT, {[Items | Out], N, B}),
    case N >= ?REPLY_BURST orelse B >= ?REPLY_BYTES of
        true -> flush(Port);
        false -> ok
    end.

%% @doc Sends the answers queued so far in one frame (at the flush message, at a burst's bound, and
%% before any request to the program, so that a {handler_fail, Id} does not overtake the answers
%% its handler gave before it died).
-spec flush(port()) -> ok.
flush(Port) ->
    case erase(?OUT) of
        undefined -> ok;  % flushed early: the flush message finds nothing
        {Out, _, _} ->
            All = lists:append(lists:reverse(Out)),
            forget(All),
            to_program(Port, All)
    end.

%% The answers and their bytes, added to N and B.
count([I | T], N, B) -> count(T, N + 1, B + item_bytes(I));
count([], N, B) -> {N, B}.

%% The requests whose answer is final are no longer in flight.
forget([{Ref, reply, _, _, _} | T]) -> erase(Ref), forget(T);
forget([{Ref, finish} | T]) -> erase(Ref), forget(T);
forget([{Ref, unavailable} | T]) -> erase(Ref), forget(T);
forget([_ | T]) -> forget(T);
forget([]) -> ok.

%% Headers count too: 4096 answers with big headers must not make a frame the program refuses.
item_bytes({_, reply, _, Hs, Body}) -> header_bytes(Hs) + byte_size(Body);
item_bytes({_, stream, _, Hs}) -> header_bytes(Hs);
item_bytes({_, send, Data}) -> byte_size(Data);
item_bytes(_) -> 0.

header_bytes(Hs) -> header_bytes(Hs, 0).

header_bytes([{N, V} | T], B) -> header_bytes(T, B + byte_size(N) + byte_size(V));
header_bytes([], B) -> B.

%% A port that is closed (the program exited) is found by the exit_status message.
to_program(Port, Items) ->
    catch port_command(Port, term_to_binary({reply, Items})),
    ok.

%%% The handler's side

%% @doc A checked answer (cbench_handler) to a port request: claimed on its state word, then sent
%% to the owner, which puts it in the next frame.
-spec answer(handle(), cbench_handler_state:op()) -> ok | {error, gone | not_streaming}.
answer({cbench_port, Owner, Ref, A}, Op) ->
    case cbench_handler_state:owned(A, Ref) of
        true ->
            cbench_handler_state:answer(
              A, Op, fun(Op1) -> Owner ! {cbench_port_reply, [cbench_c_terms:reply_item(Ref, Op1)]} end);
        false ->
            {error, gone} %% a real state word with another request's number: forged
    end.

%% @doc A checked whole answer claimed for cbench_handler:replies/1, which answers many requests
%% at once: post/1 then sends the claimed answers of each owner in one message.
-spec claim(handle(), {reply, cbench_handler:status(), [{binary(), binary()}], binary()}) ->
          claimed() | {error, gone}.
claim({cbench_port, Owner, Ref, A}, Op) ->
    case cbench_handler_state:owned(A, Ref) andalso cbench_handler_state:answer(A, Op, fun(_) -> ok end) of
        ok -> {claimed, Owner, cbench_c_terms:reply_item(Ref, Op)};
        _ -> {error, gone}
    end.

%% @doc Sends the answers claimed among Results to their owners, one message per owner, and gives
%% Results back with `ok' for each of them.
-spec post([claimed() | Result]) -> [ok | Result].
post(Results) ->
    Owners = lists:usort([O || {claimed, O, _} <- Results]),
    [O ! {cbench_port_reply, [I || {claimed, O1, I} <- Results, O1 =:= O]} || O <- Owners],
    [case R of {claimed, _, _} -> ok; _ -> R end || R <- Results].
