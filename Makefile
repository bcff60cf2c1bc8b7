# cbench build. `make` builds the C library and the CLI; `make test` runs every test; see README.md.
#
# Fragments in mk/*.mk add their own targets and append to TEST_TARGETS (run by `make test`),
# ALL_TARGETS (built by `make`) and CLEAN_PATHS.

PREFIX ?= /usr/local
# The version of include/cbench.h (CBENCH_VERSION_*), for cbench.pc.
VERSION := $(shell sed -n 's/^\#define CBENCH_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)/\2/p' include/cbench.h | paste -sd.)
BUILD ?= build
CC ?= cc
LD ?= ld
OBJCOPY ?= objcopy
# Dependencies come from Debian packages only: llhttp's C sources ship in node-llhttp.
LLHTTP_DIR ?= /usr/share/llhttp
LLHTTP_INC ?= /usr/share/include/llhttp

# jansson: the library reads stubs as JSON (the stub file, the admin API: src/stub_json.c, src/admin.c) and
# parses JSON for body matchers (src/routes/body_match.c). openssl (libssl, libcrypto): TLS, the certificates
# made for tests (src/base/certs.c), SHA-1 for WebSocket's accept key; the TLS transport (src/transport/tls.c).
PKGS := libuv libnghttp2 zlib jansson openssl
DEP_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
DEP_LIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lpthread -lm
JSON_CFLAGS := $(shell pkg-config --cflags jansson 2>/dev/null)
JSON_LIBS := $(shell pkg-config --libs jansson 2>/dev/null)

WARN := -Wall -Wextra -Wmissing-prototypes -Wshadow -Wstrict-prototypes
ifneq ($(CI),)
WARN += -Werror
endif
OPT ?= -O2 -g
# llhttp's strict mode (its own switch, for its sources and its header alike) checks the CRLF after chunk data
# and after every CR, and allows only visible ASCII in the request target; without it any two bytes end a
# chunk, a request smuggling risk (docs/wire.md).
LLHTTP_DEFS := -DLLHTTP_STRICT_MODE=1
CFLAGS_LIB := -std=gnu11 $(OPT) $(WARN) -fPIC -fvisibility=hidden -D_GNU_SOURCE $(LLHTTP_DEFS) \
  -Iinclude -Isrc -I$(LLHTTP_INC) $(DEP_CFLAGS) $(EXTRA_CFLAGS)
# llhttp scans header names and values 16 bytes at a time with SSE4.2 when its source is compiled for it (its
# own code, under __SSE4_2__): on when the build machine's CPU has it (x86-64 CPUs since about 2009); build with
# LLHTTP_SIMD= for a binary that must also run on an older x86-64 CPU.
LLHTTP_SIMD ?= $(shell grep -qw sse4_2 /proc/cpuinfo 2>/dev/null && $(CC) -msse4.2 -E -x c /dev/null >/dev/null 2>&1 && echo -msse4.2)
# Link-time optimisation of the library with llhttp: a request crosses a file at every step (llhttp calls each
# callback through a wrapper in api.c; conn.c, http1.c, route.c, handlers.c, outq.c), and across files the
# compiler can neither inline nor drop those calls. bench/instr.sh h1: 3,126 instructions per request without it,
# 3,022 with it. The objects are fat (machine code too), so what links them without -flto (the C tests'
# archive, the sanitizer builds, which set LTO= to build faster) gets ordinary code.
LTO ?= -flto=auto -ffat-lto-objects
CFLAGS_LIB += $(LTO)
# llhttp is generated code: compile it with the library's flags but without our warning set.
CFLAGS_LLHTTP := -std=gnu11 $(OPT) -fPIC -fvisibility=hidden $(LLHTTP_DEFS) $(LLHTTP_SIMD) -I$(LLHTTP_INC) $(LTO) \
  $(EXTRA_CFLAGS)
# The static library's one object is linked with the optimisation done across its parts (an ordinary object
# comes out: -flinker-output=nolto-rel), so that a program links it with any compiler and no plugin.
ifneq ($(LTO),)
PARTIAL_LINK := $(CC) $(OPT) $(LTO) -flinker-output=nolto-rel -r -nostdlib
else
PARTIAL_LINK := $(LD) -r
endif
LDFLAGS_EXTRA ?=

