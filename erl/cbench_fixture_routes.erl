%%% @doc The fixture routes of docs/wire.md as data: the default entries of every route table, in
%%% the canonical match form of cbench_spec. The C engine keeps its own table (src/routes/route.c, the
%%% source of truth for the C engines); this list must describe the same routes, which
%%% cbench_stub_SUITE checks against the table the NIF lists. The ehttpd engine routes with it; its
%%% handlers are the clauses of cbench_ehttpd:respond/4, one per name.
-module(cbench_fixture_routes).

-export([routes/0, names/0]).

-export_type([name/0, route/0]).

-type name() :: root | hello | json | echo | echo_chunked | file_tiny | file_small | file_big
              | stream | stream_small | stream_big | sse | sse_small | sse_big | delay | status
              | headers | large | cookies | gzip | ws | fault.
-type route() :: #{name := name(), match := cbench_spec:canon_match()}.

%% @doc The fixture routes in the C table's order (exact paths, then the prefix routes).
-spec routes() -> [route()].
routes() ->
    [get(root, "/"), get(hello, "/hello"), get(json, "/json"),
     post(echo, "/echo"), post(echo_chunked, "/echo/chunked"),
     get(file_tiny, "/file/tiny"), get(file_small, "/file/small"), get(file_big, "/file/big"),
     get(stream, "/stream"), get(stream_small, "/stream/small"), get(stream_big, "/stream/big"),
     get(sse, "/sse"), get(sse_small, "/sse/small"), get(sse_big, "/sse/big"),
     get(headers, "/headers"), get(large, "/large"), get(cookies, "/cookies"), get(gzip, "/gzip"),
     get(ws, "/ws"), get(delay, "/delay/*"), get(status, "/status/*"), route(fault, any, "/fault/*")].

%% @doc The route names of the counters: the fixture routes, then not_found (404s).
-spec names() -> [name() | not_found].
names() ->
    [N || #{name := N} <- routes()] ++ [not_found].

get(Name, Path) -> route(Name, get, Path).
post(Name, Path) -> route(Name, post, Path).

route(Name, Method, Path) ->
    {ok, M} = cbench_spec:match(#{method => Method, path => Path}),
    #{name => Name, match => M}.
