# The Erlang copy of the engine's option table (erl/cbench_schema.erl), generated from src/options.c.
#
#   make schema         rewrites erl/cbench_schema.erl from the table (after adding or changing an option)
#   make schema-check   fails when the committed erl/cbench_schema.erl differs from what the table gives

SCHEMA_GEN := $(BUILD)/cbench-schema-gen

TEST_TARGETS += schema-check

.PHONY: schema schema-check

$(SCHEMA_GEN): c_src/cbench_schema_gen.c include/cbench.h $(BUILD)/libcbench.a
	$(CC) -std=gnu11 $(OPT) $(WARN) -D_GNU_SOURCE -Iinclude $(EXTRA_CFLAGS) -o $@ $< $(BUILD)/libcbench.a \
	  $(DEP_LIBS) $(LDFLAGS_EXTRA)

schema: $(SCHEMA_GEN)
	$(SCHEMA_GEN) > erl/cbench_schema.erl.tmp
	mv erl/cbench_schema.erl.tmp erl/cbench_schema.erl

schema-check: $(SCHEMA_GEN)
	@if $(SCHEMA_GEN) | diff -u erl/cbench_schema.erl -; then \
	  echo "schema-check: erl/cbench_schema.erl matches the option table of src/options.c"; \
	else echo "schema-check: erl/cbench_schema.erl is out of date: run make schema and commit it"; exit 1; fi
