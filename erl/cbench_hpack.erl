%%% @doc HPACK (RFC 7541), the header compression of HTTP/2, for the ehttpd engine's h2c upstreams
%%% (cbench_h2_upstream). Debian's cowlib has no HPACK and OTP has no HTTP/2 client, hence this.
%%%
%%% The decoder is complete: integers (5.1), string literals raw and Huffman-coded (5.2, Appendix B),
%%% the static table (Appendix A), the dynamic table with its size accounting and eviction (4.1 to
%%% 4.4) and dynamic table size updates (6.3), bounded by the size we advertised. Bad input is
%%% `{error, compression}' (a COMPRESSION_ERROR to the caller), never an exception: a bad index, a
%%% truncated integer or string, an integer past 2^28, a Huffman string with the EOS symbol or a
%%% padding that is not 0 to 7 one bits, a size update over the bound or after a field. What a block
%%% decodes to is bounded too (fields and bytes), since a few bytes can name a 4 KiB table entry
%%% many times: past it `{error, too_big}'.
%%%
%%% The encoder is the request side's only: see encode/1.
-module(cbench_hpack).

-export([new_decoder/1, decode/3, encode/1]).

%% The dynamic table, newest entry first, with its size (RFC 7541 4.1: name + value + 32 per
%% entry), its current maximum (set by size updates) and the bound we advertised for it.
-record(dec, {table = [] :: [{binary(), binary()}], size = 0 :: non_neg_integer(),
              max :: non_neg_integer(), limit :: non_neg_integer()}).
-opaque decoder() :: #dec{}.
-type field() :: {binary(), binary()}.
-export_type([decoder/0, field/0]).

%% Integers past this are refused: no length or index of a real header block comes near it, and
%% the bound keeps a run of continuation bytes from building a bignum.
-define(MAX_INT_SHIFT, 28).

%% @doc A decoder whose dynamic table may grow to Limit bytes: the SETTINGS_HEADER_TABLE_SIZE the
%% connection advertised (the table starts at that size, RFC 7541 4.2).
-spec new_decoder(non_neg_integer()) -> decoder().
new_decoder(Limit) -> #dec{max = Limit, limit = Limit}.

