%%% @doc Validation of cbench:start_server/2 options against the engine's option table
%%% (cbench_schema, generated from src/options.c): a map in, a complete map out (every default
%%% filled in), `{error, {bad_option, Key, Value, Allowed}}' for an unknown key or a bad value. No
%%% NIF is loaded: the ehttpd engine validates with the same table as the C engines.
-module(cbench_opts).

-export([validate/2, engines/0, engine_map/1]).

-export_type([bad_option/0]).

%% Allowed: `{integer, Min, Max}', `boolean', `address' (an IP tuple, an address literal or a host
%% name that resolves), `{list, {integer, Min, Max}}' (CPU numbers), `{known, Keys}' (the keys the
%% engine takes, for an unknown key), `{available, Cpus}' (the CPUs the node may run on, for a pin
%% the kernel refused), `{engines, Engines}' (an option other engines take), `{one_of, Atoms}' (the
%% names an option such as `client_auth' takes).
-type bad_option() :: {bad_option, Key :: term(), Value :: term(), Allowed :: term()}.

%% @doc The engines start_server/2 knows.
-spec engines() -> [cbench:engine()].
engines() -> [nif, port, ehttpd].

%% @doc The defaults of an engine's options: the table's, except those a test node wants
%% different from a standalone server: port 0 (an ephemeral port, not 8080), threads = the
%% schedulers online (not the online CPUs), cpus = the schedulers' CPUs when they are bound.
-spec defaults(cbench:engine()) -> map().
defaults(Engine) ->
    Table = maps:from_list([{K, D} || #{key := K, default := D} <- rows(Engine)]),
    Table#{port => 0, ip => {127, 0, 0, 1}, threads => cbench_settings:default_threads(),
           cpus => default}.

%% @doc Checks every option and fills in the defaults. `threads => 0' becomes the online CPUs,
%% `cpus => default' the CPUs of the schedulers (when they are bound) for as many threads, and a
%% host name in `ip' its first IPv4 address (else its first IPv6 one).
-spec validate(cbench:engine(), map()) -> {ok, map()} | {error, bad_option()}.
validate(Engine, Opts) when is_map(Opts) ->
    Rows = maps:from_list([{K, R} || R = #{key := K} <- rows(Engine)]),
    Merged = maps:merge(defaults(Engine), Opts),
    case check(lists:sort(maps:to_list(Merged)), Engine, Rows, #{}) of
        {ok, #{enable_h1 := false, enable_h2 := false}} ->
            %% Neither protocol left to serve (the C library refuses it too).
            {error, {bad_option, enable_h1, false, {requires, {enable_h2, true}}}};
        {ok, Valid} ->
            case tls_requires(Valid) of
                ok ->
                    case tls_files(Valid) of
                        ok -> {ok, finish(tls_on(Valid))};
                        Error -> Error
                    end;
                Error -> Error
            end;
        Error -> Error
    end.

%% @doc The options map of the NIF and the port program: the table's names as keys (`host' for
%% `ip', as a binary), without the options of the ehttpd engine and without a string option left
%% `undefined' (the engine's default).
-spec engine_map(map()) -> map().
engine_map(Opts = #{ip := Ip}) ->
    M = maps:from_list([{Name, V}
                        || #{key := K, name := Name} <- rows(nif), maps:is_key(K, Opts),
                           (V = maps:get(K, Opts)) =/= undefined]),
    M#{host => list_to_binary(inet:ntoa(Ip))}.

%% The TLS options that mean nothing without TLS (`tls => true', or a `tls_port', which turns TLS
%% on by itself), and the certificate's file without its key's (or the other way).
tls_requires(Opts) ->
    Given = fun(K) -> not lists:member(maps:get(K, Opts, undefined), [undefined, none]) end,
    Tls = maps:get(tls, Opts, false) orelse Given(tls_port),
    case [K || K <- [tls_cert_file, tls_key_file, client_auth], not Tls, Given(K)] of
        [K | _] -> {error, {bad_option, K, maps:get(K, Opts), {requires, {tls, true}}}};
        [] ->
            case {Given(tls_cert_file), Given(tls_key_file)} of
                {true, false} -> {error, {bad_option, tls_cert_file, maps:get(tls_cert_file, Opts),
                                          {requires, tls_key_file}}};
                {false, true} -> {error, {bad_option, tls_key_file, maps:get(tls_key_file, Opts),
                                          {requires, tls_cert_file}}};
                _ -> ok
            end
    end.

%% A TLS port beside the cleartext one turns TLS on by itself (on every engine, as in the C
%% library): `tls' says so in the options the server keeps.
tls_on(Opts = #{tls_port := P}) when P =/= undefined -> Opts#{tls := true};
tls_on(Opts) -> Opts.

%% The user's certificate and key (docs/tls.md), given together (tls_requires/1): each a PEM file
%% that can be read and holds what it should (a certificate; a private key). That the key is the
%% certificate's the engine checks when it starts.
tls_files(#{tls_cert_file := undefined, tls_key_file := undefined}) ->
    ok;
tls_files(#{tls_cert_file := C, tls_key_file := K}) ->
    IsKey = fun({T, _, _}) -> lists:member(T, ['PrivateKeyInfo', 'ECPrivateKey', 'RSAPrivateKey',
                                                'DSAPrivateKey']) end,
    case {pem_file(tls_cert_file, C, fun({T, _, _}) -> T =:= 'Certificate' end, no_certificate),
          pem_file(tls_key_file, K, IsKey, no_private_key)} of
        {ok, ok} -> ok;
        {ok, Error} -> Error;
        {Error, _} -> Error
    end.

pem_file(Key, Path, Wanted, Missing) ->
    case file:read_file(Path) of
        {ok, Pem} ->
            case lists:any(Wanted, catch_pem(Pem)) of
                true -> ok;
                false -> {error, {bad_option, Key, Path, {pem, Missing}}}
            end;
        {error, Why} ->
            {error, {bad_option, Key, Path, {file, Why}}}
    end.

catch_pem(Pem) ->
    try public_key:pem_decode(Pem)
    catch _:_ -> []
    end.

rows(Engine) ->
    [R || R = #{engines := Es} <- options(), lists:member(Engine, Es)].

options() ->
    cbench_schema:options().

check([], _Engine, _Rows, Acc) ->
    {ok, Acc};
check([{K, V} | Rest], Engine, Rows, Acc) ->
    case maps:find(K, Rows) of
        error ->
            {error, {bad_option, K, V, unknown(K, Engine)}};
        {ok, Row} ->
            case value(Row, V, Engine) of
                {ok, V1} -> check(Rest, Engine, Rows, Acc#{K => V1});
                {error, Allowed} -> {error, {bad_option, K, V, Allowed}}
            end
    end.

%% An option of another engine names the engines that take it; anything else, the known keys.
unknown(K, Engine) ->
    case [Es || #{key := K1, engines := Es} <- options(), K1 =:= K] of
        [Es] -> {engines, Es};
        [] -> {known, lists:sort([K1 || #{key := K1} <- rows(Engine)])}
    end.

value(#{key := enable_h1}, false, ehttpd) ->
    %% An h2c-only listener: the ehttpd engine has no HTTP/2.
    {error, {engines, [nif, port]}};
value(#{default := undefined}, undefined, _) ->
    %% An option that may be unset (tls_port): left out of the engine's map (engine_map/1).
    {ok, undefined};
value(#{type := string}, undefined, _) ->
    %% The default: the engine's own (for the TLS files: none, the certificates made at start).
    {ok, undefined};
value(#{type := string, max := Max} = Row, V, _) when is_list(V); is_binary(V) ->
    case catch unicode:characters_to_binary(V) of
        B when is_binary(B), byte_size(B) >= 1, byte_size(B) =< Max ->
            case binary:match(B, <<0>>) of
                nomatch -> {ok, B};
                _ -> {error, maps:get(allowed, Row)}
            end;
        _ -> {error, maps:get(allowed, Row)}
    end;
value(#{type := integer, min := Min, max := Max}, V, _) when is_integer(V), V >= Min, V =< Max ->
    {ok, V};
value(#{type := boolean}, V, _) when is_boolean(V) ->
    {ok, V};
value(#{type := address}, V, _) ->
    case address(V) of
        {ok, Ip} -> {ok, Ip};
        error -> {error, address}
    end;
value(#{type := enum, allowed := {one_of, Names} = Allowed}, V, _) ->
    case lists:member(V, Names) of
        true -> {ok, V};
        false -> {error, Allowed}
    end;
value(#{type := cpus}, default, _) ->
    {ok, default};
value(#{type := cpus}, V, ehttpd) when V =/= [] ->
    %% The ehttpd engine runs on schedulers (acceptor i on scheduler i): it pins nothing, and a pin
    %% that would not happen is refused rather than reported as done.
    {error, {engines, [nif, port]}};
value(#{type := cpus, min := Min, max := Max}, V, _) when is_list(V), length(V) =< 256 ->
    case lists:all(fun(C) -> is_integer(C) andalso C >= Min andalso C =< Max end, V) of
        true -> {ok, V};
        false -> {error, {list, {integer, Min, Max}}}
    end;
value(#{allowed := Allowed}, _, _) ->
    {error, Allowed}.

%% An IP tuple, an address literal, or a host name that resolves (its first IPv4 address, else its
%% first IPv6 one, as the C engine picks).
address(Ip) when is_tuple(Ip) ->
    case inet:is_ip_address(Ip) of
        true -> {ok, Ip};
        false -> error
    end;
address(Name) when is_binary(Name) ->
    try unicode:characters_to_list(Name) of
        L when is_list(L) -> address(L);
        _ -> error
    catch _:_ -> error
    end;
address(Name) when is_list(Name); is_atom(Name) ->
    try
        case inet:parse_strict_address(Name) of
            {ok, Ip} -> {ok, Ip};
            {error, _} -> resolve(Name)
        end
    catch _:_ -> error
    end;
address(_) ->
    error.

resolve(Name) ->
    case inet:getaddr(Name, inet) of
        {ok, Ip} -> {ok, Ip};
        {error, _} ->
            case inet:getaddr(Name, inet6) of
                {ok, Ip} -> {ok, Ip};
                {error, _} -> error
            end
    end.

finish(Opts = #{cpus := Cpus, threads := Threads0}) ->
    Threads = case Threads0 of
                  0 -> online_cpus();
                  _ -> Threads0
              end,
    Opts#{threads := Threads,
          cpus := case Cpus of
                      default -> cbench_settings:default_cpus(Threads);
                      _ -> Cpus
                  end}.

%% The C engine's `threads => 0': as many as the online CPUs.
online_cpus() ->
    case erlang:system_info(logical_processors_online) of
        N when is_integer(N), N > 0 -> min(N, 256);
        _ -> erlang:system_info(schedulers_online)
    end.
