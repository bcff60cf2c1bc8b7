%%% @doc The certificates of a TLS server of the ehttpd engine, made in Erlang with public_key when
%%% the server starts (the C engine makes the same set in src/base/certs.c): a test CA and a leaf it
%%% signed for localhost, 127.0.0.1, ::1 and tls-slow.localhost (ECDSA P-256, valid from an hour ago for a week), a
%%% client CA, and one leaf per bad-certificate scenario, each with exactly one flaw, chosen by the
%%% SNI name a client sends (docs/tls.md). Since OTP 26 `ssl' verifies the peer by default and
%%% httpc refuses a self-signed leaf even when it is listed in cacertfile, so a test server hands
%%% out a real chain: a CA the test trusts and a leaf that CA signed.
%%%
%%% Every key is fresh and every serial random, so two servers never share a CA. The extensions are
%%% those src/base/certs.c gives (basic constraints, key usage, extended key usage, key identifiers,
%%% subjectAltName), so that a client finds only the one flaw of each bad leaf, the same flaw as
%%% against the C engine.
-module(cbench_certs).

-export([new/0, ssl_opts/4, tls_info/1, client_cert/2, fingerprint/1, subject/1]).

-export_type([certs/0]).

-include_lib("public_key/include/public_key.hrl").

-define(HOUR, 3600).
-define(DAY, (24 * ?HOUR)).
-define(WEEK, (7 * ?DAY)).

%% An identity: the leaf (DER), its key as ssl takes it, the chain served after it (none: see new/0).
-type ident() :: #{cert := binary(), key := {atom(), binary()}}.
%% A CA: its DER, its decoded form (to name it as an issuer) and its key.
-type ca() :: #{der := binary(), otp := #'OTPCertificate'{}, key := term(), key_id := binary()}.
-opaque certs() :: #{now := integer(), server_ca := ca(), client_ca := ca(),
                     default := ident(), bad := #{string() => ident()}}.

%% The names of the bad-certificate scenarios, in the order of docs/tls.md's table.
-define(SNI_NAMES, ["expired.localhost", "not-yet-valid.localhost", "wrong-host.localhost",
                    "self-signed.localhost", "untrusted-root.localhost",
                    "missing-intermediate.localhost", "weak-key.localhost"]).

%% @doc Makes the CAs and every identity. Every chain is served empty, as the C engine serves them:
%% the default leaf's issuer is the trust anchor itself, the untrusted root is never sent (servers
%% do not send roots), and the missing intermediate is the flaw.
-spec new() -> certs().
new() ->
    Now = erlang:system_time(second),
    Server = ca(Now, "cbench test CA", undefined, asn1_NOVALUE),
    Client = ca(Now, "cbench test client CA", undefined, asn1_NOVALUE),
    Untrusted = ca(Now, "cbench untrusted CA", undefined, asn1_NOVALUE),
    Intermediate = ca(Now, "cbench test intermediate CA", Server, 0),
    Good = #{from => -?HOUR, to => -?HOUR + ?WEEK},
    %% The default leaf also names tls-slow.localhost, whose handshake is slow but succeeds
    %% (docs/faults.md, "TLS faults"), as the C engine's does.
    Default = leaf(Now, Good#{cn => "localhost",
                              names => ["localhost", "127.0.0.1", "::1", "tls-slow.localhost"],
                              role => server}, Server, p256),
    Bad = fun("expired.localhost" = N) ->
                  leaf(Now, #{cn => N, names => [N], role => server, from => -?WEEK - ?DAY,
                              to => -?DAY}, Server, p256);
             ("not-yet-valid.localhost" = N) ->
                  leaf(Now, #{cn => N, names => [N], role => server, from => ?DAY,
                              to => ?DAY + ?WEEK}, Server, p256);
             ("wrong-host.localhost") ->
                  leaf(Now, Good#{cn => "other.invalid", names => ["other.invalid"], role => server},
                       Server, p256);
             ("self-signed.localhost" = N) ->
                  leaf(Now, Good#{cn => N, names => [N], role => server}, self, p256);
             ("untrusted-root.localhost" = N) ->
                  leaf(Now, Good#{cn => N, names => [N], role => server}, Untrusted, p256);
             ("missing-intermediate.localhost" = N) ->
                  leaf(Now, Good#{cn => N, names => [N], role => server}, Intermediate, p256);
             ("weak-key.localhost" = N) ->
                  leaf(Now, Good#{cn => N, names => [N], role => server}, Server, rsa1024)
          end,
    #{now => Now, server_ca => Server, client_ca => Client, default => Default,
      bad => maps:from_list([{N, Bad(N)} || N <- ?SNI_NAMES])}.

%% @doc The ssl options of a listener: the default identity (the made leaf, or the user's files),
%% the bad leaves by SNI (sni_fun), and the client CA when client certificates are asked for.
%% Alpn: the protocols offered.
-spec ssl_opts(certs(), {binary() | string(), binary() | string()} | none,
               none | request | require, [binary()]) -> [ssl:tls_server_option()].
ssl_opts(Certs = #{default := #{cert := C, key := K}, client_ca := #{der := ClientCa}}, Files,
         ClientAuth, Alpn) ->
    Identity = case Files of
                   none -> [{cert, C}, {key, K}];
                   {CertFile, KeyFile} -> [{certfile, to_list(CertFile)}, {keyfile, to_list(KeyFile)}]
               end,
    Auth = case ClientAuth of
               none -> [{verify, verify_none}];
               _ -> [{verify, verify_peer}, {cacerts, [ClientCa]},
                     {fail_if_no_peer_cert, ClientAuth =:= require}]
           end,
    Identity ++ Auth ++
        [{sni_fun, fun(Name) -> sni(Certs, Name) end},
         {versions, ['tlsv1.3', 'tlsv1.2']},
         {alpn_preferred_protocols, Alpn},
         %% Resumption: stateless tickets for TLS 1.3, the session cache for TLS 1.2.
         {session_tickets, stateless}, {reuse_sessions, true},
         {secure_renegotiate, true}, {client_renegotiation, false},
         %% A client's failed handshake is its test's business, not a notice in the node's log.
         {log_level, error}].

to_list(B) when is_binary(B) -> binary_to_list(B);
to_list(L) -> L.

%% The identity for an SNI name: a bad leaf by its name, `undefined' for any other (the default).
-spec sni(certs(), string()) -> [ssl:tls_server_option()] | undefined.
sni(#{bad := Bad}, Name) ->
    case maps:find(string:lowercase(Name), Bad) of
        {ok, #{cert := C, key := K}} -> [{cert, C}, {key, K}];
        error -> undefined
    end.

%% @doc What cbench:tls/1 returns: the CAs a test is given, PEM and DER.
-spec tls_info(certs()) -> #{ca_pem := binary(), ca_der := binary(), client_ca_pem := binary(),
                             client_ca_der := binary()}.
tls_info(#{server_ca := #{der := S}, client_ca := #{der := C}}) ->
    #{ca_pem => pem(S), ca_der => S, client_ca_pem => pem(C), client_ca_der => C}.

%% @doc A client certificate issued by the client CA for common name Cn (checked by
%% cbench_tls_auth:check/1 before it gets here, as for every engine): ECDSA P-256, clientAuth, the
%% CAs' validity; its key in PKCS #8.
-spec client_cert(certs(), binary()) ->
          {ok, #{cert_pem := binary(), key_pem := binary(), cert_der := binary(),
                 key := {'PrivateKeyInfo', binary()}, subject := binary(), sha256 := binary()}}.
client_cert(#{now := Now, client_ca := Ca}, Cn) when is_binary(Cn) ->
    Key = public_key:generate_key({namedCurve, secp256r1}),
    Der = cert(Now, #{cn => Cn, names => [], role => client, from => -?HOUR, to => -?HOUR + ?WEEK},
               Key, Ca),
    KeyDer = public_key:der_encode('PrivateKeyInfo', Key),
    {ok, #{cert_pem => pem(Der),
           key_pem => public_key:pem_encode([{'PrivateKeyInfo', KeyDer, not_encrypted}]),
           cert_der => Der, key => {'PrivateKeyInfo', KeyDer},
           subject => subject(Der), sha256 => fingerprint(Der)}}.

%% @doc A certificate's SHA-256 fingerprint, lowercase hex.
-spec fingerprint(binary()) -> binary().
fingerprint(Der) ->
    hex_bytes(crypto:hash(sha256, Der)).

hex_bytes(B) -> << <<(hex(N))>> || <<N:4>> <= B >>.

hex(N) when N < 10 -> $0 + N;
hex(N) -> $a + N - 10.

%% @doc A certificate's subject as RFC 4514 writes it (`CN=name', the last RDN first).
-spec subject(binary()) -> binary().
subject(Der) ->
    #'OTPCertificate'{tbsCertificate = #'OTPTBSCertificate'{subject = {rdnSequence, Rdns}}} =
        public_key:pkix_decode_cert(Der, otp),
    iolist_to_binary(lists:join(",", [lists:join("+", [attr(A) || A <- Rdn])
                                      || Rdn <- lists:reverse(Rdns)])).

