# TLS (issue 24, docs/tls.md): cbench-server with --tls against curl, nghttp and h2load.
#
#   make tls-e2e          test/tls_e2e.sh and test/tls_auth_e2e.sh (client certificates, resumption) against
#                         $(BUILD)/cbench-server (the sanitizer build runs both in make asan)

TEST_TARGETS += tls-e2e
.PHONY: tls-e2e

tls-e2e: $(BUILD)/cbench-server
	CBENCH_SERVER=$(BUILD)/cbench-server test/tls_e2e.sh
	CBENCH_SERVER=$(BUILD)/cbench-server test/tls_auth_e2e.sh
