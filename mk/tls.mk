# TLS (issue 24, docs/tls.md): cbench-server with --tls against curl, nghttp and h2load.
#
#   make tls-e2e          test/tls_e2e.sh against $(BUILD)/cbench-server (the sanitizer build runs it in make asan)

TEST_TARGETS += tls-e2e
.PHONY: tls-e2e

tls-e2e: $(BUILD)/cbench-server
	CBENCH_SERVER=$(BUILD)/cbench-server test/tls_e2e.sh
