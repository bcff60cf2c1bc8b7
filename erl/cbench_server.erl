%%% @doc One running server of any engine: a process under cbench_server_sup that owns the engine
%%% (the NIF resource, the port, or the ehttpd listener and acceptors) and stops it in terminate/2.
%%% Besides the engine it keeps what is the same for every engine: the expectations of
%%% cbench:expect/4 and the callers of cbench:await/4, woken by `{cbench_journal, Seq}' messages
%%% that the engine sends while someone waits.
%%%
%%% The engine modules implement the cbench_engine behaviour; every call into them is one of its
%%% callbacks, made from this process.
-module(cbench_server).
-behaviour(gen_server).

-export([start_link/4, call/2, call/3]).
-ignore_xref([{start_link, 4}]). %% the child spec of cbench_server_sup
-export([init/1, handle_call/3, handle_cast/2, handle_info/2, terminate/2]).

-define(CALL_TIMEOUT, 60000).
%% The ids the engines give: 1 and up, in 64 bits (the C engine's uint64_t).
-define(IS_ID(Id), (is_integer(Id) andalso Id >= 1 andalso Id < 1 bsl 64)).

%% @doc Starts the engine; returns {error, Reason} (without a crash report) when it cannot start.
%% Owner (a pid, or none): a process linked to the server, whose exit stops it. Starter: the group
%% leader of the process that asked for the server (answered to `starter' calls, for cbench_cth).
-spec start_link(cbench:engine(), map(), pid() | none, pid()) -> {ok, pid()} | {error, term()}.
start_link(Engine, Opts, Owner, Starter) ->
    proc_lib:start_link(?MODULE, init, [{Engine, Opts, Owner, Starter}]).

%% @doc A synchronous request to a server, or {error, not_running}.
-spec call(pid(), term()) -> term().
call(Pid, Req) ->
    call(Pid, Req, ?CALL_TIMEOUT).

%% @doc The same with a timeout (await/4 waits longer than the default minute).
-spec call(pid(), term(), timeout()) -> term().
call(Pid, Req, Timeout) ->
    %% Only servers are called: any other pid (a dead server, a shell) answers not_running
    %% instead of timing out.
    case whereis(cbench_server_sup) =/= undefined andalso
        lists:member(Pid, cbench_server_sup:servers()) of
        true ->
            try gen_server:call(Pid, Req, Timeout)
            catch exit:{Reason, _} when Reason =:= noproc; Reason =:= normal;
                                        Reason =:= shutdown ->
                    {error, not_running}
            end;
        false ->
            {error, not_running}
    end.

