# The documentation's links (test/doc_links.sh): every relative link and anchor of README.md and docs/*.md,
# and every repository path and Markdown file they name in code, exists.
#
#   make doc-links   prints each broken reference as FILE:LINE and fails; needs only bash and python3
#
# It runs first in make test: it takes well under a second and needs nothing built.

TEST_TARGETS := doc-links $(TEST_TARGETS)

.PHONY: doc-links

doc-links:
	@bash test/doc_links.sh
