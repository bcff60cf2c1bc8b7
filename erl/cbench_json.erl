%%% @doc JSON for body matchers (docs/routes.md, "Body matchers"): a decoder that reads what jansson
%%% reads (the C engine's parser: any value at the top, strict numbers, valid UTF-8, `\u0000'
%%% allowed in strings but not in keys, a key given twice keeps the last, integers within 64 bits,
%%% at most 2048 levels, the top value being the first), an
%%% encoder for the terms a stub gives, and the two comparisons. OTP 25 has no json module.
%%%
%%% Terms: an object is a map with binary keys (atom keys are taken as their names when a stub
%%% gives them), an array a list, a string a binary, numbers integers and floats (`1' is not `1.0',
%%% as in jansson), and `true', `false', `null'.
-module(cbench_json).

-export([decode/1, decode/2, encode/1, normalize/1, equal/2, holds/2]).

-export_type([json/0]).

-type json() :: #{binary() => json()} | [json()] | binary() | integer() | float()
              | true | false | null.

-define(MAX_DEPTH, 2048).
-define(INT_MIN, -16#8000000000000000).
-define(INT_MAX, 16#7fffffffffffffff).

%% @doc A stub's JSON term in canonical form (binary keys), or error when it is not JSON: an atom
%% other than true, false and null, a string that is not UTF-8, a key given twice (as a binary and
%% an atom), an integer beyond 64 bits, a tuple...
-spec normalize(term()) -> {ok, json()} | error.
normalize(T) ->
    try {ok, norm(T, 0)} catch throw:bad -> error end.

%% D: the levels above the value (jansson counts the value itself: 2048 arrays around a number are
%% 2049 levels, too many).
norm(_, D) when D >= ?MAX_DEPTH -> throw(bad);
norm(M, D) when is_map(M) ->
    L = [{key(K), norm(V, D + 1)} || {K, V} <- maps:to_list(M)],
    N = maps:from_list(L),
    map_size(N) =:= length(L) orelse throw(bad),
    N;
norm(L, D) when is_list(L) ->
    case is_proper(L) of
        true -> [norm(X, D + 1) || X <- L];
        false -> throw(bad)
    end;
norm(B, _) when is_binary(B) -> utf8(B);
norm(I, _) when is_integer(I), I >= ?INT_MIN, I =< ?INT_MAX -> I;
norm(F, _) when is_float(F) -> F;
norm(A, _) when A =:= true; A =:= false; A =:= null -> A;
norm(_, _) -> throw(bad).

key(K) when is_binary(K) -> no_nul(utf8(K));
key(K) when is_atom(K) -> no_nul(utf8(atom_to_binary(K, utf8)));
key(_) -> throw(bad).

%% jansson keeps keys as C strings: a NUL in one is not JSON to it ("NUL byte in object key not
%% supported"), whatever the flags.
no_nul(K) ->
    case binary:match(K, <<0>>) of
        nomatch -> K;
        _ -> throw(bad)
    end.

is_proper([]) -> true;
is_proper([_ | T]) -> is_proper(T);
is_proper(_) -> false.

utf8(B) ->
    case unicode:characters_to_binary(B, utf8, utf8) of
        B -> B;
        _ -> throw(bad)
    end.

%% @doc Whether two canonical values are equal as JSON: object member order does not count (maps).
-spec equal(json(), json()) -> boolean().
equal(A, B) -> A =:= B.

%% @doc Whether Value holds Pattern: an object every member of Pattern's (recursively; extra
%% members allowed), an array of the same length whose elements hold Pattern's in place, other
%% values equal.
-spec holds(json(), json()) -> boolean().
holds(V, P) when is_map(P) ->
    is_map(V) andalso
        maps:fold(fun(K, PV, Acc) ->
                          Acc andalso case V of
                                          #{K := VV} -> holds(VV, PV);
                                          _ -> false
                                      end
                  end, true, P);
holds(V, P) when is_list(P) ->
    is_list(V) andalso length(V) =:= length(P) andalso
        lists:all(fun({VV, PV}) -> holds(VV, PV) end, lists:zip(V, P));
holds(V, P) -> V =:= P.

%% @doc Compact JSON text of a canonical value (what the C engines get, and jansson parses): members
%% sorted by key, jansson's string escapes, floats in float_to_binary(F, [short]) form. A stub file's
%% `{"json": ...}' body is this text on ehttpd, and src/json_text.c writes the same on the C engines.
-spec encode(json()) -> binary().
encode(T) -> iolist_to_binary(enc(T)).

enc(true) -> <<"true">>;
enc(false) -> <<"false">>;
enc(null) -> <<"null">>;
enc(I) when is_integer(I) -> integer_to_binary(I);
enc(F) when is_float(F) -> float_to_binary(F, [short]);
enc(B) when is_binary(B) -> [$", esc(B, <<>>), $"];
enc(L) when is_list(L) -> [$[, lists:join($,, [enc(X) || X <- L]), $]];
enc(M) when is_map(M) ->
    [${, lists:join($,, [[enc(K), $:, enc(V)] || {K, V} <- lists:sort(maps:to_list(M))]), $}].

%% jansson's escapes (src/json_text.c writes the same): a stub file's `{"json": ...}' body is served
%% in the same bytes by every engine.
esc(<<>>, Acc) -> Acc;
esc(<<$", R/binary>>, Acc) -> esc(R, <<Acc/binary, "\\\"">>);
esc(<<$\\, R/binary>>, Acc) -> esc(R, <<Acc/binary, "\\\\">>);
esc(<<$\b, R/binary>>, Acc) -> esc(R, <<Acc/binary, "\\b">>);
esc(<<$\f, R/binary>>, Acc) -> esc(R, <<Acc/binary, "\\f">>);
esc(<<$\n, R/binary>>, Acc) -> esc(R, <<Acc/binary, "\\n">>);
esc(<<$\r, R/binary>>, Acc) -> esc(R, <<Acc/binary, "\\r">>);
esc(<<$\t, R/binary>>, Acc) -> esc(R, <<Acc/binary, "\\t">>);
esc(<<C, R/binary>>, Acc) when C < 16#20 ->
    esc(R, <<Acc/binary, "\\u00", (hexd(C bsr 4)), (hexd(C band 15))>>);
esc(<<C, R/binary>>, Acc) -> esc(R, <<Acc/binary, C>>).

hexd(N) when N < 10 -> $0 + N;
hexd(N) -> $A + N - 10.

%% @doc Parses JSON text as jansson does with JSON_DECODE_ANY | JSON_ALLOW_NUL: {ok, Value} or
%% error.
-spec decode(binary()) -> {ok, json()} | error.
decode(Bin) when is_binary(Bin) -> decode(Bin, lax).

%% @doc decode/1 (lax), or as the C engines' stub file loader parses with jansson (strict:
%% JSON_REJECT_DUPLICATES and without JSON_ALLOW_NUL): a key given twice in one object, or a
%% `\u0000' in a string or a key, is error, so that ehttpd refuses the stub files they refuse.
-spec decode(binary(), lax | strict) -> {ok, json()} | error.
decode(Bin, Mode) when is_binary(Bin), (Mode =:= lax orelse Mode =:= strict) ->
    try
        {V, Rest} = value(ws(Bin), 0, Mode),
        case ws(Rest) of
            <<>> -> {ok, V};
            _ -> error
        end
    catch
        throw:bad -> error;
        error:_ -> error
    end.

ws(<<C, R/binary>>) when C =:= $\s; C =:= $\t; C =:= $\n; C =:= $\r -> ws(R);
ws(B) -> B.

value(_, D, _) when D >= ?MAX_DEPTH -> throw(bad);  % as norm/2
value(<<${, R/binary>>, D, M) -> object(ws(R), D + 1, [], M);
value(<<$[, R/binary>>, D, M) -> array(ws(R), D + 1, [], M);
value(<<$", R/binary>>, _, M) -> string(R, <<>>, M);
value(<<"true", R/binary>>, _, _) -> {true, R};
value(<<"false", R/binary>>, _, _) -> {false, R};
value(<<"null", R/binary>>, _, _) -> {null, R};
value(<<C, _/binary>> = B, _, _) when C =:= $-; C >= $0, C =< $9 -> number(B);
value(_, _, _) -> throw(bad).

object(<<$}, R/binary>>, _, [], _) -> {#{}, R};
object(<<$", R/binary>>, D, Acc, M) ->
    {K0, R1} = string(R, <<>>, M),
    K = no_nul(K0),
    case ws(R1) of
        <<$:, R2/binary>> ->
            {V, R3} = value(ws(R2), D, M),
            %% A key given twice keeps the last, as jansson (without JSON_REJECT_DUPLICATES).
            Acc1 = [{K, V} | Acc],
            case ws(R3) of
                <<$,, R4/binary>> -> object(ws(R4), D, Acc1, M);
                <<$}, R4/binary>> ->
                    Map = maps:from_list(lists:reverse(Acc1)),
                    %% strict: a key given twice is refused, as jansson's JSON_REJECT_DUPLICATES does.
                    M =:= strict andalso map_size(Map) =/= length(Acc1) andalso throw(bad),
                    {Map, R4};
                _ -> throw(bad)
            end;
        _ -> throw(bad)
    end;
object(_, _, _, _) -> throw(bad).

array(<<$], R/binary>>, _, [], _) -> {[], R};
array(B, D, Acc, M) ->
    {V, R} = value(B, D, M),
    case ws(R) of
        <<$,, R1/binary>> -> array(ws(R1), D, [V | Acc], M);
        <<$], R1/binary>> -> {lists:reverse([V | Acc]), R1};
        _ -> throw(bad)
    end.

string(<<$", R/binary>>, Acc, _) -> {utf8(Acc), R};
string(<<$\\, $u, H:4/binary, R/binary>>, Acc, M) ->
    case hex4(H) of
        Hi when Hi >= 16#D800, Hi =< 16#DBFF ->
            case R of
                <<$\\, $u, L:4/binary, R1/binary>> ->
                    case hex4(L) of
                        Lo when Lo >= 16#DC00, Lo =< 16#DFFF ->
                            C = 16#10000 + ((Hi - 16#D800) bsl 10) + (Lo - 16#DC00),
                            string(R1, <<Acc/binary, C/utf8>>, M);
                        _ -> throw(bad)
                    end;
                _ -> throw(bad)
            end;
        Lo when Lo >= 16#DC00, Lo =< 16#DFFF -> throw(bad);
        0 when M =:= strict -> throw(bad); %% jansson without JSON_ALLOW_NUL
        C -> string(R, <<Acc/binary, C/utf8>>, M)
    end;
string(<<$\\, C, R/binary>>, Acc, M) ->
    E = case C of
            $" -> $";
            $\\ -> $\\;
            $/ -> $/;
            $b -> $\b;
            $f -> $\f;
            $n -> $\n;
            $r -> $\r;
            $t -> $\t;
            _ -> throw(bad)
        end,
    string(R, <<Acc/binary, E>>, M);
string(<<C, _/binary>>, _, _) when C < 16#20 -> throw(bad);
string(<<C, R/binary>>, Acc, M) -> string(R, <<Acc/binary, C>>, M);
string(<<>>, _, _) -> throw(bad).

hex4(H) ->
    lists:foldl(fun(C, N) when C >= $0, C =< $9 -> N * 16 + C - $0;
                   (C, N) when C >= $a, C =< $f -> N * 16 + C - $a + 10;
                   (C, N) when C >= $A, C =< $F -> N * 16 + C - $A + 10;
                   (_, _) -> throw(bad)
                end, 0, binary_to_list(H)).

%% -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?: an integer without fraction or exponent.
number(B) ->
    {Sign, B1} = case B of <<$-, R/binary>> -> {"-", R}; _ -> {"", B} end,
    {Int, B2} = digits(B1),
    (Int =:= "" orelse (hd(Int) =:= $0 andalso Int =/= "0")) andalso throw(bad),
    {Frac, B3} = case B2 of
                     <<$., R3/binary>> ->
                         case digits(R3) of
                             {"", _} -> throw(bad);
                             F -> F
                         end;
                     _ -> {none, B2}
                 end,
    {Exp, B4} = case B3 of
                    <<E, R4/binary>> when E =:= $e; E =:= $E ->
                        {ES, R5} = case R4 of
                                       <<$+, X/binary>> -> {"", X};
                                       <<$-, X/binary>> -> {"-", X};
                                       _ -> {"", R4}
                                   end,
                        case digits(R5) of
                            {"", _} -> throw(bad);
                            {ED, R6} -> {ES ++ ED, R6}
                        end;
                    _ -> {none, B3}
                end,
    case {Frac, Exp} of
        {none, none} ->
            %% More than 19 digits is past 64 bits (no leading zeros): refused before
            %% list_to_integer/1, which is quadratic in the digits and does not yield.
            length(Int) =< 19 orelse throw(bad),
            I = list_to_integer(Sign ++ Int),
            (I >= ?INT_MIN andalso I =< ?INT_MAX) orelse throw(bad),
            {I, B4};
        _ ->
            F0 = case Frac of none -> "0"; _ -> Frac end,
            E0 = case Exp of none -> ""; _ -> "e" ++ Exp end,
            {list_to_float(Sign ++ Int ++ "." ++ F0 ++ E0), B4}
    end.

digits(B) -> digits(B, []).
digits(<<C, R/binary>>, Acc) when C >= $0, C =< $9 -> digits(R, [C | Acc]);
digits(B, Acc) -> {lists:reverse(Acc), B}.
