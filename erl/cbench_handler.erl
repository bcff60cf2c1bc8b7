%%% @doc Erlang handlers (docs/erlang.md, "Erlang handlers"): the answers a handler process gives
%%% with cbench:reply/4 and friends, whichever engine parsed the request. The answers are checked
%%% here, the same for every engine, then handed to the engine's side of the request.
%%%
%%% A request's `handle' says who parked it:
%%%   {cbench_nif, Server, Ref}            the nif engine: Ref names a slot of a worker (src/deferred.c);
%%%                                        answers go to cbench_nif:reply/2
%%%   {cbench_ehttpd, Conn, Ref, State}    the ehttpd engine: State is the request's state word
%%%                                        (cbench_handler_state); cbench_ehttpd_handler
%%%   {cbench_port, Owner, Ref, State}     the port engine: Owner is the server process that owns
%%%                                        the port (it forwards answers to the program, batched);
%%%                                        State as for ehttpd; cbench_port_handler
-module(cbench_handler).

-export([opts/1, reply/4, reply_stream/3, send/2, finish/1, replies/1]).

-export_type([req/0, handle/0, status/0, headers/0, reply_error/0]).

-type handle() :: {cbench_nif, reference(), pos_integer()}
                | {cbench_ehttpd, pid(), pos_integer(), cbench_handler_state:state()}
                | {cbench_port, pid(), pos_integer(), cbench_handler_state:state()}.
-type req() :: #{method := binary(), path := binary(), query := binary(),
                 headers := [{binary(), binary()}], peer := binary(),
                 proto := cbench:proto(), body := binary(), handle := handle()}.
-type status() :: 200..599.
-type headers() :: [{iodata(), iodata()}].
%% Why an answer was not given (docs/erlang.md, "Erlang handlers").
-type reply_error() :: gone | not_streaming |
                       {too_large, {body | headers, non_neg_integer(), pos_integer()}} |
                       {bad_reply, {{reply, status}, integer(), out_of_range | body_not_allowed} |
                                   {{reply, headers, binary()}, binary(),
                                    not_a_token | forbidden_header | control_char} |
                                   {{reply, headers}, non_neg_integer(), too_many}}.

%% What an answer may hold, on every engine: a body (or a piece) of 32 MiB, 64 headers of 1 MiB in
%% all. The port program takes frames of 65 MiB at most (c_src/cbench_port.c); these bounds keep
%% any one answer, and a burst flushed at 16 MiB (cbench_port_handler), well under it.
-define(MAX_BODY, (32 bsl 20)).
-define(MAX_HEADERS, 64).
-define(MAX_HEADER_BYTES, (1 bsl 20)).
%% What a nif reply call may copy on the calling scheduler: some tens of microseconds of memcpy and
%% decoding, well inside the millisecond a NIF may take. Handlers' usual answers are far below.
-define(NIF_HERE_BYTES, (256 bsl 10)).
-define(NIF_HERE_ITEMS, 256).

%% A C engine's request number, and a state word (cbench_handler_state).
-define(IS_REF(Ref), (is_integer(Ref) andalso Ref >= 0 andalso Ref < 1 bsl 64)).
-define(IS_STATE(St), (tuple_size(St) =:= 2 andalso is_reference(element(1, St)) andalso
                       is_integer(element(2, St)))).

-define(DEFAULT_TIMEOUT_MS, 5000).
-define(MAX_TIMEOUT_MS, 3600000).

%% @doc A handler route's options with their defaults: `timeout_ms' (1..3600000, default 5000),
%% `batch' (boolean, default false), `body' (`whole', the default, or `stream') and `pool' (the
%% processes of an {M, F} target, 1..1024, default the schedulers online).
-spec opts(map()) -> {ok, #{timeout_ms := pos_integer(), batch := boolean(),
                            body := whole | stream, pool := pos_integer()}} |
          {error, {bad_handler, term()}}.
