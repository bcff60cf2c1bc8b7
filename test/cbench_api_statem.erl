%%% @doc One API contract, as a PropEr state machine (issue 21): random sequences of the public
%%% calls (stub, expect, unstub, reset, requests, verify, await, handle, reply, down, up, stats,
%%% stubs) with good and hostile arguments (negative and 2^64 integers, improper lists, 1 MiB and
%%% 32 MiB binaries, atoms, dead pids, maps of the wrong shape), and real HTTP requests over
%%% gen_tcp in between. Every call goes to a nif, a port and an ehttpd server in turn; the
%%% postcondition asserts that each server process survived, that the three engines gave the same
%%% result (ids and sequence numbers left out) and that it is the one the model predicts: the
%%% class (`ok', `{ok, _}', an exact `{error, Reason}', or a `badarg' exception), the journal as
%%% {Method, Path, Status}, and stubs/1 as {Path, response | handler, Hits}. For a bad stub only
%%% the class `{error, {bad_stub, _}}' is predicted (its detail is another issue's); the engines
%%% must still agree on the whole term.
%%%
%%% Hostile terms are written with placeholders ('$dead_pid', '$huge', '$too_large') that are
%%% replaced when the call runs, so that a shrunk counterexample prints small. cbench_proper_SUITE
%%% runs the property; docs/testing.md says how to run it long (`make proper').
-module(cbench_api_statem).

-include_lib("proper/include/proper.hrl").

-export([prop_one_contract/0, start/0, stop/0]).
-export([initial_state/0, command/1, precondition/2, postcondition/3, next_state/3]).
-export([stub/3, expect/4, unstub/1, reset/0, requests/2, verify/0, await/4, handle/4,
         reply/1, down/0, up/0, stats/0, stubs/0, http/2]).

-define(ENGINES, [nif, port, ehttpd]).
-define(KEY, {?MODULE, servers}).
-define(PATHS, [<<"/p/a">>, <<"/p/b">>]).
-define(MAX_BODY, (32 bsl 20)).

%% The model. Routes newest first: #{ref, path, kind => stub | handler, status, count, hits};
%% the journal oldest first: {Method, Path, Status, Ref | undefined}; requests: answered since
%% the sequence began (stats/1).
-record(m, {routes = [] :: [map()], journal = [] :: [tuple()], up = true :: boolean(),
            requests = 0 :: non_neg_integer()}).

%%% ---- running it ----

%% @doc Starts one server per engine (and the handler process behind live handler routes).
-spec start() -> ok.
start() ->
    {ok, _} = application:ensure_all_started(cbench),
    Servers = [{E, start(E)} || E <- ?ENGINES],
    Dead = spawn(fun() -> ok end),
    Mon = erlang:monitor(process, Dead),
    receive {'DOWN', Mon, process, Dead, _} -> ok end,
    Live = spawn(fun responder/0),
    persistent_term:put(?KEY, #{servers => Servers, dead => Dead, live => Live,
                                huge => binary:copy(<<"h">>, 1 bsl 20),
                                too_large => binary:copy(<<"t">>, ?MAX_BODY + 1)}),
    ok.

start(E) ->
    {ok, S} = cbench:start_server(E, #{port => 0, threads => 1}),
    S.

%% @doc Stops them.
-spec stop() -> ok.
stop() ->
    #{servers := Servers, live := Live} = persistent_term:get(?KEY),
    [cbench:stop_server(S) || {_, S} <- Servers],
    exit(Live, kill),
    persistent_term:erase(?KEY),
    ok.

%% A live handler: answers every request 200 "h".
responder() ->
    receive
        {cbench_request, Req} -> _ = cbench:reply(Req, 200, [], <<"h">>)
    end,
    responder().

%% @doc The property: every sequence starts from the fixture table, an empty journal and a server
%% that listens; a server that died in an earlier sequence (a failure already) is started again.
prop_one_contract() ->
    ?FORALL(Cmds, proper_statem:commands(?MODULE),
            begin
                fresh(),
                {History, State, Result} = run(Cmds),
                ?WHENFAIL(io:format("history: ~p~nstate: ~p~nresult: ~p~n",
                                    [History, State, Result]),
                          aggregate(proper_statem:command_names(Cmds), Result =:= ok))
            end).

%% run_commands/2, with any exception turned into a failed result (see each/2).
run(Cmds) ->
    try proper_statem:run_commands(?MODULE, Cmds)
    catch C:Why:St -> {[], none, {exception, C, Why, St}}
    end.

fresh() ->
    P = #{servers := Servers} = persistent_term:get(?KEY),
    Fresh = [{E, case is_process_alive(S) of
                     true -> S;
                     false -> start(E)
                 end} || {E, S} <- Servers],
    persistent_term:put(?KEY, P#{servers := Fresh}),
    [begin ok = cbench:up(S), ok = cbench:reset(S) end || {_, S} <- Fresh],
    put(baseline, [{E, maps:get(requests, cbench:stats(S))} || {E, S} <- Fresh]),
    ok.

%%% ---- the model ----

initial_state() -> #m{}.

command(#m{routes = Routes, journal = J}) ->
    Refs = [R || #{ref := R} <- Routes] ++ [R || {_, _, _, R} <- J, R =/= undefined],
    frequency(
      [{6, {call, ?MODULE, http, [elements([<<"GET">>, <<"POST">>]),
                                  elements(?PATHS ++ [<<"/hello">>, <<"/nope">>])]}},
       {4, ?LET({M, R, Class}, stub_args(), {call, ?MODULE, stub, [M, R, Class]})},
       {2, ?LET({Count, Class}, expect_count(),
                {call, ?MODULE, expect, [elements(?PATHS), small_body(), Count, Class]})},
       {2, ?LET({Target, Opts, Class}, handler_args(),
                {call, ?MODULE, handle, [elements(?PATHS), Target, Opts, Class]})},
       {2, {call, ?MODULE, unstub, [id(Refs)]}},
       {1, {call, ?MODULE, reset, []}},
       {3, ?LET({F, Class}, filter(Refs), {call, ?MODULE, requests, [F, Class]})},
       {2, {call, ?MODULE, verify, []}},
       {2, ?LET({F, N, T, Class}, await_args(), {call, ?MODULE, await, [F, N, T, Class]})},
       {2, {call, ?MODULE, reply, [attempts()]}},
       {1, {call, ?MODULE, down, []}},
       {2, {call, ?MODULE, up, []}},
       {1, {call, ?MODULE, stats, []}},
       {2, {call, ?MODULE, stubs, []}}]).

small_body() -> elements([<<>>, <<"x">>, <<"body">>]).

%% {Match, Response, the class every engine must give}.
stub_args() ->
    oneof([{elements(?PATHS), ?LET({S, B}, {elements([200, 201, 418]), small_body()},
                                   #{status => S, body => B}), ok},
           elements([{42, #{}, badarg},
                     {atom, #{}, badarg},
                     {'$dead_pid', #{}, badarg},
                     {<<"/p/a">>, not_a_map, badarg},
                     {<<"/p/a">>, [{status, 200}], badarg},
                     {[$/, $p | x], #{}, bad_stub},
                     {[#{}], #{}, bad_stub},
                     {#{path => 1 bsl 64}, #{}, bad_stub},
                     {#{path => <<"/p/a">>, bogus => 1}, #{}, bad_stub},
                     {#{path => <<"/p/a">>, method => 1 bsl 64}, #{}, bad_stub},
                     {#{path => <<"/p/a">>, priority => -(1 bsl 64)}, #{}, bad_stub},
                     {'$huge', #{}, bad_stub},
                     {<<"/p/a">>, #{status => -1}, bad_stub},
                     {<<"/p/a">>, #{status => 1 bsl 64}, bad_stub},
                     {<<"/p/a">>, #{status => atom}, bad_stub},
                     {<<"/p/a">>, #{body => '$dead_pid'}, bad_stub},
                     {<<"/p/a">>, #{headers => [a | b]}, bad_stub},
                     {<<"/p/a">>, #{headers => [{<<"x">>, <<"a\r\nb">>}]}, bad_stub},
                     {<<"/p/a">>, #{times => 0}, bad_stub},
                     {<<"/p/a">>, #{bogus => 1}, bad_stub}])]).

expect_count() ->
    oneof([?LET(N, range(0, 3), {#{times => N}, ok}),
           ?LET(N, range(0, 2), {#{at_least => N}, ok}),
           elements([{#{times => -1}, bad_expect},
                     {#{at_least => -(1 bsl 64)}, bad_expect},
                     {#{bogus => 1}, bad_expect},
                     {#{times => 1, at_least => 1}, bad_expect},
                     {not_a_map, badarg},
                     {[times | 1], badarg}])]).

handler_args() ->
    oneof([{elements([live, '$dead_pid', cbench_no_such_process]), #{}, ok},
           elements([{live, #{timeout_ms => -1}, {error, {bad_handler, {{handler, timeout_ms}, -1, out_of_range}}}},
                     {live, #{timeout_ms => 1 bsl 64},
                      {error, {bad_handler, {{handler, timeout_ms}, 1 bsl 64, out_of_range}}}},
                     {live, #{bogus => 1}, {error, {bad_handler, {{handler, bogus}, 1, unknown_key}}}},
                     {live, #{batch => yes}, {error, {bad_handler, {{handler, batch}, yes, wrong_type}}}},
                     {live, not_a_map, badarg},
                     {42, #{}, badarg},
                     {"name", #{}, badarg},
                     {{cbench, "f"}, #{}, badarg}])]).

id([]) -> hostile_id();
id(Refs) -> oneof([elements(Refs), hostile_id()]).

hostile_id() -> elements([0, -1, 1 bsl 64, (1 bsl 64) - 1, 1 bsl 200, atom, 1.0, [1 | 2]]).

%% {Filter, the class}: `journal' for a filter whose answer is predicted from the model.
filter(Refs) ->
    oneof([{#{}, journal},
           ?LET(P, elements(?PATHS), {#{path => P}, journal}),
           {#{method => get}, journal},
           ?LET(R, id(Refs), {#{stub => R}, stub_filter_class(R)}),
           elements([{#{since => -1}, {error, {bad_filter, {{filter, since}, -1, out_of_range}}}},
                     {#{since => 1 bsl 64}, {error, {bad_filter, {{filter, since}, 1 bsl 64, out_of_range}}}},
                     {#{bogus => 1}, {error, {bad_filter, {{filter, bogus}, 1, unknown_key}}}},
                     {#{method => 7}, {error, {bad_filter, {{filter, method}, 7, wrong_type}}}},
                     {#{path => [$/ | x]}, {error, {bad_filter, {{filter, path}, [$/ | x], wrong_type}}}},
                     {#{stub => 1.0}, {error, {bad_filter, {{filter, stub}, 1.0, wrong_type}}}},
                     {#{proto => [http1 | x]}, {error, {bad_filter, {{filter, proto}, [http1 | x], wrong_type}}}},
                     {[a | b], badarg},
                     {not_a_map, badarg}])]).

%% A route (a symbolic result here) or any integer is a stub id to filter on; anything else is
%% a bad filter.
stub_filter_class({var, _}) -> journal;
stub_filter_class(I) when is_integer(I) -> journal;
stub_filter_class(T) -> {error, {bad_filter, {{filter, stub}, T, wrong_type}}}.

await_args() ->
    oneof([?LET({N, P}, {range(1, 3), elements([any | ?PATHS])},
                {case P of any -> #{}; _ -> #{path => P} end, N, 0, journal}),
           elements([{#{}, 0, 0, badarg}, {#{}, -1, 0, badarg}, {#{}, a, 0, badarg},
                     {#{}, 1, -1, badarg}, {#{}, 1, 1 bsl 32, badarg}, {[a | b], 1, 0, badarg},
                     {#{stub => 1 bsl 64}, 1, 0, journal},
                     {#{since => -1}, 1, 0, {error, {bad_filter, {{filter, since}, -1, out_of_range}}}}])]).

%% What a handler tries before the request is answered, in order: whole answers, pieces, ends.
attempts() ->
    list(oneof([?LET({S, B}, {elements([200, 202]), small_body()}, {reply, S, [], B}),
                {send, <<"piece">>},
                finish,
                elements([{reply, 99, [], <<>>}, {reply, 1 bsl 64, [], <<>>},
                          {reply, ok, [], <<>>}, {reply, 204, [], <<"x">>},
                          {reply, 200, [a | b], <<>>}, {reply, 200, [{<<"a b">>, <<"1">>}], <<>>},
                          {reply, 200, [{<<"date">>, <<"1">>}], <<>>},
                          {reply, 200, [{<<"x">>, <<"a\nb">>}], <<>>},
                          {reply, 200, [{<<"x">>, '$huge'}], <<>>},
                          {reply, 200, [], '$too_large'}, {reply, 200, [], [<<"a">> | b]},
                          {reply, 200, [], '$dead_pid'}, {send, '$dead_pid'}])])).

precondition(_, _) -> true.

next_state(M = #m{routes = Rs}, Res, {call, _, stub, [Match, Response, ok]}) ->
    M#m{routes = [#{ref => Res, path => path(Match), kind => stub,
                    status => maps:get(status, Response), count => none, hits => 0} | Rs]};
next_state(M = #m{routes = Rs}, Res, {call, _, expect, [Path, _, Count, ok]}) ->
    M#m{routes = [#{ref => Res, path => Path, kind => stub, status => 200, count => Count,
                    hits => 0} | Rs]};
next_state(M = #m{routes = Rs}, Res, {call, _, handle, [Path, Target, _, ok]}) ->
    M#m{routes = [#{ref => Res, path => Path, kind => handler, count => none, hits => 0,
                    status => case Target of live -> 200; _ -> 503 end} | Rs]};
next_state(M = #m{routes = Rs}, _Res, {call, _, unstub, [Id]}) ->
    M#m{routes = [R || R = #{ref := Ref} <- Rs, Ref =/= Id]};
next_state(M, _Res, {call, _, reset, []}) ->
    M#m{routes = [], journal = []};
next_state(M, _Res, {call, _, down, []}) ->
    M#m{up = false};
next_state(M, _Res, {call, _, up, []}) ->
    M#m{up = true};
next_state(M = #m{up = false}, _Res, {call, _, http, _}) ->
    M;
next_state(M = #m{journal = J, requests = N}, _Res, {call, _, http, [Method, Path]}) ->
    {Status, Ref, M1} = route(M, Method, Path),
    M1#m{journal = J ++ [{Method, Path, Status, Ref}], requests = N + 1};
next_state(M = #m{up = false}, _Res, {call, _, reply, _}) ->
    M;
next_state(M = #m{journal = J, requests = N}, _Res, {call, _, reply, [Attempts]}) ->
    {_, Status} = reply_results(Attempts),
    M#m{journal = J ++ [{<<"GET">>, <<"/r">>, Status, undefined}], requests = N + 1};
next_state(M, _Res, _Call) ->
    M.

path(P) when is_binary(P) -> P.

%% Which route answers: the newest route of the path, then the fixture routes.
route(M = #m{routes = Rs}, Method, Path) ->
    case lists:splitwith(fun(#{path := P}) -> P =/= Path end, Rs) of
        {Before, [R = #{ref := Ref, status := S, hits := H} | After]} ->
            {S, Ref, M#m{routes = Before ++ [R#{hits := H + 1} | After]}};
        {_, []} when Path =:= <<"/hello">>, Method =:= <<"GET">> -> {200, undefined, M};
        {_, []} when Path =:= <<"/hello">> -> {405, undefined, M};
        {_, []} -> {404, undefined, M}
    end.

postcondition(M, {call, _, Fun, Args}, Res) ->
    Expected = expected(M, Fun, Args),
    %% PropEr 1.2 takes only true or false; the why goes to the log.
    Why = case same(Res) of
              {ok, Got} ->
                  match(Expected, Got) orelse {expected, Expected, got, Got};
              Diff -> Diff
          end,
    Why =:= true orelse io:format("~s~p: ~p~n", [banner(), Fun, Why]),
    Why =:= true.

banner() -> "postcondition failed: ".

%% All engines alive and giving one normalised answer (a route's id left out).
same(Res) ->
    case [{E, N} || {E, N} <- Res, is_tuple(N), element(1, N) =:= server_died] of
        [] ->
            case lists:usort([comparable(N) || {_, N} <- Res]) of
                [One] -> {ok, One};
                _ -> {engines_differ, Res}
            end;
        Dead -> {server_died, Dead}
    end.

comparable({route, Class, _Id}) -> Class;
comparable(N) -> N.

match({bad_stub, '_'}, {error, {bad_stub, _}}) -> true;
match(E, G) -> E =:= G.

expected(_, stub, [_, _, ok]) -> {ok, id};
expected(_, stub, [_, _, badarg]) -> badarg;
expected(_, stub, [_, _, bad_stub]) -> {bad_stub, '_'};
expected(_, expect, [_, _, _, ok]) -> {ok, id};
expected(_, expect, [_, _, _, badarg]) -> badarg;
expected(_, expect, [_, _, Count, bad_expect]) -> {error, {bad_stub, {expect, Count, wrong_type}}};
expected(_, handle, [_, _, _, ok]) -> {ok, id};
expected(_, handle, [_, _, _, Class]) -> Class;
expected(#m{routes = Rs}, unstub, [Id]) ->
    case lists:any(fun(#{ref := R}) -> R =:= Id end, Rs) of
        true -> ok;
        false when is_integer(Id) -> {error, not_found};
        false -> case is_route(Id) of
                     true -> {error, not_found};  % a route removed before
                     false -> badarg
                 end
    end;
expected(_, reset, []) -> ok;
expected(M, requests, [F, journal]) -> journal(M, F);
expected(_, requests, [_, Class]) -> Class;
expected(M, verify, []) -> verify(M);
expected(M, await, [F, N, _, journal]) ->
    Entries = journal(M, F),
    case length(Entries) >= N of
        true -> {ok, lists:sublist(Entries, N)};
        false -> {error, {timeout, Entries}}
    end;
expected(_, await, [_, _, _, Class]) -> Class;
expected(#m{up = false}, reply, _) -> refused;
expected(_, reply, [Attempts]) -> element(1, reply_results(Attempts));
expected(_, down, []) -> ok;
expected(_, up, []) -> ok;
expected(#m{requests = N}, stats, []) -> N;
expected(#m{routes = Rs}, stubs, []) ->
    [{P, K, case K of handler -> '_'; stub -> H end}
     || #{path := P, kind := K, hits := H} <- lists:reverse(Rs)];
expected(#m{up = false}, http, _) -> refused;
expected(M, http, [Method, Path]) -> element(1, route(M, Method, Path)).

is_route([{nif, _}, {port, _}, {ehttpd, _}]) -> true;
is_route(_) -> false.

%% The journal entries a valid filter keeps, as {Method, Path, Status}.
journal(#m{journal = J}, F) ->
    [{Me, P, S} || {Me, P, S, Ref} <- J,
                   maps:get(path, F, P) =:= P,
                   case maps:get(method, F, any) of any -> true; get -> Me =:= <<"GET">> end,
                   case maps:find(stub, F) of error -> true; {ok, R} -> R =:= Ref end].

%% verify/1: each expectation's count, then the requests nothing was set up for.
verify(M = #m{routes = Rs, journal = J}) ->
    Missed = [R || R = #{count := C, hits := H} <- Rs, C =/= none, not met(C, H)],
    Unexpected = [x || {_, _, S, undefined} <- J, S =:= 404 orelse S =:= 405],
    case Missed ++ Unexpected of
        [] -> ok;
        _ -> {error, problems(M)}
    end.

met(#{times := N}, H) -> H =:= N;
met(#{at_least := N}, H) -> H >= N.

%% The problems' order and wording are cbench_expect's; the model predicts that there are some.
problems(_) -> '_'.

%% The results of a handler's attempts and the status the request ends with.
reply_results(Attempts) ->
    {Rs, Status} = lists:mapfoldl(fun attempt/2, none, Attempts),
    {{results, Rs}, case Status of none -> 200; S -> S end}.

attempt({reply, S, H, B}, State) ->
    case reply_check(S, H, B) of
        ok when State =:= none -> {ok, S};
        ok -> {{error, gone}, State};
        Error -> {Error, State}
    end;
attempt({send, D}, State) ->
    case is_binary(D) of
        false -> {badarg, State};
        true when State =:= none -> {{error, not_streaming}, State};
        true -> {{error, gone}, State}
    end;
attempt(finish, none) -> {{error, not_streaming}, none};
attempt(finish, State) -> {{error, gone}, State}.

reply_check(ok, _, _) -> badarg;
reply_check(_, [a | b], _) -> badarg;
reply_check(_, _, '$dead_pid') -> badarg;
reply_check(_, _, [<<"a">> | b]) -> badarg;
reply_check(_, [{N, '$huge'}], _) -> {error, {too_large, {headers, byte_size(N) + (1 bsl 20),
                                                          1 bsl 20}}};
reply_check(_, _, '$too_large') -> {error, {too_large, {body, ?MAX_BODY + 1, ?MAX_BODY}}};
reply_check(S, _, _) when S < 200; S > 599 -> {error, {bad_reply, {{reply, status}, S, out_of_range}}};
reply_check(204, _, B) when B =/= <<>> -> {error, {bad_reply, {{reply, status}, 204, body_not_allowed}}};
reply_check(_, [{<<"a b">> = N, _}], _) -> {error, {bad_reply, {{reply, headers, N}, N, not_a_token}}};
reply_check(_, [{<<"date">> = N, _}], _) -> {error, {bad_reply, {{reply, headers, N}, N, forbidden_header}}};
reply_check(_, [{N, <<"a\nb">> = V}], _) ->
    {error, {bad_reply, {{reply, headers, N}, V, control_char}}};
reply_check(_, _, _) -> ok.

%%% ---- the calls, on every engine ----

%% Fun(Server, Engine) on each server; each result normalised by Norm, or server_died.
each(Fun, Norm) ->
    #{servers := Servers} = persistent_term:get(?KEY),
    [{E, begin
             %% Nothing may escape to PropEr: Debian 12's PropEr 1.2 calls
             %% erlang:get_stacktrace/0 (gone since OTP 23) when a command raises.
             R = try Fun(S, E)
                 catch error:badarg -> badarg;
                       C:Why:St -> {exception, C, Why, hd(St ++ [none])}
                 end,
             case is_process_alive(S) of
                 true -> Norm(R);
                 false -> {server_died, R}
             end
         end} || {E, S} <- Servers].

norm(R) -> R.

stub(Match, Response, _Class) ->
    each(fun(S, _) -> cbench:stub(S, subst(Match), subst(Response)) end, fun norm_id/1).

expect(Path, Body, Count, _Class) ->
    each(fun(S, _) -> cbench:expect(S, Path, #{body => Body}, subst(Count)) end, fun norm_id/1).

handle(Path, Target, Opts, _Class) ->
    each(fun(S, _) -> cbench:handle(S, Path, target(subst(Target)), subst(Opts)) end,
         fun norm_id/1).

target(live) -> maps:get(live, persistent_term:get(?KEY));
target(T) -> T.

%% A route's result keeps each engine's id for the calls that name it later.
norm_id({ok, Id}) when is_integer(Id) -> {route, {ok, id}, Id};
norm_id(R) -> {route, R, none}.

unstub(Id) ->
    each(fun(S, E) -> cbench:unstub(S, engine_id(Id, E)) end, fun norm/1).

%% A symbolic route (the result of stub/3, expect/4 or handle/4) is that engine's id.
engine_id(Res, E) ->
    case is_route(Res) of
        true ->
            case lists:keyfind(E, 1, Res) of
                {E, {route, _, Id}} when is_integer(Id) -> Id;
                _ -> 0  % the route was not added: an id no engine has
            end;
        false -> Res
    end.

reset() -> each(fun(S, _) -> cbench:reset(S) end, fun norm/1).

requests(F, _Class) ->
    each(fun(S, E) -> cbench:requests(S, filter_for(subst(F), E)) end, fun entries/1).

filter_for(F = #{stub := Id}, E) -> F#{stub := engine_id(Id, E)};
filter_for(F, _) -> F.

entries(L) when is_list(L) -> [{Me, P, S} || #{method := Me, path := P, status := S} <- L];
entries(R) -> R.

verify() ->
    each(fun(S, _) -> cbench:verify(S) end,
         fun(ok) -> ok;
            ({error, Problems}) when is_list(Problems), Problems =/= [] -> {error, '_'};
            (R) -> R
         end).

await(F, N, T, _Class) ->
    each(fun(S, E) -> cbench:await(S, filter_for(F, E), N, T) end,
         fun({ok, L}) -> {ok, entries(L)};
            ({error, {timeout, L}}) -> {error, {timeout, entries(L)}};
            (R) -> R
         end).

down() -> each(fun(S, _) -> cbench:down(S) end, fun norm/1).

up() -> each(fun(S, _) -> cbench:up(S) end, fun norm/1).

%% The requests counted since the sequence began.
stats() ->
    Base = get(baseline),
    each(fun(S, E) -> maps:get(requests, cbench:stats(S)) - proplists:get_value(E, Base) end,
         fun norm/1).

stubs() ->
    each(fun(S, _) -> cbench:stubs(S) end,
         fun(L) when is_list(L) ->
                 [{P, kind(I), case kind(I) of handler -> '_'; stub -> H end}
                  || I = #{match := #{path := {exact, P}}, hits := H} <- L];
            (R) -> R
         end).

kind(#{handler := _}) -> handler;
kind(#{response := _}) -> stub.

%% One request on a new connection: the status, or refused while the server is down.
http(Method, Path) ->
    each(fun(S, _) -> status(S, Method, Path) end, fun norm/1).

status(S, Method, Path) ->
    case gen_tcp:connect({127, 0, 0, 1}, cbench:port(S), [binary, {active, false}], 5000) of
        {ok, C} ->
            %% OTP 25's connect now and then says ok for a connection the kernel refused (about
            %% once in 1,000 sequences here, on every engine, while the server is down): the
            %% socket has no peer, and the server counted no accept. That is a refusal.
            case inet:peername(C) of
                {error, enotconn} ->
                    gen_tcp:close(C),
                    refused;
                {ok, _} ->
                    _ = gen_tcp:send(C, [Method, " ", Path, " HTTP/1.1\r\nhost: x\r\n",
                                         "content-length: 0\r\nconnection: close\r\n\r\n"]),
                    Got = read_all(C, <<>>),
                    gen_tcp:close(C),
                    case Got of
                        <<"HTTP/1.1 ", Code:3/binary, _/binary>> -> binary_to_integer(Code);
                        %% Who listens there, for the log.
                        _ -> {no_answer, Got, os:cmd("ss -Htlnp sport = :" ++
                                                        integer_to_list(cbench:port(S)))}
                    end
            end;
        {error, econnrefused} -> refused
    end.

read_all(C, Acc) ->
    case gen_tcp:recv(C, 0, 10000) of
        {ok, D} -> read_all(C, <<Acc/binary, D/binary>>);
        {error, _} = E when Acc =:= <<>> -> E;
        {error, _} -> Acc
    end.

%% A handler route at /r whose process tries Attempts, reports their results and then answers
%% 200 if nothing did; one request to it; the route removed. Returns {results, [Result]}.
reply(Attempts) ->
    Self = self(),
    each(fun(S, _) ->
                 H = spawn(fun() -> scripted(Self, subst(Attempts)) end),
                 {ok, Id} = cbench:handle(S, <<"/r">>, H, #{}),
                 Status = status(S, <<"GET">>, <<"/r">>),
                 ok = cbench:unstub(S, Id),
                 %% The client has its answer as soon as an attempt succeeds, while the handler
                 %% still runs the attempts after it: it is stopped only once it has reported them
                 %% (killed first, a slow run of the rest, 1 MiB values and all, read as no_request).
                 Result = case Status of
                              refused -> refused;
                              _ -> receive {scripted, H, Rs} -> {results, Rs} after 10000 -> no_request end
                          end,
                 exit(H, kill),
                 Result
         end, fun norm/1).

scripted(Test, Attempts) ->
    receive
        {cbench_request, Req} ->
            Rs = [try_attempt(Req, A) || A <- Attempts],
            _ = cbench:reply(Req, 200, [], <<>>),
            Test ! {scripted, self(), Rs},
            receive after infinity -> ok end
    end.

try_attempt(Req, A) ->
    try
        case A of
            {reply, S, H, B} -> cbench:reply(Req, S, H, B);
            {send, D} -> cbench:send(Req, D);
            finish -> cbench:finish(Req)
        end
    catch error:badarg -> badarg
    end.

subst('$dead_pid') -> maps:get(dead, persistent_term:get(?KEY));
subst('$huge') -> maps:get(huge, persistent_term:get(?KEY));
subst('$too_large') -> maps:get(too_large, persistent_term:get(?KEY));
subst([H | T]) -> [subst(H) | subst(T)];
subst(T) when is_tuple(T) -> list_to_tuple(subst(tuple_to_list(T)));
subst(M) when is_map(M) -> maps:from_list(subst(maps:to_list(M)));
subst(X) -> X.
