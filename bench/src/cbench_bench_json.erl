%% @doc A small JSON writer and reader for data.json (OTP 25 has no json module).
%%
%% Writing: maps (atom, binary or string keys), lists, binaries (strings),
%% numbers, true/false/null, other atoms as strings, `undefined' as null.
%% Reading: returns maps with binary keys, lists, binaries, numbers, true, false, null.
-module(cbench_bench_json).

-export([encode/1, decode/1]).

encode(M) when is_map(M) ->
    Pairs = [[str(key(K)), $:, encode(V)] || {K, V} <- lists:sort(maps:to_list(M))],
    [${, lists:join($,, Pairs), $}];
encode(L) when is_list(L) ->
    case L =/= [] andalso io_lib:printable_unicode_list(L) of
        true -> str(unicode:characters_to_binary(L));
        false -> [$[, lists:join($,, [encode(X) || X <- L]), $]]
    end;
encode(B) when is_binary(B) -> str(B);
encode(true) -> <<"true">>;
encode(false) -> <<"false">>;
encode(null) -> <<"null">>;
encode(undefined) -> <<"null">>;
encode(A) when is_atom(A) -> str(atom_to_binary(A));
encode(I) when is_integer(I) -> integer_to_binary(I);
encode(F) when is_float(F) -> float_to_binary(F, [{decimals, 3}, compact]).

key(K) when is_atom(K) -> atom_to_binary(K);
key(K) when is_list(K) -> unicode:characters_to_binary(K);
key(K) when is_binary(K) -> K.

str(B) -> [$", esc(B, <<>>), $"].

esc(<<>>, Acc) -> Acc;
esc(<<$", R/binary>>, Acc) -> esc(R, <<Acc/binary, "\\\"">>);
esc(<<$\\, R/binary>>, Acc) -> esc(R, <<Acc/binary, "\\\\">>);
esc(<<$\n, R/binary>>, Acc) -> esc(R, <<Acc/binary, "\\n">>);
esc(<<C, R/binary>>, Acc) when C < 16#20 ->
    H = list_to_binary(io_lib:format("\\u~4.16.0b", [C])),
    esc(R, <<Acc/binary, H/binary>>);
esc(<<C, R/binary>>, Acc) -> esc(R, <<Acc/binary, C>>).

%% @doc Parses a JSON text; raises {json, Reason} on malformed input.
decode(Bin) when is_binary(Bin) ->
    {V, Rest} = value(ws(Bin)),
    case ws(Rest) of
        <<>> -> V;
        _ -> throw({json, trailing_garbage})
    end.

ws(<<C, R/binary>>) when C =:= $\s; C =:= $\t; C =:= $\n; C =:= $\r -> ws(R);
ws(B) -> B.

value(<<${, R/binary>>) -> object(ws(R), #{});
value(<<$[, R/binary>>) -> array(ws(R), []);
value(<<$", R/binary>>) -> string(R, <<>>);
value(<<"true", R/binary>>) -> {true, R};
value(<<"false", R/binary>>) -> {false, R};
value(<<"null", R/binary>>) -> {null, R};
value(B) -> number(B).

object(<<$}, R/binary>>, M) when map_size(M) =:= 0 -> {M, R};
object(<<$", R/binary>>, M) ->
    {K, R1} = string(R, <<>>),
    case ws(R1) of
        <<$:, R2/binary>> ->
            {V, R3} = value(ws(R2)),
            case ws(R3) of
                <<$,, R4/binary>> -> object(ws(R4), M#{K => V});
                <<$}, R4/binary>> -> {M#{K => V}, R4};
                _ -> throw({json, bad_object})
            end;
        _ -> throw({json, missing_colon})
    end;
object(_, _) -> throw({json, bad_object}).

array(<<$], R/binary>>, []) -> {[], R};
array(B, Acc) ->
    {V, R} = value(B),
    case ws(R) of
        <<$,, R1/binary>> -> array(ws(R1), [V | Acc]);
        <<$], R1/binary>> -> {lists:reverse([V | Acc]), R1};
        _ -> throw({json, bad_array})
    end.

string(<<$", R/binary>>, Acc) -> {Acc, R};
string(<<$\\, $u, H:4/binary, R/binary>>, Acc) ->
    C = binary_to_integer(H, 16),
    string(R, <<Acc/binary, (unicode:characters_to_binary([C]))/binary>>);
string(<<$\\, C, R/binary>>, Acc) ->
    D = case C of
            $n -> $\n; $t -> $\t; $r -> $\r; $b -> $\b; $f -> $\f;
            $" -> $"; $\\ -> $\\; $/ -> $/;
            _ -> throw({json, bad_escape})
        end,
    string(R, <<Acc/binary, D>>);
string(<<C, R/binary>>, Acc) -> string(R, <<Acc/binary, C>>);
string(<<>>, _) -> throw({json, unterminated_string}).

number(B) ->
    case re:run(B, <<"^-?[0-9]+(\\.[0-9]+)?([eE][-+]?[0-9]+)?">>, [{capture, first, binary}]) of
        {match, [N]} ->
            R = binary:part(B, byte_size(N), byte_size(B) - byte_size(N)),
            V = case binary:match(N, [<<".">>, <<"e">>, <<"E">>]) of
                    nomatch -> binary_to_integer(N);
                    _ -> to_float(N)
                end,
            {V, R};
        nomatch -> throw({json, bad_value})
    end.

to_float(N) ->
    case binary:match(N, <<".">>) of
        nomatch ->
            %% 1e5 has no dot, which binary_to_float refuses.
            [M, E] = re:split(N, <<"[eE]">>),
            binary_to_float(<<M/binary, ".0e", E/binary>>);
        _ -> binary_to_float(N)
    end.
