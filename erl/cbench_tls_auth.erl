%%% @doc TLS client certificates on the Erlang side (docs/tls.md): the options of
%%% cbench:client_cert/2, checked before any engine is asked, and the map it returns, made from
%%% what the engine issued (PEM, and the subject and SHA-256 the journal records for it).
-module(cbench_tls_auth).

-export([check/1, cert_map/4]).

-export_type([client_cert/0]).

%% A client certificate and its key, ready for `ssl' (`{cert, CertDer}', `{key, Key}') or for
%% files (`cert_pem', `key_pem'); `subject' and `sha256' are what the journal's client_cert holds.
-type client_cert() :: #{cert_pem := binary(), key_pem := binary(), cert_der := binary(),
                         key := {'PrivateKeyInfo', binary()}, subject := binary(),
                         sha256 := binary()}.

-define(DEFAULT_CN, <<"cbench client">>).
%% RFC 5280's upper bound on a common name, as the engine's.
-define(MAX_CN, 64).

%% @doc The common name of `#{cn => Cn}' (default `<<"cbench client">>'): 1 to 64 bytes of UTF-8
%% without control characters. `{error, {bad_client_cert, {Field, Value, Why}}}' otherwise.
-spec check(term()) -> {ok, binary()} | {error, {bad_client_cert, {atom() | term(), term(), atom()}}}.
check(Opts) when is_map(Opts) ->
    case maps:keys(maps:remove(cn, Opts)) of
        [K | _] -> {error, {bad_client_cert, {K, maps:get(K, Opts), unknown_key}}};
        [] -> cn(maps:get(cn, Opts, ?DEFAULT_CN))
    end;
check(Opts) ->
    {error, {bad_client_cert, {opts, Opts, not_a_map}}}.

cn(Cn) when not is_binary(Cn) -> bad_cn(Cn, not_a_binary);
cn(<<>>) -> bad_cn(<<>>, empty);
cn(Cn) when byte_size(Cn) > ?MAX_CN -> bad_cn(Cn, too_long);
cn(Cn) ->
    case unicode:characters_to_list(Cn) of
        L when is_list(L) ->
            case lists:any(fun(C) -> C < 16#20 orelse C =:= 16#7f end, L) of
                true -> bad_cn(Cn, control_character);
                false -> {ok, Cn}
            end;
        _ -> bad_cn(Cn, not_utf8)
    end.

bad_cn(Cn, Why) -> {error, {bad_client_cert, {cn, Cn, Why}}}.

%% @doc The map of cbench:client_cert/2 from the engine's PEM, subject and fingerprint.
-spec cert_map(binary(), binary(), binary(), binary()) -> client_cert().
cert_map(CertPem, KeyPem, Subject, Sha256) ->
    #{cert_pem => CertPem, key_pem => KeyPem, cert_der => der(CertPem),
      key => {'PrivateKeyInfo', der(KeyPem)}, subject => Subject, sha256 => Sha256}.

%% The DER of the one block of a PEM text the engine wrote (RFC 7468: base64 between the BEGIN and
%% END lines), without public_key, which this application does not depend on.
der(Pem) ->
    Lines = binary:split(Pem, [<<"\n">>, <<"\r\n">>], [global, trim_all]),
    base64:decode(iolist_to_binary([L || L <- Lines, binary:part(L, 0, min(5, byte_size(L))) =/= <<"-----">>])).
