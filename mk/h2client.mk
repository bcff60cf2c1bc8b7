# (Named to sort after ctest.mk, whose FUZZ_* settings it uses.) The client layer's h2c session (src/client/h2_client.c:
# what the proxy reads from an h2c upstream) under libFuzzer, built from the client objects of mk/ctest.mk's fuzz
# build (FUZZ_CLIENT_OBJS, mk/h1client.mk), the proxy's allocator for its sessions and the system nghttp2. Its behaviour tests are C tests (proxy_h2up_*).
#
#   make fuzz-h2-client         libFuzzer for FUZZ_SECONDS (default 60), a random seed (FUZZ_SEED=N fixes one)
#   make fuzz-h2-client-smoke   the same for FUZZ_H2_CLIENT_SMOKE_SECONDS (default 15) with the fixed seed, as
#                               `make test` runs it

FUZZ_H2_CLIENT_SMOKE_SECONDS ?= 15
FUZZ_H2_CLIENT_RUN_FLAGS := -max_len=8192 -timeout=20 -rss_limit_mb=2048 -print_final_stats=1

TEST_TARGETS += fuzz-h2-client-smoke

.PHONY: fuzz-h2-client fuzz-h2-client-smoke

# With the proxy's allocator for the session (proto/h2_mem.c: only libc below it).
FUZZ_H2_CLIENT_OBJS := $(FUZZ_CLIENT_OBJS) $(FUZZ_DIR)/obj/proto/h2_mem.o

$(FUZZ_DIR)/fuzz_h2_client: test/fuzz/fuzz_h2_client.c $(FUZZ_H2_CLIENT_OBJS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $< $(FUZZ_H2_CLIENT_OBJS) $$(pkg-config --libs libnghttp2)

# New inputs go to $(FUZZ_DIR)/corpus/h2_client; the seeds in test/fuzz/corpus/h2_client are only read.
fuzz-h2-client: $(FUZZ_DIR)/fuzz_h2_client
	@mkdir -p $(FUZZ_DIR)/corpus/h2_client $(FUZZ_DIR)/artifacts/h2_client/
	$(FUZZ_DIR)/fuzz_h2_client $(FUZZ_H2_CLIENT_RUN_FLAGS) $(FUZZ_SEED_FLAG) \
	  -max_total_time=$(FUZZ_SECONDS) -artifact_prefix=$(FUZZ_DIR)/artifacts/h2_client/ \
	  $(FUZZ_DIR)/corpus/h2_client test/fuzz/corpus/h2_client

fuzz-h2-client-smoke:
	@$(MAKE) --no-print-directory fuzz-h2-client FUZZ_SECONDS=$(FUZZ_H2_CLIENT_SMOKE_SECONDS) \
	  FUZZ_SEED=$(FUZZ_SMOKE_SEED)