opts(Opts) when is_map(Opts) ->
    O = maps:merge(#{timeout_ms => ?DEFAULT_TIMEOUT_MS, batch => false, body => whole,
                     pool => erlang:system_info(schedulers_online)}, Opts),
    %% {bad_handler, {{handler, Key}, Value, Why}}: the family of cbench_spec's {bad_stub, ...}.
    Bad = fun(K, V, Why) -> {error, {bad_handler, {{handler, K}, V, Why}}} end,
    case O of
        #{timeout_ms := T} when not is_integer(T) -> Bad(timeout_ms, T, wrong_type);
        #{timeout_ms := T} when T < 1; T > ?MAX_TIMEOUT_MS -> Bad(timeout_ms, T, out_of_range);
        #{batch := B} when not is_boolean(B) -> Bad(batch, B, wrong_type);
        #{body := Body} when Body =/= whole, Body =/= stream -> Bad(body, Body, wrong_type);
        #{pool := P} when not is_integer(P) -> Bad(pool, P, wrong_type);
        #{pool := P} when P < 1; P > 1024 -> Bad(pool, P, out_of_range);
        _ when map_size(O) > 4 ->
            [K | _] = lists:sort(maps:keys(maps:without([timeout_ms, batch, body, pool], O))),
            Bad(K, maps:get(K, O), unknown_key);
        _ ->
            {ok, O}
    end;
opts(Opts) ->
    {error, {bad_handler, Opts}}.

%% @doc Answers a request whole. {error, gone}: answered already, timed out, or its client or
%% stream is gone (nothing is sent). A status, header or body of the wrong type: badarg; of the
%% right type but refused: {error, {bad_reply, {Field, Value, Why}}} or {error, {too_large,
%% {Field, Size, Max}}} (nothing is sent and the request still waits for its answer).
-spec reply(req() | handle(), status(), headers(), iodata()) -> ok | {error, reply_error()}.
reply(Req, Status, Headers, Body) ->
    one(handle(Req), {reply, Status, Headers, Body}).

%% @doc Begins a streamed answer (chunked over HTTP/1.1, DATA frames over h2c).
-spec reply_stream(req() | handle(), status(), headers()) -> ok | {error, reply_error()}.
reply_stream(Req, Status, Headers) ->
    one(handle(Req), {stream, Status, Headers}).

%% @doc One piece of a streamed answer; {error, not_streaming} before reply_stream/3.
-spec send(req() | handle(), iodata()) -> ok | {error, reply_error()}.
send(Req, Data) ->
    one(handle(Req), {send, Data}).

%% @doc Ends a streamed answer; {error, not_streaming} before reply_stream/3.
-spec finish(req() | handle()) -> ok | {error, reply_error()}.
finish(Req) ->
    one(handle(Req), finish).

%% @doc Many whole answers at once: those for one nif or port server reach its engine in one
%% call (one queue post per worker). One result per answer, in order. An answer of the wrong type
%% raises badarg before any is given.
-spec replies([{req() | handle(), status(), headers(), iodata()}]) -> [ok | {error, reply_error()}].
replies(Answers) when is_list(Answers) ->
    N = length(Answers),
    Items = [{handle(R), {reply, S, H, B}} || {R, S, H, B} <- Answers],
    length(Items) =:= N orelse error(badarg),
    case Items of
        [{{cbench_nif, Server, _}, _} | _] ->
            [measured(Op) || {_, Op} <- Items],
            case lists:all(fun({{cbench_nif, Sv, _}, _}) -> Sv =:= Server;
                              (_) -> false
                           end, Items) of
                true -> nif_reply(Server, [{Ref, Op} || {{_, _, Ref}, Op} <- Items]);
                false -> [one(H, Op) || {H, Op} <- Items]
            end;
        _ ->
            %% Every answer is checked before any is given (a wrong type raises badarg first); port
            %% answers are then claimed one by one and sent to their owners one message each, ehttpd
            %% ones given one by one, and nif ones among them (a mixed list) given as by reply/4.
            cbench_port_handler:post(
              [case {H, Checked} of
                   {{cbench_port, _, _, _}, {ok, Op1}} -> cbench_port_handler:claim(H, Op1);
                   {{cbench_ehttpd, _, _, _}, {ok, Op1}} -> cbench_ehttpd_handler:answer(H, Op1);
                   {{cbench_nif, _, _}, _} -> one(H, Op);
                   {_, Error} -> Error
               end || {{H, Op}, Checked} <- lists:zip(Items, checked_list(Items, none))])
    end;
replies(_) ->
    error(badarg).

