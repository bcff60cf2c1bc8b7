# libFuzzer on the port program's one-pass reader of {reply, Items} frames (c_src/port_reply_frame.c), compared
# with the term codec it stands in for (test/fuzz/fuzz_port_reply.c). Both, and the ei backend, are compiled
# with clang for it; libei and the engine come from the fuzz build of mk/ctest.mk.
#
#   make fuzz-port-reply         libFuzzer for FUZZ_SECONDS (default 60), a random seed (FUZZ_SEED=N fixes one)
#   make fuzz-port-reply-smoke   the same for FUZZ_PORT_REPLY_SMOKE_SECONDS (default 10) with the fixed seed, as
#                                `make test` runs it

FUZZ_PORT_REPLY_SMOKE_SECONDS ?= 10
FUZZ_PORT_REPLY_SRCS := test/fuzz/fuzz_port_reply.c c_src/port_reply_frame.c $(CODEC_SRCS) terms/term_ei.c
FUZZ_PORT_REPLY_RUN_FLAGS := -max_len=4096 -timeout=20 -rss_limit_mb=2048 -print_final_stats=1

TEST_TARGETS += fuzz-port-reply-smoke

.PHONY: fuzz-port-reply fuzz-port-reply-smoke

$(FUZZ_DIR)/fuzz_port_reply: $(FUZZ_PORT_REPLY_SRCS) c_src/port.h $(CODEC_HDRS) terms/term_ei.h $(FUZZ_LIB_OBJS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_SAN) -fsanitize=fuzzer -Ic_src -Iterms -I$(EI_DIR)/include -o $@ \
	  $(FUZZ_PORT_REPLY_SRCS) $(FUZZ_LIB_OBJS) -L$(EI_DIR)/lib -lei $(DEP_LIBS)

# New inputs go to $(FUZZ_DIR)/corpus/port_reply; the seeds in test/fuzz/corpus/port_reply are only read.
fuzz-port-reply: $(FUZZ_DIR)/fuzz_port_reply
	@mkdir -p $(FUZZ_DIR)/corpus/port_reply $(FUZZ_DIR)/artifacts/
	$(FUZZ_DIR)/fuzz_port_reply $(FUZZ_PORT_REPLY_RUN_FLAGS) $(FUZZ_SEED_FLAG) \
	  -max_total_time=$(FUZZ_SECONDS) -artifact_prefix=$(FUZZ_DIR)/artifacts/ \
	  $(FUZZ_DIR)/corpus/port_reply test/fuzz/corpus/port_reply

fuzz-port-reply-smoke:
	@$(MAKE) --no-print-directory fuzz-port-reply FUZZ_SECONDS=$(FUZZ_PORT_REPLY_SMOKE_SECONDS) \
	  FUZZ_SEED=$(FUZZ_SMOKE_SEED)
