# TLS (issue 24, docs/tls.md): cbench-server with --tls against curl, nghttp and h2load.
#
#   make tls-e2e          test/tls_e2e.sh, test/tls_auth_e2e.sh (client certificates, resumption), then
#                         test/tls_faults_e2e.sh (the TLS faults' table of docs/faults.md), against
#                         $(BUILD)/cbench-server (the sanitizer build runs all three in make asan)

TEST_TARGETS += tls-e2e
.PHONY: tls-e2e

tls-e2e: $(BUILD)/cbench-server
	CBENCH_SERVER=$(BUILD)/cbench-server test/tls_e2e.sh
	CBENCH_SERVER=$(BUILD)/cbench-server test/tls_auth_e2e.sh
	CBENCH_SERVER=$(BUILD)/cbench-server test/tls_faults_e2e.sh

# ---- fuzzing: the TLS transport's glue under a real connection (test/fuzz/fuzz_tls.c), with the library objects
# of mk/ctest.mk's fuzz build ----
#
#   make fuzz-tls         libFuzzer on the TLS transport for FUZZ_SECONDS (default 60)
#   make fuzz-tls-smoke   the same for FUZZ_TLS_SMOKE_SECONDS (default 15) with a fixed seed, as `make test` runs it

FUZZ_TLS_SMOKE_SECONDS ?= 15
FUZZ_TLS_RUN_FLAGS := -max_len=4096 -timeout=20 -rss_limit_mb=2048 -print_final_stats=1

TEST_TARGETS += fuzz-tls-smoke
.PHONY: fuzz-tls fuzz-tls-smoke

$(FUZZ_DIR)/fuzz_tls: test/fuzz/fuzz_tls.c test/fuzz/fuzz_common.h $(FUZZ_LIB_OBJS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $< $(FUZZ_LIB_OBJS) $(DEP_LIBS)

# New inputs go to $(FUZZ_DIR)/corpus/tls; the seeds in test/fuzz/corpus/tls are only read.
fuzz-tls: $(FUZZ_DIR)/fuzz_tls
	@mkdir -p $(FUZZ_DIR)/corpus/tls $(FUZZ_DIR)/artifacts/tls/
	CBT_FIXTURE_DIR=$(FUZZ_DIR)/fixtures $(FUZZ_DIR)/fuzz_tls $(FUZZ_TLS_RUN_FLAGS) $(FUZZ_SEED_FLAG) \
	  -max_total_time=$(FUZZ_SECONDS) -artifact_prefix=$(FUZZ_DIR)/artifacts/tls/ \
	  $(FUZZ_DIR)/corpus/tls test/fuzz/corpus/tls

fuzz-tls-smoke:
	@$(MAKE) --no-print-directory fuzz-tls FUZZ_SECONDS=$(FUZZ_TLS_SMOKE_SECONDS) FUZZ_SEED=$(FUZZ_SMOKE_SEED)
