# The benchmark harness (bench/): see docs/bench.md.
#
#   make bench              quick profile (about 5 minutes on 2 CPUs)
#   make bench FULL=1       every case, 3 runs of 10 s, latency ladder for every case
#   make bench PEERS=0      without inets httpd, mochiweb, yaws, nginx and h2o
#   make bench NODES=gen1@127.0.0.1,gen2@10.0.0.7  the load generator on those nodes at once (cbench:load/2 with
#                           nodes; started with cbench_peers when not running, over ssh for another host)
#   make bench CASES=roadrunner  roadrunner's scenarios and its resource table (FULL=1 includes them)
#   make bench BENCH_ARGS='--target mine=http://127.0.0.1:9000 --cases hello'
#   make bench-h1           cbench-server vs nginx, /hello and /file/small, HTTP/1.1 (issue 2)
#   make bench-node         nif, port, ehttpd in one node vs cbench-server (issue 4)
#   make bench-h2           cbench-server vs h2o over h2c, plus /file/big over HTTP/1.1 (issue 3)
#   make bench-routes       stubs, 100 routes and the journal against their baselines (issue 9, bench/routes.sh);
#                           ROUTES_ARGS='--mode callgrind' counts instructions instead of CPU time
#   make bench-ehttpd-routes  the same three comparisons on the ehttpd engine (bench/ehttpd/routes.sh)
#   make bench-test         unit tests of parsing and statistics, and a 1 s smoke run
#   make bench-instr        instructions per request (callgrind) of cbench-server and of the floor (issue 11)
#   make bench-ab           interleaved A B A B comparison of server CPU per request against peers (issue 11);
#                           AB_ARGS='--servers kept' keeps both servers of a pair across rounds (issue 28)
#   make bench-floor        the server floor (bench/floor.c) and the client floor (bench/floor_client.c, issue 28)
#   make bench-tls          TLS (issue 24): cbench-server, nginx and h2o with one certificate, hello and echo over
#                           HTTP/1.1+TLS and h2+TLS, full and resumed handshakes per CPU-second, bytes per idle
#                           TLS connection (bench/tls.sh, bench/tls_idle.py, TLS_ARGS); make bench runs it after
#                           the harness unless TLS=0
#   make bench-proxy        the proxy (issue 26): cbench-server (HTTP/1.1 and h2c upstream), nginx and h2o as reverse proxies to one cbench-server
#                           upstream, and cbench-server answering directly, over HTTP/1.1 and h2c (bench/proxy.sh,
#                           PROXY_ARGS); make bench runs it after the TLS cases unless PROXY=0
#   make soak               the mixed soak (issue 22): HTTP/1.1, h2c, WebSocket, faults, stub churn and journal
#                           reads at once on a nif server for SOAK_SECONDS (600), RSS sampled (bench/src/cbench_soak.erl)

