%%% @doc cbench_hpack (RFC 7541) against the RFC's own examples: Appendix C.2 to C.6 (each field
%%% representation; three requests and three responses in sequence on one decoder, without and with
%%% Huffman coding, the dynamic table's entries and size after each), the Huffman code's values from
%%% Appendix B, every error the decoder must give as `{error, compression}', its limits, and a
%%% PropEr property that no input crashes it (random bytes, and valid blocks cut or flipped).
-module(cbench_hpack_tests).

%% proper.hrl first: eunit.hrl defines ?LET only where PropEr has not.
-include_lib("proper/include/proper.hrl").
-include_lib("eunit/include/eunit.hrl").

-define(LIMITS, {128, 65536}).

hex(Text) -> binary:decode_hex(iolist_to_binary(string:replace(Text, " ", "", all))).

%% Decodes Blocks in turn on one decoder with the given table size; the fields of each.
run(Size, Blocks) ->
    {Out, _} = lists:mapfoldl(fun(B, D) ->
                                      {ok, Fs, D1} = cbench_hpack:decode(hex(B), D, ?LIMITS),
                                      {Fs, D1}
                              end, cbench_hpack:new_decoder(Size), Blocks),
    Out.

%% The dynamic table after Blocks: entries newest first and the size (RFC 7541 4.1).
table_after(Size, Blocks) ->
    D = lists:foldl(fun(B, D0) -> {ok, _, D1} = cbench_hpack:decode(hex(B), D0, ?LIMITS), D1 end,
                    cbench_hpack:new_decoder(Size), Blocks),
    {dec, Table, Used, _Max, _Limit} = D,
    {Table, Used}.

%% C.2.1 to C.2.4: one representation each, on a fresh decoder.
c2_test_() ->
    [?_assertEqual([[{<<"custom-key">>, <<"custom-header">>}]],
                   run(4096, ["400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572"])),
     ?_assertEqual({[{<<"custom-key">>, <<"custom-header">>}], 55},
                   table_after(4096, ["400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572"])),
     ?_assertEqual([[{<<":path">>, <<"/sample/path">>}]], run(4096, ["040c 2f73 616d 706c 652f 7061 7468"])),
     ?_assertEqual({[], 0}, table_after(4096, ["040c 2f73 616d 706c 652f 7061 7468"])),
     ?_assertEqual([[{<<"password">>, <<"secret">>}]],
                   run(4096, ["1008 7061 7373 776f 7264 0673 6563 7265 74"])),
     ?_assertEqual({[], 0}, table_after(4096, ["1008 7061 7373 776f 7264 0673 6563 7265 74"])),
     ?_assertEqual([[{<<":method">>, <<"GET">>}]], run(4096, ["82"])),
     ?_assertEqual({[], 0}, table_after(4096, ["82"]))].

requests() ->
    Auth = {<<":authority">>, <<"www.example.com">>},
    [[{<<":method">>, <<"GET">>}, {<<":scheme">>, <<"http">>}, {<<":path">>, <<"/">>}, Auth],
     [{<<":method">>, <<"GET">>}, {<<":scheme">>, <<"http">>}, {<<":path">>, <<"/">>}, Auth,
      {<<"cache-control">>, <<"no-cache">>}],
     [{<<":method">>, <<"GET">>}, {<<":scheme">>, <<"https">>}, {<<":path">>, <<"/index.html">>}, Auth,
      {<<"custom-key">>, <<"custom-value">>}]].

%% The tables after each request: C.3.1-3 and C.4.1-3 list the same ones.
request_tables() ->
    Auth = {<<":authority">>, <<"www.example.com">>},
    CC = {<<"cache-control">>, <<"no-cache">>},
    [{[Auth], 57}, {[CC, Auth], 110}, {[{<<"custom-key">>, <<"custom-value">>}, CC, Auth], 164}].

c3_blocks() ->
    ["8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
     "8286 84be 5808 6e6f 2d63 6163 6865",
     "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65"].

c4_blocks() ->
    ["8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
     "8286 84be 5886 a8eb 1064 9cbf",
     "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf"].

%% C.3: requests without Huffman coding; C.4: the same with it.
c3_c4_test_() ->
    [[?_assertEqual(requests(), run(4096, Blocks)),
      [?_assertEqual(T, table_after(4096, lists:sublist(Blocks, N)))
       || {N, T} <- lists:zip([1, 2, 3], request_tables())]]
     || Blocks <- [c3_blocks(), c4_blocks()]].

responses() ->
    Loc = {<<"location">>, <<"https://www.example.com">>},
    Date1 = {<<"date">>, <<"Mon, 21 Oct 2013 20:13:21 GMT">>},
    Private = {<<"cache-control">>, <<"private">>},
    [[{<<":status">>, <<"302">>}, Private, Date1, Loc],
     [{<<":status">>, <<"307">>}, Private, Date1, Loc],
     [{<<":status">>, <<"200">>}, Private, {<<"date">>, <<"Mon, 21 Oct 2013 20:13:22 GMT">>}, Loc,
      {<<"content-encoding">>, <<"gzip">>},
      {<<"set-cookie">>, <<"foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1">>}]].

%% With a 256-byte table (C.5, C.6): :status 302 is evicted by 307, then three entries by the third.
response_tables() ->
    Loc = {<<"location">>, <<"https://www.example.com">>},
    Date1 = {<<"date">>, <<"Mon, 21 Oct 2013 20:13:21 GMT">>},
    Private = {<<"cache-control">>, <<"private">>},
    [{[Loc, Date1, Private, {<<":status">>, <<"302">>}], 222},
     {[{<<":status">>, <<"307">>}, Loc, Date1, Private], 222},
     {[{<<"set-cookie">>, <<"foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1">>},
       {<<"content-encoding">>, <<"gzip">>}, {<<"date">>, <<"Mon, 21 Oct 2013 20:13:22 GMT">>}], 215}].

c5_blocks() ->
    ["4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a "
     "3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
     "4803 3330 37c1 c0bf",
     "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d 54c0 5a04 "
     "677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 5541 5851 5745 4f49 "
     "553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e 3d31"].

c6_blocks() ->
    ["4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e "
     "919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
     "4883 640e ffc1 c0bf",
     "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7 "
     "821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed "
     "4ee5 b106 3d50 07"].

%% C.5: responses without Huffman coding; C.6: the same with it.
c5_c6_test_() ->
    [[?_assertEqual(responses(), run(256, Blocks)),
      [?_assertEqual(T, table_after(256, lists:sublist(Blocks, N)))
       || {N, T} <- lists:zip([1, 2, 3], response_tables())]]
     || Blocks <- [c5_blocks(), c6_blocks()]].

%% Appendix B's codes (hex and length) for a few symbols, as strings of one symbol and its padding:
%% 'a' 0x3 in 5 bits, ' ' 0x14 in 6, 0 0x1ff8 in 13, 10 0x3ffffffc in 30, 255 0x3ffffee in 26.
huffman_codes_test_() ->
    [?_assertEqual([[{<<"x">>, <<Sym>>}]], run(4096, [huff_field(Code, Len)]))
     || {Sym, Code, Len} <- [{$a, 16#3, 5}, {$\s, 16#14, 6}, {0, 16#1ff8, 13}, {10, 16#3ffffffc, 30},
                             {255, 16#3ffffee, 26}, {$0, 16#0, 5}, {$z, 16#7b, 7}, {$~, 16#1ffd, 13}]].

%% A literal field "x" whose value is the Huffman code Code of Len bits, padded with ones.
huff_field(Code, Len) ->
    Pad = (8 - Len rem 8) rem 8,
    V = <<Code:Len, ((1 bsl Pad) - 1):Pad>>,
    binary:encode_hex(<<0, 1, $x, (16#80 bor byte_size(V)), V/binary>>).

%% Every malformed input is {error, compression}.
errors_test_() ->
    Bad = ["80",                          % index 0
           "be",                          % index 62, the dynamic table empty
           "ff ff ff ff ff 0f",           % an integer past 2^28
           "ff",                          % a truncated integer
           "40 05 61",                    % a name shorter than its length
           "00 01 61 85 ff",              % a Huffman value shorter than its length
           "00 01 61 84 ff ff ff ff",     % EOS (30 ones) inside a Huffman string
           "00 01 61 82 1f ff",           % 'a' then 11 bits of padding
           "00 01 61 81 18",              % 'a' then padding 000, not ones
           "00 01 61 81 fe",              % 11111110: no code of 8 bits, too short for more
           "3f e2 1f",                    % a size update to 4097, over the 4096 we advertise
           "82 20",                       % a size update after a field
           "7f"],                         % a truncated literal name index
    [?_assertEqual({B, {error, compression}},
                   {B, cbench_hpack:decode(hex(B), cbench_hpack:new_decoder(4096), ?LIMITS)}) || B <- Bad].

%% Size updates: to 0 empties the table, two at a block's start are taken up to the bound; 4.4: an
%% entry larger than the whole table (36 bytes in 35) empties it and is not added.
size_update_test() ->
    {ok, _, D} = cbench_hpack:decode(hex("400178036f6c64"), cbench_hpack:new_decoder(4096), ?LIMITS),
    ?assertEqual({ok, [{<<"x">>, <<"old">>}], D}, cbench_hpack:decode(hex("be"), D, ?LIMITS)),
    {ok, [], D0} = cbench_hpack:decode(hex("20"), D, ?LIMITS),
    ?assertEqual({error, compression}, cbench_hpack:decode(hex("be"), D0, ?LIMITS)),
    {ok, [], D1} = cbench_hpack:decode(hex("20 3f e1 1f"), D, ?LIMITS),
    ?assertEqual({dec, [], 0, 4096, 4096}, D1),
    {ok, [{<<"x">>, <<"old">>}], D2} = cbench_hpack:decode(hex("3f 04 400178036f6c64"),
                                                           cbench_hpack:new_decoder(4096), ?LIMITS),
    ?assertEqual({dec, [], 0, 35, 4096}, D2).

%% The limits: past MaxFields fields or MaxBytes of names and values, too_big (a one-byte index
%% of a large entry must not let a small block decode to a large head: 30 bytes naming a 3,000-byte
%% entry would be 90,000 bytes).
limits_test() ->
    D = cbench_hpack:new_decoder(4096),
    ?assertEqual({error, too_big}, cbench_hpack:decode(hex("82 82 82"), D, {2, 1000})),
    ?assertMatch({ok, [_, _], _}, cbench_hpack:decode(hex("82 82"), D, {2, 1000})),
    Big = binary:copy(<<"v">>, 3000),
    {ok, [{<<"x">>, Big}], D1} = cbench_hpack:decode(<<16#40, 1, $x, 16#7f, 16#b9, 16#16, Big/binary>>, D,
                                                   {128, 65536}),
    ?assertEqual({error, too_big}, cbench_hpack:decode(binary:copy(<<16#be>>, 30), D1, {128, 65536})).

%% The encoder's bytes: a literal without indexing, new name (0x00), raw strings; a length of 127
%% and more spills into continuation bytes (RFC 7541 C.1.2 is the same rule in a 5-bit prefix).
encode_test() ->
    ?assertEqual(hex("00 07 3a6d6574686f64 03 474554"),
                 iolist_to_binary(cbench_hpack:encode([{<<":method">>, <<"GET">>}]))),
    V = binary:copy(<<"a">>, 200),
    ?assertEqual(<<0, 1, $x, 127, 73, V/binary>>, iolist_to_binary(cbench_hpack:encode([{<<"x">>, V}]))),
    Fields = [{<<"a">>, <<>>}, {<<"b">>, binary:copy(<<1>>, 16500)}],
    ?assertMatch({ok, Fields, _}, cbench_hpack:decode(iolist_to_binary(cbench_hpack:encode(Fields)),
                                                      cbench_hpack:new_decoder(4096), {128, 65536})).

%% No input crashes the decoder: random bytes, and valid blocks (C.3 to C.6, decoded in turn) cut
%% short or with a byte flipped, each give {ok, ...} or {error, _}. 3000 cases each.
never_crashes_test_() ->
    {timeout, 120,
     fun() ->
             ?assert(proper:quickcheck(prop_random_bytes(), [{numtests, 3000}, {to_file, user}])),
             ?assert(proper:quickcheck(prop_damaged_blocks(), [{numtests, 3000}, {to_file, user}]))
     end}.

prop_random_bytes() ->
    ?FORALL({Bytes, Size}, {binary(), oneof([0, 64, 256, 4096])}, decodes_or_errs([Bytes], Size)).

prop_damaged_blocks() ->
    Seqs = [c3_blocks(), c4_blocks(), c5_blocks(), c6_blocks()],
    ?FORALL({Seq, Cut, At, Xor}, {oneof(Seqs), non_neg_integer(), non_neg_integer(), range(1, 255)},
            begin
                Blocks = [hex(B) || B <- Seq],
                Last = lists:last(Blocks),
                Pos = At rem byte_size(Last),
                <<Pre:Pos/binary, Byte, Post/binary>> = Last,
                Flipped = <<Pre/binary, (Byte bxor Xor), Post/binary>>,
                Short = binary:part(Last, 0, Cut rem byte_size(Last)),
                Init = lists:droplast(Blocks),
                decodes_or_errs(Init ++ [Flipped], 4096) andalso decodes_or_errs(Init ++ [Short], 4096)
            end).

%% Decodes Blocks in turn: true when each is {ok, ...} until one is {error, compression | too_big}.
decodes_or_errs(Blocks, Size) ->
    lists:foldl(fun(_B, stop) -> stop;
                   (B, D) ->
                        case cbench_hpack:decode(B, D, ?LIMITS) of
                            {ok, Fs, D1} when is_list(Fs) -> D1;
                            {error, compression} -> stop;
                            {error, too_big} -> stop
                        end
                end, cbench_hpack:new_decoder(Size), Blocks) =/= crash.