attr(#'AttributeTypeAndValue'{type = T, value = V}) ->
    Name = case T of
               ?'id-at-commonName' -> "CN";
               ?'id-at-organizationName' -> "O";
               ?'id-at-organizationalUnitName' -> "OU";
               ?'id-at-countryName' -> "C";
               _ -> [integer_to_list(I) || I <- lists:join($., tuple_to_list(T)), is_integer(I)]
           end,
    [Name, "=", escape(value(V))].

value({_, S}) when is_list(S); is_binary(S) -> unicode:characters_to_binary(S);
value(S) when is_list(S); is_binary(S) -> unicode:characters_to_binary(S);
value(_) -> <<"?">>.

%% RFC 4514 2.4: these characters are escaped with a backslash.
escape(V) ->
    << <<(case C of
              _ when C =:= $,; C =:= $+; C =:= $"; C =:= $\\; C =:= $<; C =:= $>; C =:= $; ->
                  <<$\\, C>>;
              _ -> <<C>>
          end)/binary>> || <<C>> <= V >>.

pem(Der) -> public_key:pem_encode([{'Certificate', Der, not_encrypted}]).

%%% Making

%% A CA "<What> <16 random hex digits>", signed by Issuer (undefined: a root).
ca(Now, What, Issuer, PathLen) ->
    Key = public_key:generate_key({namedCurve, secp256r1}),
    Cn = iolist_to_binary([What, " ", hex_bytes(crypto:strong_rand_bytes(8))]),
    Spec = #{cn => Cn, names => [], role => ca, path_len => PathLen, from => -?HOUR,
             to => -?HOUR + ?WEEK},
    Der = cert(Now, Spec, Key, case Issuer of undefined -> self; _ -> Issuer end),
    #{der => Der, otp => public_key:pkix_decode_cert(Der, otp), key => Key, key_id => key_id(Key)}.

