#!/usr/bin/env bash
# The CUDA wheel as a user installs it (docs/install.md, "Install a wheel"): the wheel file installed
# with no compiler reachable into each environment with a CUDA build of torch of the wheel's CUDA major,
# then loaded: every op has its CUDA kernel registered, and the library passes the symbol rule
# (python_tests/test_stable_abi.py: the C shim, the C/C++ runtime and the CUDA runtime only). No GPU
# is needed to load and register; the kernels run where one is lent (make gpu-check).
#
#   tools/ci/cuda_wheel_check.sh <dist/cu<major>0/fedkernels-*.whl> <python with a CUDA torch> [...]
set -euo pipefail
wheel=$(realpath "$1"); shift
major=$(basename "$(dirname "$wheel")" | sed -n 's/^cu\([0-9]*\)0$/\1/p')
[ -n "$major" ] || { echo "cuda_wheel_check: $wheel is not in a dist/cu<major>0/ folder" >&2; exit 2; }
source "$(dirname "$0")/no_compiler.sh"
for py in "$@"; do
  version=$("$py" -c 'import torch; print(torch.__version__)')
  cuda=$("$py" -c 'import torch; print(torch.version.cuda or "none")')
  if [ "${cuda%%.*}" != "$major" ]; then
    echo "cuda_wheel_check: torch $version ($py) is built for CUDA $cuda; this wheel is for CUDA $major" >&2
    exit 2
  fi
  target="$stubs/site-$version"
  install_wheel "$wheel" "$py" "$target"
  echo "== wheel $(basename "$wheel") (CUDA $major) on torch $version ($py), no compiler on PATH"
  PYTHONPATH="$target" FK_TEST_INSTALLED_AT="$target" no_compiler "$py" tools/ci/check_cuda_registered.py
  PYTHONPATH="$target" FK_TEST_INSTALLED_AT="$target" no_compiler "$py" -m pytest -q -p no:cacheprovider \
    python_tests/test_stable_abi.py
done