%% A handle as an engine gives it, or badarg: the C engines number requests in 64 bits (the port
%% program takes a frame it cannot decode as a broken node and exits), and a state word is a slot of
%% an atomics array.
handle(#{handle := H}) -> handle(H);
handle(H = {cbench_nif, _, Ref}) when ?IS_REF(Ref) -> H;
handle(H = {cbench_ehttpd, Pid, Ref, State}) when is_pid(Pid), ?IS_REF(Ref), ?IS_STATE(State) -> H;
handle(H = {cbench_port, Pid, Ref, State}) when is_pid(Pid), ?IS_REF(Ref), ?IS_STATE(State) -> H;
handle(_) -> error(badarg).

one({cbench_nif, Server, Ref}, Op) ->
    [Result] = nif_reply(Server, [{Ref, Op}]),
    Result;
one(H = {cbench_ehttpd, _, _, _}, Op) ->
    case checked(Op) of
        {ok, Op1} -> cbench_ehttpd_handler:answer(H, Op1);
        Error -> Error
    end;
one(H = {cbench_port, _, _, _}, Op) ->
    case checked(Op) of
        {ok, Op1} -> cbench_port_handler:answer(H, Op1);
        Error -> Error
    end.

%% The nif engine checks values itself (cb_server_reply()); types and sizes are checked here, so
%% that a body over the limit of every engine is refused here too. An answer the engine refuses
%% is checked again here only to say why. The sizes measured also choose the scheduler: the NIF
%% copies every byte (and flattens iolists), so answers over ?NIF_HERE_BYTES in all, or over
%% ?NIF_HERE_ITEMS of them, go to a dirty CPU scheduler (docs/erlang.md); others stay here.
nif_reply(Server, RefOps) ->
    Measured = [{Ref, Op, measured(Op)} || {Ref, Op} <- RefOps],
    {Items, Bytes, N} = nif_items(Measured, [], 0, 0),
    Results = if
                  N =:= 0 -> [];
                  Bytes > ?NIF_HERE_BYTES; N > ?NIF_HERE_ITEMS -> cbench_nif:reply_dirty(Server, Items);
                  true -> cbench_nif:reply(Server, Items)
              end,
    merge(Measured, Results).

%% The engine's items of the answers that passed, their bytes and their count.
nif_items([{Ref, Op, Bytes} | T], Items, Sum, N) when is_integer(Bytes) ->
    nif_items(T, [cbench_c_terms:reply_item(Ref, Op) | Items], Sum + Bytes, N + 1);
nif_items([_ | T], Items, Sum, N) -> nif_items(T, Items, Sum, N);
nif_items([], Items, Sum, N) -> {lists:reverse(Items), Sum, N}.

merge([{_, Op, Bytes} | T], [R | Rs]) when is_integer(Bytes) -> [nif_result(Op, R) | merge(T, Rs)];
merge([{_, _, Error} | T], Rs) -> [Error | merge(T, Rs)];
merge([], []) -> [].

nif_result(Op, {error, badarg}) ->
    case checked(Op) of
        {error, _} = Error -> Error;
        {ok, _} -> error(badarg)  % the engine refused what cbench lets through: a bug, said loudly
    end;
nif_result(_, R) -> R.

%%% The checks (every engine)

%% The checks of cb_server_reply() (src/deferred.c), made here for every engine in three steps:
%% types (badarg) and the status's range, sizes ({too_large, ...}: the port program takes frames
%% of 65 MiB at most, so one limit for all), then values ({bad_reply, {Field, Value, Why}}). Names
%% come back lowercased.
checked(Op) ->
    try
        measure(Op),
        {ok, values(Op)}
    catch throw:{reply_error, Reason} -> {error, Reason}
    end.

%% checked/1 of each answer of a replies/1 call. A run of answers that give the same header list
%% (a handler's literal list is one term in every answer, so the comparison is one pointer's) has
%% its headers checked once: Memo is the last list that passed and what it became.
checked_list([{_, Op} | T], Memo) ->
    {Checked, Memo1} = checked_memo(Op, Memo),
    [Checked | checked_list(T, Memo1)];
checked_list([], _) ->
    [].

checked_memo({reply, S, H, B}, Memo = {H, Headers}) ->
    try
        is_integer(S) orelse error(badarg),
        status(S),
        within(body, iolist_size(B), ?MAX_BODY),
        Body = iolist_to_binary(B),
        no_body(S, Body =/= <<>>),
        {{ok, {reply, S, Headers, Body}}, Memo}
    catch throw:{reply_error, Reason} -> {{error, Reason}, Memo}
    end;
checked_memo(Op, _) ->
    case checked(Op) of
        {ok, {reply, _, Headers, _}} = Ok -> {Ok, {element(3, Op), Headers}};
        Other -> {Other, none}
    end.

%% Types, the status and sizes only (the nif engine checks the rest itself): the bytes of the
%% body (or piece) and the header fields, or {error, Reason}.
measured(Op) ->
    try measure(Op)
    catch throw:{reply_error, Reason} -> {error, Reason}
    end.

