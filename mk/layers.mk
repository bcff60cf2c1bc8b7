# The engine's layers keep their ties one-way (docs/architecture.md, "Layers"): test/layers.py reads every
# #include of src/, the declarations of each layer's header, and (nm) every symbol each layer's objects use.
#
#   make layer-check      fails on an upward include, an upper-layer symbol in a lower header, or a call up

TEST_TARGETS += layer-check
.PHONY: layer-check

layer-check: $(BUILD)/libcbench.a
	python3 test/layers.py $(BUILD)
