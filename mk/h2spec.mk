# h2spec, the HTTP/2 conformance suite, against cbench-server (test/h2spec.sh): 146/146 on the h2c-only
# listener (--no-h1), 145/146 on the shared port, where 3.5/2 is the one expected failure (docs/wire.md).
# h2spec is not packaged in Debian: docs/testing.md says how to build it from its public source with Debian's
# Go packages. `make test` runs this group only when h2spec is on the PATH (or H2SPEC names it).
#
#   make h2spec            both modes
#   make h2spec H2SPEC=/work/tools/h2spec/h2spec

H2SPEC ?= h2spec

TEST_TARGETS += h2spec

.PHONY: h2spec

h2spec: $(BUILD)/cbench-server
	@if command -v $(H2SPEC) >/dev/null 2>&1; then \
	  CBENCH_SERVER=$(BUILD)/cbench-server H2SPEC=$(H2SPEC) test/h2spec.sh; \
	else \
	  echo "h2spec: $(H2SPEC) is not on the PATH: skipped (docs/testing.md says how to build it)"; \
	fi