measure({reply, S, H, B}) when is_integer(S) ->
    status(S),
    HeaderBytes = header_bytes(H),
    BodyBytes = iolist_size(B),
    within(body, BodyBytes, ?MAX_BODY),
    HeaderBytes + BodyBytes;
measure({stream, S, H}) when is_integer(S) ->
    status(S),
    header_bytes(H);
measure({send, D}) ->
    Bytes = iolist_size(D),
    within(body, Bytes, ?MAX_BODY),
    Bytes;
measure(finish) ->
    0;
measure(_) ->
    error(badarg).

header_bytes(H) ->
    {N, Bytes} = header_bytes(H, 0, 0),
    N =< ?MAX_HEADERS orelse bad({{reply, headers}, N, too_many}),
    within(headers, Bytes, ?MAX_HEADER_BYTES),
    Bytes.

header_bytes([{Name, Value} | T], N, Bytes) ->
    header_bytes(T, N + 1, Bytes + iolist_size(Name) + iolist_size(Value));
header_bytes([], N, Bytes) -> {N, Bytes};
header_bytes(_, _, _) -> error(badarg).

within(_What, Size, Max) when Size =< Max -> ok;
within(What, Size, Max) -> throw({reply_error, {too_large, {What, Size, Max}}}).

bad(Detail) -> throw({reply_error, {bad_reply, Detail}}).

values({reply, S, H, B}) ->
    Body = iolist_to_binary(B),
    no_body(S, Body =/= <<>>),
    {reply, S, headers(H), Body};
values({stream, S, H}) ->
    no_body(S, true),
    {stream, S, headers(H)};
values({send, D}) -> {send, iolist_to_binary(D)};
values(finish) -> finish.

%% Checked with the types: the NIF takes a status that fits in a C int only.
status(S) when S < 200; S > 599 -> bad({{reply, status}, S, out_of_range});
status(_) -> ok.

%% 204 and 304 have no body, so they are never streamed either.
no_body(S, true) when S =:= 204; S =:= 304 -> bad({{reply, status}, S, body_not_allowed});
no_body(_, _) -> ok.

headers(H) -> [header(iolist_to_binary(N), iolist_to_binary(V)) || {N, V} <- H].

%% Refusals use the stub's reasons (docs/routes.md, "Bad stubs"): the field names the header,
%% lowercased as the engine sends it. A token is ASCII, so it is lowercased byte by byte;
%% string:lowercase/1 (Unicode, and an exception for a name that has no capital) is only for the
%% name of the refusal of one that is not a token. Runs for every header of every answer on the
%% port and ehttpd engines: binary matches, no list built.
header(N, V) ->
    N =/= <<>> andalso token(N) orelse bad({{reply, headers, string:lowercase(N)}, N, not_a_token}),
    Name = ascii_lower(N),
    forbidden(Name) andalso bad({{reply, headers, Name}, N, forbidden_header}),
    value_ok(V) orelse bad({{reply, headers, Name}, V, control_char}),
    {Name, V}.

token(<<C, T/binary>>) when C >= $a, C =< $z; C >= $A, C =< $Z; C >= $0, C =< $9 -> token(T);
token(<<C, T/binary>>) when C =:= $!; C =:= $#; C =:= $$; C =:= $%; C =:= $&; C =:= $';
                            C =:= $*; C =:= $+; C =:= $-; C =:= $.; C =:= $^; C =:= $_;
                            C =:= $`; C =:= $|; C =:= $~ -> token(T);
token(<<>>) -> true;
token(_) -> false.

%% The name itself when it has no capital (the usual case): nothing is built.
ascii_lower(N) ->
    case has_capital(N) of
        true -> << <<(case C >= $A andalso C =< $Z of true -> C + 32; false -> C end)>> || <<C>> <= N >>;
        false -> N
    end.

has_capital(<<C, _/binary>>) when C >= $A, C =< $Z -> true;
has_capital(<<_, T/binary>>) -> has_capital(T);
has_capital(<<>>) -> false.

%% As cb__bad_value(): no control byte but tab (CR and LF among them), no DEL.
value_ok(<<C, _/binary>>) when C < 16#20, C =/= $\t; C =:= 16#7f -> false;
value_ok(<<_, T/binary>>) -> value_ok(T);
value_ok(<<>>) -> true.

forbidden(N) ->
    lists:member(N, [<<"content-length">>, <<"transfer-encoding">>, <<"connection">>,
                     <<"keep-alive">>, <<"upgrade">>, <<"te">>, <<"proxy-connection">>,
                     <<"date">>]).