BENCH_SRCS := $(wildcard bench/src/*.erl)
BENCH_BEAMS := $(BENCH_SRCS:bench/src/%.erl=bench/ebin/%.beam)
BENCH_TEST_SRCS := $(wildcard bench/test/*.erl)
BENCH_TEST_BEAMS := $(BENCH_TEST_SRCS:bench/test/%.erl=bench/test/ebin/%.beam)
BENCH_ARGS ?=
BENCH_PROFILE := $(if $(filter 1 yes true,$(FULL)),full,quick)
BENCH_PEERS := $(if $(filter 0 no false,$(PEERS)),--no-peers,)
# CASES=roadrunner: roadrunner's scenarios (docs/bench.md); CASES=a,b: those cases.
CASES ?=
BENCH_CASES := $(if $(CASES),$(if $(filter roadrunner,$(CASES)),--case-set roadrunner,--cases $(CASES)),)

ROUTES_ARGS ?=
# NODES=a@host,b@host: the load generators on those nodes (docs/bench.md, "More than one machine"); COOKIE=c
# for nodes already running with another cookie. FIXTURE_NODE is make bench-clients' (its fixture on a node);
# make bench's servers run on this machine, so it refuses FIXTURE_NODE rather than ignore it.
NODES ?=
COOKIE ?=
FIXTURE_NODE ?=
BENCH_NODES := $(if $(NODES),--nodes $(NODES),) $(if $(COOKIE),--cookie $(COOKIE),)
BENCH_NO_FIXTURE_NODE = @if [ -n "$(FIXTURE_NODE)" ]; then echo "make $@: FIXTURE_NODE is for make bench-clients;" \
  "make bench starts the servers it measures on this machine (NODES places the load generators)" >&2; exit 2; fi

.PHONY: bench-tls bench-proxy soak bench-instr bench-ab bench-floor bench-near-miss bench-routes bench-ehttpd-routes bench bench-h1 bench-node bench-h2 bench-build bench-engines bench-test bench-unit bench-smoke

bench-build: $(BENCH_BEAMS)

bench/ebin/%.beam: bench/src/%.erl | bench/ebin
	erlc +debug_info -o bench/ebin $<

bench/test/ebin/%.beam: bench/test/%.erl $(BENCH_BEAMS) | bench/test/ebin
	erlc +debug_info -pa bench/ebin -o bench/test/ebin $<

bench/ebin bench/test/ebin:
	@mkdir -p $@

# Whatever of the engines builds is measured; what does not is skipped with a note
# by the harness, so a build failure here does not stop the benchmark.
bench-engines:
	-@$(MAKE) --no-print-directory $(BUILD)/cbench-server
	-@if [ -f rebar.config ]; then rebar3 compile; fi

bench: deps bench-build bench-engines
	$(BENCH_NO_FIXTURE_NODE)
	bench/run.sh --profile $(BENCH_PROFILE) $(BENCH_PEERS) $(BENCH_CASES) $(BENCH_NODES) $(BENCH_ARGS)
	$(if $(filter 0 no false,$(TLS)),,$(MAKE) --no-print-directory bench-tls \
	  TLS_ARGS="$(if $(filter 0 no false,$(PEERS)),--servers cbench )$(if $(filter full,$(BENCH_PROFILE)),--rounds 5 --seconds 10 --warmup 3,--rounds 3 --seconds 5 --warmup 2) $(TLS_ARGS)")
	$(if $(filter 0 no false,$(PROXY)),,$(MAKE) --no-print-directory bench-proxy \
	  PROXY_ARGS="$(if $(filter 0 no false,$(PEERS)),--servers cbench$(comma)floor )$(if $(filter full,$(BENCH_PROFILE)),--rounds 5 --seconds 10 --warmup 3,--rounds 3 --seconds 5 --warmup 2) $(PROXY_ARGS)")

bench-h1: deps bench-build bench-engines
	$(BENCH_NO_FIXTURE_NODE)
	bench/run.sh --profile h1 $(BENCH_NODES) $(BENCH_ARGS)

bench-node: deps bench-build bench-engines
	$(BENCH_NO_FIXTURE_NODE)
	bench/run.sh --profile node $(BENCH_NODES) $(BENCH_ARGS)

bench-h2: deps bench-build bench-engines
	$(BENCH_NO_FIXTURE_NODE)
	bench/run.sh --profile h2 $(BENCH_NODES) $(BENCH_ARGS)

bench-routes: deps $(BUILD)/cbench-server
	bench/routes.sh $(ROUTES_ARGS)

# The same comparisons on the ehttpd engine (bench/ehttpd/routes.sh).
bench-ehttpd-routes: deps
	rebar3 compile
	bench/ehttpd/routes.sh $(EHTTPD_ROUTES_REQUESTS)

bench-unit: bench-build $(BENCH_TEST_BEAMS)
	erl -noshell -pa bench/ebin -pa bench/test/ebin -eval \
	  'case eunit:test(cbench_bench_tests) of ok -> halt(0); _ -> halt(1) end.'

bench-smoke: bench-build $(BENCH_TEST_BEAMS) $(BUILD)/cbench-server $(BUILD)/cbench-load $(BUILD)/bench-floor $(BUILD)/bench-floor-client \
  $(BUILD)/bench-floor-proxy
	bench/test/smoke.sh

bench-test: bench-unit bench-smoke

SOAK_SECONDS ?= 600
soak: deps bench-build beam $(BUILD)/cbench-load
	erl -noshell +sbwt none +sbwtdcpu none +sbwtdio none -pa bench/ebin -pa _build/default/lib/cbench/ebin \
	  -run cbench_soak main $(SOAK_SECONDS)

TEST_TARGETS += bench-test
CLEAN_PATHS += bench/ebin bench/test/ebin

# Issue 11: the HTTP/1.1 floor (a bare epoll loop, bench/floor.c), instruction counts and the A B A B comparison.
$(BUILD)/bench-floor: bench/floor.c
	@mkdir -p $(@D)
	$(CC) -std=gnu11 -O2 -Wall -Wextra -o $@ $<

# Issue 28: the HTTP/1.1 client floor (bench/floor_client.c), the least a load generator can do per request;
# bench/load_figures.sh (make bench-load) measures cbench-load, wrk and h2load against it.
$(BUILD)/bench-floor-client: bench/floor_client.c
	@mkdir -p $(@D)
	$(CC) -std=gnu11 $(OPT) $(WARN) -o $@ $<

# Issue 26: the HTTP/1.1 proxy floor (bench/floor_proxy.c), the least a reverse proxy can do per request;
# bench/proxy.sh measures it beside cbench's proxy.
$(BUILD)/bench-floor-proxy: bench/floor_proxy.c
	@mkdir -p $(@D)
	$(CC) -std=gnu11 $(OPT) $(WARN) -o $@ $<

bench-floor: $(BUILD)/bench-floor $(BUILD)/bench-floor-client $(BUILD)/bench-floor-proxy

# Issue 25: near-miss scoring of 100 stubs for one 404 (bench/near_miss.c, socket-less, the internal library).
$(BUILD)/bench-near-miss: bench/near_miss.c $(BUILD)/libcbench-internal.a src/testing.h
	@mkdir -p $(@D)
	$(CC) -std=gnu11 -O2 -g -Wall -Wextra -D_GNU_SOURCE -Iinclude -Isrc $(DEP_CFLAGS) -o $@ $< \
	  $(BUILD)/libcbench-internal.a $(DEP_LIBS) $(LDFLAGS_EXTRA)

bench-near-miss: $(BUILD)/bench-near-miss
	$(BUILD)/bench-near-miss $(NEAR_ARGS)

bench-instr: deps $(BUILD)/cbench-server $(BUILD)/bench-floor
	bench/instr.sh $(INSTR_ARGS)

bench-ab: deps $(BUILD)/cbench-server $(BUILD)/bench-floor
	bench/ab.sh $(AB_ARGS)

# Issue 24: the TLS cases (bench/tls.sh; docs/bench.md "TLS").
TLS ?=
TLS_ARGS ?=
bench-tls: deps $(BUILD)/cbench-server $(BUILD)/cbench-load
	bench/tls.sh $(TLS_ARGS)

# Issue 26: the proxy cases (bench/proxy.sh; docs/bench.md "Proxy").
PROXY ?=
PROXY_ARGS ?=
bench-proxy: deps $(BUILD)/cbench-server $(BUILD)/bench-floor $(BUILD)/bench-floor-proxy
	bench/proxy.sh $(PROXY_ARGS)
