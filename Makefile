# The README's commands. Each one sets up .venv first (idempotent; see scripts/setup_env.sh).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.hf-sparse-installed
# Extra flags for scripts/demo.py, e.g. --resume or --overwrite_output_dir on a second run.
DEMO_ARGS ?=
export HF_HUB_DISABLE_TELEMETRY := 1
# the environment's own tools (ninja, which builds the fused CPU kernel) after the system's
export PATH := $(PATH):$(abspath $(VENV))/bin

.PHONY: FORCE setup demo gallery test test-slow test-gpu test-conformance conformance-cache test-compat bench bench-gpu lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml setup.py scripts/setup_env.sh scripts/default_torch.sh
	VENV=$(VENV) bash scripts/setup_env.sh
	@touch $@

# make TORCH=... TARGET: set-up installs that torch, and runs again whenever TORCH differs from the last one
# given (the file below holds it); a plain `make TARGET` keeps the environment's torch.
ifneq ($(origin TORCH),undefined)
export TORCH
TORCH_GIVEN := $(VENV)/.hf-sparse-torch
$(STAMP): $(TORCH_GIVEN)
$(TORCH_GIVEN): FORCE
	@mkdir -p $(@D); [ "$$(cat $@ 2>/dev/null)" = "$$TORCH" ] || printf '%s\n' "$$TORCH" >$@
endif
FORCE:

demo: $(STAMP)  ## the main job: fine-tune pipelines/motif/tiny.yaml on CPU, evaluate, reload, use
	$(PY) scripts/demo.py $(DEMO_ARGS)

gallery: $(STAMP)  ## pattern gallery + a quick attention benchmark -> outputs/gallery, outputs/bench
	$(PY) scripts/gallery.py

test: $(STAMP)  ## fast tests, offline, CPU
	$(PY) -m pytest -q -n auto

test-slow: $(STAMP)  ## long tests only
	$(PY) -m pytest -q -m slow

test-conformance: $(STAMP)  ## transformers' common model tests over every model, all variants (tests/conformance)
	$(PY) -m pytest -q -n auto -m "not gpu and not hub" tests/conformance

conformance-cache: $(STAMP)  ## fetch transformers' common tests for the installed version (then offline)
	$(PY) -m tests.conformance.common_tests

test-compat:  ## model, generation, integration tests on the oldest and newest transformers (.venv-compat/)
	bash scripts/test_compat.sh

test-gpu: $(STAMP)  ## tests that need a CUDA device
	$(PY) -m pytest -q -m gpu

bench: $(STAMP)  ## benchmarks -> benchmarks/*.json, *.md, *.png
	$(PY) scripts/benchmark_attention.py
	$(PY) scripts/benchmark_patterns.py
	$(PY) scripts/benchmark_models.py
	$(PY) scripts/benchmark_generation.py

bench-gpu: $(STAMP)  ## on a CUDA machine: kernels and models in bf16 -> benchmarks/attention_gpu.{json,md}
	$(PY) scripts/benchmark_gpu.py --out benchmarks

lint: $(STAMP)
	$(VENV)/bin/ruff check hf_sparse tests scripts
	$(VENV)/bin/ruff format --check hf_sparse tests scripts

clean:  ## the environments and caches; never outputs/, where the recipes, make demo and make gallery save
	rm -rf $(VENV) .venv-compat .pytest_cache
