%%% @doc The state word of a request waiting for an Erlang handler on the ehttpd and port engines: a
%%% slot of an atomics array that the handler's process and the engine's side (the ehttpd connection,
%%% the port's owner) both change. The requests of one port frame share one array (new/1: one
%%% allocation per frame, not per request); an ehttpd request has an array of its own. One
%%% compare-and-swap makes an answer the only one, as the C engine's state word does for the nif
%%% engine (src/deferred.c): whoever moves the word first wins, and the other side then reads
%%% {error, gone} (a late answer) or finds the request answered.
-module(cbench_handler_state).

-export([new/1, owned/2, answer/3, is_open/1, take_back/1, cut/1, done/1]).

-export_type([state/0, op/0]).

-type state() :: {atomics:atomics_ref(), pos_integer()}.
%% A checked answer (cbench_handler): a whole one, the head of a streamed one, a piece, the end.
-type op() :: {reply, cbench_handler:status(), [{binary(), binary()}], binary()} |
              {stream, cbench_handler:status(), [{binary(), binary()}]} |
              {send, binary()} | finish.

%% The states; the C engine has the same ones.
-define(PARKED, 0).
-define(REPLIED, 1).
-define(STREAMING, 2).
-define(FINISHED, 3).
-define(DONE, 4).

%% @doc A new state word for each request number of Tags, one array for them all: the word of
%% {A, I} is slot I, and its request's number slot I + 1 (owned/2). An ehttpd array has the same
%% two slots first.
-spec new([non_neg_integer()]) -> [state()].
new([]) ->
    [];
new(Tags) ->
    A = atomics:new(2 * length(Tags), [{signed, false}]),
    [begin atomics:put(A, 2 * K, T), {A, 2 * K - 1} end
     || {K, T} <- lists:zip(lists:seq(1, length(Tags)), Tags)].

%% @doc Whether the state word belongs to the request numbered Tag: a handle that pairs a real
%% state word with another number (forged) is refused as gone, and the real request stays open.
-spec owned(state(), non_neg_integer()) -> boolean().
owned({A, I}, Tag) ->
    I rem 2 =:= 1 andalso atomics:get(A, I + 1) =:= Tag.

%% @doc Moves the word for one answer and, when that succeeds, calls Send with it (so that no answer
%% is sent that lost the race). {error, not_streaming} for a piece or an end before the head,
%% {error, gone} when the request is answered, over or taken back.
-spec answer(state(), op(), fun((op()) -> term())) -> ok | {error, gone | not_streaming}.
answer(A, Op = {reply, _, _, _}, Send) -> claim(A, ?PARKED, ?REPLIED, Op, Send);
answer(A, Op = {stream, _, _}, Send) -> claim(A, ?PARKED, ?STREAMING, Op, Send);
answer({A, I}, Op = {send, _}, Send) ->
    case atomics:get(A, I) of
        ?STREAMING -> Send(Op), ok;
        ?PARKED -> {error, not_streaming};
        _ -> {error, gone}
    end;
answer(A, finish, Send) -> claim(A, ?STREAMING, ?FINISHED, finish, Send).

claim({A, I}, From, To, Op, Send) ->
    case atomics:compare_exchange(A, I, From, To) of
        ok -> Send(Op), ok;
        %% A piece or an end before the head: the request still waits for its answer.
        ?PARKED when From =:= ?STREAMING -> {error, not_streaming};
        _ -> {error, gone}
    end.

%% @doc Whether the request still takes pieces of its body: waiting, or its answer streaming.
-spec is_open(state()) -> boolean().
is_open({A, I}) ->
    S = atomics:get(A, I),
    S =:= ?PARKED orelse S =:= ?STREAMING.

%% @doc The engine's side takes the request back (for its 503 or 504): true when it did, false
%% when an answer won the race.
-spec take_back(state()) -> boolean().
take_back({A, I}) ->
    Now = atomics:get(A, I),
    (Now =:= ?PARKED orelse Now =:= ?STREAMING) andalso
        atomics:compare_exchange(A, I, Now, ?DONE) =:= ok.

%% @doc A streamed answer is cut by its own side (ehttpd's max_queued_reply_bytes): true when the
%% answer was streaming and is now over, false when it had ended or was taken back meanwhile.
-spec cut(state()) -> boolean().
cut({A, I}) -> atomics:compare_exchange(A, I, ?STREAMING, ?DONE) =:= ok.

%% @doc The request is over: every later answer is {error, gone}.
-spec done(state()) -> ok.
done({A, I}) -> atomics:put(A, I, ?DONE).
