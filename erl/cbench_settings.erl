%%% @doc "Same settings": what the node's schedulers look like (count, bindings, busy-wait) and the
%%% threads and CPUs every engine gets by default, so that one node compares engines on equal terms.
-module(cbench_settings).

-export([settings/0, default_threads/0, default_cpus/1]).

%% @doc What the node applies: schedulers, bindings, busy-wait and the default per engine.
-spec settings() -> map().
settings() ->
    Threads = default_threads(),
    Cpus = default_cpus(Threads),
    #{schedulers => erlang:system_info(schedulers),
      schedulers_online => erlang:system_info(schedulers_online),
      bind_type => erlang:system_info(scheduler_bind_type),
      bound => bound(),
      bindings => bindings(),
      cpu_topology => erlang:system_info(cpu_topology),
      busy_wait => busy_wait(),
      engines => #{nif => #{threads => Threads, cpus => Cpus},
                   port => #{threads => Threads, cpus => Cpus},
                   ehttpd => #{threads => Threads, schedulers => schedulers_of(Threads)}}}.

%% @doc Engine threads by default: as many as the node has schedulers online.
-spec default_threads() -> pos_integer().
default_threads() -> erlang:system_info(schedulers_online).

%% @doc CPU of engine thread i = CPU of scheduler i (wrapping), or [] when schedulers are unbound.
-spec default_cpus(pos_integer()) -> [non_neg_integer()].
default_cpus(Threads) ->
    case bound() of
        true ->
            B = list_to_tuple(bindings()),
            Online = erlang:system_info(schedulers_online),
            [element((I - 1) rem Online + 1, B) || I <- lists:seq(1, Threads)];
        false ->
            []
    end.

%% @doc The scheduler each ehttpd acceptor runs on.
-spec schedulers_of(pos_integer()) -> [pos_integer()].
schedulers_of(Threads) ->
    Online = erlang:system_info(schedulers_online),
    [(I - 1) rem Online + 1 || I <- lists:seq(1, Threads)].

%% @doc The logical CPU of each online scheduler, or `unbound'.
-spec bindings() -> [non_neg_integer() | unbound].
bindings() ->
    Online = erlang:system_info(schedulers_online),
    lists:sublist(tuple_to_list(erlang:system_info(scheduler_bindings)), Online).

%% @doc True when every online scheduler is bound to a CPU.
-spec bound() -> boolean().
bound() -> lists:all(fun is_integer/1, bindings()).

%% @doc The scheduler busy-wait threshold (`+sbwt'); OTP 25 does not report it, so it is read from
%% the emulator's own command line, where erl passes it as `-sbwt VALUE'. The default is medium.
-spec busy_wait() -> atom().
busy_wait() ->
    case file:read_file("/proc/self/cmdline") of
        {ok, Bin} -> sbwt(binary:split(Bin, <<0>>, [global]));
        {error, _} -> unknown
    end.

sbwt([<<"-sbwt">>, Value | _]) -> binary_to_atom(Value);
sbwt([<<"--">> | _]) -> medium;
sbwt([_ | Rest]) -> sbwt(Rest);
sbwt([]) -> medium.
