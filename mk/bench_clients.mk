# The client benchmark (bench/src/cbench_clients*.erl, erl/cbench_client*.erl): see docs/bench.md.
# After mk/bench.mk (it uses its build rules).
#
#   make bench-clients            quick profile (about 5 minutes on 2 CPUs)
#   make bench-clients FULL=1     httpc_bench's grid: concurrency 256..16384, pool sizes 1..512, pool counts 1..32
#   make bench-clients BENCH_ARGS='--clients httpc --engine ehttpd'
#   make bench-clients NODES=c1@127.0.0.1,c2@127.0.0.1  each cell's workers split over those nodes
#   make bench-clients FIXTURE_NODE=fx@10.0.0.5 COOKIE=c  the fixture on that running node (--server-node)
#   make bench-clients-test       the harness's unit tests and a smoke run (part of make test)

# The client node: busy-waiting schedulers would steal the CPU the clients are measured on.
CLIENTS_ERL_FLAGS := +sbwt none +sbwtdcpu none +sbwtdio none +Q 65536

.PHONY: bench-clients bench-clients-unit bench-clients-smoke bench-clients-test

bench-clients: deps bench-build bench-engines
	CBENCH_BENCH_MAIN=cbench_clients CBENCH_BENCH_ERL_FLAGS='$(CLIENTS_ERL_FLAGS)' \
	  bench/run.sh --profile $(BENCH_PROFILE) $(BENCH_NODES) \
	  $(if $(FIXTURE_NODE),--server-node $(FIXTURE_NODE),) $(BENCH_ARGS)

# The unit tests run a cbench server and both adapters in the test node itself.
bench-clients-unit: bench-build $(BENCH_TEST_BEAMS) beam
	erl -noshell $(CLIENTS_ERL_FLAGS) -pa bench/ebin -pa bench/test/ebin -pa _build/default/lib/cbench/ebin \
	  -eval 'case eunit:test(cbench_clients_tests, [verbose]) of ok -> halt(0); _ -> halt(1) end.'

bench-clients-smoke: bench-build beam
	bench/test/clients_smoke.sh

bench-clients-test: bench-clients-unit bench-clients-smoke

TEST_TARGETS += bench-clients-test
