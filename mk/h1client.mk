# (Named to sort after ctest.mk, whose FUZZ_* settings it uses.) The client layer (src/client/: the HTTP/1.1 answer parser the proxy and cbench-load share) under libFuzzer,
# built from the client objects of mk/ctest.mk's fuzz build and llhttp. Its unit tests are C tests (client_*).
#
#   make fuzz-h1-response         libFuzzer for FUZZ_SECONDS (default 60), a random seed (FUZZ_SEED=N fixes one)
#   make fuzz-h1-response-smoke   the same for FUZZ_H1_RESPONSE_SMOKE_SECONDS (default 15) with the fixed seed, as
#                                 `make test` runs it

FUZZ_H1_RESPONSE_SMOKE_SECONDS ?= 15
FUZZ_H1_RESPONSE_RUN_FLAGS := -max_len=4096 -timeout=20 -rss_limit_mb=2048 -dict=test/fuzz/h1_response.dict \
  -print_final_stats=1
FUZZ_CLIENT_OBJS := $(patsubst src/%.c,$(FUZZ_DIR)/obj/%.o,$(filter-out src/client/tls_client.c,$(wildcard src/client/*.c))) \
  $(FUZZ_DIR)/obj/llhttp/llhttp.o $(FUZZ_DIR)/obj/llhttp/api.o $(FUZZ_DIR)/obj/llhttp/http.o

TEST_TARGETS += fuzz-h1-response-smoke

.PHONY: fuzz-h1-response fuzz-h1-response-smoke

$(FUZZ_DIR)/fuzz_h1_response: test/fuzz/fuzz_h1_response.c $(FUZZ_CLIENT_OBJS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $< $(FUZZ_CLIENT_OBJS) $$(pkg-config --libs libnghttp2)

# New inputs go to $(FUZZ_DIR)/corpus/h1_response; the seeds in test/fuzz/corpus/h1_response are only read.
fuzz-h1-response: $(FUZZ_DIR)/fuzz_h1_response
	@mkdir -p $(FUZZ_DIR)/corpus/h1_response $(FUZZ_DIR)/artifacts/h1_response/
	$(FUZZ_DIR)/fuzz_h1_response $(FUZZ_H1_RESPONSE_RUN_FLAGS) $(FUZZ_SEED_FLAG) \
	  -max_total_time=$(FUZZ_SECONDS) -artifact_prefix=$(FUZZ_DIR)/artifacts/h1_response/ \
	  $(FUZZ_DIR)/corpus/h1_response test/fuzz/corpus/h1_response

fuzz-h1-response-smoke:
	@$(MAKE) --no-print-directory fuzz-h1-response FUZZ_SECONDS=$(FUZZ_H1_RESPONSE_SMOKE_SECONDS) \
	  FUZZ_SEED=$(FUZZ_SMOKE_SEED)
