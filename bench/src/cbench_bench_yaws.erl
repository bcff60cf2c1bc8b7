%% @doc yaws (Debian `erlang-yaws', installed under /usr/lib/yaws) as a peer in the node under test:
%% embedded, on a free port of 127.0.0.1, with Nagle's algorithm off (`nodelay' in its listen
%% options) and its access and auth logs off, as the ewe benchmark configures it. The routes are
%% an appmod (out/1); the files and /large are yaws' own static file serving from the document
%% root. yaws_api's accessors read the request, so that this module compiles without yaws' headers.
%%
%% /hello and POST /echo answer with `content-length'; the request body arrives in pieces of at
%% most ?PIECE bytes (partial_post_size): /echo gathers them, /echo/chunked answers each piece
%% read as one chunk (yaws answers once the body is read whole, so the chunks follow the last
%% piece). The /stream and /sse routes are chunked answers written by a process of their own
%% (streamcontent_from_pid, yaws' streaming API), the events as the route contract frames them.
-module(cbench_bench_yaws).

-export([start/2, out/1]).

-define(ID, "cbench_bench").
-define(PIECE, 4096).
-define(EBIN, "/usr/lib/yaws/ebin").

%% @doc Starts yaws embedded with Acceptors acceptors serving DocRoot (its log directory, which
%% gets only its error report, beside it); {ok, Port} or {skip, Why}.
-spec start(file:filename(), pos_integer()) -> {ok, inet:port_number()} | {skip, binary()}.
start(DocRoot, Acceptors) ->
    _ = filelib:is_dir(?EBIN) andalso code:add_patha(?EBIN),
    case code:ensure_loaded(yaws) of
        {module, _} ->
            Port = cbench_bench_os:free_port(),
            LogDir = filename:join(DocRoot, "../yaws-logs"),
            ok = filelib:ensure_path(LogDir),
            SL = [{port, Port}, {listen, {127, 0, 0, 1}}, {servername, "cbench-bench"},
                  {appmods, [{"/hello", ?MODULE}, {"/echo", ?MODULE}, {"/stream", ?MODULE},
                             {"/sse", ?MODULE}]},
                  {flags, [{access_log, false}, {auth_log, false}]}, {partial_post_size, ?PIECE},
                  {soptions, [{listen_opts, [{backlog, 1024}, {nodelay, true}]}]}],
            GL = [{id, ?ID}, {logdir, LogDir}, {copy_errlog, false}, {keepalive_timeout, 120000},
                  {keepalive_maxuses, nolimit}, {acceptor_pool_size, max(8, Acceptors)}],
            try yaws:start_embedded(DocRoot, SL, GL, ?ID) of
                ok -> {ok, Port};
                Other -> {skip, fmt("yaws: ~0p", [Other])}
            catch C:R -> {skip, fmt("yaws: ~0p:~0p", [C, R])}
            end;
        _ ->
            {skip, <<"yaws is not installed (apt-get install erlang-yaws)">>}
    end.

%% @doc One request, or the next piece of its body (yaws' appmod callback).
-spec out(term()) -> term().
out(Arg) ->
    Req = yaws_api:arg_req(Arg),
    {abs_path, Path} = yaws_api:http_request_path(Req),
    route(yaws_api:http_request_method(Req), Path, Arg).

route('GET', "/hello", _) ->
    [{status, 200}, {content, "text/plain", <<"Hello, Joe!">>}];
route('POST', "/echo", Arg) ->
    body(Arg, fun(Pieces) -> [{status, 200}, {content, "application/octet-stream", Pieces}] end);
route('POST', "/echo/chunked", Arg) ->
    body(Arg, fun(Pieces) -> stream(Arg, "application/octet-stream", [], Pieces) end);
route('GET', "/stream", Arg) ->
    stream(Arg, "text/plain", [], [<<"hello, ">>, <<"Joe!">>]);
route('GET', "/stream/small", Arg) ->
    stream(Arg, "application/octet-stream", [], lists:duplicate(100, line()));
route('GET', "/stream/big", Arg) ->
    stream(Arg, "application/octet-stream", [], lists:duplicate(64, bigline()));
route('GET', "/sse", Arg) ->
    sse(Arg, lists:duplicate(32, line()));
route('GET', "/sse/small", Arg) ->
    sse(Arg, lists:duplicate(100, line()));
route('GET', "/sse/big", Arg) ->
    sse(Arg, lists:duplicate(64, bigline()));
route(_, _, _) ->
    [{status, 404}, {content, "text/plain", <<"not found">>}].

%% The request body in pieces: yaws calls out/1 again for each piece while the answer asks for
%% more; the pieces so far travel in the continuation's state.
body(Arg, Answer) ->
    Got = case yaws_api:arg_state(Arg) of undefined -> []; S -> S end,
    case yaws_api:arg_clidata(Arg) of
        {partial, Piece} -> {get_more, yaws_api:arg_cont(Arg), [Piece | Got]};
        <<>> when Got =:= [] -> Answer([]);
        Piece -> Answer(lists:reverse([Piece | Got]))
    end.

sse(Arg, Lines) ->
    stream(Arg, "text/event-stream", [{header, {cache_control, "no-cache"}}],
           [[<<"event: tick\ndata: ">>, L, <<"\n\n">>] || L <- Lines]).

%% A chunked answer written by a process of its own on the connection's socket: yaws tells it
%% when the headers are out ({ok, YawsPid}) or that the answer is dropped ({discard, YawsPid}).
stream(Arg, Type, Headers, Pieces) ->
    Sock = yaws_api:arg_clisock(Arg),
    Pid = spawn(fun() ->
                        receive
                            {ok, YawsPid} ->
                                [ok = yaws_api:stream_process_deliver_chunk(Sock, P) || P <- Pieces, P =/= <<>>],
                                yaws_api:stream_process_deliver_final_chunk(Sock, <<>>),
                                yaws_api:stream_process_end(Sock, YawsPid);
                            {discard, YawsPid} ->
                                yaws_api:stream_process_end(Sock, YawsPid)
                        end
                end),
    [{status, 200}] ++ Headers ++ [{streamcontent_from_pid, Type, Pid}].

line() -> <<"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef">>.

bigline() ->
    case persistent_term:get({?MODULE, bigline}, undefined) of
        undefined ->
            B = binary:copy(line(), 256),
            persistent_term:put({?MODULE, bigline}, B),
            B;
        B -> B
    end.

fmt(F, A) -> iolist_to_binary(io_lib:format(F, A)).
