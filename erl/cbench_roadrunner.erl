%%% @doc The content of the roadrunner routes for the ehttpd engine, the same bytes as the C
%%% engine's (src/kinds/fixture_routes.c for /large, src/kinds/cookies.c, src/kinds/gzip_body.c; docs/wire.md): `GET /large'
%%% (64 KiB of the generated content), `GET /cookies' (the request's cookies as JSON, RFC 6265
%%% server-side parsing, bad pairs skipped) and `GET /gzip' (a 16 KiB JSON-shaped body, gzip-coded
%%% once per node with the same zlib and parameters as the C engine, chosen by accept-encoding).
-module(cbench_roadrunner).

-export([large/0, cookies_json/1, gzip_body/1, accepts_gzip/1]).

-define(LARGE_LEN, 65536).
-define(GZIP_PLAIN_LEN, 16384).
%% At most this many distinct cookie names are answered (CB__COOKIES_MAX).
-define(COOKIES_MAX, 256).

%% @doc The /large body: byte i is i rem 251, 65,536 bytes (slices of a block made once per node).
-spec large() -> iodata().
large() -> cbench_fixture:bytes(0, ?LARGE_LEN).

%% @doc The /cookies body for a request's headers (names lowercased): every `cookie' field in
%% order, split at `;', each piece a pair `name=value' with whitespace around the piece and around
%% `=' ignored, name a token, value cookie-octets (optionally in double quotes, removed); other
%% pieces are skipped; the first of a repeated name wins; at most 256 names.
-spec cookies_json([{binary(), binary()}]) -> iodata().
cookies_json(Headers) ->
    Pieces = lists:append([binary:split(V, <<";">>, [global]) || {<<"cookie">>, V} <- Headers]),
    Pairs = pairs(Pieces, #{}, 0, []),
    [${, lists:join($,, [[$", N, <<"\":\"">>, V, $"] || {N, V} <- Pairs]), $}].

pairs([], _Seen, _N, Acc) -> lists:reverse(Acc);
pairs(_, _Seen, ?COOKIES_MAX, Acc) -> lists:reverse(Acc);
pairs([P | Rest], Seen, N, Acc) ->
    case pair(P) of
        {Name, Value} when not is_map_key(Name, Seen) ->
            pairs(Rest, Seen#{Name => true}, N + 1, [{Name, Value} | Acc]);
        _ ->
            pairs(Rest, Seen, N, Acc)
    end.

%% Binary scans only: this runs for every request of the cookies_heavy benchmark.
pair(P) ->
    case binary:split(P, <<"=">>) of
        [Name0, Value0] ->
            Name = trim(Name0),
            Value = unquote(trim(Value0)),
            case Name =/= <<>> andalso token(Name) andalso cookie_octets(Value) of
                true -> {Name, Value};
                false -> bad
            end;
        _ -> bad
    end.

unquote(<<$", Rest/binary>> = V) when byte_size(V) >= 2 ->
    case binary:last(V) of
        $" -> binary_part(Rest, 0, byte_size(Rest) - 1);
        _ -> V
    end;
unquote(V) -> V.

cookie_octets(<<>>) -> true;
cookie_octets(<<C, Rest/binary>>) when C =:= 16#21; C >= 16#23, C =< 16#2B; C >= 16#2D, C =< 16#3A;
                                      C >= 16#3C, C =< 16#5B; C >= 16#5D, C =< 16#7E ->
    cookie_octets(Rest);
cookie_octets(_) -> false.

token(<<>>) -> true;
token(<<C, Rest/binary>>) when C >= $a, C =< $z; C >= $A, C =< $Z; C >= $0, C =< $9 -> token(Rest);
token(<<C, Rest/binary>>) when C =:= $!; C =:= $#; C =:= $$; C =:= $%; C =:= $&; C =:= $';
                               C =:= $*; C =:= $+; C =:= $-; C =:= $.; C =:= $^; C =:= $_;
                               C =:= $`; C =:= $|; C =:= $~ -> token(Rest);
token(_) -> false.

%% Whitespace (SP, HTAB) off both ends.
trim(B) -> trim_tail(trim_lead(B)).

trim_lead(<<C, Rest/binary>>) when C =:= $\s; C =:= $\t -> trim_lead(Rest);
trim_lead(B) -> B.

trim_tail(<<>>) -> <<>>;
trim_tail(B) ->
    case binary:last(B) of
        C when C =:= $\s; C =:= $\t -> trim_tail(binary_part(B, 0, byte_size(B) - 1));
        _ -> B
    end.

%% @doc The /gzip body as sent: `identity' (16,384 bytes) or `gzip' (made once per node).
-spec gzip_body(identity | gzip) -> binary().
gzip_body(Which) ->
    {Plain, Packed} =
        case persistent_term:get({?MODULE, gzip}, undefined) of
            undefined ->
                P = plain(),
                Both = {P, deflate(P)},
                persistent_term:put({?MODULE, gzip}, Both),
                Both;
            Both ->
                Both
        end,
    case Which of
        identity -> Plain;
        gzip -> Packed
    end.

