%%% @doc HTTP/1.1 protocol helpers shared by the Erlang side of cbench: reason phrases, the cached
%%% `date' header, the payload constants of docs/wire.md, response heads and the /headers JSON.
%%%
%%% Everything here is pure except the date, which is read from the ets table that cbench_clock refreshes
%%% once a second, so that a request never formats a date itself.
-module(cbench_http).

-export([date_value/1, head/4, chunk/1, last_chunk/0, line/0, bigline/0, sse_event/1,
         headers_json/1, status_param/1, delay_param/1, lower/1, trim_ows/1, reason/1]).

-define(CLOCK_TAB, cbench_clock).

%% @doc The reason phrase of a status code: RFC 9110 plus the extra codes listed in docs/wire.md.
-spec reason(100..599) -> binary().
reason(100) -> <<"Continue">>;
reason(101) -> <<"Switching Protocols">>;
reason(200) -> <<"OK">>;
reason(201) -> <<"Created">>;
reason(202) -> <<"Accepted">>;
reason(203) -> <<"Non-Authoritative Information">>;
reason(204) -> <<"No Content">>;
reason(205) -> <<"Reset Content">>;
reason(206) -> <<"Partial Content">>;
reason(300) -> <<"Multiple Choices">>;
reason(301) -> <<"Moved Permanently">>;
reason(302) -> <<"Found">>;
reason(303) -> <<"See Other">>;
reason(304) -> <<"Not Modified">>;
reason(305) -> <<"Use Proxy">>;
reason(307) -> <<"Temporary Redirect">>;
reason(308) -> <<"Permanent Redirect">>;
reason(400) -> <<"Bad Request">>;
reason(401) -> <<"Unauthorized">>;
reason(402) -> <<"Payment Required">>;
reason(403) -> <<"Forbidden">>;
reason(404) -> <<"Not Found">>;
reason(405) -> <<"Method Not Allowed">>;
reason(406) -> <<"Not Acceptable">>;
reason(407) -> <<"Proxy Authentication Required">>;
reason(408) -> <<"Request Timeout">>;
reason(409) -> <<"Conflict">>;
reason(410) -> <<"Gone">>;
reason(411) -> <<"Length Required">>;
reason(412) -> <<"Precondition Failed">>;
reason(413) -> <<"Content Too Large">>;
reason(414) -> <<"URI Too Long">>;
reason(415) -> <<"Unsupported Media Type">>;
reason(416) -> <<"Range Not Satisfiable">>;
reason(417) -> <<"Expectation Failed">>;
reason(421) -> <<"Misdirected Request">>;
reason(422) -> <<"Unprocessable Content">>;
reason(425) -> <<"Too Early">>;
reason(426) -> <<"Upgrade Required">>;
reason(428) -> <<"Precondition Required">>;
reason(429) -> <<"Too Many Requests">>;
reason(431) -> <<"Request Header Fields Too Large">>;
reason(451) -> <<"Unavailable For Legal Reasons">>;
reason(500) -> <<"Internal Server Error">>;
reason(501) -> <<"Not Implemented">>;
reason(502) -> <<"Bad Gateway">>;
reason(503) -> <<"Service Unavailable">>;
reason(504) -> <<"Gateway Timeout">>;
reason(505) -> <<"HTTP Version Not Supported">>;
reason(511) -> <<"Network Authentication Required">>;
reason(_) -> <<"Unknown">>.

%% @doc The current IMF-fixdate, from the once-a-second cache when cbench_clock runs.
-spec date_value() -> binary().
date_value() ->
    try ets:lookup_element(?CLOCK_TAB, date, 2)
    catch error:badarg -> date_value(erlang:system_time(second))
    end.

%% @doc Formats a Unix time in seconds as IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT').
-spec date_value(integer()) -> binary().
date_value(UnixSeconds) ->
    {{Y, Mo, D}, {H, Mi, S}} =
        calendar:gregorian_seconds_to_datetime(UnixSeconds + 62167219200),
    Wd = element(calendar:day_of_the_week(Y, Mo, D),
                 {<<"Mon">>, <<"Tue">>, <<"Wed">>, <<"Thu">>, <<"Fri">>, <<"Sat">>, <<"Sun">>}),
    Mon = element(Mo, {<<"Jan">>, <<"Feb">>, <<"Mar">>, <<"Apr">>, <<"May">>, <<"Jun">>,
                       <<"Jul">>, <<"Aug">>, <<"Sep">>, <<"Oct">>, <<"Nov">>, <<"Dec">>}),
    iolist_to_binary(io_lib:format("~s, ~2..0B ~s ~4..0B ~2..0B:~2..0B:~2..0B GMT",
                                   [Wd, D, Mon, Y, H, Mi, S])).

%% @doc The whole `date: ...\r\n' line, cached like date_value/0.
-spec date_line() -> binary().
date_line() ->
    try ets:lookup_element(?CLOCK_TAB, date_line, 2)
    catch error:badarg -> <<"date: ", (date_value())/binary, "\r\n">>
    end.

%% @doc A response head in the header order of docs/wire.md.
%% Headers is a list of {Name, Value} in wire order (content-type, cache-control, allow);
%% Length is the content-length, `chunked', or `none' (204/304); Conn is `close', `keep_alive'
%% (the HTTP/1.0 answer to a keep-alive request) or `default'.
-spec head(100..599, [{binary(), iodata()}], non_neg_integer() | chunked | none,
           close | keep_alive | default) -> iolist().
head(Status, Headers, Length, Conn) ->
    [<<"HTTP/1.1 ">>, integer_to_binary(Status), $\s, reason(Status), <<"\r\n">>,
     date_line(),
     [[Name, <<": ">>, Value, <<"\r\n">>] || {Name, Value} <- Headers],
     length_line(Length), conn_line(Conn), <<"\r\n">>].

