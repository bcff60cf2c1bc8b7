%%% @doc One running server of any engine: a process under cbench_server_sup that owns the engine
%%% (the NIF resource, the port, or the ehttpd listener and acceptors) and stops it in terminate/2.
%%%
%%% The engine modules share one shape: start(Opts) -> {ok, H} | {error, R}, stop(H), port(H),
%%% stats(H), info(H), and for engines that get messages (the port), handle_info(Msg, H).
-module(cbench_server).
-behaviour(gen_server).

-export([start_link/3, call/2]).
-ignore_xref([{start_link, 3}]). %% the child spec of cbench_server_sup
-export([init/1, handle_call/3, handle_cast/2, handle_info/2, terminate/2]).

%% @doc Starts the engine; returns {error, Reason} (without a crash report) when it cannot start.
%% Owner (a pid, or none): a process linked to the server, whose exit stops it.
-spec start_link(cbench:engine(), map(), pid() | none) -> {ok, pid()} | {error, term()}.
start_link(Engine, Opts, Owner) ->
    proc_lib:start_link(?MODULE, init, [{Engine, Opts, Owner}]).

%% @doc A synchronous request to a server: port, stats, info, or {error, not_running}.
-spec call(pid(), port | stats | info) -> term().
call(Pid, Req) ->
    %% Only servers are called: any other pid (a dead server, a shell) answers not_running
    %% instead of timing out.
    case whereis(cbench_server_sup) =/= undefined andalso
        lists:member(Pid, cbench_server_sup:servers()) of
        true ->
            try gen_server:call(Pid, Req, 60000)
            catch exit:{Reason, _} when Reason =:= noproc; Reason =:= normal;
                                        Reason =:= shutdown ->
                    {error, not_running}
            end;
        false ->
            {error, not_running}
    end.

%% @doc The module implementing an engine.
-spec engine_module(nif | port | ehttpd) -> module().
engine_module(nif) -> cbench_nif;
engine_module(port) -> cbench_port;
engine_module(ehttpd) -> cbench_ehttpd.

%% @private
init({Engine, Opts, Owner}) ->
    %% Exits of the engine's linked processes and ports come as messages; shutdown runs terminate/2.
    process_flag(trap_exit, true),
    Mod = engine_module(Engine),
    case Mod:start(Opts) of
        {ok, H} ->
            %% Linked before the caller hears of the server, so no exit of the owner is missed (an
            %% owner already gone arrives as {'EXIT', Owner, noproc}).
            _ = is_pid(Owner) andalso link(Owner),
            proc_lib:init_ack({ok, self()}),
            gen_server:enter_loop(?MODULE, [], #{engine => Engine, mod => Mod, handle => H,
                                                 opts => Opts, owner => Owner});
        {error, Reason} ->
            proc_lib:init_ack({error, Reason}),
            exit(normal)
    end.

%% @private
handle_call(port, _From, S = #{mod := Mod, handle := H}) ->
    {reply, Mod:port(H), S};
handle_call(stats, _From, S = #{mod := Mod, handle := H}) ->
    {reply, Mod:stats(H), S};
handle_call(info, _From, S = #{engine := E, mod := Mod, handle := H, opts := O}) ->
    {reply, maps:merge(#{engine => E, port => Mod:port(H), ip => maps:get(ip, O)}, Mod:info(H)),
     S};
handle_call(_Req, _From, S) ->
    {reply, {error, unknown_call}, S}.

%% @private
handle_cast(_Msg, S) -> {noreply, S}.

%% @private
handle_info({'EXIT', Owner, _Reason}, S = #{owner := Owner}) ->
    %% The process of start_link_server/2 exited: the server goes with it.
    {stop, shutdown, S};
handle_info({'EXIT', _From, Reason} = Msg, S = #{mod := Mod, handle := H}) ->
    case erlang:function_exported(Mod, handle_info, 2) andalso Mod:handle_info(Msg, H) of
        {ok, H1} -> {noreply, S#{handle := H1}};
        {stop, Why} -> {stop, Why, S};
        %% A linked engine process died: the engine is broken, so this server ends too.
        false when Reason =/= normal -> {stop, {engine_exit, Reason}, S};
        false -> {noreply, S}
    end;
handle_info(Msg, S = #{mod := Mod, handle := H}) ->
    case erlang:function_exported(Mod, handle_info, 2) andalso Mod:handle_info(Msg, H) of
        {ok, H1} -> {noreply, S#{handle := H1}};
        {stop, Why} -> {stop, Why, S};
        false -> {noreply, S}
    end.

%% @private
terminate(Reason, #{mod := Mod, handle := H, owner := Owner}) ->
    %% A stop (stop_server/1, the application stopping) does not take the owner of
    %% start_link_server/2 down; a crash still reaches it through the link.
    _ = is_pid(Owner) andalso stopped(Reason) andalso unlink(Owner),
    Mod:stop(H).

stopped(normal) -> true;
stopped(shutdown) -> true;
stopped({shutdown, _}) -> true;
stopped(_) -> false.
