# Everything a fresh machine needs: `make demo` and `make test` each create the
# virtual environment, install torch 2.13.0 first (a CPU wheel), then the project.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
OUT ?= runs/demo

.PHONY: demo test install clean gpu-check docs lint wheel-check

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[test,ray]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/subnetlab demo --out $(OUT)

# two pytest-xdist workers of one thread each (the tiny models gain nothing from a second thread); whole files
# go to one worker (module fixtures are built once), in collection order so the long integration files start first
TEST_JOBS ?= 2
test: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_JOBS) --dist loadfile \
	  --no-loadscope-reorder --durations=25 tests

# On a GPU machine whose python3 already holds torch with CUDA (no network, nothing installed): every gpu-marked
# test, then benchmarks/bench_gpu.py part by part under time limits; tables under $$OUT (scripts/gpu-check.sh).
# Without CUDA the gpu tests skip; `make gpu-check PY=.venv/bin/python SMALL=1` checks the script at tiny shapes.
gpu-check:
	PYTHON=$(PY) scripts/gpu-check.sh $(if $(SMALL),--small)

# the documentation site (mkdocs.yml; the CLI reference is generated from the Typer app by docs/hooks/cli_reference.py)
docs: $(STAMP)
	$(BIN)/pip install --quiet -e ".[docs]"
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d site

# ruff (lint) over the code and mypy over the core packages ([tool.ruff], [tool.mypy] in pyproject.toml)
lint: $(STAMP)
	$(BIN)/pip install --quiet -e ".[lint]"
	$(BIN)/ruff check src tests benchmarks scripts docs/hooks
	$(BIN)/mypy

# build the wheel, install it alone into a fresh venv that reads its dependencies from this one (pip check: its
# requirements met), run `subnetlab --help`, `--version` and `models` there; FULL=1 installs torch and all into it
wheel-check: $(STAMP)
	$(BIN)/pip install --quiet -e ".[lint]"
	PYTHON=$(BIN)/python FULL=$(FULL) scripts/wheel-check.sh

clean:
	rm -rf $(VENV) build src/*.egg-info
