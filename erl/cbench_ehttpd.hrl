%% What cbench_ehttpd hands each acceptor and, through it, each connection process.

%% Counter slots, in the order of cb_stats_t, then the TLS handshakes (docs/tls.md); the route
%% counters follow them.
-define(STAT_KEYS, [conns_accepted, conns_closed, requests, bytes_read, bytes_written, status_400,
                    status_404, status_405, status_413, status_431, timeouts, resets,
                    accept_backoffs, faults, handler_unavailable, handler_timeouts,
                    tls_handshakes_full, tls_handshakes_resumed, tls_handshakes_failed,
                    tls_handshakes_refused, proxy_requests, proxy_upstream_connects,
                    proxy_upstream_reused, proxy_502, proxy_504, handler_overflows]).
-define(CONNS_ACCEPTED, 1).
-define(CONNS_CLOSED, 2).
-define(REQUESTS, 3).
-define(BYTES_READ, 4).
-define(BYTES_WRITTEN, 5).
-define(STATUS_400, 6).
-define(STATUS_404, 7).
-define(STATUS_405, 8).
-define(STATUS_413, 9).
-define(STATUS_431, 10).
-define(TIMEOUTS, 11).
-define(RESETS, 12).
-define(ACCEPT_BACKOFFS, 13).
-define(FAULTS, 14).
-define(HANDLER_UNAVAILABLE, 15).
-define(HANDLER_TIMEOUTS, 16).
-define(TLS_FULL, 17).
-define(TLS_RESUMED, 18).
-define(TLS_FAILED, 19).
-define(TLS_REFUSED, 20).
-define(PROXY_REQUESTS, 21).
-define(PROXY_CONNECTS, 22).
-define(PROXY_REUSED, 23).
-define(PROXY_502, 24).
-define(PROXY_504, 25).
-define(HANDLER_OVERFLOWS, 26).

%% What a TLS listener's connections need (docs/tls.md): the handshake's bound, the pending
%% handshakes of each acceptor (an atomics slot per acceptor, at most max_pending in each), and
%% the TLS connections (handshake done), requests and TCP accepts (counters 1, 2 and 3, for the
%% per-protocol counts).
-record(tls, {handshake_timeout :: pos_integer(),
              pending :: atomics:atomics_ref(),
              max_pending :: pos_integer(),
              %% TLS 1.2 session ids seen (cbench_ehttpd_conn:resumed/2).
              sessions :: ets:tid(),
              cnt :: counters:counters_ref()}).

-record(cfg, {cnt :: counters:counters_ref(),
              max_header :: pos_integer(),
              max_body :: pos_integer(),
              header_timeout :: pos_integer(),
              idle_timeout :: pos_integer(),
              max_queued_reply :: pos_integer(),
              close_mode :: boolean(),
              %% The key of the server's route table (cbench_router:table/1).
              table :: reference(),
              %% The counter slot of 404s.
              not_found_stat :: pos_integer(),
              journal :: cbench_ehttpd_journal:journal() | undefined,
              %% The bytes of /echo bodies and WebSocket messages the server's connections hold
              %% (docs/wire.md, Echo memory): at most 32 body limits in all.
              echo_held :: atomics:atomics_ref(),
              %% false on a cleartext listener.
              tls = false :: false | #tls{},
              %% What proxy stubs with `record => true' captured (docs/record.md).
              recorder :: cbench_ehttpd_record:recorder() | undefined}).
