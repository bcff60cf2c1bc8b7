%%% @doc The roadrunner routes of docs/wire.md (`/large', `/cookies', `/gzip') on every engine,
%%% byte for byte over raw gen_tcp (only the date value masked), with the expected bodies written
%%% out here independently of the engines. Shared through cbench_routes_cases.hrl.
-module(cbench_roadrunner_wire).

-include_lib("stdlib/include/assert.hrl").

-export([cases/0, rr_large/1, rr_cookies/1, rr_gzip/1, rr_headers_heavy/1]).

-define(JSON, [<<"content-type: application/json">>]).

%% @doc The cases.
-spec cases() -> [atom()].
cases() -> [rr_large, rr_cookies, rr_gzip, rr_headers_heavy].

port(Config) -> proplists:get_value(port, Config).

get(Path, Extra) -> cbench_routes:get(Path, Extra).

ok200(CT, Body) ->
    cbench_routes:resp(<<"200 OK">>, CT,
                       iolist_to_binary(["content-length: ", integer_to_list(iolist_size(Body))]),
                       Body).

%% Each request on one keep-alive connection, then the connection is closed.
exchanges(Config, Pairs) ->
    {ok, S} = gen_tcp:connect({127, 0, 0, 1}, port(Config), [binary, {active, false}, {nodelay, true}]),
    [cbench_routes:exchange(S, Req, Exp) || {Req, Exp} <- Pairs],
    gen_tcp:close(S).

%% @doc GET and HEAD /large: 65,536 bytes, byte i is i rem 251.
rr_large(Config) ->
    Body = cbench_routes:file_content(65536),
    Oct = [<<"content-type: application/octet-stream">>],
    Head = cbench_routes:resp(<<"200 OK">>, Oct, <<"content-length: 65536">>, <<>>),
    exchanges(Config, [{get("/large", ""), ok200(Oct, Body)},
                       {["HEAD /large HTTP/1.1\r\nHost: x\r\n\r\n"], Head},
                       {get("/large?x=1", ""), ok200(Oct, Body)}]).

%% @doc GET /cookies: RFC 6265 pairs as a JSON object; bad pairs skipped, the first of a name wins,
%% several cookie fields read in order, none at all is {}.
rr_cookies(Config) ->
    C = fun(Values) -> get("/cookies", [["Cookie: ", V, "\r\n"] || V <- Values]) end,
    Eight = "a=1; bb=22; ccc=333; session=9f86d081884c7d65; theme=dark; lang=en-GB; "
            "csrf=\"tok-e3b0c442\"; consent=yes",
    Many = lists:join("; ", [["c", integer_to_list(I), "=", integer_to_list(I)]
                             || I <- lists:seq(1, 300)]),
    ManyJson = ["{", lists:join(",", [["\"c", integer_to_list(I), "\":\"", integer_to_list(I), "\""]
                                      || I <- lists:seq(1, 256)]), "}"],
    Cases =
        [{[], "{}"},
         {[Eight], "{\"a\":\"1\",\"bb\":\"22\",\"ccc\":\"333\",\"session\":\"9f86d081884c7d65\","
                   "\"theme\":\"dark\",\"lang\":\"en-GB\",\"csrf\":\"tok-e3b0c442\",\"consent\":\"yes\"}"},
         %% No '=', a space in the name, a space in the value, a comma, a backslash, an empty
         %% name, a lone quote: each skipped; empty pieces skipped; an empty value kept.
         {["a=1; novalue; c d=3; e=x y; f=ok;; g=; h=a,b; i=a\\b; =v; j=\"; k = 2 ;a=dup"],
          "{\"a\":\"1\",\"f\":\"ok\",\"g\":\"\",\"k\":\"2\"}"},
         %% Quotes removed only when they enclose the value; a quote inside is bad.
         {["q=\"\"; r=\"x\"y\"; s=\"v\"; t=x\"y"], "{\"q\":\"\",\"s\":\"v\"}"},
         %% Name is a token: '(' is not; '!#$%&' are; '=' is a cookie-octet.
         {["a(b=1; !#$%&=2; x==3"], "{\"!#$%&\":\"2\",\"x\":\"=3\"}"},
         {["a=1", "b=2; a=3"], "{\"a\":\"1\",\"b\":\"2\"}"},
         {[Many], ManyJson}],
    exchanges(Config, [{C(Values), ok200(?JSON, Json)} || {Values, Json} <- Cases]).

