%% @doc mochiweb (Debian `erlang-mochiweb') as a peer in the node under test: started on a free
%% port of 127.0.0.1 with Nagle's algorithm off (`nodelay', as the ewe benchmark sets it; mochiweb
%% keeps no access log), serving the cases of the route contract in its own style.
%%
%% /hello and POST /echo answer with `content-length'; POST /echo/chunked reads the body piece by
%% piece (stream_body/4) and writes each piece as a chunk of a chunked answer; the /stream routes
%% are chunked answers written chunk by chunk; the files and /large come from the document root
%% through serve_file/3. mochiweb has no event-stream API, so /sse* get 404 and show `-', as in the
%% published tables.
-module(cbench_bench_mochiweb).

-export([start/2, loop/2]).

-define(NAME, cbench_bench_mochiweb).
%% Pieces of a streamed request body: the size at which stream_body/4 hands one on.
-define(PIECE, 4096).

%% @doc Starts mochiweb with Acceptors acceptors serving DocRoot; {ok, Port} or {skip, Why}.
-spec start(file:filename(), pos_integer()) -> {ok, inet:port_number()} | {skip, binary()}.
start(DocRoot, Acceptors) ->
    case code:ensure_loaded(mochiweb_http) of
        {module, _} ->
            Loop = fun(Req) -> ?MODULE:loop(Req, DocRoot) end,
            Opts = [{name, ?NAME}, {ip, {127, 0, 0, 1}}, {port, 0}, {nodelay, true},
                    {acceptor_pool_size, max(16, Acceptors)}, {max, 100000}, {loop, Loop}],
            %% The server is linked to the process that starts it, and the harness calls this
            %% from a process that ends with the call: a holder of its own keeps it up.
            Parent = self(),
            Ref = make_ref(),
            _ = spawn(fun() ->
                              Parent ! {Ref, try mochiweb_http:start(Opts) catch C:R -> {C, R} end},
                              receive stop -> ok end
                      end),
            receive
                {Ref, {ok, _}} -> {ok, mochiweb_socket_server:get(?NAME, port)};
                {Ref, Other} -> {skip, fmt("mochiweb: ~0p", [Other])}
            after 30000 -> {skip, <<"mochiweb: did not start within 30 s">>}
            end;
        _ ->
            {skip, <<"mochiweb is not installed (apt-get install erlang-mochiweb)">>}
    end.

%% @doc One request (mochiweb's loop callback).
-spec loop(term(), file:filename()) -> term().
loop(Req, DocRoot) ->
    route(mochiweb_request:get(method, Req), mochiweb_request:get(path, Req), Req, DocRoot).

route('GET', "/hello", Req, _) ->
    mochiweb_request:respond({200, [{"content-type", "text/plain"}], <<"Hello, Joe!">>}, Req);
route('POST', "/echo", Req, _) ->
    Body = case mochiweb_request:recv_body(Req) of undefined -> <<>>; B -> B end,
    mochiweb_request:respond({200, [{"content-type", "application/octet-stream"}], Body}, Req);
route('POST', "/echo/chunked", Req, _) ->
    Resp = mochiweb_request:respond({200, [{"content-type", "application/octet-stream"}], chunked}, Req),
    Echo = fun({_Size, Piece}, Acc) -> chunk(Resp, Piece), Acc;
              ({_Size, Piece, _}, Acc) -> chunk(Resp, Piece), Acc
           end,
    _ = mochiweb_request:stream_body(?PIECE, Echo, ok, Req),
    mochiweb_response:write_chunk(<<>>, Resp);
route('GET', "/stream", Req, _) ->
    chunked(Req, "text/plain", [<<"hello, ">>, <<"Joe!">>]);
route('GET', "/stream/small", Req, _) ->
    chunked(Req, "application/octet-stream", lists:duplicate(100, line()));
route('GET', "/stream/big", Req, _) ->
    chunked(Req, "application/octet-stream", lists:duplicate(64, bigline()));
route('GET', "/file/" ++ Name, Req, DocRoot) ->
    mochiweb_request:serve_file("file/" ++ Name, DocRoot, [{"content-type", "application/octet-stream"}], Req);
route('GET', "/large", Req, DocRoot) ->
    mochiweb_request:serve_file("large", DocRoot, [{"content-type", "application/octet-stream"}], Req);
route(_, _, Req, _) ->
    mochiweb_request:not_found(Req).

%% An empty piece would end the answer: write_chunk/2 sends the last chunk for it.
chunk(_Resp, <<>>) -> ok;
chunk(Resp, Piece) -> mochiweb_response:write_chunk(Piece, Resp).

chunked(Req, Type, Pieces) ->
    Resp = mochiweb_request:respond({200, [{"content-type", Type}], chunked}, Req),
    [mochiweb_response:write_chunk(P, Resp) || P <- Pieces],
    mochiweb_response:write_chunk(<<>>, Resp).

line() -> <<"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef">>.

%% BIGLINE (16 KiB), made once per node and shared by reference, as the cbench engines do.
bigline() ->
    case persistent_term:get({?MODULE, bigline}, undefined) of
        undefined ->
            B = binary:copy(line(), 256),
            persistent_term:put({?MODULE, bigline}, B),
            B;
        B -> B
    end.

fmt(F, A) -> iolist_to_binary(io_lib:format(F, A)).