# The engine's layers (docs/architecture.md): each folder of src/ but load/ (cbench-load, a program apart, which
# links the lowest one, client/, too).
LAYERS := client base transport core routes proto kinds
LIB_SRCS := $(wildcard $(LAYERS:%=src/%/*.c)) $(wildcard src/*.c)
LIB_OBJS := $(LIB_SRCS:src/%.c=$(BUILD)/obj/%.o)
LIB_HDRS := $(wildcard src/*.h $(LAYERS:%=src/%/*.h))
LLHTTP_OBJS := $(BUILD)/obj/llhttp/llhttp.o $(BUILD)/obj/llhttp/api.o $(BUILD)/obj/llhttp/http.o
ALL_OBJS := $(LIB_OBJS) $(LLHTTP_OBJS)

ALL_TARGETS := $(BUILD)/libcbench.a $(BUILD)/libcbench.so $(BUILD)/cbench-server
TEST_TARGETS :=
CLEAN_PATHS := $(BUILD)

.PHONY: all deps deps-c deps-build deps-test lib run serve test install clean
all: deps-build lib

# Each target asks scripts/deps.sh only for the Debian packages it needs: the C library and CLI (c), the BEAM
# side too (build), or everything the tests and benchmarks run (test).
deps: deps-test
deps-c:
	@scripts/deps.sh c
deps-build:
	@scripts/deps.sh build
deps-test:
	@scripts/deps.sh test

lib: $(BUILD)/libcbench.a $(BUILD)/libcbench.so $(BUILD)/cbench-server

$(BUILD)/obj/%.o: src/%.c $(LIB_HDRS) include/cbench.h | $(BUILD)/obj
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_LIB) -c $< -o $@

$(BUILD)/obj/llhttp/%.o: $(LLHTTP_DIR)/%.c Makefile | $(BUILD)/obj/llhttp
	$(CC) $(CFLAGS_LLHTTP) -c $< -o $@

$(BUILD)/obj $(BUILD)/obj/llhttp:
	@mkdir -p $@

# The shipped static library exports the public API only: its objects are linked into one (ld -r) and every
# hidden symbol (the internal cb__ functions, llhttp, all compiled with -fvisibility=hidden) is made local, so
# a program with its own llhttp, or its own copy of our internals, links without "multiple definition".
$(BUILD)/libcbench.a: $(ALL_OBJS)
	@rm -f $@ $(BUILD)/obj/cbench-all.o
	$(PARTIAL_LINK) -o $(BUILD)/obj/cbench-all.o $^
	$(OBJCOPY) --localize-hidden $(BUILD)/obj/cbench-all.o $(BUILD)/obj/cbench-public.o
	ar rcs $@ $(BUILD)/obj/cbench-public.o

# The C tests and the benchmarks of internals link the objects as they are (cb__ symbols global): this archive
# is never installed.
$(BUILD)/libcbench-internal.a: $(ALL_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/libcbench.so: $(ALL_OBJS)
	$(CC) $(OPT) $(LTO) -shared -Wl,-soname,libcbench.so.0 -o $@ $^ $(DEP_LIBS) $(LDFLAGS_EXTRA)

$(BUILD)/cbench-server: c_src/cbench_server.c $(BUILD)/libcbench.a
	$(CC) -std=gnu11 $(OPT) $(WARN) -D_GNU_SOURCE -Iinclude $(EXTRA_CFLAGS) -o $@ c_src/cbench_server.c \
	  $(BUILD)/libcbench.a $(DEP_LIBS) $(LDFLAGS_EXTRA)

include $(sort $(wildcard mk/*.mk))

all: $(ALL_TARGETS)

test: deps-test
	@$(MAKE) --no-print-directory $(TEST_TARGETS)
	@echo "make test: all test groups passed"

# A node with the three engines (ehttpd 8080, nif 8081, port 8082) under the benchmark settings. Stop it with
# cbench:stop() then q(), or Ctrl-C twice.
ERL_RUN_FLAGS ?= +sbt db +sbwt none +sbwtdcpu none +sbwtdio none
run: deps-build
	@$(MAKE) --no-print-directory beam
	$(ERL) $(ERL_RUN_FLAGS) -pa _build/default/lib/cbench/ebin -s cbench

# cbench-server alone on 127.0.0.1:8080 (Ctrl-C stops it and prints its stats).
serve: deps-c
	@$(MAKE) --no-print-directory $(BUILD)/cbench-server
	$(BUILD)/cbench-server --host 127.0.0.1 --port 8080

install: $(BUILD)/libcbench.a $(BUILD)/libcbench.so $(BUILD)/cbench-server $(BUILD)/cbench-load
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin
	install -m 644 $(BUILD)/libcbench.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/libcbench.so $(DESTDIR)$(PREFIX)/lib/libcbench.so.0
	ln -sf libcbench.so.0 $(DESTDIR)$(PREFIX)/lib/libcbench.so
	install -m 644 include/cbench.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(BUILD)/cbench-server $(BUILD)/cbench-load $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' cbench.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/cbench.pc

clean:
	rm -rf $(CLEAN_PATHS)