%% @doc Decodes one whole header block (HEADERS and its CONTINUATIONs put together) into its fields
%% in order, updating the dynamic table; at most MaxFields fields of at most MaxBytes bytes of names
%% and values in all. After an error the decoder is lost with the connection (the table no longer
%% matches the peer's), so none is returned.
-spec decode(binary(), decoder(), {pos_integer(), pos_integer()}) ->
          {ok, [field()], decoder()} | {error, compression | too_big}.
decode(Block, Dec, Limits) when is_binary(Block) ->
    try fields(Block, Dec, Limits, [], 0, true)
    catch throw:Error -> Error
    end.

%% The representations one after another (RFC 7541 6); Start: no field yet, where a size update
%% may still come (4.2).
fields(<<>>, Dec, _Limits, Acc, _Bytes, _Start) ->
    {ok, lists:reverse(Acc), Dec};
fields(<<1:1, I:7, R/binary>>, Dec, Limits, Acc, Bytes, _Start) ->
    %% 6.1: an indexed field.
    {Index, R1} = int(I, 7, R),
    field(entry(Index, Dec), R1, Dec, Limits, Acc, Bytes);
fields(<<0:1, 1:1, I:6, R/binary>>, Dec, Limits, Acc, Bytes, _Start) ->
    %% 6.2.1: a literal added to the dynamic table.
    {F, R1} = literal(I, 6, R, Dec),
    field(F, R1, insert(F, Dec), Limits, Acc, Bytes);
fields(<<0:2, 1:1, I:5, R/binary>>, Dec, Limits, Acc, Bytes, true) ->
    %% 6.3: a dynamic table size update, within the bound we advertised.
    case int(I, 5, R) of
        {Max, R1} when Max =< Dec#dec.limit -> fields(R1, evict(Dec#dec{max = Max}), Limits, Acc, Bytes, true);
        _ -> throw({error, compression})
    end;
fields(<<0:2, 1:1, _:5, _/binary>>, _Dec, _Limits, _Acc, _Bytes, false) ->
    %% A size update after a field (4.2 allows them at the block's start only).
    throw({error, compression});
fields(<<0:3, _:1, I:4, R/binary>>, Dec, Limits, Acc, Bytes, _Start) ->
    %% 6.2.2 and 6.2.3: a literal without indexing, or never indexed (a proxy passes it on and
    %% indexes nothing either way).
    {F, R1} = literal(I, 4, R, Dec),
    field(F, R1, Dec, Limits, Acc, Bytes).

%% One more field, within the limits; then the rest of the block.
field(F = {N, V}, R, Dec, Limits = {MaxFields, MaxBytes}, Acc, Bytes) ->
    Bytes1 = Bytes + byte_size(N) + byte_size(V),
    case length(Acc) < MaxFields andalso Bytes1 =< MaxBytes of
        true -> fields(R, Dec, Limits, [F | Acc], Bytes1, false);
        false -> throw({error, too_big})
    end.

%% A literal field's name (an index, or a string when the index is 0) and its value string.
literal(I, Prefix, R, Dec) ->
    case int(I, Prefix, R) of
        {0, R1} ->
            {Name, R2} = string(R1),
            {Value, R3} = string(R2),
            {{Name, Value}, R3};
        {Index, R1} ->
            {Name, _} = entry(Index, Dec),
            {Value, R2} = string(R1),
            {{Name, Value}, R2}
    end.

%% RFC 7541 5.1: an integer in a Prefix-bit prefix whose value is First, then continuation bytes
%% of 7 bits, least significant first.
int(First, Prefix, R) ->
    case (1 bsl Prefix) - 1 of
        First -> int_more(R, First, 0);
        _ -> {First, R}
    end.

int_more(<<More:1, B:7, R/binary>>, Acc, Shift) when Shift < ?MAX_INT_SHIFT ->
    case More of
        1 -> int_more(R, Acc + (B bsl Shift), Shift + 7);
        0 -> {Acc + (B bsl Shift), R}
    end;
int_more(_, _, _) -> throw({error, compression}).

%% RFC 7541 5.2: a string literal, its length in a 7-bit prefix after the Huffman flag.
string(<<H:1, I:7, R/binary>>) ->
    case int(I, 7, R) of
        {Len, R1} when byte_size(R1) >= Len ->
            <<S:Len/binary, R2/binary>> = R1,
            case H of
                0 -> {S, R2};
                1 -> {huffman(S), R2}
            end;
        _ -> throw({error, compression})
    end;
string(_) -> throw({error, compression}).

%% Index 1..61: the static table; 62 on: the dynamic table, newest first (RFC 7541 2.3.3).
entry(Index, _Dec) when Index >= 1, Index =< 61 -> element(Index, static());
entry(Index, #dec{table = T}) when Index > 61, Index - 61 =< length(T) -> lists:nth(Index - 61, T);
entry(_Index, _Dec) -> throw({error, compression}).

%% RFC 7541 4.4: a new entry goes first; the oldest ones are evicted until it fits; one larger than
%% the whole table empties it and is not added.
insert({N, V} = F, Dec = #dec{table = T, size = S, max = Max}) ->
    Size = byte_size(N) + byte_size(V) + 32,
    case Size > Max of
        true -> Dec#dec{table = [], size = 0};
        false -> evict(Dec#dec{table = [F | T], size = S + Size})
    end.

%% RFC 7541 4.3: the oldest entries leave until the table is within its maximum.
evict(Dec = #dec{size = S, max = Max}) when S =< Max -> Dec;
evict(Dec = #dec{table = T, size = S}) ->
    {Kept, [{N, V}]} = lists:split(length(T) - 1, T),
    evict(Dec#dec{table = Kept, size = S - byte_size(N) - byte_size(V) - 32}).

%% RFC 7541 Appendix A: the static table, index 1 to 61.
static() ->
    {{<<":authority">>, <<>>}, {<<":method">>, <<"GET">>}, {<<":method">>, <<"POST">>},
     {<<":path">>, <<"/">>}, {<<":path">>, <<"/index.html">>}, {<<":scheme">>, <<"http">>},
     {<<":scheme">>, <<"https">>}, {<<":status">>, <<"200">>}, {<<":status">>, <<"204">>},
     {<<":status">>, <<"206">>}, {<<":status">>, <<"304">>}, {<<":status">>, <<"400">>},
     {<<":status">>, <<"404">>}, {<<":status">>, <<"500">>}, {<<"accept-charset">>, <<>>},
     {<<"accept-encoding">>, <<"gzip, deflate">>}, {<<"accept-language">>, <<>>},
     {<<"accept-ranges">>, <<>>}, {<<"accept">>, <<>>}, {<<"access-control-allow-origin">>, <<>>},
     {<<"age">>, <<>>}, {<<"allow">>, <<>>}, {<<"authorization">>, <<>>},
     {<<"cache-control">>, <<>>}, {<<"content-disposition">>, <<>>},
     {<<"content-encoding">>, <<>>}, {<<"content-language">>, <<>>},
     {<<"content-length">>, <<>>}, {<<"content-location">>, <<>>}, {<<"content-range">>, <<>>},
     {<<"content-type">>, <<>>}, {<<"cookie">>, <<>>}, {<<"date">>, <<>>}, {<<"etag">>, <<>>},
     {<<"expect">>, <<>>}, {<<"expires">>, <<>>}, {<<"from">>, <<>>}, {<<"host">>, <<>>},
     {<<"if-match">>, <<>>}, {<<"if-modified-since">>, <<>>}, {<<"if-none-match">>, <<>>},
     {<<"if-range">>, <<>>}, {<<"if-unmodified-since">>, <<>>}, {<<"last-modified">>, <<>>},
     {<<"link">>, <<>>}, {<<"location">>, <<>>}, {<<"max-forwards">>, <<>>},
     {<<"proxy-authenticate">>, <<>>}, {<<"proxy-authorization">>, <<>>}, {<<"range">>, <<>>},
     {<<"referer">>, <<>>}, {<<"refresh">>, <<>>}, {<<"retry-after">>, <<>>},
     {<<"server">>, <<>>}, {<<"set-cookie">>, <<>>}, {<<"strict-transport-security">>, <<>>},
     {<<"transfer-encoding">>, <<>>}, {<<"user-agent">>, <<>>}, {<<"vary">>, <<>>},
     {<<"via">>, <<>>}, {<<"www-authenticate">>, <<>>}}.

%% ---- Huffman (RFC 7541 5.2 and Appendix B) ----

%% A Huffman-coded string: codes one after another, then at most 7 bits of padding, all ones (the
%% most significant bits of EOS); the EOS symbol itself is an error (5.2).
huffman(S) -> huffman(S, huff_tables(), []).

huffman(Bits, Tables, Acc) ->
    Pad = bit_size(Bits),
    case Bits of
        %% No code is all ones within 7 bits (they begin EOS's 30): what is left is the padding.
        <<Ones:Pad>> when Pad =< 7, Ones =:= (1 bsl Pad) - 1 -> iolist_to_binary(lists:reverse(Acc));
        _ ->
            case symbol(Bits, Tables) of
                {256, _} -> throw({error, compression});
                {Sym, Rest} -> huffman(Rest, Tables, [Sym | Acc])
            end
    end.

%% The code at the head of Bits. Appendix B's code is canonical (checked by the unit tests against
%% its codes): a code of length L is an L-bit number C with First =< C < First + Count, and the
%% L-bit head of a longer code is past First + Count. So the lengths are tried shortest first.
symbol(Bits, [{L, First, Count, Syms} | More]) ->
    case Bits of
        <<C:L, Rest/bitstring>> when C - First < Count -> {element(C - First + 1, Syms), Rest};
        <<_:L, _/bitstring>> -> symbol(Bits, More);
        _ -> throw({error, compression})
    end;
symbol(_Bits, []) -> throw({error, compression}).

%% The decoding tables of huff_lengths/0, built once per node: per length, its first code, how many
%% codes it has and their symbols in order (canonical codes: each length's first code is the last
%% length's next code shifted left by the difference in lengths).
huff_tables() ->
    case persistent_term:get({?MODULE, huffman}, undefined) of
        undefined ->
            {Tables, _} = lists:mapfoldl(
                            fun({L, Syms}, {Next, PrevL}) ->
                                    First = Next bsl (L - PrevL),
                                    {{L, First, length(Syms), list_to_tuple(Syms)},
                                     {First + length(Syms), L}}
                            end, {0, 5}, huff_lengths()),
            persistent_term:put({?MODULE, huffman}, Tables),
            Tables;
        Tables -> Tables
    end.

%% RFC 7541 Appendix B, the Huffman code, written as its code lengths: for each length in bits, the
%% symbols (byte values, 256 for EOS) whose code has that length, in increasing order. The code is
%% canonical, so this is the whole table: the codes of one length are consecutive numbers in symbol
%% order, and the first code of a length follows the last code of the shorter one (e.g. '0' is
%% 00000, 'a' 00011, ' ' 010100, 0 is 0x1ff8 in 13 bits and EOS 0x3fffffff in 30, as in
%% Appendix B; test/cbench_hpack_tests.erl checks these and decodes Appendix C's examples).
huff_lengths() ->
    [{5, [48, 49, 50, 97, 99, 101, 105, 111, 115, 116]},
     {6, [32, 37, 45, 46, 47, 51, 52, 53, 54, 55, 56, 57, 61, 65, 95, 98, 100, 102, 103, 104, 108,
          109, 110, 112, 114, 117]},
     {7, [58, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86,
          87, 89, 106, 107, 113, 118, 119, 120, 121, 122]},
     {8, [38, 42, 44, 59, 88, 90]},
     {10, [33, 34, 40, 41, 63]},
     {11, [39, 43, 124]},
     {12, [35, 62]},
     {13, [0, 36, 64, 91, 93, 126]},
     {14, [94, 125]},
     {15, [60, 96, 123]},
     {19, [92, 195, 208]},
     {20, [128, 130, 131, 162, 184, 194, 224, 226]},
     {21, [153, 161, 167, 172, 176, 177, 179, 209, 216, 217, 227, 229, 230]},
     {22, [129, 132, 133, 134, 136, 146, 154, 156, 160, 163, 164, 169, 170, 173, 178, 181, 185, 186,
           187, 189, 190, 196, 198, 228, 232, 233]},
     {23, [1, 135, 137, 138, 139, 140, 141, 143, 147, 149, 150, 151, 152, 155, 157, 158, 165, 166,
           168, 174, 175, 180, 182, 183, 188, 191, 197, 231, 239]},
     {24, [9, 142, 144, 145, 148, 159, 171, 206, 215, 225, 236, 237]},
     {25, [199, 207, 234, 235]},
     {26, [192, 193, 200, 201, 202, 205, 210, 213, 218, 219, 238, 240, 242, 243, 255]},
     {27, [203, 204, 211, 212, 214, 221, 222, 223, 241, 244, 245, 246, 247, 248, 250, 251, 252, 253,
           254]},
     {28, [2, 3, 4, 5, 6, 7, 8, 11, 12, 14, 15, 16, 17, 18, 19, 20, 21, 23, 24, 25, 26, 27, 28, 29,
           30, 31, 127, 220, 249]},
     {30, [10, 13, 22, 256]}].

%% ---- the encoder ----

%% @doc A header block of Fields, each a literal without indexing with a literal name and raw
%% strings (RFC 7541 6.2.2, 5.2 with H = 0). The request side needs no more: the client sends one
%% request at a time, mostly to a local upstream, so the bytes Huffman or the dynamic table would save
%% are few; without indexing the encoder keeps no table, so it never has to follow the peer's
%% SETTINGS_HEADER_TABLE_SIZE or send size updates, and a connection's state is the decoder alone.
-spec encode([field()]) -> iodata().
encode(Fields) -> [[0, str(N), str(V)] || {N, V} <- Fields].

str(S) -> [enc_int(iolist_size(S), 7, 0), S].

%% RFC 7541 5.1 in a Prefix-bit prefix whose other bits are High (the first byte's).
enc_int(N, Prefix, High) ->
    Max = (1 bsl Prefix) - 1,
    case N < Max of
        true -> <<(High bor N)>>;
        false -> [<<(High bor Max)>> | enc_more(N - Max)]
    end.

enc_more(N) when N < 128 -> [N];
enc_more(N) -> [128 bor (N band 127) | enc_more(N bsr 7)].
