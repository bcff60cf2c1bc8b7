# C tests, end-to-end, pkg-config, sanitizer and fuzz targets (docs/testing.md).
#
#   make c-test           C tests (test/c/*.c, one binary, each test in its own process)
#   make e2e              test/e2e.sh against $(BUILD)/cbench-server with curl and h2load
#   make pkgconfig-test   `make install` into a temporary prefix; hello.c linked dynamically (rpath, LD_LIBRARY_PATH)
#                         and fully statically with pkg-config; collide.c (its own llhttp) with the static library
#   make lib-symbols-test nm: the shipped libcbench.a / .so export exactly the cb_* API
#   make asan             the library, the C tests and e2e again in build/asan with ASan + UBSan
#   make fuzz             libFuzzer on the HTTP/1.1 connection code for FUZZ_SECONDS (default 60)
#   make fuzz-smoke       the same for FUZZ_SMOKE_SECONDS (default 20) with a fixed seed, as `make test` runs it
#   make adv-test         the adversarial cases of hardening round 3 (issue 22) alone: the C tests adv_* and pace_*,
#                         cbench-load against hostile servers, the same raw bytes to nif, port and ehttpd
#                         (cbench_adv_SUITE); make test runs each of them inside c-test and test-beam
#
# CTEST_ARGS passes options or test names to the runner: make c-test CTEST_ARGS='-v wire_*'