%% A leaf as Spec describes, with a fresh key (Kind: p256 or rsa1024), signed by Issuer (self: its
%% own key).
leaf(Now, Spec, Issuer, Kind) ->
    Key = case Kind of
              p256 -> public_key:generate_key({namedCurve, secp256r1});
              rsa1024 -> public_key:generate_key({rsa, 1024, 65537})
          end,
    Der = cert(Now, Spec, Key, Issuer),
    Type = element(1, Key),
    #{cert => Der, key => {Type, public_key:der_encode(Type, Key)}}.

cert(Now, Spec = #{cn := Cn, role := Role, from := From, to := To}, Key, Issuer) ->
    Subject = name(Cn),
    {IssuerName, IssuerKey, IssuerId} =
        case Issuer of
            self -> {Subject, Key, none};
            #{otp := #'OTPCertificate'{tbsCertificate = #'OTPTBSCertificate'{subject = N}},
              key := K, key_id := Id} -> {N, K, Id}
        end,
    Tbs = #'OTPTBSCertificate'{
             version = v3,
             serialNumber = serial(),
             signature = #'SignatureAlgorithm'{algorithm = ?'ecdsa-with-SHA256',
                                               parameters = asn1_NOVALUE},
             issuer = IssuerName,
             validity = #'Validity'{notBefore = time(Now + From), notAfter = time(Now + To)},
             subject = Subject,
             subjectPublicKeyInfo = spki(Key),
             extensions = extensions(Spec, Role, key_id(Key), IssuerId)},
    public_key:pkix_sign(Tbs, IssuerKey).

