# The body regex matcher (src/routes/body_match.c) under libFuzzer, against glibc's regexec, with the library
# objects of mk/ctest.mk's fuzz build.
#
#   make fuzz-regex         libFuzzer for FUZZ_SECONDS (default 60), a random seed (FUZZ_SEED=N fixes one)
#   make fuzz-regex-smoke   the same for FUZZ_REGEX_SMOKE_SECONDS (default 15) with the fixed seed, as `make test`

FUZZ_REGEX_SMOKE_SECONDS ?= 15
# Bodies of a few hundred bytes: glibc's regexec, the reference, is not linear in them.
FUZZ_REGEX_RUN_FLAGS := -max_len=512 -timeout=20 -rss_limit_mb=2048 -print_final_stats=1

TEST_TARGETS += fuzz-regex-smoke

.PHONY: fuzz-regex fuzz-regex-smoke

$(FUZZ_DIR)/fuzz_regex: test/fuzz/fuzz_regex.c $(FUZZ_LIB_OBJS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $< $(FUZZ_LIB_OBJS) $(DEP_LIBS)

# New inputs go to $(FUZZ_DIR)/corpus/regex; the seeds in test/fuzz/corpus/regex are only read.
fuzz-regex: $(FUZZ_DIR)/fuzz_regex
	@mkdir -p $(FUZZ_DIR)/corpus/regex $(FUZZ_DIR)/artifacts/regex/
	$(FUZZ_DIR)/fuzz_regex $(FUZZ_REGEX_RUN_FLAGS) $(FUZZ_SEED_FLAG) \
	  -max_total_time=$(FUZZ_SECONDS) -artifact_prefix=$(FUZZ_DIR)/artifacts/regex/ \
	  $(FUZZ_DIR)/corpus/regex test/fuzz/corpus/regex

fuzz-regex-smoke:
	@$(MAKE) --no-print-directory fuzz-regex FUZZ_SECONDS=$(FUZZ_REGEX_SMOKE_SECONDS) FUZZ_SEED=$(FUZZ_SMOKE_SEED)
