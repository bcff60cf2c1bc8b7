%%% @doc Validation of cbench:start_server/2 options: a map in, a complete map out (every default
%%% filled in), `{error, {bad_option, Key}}' for an unknown key or a value out of range.
-module(cbench_opts).

-export([validate/2, defaults/1, engines/0]).

%% @doc The engines start_server/2 knows.
-spec engines() -> [nif | port | ehttpd].
engines() -> [nif, port, ehttpd].

%% @doc The defaults of an engine's options (port 0: an ephemeral port).
-spec defaults(nif | port | ehttpd) -> map().
defaults(Engine) ->
    Threads = cbench_settings:default_threads(),
    Base = #{port => 0,
             ip => {127, 0, 0, 1},
             threads => Threads,
             cpus => default,
             backlog => 1024,
             max_header_bytes => 16384,
             max_body_bytes => 10000000,
             header_timeout_ms => 10000,
             idle_timeout_ms => 60000,
             stop_timeout_ms => 5000,
             enable_h2 => true,
             h2_max_concurrent_streams => 128,
             journal => 10000,
             journal_body_bytes => 65536},
    case Engine of
        ehttpd -> Base#{close => false};
        _ -> Base
    end.

%% @doc Checks every option and fills in the defaults. `cpus => default' becomes the CPUs of the
%% schedulers (when they are bound) for as many threads as asked.
-spec validate(nif | port | ehttpd, map()) -> {ok, map()} | {error, {bad_option, term()}}.
validate(Engine, Opts) when is_map(Opts) ->
    Defaults = defaults(Engine),
    case [K || K <- maps:keys(Opts), not maps:is_key(K, Defaults)] of
        [Bad | _] ->
            {error, {bad_option, Bad}};
        [] ->
            Merged = maps:merge(Defaults, Opts),
            case [K || K <- lists:sort(maps:keys(Merged)), not valid(K, maps:get(K, Merged))] of
                [Bad | _] -> {error, {bad_option, Bad}};
                [] -> {ok, finish(Merged)}
            end
    end.

finish(Opts = #{ip := Ip, cpus := Cpus, threads := Threads}) ->
    Opts#{ip := ip(Ip),
          cpus := case Cpus of
                      default -> cbench_settings:default_cpus(Threads);
                      _ -> Cpus
                  end}.

ip(Ip) when is_tuple(Ip) -> Ip;
ip(Ip) ->
    {ok, Addr} = inet:parse_strict_address(unicode:characters_to_list(Ip)),
    Addr.

valid(port, P) -> is_integer(P) andalso P >= 0 andalso P =< 65535;
valid(ip, Ip) when is_tuple(Ip) -> inet:is_ip_address(Ip);
valid(ip, Ip) when is_list(Ip); is_binary(Ip) ->
    try inet:parse_strict_address(unicode:characters_to_list(Ip)) of
        {ok, _} -> true;
        _ -> false
    catch _:_ -> false
    end;
valid(threads, N) -> is_integer(N) andalso N >= 1 andalso N =< 256;
valid(cpus, default) -> true;
valid(cpus, L) when is_list(L), length(L) =< 256 ->
    lists:all(fun(C) -> is_integer(C) andalso C >= 0 andalso C < 1024 end, L);
valid(backlog, N) -> is_integer(N) andalso N >= 1 andalso N =< 65535;
valid(max_header_bytes, N) -> is_integer(N) andalso N >= 64 andalso N =< 1 bsl 30;
valid(max_body_bytes, N) -> is_integer(N) andalso N >= 1 andalso N < 1 bsl 62;
valid(header_timeout_ms, N) -> timeout(N);
valid(idle_timeout_ms, N) -> timeout(N);
valid(stop_timeout_ms, N) -> timeout(N);
valid(enable_h2, B) -> is_boolean(B);
valid(h2_max_concurrent_streams, N) -> is_integer(N) andalso N >= 1 andalso N < 1 bsl 31;
valid(close, B) -> is_boolean(B);
valid(journal, N) -> is_integer(N) andalso N >= 0 andalso N =< 10000000;
valid(journal_body_bytes, N) -> is_integer(N) andalso N >= 0 andalso N =< 1 bsl 30;
valid(_, _) -> false.

timeout(N) -> is_integer(N) andalso N >= 1 andalso N < 1 bsl 32.
