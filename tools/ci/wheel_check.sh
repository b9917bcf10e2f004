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
source "$(dirname "$0")/no_compiler.sh"
for py in "$@"; do
  version=$("$py" -c 'import torch; print(torch.__version__)')
  target="$stubs/site-$version"
  install_wheel "$wheel" "$py" "$target"
  tests=${WHEEL_TESTS:-python_tests/ops python_tests/test_stable_abi.py}
  echo "== wheel $(basename "$wheel") on torch $version ($py), no compiler on PATH"
  PYTHONPATH="$target" FK_TEST_INSTALLED_AT="$target" no_compiler "$py" -m pytest -q -n 2 -p no:cacheprovider -k "not compile" $tests
  echo "== the same wheel on torch $version: the torch.compile tests (inductor needs the C++ compiler)"
  PYTHONPATH="$target" FK_TEST_INSTALLED_AT="$target" "$py" -m pytest -q -n 2 -p no:cacheprovider -k compile $tests
done