length_line(chunked) -> <<"transfer-encoding: chunked\r\n">>;
length_line(none) -> <<>>;
length_line(N) -> [<<"content-length: ">>, integer_to_binary(N), <<"\r\n">>].

conn_line(close) -> <<"connection: close\r\n">>;
conn_line(keep_alive) -> <<"connection: keep-alive\r\n">>;
conn_line(default) -> <<>>.

%% @doc One chunk of a chunked body; an empty piece would end the body, so it yields nothing.
-spec chunk(iodata()) -> iodata().
chunk(Data) ->
    case iolist_size(Data) of
        0 -> [];
        N -> [lower(integer_to_binary(N, 16)), <<"\r\n">>, Data, <<"\r\n">>]
    end.

%% @doc The chunk that ends a chunked body (no trailers).
-spec last_chunk() -> binary().
last_chunk() -> <<"0\r\n\r\n">>.

%% @doc LINE: `0123456789abcdef' four times (64 bytes).
-spec line() -> binary().
line() -> <<"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef">>.

%% @doc BIGLINE: LINE 256 times (16,384 bytes), built once per node and shared by reference.
-spec bigline() -> binary().
bigline() ->
    case persistent_term:get({?MODULE, bigline}, undefined) of
        undefined ->
            %% Written once per node: persistent_term:put is costly only when a term is replaced.
            B = binary:copy(line(), 256),
            persistent_term:put({?MODULE, bigline}, B),
            B;
        B ->
            B
    end.

%% @doc One server-sent event with the given data.
-spec sse_event(iodata()) -> iodata().
sse_event(Data) -> [<<"event: tick\ndata: ">>, Data, <<"\n\n">>].

%% @doc The /headers body: names lowercased in order of first appearance, repeated names joined
%% with `, ', values escaped as docs/wire.md says. Headers are {Name, Value} binaries as received.
-spec headers_json([{binary(), binary()}]) -> binary().
headers_json(Headers) ->
    Merged = merge(Headers, [], #{}),
    Fields = [[$", escape(N), <<"\":\"">>, escape(V), $"] || {N, V} <- Merged],
    iolist_to_binary([${, lists:join($,, Fields), $}]).

merge([], Order, Values) ->
    [{N, iolist_to_binary(lists:join(<<", ">>, lists:reverse(maps:get(N, Values))))}
     || N <- lists:reverse(Order)];
merge([{Name, Value} | Rest], Order, Values) ->
    N = lower(Name),
    case Values of
        #{N := Vs} -> merge(Rest, Order, Values#{N := [Value | Vs]});
        _ -> merge(Rest, [N | Order], Values#{N => [Value]})
    end.

escape(Bin) -> << <<(escape_byte(C))/binary>> || <<C>> <= Bin >>.

escape_byte($") -> <<"\\\"">>;
escape_byte($\\) -> <<"\\\\">>;
escape_byte(C) when C < 16#20 ->
    <<"\\u00", (lower(integer_to_binary(C div 16, 16)))/binary,
      (lower(integer_to_binary(C rem 16, 16)))/binary>>;
escape_byte(C) -> <<C>>.

%% @doc ASCII lowercase of a binary (header names and hex digits; nothing else is decoded).
-spec lower(binary()) -> binary().
lower(Bin) -> << <<(if C >= $A, C =< $Z -> C + 32; true -> C end)>> || <<C>> <= Bin >>.

%% @doc A field value (or one token of a list) without the spaces and tabs at its ends, byte by
%% byte. Not string:trim/1: it reads the bytes as UTF-8 and raises badarg on obs-text (0x80-0xFF),
%% which any client may send in a field value (RFC 9110 5.5).
-spec trim_ows(binary()) -> binary().
trim_ows(<<C, Rest/binary>>) when C =:= $\s; C =:= $\t -> trim_ows(Rest);
trim_ows(V) -> trim_ows_end(V, byte_size(V)).

trim_ows_end(V, N) when N > 0 ->
    case binary:at(V, N - 1) of
        C when C =:= $\s; C =:= $\t -> trim_ows_end(V, N - 1);
        _ -> binary:part(V, 0, N)
    end;
trim_ows_end(_V, 0) -> <<>>.

%% @doc The milliseconds of a /delay/{ms} target: 1 to 5 digits, at most 60000.
-spec delay_param(binary()) -> {ok, 0..60000} | error.
delay_param(Target) ->
    digits(strip_query(Target), <<"/delay/">>, 5, 0, 60000).

%% @doc The code of a /status/{code} target: exactly 3 digits, 200 to 599.
-spec status_param(binary()) -> {ok, 200..599} | error.
status_param(Target) ->
    case strip_query(Target) of
        <<"/status/", D:3/binary>> -> digits(D, <<>>, 3, 200, 599);
        _ -> error
    end.

strip_query(Target) ->
    case binary:match(Target, <<"?">>) of
        nomatch -> Target;
        {Pos, _} -> binary:part(Target, 0, Pos)
    end.

digits(Path, Prefix, MaxDigits, Min, Max) ->
    P = byte_size(Prefix),
    case Path of
        <<Prefix:P/binary, D/binary>> when byte_size(D) >= 1, byte_size(D) =< MaxDigits ->
            case lists:all(fun(C) -> C >= $0 andalso C =< $9 end, binary_to_list(D)) of
                true ->
                    N = binary_to_integer(D),
                    if N >= Min, N =< Max -> {ok, N}; true -> error end;
                false -> error
            end;
        _ -> error
    end.