%% {"items":[ITEM,...],"pad":"PAD"}: 150 items, PAD the "0123456789abcdef" run cut to what makes
%% 16,384 bytes.
plain() ->
    Items = [io_lib:format("{\"id\":~b,\"name\":\"item-~b\",\"price\":~b.~2..0b,\"in_stock\":~s,"
                           "\"tags\":[\"cbench\",\"fixture\"]}",
                           [I, I, I * 37 rem 1000, I * 13 rem 100,
                            case I rem 3 of 0 -> "false"; _ -> "true" end])
             || I <- lists:seq(0, 149)],
    Head = iolist_to_binary(["{\"items\":[", lists:join(",", Items), "],\"pad\":\""]),
    PadLen = ?GZIP_PLAIN_LEN - byte_size(Head) - 2,
    Pad = binary:part(binary:copy(<<"0123456789abcdef">>, PadLen div 16 + 1), 0, PadLen),
    <<Head/binary, Pad/binary, "\"}">>.

%% Level 6, a 32 KiB window with the gzip wrapper (15 + 16), memLevel 8, the default strategy: the
%% C engine's deflateInit2 call, through the same system zlib.
deflate(Plain) ->
    Z = zlib:open(),
    try
        ok = zlib:deflateInit(Z, 6, deflated, 31, 8, default),
        Out = iolist_to_binary(zlib:deflate(Z, Plain, finish)),
        ok = zlib:deflateEnd(Z),
        Out
    after
        zlib:close(Z)
    end.

%% @doc Whether the request's accept-encoding fields make gzip the answer (RFC 9110 12.5.3): the
%% first mention of gzip (or x-gzip), identity and `*' with their q weights; a malformed member is
%% ignored; no field at all means identity; gzip when its weight is above 0 and at least identity's.
-spec accepts_gzip([{binary(), binary()}]) -> boolean().
accepts_gzip(Headers) ->
    case [V || {<<"accept-encoding">>, V} <- Headers] of
        [] -> false;
        Values ->
            Members = [M || V <- Values, M0 <- binary:split(V, <<",">>, [global]),
                            {ok, M} <- [member(M0)]],
            Star = first(<<"*">>, Members),
            Gzip = case first([<<"gzip">>, <<"x-gzip">>], Members) of
                       undefined when Star =:= undefined -> 0;
                       undefined -> Star;
                       Q -> Q
                   end,
            Identity = case first(<<"identity">>, Members) of
                           undefined when Star =:= undefined -> 1000;
                           undefined -> Star;
                           Q2 -> Q2
                       end,
            Gzip > 0 andalso Gzip >= Identity
    end.

first(Names, Members) when is_list(Names) ->
    case [Q || {C, Q} <- Members, lists:member(C, Names)] of
        [Q | _] -> Q;
        [] -> undefined
    end;
first(Name, Members) -> first([Name], Members).

%% One member: coding [ OWS ";" OWS "q=" qvalue ], as {ok, {LowercaseCoding, Thousandths}}.
member(M0) ->
    M = trim(M0),
    {Coding, Rest} = split_coding(M, 0),
    case Coding =/= <<>> andalso token(Coding) of
        false -> error;
        true ->
            C = cbench_http:lower(Coding),
            case trim_lead(Rest) of
                <<>> -> {ok, {C, 1000}};
                <<$;, Weight/binary>> ->
                    case trim_lead(Weight) of
                        <<Q, $=, V/binary>> when Q =:= $q; Q =:= $Q ->
                            case qvalue(V) of
                                error -> error;
                                N -> {ok, {C, N}}
                            end;
                        _ -> error
                    end;
                _ -> error
            end
    end.

split_coding(M, I) when I < byte_size(M) ->
    case binary:at(M, I) of
        C when C =:= $;; C =:= $\s; C =:= $\t ->
            {binary_part(M, 0, I), binary_part(M, I, byte_size(M) - I)};
        _ -> split_coding(M, I + 1)
    end;
split_coding(M, _) -> {M, <<>>}.

%% qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] ), in thousandths.
qvalue(<<D>>) when D =:= $0; D =:= $1 -> (D - $0) * 1000;
qvalue(<<D, $., Frac/binary>>) when (D =:= $0 orelse D =:= $1), byte_size(Frac) =< 3 ->
    case lists:all(fun(C) -> C >= $0 andalso C =< $9 end, binary_to_list(Frac)) of
        true ->
            Padded = binary_to_list(Frac) ++ lists:duplicate(3 - byte_size(Frac), $0),
            case (D - $0) * 1000 + list_to_integer(Padded) of
                N when N =< 1000 -> N;
                _ -> error
            end;
        false -> error
    end;
qvalue(_) -> error.
