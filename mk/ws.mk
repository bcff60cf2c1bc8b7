# The WebSocket frame path (src/proto/ws.c) under libFuzzer, with the library objects of mk/ctest.mk's fuzz build.
#
#   make fuzz-ws          libFuzzer for FUZZ_SECONDS (default 60), a random seed (FUZZ_SEED=N fixes one)
#   make fuzz-ws-smoke    the same for FUZZ_WS_SMOKE_SECONDS (default 15) with the fixed seed, as `make test` runs it

FUZZ_WS_SMOKE_SECONDS ?= 15
FUZZ_WS_RUN_FLAGS := -max_len=4096 -timeout=20 -rss_limit_mb=2048 -print_final_stats=1

TEST_TARGETS += fuzz-ws-smoke

.PHONY: fuzz-ws fuzz-ws-smoke

$(FUZZ_DIR)/fuzz_ws: test/fuzz/fuzz_ws.c test/fuzz/fuzz_common.h $(FUZZ_LIB_OBJS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $< $(FUZZ_LIB_OBJS) $(DEP_LIBS)

# New inputs go to $(FUZZ_DIR)/corpus/ws; the seeds in test/fuzz/corpus/ws are only read.
fuzz-ws: $(FUZZ_DIR)/fuzz_ws
	@mkdir -p $(FUZZ_DIR)/corpus/ws $(FUZZ_DIR)/artifacts/ws/
	CBT_FIXTURE_DIR=$(FUZZ_DIR)/fixtures $(FUZZ_DIR)/fuzz_ws $(FUZZ_WS_RUN_FLAGS) $(FUZZ_SEED_FLAG) \
	  -max_total_time=$(FUZZ_SECONDS) -artifact_prefix=$(FUZZ_DIR)/artifacts/ws/ \
	  $(FUZZ_DIR)/corpus/ws test/fuzz/corpus/ws

fuzz-ws-smoke:
	@$(MAKE) --no-print-directory fuzz-ws FUZZ_SECONDS=$(FUZZ_WS_SMOKE_SECONDS) FUZZ_SEED=$(FUZZ_SMOKE_SEED)
