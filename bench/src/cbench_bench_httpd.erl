%% @doc OTP inets httpd as a peer in the node under test: a request-handling module
%% (the httpd `do/1' callback) for the routes httpd can serve in its own style.
%%
%% /hello, POST /echo and the /stream routes (chunked, as mod_esi streams) are
%% answered here; the files are left to mod_get (next in the module list) from a
%% document root that holds file/tiny, file/small and file/big. httpd reads request
%% bodies whole (no echo/chunked) and has no event-stream API (no sse): those get
%% 404 and show `-', as in the published tables.
-module(cbench_bench_httpd).

-export([do/1]).

-include_lib("inets/include/httpd.hrl").

do(#mod{method = "GET", request_uri = "/hello" ++ Q} = _Mod) when Q =:= []; hd(Q) =:= $? ->
    reply(<<"text/plain">>, <<"Hello, Joe!">>);
do(#mod{method = "POST", request_uri = "/echo", entity_body = Body}) ->
    reply(<<"application/octet-stream">>, iolist_to_binary(Body));
do(#mod{method = "GET", request_uri = "/stream"} = Mod) ->
    chunked(Mod, "text/plain", [<<"hello, ">>, <<"Joe!">>]);
do(#mod{method = "GET", request_uri = "/stream/small"} = Mod) ->
    chunked(Mod, "application/octet-stream", lists:duplicate(100, line()));
do(#mod{method = "GET", request_uri = "/stream/big"} = Mod) ->
    chunked(Mod, "application/octet-stream", lists:duplicate(64, binary:copy(line(), 256)));
do(#mod{data = Data}) ->
    {proceed, Data}.

line() -> <<"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef">>.

%% A chunked response written piece by piece, the way mod_esi streams one.
chunked(Mod = #mod{data = Data}, Type, Pieces) ->
    httpd_response:send_header(Mod, 200, [{content_type, Type}, {transfer_encoding, "chunked"}]),
    [httpd_response:send_chunk(Mod, P, false) || P <- Pieces],
    httpd_response:send_final_chunk(Mod, false),
    {proceed, [{response, {already_sent, 200, 0}} | Data]}.

reply(Type, Body) ->
    Head = [{code, 200}, {content_type, binary_to_list(Type)},
            {content_length, integer_to_list(byte_size(Body))}],
    {break, [{response, {response, Head, [Body]}}]}.
