#!/usr/bin/env bash
# The CPU wheel as a user installs it (docs/install.md, "Install a wheel"): the one wheel file, installed
# with no compiler reachable (cc, gcc, g++, clang, nvcc on PATH are stubs that fail, CC / CXX name them),
# into an environment per torch, and the op tests run against the installed copy (FK_TEST_INSTALLED_AT:
# conftest refuses to start on the checkout's src/ instead), still with no compiler. The tests of
# torch.compile (named *compile*) run after, with the compiler back: torch.compile's CPU backend
# (inductor) compiles the C++ it generates, on any user's machine, whatever the extension.
#
#   tools/ci/wheel_check.sh <wheel> <python with torch A> [<python with torch B> ...]
#
# Each python gets the wheel in a folder of its own (pip --target, put first on PYTHONPATH), so an
# environment shared with another step keeps its own fedkernels untouched.
set -euo pipefail
wheel=$(realpath "$1"); shift
stubs=$(mktemp -d)
trap 'rm -rf "$stubs"' EXIT
for cc in cc c++ gcc g++ clang clang++ nvcc; do
  printf '#!/bin/sh\necho "wheel check: no compiler in this environment (%s was called)" >&2\nexit 1\n' "$cc" > "$stubs/$cc"
  chmod +x "$stubs/$cc"
done
for py in "$@"; do
  version=$("$py" -c 'import torch; print(torch.__version__)')
  target="$stubs/site-$version"
  PATH="$stubs:$PATH" CC="$stubs/cc" CXX="$stubs/c++" "$py" -m pip install -q --no-deps --target "$target" "$wheel"
  tests=${WHEEL_TESTS:-python_tests/ops python_tests/test_stable_abi.py}
  echo "== wheel $(basename "$wheel") on torch $version ($py), no compiler on PATH"
  PATH="$stubs:$PATH" CC="$stubs/cc" CXX="$stubs/c++" PYTHONPATH="$target" FK_TEST_INSTALLED_AT="$target" \
    "$py" -m pytest -q -n 2 -p no:cacheprovider -k "not compile" $tests
  echo "== the same wheel on torch $version: the torch.compile tests (inductor needs the C++ compiler)"
  PYTHONPATH="$target" FK_TEST_INSTALLED_AT="$target" "$py" -m pytest -q -n 2 -p no:cacheprovider -k compile $tests
done
