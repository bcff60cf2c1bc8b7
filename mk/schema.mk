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

# The Erlang copy of the field table (src/base/names.c) and the codec's key tables (terms/codec.c):
# test/cbench_fields.erl, which the Erlang suites hold every engine to.
#
#   make fields         rewrites test/cbench_fields.erl from the tables (after adding or changing a field or key)
#   make fields-check   fails when the committed test/cbench_fields.erl differs from what the tables give

FIELDS_GEN := $(BUILD)/cbench-fields-gen

TEST_TARGETS += fields-check

.PHONY: fields fields-check

$(FIELDS_GEN): c_src/cbench_fields_gen.c terms/codec.c terms/codec.h terms/term.h include/cbench.h $(BUILD)/libcbench.a
	$(CC) -std=gnu11 $(OPT) $(WARN) -D_GNU_SOURCE -Iinclude -Iterms $(EXTRA_CFLAGS) -o $@ c_src/cbench_fields_gen.c \
	  terms/codec.c $(BUILD)/libcbench.a $(DEP_LIBS) $(LDFLAGS_EXTRA)

fields: $(FIELDS_GEN)
	$(FIELDS_GEN) > test/cbench_fields.erl.tmp
	mv test/cbench_fields.erl.tmp test/cbench_fields.erl

fields-check: $(FIELDS_GEN)
	@if $(FIELDS_GEN) | diff -u test/cbench_fields.erl -; then \
	  echo "fields-check: test/cbench_fields.erl matches the field table (src/base/names.c) and the codec's keys (terms/codec.c)"; \
	else echo "fields-check: test/cbench_fields.erl is out of date: run make fields and commit it"; exit 1; fi