%% @private
init({Engine, Opts, Owner, Starter}) ->
    %% Exits of the engine's linked processes and ports come as messages; shutdown runs terminate/2.
    process_flag(trap_exit, true),
    Mod = cbench_engine:module(Engine),
    case Mod:start(Opts) of
        {ok, H} ->
            %% Linked before the caller hears of the server, so no exit of the owner is missed (an
            %% owner already gone arrives as {'EXIT', Owner, noproc}).
            _ = is_pid(Owner) andalso link(Owner),
            proc_lib:init_ack({ok, self()}),
            gen_server:enter_loop(?MODULE, [], #{engine => Engine, mod => Mod, handle => H,
                                                 opts => Opts, owner => Owner, starter => Starter,
                                                 expects => [],
                                                 stubs => #{}, waiters => cbench_waiters:new(),
                                                 handlers => #{}});
        {error, Reason} ->
            proc_lib:init_ack({error, Reason}),
            exit(normal)
    end.

%% @private
handle_call(Req, From, S) ->
    %% The API checks every term before it gets here; a term that still reaches a NIF it does not
    %% decode (a direct gen_server:call, or a check missed) is refused with {error, badarg} instead
    %% of ending this server and every test that shares it. Other exceptions are bugs and crash.
    try serve(Req, From, S)
    catch error:badarg:Stack ->
            case Stack of
                [{cbench_nif, _, _, _} | _] -> {reply, {error, badarg}, S};
                _ -> erlang:raise(error, badarg, Stack)
            end
    end.

serve(port, _From, S = #{mod := Mod, handle := H}) ->
    {reply, Mod:port(H), S};
serve(tls_port, _From, S = #{mod := Mod, handle := H}) ->
    {reply, case erlang:function_exported(Mod, tls_port, 1) of
                true -> Mod:tls_port(H);
                false -> undefined
            end, S};
serve(starter, _From, S = #{starter := Starter}) ->
    {reply, Starter, S};
serve(stats, _From, S = #{mod := Mod, handle := H}) ->
    {reply, Mod:stats(H), S};
serve(tls, _From, S = #{mod := Mod, handle := H, opts := O}) ->
    %% TLS is on with `tls => true', or with a TLS port beside the cleartext one.
    case maps:get(tls, O, false) orelse maps:get(tls_port, O, undefined) =/= undefined of
        false -> {reply, {error, no_tls}, S};
        true -> {reply, with_client_ca(Mod:tls(H), optional(S, client_ca, [])), S}
    end;
serve({client_cert, Cn}, _From, S) ->
    {reply, optional(S, client_cert, [Cn]), S};
serve(client_ca, _From, S) ->
    %% The client CA as PEM, for cbench:tls/1's client_ca_pem (docs/tls.md).
    {reply, optional(S, client_ca, []), S};
serve(info, _From, S = #{engine := E, mod := Mod, handle := H, opts := O}) ->
    {reply, maps:merge(#{engine => E, port => Mod:port(H), ip => maps:get(ip, O)}, Mod:info(H)),
     S};
serve({stub, Match, Response}, _From, S) ->
    add_stub(S, Match, Response);
serve({expect, Match, Response, Count}, _From, S) ->
    case add_stub(S, Match, Response) of
        {reply, {ok, Id}, S1 = #{expects := Es}} ->
            E = #{id => Id, what => cbench_spec:describe(Match), count => Count, match => Match},
            {reply, {ok, Id}, S1#{expects := Es ++ [E]}};
        Other -> Other
    end;
serve({handle, Match, Target, Opts = #{pool := N}}, _From,
            S = #{stubs := Stubs, handlers := Hs}) ->
    %% An {M, F} target: a pool this server owns; the engine sends to its leader.
    Pid = case Target of
              {M, F} -> cbench_pool:start(M, F, N, self());
              _ -> Target
          end,
    case engine(S, handler_add, [Match, Pid, Opts]) of
        {reply, {ok, Id}, S1} ->
            %% The handler's death fails the requests it holds (503); its monitor is ours.
            Mon = erlang:monitor(process, Pid),
            Pools = maps:get(pools, S1, #{}),
            {reply, {ok, Id},
             S1#{stubs := Stubs#{Id => #{match => Match, handler => Target}},
                 handlers := Hs#{Mon => Id},
                 pools => case Target of {_, _} -> Pools#{Id => Pid}; _ -> Pools end}};
        Other ->
            _ = Pid =/= Target andalso cbench_pool:stop(Pid),
            Other
    end;
serve({unstub, Id}, _From, S) when not ?IS_ID(Id) ->
    %% An integer that cannot be an id is one the engine does not know; no engine is asked (the
    %% NIF would refuse it as a term).
    {reply, {error, not_found}, S};
serve({unstub, Id}, _From, S = #{expects := Es, stubs := Stubs}) ->
    {reply, Reply, S1} = engine(S, route_remove, [Id]),
    {reply, Reply, forget_handlers([Id], S1#{expects := [E || E = #{id := I} <- Es, I =/= Id],
                                             stubs := maps:remove(Id, Stubs)})};
serve(stubs, _From, S = #{mod := Mod, handle := H, stubs := Stubs}) ->
    Reply = case Mod:stubs(H) of
                {error, _} = Error -> Error;
                Infos -> lists:sort(fun(#{id := A}, #{id := B}) -> A =< B end,
                                    [maps:merge(Info, maps:get(Id, Stubs, #{}))
                                     || Info = #{id := Id} <- Infos])
            end,
    {reply, Reply, S};
serve(near_misses, _From, S = #{mod := Mod, handle := H, stubs := Stubs}) ->
    Reply = case {Mod:stubs(H), journal(S, everything(0))} of
                {{error, _} = Error, _} -> Error;
                {_, {error, _} = Error} -> Error;
                {Infos, Journal} ->
                    Known = [{Id, Name, M} || #{id := Id, name := Name} <- Infos,
                                              #{match := M} <- [maps:get(Id, Stubs, #{})]],
                    cbench_expect:near_misses(Known, Journal)
            end,
    {reply, Reply, S};
serve(recorded, _From, S) ->
    {reply, optional(S, recorded, []), S};
serve({save_stubs, File}, _From, S) ->
    {reply, case optional(S, save_stubs, [File]) of {ok, _} -> ok; Other -> Other end, S};
serve(clear_recorded, _From, S) ->
    {reply, optional(S, clear_recorded, []), S};
serve({load_stubs, File}, _From, S = #{mod := Mod, handle := H}) ->
    case erlang:function_exported(Mod, load_stubs, 2) of
        false -> load_stubs_here(S, File);
        true ->
            %% The engine adds the file's stubs in one table; their ids are those the list did not
            %% have.
            Ids = fun() -> case Mod:stubs(H) of
                               {error, _} -> [];
                               Infos -> [Id || #{id := Id} <- Infos]
                           end
                  end,
            Before = Ids(),
            Reply = case Mod:load_stubs(H, File) of
                        {ok, _} -> {ok, lists:sort(Ids() -- Before)};
                        Other -> Other
                    end,
            {reply, Reply, S}
    end;
serve({scenario, Name}, _From, S = #{mod := Mod, handle := H}) ->
    {reply, Mod:scenario(H, Name), S};
serve({scenario, Name, State}, _From, S) ->
    engine(S, scenario_set, [Name, State]);
serve(reset, _From, S) ->
    {reply, Reply, S1} = engine(S, routes_reset, []),
    %% Every scenario back to `started' too (docs/erlang.md).
    {reply, ScenReply, S2 = #{mod := Mod, handle := H}} = engine(S1, scenarios_reset, []),
    Cleared = Mod:journal_clear(H),
    {reply, case {Reply, ScenReply} of {ok, ok} -> Cleared; {ok, _} -> ScenReply; _ -> Reply end,
     forget_handlers(all, S2#{expects := [], stubs := #{}})};
serve({requests, Filter}, _From, S) ->
    Reply = case journal(S, Filter) of
                {error, _} = Error -> Error;
                Entries -> cbench_journal:filter(Filter, Entries)
            end,
    {reply, Reply, S};
serve(clear_requests, _From, S = #{mod := Mod, handle := H}) ->
    {reply, Mod:journal_clear(H), S};
serve(verify, _From, S = #{mod := Mod, handle := H, expects := Es}) ->
    Reply = case Mod:stubs(H) of
                {error, _} = Error -> Error;
                Infos ->
                    Hits = maps:from_list([{Id, N} || #{id := Id, hits := N} <- Infos]),
                    cbench_expect:verify(Es, Hits, journal(S, everything(0)))
            end,
    {reply, Reply, S};
serve({await, _, _, _}, _From, S = #{opts := #{journal := 0}}) ->
    {reply, {error, journal_disabled}, S};
serve({await, _, Count, _}, _From, S = #{opts := #{journal := Max}}) when Count > Max ->
    %% A waiter keeps the entries it has taken until it has Count of them: above the journal's
    %% bound it would hold more than the journal does, for as long as its timeout.
    {reply, {error, {bad_await, {count, Count, out_of_range}}}, S};
serve({await, Filter = #{since := Since}, Count, Timeout}, From,
            S = #{mod := Mod, handle := H, waiters := Ws}) ->
    %% Wake-ups are turned on before the journal is read, so that a request recorded in between
    %% is either in what is read or announced by a message.
    cbench_waiters:is_empty(Ws) andalso Mod:journal_notify(H, true),
    case journal(S, everything(Since)) of
        {error, _} = Error ->
            cbench_waiters:is_empty(Ws) andalso Mod:journal_notify(H, false),
            {reply, Error, S};
        Entries ->
            {Ws1, Replies} = cbench_waiters:add(Ws, From, Filter, Count, {Entries, Timeout}),
            {noreply, answer(Replies, S#{waiters := Ws1})}
    end;
serve(down, _From, S) ->
    engine(S, down, []);
serve(up, _From, S) ->
    engine(S, up, []);
serve(_Req, _From, S) ->
    {reply, {error, unknown_call}, S}.

%% The journal's entries that may match Filter, or {error, journal_disabled}.
journal(#{opts := #{journal := 0}}, _Filter) -> {error, journal_disabled};
journal(#{mod := Mod, handle := H}, Filter) -> Mod:journal(H, Filter).

everything(Since) -> #{since => Since, methods => any, path => any, stub => any}.

%% The canonical terms of each stub are kept here, so that stubs/1 shows them for every engine.
add_stub(S = #{stubs := Stubs}, Match, Response) ->
    case engine(S, route_add, [Match, Response]) of
        {reply, {ok, Id}, S1} ->
            {reply, {ok, Id}, S1#{stubs := Stubs#{Id => #{match => Match, response => Response}}}};
        Other -> Other
    end.

%% load_stubs/2 on an engine without a loader of its own (ehttpd): the file read with cbench_json and
%% cbench_stub_json, every stub checked by cbench_spec before any is added, then added in file order
%% (one removed again if a later one fails): all or none, as the C engines' loader.
load_stubs_here(S0, File) ->
    Bad = fun(Fmt, Args) -> {reply, {error, {bad_stub_file, iolist_to_binary(io_lib:format(Fmt, Args))}}, S0} end,
    case file:read_file(File) of
        {error, eisdir} -> Bad("~ts: is a directory", [File]);
        {error, Why} ->
            [C | Rest] = file:format_error(Why),
            Bad("~ts: ~ts", [File, [string:to_upper(C) | Rest]]);
        {ok, Text} ->
            %% strict: what the C engines' loader parses (no key twice, no \u0000), so that a file
            %% loads on every engine or on none.
            case cbench_json:decode(Text, strict) of
                error -> Bad("~ts: not JSON", [File]);
                {ok, Json} ->
                    case cbench_stub_json:from_json(Json, filename:dirname(File)) of
                        {error, {bad_stub_json, Where, Why}} ->
                            Bad("~ts: ~ts: ~0p", [File, where(Where), Why]);
                        {ok, Stubs} ->
                            Checked = [{I, cbench_spec:stub(M, R)}
                                       || {I, #{match := M, response := R}}
                                              <- lists:zip(lists:seq(0, length(Stubs) - 1), Stubs)],
                            case [{I, E} || {I, {error, E}} <- Checked] of
                                [{I, E} | _] -> Bad("~ts: ~ts", [File, refused(Json, I, E)]);
                                [] -> add_all(S0, {File, Json}, [{I, M, R} || {I, {ok, M, R}} <- Checked], [])
                            end
                    end
            end
    end.

%% A place in a stub file (cbench_stub_json:where()) as the C engines' loader names it:
%% stubs[0].response.body.base64.
-spec where(cbench_stub_json:where()) -> iodata().
where(stubs) -> "stubs";
where(Key) when is_binary(Key) -> Key; %% a key of the file's own object
where(Where) when is_tuple(Where) ->
    [I | Keys] = tuple_to_list(Where),
    ["stubs[", integer_to_list(I), "]", [case K of
                                             N when is_integer(N) -> ["[", integer_to_list(N), "]"];
                                             _ -> [".", key(K)]
                                         end || K <- Keys]].

%% Why stub I of the decoded file Json was refused, named as the C engines' loader names it:
%% cbench_spec's {Field, Value, Why} at the field's place in the file (stubs[0].response.after:
%% conflict), a fault kind this engine cannot serve at the stub's fault, as stub/3 refuses it
%% (stubs[0].response.fault: {unsupported,rst_stream}).
refused(Json, I, {_, {{response, body}, {file, _}, E}})
  when E =/= empty, E =/= wrong_type, E =/= eisdir, E =/= efbig, E =/= not_regular ->
    %% A body file that cannot be opened: the C engines' loader names the stub, the stub's own body
    %% file (not a sequence's response's), and open(2)'s error.
    Stubs = case Json of
                #{<<"stubs">> := L} -> L;
                L -> L
            end,
    Hint = case lists:nth(I + 1, Stubs) of
               #{<<"response">> := #{<<"responses">> := _}} -> "";
               _ -> "response.body.file: "
           end,
    io_lib:format("stubs[~b]: ~s~ts (~s)", [I, Hint, file:format_error(E), string:uppercase(atom_to_list(E))]);
refused(Json, I, {_, {Field, Value, Why}}) ->
    [where(cbench_stub_json:spec_where(Json, I, Field, Value)), ": ", io_lib:format("~0p", [Why])];
refused(_Json, I, {unsupported, _} = E) ->
    [where({I, response, fault}), ": ", io_lib:format("~0p", [E])];
refused(_Json, I, E) ->
    io_lib:format("stubs[~b]: ~0p", [I, E]).

key(K) when is_atom(K) -> atom_to_list(K);
key(K) when is_binary(K) -> K;
key(K) -> io_lib:format("~0p", [K]).

add_all(S, _File, [], Ids) ->
    {reply, {ok, lists:reverse(Ids)}, S};
add_all(S, {File, Json} = FJ, [{I, M, R} | Rest], Ids) ->
    case add_stub(S, M, R) of
        {reply, {ok, Id}, S1} -> add_all(S1, FJ, Rest, [Id | Ids]);
        {reply, {error, E}, S1} ->
            S2 = lists:foldl(fun(Id, Acc) ->
                                     {reply, _, Acc1 = #{stubs := St}} = engine(Acc, route_remove, [Id]),
                                     Acc1#{stubs := maps:remove(Id, St)}
                             end, S1, Ids),
            {reply, {error, {bad_stub_file, iolist_to_binary(io_lib:format("~ts: ~ts",
                                                                          [File, refused(Json, I, E)]))}}, S2}
    end.

%% The monitors of removed handler routes (all: every one).
forget_handlers(Ids, S = #{handlers := Hs}) ->
    Gone = [Mon || {Mon, Id} <- maps:to_list(Hs), Ids =:= all orelse lists:member(Id, Ids)],
    [erlang:demonitor(Mon, [flush]) || Mon <- Gone],
    %% The pools of {M, F} routes end with their routes.
    Pools = maps:get(pools, S, #{}),
    Ended = [Id || Id <- maps:keys(Pools), Ids =:= all orelse lists:member(Id, Ids)],
    [cbench_pool:stop(maps:get(Id, Pools)) || Id <- Ended],
    S#{handlers := maps:without(Gone, Hs), pools => maps:without(Ended, Pools)}.

%% A call that changes the engine's handle.
engine(S = #{mod := Mod, handle := H}, Fun, Args) ->
    {Reply, H1} = apply(Mod, Fun, [H | Args]),
    {reply, Reply, S#{handle := H1}}.

%% cbench:tls/1's map with the client CA (PEM and DER) where the engine has one.
with_client_ca(Info = #{}, {ok, Pem}) ->
    [{'Certificate', Der, not_encrypted}] = public_key:pem_decode(Pem),
    Info#{client_ca_pem => Pem, client_ca_der => Der};
with_client_ca(Info, _) ->
    Info.

%% An optional callback of the engine (cbench_engine); {error, not_supported} when it has none.
optional(#{mod := Mod, handle := H}, Fun, Args) ->
    case erlang:function_exported(Mod, Fun, length(Args) + 1) of
        true -> apply(Mod, Fun, [H | Args]);
        false -> {error, not_supported}
    end.

%% Sends the replies of waiters that are done; with nobody left waiting, the engine stops waking us.
answer(Replies, S = #{mod := Mod, handle := H, waiters := Ws}) ->
    [gen_server:reply(From, Reply) || {From, Reply} <- Replies],
    Replies =/= [] andalso cbench_waiters:is_empty(Ws) andalso Mod:journal_notify(H, false),
    S.

%% @private
handle_cast(_Msg, S) -> {noreply, S}.

%% @private
handle_info({'EXIT', Owner, _Reason}, S = #{owner := Owner}) ->
    %% The process of start_link_server/2 exited: the server goes with it.
    {stop, shutdown, S};
handle_info({cbench_journal, Seq}, S = #{waiters := Ws}) ->
    %% A burst of requests sends a burst of wake-ups: one read serves them all. A wake-up names the
    %% entry recorded, which may be older than entries the waiters have seen (the C engines number
    %% a request when it arrives and record it when its answer ends), so the read goes back to the
    %% oldest one named.
    Recorded = journal_messages([Seq]),
    case cbench_waiters:is_empty(Ws) orelse
        journal(S, everything(min(cbench_waiters:since(Ws), lists:min(Recorded) - 1))) of
        true -> {noreply, S};
        {error, _} -> {noreply, S};
        Entries ->
            {Ws1, Replies} = cbench_waiters:feed(Ws, Entries, Recorded),
            {noreply, answer(Replies, S#{waiters := Ws1})}
    end;
handle_info({'DOWN', Mon, process, _, _}, S = #{mod := Mod, handle := H, handlers := Hs})
  when is_map_key(Mon, Hs) ->
    _ = Mod:handler_fail(H, maps:get(Mon, Hs)),
    {noreply, S#{handlers := maps:remove(Mon, Hs)}};
handle_info({'DOWN', Mon, process, _, _} = Msg, S = #{mod := Mod, handle := H, waiters := Ws}) ->
    %% A caller of await/4 died while it waited (its waiter goes), or a monitor of the engine's.
    case cbench_waiters:caller_down(Ws, Mon) of
        {true, Ws1} ->
            cbench_waiters:is_empty(Ws1) andalso Mod:journal_notify(H, false),
            {noreply, S#{waiters := Ws1}};
        false -> engine_info(Msg, S)
    end;
handle_info({cbench_await_timeout, Ref}, S = #{waiters := Ws}) ->
    {Ws1, Replies} = cbench_waiters:expire(Ws, Ref),
    {noreply, answer(Replies, S#{waiters := Ws1})};
handle_info({'EXIT', _From, Reason} = Msg, S = #{mod := Mod, handle := H}) ->
    case Mod:handle_info(Msg, H) of
        {ok, H1} -> {noreply, S#{handle := H1}};
        {stop, Why} -> {stop, Why, S};
        %% A linked engine process died: the engine is broken, so this server ends too.
        false when Reason =/= normal -> {stop, {engine_exit, Reason}, S};
        false -> {noreply, S}
    end;
handle_info(Msg, S) ->
    engine_info(Msg, S).

%% A message that is the engine's, or nobody's.
engine_info(Msg, S = #{mod := Mod, handle := H}) ->
    case Mod:handle_info(Msg, H) of
        {ok, H1} -> {noreply, S#{handle := H1}};
        {stop, Why} -> {stop, Why, S};
        false -> {noreply, S}
    end.

%% The sequence numbers of the wake-ups waiting in the mailbox, with those already taken.
journal_messages(Seqs) ->
    receive {cbench_journal, Seq} -> journal_messages([Seq | Seqs])
    after 0 -> Seqs
    end.

%% @private
terminate(Reason, #{mod := Mod, handle := H, owner := Owner, waiters := Ws}) ->
    [gen_server:reply(From, Reply) || {From, Reply} <- cbench_waiters:cancel_all(Ws)],
    %% A stop (stop_server/1, the application stopping) does not take the owner of
    %% start_link_server/2 down; a crash still reaches it through the link.
    _ = is_pid(Owner) andalso stopped(Reason) andalso unlink(Owner),
    Mod:stop(H).

stopped(normal) -> true;
stopped(shutdown) -> true;
stopped({shutdown, _}) -> true;
stopped(_) -> false.
