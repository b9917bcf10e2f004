# Quick start: `make demo` runs the main job, `make test` runs the tests. Each sets up everything
# (a virtual environment with torch, the build) on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
PY := $(VENV)/bin/python
DEPS := numpy scipy safetensors tqdm matplotlib pytest pytest-xdist hypothesis scikit-build-core pybind11 ninja cmake 'flwr>=1.41,<2'

.PHONY: demo test install bench inplace clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH) $(DEPS)

install: $(PY)
	$(PY) -m pip install -q --no-build-isolation -e .

demo: install
	$(VENV)/bin/fedkernels run --demo

test: install
	$(PY) -m pytest -q -n 2 python_tests

bench: install
	$(PY) bench/sketch.py

# Development: build _C into src/fedkernels with any venv's python (PYTHONPATH=src to import).
inplace:
	$(PYTHON) tools/build_inplace.py

clean:
	rm -rf build src/fedkernels/_C*.so
