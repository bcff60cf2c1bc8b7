%%% @doc Faults (docs/faults.md): the Erlang side of src/kinds/fault.c. A fault is written as the text
%%% that follows `/fault/' in a URL, `KIND' or `KIND?name=value&...'; the Erlang API also takes
%%% `Kind' (an atom) and `{Kind, #{Param => Value}}' and turns them into that text, which every
%%% engine takes: the C engine parses it again, the ehttpd engine parses it here (parse/1, the
%%% same rules and bounds as the C parser) and runs it with cbench_ehttpd_fault.
-module(cbench_fault).

-export([spec/1, parse/1, fires/2, delay_ms/3, fit/2, garbage/2, h2_only/1, tls_only/1]).

-export_type([user_fault/0, fault/0, kind/0]).

-type kind() :: reset | empty | hang | garbage | truncated | overlong | malformed_chunk
              | missing_last_chunk | raw | delay | dribble | rst_stream | goaway | settings
              | violation | trailers | slow_head | drip | tls_bad_record | tls_truncate.
-type param() :: at | bytes | length | seed | ms | max | sigma | pieces | code | last | rate
               | close | preset | data | max_frame | window.
-type user_fault() :: kind() | {kind(), #{param() => term()}} | {raw, binary() | atom()}
                    | binary() | string().
-type fault() :: #{kind := kind(), at := 0..2, bytes := non_neg_integer(),
                   length := non_neg_integer(), seed := non_neg_integer(),
                   ms := non_neg_integer(), max := non_neg_integer(), sigma := float(),
                   pieces := non_neg_integer(), code := non_neg_integer(), last := integer(),
                   rate := 0..1000000000, close := boolean(), data := binary(),
                   max_frame := integer(), window := integer(),
                   dist := fixed | uniform | lognormal, raw_status := 0 | 100..599}.

-define(KINDS, [reset, empty, hang, garbage, truncated, overlong, malformed_chunk,
                missing_last_chunk, raw, delay, dribble, rst_stream, goaway, settings, violation,
                trailers, slow_head, drip, tls_bad_record, tls_truncate]).
-define(MAX_LENGTH, 16 bsl 20).
-define(MAX_GARBAGE, 64 bsl 10).
-define(MAX_MS, 3600000).
-define(MAX_PIECES, 100000).
-define(MAX_DATA, 64 bsl 10).
-define(ALWAYS, 1000000000).
-define(M64, 16#FFFFFFFFFFFFFFFF).

%% The raw presets of src/kinds/fault.c, byte for byte.
presets() ->
    #{bare_lf => <<"HTTP/1.1 200 OK\ncontent-length: 2\n\nok">>,
      obs_fold => <<"HTTP/1.1 200 OK\r\nx-folded: a\r\n b\r\ncontent-length: 2\r\n\r\nok">>,
      no_reason => <<"HTTP/1.1 200\r\ncontent-length: 2\r\n\r\nok">>,
      bad_status_line => <<"HTTP/1.1 OK 200\r\ncontent-length: 2\r\n\r\nok">>,
      cl_te => <<"HTTP/1.1 200 OK\r\ncontent-length: 10\r\ntransfer-encoding: chunked\r\n\r\n"
                 "2\r\nok\r\n0\r\n\r\n">>,
      te_capitalised => <<"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n">>,
      te_identity => <<"HTTP/1.1 200 OK\r\ntransfer-encoding: identity\r\n\r\nok">>,
      informational => <<"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\n"
                         "link: </a.css>\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok">>,
      http10_no_length => <<"HTTP/1.0 200 OK\r\n\r\nok">>}.

%% @doc Whether a kind exists over HTTP/2 only (the ehttpd engine, HTTP/1.1 only, refuses it).
-spec h2_only(kind()) -> boolean().
h2_only(K) -> lists:member(K, [rst_stream, goaway, settings, violation]).

%% @doc Whether a kind exists over TLS only (src/transport/tls_fault.c): on a cleartext connection
%% it is answered 501 and counts as no fault, as a kind the protocol cannot carry.
-spec tls_only(kind()) -> boolean().
tls_only(K) -> K =:= tls_bad_record orelse K =:= tls_truncate.

%% @doc A fault term as its spec text, checked: `{ok, Spec}' or `{error, {fault, Term}}'.
-spec spec(user_fault()) -> {ok, binary()} | {error, {fault, term()}}.
spec(T) ->
    try to_text(T) of
        Text ->
            case parse(Text) of
                {ok, _} -> {ok, Text};
                error -> {error, {fault, T}}
            end
    catch _:_ -> {error, {fault, T}}
    end.

to_text(K) when is_atom(K) -> to_text({K, #{}});
to_text({raw, B}) when is_binary(B) -> to_text({raw, #{data => B}});
to_text({raw, P}) when is_atom(P) -> to_text({raw, #{preset => P}});
to_text({K, Params}) when is_atom(K), is_map(Params) ->
    true = lists:member(K, ?KINDS),
    Ps = [[atom_to_binary(N), $=, value(N, V)] || {N, V} <- lists:sort(maps:to_list(Params))],
    iolist_to_binary([atom_to_binary(K) | case Ps of [] -> []; _ -> [$? | lists:join($&, Ps)] end]);
to_text(B) when is_binary(B) -> B;
to_text(L) when is_list(L) -> unicode:characters_to_binary(L).

value(_, V) when is_integer(V), V >= 0 -> integer_to_binary(V);
value(close, true) -> <<"1">>;
value(close, false) -> <<"0">>;
value(N, V) when is_float(V), (N =:= rate orelse N =:= sigma) ->
    float_to_binary(V, [{decimals, 9}, compact]);
value(N, V) when is_atom(V), N =/= close -> atom_to_binary(V);
value(data, V) when is_binary(V) -> pct(V).

pct(B) -> << <<(enc(C))/binary>> || <<C>> <= B >>.
enc(C) when C >= $a, C =< $z; C >= $A, C =< $Z; C >= $0, C =< $9; C =:= $-; C =:= $_;
            C =:= $.; C =:= $~ -> <<C>>;
enc(C) -> iolist_to_binary(io_lib:format("%~2.16.0B", [C])).

%% @doc Parses a spec text as src/kinds/fault.c does (the same defaults and bounds); `error' for
%% anything it refuses.
-spec parse(binary()) -> {ok, fault()} | error.
parse(Text) when is_binary(Text), byte_size(Text) > 0, byte_size(Text) =< 4 * ?MAX_DATA ->
    {KindB, Query} = case binary:split(Text, <<"?">>) of
                         [K] -> {K, <<>>};
                         [K, Q] -> {K, Q}
                     end,
    try
        Kind = kind(KindB),
        F0 = #{kind => Kind, at => 0, bytes => 0, length => 1024, seed => 0, ms => 0, max => 0,
               sigma => 0.0, pieces => 0, code => 2, last => -1, rate => ?ALWAYS, close => true,
               data => <<>>, dist => fixed, raw_status => 0, max_frame => -1, window => -1},
        Params = case Query of
                     <<>> -> [];
                     _ -> [param(P) || P <- binary:split(Query, <<"&">>, [global])]
                 end,
        Seen = [N || {N, _} <- Params],
        Data = [D || {N, D} <- Params, N =:= data orelse N =:= preset],
        length([x || data <- Seen]) =< 1 orelse throw(bad), % data once, as in C
        F1 = lists:foldl(fun({N, V}, F) -> F#{N => V} end, F0,
                         [P || P = {N, _} <- Params, N =/= preset]),
        {ok, finish(Kind, F1, Seen, Data)}
    catch _:_ -> error
    end;
parse(_) ->
    error.

kind(B) ->
    case [K || K <- ?KINDS, atom_to_binary(K) =:= B] of
        [K] -> K;
        [] -> throw(bad)
    end.

param(P) ->
    case binary:split(P, <<"=">>) of
        [N, V] when N =/= <<>>, V =/= <<>> -> value_of(N, decode(V));
        _ -> throw(bad)
    end.

decode(V) -> decode(V, <<>>).
decode(<<$%, A, B, Rest/binary>>, Acc) ->
    decode(Rest, <<Acc/binary, (list_to_integer([A, B], 16))>>);
decode(<<$%, _/binary>>, _) -> throw(bad);
decode(<<$+, Rest/binary>>, Acc) -> decode(Rest, <<Acc/binary, $\s>>);
decode(<<C, Rest/binary>>, Acc) -> decode(Rest, <<Acc/binary, C>>);
decode(<<>>, Acc) -> Acc.

value_of(<<"at">>, <<"before">>) -> {at, 0};
value_of(<<"at">>, <<"head">>) -> {at, 1};
value_of(<<"at">>, <<"body">>) -> {at, 2};
value_of(<<"bytes">>, V) -> {bytes, int(V, ?MAX_LENGTH)};
value_of(<<"length">>, V) -> {length, int(V, ?MAX_LENGTH)};
value_of(<<"seed">>, V) -> {seed, int(V, ?M64)};
value_of(<<"ms">>, V) -> {ms, int(V, ?MAX_MS)};
value_of(<<"max">>, V) -> {max, int(V, ?MAX_MS)};
value_of(<<"sigma">>, V) -> {sigma, ppb(V, 10 * ?ALWAYS) / ?ALWAYS};
value_of(<<"pieces">>, V) ->
    case int(V, ?MAX_PIECES) of
        0 -> throw(bad);
        N -> {pieces, N}
    end;
value_of(<<"code">>, V) -> {code, int(V, 16#FFFFFFFF)};
value_of(<<"last">>, V) -> {last, int(V, 16#7FFFFFFF)};
value_of(<<"rate">>, V) -> {rate, ppb(V, ?ALWAYS)};
value_of(<<"max_frame">>, V) ->
    case int(V, 16777215) of
        N when N >= 16384 -> {max_frame, N}
    end;
value_of(<<"window">>, V) -> {window, int(V, 16#7FFFFFFF)};
value_of(<<"close">>, V) when V =:= <<"1">>; V =:= <<"true">> -> {close, true};
value_of(<<"close">>, V) when V =:= <<"0">>; V =:= <<"false">> -> {close, false};
value_of(<<"preset">>, V) ->
    [Bytes] = [B || {N, B} <- maps:to_list(presets()), atom_to_binary(N) =:= V],
    {preset, Bytes};
value_of(<<"data">>, V) when byte_size(V) =< ?MAX_DATA -> {data, V};
value_of(_, _) -> throw(bad).

int(V, Max) when byte_size(V) =< 20 ->
    true = lists:all(fun(C) -> C >= $0 andalso C =< $9 end, binary_to_list(V)),
    case binary_to_integer(V) of
        N when N =< Max -> N
    end.

%% D[.DDDDDDDDD] (one to three whole digits) as parts per billion.
ppb(V, Max) ->
    {W, F} = case binary:split(V, <<".">>) of
                 [W0] -> {W0, <<>>};
                 [W0, F0] when F0 =/= <<>>, byte_size(F0) =< 9 -> {W0, F0}
             end,
    true = byte_size(W) >= 1 andalso byte_size(W) =< 3,
    Frac = case F of
               <<>> -> 0;
               _ -> int(F, 999999999) * pow10(9 - byte_size(F))
           end,
    case int(W, 999) * ?ALWAYS + Frac of
        N when N =< Max -> N
    end.

pow10(0) -> 1;
pow10(N) -> 10 * pow10(N - 1).

finish(Kind, F = #{bytes := Bytes, length := Len}, Seen, Data) ->
    Has = fun(N) -> lists:member(N, Seen) end,
    case Kind of
        K when K =:= reset; K =:= rst_stream ->
            F1 = case not Has(at) andalso Has(bytes) of
                     true -> F#{at => 2};
                     false -> F
                 end,
            Bytes =< Len orelse throw(bad),
            F1;
        garbage ->
            B = case Has(bytes) of true -> Bytes; false -> 64 end,
            (B > 0 andalso B =< ?MAX_GARBAGE) orelse throw(bad),
            F#{bytes => B};
        tls_bad_record ->
            Bytes =< Len orelse throw(bad),
            F;
        K when K =:= truncated; K =:= tls_truncate ->
            B = case Has(bytes) of true -> Bytes; false -> Len div 2 end,
            (Len > 0 andalso B < Len) orelse throw(bad),
            F#{bytes => B};
        overlong ->
            B = case Has(bytes) of true -> Bytes; false -> 16 end,
            B > 0 orelse throw(bad),
            F#{bytes => B};
        missing_last_chunk ->
            Len > 0 orelse throw(bad),
            F;
        hang ->
            maps:get(at, F) =/= 2 orelse throw(bad),
            F;
        goaway ->
            %% A GOAWAY names a stream of the client's (odd) or 0: nghttp2 refuses an even one (fault.c).
            L = maps:get(last, F),
            (L =< 0 orelse L rem 2 =:= 1) orelse throw(bad),
            F;
        settings ->
            (Has(max_frame) orelse Has(window)) orelse throw(bad),
            F;
        trailers ->
            Len > 0 orelse throw(bad),
            F;
        slow_head ->
            F#{pieces => case maps:get(pieces, F) of 0 -> 4; P0 -> P0 end,
               ms => case maps:get(ms, F) of 0 -> 1000; M0 -> M0 end};
        raw ->
            %% Exactly one of preset (the last one given) and data.
            Has(preset) =/= Has(data) orelse throw(bad),
            D = lists:last(Data),
            F#{data => D, raw_status => raw_status(D)};
        delay ->
            case {Has(max), Has(sigma)} of
                {true, true} -> throw(bad);
                {true, false} ->
                    maps:get(max, F) >= maps:get(ms, F) orelse throw(bad),
                    F#{dist => uniform};
                {false, true} -> F#{dist => lognormal};
                _ -> F
            end;
        drip ->
            %% go-httpbin's /drip: the body a byte at a time, evenly over ms.
            L = case Has(length) of true -> Len; false -> 10 end,
            (L > 0 andalso L =< ?MAX_PIECES) orelse throw(bad),
            F#{length => L, pieces => L, ms => case maps:get(ms, F) of 0 -> 1000; M1 -> M1 end};
        dribble ->
            P = case maps:get(pieces, F) of 0 -> 4; P0 -> P0 end,
            Ms = case maps:get(ms, F) of 0 -> 1000; M0 -> M0 end,
            P =< Len orelse throw(bad),
            F#{pieces => P, ms => Ms};
        _ ->
            F
    end.

%% The status of the last status line in raw bytes, as the journal records it (0 when none).
raw_status(D) ->
    Lines = binary:split(D, <<"\n">>, [global]),
    lists:foldl(fun(<<"HTTP/1.", _, $\s, A, B, C, _/binary>>, _)
                      when A >= $1, A =< $5, B >= $0, B =< $9, C >= $0, C =< $9 ->
                        (A - $0) * 100 + (B - $0) * 10 + (C - $0);
                   (_, S) -> S
                end, 0, Lines).

%%% Seeded numbers: the same as src/kinds/fault.c's

splitmix64(X0) ->
    X = (X0 + 16#9e3779b97f4a7c15) band ?M64,
    Y = ((X bxor (X bsr 30)) * 16#bf58476d1ce4e5b9) band ?M64,
    Z = ((Y bxor (Y bsr 27)) * 16#94d049bb133111eb) band ?M64,
    Z bxor (Z bsr 31).

%% @doc Whether the fault applies to the N-th request (N from 0) of its route.
-spec fires(fault(), non_neg_integer()) -> boolean().
fires(#{rate := R}, _) when R >= ?ALWAYS -> true;
fires(#{rate := 0}, _) -> false;
fires(#{rate := R, seed := Seed}, N) ->
    splitmix64(Seed bxor splitmix64(N)) rem ?ALWAYS < R.

%% @doc The N-th delay of a delay fault, in milliseconds, at most Bound: the bound of `ms' on the
%% fault's path (60,000 through /fault/), which a lognormal draw, having no upper end, is cut at.
-spec delay_ms(fault(), non_neg_integer(), pos_integer()) -> non_neg_integer().
delay_ms(#{dist := fixed, ms := Ms}, _, _) -> Ms;
delay_ms(#{dist := uniform, ms := Ms, max := Max, seed := Seed}, N, _) ->
    A = splitmix64(Seed bxor splitmix64(2 * N)),
    Ms + A rem (Max - Ms + 1);
delay_ms(#{dist := lognormal, ms := Ms, sigma := Sigma, seed := Seed}, N, Bound) ->
    A = splitmix64(Seed bxor splitmix64(2 * N)),
    B = splitmix64(Seed bxor splitmix64(2 * N + 1)),
    U1 = ((A bsr 11) + 1.0) / 9007199254740993.0,
    U2 = (B bsr 11) / 9007199254740992.0,
    Z = math:sqrt(-2.0 * math:log(U1)) * math:cos(2.0 * math:pi() * U2),
    V = Ms * math:exp(Sigma * Z),
    case V >= Bound of
        true -> Bound;
        false -> trunc(V)
    end.

%% @doc A stub's fault fitted to the stub's own body of Size bytes, which the pacing faults pace
%% (drip a byte per piece, at most 100,000; dribble in at most Size pieces): `{ok, F}' or `error'.
%% A stub without a body (Size 0) keeps `length' generated bytes.
-spec fit(fault(), non_neg_integer()) -> {ok, fault()} | error.
fit(F, 0) -> {ok, F};
fit(F = #{kind := drip}, Size) when Size =< ?MAX_PIECES -> {ok, F#{pieces => Size}};
fit(#{kind := drip}, _) -> error;
fit(#{kind := dribble, pieces := P}, Size) when P > Size -> error;
fit(F, _) -> {ok, F}.

%% @doc Garbage: N bytes, 8 little-endian bytes of splitmix64(Seed + i) at a time.
-spec garbage(non_neg_integer(), non_neg_integer()) -> binary().
garbage(Seed, N) ->
    Words = (N + 7) div 8,
    All = << <<(splitmix64((Seed + I) band ?M64)):64/little>> || I <- lists:seq(0, Words - 1) >>,
    binary_part(All, 0, N).