CTEST_SRCS := $(sort $(wildcard test/c/*.c))
CTEST_HDRS := $(wildcard test/c/*.h)
CTEST_BIN := $(BUILD)/test/cbench-tests
CTEST_JOBS ?= 2
CTEST_ARGS ?=
CTEST_CFLAGS := -std=gnu11 $(OPT) $(WARN) -D_GNU_SOURCE -Iinclude -Isrc -I$(LLHTTP_INC) -Itest/c -Ic_src $(DEP_CFLAGS) $(JSON_CFLAGS) \
  $(EXTRA_CFLAGS)

SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
SAN_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

FUZZ_CC ?= clang
FUZZ_DIR := build/fuzz
FUZZ_SECONDS ?= 60
FUZZ_SMOKE_SECONDS ?= 20
# Empty: libFuzzer picks a seed (exploring runs). The smokes of `make test` pass a fixed one, so that CI
# runs the same inputs every time and a failure there can be replayed; finding new bugs is `make fuzz`'s job.
FUZZ_SEED ?=
FUZZ_SMOKE_SEED := 1
FUZZ_SEED_FLAG = $(if $(FUZZ_SEED),-seed=$(FUZZ_SEED))
FUZZ_CFLAGS := -std=gnu11 -g -O1 -D_GNU_SOURCE -fno-omit-frame-pointer $(LLHTTP_DEFS) -Iinclude -Isrc -I$(LLHTTP_INC) \
  $(DEP_CFLAGS)
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_LIB_OBJS := $(LIB_SRCS:src/%.c=$(FUZZ_DIR)/obj/%.o) \
  $(FUZZ_DIR)/obj/llhttp/llhttp.o $(FUZZ_DIR)/obj/llhttp/api.o $(FUZZ_DIR)/obj/llhttp/http.o
FUZZ_RUN_FLAGS := -max_len=4096 -timeout=20 -rss_limit_mb=2048 -dict=test/fuzz/http1.dict -print_final_stats=1

TEST_TARGETS += c-test e2e lib-symbols-test pkgconfig-test asan fuzz-smoke
CLEAN_PATHS += build/asan $(FUZZ_DIR)

.PHONY: c-test e2e pkgconfig-test lib-symbols-test asan asan-run fuzz fuzz-smoke adv-test

# The tests use internal cb__ functions (socket-less connections) and the stub-file loader (src/stub_json.c):
# they link the internal archive.
$(CTEST_BIN): $(CTEST_SRCS) $(CTEST_HDRS) src/testing.h include/cbench.h src/stub_json.h \
  $(BUILD)/libcbench-internal.a
	@mkdir -p $(@D)
	$(CC) $(CTEST_CFLAGS) -o $@ $(CTEST_SRCS) $(BUILD)/libcbench-internal.a $(DEP_LIBS) $(LDFLAGS_EXTRA)

c-test: $(CTEST_BIN)
	CBT_FIXTURE_DIR=$(BUILD)/test/fixtures $(CTEST_BIN) -j $(CTEST_JOBS) $(CTEST_ARGS)

adv-test: $(CTEST_BIN) $(BEAM_PRIV) priv/cbench_load
	CBT_FIXTURE_DIR=$(BUILD)/test/fixtures $(CTEST_BIN) -j $(CTEST_JOBS) 'adv_*' 'pace_*'
	$(REBAR3) ct --suite test/cbench_load_SUITE --group hostile --readable true
	$(REBAR3) ct --suite test/cbench_adv_SUITE --readable true

e2e: $(BUILD)/cbench-server
	CBENCH_SERVER=$(BUILD)/cbench-server test/e2e.sh

# A prefix install used the three ways a C user links it: dynamically (found through rpath, and through
# LD_LIBRARY_PATH), fully statically with pkg-config --static (ldd: no libcbench, no shared library at all),
# and statically beside a program that has its own llhttp and cb__ names.
pkgconfig-test: $(BUILD)/libcbench.a $(BUILD)/libcbench.so $(BUILD)/cbench-server $(BUILD)/cbench-load
	@set -e; p=$$(mktemp -d); trap 'rm -rf "$$p"' EXIT; \
	echo "pkgconfig-test: make install PREFIX=$$p"; \
	$(MAKE) --no-print-directory install PREFIX=$$p >/dev/null; \
	export PKG_CONFIG_PATH=$$p/lib/pkgconfig; \
	echo "pkgconfig-test: pkg-config --cflags --libs cbench: $$(pkg-config --cflags --libs cbench)"; \
	echo "pkgconfig-test: pkg-config --static --libs cbench: $$(pkg-config --static --libs cbench)"; \
	$(CC) -std=gnu11 $(WARN) -o $$p/hello-shared test/pkgconfig/hello.c \
	  $$(pkg-config --cflags --libs cbench) -Wl,-rpath,$$p/lib; \
	$(CC) -std=gnu11 $(WARN) -o $$p/hello-ldpath test/pkgconfig/hello.c $$(pkg-config --cflags --libs cbench); \
	$(CC) -std=gnu11 $(WARN) -static -o $$p/hello-static test/pkgconfig/hello.c \
	  $$(pkg-config --static --cflags --libs cbench) 2>$$p/static.log || { cat $$p/static.log; exit 1; }; \
	$(CC) -std=gnu11 $(WARN) -o $$p/collide test/pkgconfig/collide.c -I$$p/include $$p/lib/libcbench.a \
	  $$(pkg-config --libs libuv libnghttp2 zlib jansson openssl) -lpthread -lm; \
	if ldd $$p/hello-shared | grep -q "$$p/lib/libcbench.so"; then :; \
	  else echo "pkgconfig-test: hello-shared is not linked to the installed libcbench.so"; exit 1; fi; \
	if ldd $$p/hello-static 2>&1 | grep -q libcbench; then \
	  echo "pkgconfig-test: hello-static depends on a shared libcbench: $$(ldd $$p/hello-static)"; exit 1; fi; \
	echo "pkgconfig-test: ldd hello-static: $$(ldd $$p/hello-static 2>&1 | head -1 | sed 's/^[[:space:]]*//')"; \
	if $$p/hello-ldpath >/dev/null 2>&1; then \
	  echo "pkgconfig-test: hello-ldpath ran without LD_LIBRARY_PATH (is a libcbench.so installed system-wide?)"; fi; \
	$$p/hello-shared && LD_LIBRARY_PATH=$$p/lib $$p/hello-ldpath && $$p/hello-static && $$p/collide; \
	for b in cbench-server cbench-load; do $$p/bin/$$b --version >/dev/null || { echo "pkgconfig-test: $$b not installed"; exit 1; }; done; \
	echo "pkgconfig-test: bin/cbench-server and bin/cbench-load installed"

# The shipped static library's global symbols are the public API and nothing else: no cb__ internals, no
# llhttp (a program with its own copy of either must link); the shared library exports the same set.
lib-symbols-test: $(BUILD)/libcbench.a $(BUILD)/libcbench.so
	@set -e; \
	bad=$$(nm -g --defined-only $(BUILD)/libcbench.a | awk 'NF == 3 { print $$3 }' | grep -v '^cb_[a-z]' || true); \
	bad="$$bad$$(nm -g --defined-only $(BUILD)/libcbench.a | awk 'NF == 3 { print $$3 }' | grep '^cb__' || true)"; \
	if [ -n "$$bad" ]; then echo "lib-symbols-test: libcbench.a exports $$(echo "$$bad" | wc -l) non-API symbols:" $$(echo "$$bad" | head -8) ...; exit 1; fi; \
	a=$$(nm -g --defined-only $(BUILD)/libcbench.a | awk 'NF == 3 { print $$3 }' | sort); \
	so=$$(nm -D --defined-only $(BUILD)/libcbench.so | awk 'NF == 3 { print $$3 }' | sort); \
	if [ "$$a" != "$$so" ]; then echo "lib-symbols-test: libcbench.a and libcbench.so export different symbols"; \
	  echo "libcbench.a:" $$a; echo "libcbench.so:" $$so; exit 1; fi; \
	api=$$(sed -n 's/^CB_EXTERN [^(]*[ *]\(cb_[a-z_]*\)(.*/\1/p' include/cbench.h | sort); \
	if [ "$$a" != "$$api" ]; then echo "lib-symbols-test: exports differ from the CB_EXTERN functions of cbench.h"; \
	  echo "cbench.h:" $$api; echo "libcbench.a:" $$a; exit 1; fi; \
	echo "lib-symbols-test: libcbench.a and libcbench.so export exactly the $$(echo "$$a" | wc -l) cb_* functions of cbench.h"

# The sanitizer build is the same Makefile with BUILD, OPT and flags overridden; it builds only what the tests
# need (the library, the CLI and the test binary) and runs the C tests and e2e.
asan:
	@$(MAKE) --no-print-directory BUILD=build/asan OPT="-O1 -g" LTO= EXTRA_CFLAGS="$(SAN_FLAGS)" \
	  LDFLAGS_EXTRA="$(SAN_FLAGS)" asan-run

asan-run: $(CTEST_BIN) $(BUILD)/cbench-server
	$(SAN_ENV) CBT_FIXTURE_DIR=$(BUILD)/test/fixtures CBT_TIMEOUT=90 $(CTEST_BIN) -j $(CTEST_JOBS) $(CTEST_ARGS)
	$(SAN_ENV) CBENCH_SERVER=$(BUILD)/cbench-server CBENCH_E2E_LOAD=2000 test/e2e.sh
	$(SAN_ENV) CBENCH_SERVER=$(BUILD)/cbench-server CBENCH_TLS_LOAD=1000 test/tls_e2e.sh
	$(SAN_ENV) CBENCH_SERVER=$(BUILD)/cbench-server test/tls_faults_e2e.sh
	$(SAN_ENV) CBENCH_SERVER=$(BUILD)/cbench-server test/tls_auth_e2e.sh

# ---- fuzzing: the library compiled again with clang for libFuzzer ----

$(FUZZ_DIR)/obj/%.o: src/%.c $(LIB_HDRS) include/cbench.h
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_SAN) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_DIR)/obj/llhttp/%.o: $(LLHTTP_DIR)/%.c Makefile
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_SAN) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_DIR)/fuzz_http1: test/fuzz/fuzz_http1.c $(FUZZ_LIB_OBJS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $< $(FUZZ_LIB_OBJS) $(DEP_LIBS)

# New inputs go to $(FUZZ_DIR)/corpus/http1 (the first directory); the seeds in test/fuzz/corpus are only read.
fuzz: $(FUZZ_DIR)/fuzz_http1
	@mkdir -p $(FUZZ_DIR)/corpus/http1 $(FUZZ_DIR)/artifacts/
	CBT_FIXTURE_DIR=$(FUZZ_DIR)/fixtures $(FUZZ_DIR)/fuzz_http1 $(FUZZ_RUN_FLAGS) $(FUZZ_SEED_FLAG) \
	  -max_total_time=$(FUZZ_SECONDS) -artifact_prefix=$(FUZZ_DIR)/artifacts/ \
	  $(FUZZ_DIR)/corpus/http1 test/fuzz/corpus/http1

fuzz-smoke:
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$(FUZZ_SMOKE_SECONDS) FUZZ_SEED=$(FUZZ_SMOKE_SEED)
