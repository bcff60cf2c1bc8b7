# cbench-load, the load generator (src/load/, c_src/cbench_load.c; docs/bench.md "cbench-load").
#
#   make load            build/cbench-load (and priv/cbench_load, the copy cbench:load/2 runs)
#   make load-test       the histogram's unit tests, the WebSocket reader's wire tests and the end-to-end tests of test/load/ (part of make test)
#   make load-hostile    the CT suite's group hostile alone: cbench-load against servers that attack it
#   make load-fuzz       libFuzzer on what cbench-load reads (HTTP/1.1 answers, WebSocket frames) for FUZZ_SECONDS
#   make load-fuzz-smoke the same for 15 s with the fixed seed, as make test runs it
#   make bench-load      the closing figures: cbench-load against h2load and wrk on cbench-server /hello
#
# It shares the engine's flags, llhttp objects and lowest layer (src/client/: the HTTP/1.1 answer parser, whose
# objects it links as the library builds them), nothing else: its own files, its own cbl_ prefix.
# libwslay (WebSocket framing) and libjansson (JSON) come from Debian (scripts/deps.sh); wslay ships no .pc.

LOAD_SRCS := $(wildcard src/load/*.c)
CLIENT_SRCS := $(wildcard src/client/*.c)
LOAD_OBJS := $(LOAD_SRCS:src/load/%.c=$(BUILD)/obj/load/%.o) $(CLIENT_SRCS:src/%.c=$(BUILD)/obj/%.o)
LOAD_CFLAGS := -std=gnu11 $(OPT) $(WARN) -D_GNU_SOURCE -Isrc/load -Isrc -I$(LLHTTP_INC) $(DEP_CFLAGS) \
  $(shell pkg-config --cflags jansson 2>/dev/null) $(EXTRA_CFLAGS)
LOAD_LIBS := $(DEP_LIBS) $(shell pkg-config --libs jansson 2>/dev/null || echo -ljansson) -lwslay -lm
LOAD_BIN := $(BUILD)/cbench-load

ALL_TARGETS += $(LOAD_BIN) priv/cbench_load
TEST_TARGETS += load-test
CLEAN_PATHS += priv/cbench_load

.PHONY: load load-test load-unit load-e2e load-hostile load-asan load-fuzz load-fuzz-smoke bench-load

load: $(LOAD_BIN) priv/cbench_load

$(BUILD)/obj/load/%.o: src/load/%.c src/load/*.h src/client/client.h
	@mkdir -p $(@D)
	$(CC) $(LOAD_CFLAGS) -c $< -o $@

$(LOAD_BIN): c_src/cbench_load.c $(LOAD_OBJS) $(LLHTTP_OBJS)
	$(CC) $(LOAD_CFLAGS) -o $@ $< $(LOAD_OBJS) $(LLHTTP_OBJS) $(LOAD_LIBS) $(LDFLAGS_EXTRA)

# The copy the Erlang application runs (cbench:load/2 finds it in priv/, like the port program).
priv/cbench_load: $(LOAD_BIN) | priv
	cp $< $@

# rebar3's pre-compile hook builds beam-priv; the CT suites run cbench:load/2.
beam-priv: priv/cbench_load
test-beam: priv/cbench_load $(BUILD)/cbench-server

# ---- tests ----

LOAD_TEST_BIN := $(BUILD)/test/cbench-load-hist

$(LOAD_TEST_BIN): test/load/test_hist.c src/load/hist.c src/load/hist.h
	@mkdir -p $(@D)
	$(CC) $(LOAD_CFLAGS) -o $@ test/load/test_hist.c src/load/hist.c -lm $(LDFLAGS_EXTRA)

# The WebSocket reader's wire tests (test/load/test_ws.c): exact server bytes in, result, echoes and frames out.
LOAD_WS_TEST_BIN := $(BUILD)/test/cbench-load-ws

$(LOAD_WS_TEST_BIN): test/load/test_ws.c $(LOAD_OBJS) $(LLHTTP_OBJS)
	@mkdir -p $(@D)
	$(CC) $(LOAD_CFLAGS) -o $@ $< $(LOAD_OBJS) $(LLHTTP_OBJS) $(LOAD_LIBS) $(LDFLAGS_EXTRA)

# The TLS layer's wire tests (test/load/test_tls.c): an OpenSSL server in the process, on memory BIOs.
LOAD_TLS_TEST_BIN := $(BUILD)/test/cbench-load-tls

$(LOAD_TLS_TEST_BIN): test/load/test_tls.c $(LOAD_OBJS) $(LLHTTP_OBJS)
	@mkdir -p $(@D)
	$(CC) $(LOAD_CFLAGS) -o $@ $< $(LOAD_OBJS) $(LLHTTP_OBJS) $(LOAD_LIBS) $(LDFLAGS_EXTRA)

load-unit: $(LOAD_TEST_BIN) $(LOAD_WS_TEST_BIN) $(LOAD_TLS_TEST_BIN)
	$(LOAD_TEST_BIN)
	$(LOAD_WS_TEST_BIN)
	$(LOAD_TLS_TEST_BIN)

# Fixed-seed histograms written by cbench-load's own writer, for the exact-merge test of erl/cbench_hist.erl
# (test/cbench_cluster_SUITE.erl, hist_merge_exact).
LOAD_HISTDUMP := $(BUILD)/test/cbench-load-histdump

$(LOAD_HISTDUMP): test/load/hist_dump.c $(LOAD_OBJS) $(LLHTTP_OBJS)
	@mkdir -p $(@D)
	$(CC) $(LOAD_CFLAGS) -o $@ $< $(LOAD_OBJS) $(LLHTTP_OBJS) $(LOAD_LIBS) $(LDFLAGS_EXTRA)

test-beam: $(LOAD_HISTDUMP)

# The end-to-end tests are the Common Test suite test/cbench_load_SUITE.erl (cbench:load/2 against the nif
# engine, fault servers written in gen_tcp, cbench-server frozen with SIGSTOP, the CLI's usage errors, and the
# group hostile: issue 22's servers that flood WebSocket pings without reading, answer three times, answer a
# 200 for the 101, or never end a head, a chunked body or their 100 Continues, each run checked for its exit
# status, its error counters and its peak RSS); make test runs it with the other suites (test-beam) and under
# ASan (load-asan). These targets run it, or its group hostile (about 15 s), alone.
load-e2e: priv/cbench_load $(BUILD)/cbench-server
	$(REBAR3) ct --suite test/cbench_load_SUITE --readable true

load-hostile: priv/cbench_load
	$(REBAR3) ct --suite test/cbench_load_SUITE --group hostile --readable true

load-test: load-unit $(BUILD)/cbench-server priv/cbench_load

# The benchmark harness runs cbench-load for the throughput phase and the latency ladder.
bench-build: $(LOAD_BIN)

# The closing figures of issue 10: bench/load_figures.sh (DUR, RUNS, SERVER_CPU, LOAD_CPU, OUT).
bench-load: deps $(LOAD_BIN) $(BUILD)/cbench-server $(BUILD)/bench-floor-client
	bench/load_figures.sh

# The WebSocket reader's wire tests and the same suite against cbench-load built with ASan + UBSan (build/asan, as
# make asan): any memory error aborts the program and a leak makes it exit non-zero, which fails the test that ran it.
load-asan:
	@$(MAKE) --no-print-directory BUILD=build/asan OPT="-O1 -g" LTO= EXTRA_CFLAGS="$(SAN_FLAGS)" \
	  LDFLAGS_EXTRA="$(SAN_FLAGS)" build/asan/cbench-load build/asan/test/cbench-load-ws build/asan/test/cbench-load-tls
	$(SAN_ENV) build/asan/test/cbench-load-ws
	$(SAN_ENV) build/asan/test/cbench-load-tls
	$(SAN_ENV) CBENCH_LOAD=$(CURDIR)/build/asan/cbench-load $(REBAR3) ct --suite test/cbench_load_SUITE --readable true

TEST_TARGETS += load-asan

# libFuzzer on cbench-load's readers of a server's bytes (test/load/fuzz_load.c): the load objects built again with
# clang and the fuzz build's sanitizers (mk/ctest.mk's FUZZ_* settings). New inputs go to $(FUZZ_DIR)/corpus/load;
# the seeds in test/load/corpus are only read.
LOAD_FUZZ_OBJS := $(LOAD_SRCS:src/load/%.c=$(FUZZ_DIR)/obj/load/%.o) $(CLIENT_SRCS:src/%.c=$(FUZZ_DIR)/obj/%.o)
LOAD_FUZZ_CFLAGS := -std=gnu11 -g -O1 -D_GNU_SOURCE -fno-omit-frame-pointer -Isrc/load -Isrc -I$(LLHTTP_INC) $(DEP_CFLAGS) \
  $(shell pkg-config --cflags jansson 2>/dev/null)
LOAD_FUZZ_SMOKE_SECONDS ?= 15

$(FUZZ_DIR)/obj/load/%.o: src/load/%.c src/load/*.h src/client/client.h
	@mkdir -p $(@D)
	$(FUZZ_CC) $(LOAD_FUZZ_CFLAGS) $(FUZZ_SAN) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_DIR)/fuzz_load: test/load/fuzz_load.c $(LOAD_FUZZ_OBJS) $(FUZZ_DIR)/obj/llhttp/llhttp.o \
  $(FUZZ_DIR)/obj/llhttp/api.o $(FUZZ_DIR)/obj/llhttp/http.o
	$(FUZZ_CC) $(LOAD_FUZZ_CFLAGS) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $< $(LOAD_FUZZ_OBJS) \
	  $(FUZZ_DIR)/obj/llhttp/llhttp.o $(FUZZ_DIR)/obj/llhttp/api.o $(FUZZ_DIR)/obj/llhttp/http.o $(LOAD_LIBS)

load-fuzz: $(FUZZ_DIR)/fuzz_load
	@mkdir -p $(FUZZ_DIR)/corpus/load $(FUZZ_DIR)/artifacts/
	$(FUZZ_DIR)/fuzz_load -max_len=4096 -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 $(FUZZ_SEED_FLAG) \
	  -max_total_time=$(FUZZ_SECONDS) -artifact_prefix=$(FUZZ_DIR)/artifacts/ $(FUZZ_DIR)/corpus/load test/load/corpus

load-fuzz-smoke:
	@$(MAKE) --no-print-directory load-fuzz FUZZ_SECONDS=$(LOAD_FUZZ_SMOKE_SECONDS) FUZZ_SEED=$(FUZZ_SMOKE_SEED)

TEST_TARGETS += load-fuzz-smoke
