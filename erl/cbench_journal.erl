%%% @doc The request journal as every engine gives it: what one entry holds, and which entries a
%%% filter picks. The engines keep their own rings (the C engines in C, ehttpd in
%%% cbench_ehttpd_journal) and may apply part of a filter while reading (cbench_c_terms:filter/1);
%%% cbench_server and cbench_waiters apply the whole filter here, so it means the same on every
%%% engine.
-module(cbench_journal).

-export([filter/2, matches/2]).

-export_type([entry/0, tls/0, upstream/0]).

%% One recorded request (docs/erlang.md): route is the name of the route that answered (an atom for
%% the fixture routes and not_found, a binary for a stub), also for a 405 (the first route whose
%% path matched); stub is the id of the stub that answered; bytes_out counts the response body.
-type entry() :: #{seq := pos_integer(), time_us := integer(),
                   proto := cbench:proto(), conn := pos_integer(),
                   stream := non_neg_integer(), peer := binary(),
                   method := binary(), path := binary(), query := binary(),
                   headers := [{binary(), binary()}], body := binary(),
                   body_length := non_neg_integer(), route := atom() | binary(),
                   stub := pos_integer() | undefined, status := 0 | 100..599,
                   bytes_out := non_neg_integer(), duration_us := non_neg_integer(),
                   fault := cbench_fault:kind() | undefined,
                   %% The delay a stub waited before answering (0 for none).
                   delay_ms := non_neg_integer(),
                   %% The connection's TLS session (docs/tls.md), undefined over cleartext.
                   tls := undefined | tls(),
                   %% A proxied request's upstream (docs/proxy.md), undefined for any other.
                   upstream := undefined | upstream()}.

%% The upstream a proxy forwarded to, the status it answered (0: none came) and why it failed.
-type upstream() :: #{to := binary(), status := non_neg_integer(),
                      error := none | refused | reset | timeout | bad_response | head_too_big |
                               body_too_big | truncated | connect_failed | no_memory | tls}.

%% What a TLS connection's handshake settled: the version and cipher suite, the name the client
%% sent (SNI), what ALPN chose, whether the session was resumed, and the client's certificate
%% (`undefined': none).
-type tls() :: #{version := binary(), cipher := binary(), sni := binary() | undefined,
                 alpn := binary() | undefined, resumed := boolean(),
                 client_cert := undefined | #{subject := binary(), sha256 := binary()}}.

%% @doc The entries that match a canonical filter (cbench_spec:filter/1), in their order.
-spec filter(cbench_spec:canon_filter(), [entry()]) -> [entry()].
filter(F, Entries) ->
    [E || E <- Entries, matches(F, E)].

%% @doc Whether one entry matches a canonical filter.
-spec matches(cbench_spec:canon_filter(), entry()) -> boolean().
matches(F = #{methods := Ms, path := P, stub := Stub, since := Since},
        E = #{seq := Seq, method := M, path := Path, stub := S}) ->
    Seq > Since andalso
        (Ms =:= any orelse lists:member(M, Ms)) andalso
        (Stub =:= any orelse Stub =:= S) andalso
        proto_matches(maps:get(protos, F, any), E) andalso
        (P =:= any orelse cbench_router:path_matches(P, Path)).

proto_matches(any, _) -> true;
proto_matches(Ps, #{proto := Proto}) -> lists:member(Proto, Ps).
