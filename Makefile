# Two entry points that do all set-up on a fresh machine with only Python.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test install clean gpu-check

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

# On a machine with a CUDA GPU: the `gpu` tests, then the paper-scale timings and the cub_main
# projection from them, written to $(GPU_CHECK_OUT)/.
GPU_CHECK_OUT ?= gpu-check
gpu-check: $(STAMP)
	$(BIN)/python -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 'make gpu-check needs a CUDA GPU: torch.cuda.is_available() is False')"
	mkdir -p $(GPU_CHECK_OUT)
	$(BIN)/python -m pytest -m gpu -q -p no:cacheprovider
	$(BIN)/protobench perf --paper-scale --device cuda --runs-dir $(GPU_CHECK_OUT)/runs \
		--out $(GPU_CHECK_OUT)/perf-paper-scale.json
	$(BIN)/protobench plan benchmark/grids/cub_main.toml --perf $(GPU_CHECK_OUT)/perf-paper-scale.json \
		> $(GPU_CHECK_OUT)/plan-cub_main.txt
	$(BIN)/protobench plan benchmark/grids/cub_main.toml > $(GPU_CHECK_OUT)/plan-cub_main-model.txt
	cat $(GPU_CHECK_OUT)/plan-cub_main.txt $(GPU_CHECK_OUT)/plan-cub_main-model.txt

clean:
	rm -rf $(VENV) runs data .cache
