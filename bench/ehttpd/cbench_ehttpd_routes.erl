%%% @doc The route-table benchmark of the ehttpd engine (issue 9; make bench-ehttpd-routes): the node's
%%% CPU time per request, in one run, for
%%%   builtin_hello / stub_hello      the fixture /hello vs a stub answering the same bytes
%%%   route_1 / routes_100            one stub vs 100 stubs requested round robin (h2load -i)
%%%   journal_off / journal_on        /hello with the journal off vs on
%%% Each case starts a server with one acceptor; h2load --h1 (one thread, pinned to the last CPU)
%%% sends Requests requests after a warm-up of a fifth of that. Run it in a node started with
%%% `+S 1 +sbt db +sbwt none', pinned to CPU 0.
-module(cbench_ehttpd_routes).

-export([main/1]).

-define(HELLO, #{headers => [{"content-type", "text/plain"}], body => <<"Hello, Joe!">>}).

%% @doc Runs every case with Requests requests each and prints one line per case and the ratios.
-spec main([string()]) -> no_return().
main([Requests, LoadCpu]) ->
    N = list_to_integer(Requests),
    {ok, _} = application:ensure_all_started(cbench),
    Cases = [{builtin_hello, #{}, fun(_) -> ["/hello"] end},
             {stub_hello, #{}, fun(S) -> {ok, _} = cbench:stub(S, #{method => get, path => "/hello2"}, ?HELLO),
                                         ["/hello2"] end},
             {route_1, #{}, fun(S) -> stubs(S, 1) end},
             {routes_100, #{}, fun(S) -> stubs(S, 100) end},
             {journal_off, #{journal => 0}, fun(_) -> ["/hello"] end},
             {journal_on, #{journal => 10000}, fun(_) -> ["/hello"] end}],
    Us = [{Name, run(Name, Opts, Setup, N, LoadCpu)} || {Name, Opts, Setup} <- Cases],
    [io:format("~-16s ~8.2f us CPU per request~n", [Name, U]) || {Name, U} <- Us],
    Ratio = fun(A, B) -> proplists:get_value(A, Us) / proplists:get_value(B, Us) end,
    io:format("stub_hello / builtin_hello  ~.3f~nroutes_100 / route_1       ~.3f~n"
              "journal_on / journal_off   ~.3f~n",
              [Ratio(stub_hello, builtin_hello), Ratio(routes_100, route_1),
               Ratio(journal_on, journal_off)]),
    halt(0).

%% N stubs of the shapes a REST service has (as bench/routes.sh): exact paths under many first
%% segments, exact paths sharing one, and {param} routes; returns a path for each.
stubs(S, N) ->
    [begin
         {Pattern, Path} = case I rem 3 of
                               0 -> {"/api/v1/res~b", "/api/v1/res~b"};
                               1 -> {"/svc~b/items", "/svc~b/items"};
                               2 -> {"/users~b/{id}/profile", "/users~b/42/profile"}
                           end,
         {ok, _} = cbench:stub(S, #{method => get, path => io_lib:format(Pattern, [I])}, ?HELLO),
         lists:flatten(io_lib:format(Path, [I]))
     end || I <- lists:seq(0, N - 1)].

run(Name, Opts, Setup, N, LoadCpu) ->
    {ok, S} = cbench:start_server(ehttpd, Opts#{port => 0, threads => 1}),
    Paths = Setup(S),
    Uris = filename:join("/tmp", "cbench-ehttpd-routes-" ++ atom_to_list(Name)),
    ok = file:write_file(Uris, [[cbench:url(S, P), "\n"] || P <- Paths]),
    Load = fun(Count) ->
                   os:cmd(lists:flatten(io_lib:format("taskset -c ~s h2load --h1 -n ~b -c 10 -i ~s",
                                                      [LoadCpu, Count, Uris])))
           end,
    _ = Load(N div 5),
    T0 = cpu_us(),
    Out = Load(N),
    T1 = cpu_us(),
    ok = cbench:stop_server(S),
    _ = file:delete(Uris),
    {match, [Ok]} = re:run(Out, "([0-9]+) succeeded", [{capture, all_but_first, list}]),
    N = list_to_integer(Ok),  % every request succeeded, or the case fails
    (T1 - T0) / N.

%% This node's user + system CPU time (clock ticks of 10 ms).
cpu_us() ->
    {ok, B} = file:read_file("/proc/self/stat"),
    [_, Rest] = binary:split(B, <<") ">>),
    F = binary:split(Rest, <<" ">>, [global]),
    (binary_to_integer(lists:nth(12, F)) + binary_to_integer(lists:nth(13, F))) * 10000.