%% A random serial of 16 octets, 126 of its bits random, as src/base/certs.c makes them.
serial() ->
    <<_:2, R:126>> = crypto:strong_rand_bytes(16),
    (1 bsl 126) bor R.

name(Cn) ->
    {rdnSequence, [[#'AttributeTypeAndValue'{type = ?'id-at-commonName',
                                             value = {utf8String, unicode:characters_to_binary(Cn)}}]]}.

time(Secs) ->
    {{Y, Mo, D}, {H, Mi, S}} = calendar:system_time_to_universal_time(Secs, second),
    Fmt = fun(N) -> io_lib:format("~2..0w", [N rem 100]) end,
    case Y < 2050 of
        true -> {utcTime, lists:flatten([Fmt(Y), Fmt(Mo), Fmt(D), Fmt(H), Fmt(Mi), Fmt(S), "Z"])};
        false -> {generalTime, lists:flatten([integer_to_list(Y), Fmt(Mo), Fmt(D), Fmt(H), Fmt(Mi),
                                              Fmt(S), "Z"])}
    end.

spki(#'ECPrivateKey'{publicKey = Pub}) ->
    #'OTPSubjectPublicKeyInfo'{
       algorithm = #'PublicKeyAlgorithm'{algorithm = ?'id-ecPublicKey',
                                         parameters = {namedCurve, ?'secp256r1'}},
       subjectPublicKey = #'ECPoint'{point = Pub}};
spki(#'RSAPrivateKey'{modulus = N, publicExponent = E}) ->
    #'OTPSubjectPublicKeyInfo'{
       algorithm = #'PublicKeyAlgorithm'{algorithm = ?'rsaEncryption', parameters = 'NULL'},
       subjectPublicKey = #'RSAPublicKey'{modulus = N, publicExponent = E}}.

%% The subject key identifier: SHA-1 of the public key's bits (RFC 5280 4.2.1.2, method 1, as
%% OpenSSL's "hash").
key_id(#'ECPrivateKey'{publicKey = Pub}) -> crypto:hash(sha, Pub);
key_id(#'RSAPrivateKey'{modulus = N, publicExponent = E}) ->
    crypto:hash(sha, public_key:der_encode('RSAPublicKey', #'RSAPublicKey'{modulus = N,
                                                                          publicExponent = E})).

extensions(Spec, Role, KeyId, IssuerId) ->
    Basic = case Role of
                ca -> #'BasicConstraints'{cA = true,
                                          pathLenConstraint = maps:get(path_len, Spec)};
                _ -> #'BasicConstraints'{cA = false, pathLenConstraint = asn1_NOVALUE}
            end,
    Usage = case Role of
                ca -> [keyCertSign, cRLSign];
                _ -> [digitalSignature]
            end,
    Eku = case Role of
              server -> [#'Extension'{extnID = ?'id-ce-extKeyUsage', critical = false,
                                      extnValue = [?'id-kp-serverAuth']}];
              client -> [#'Extension'{extnID = ?'id-ce-extKeyUsage', critical = false,
                                      extnValue = [?'id-kp-clientAuth']}];
              ca -> []
          end,
    Aki = case IssuerId of
              none -> [];
              _ -> [#'Extension'{extnID = ?'id-ce-authorityKeyIdentifier', critical = false,
                                 extnValue = #'AuthorityKeyIdentifier'{keyIdentifier = IssuerId}}]
          end,
    San = case maps:get(names, Spec) of
              [] -> [];
              Names -> [#'Extension'{extnID = ?'id-ce-subjectAltName', critical = false,
                                     extnValue = [general_name(N) || N <- Names]}]
          end,
    [#'Extension'{extnID = ?'id-ce-basicConstraints', critical = true, extnValue = Basic},
     #'Extension'{extnID = ?'id-ce-keyUsage', critical = true, extnValue = Usage}]
        ++ Eku ++
        [#'Extension'{extnID = ?'id-ce-subjectKeyIdentifier', critical = false, extnValue = KeyId}]
        ++ Aki ++ San.

general_name(Name) ->
    case inet:parse_strict_address(Name) of
        {ok, {A, B, C, D}} -> {iPAddress, <<A, B, C, D>>};
        {ok, Ip6} -> {iPAddress, << <<W:16>> || W <- tuple_to_list(Ip6) >>};
        {error, _} -> {dNSName, Name}
    end.