%% @doc GET /gzip: gzip when accept-encoding prefers it (q-values parsed), identity otherwise;
%% vary always; the compressed bytes are zlib level 6 with the gzip wrapper, on every engine.
rr_gzip(Config) ->
    Plain = gzip_plain(),
    ?assertEqual(16384, byte_size(Plain)),
    Packed = zlib:gzip(Plain),
    Vary = <<"vary: accept-encoding">>,
    Gz = ok200(?JSON ++ [<<"content-encoding: gzip">>, Vary], Packed),
    Id = ok200(?JSON ++ [Vary], Plain),
    AE = fun(V) -> get("/gzip", ["Accept-Encoding: ", V, "\r\n"]) end,
    Cases = [{get("/gzip", ""), Id},
             {AE("gzip"), Gz},
             {AE("gzip, deflate, br"), Gz},
             {AE("GZip"), Gz},
             {AE("x-gzip"), Gz},
             {AE("br, *"), Gz},
             {AE("deflate, br"), Id},
             {AE("identity"), Id},
             {AE(""), Id},
             {AE("gzip;q=0"), Id},
             {AE("gzip;q=0.000"), Id},
             %% identity is acceptable at q=1 unless the request weighs it.
             {AE("gzip ; Q=0.001"), Id},
             {AE("gzip ; Q=0.001, identity;q=0"), Gz},
             {AE("gzip;q=0.5, identity;q=0.4"), Gz},
             {AE("gzip;q=0.4, identity;q=0.5"), Id},
             {AE("gzip;q=0.5, identity;q=0.5"), Gz},
             {AE("*;q=0.3, identity;q=0.2"), Gz},
             {AE("*;q=0"), Id},
             {AE("identity;q=0, *;q=0"), Id},
             %% Malformed weights: the member is ignored.
             {AE("gzip;q=1.5"), Id},
             {AE("gzip;q=0.1234"), Id},
             {AE("gzip;q=.5"), Id},
             {AE("gzip;level=1"), Id},
             {AE("gzip;q=0.5;x=y"), Id},
             {AE("gzip;q=0, gzip"), Id},
             {get("/gzip", "Accept-Encoding: identity;q=0.1\r\nAccept-Encoding: gzip;q=0.2\r\n"), Gz},
             {["HEAD /gzip HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n"],
              cbench_routes:resp(<<"200 OK">>, ?JSON ++ [<<"content-encoding: gzip">>, Vary],
                                 iolist_to_binary(["content-length: ",
                                                   integer_to_list(byte_size(Packed))]), <<>>)}],
    exchanges(Config, Cases).

%% The /gzip body as docs/wire.md describes it.
gzip_plain() ->
    Item = fun(I) ->
                   Price = I * 37 rem 1000,
                   Cents = I * 13 rem 100,
                   lists:flatten(["{\"id\":", integer_to_list(I), ",\"name\":\"item-", integer_to_list(I),
                                  "\",\"price\":", integer_to_list(Price), ".",
                                  [$0 || Cents < 10], integer_to_list(Cents),
                                  ",\"in_stock\":", atom_to_list(I rem 3 =/= 0),
                                  ",\"tags\":[\"cbench\",\"fixture\"]}"])
           end,
    Head = iolist_to_binary(["{\"items\":[", lists:join(",", [Item(I) || I <- lists:seq(0, 149)]),
                             "],\"pad\":\""]),
    Pad = [lists:nth(I rem 16 + 1, "0123456789abcdef") || I <- lists:seq(0, 16384 - byte_size(Head) - 3)],
    iolist_to_binary([Head, Pad, "\"}"]).

%% @doc /hello with 16 extra headers (roadrunner's headers_heavy): the same answer, and /headers
%% lists every one of them (all are parsed and kept).
rr_headers_heavy(Config) ->
    Extra = [["x-extra-", integer_to_list(I), ": value-", integer_to_list(I), "\r\n"]
             || I <- lists:seq(1, 16)],
    Json = ["{\"host\":\"localhost\",",
            lists:join(",", [["\"x-extra-", integer_to_list(I), "\":\"value-", integer_to_list(I), "\""]
                             || I <- lists:seq(1, 16)]), "}"],
    exchanges(Config, [{get("/hello", Extra), ok200([<<"content-type: text/plain">>], <<"Hello, Joe!">>)},
                       {get("/headers", Extra), ok200(?JSON, iolist_to_binary(Json))}]).
