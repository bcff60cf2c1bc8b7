# cbench-load, the load generator (src/load/, c_src/cbench_load.c; docs/bench.md "cbench-load").
#
#   make load            build/cbench-load (and priv/cbench_load, the copy cbench:load/2 runs)
#   make load-test       the histogram's unit tests and the end-to-end tests of test/load/ (part of make test)
#   make bench-load      the closing figures: cbench-load against h2load and wrk on cbench-server /hello
#
# It shares the engine's flags and llhttp objects, nothing else: its own files, its own cbl_ prefix.
# libwslay (WebSocket framing) and libjansson (JSON) come from Debian (scripts/deps.sh); wslay ships no .pc.

LOAD_SRCS := $(wildcard src/load/*.c)
LOAD_OBJS := $(LOAD_SRCS:src/load/%.c=$(BUILD)/obj/load/%.o)
LOAD_CFLAGS := -std=gnu11 $(OPT) $(WARN) -D_GNU_SOURCE -Isrc/load -I$(LLHTTP_INC) $(DEP_CFLAGS) \
  $(shell pkg-config --cflags jansson 2>/dev/null) $(EXTRA_CFLAGS)
LOAD_LIBS := $(DEP_LIBS) $(shell pkg-config --libs jansson 2>/dev/null || echo -ljansson) -lwslay -lm
LOAD_BIN := $(BUILD)/cbench-load

ALL_TARGETS += $(LOAD_BIN) priv/cbench_load
TEST_TARGETS += load-test
CLEAN_PATHS += priv/cbench_load

.PHONY: load load-test load-unit load-e2e load-asan bench-load

load: $(LOAD_BIN) priv/cbench_load

$(BUILD)/obj/load/%.o: src/load/%.c src/load/*.h
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

load-unit: $(LOAD_TEST_BIN)
	$(LOAD_TEST_BIN)

# Fixed-seed histograms written by cbench-load's own writer, for the exact-merge test of erl/cbench_hist.erl
# (test/cbench_cluster_SUITE.erl, hist_merge_exact).
LOAD_HISTDUMP := $(BUILD)/test/cbench-load-histdump

$(LOAD_HISTDUMP): test/load/hist_dump.c $(LOAD_OBJS) $(LLHTTP_OBJS)
	@mkdir -p $(@D)
	$(CC) $(LOAD_CFLAGS) -o $@ $< $(LOAD_OBJS) $(LLHTTP_OBJS) $(LOAD_LIBS) $(LDFLAGS_EXTRA)

test-beam: $(LOAD_HISTDUMP)

# The end-to-end tests are the Common Test suite test/cbench_load_SUITE.erl (cbench:load/2 against the nif
# engine, fault servers written in gen_tcp, cbench-server frozen with SIGSTOP, the CLI's usage errors); make
# test runs it with the other suites (test-beam). This target runs it alone.
load-e2e: priv/cbench_load $(BUILD)/cbench-server
	$(REBAR3) ct --suite test/cbench_load_SUITE --readable true

load-test: load-unit $(BUILD)/cbench-server priv/cbench_load

# The benchmark harness runs cbench-load for the throughput phase and the latency ladder.
bench-build: $(LOAD_BIN)

# The closing figures of issue 10: bench/load_figures.sh (DUR, RUNS, SERVER_CPU, LOAD_CPU, OUT).
bench-load: deps $(LOAD_BIN) $(BUILD)/cbench-server
	bench/load_figures.sh

# The same suite against cbench-load built with ASan + UBSan (build/asan, as make asan): any memory error aborts
# the program and a leak makes it exit non-zero, which fails the test that ran it.
load-asan:
	@$(MAKE) --no-print-directory BUILD=build/asan OPT="-O1 -g" LTO= EXTRA_CFLAGS="$(SAN_FLAGS)" \
	  LDFLAGS_EXTRA="$(SAN_FLAGS)" build/asan/cbench-load
	$(SAN_ENV) CBENCH_LOAD=$(CURDIR)/build/asan/cbench-load $(REBAR3) ct --suite test/cbench_load_SUITE --readable true

TEST_TARGETS += load-asan
