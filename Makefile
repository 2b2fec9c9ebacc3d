# Two entry points that do all set-up on a fresh machine with only Python.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test install clean gpu-check docs docs-serve docs-reference

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/protobench demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

# On a machine with a CUDA GPU: the `gpu` tests, the paper-scale timings, the tuning timings
# (perf --tuning 8, ProtoPNet and vMFProto) and the cub_main projections from them, each written
# to $(GPU_CHECK_OUT)/ even when a step before it failed; a summary of the steps ends it, and it
# fails if any step did. GPU_CHECK_STEPS=tests,perf,model then GPU_CHECK_STEPS=tuning,plan: the
# check in two calls (same GPU_CHECK_OUT). DEVICE=cpu: the dry run CI makes (same commands and
# files, the gpu tests skipped, a tiny trunk and dataset, K = 2 tuning trials).
# GPU_PYTHON=/path/to/python: use that interpreter as it is, without the venv (a GPU node
# without network whose environment has torch and timm; the steps run from this checkout).
GPU_CHECK_OUT ?= gpu-check
GPU_CHECK_STEPS ?=
DEVICE ?= cuda
GPU_PYTHON ?=
GPU_CHECK_ARGS = --device $(DEVICE) --out $(GPU_CHECK_OUT) $(if $(GPU_CHECK_STEPS),--steps $(GPU_CHECK_STEPS))
ifeq ($(GPU_PYTHON),)
gpu-check: $(STAMP)
	$(BIN)/python -m benchmark.cli.gpu_check $(GPU_CHECK_ARGS)
else
gpu-check:
	$(GPU_PYTHON) -m benchmark.cli.gpu_check $(GPU_CHECK_ARGS)
endif

# The docs site (docs/, mkdocs.yml): strict, so a broken link, anchor or snippet, or a reference
# generator that fails, stops the build. The reference pages are generated from the code here.
DOCS_STAMP := $(VENV)/.docs-installed
$(DOCS_STAMP): $(STAMP)
	$(BIN)/pip install -q -e '.[docs]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict

# The reference pages' generated blocks, written into docs/reference/*.md (committed: GitHub shows them;
# tests/cli/test_docs_site.py fails when a committed page differs from the code's).
docs-reference: $(STAMP)
	$(BIN)/python -m benchmark.cli.docs_pages

docs-serve: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs serve --strict

clean:
	rm -rf $(VENV) runs data .cache site
