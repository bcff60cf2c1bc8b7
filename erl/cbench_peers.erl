%%% @doc Nodes for cbench:load/2 over several nodes, started with OTP's `peer' and stopped at the
%%% end: each with cbench's ebin on its code path, the cookie, and a name other nodes reach it by
%%% (-name Name@Host). The peer is controlled over its standard input and output, so the node that
%%% starts it need not be reachable from it: the same call starts a node on this machine, in a
%%% network namespace (`exec => {"ip", ["netns", "exec", Ns, Erl]}', scripts/testbed.sh) or on
%%% another host over ssh (`exec => {"ssh", [Host, Erl]}', that host having the same cbench build
%%% at the same path), and the node halts when its controller goes away.
-module(cbench_peers).

-export([start/2, stop/1]).

-export_type([peer/0]).
-ignore_xref([{start, 2}, {stop, 1}]).

-type peer() :: #{node := node(), peer := pid(), os_pid := string()}.
-type spec() :: atom() | string() | #{name := atom() | string(), host => string(),
                                      exec => file:filename() | {file:filename(), [string()]},
                                      args => [string()]}.

%% @doc Starts a node per spec (a name, or a map overriding host, exec and args for that node).
%% Opts: host (default: this node's host, or 127.0.0.1 when it is not distributed), cookie (an
%% atom; default this node's), exec (default erl from the PATH), args (more erl arguments),
%% code_path (default the directory cbench's modules were loaded from), wait_boot (ms, 30000).
%% When this node is not distributed and no exec is given, it becomes cbench_<os pid>@127.0.0.1
%% (epmd started and waited for) so that it can reach its peers. On a failure the nodes already
%% started are stopped and {error, {peer_start, Name, Reason}} names the one that failed; an
%% unknown option: {error, {bad_option, Key}}.
-spec start([spec()], map()) -> {ok, [peer()]} | {error, term()}.
start(Specs, Opts) when is_list(Specs), is_map(Opts) ->
    case maps:keys(maps:without([host, cookie, exec, args, code_path, wait_boot], Opts)) of
        [] -> start_checked(Specs, Opts);
        [Bad | _] -> {error, {bad_option, Bad}}
    end;
start(_, _) ->
    error(badarg).

start_checked(Specs, Opts) ->
    Local = not maps:is_key(exec, Opts) andalso
        lists:all(fun(S) -> not (is_map(S) andalso is_map_key(exec, S)) end, Specs),
    Dist = case Local of
               true -> cbench_dist:ensure_started(list_to_atom("cbench_" ++ os:getpid() ++ "@127.0.0.1"),
                                                  longnames);
               false -> ok
           end,
    case Dist of
        ok -> start(Specs, Opts, []);
        {error, Why} -> {error, {not_distributed, Why}}
    end.

start([Spec | Rest], Opts, Acc) ->
    S = case Spec of
            #{name := _} -> Spec;
            Name -> #{name => Name}
        end,
    case start_one(S, Opts) of
        {ok, P} -> start(Rest, Opts, [P | Acc]);
        {error, Why} ->
            stop(Acc),
            {error, {peer_start, maps:get(name, S), Why}}
    end;
start([], _, Acc) ->
    {ok, lists:reverse(Acc)}.

start_one(#{name := Name} = S, Opts) ->
    Host = maps:get(host, S, maps:get(host, Opts, default_host())),
    Cookie = maps:get(cookie, Opts, erlang:get_cookie()),
    Exec = maps:get(exec, S, maps:get(exec, Opts, os:find_executable("erl"))),
    Path = maps:get(code_path, Opts, [filename:dirname(code:which(cbench))]),
    Args = ["-setcookie", atom_to_list(Cookie)] ++ lists:append([["-pa", D] || D <- Path]) ++
        maps:get(args, Opts, []) ++ maps:get(args, S, []),
    try peer:start(#{name => Name, host => Host, longnames => lists:member($., Host),
                     connection => standard_io, exec => Exec, args => Args,
                     wait_boot => maps:get(wait_boot, Opts, 30000)}) of
        {ok, Peer, Node} -> ready(Peer, Node, Cookie);
        {ok, Peer} -> ready(Peer, peer:call(Peer, erlang, node, []), Cookie);
        Other -> {error, Other}
    catch C:R -> {error, {C, R}}
    end.

ready(Peer, Node, Cookie) ->
    _ = node() =/= nonode@nohost andalso erlang:set_cookie(Node, Cookie),
    {ok, #{node => Node, peer => Peer, os_pid => peer:call(Peer, os, getpid, [])}}.

default_host() ->
    case string:split(atom_to_list(node()), "@") of
        [_, Host] when node() =/= nonode@nohost -> Host;
        _ -> "127.0.0.1"
    end.

%% @doc Stops the nodes (those already gone are skipped).
-spec stop([peer()]) -> ok.
stop(Peers) ->
    _ = [catch peer:stop(P) || #{peer := P} <- Peers],
    ok.
