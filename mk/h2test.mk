# HTTP/2 (h2c) tests: the raw-frame C tests, end to end with nghttp / curl / h2load, the sanitizer run and the
# libFuzzer target (docs/h2-tests.md). Included after mk/ctest.mk, whose variables (CTEST_BIN, SAN_FLAGS,
# SAN_ENV, FUZZ_*) it reuses.
#
#   make h2-test          the h2_* C tests (test/c/test_h2.c, in the shared test binary)
#   make h2-e2e           test/h2_e2e.sh against $(BUILD)/cbench-server
#   make h2-asan          the h2_* C tests and h2-e2e (smaller load) against an ASan + UBSan build in build/asan
#   make fuzz-h2          libFuzzer on the HTTP/2 connection code for FUZZ_SECONDS (default 60)
#   make fuzz-h2-smoke    the same for FUZZ_H2_SMOKE_SECONDS (default 15) with a fixed seed, as `make test` runs it
#
# test/c/test_h2.c and test/c/h2client.c are compiled into the one C test binary with the other test/c files,
# so `make c-test` and `make asan` run the h2_* tests too; h2-test runs only them. `make test` adds h2-e2e,
# h2-asan (for the sanitized server under real h2 clients) and fuzz-h2-smoke.

H2_E2E_LOAD ?= 20000
H2_ASAN_E2E_LOAD ?= 2000
FUZZ_H2_SMOKE_SECONDS ?= 15
FUZZ_H2_RUN_FLAGS := -max_len=4096 -timeout=20 -rss_limit_mb=2048 -print_final_stats=1

TEST_TARGETS += h2-e2e h2-asan fuzz-h2-smoke

.PHONY: h2-test h2-e2e h2-asan h2-asan-run fuzz-h2 fuzz-h2-smoke

h2-test: $(CTEST_BIN)
	CBT_FIXTURE_DIR=$(BUILD)/test/fixtures $(CTEST_BIN) -j $(CTEST_JOBS) 'h2_*'

h2-e2e: $(BUILD)/cbench-server
	CBENCH_SERVER=$(BUILD)/cbench-server CBENCH_H2_E2E_LOAD=$(H2_E2E_LOAD) test/h2_e2e.sh

# The same sanitizer build as `make asan` (same BUILD, OPT and flags, so nothing is compiled twice).
h2-asan:
	@$(MAKE) --no-print-directory BUILD=build/asan OPT="-O1 -g" LTO= EXTRA_CFLAGS="$(SAN_FLAGS)" \
	  LDFLAGS_EXTRA="$(SAN_FLAGS)" h2-asan-run

h2-asan-run: $(CTEST_BIN) $(BUILD)/cbench-server
	$(SAN_ENV) CBT_FIXTURE_DIR=$(BUILD)/test/fixtures CBT_TIMEOUT=90 $(CTEST_BIN) -j $(CTEST_JOBS) 'h2_*'
	$(SAN_ENV) CBENCH_SERVER=$(BUILD)/cbench-server CBENCH_H2_E2E_LOAD=$(H2_ASAN_E2E_LOAD) test/h2_e2e.sh

# ---- fuzzing: the library objects of mk/ctest.mk's fuzz build, with the HTTP/2 target ----

$(FUZZ_DIR)/fuzz_h2: test/fuzz/fuzz_h2.c $(FUZZ_LIB_OBJS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $< $(FUZZ_LIB_OBJS) $(DEP_LIBS)

# New inputs go to $(FUZZ_DIR)/corpus/h2; the seeds in test/fuzz/corpus/h2 are only read.
fuzz-h2: $(FUZZ_DIR)/fuzz_h2
	@mkdir -p $(FUZZ_DIR)/corpus/h2 $(FUZZ_DIR)/artifacts/h2/
	CBT_FIXTURE_DIR=$(FUZZ_DIR)/fixtures $(FUZZ_DIR)/fuzz_h2 $(FUZZ_H2_RUN_FLAGS) $(FUZZ_SEED_FLAG) \
	  -max_total_time=$(FUZZ_SECONDS) -artifact_prefix=$(FUZZ_DIR)/artifacts/h2/ \
	  $(FUZZ_DIR)/corpus/h2 test/fuzz/corpus/h2

fuzz-h2-smoke:
	@$(MAKE) --no-print-directory fuzz-h2 FUZZ_SECONDS=$(FUZZ_H2_SMOKE_SECONDS) FUZZ_SEED=$(FUZZ_SMOKE_SEED)
