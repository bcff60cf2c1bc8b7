# The BEAM side: the NIF (priv/cbench_nif.so), the port program (priv/cbench_port), the Erlang
# application (built by rebar3 from erl/) and its Common Test suites.
#
# Included by the top-level Makefile. Header and library paths of erts and erl_interface are asked
# of `erl` itself (as erlang.mk does), never hard-coded.

ERL ?= erl
comma := ,
REBAR3 ?= rebar3
ERL_EVAL = $(shell $(ERL) -noshell -eval '$(1), halt().' 2>/dev/null)
ERTS_INCLUDE := $(call ERL_EVAL,io:format("~s/erts-~s/include"$(comma) [code:root_dir()$(comma) erlang:system_info(version)]))
EI_DIR := $(call ERL_EVAL,io:format("~s"$(comma) [code:lib_dir(erl_interface)]))

BEAM_PRIV := priv/cbench_nif.so priv/cbench_port
BEAM_CFLAGS := -std=gnu11 $(OPT) $(WARN) -D_GNU_SOURCE -Iinclude $(EXTRA_CFLAGS)

ALL_TARGETS += $(BEAM_PRIV)
TEST_TARGETS += test-beam beam-eunit beam-xref hook-test dialyzer-test mix-test
CLEAN_PATHS += $(BEAM_PRIV) _build/default/lib/cbench _build/test/lib/cbench ct_logs logs

.PHONY: beam-priv beam beam-clean node test-beam beam-eunit beam-xref hook-test dialyzer-test mix-test proper

# What rebar3's pre-compile hook builds: only the C parts (rebar3 compiles erl/ itself).
beam-priv: $(BEAM_PRIV)

beam: beam-priv
	$(REBAR3) compile

beam-clean:
	rm -f $(BEAM_PRIV)

priv:
	@mkdir -p $@

# The one term codec of the NIF and the port program (terms/: codec.c over term.h, with an enif and an ei
# backend), compiled into each.
CODEC_SRCS := terms/codec.c
CODEC_HDRS := terms/term.h terms/codec.h

# No -fvisibility=hidden: nif_init must stay visible. The engine comes in statically (compiled -fPIC);
# libuv and nghttp2 are shared libraries the .so depends on.
NIF_SRCS := $(sort $(wildcard nif/*.c)) $(CODEC_SRCS) terms/term_enif.c

priv/cbench_nif.so: $(NIF_SRCS) nif/nif.h $(CODEC_HDRS) terms/term_enif.h include/cbench.h $(BUILD)/libcbench.a | priv
	$(CC) $(BEAM_CFLAGS) -fPIC -shared -Iterms -I$(ERTS_INCLUDE) -o $@ $(NIF_SRCS) $(BUILD)/libcbench.a $(DEP_LIBS) \
	  $(LDFLAGS_EXTRA)

PORT_SRCS := c_src/cbench_port.c c_src/port_calls.c c_src/port_deliver.c c_src/port_reply_frame.c $(CODEC_SRCS) terms/term_ei.c

priv/cbench_port: $(PORT_SRCS) c_src/port.h $(CODEC_HDRS) terms/term_ei.h include/cbench.h $(BUILD)/libcbench.a | priv
	$(CC) $(BEAM_CFLAGS) -Iterms -I$(EI_DIR)/include -o $@ $(PORT_SRCS) -L$(EI_DIR)/lib -lei $(BUILD)/libcbench.a \
	  $(DEP_LIBS) $(LDFLAGS_EXTRA)

# A node with every engine listening (the lead wires `make run` to this).
node: beam
	$(ERL) -pa _build/default/lib/cbench/ebin -s cbench

# The Common Test suites of test/ (ehttpd, nif, port, API, lifecycle, consumer project).
test-beam: $(BEAM_PRIV)
	$(REBAR3) ct --dir test --readable true || { test/ct_failures.sh; exit 1; }

# The EUnit modules of test/ (rebar3 compiles test/ in the test profile): issue 25's features on every engine
# as a user's EUnit module uses them (test/cbench_features_tests.erl, under a second); the ehttpd proxy's pure
# parts; HPACK against RFC 7541's examples, with a PropEr property that no input crashes the decoder; ehttpd's
# HTTP/2 client against random frames (PropEr: an answer or a failure, never an exception).
beam-eunit: $(BEAM_PRIV)
	$(REBAR3) eunit --module=cbench_features_tests,cbench_ehttpd_proxy_tests,cbench_hpack_tests,cbench_h2_upstream_tests

# The API contract as a property (test/cbench_api_statem.erl), long and with a random seed; `make test` runs
# the same suite with a fixed seed and PROPER_NUMTESTS's default. PROPER_SEED=A,B,C repeats a run.
PROPER_NUMTESTS ?= 20000
PROPER_SEED ?= random
proper: $(BEAM_PRIV)
	PROPER_SEED=$(PROPER_SEED) PROPER_NUMTESTS=$(PROPER_NUMTESTS) $(REBAR3) ct --dir test --suite cbench_proper_SUITE --readable true || { test/ct_failures.sh; exit 1; }

# rebar3 xref: undefined calls, unused locals, and unused exports (the API and callbacks are marked with
# -ignore_xref, so an unused export it reports is a real finding).
beam-xref: $(BEAM_PRIV)
	$(REBAR3) xref

# rebar3's pre-compile hook as a consumer meets it: a missing Debian package named in one line, quiet builds,
# the compiler's output on failure (test/hook.sh).
hook-test:
	test/hook.sh

# Dialyzer flags a misspelt option or stats key in a consumer's module (test/dialyzer.sh; the PLT is built once
# into build/, about 30 s).
dialyzer-test: $(BEAM_PRIV)
	PLT=$(BUILD)/dialyzer-base.plt test/dialyzer.sh

# An Elixir Mix project with cbench as a rebar3 path dependency (test/mix.sh; skipped when mix is absent).
mix-test: $(BEAM_PRIV)
	test/mix.sh
