# Everything a fresh machine needs: `make demo` and `make test` each create the
# virtual environment, install torch 2.13.0 first (a CPU wheel), then the project.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
OUT ?= runs/demo

.PHONY: demo test install clean gpu-check

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[test,ray]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/subnetlab demo --out $(OUT)

test: $(STAMP)
	OMP_NUM_THREADS=2 $(BIN)/python -m pytest -q -p no:cacheprovider tests

# On a GPU machine whose python3 already holds torch with CUDA (after scripts/gpu-machine-setup.sh install):
# the device tests (skipped where CUDA is absent).
gpu-check:
	$(PY) -m pytest -q -p no:cacheprovider -m gpu -rs tests

clean:
	rm -rf $(VENV) build src/*.egg-info
