#!/usr/bin/env bash
# Build the CPU kernels with AddressSanitizer + UndefinedBehaviorSanitizer (-DFK_SANITIZE=ON) in
# their own build dir and run the op test-suite under them. Any ASan/UBSan report aborts the
# process, so a report fails the run.
#
#   tools/ci/sanitize.sh [pytest args...]        (default: the op tests, emu/emulate.py's
#                                              op_test_files(), and the codec fuzzer,
#                                              python_tests/fuzz/test_codec_fuzz.py)
# Env: PYTHON (an interpreter whose torch is CPU-only; default: python3 on PATH),
#      FK_SANITIZE_BUILD (build dir; default build/sanitize), HYPOTHESIS_PROFILE (default: sanitize).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
PY="${PYTHON:-python3}"
BUILD="${FK_SANITIZE_BUILD:-$ROOT/build/sanitize}"
OUT="$BUILD/pkg"   # the sanitized _C lives here, never in src/, so normal builds are untouched
# The op tests: emu/emulate.py's op_test_files() (one list of the test files that run no op).
OP_TESTS=$("$PY" -c "from emu.emulate import op_test_files; print(' '.join(op_test_files()))")

# Build: same CMake project, sanitizer flags on, module written to $OUT/fedkernels/.
"$PY" - "$BUILD" "$OUT" <<'EOF'
import subprocess, sys
from pathlib import Path
build, out = Path(sys.argv[1]), Path(sys.argv[2])
# -g1: line tables only, enough for ASan/UBSan reports' file:line, and a faster compile than -g
subprocess.run(["cmake", "-S", ".", "-B", str(build), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG",
                f"-DPython_EXECUTABLE={sys.executable}", "-DFK_CUDA=OFF", "-DFK_SANITIZE=ON",
                f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={out / 'fedkernels'}"], check=True, stdout=subprocess.DEVNULL)
subprocess.run(["cmake", "--build", str(build), "-j", "2"], check=True)
EOF

# A package tree whose Python files are the repo's own (symlinks) and whose _C is the sanitized one.
mkdir -p "$OUT/fedkernels"
for entry in "$ROOT"/src/fedkernels/*; do
  name=$(basename "$entry")
  case "$name" in _C*.so|libfedkernels_ops.so|__pycache__) continue ;; esac
  ln -sfn "$entry" "$OUT/fedkernels/$name"
done
SO=$(ls "$OUT"/fedkernels/_C*.so)

# The runtimes must be loaded before the (uninstrumented) interpreter; detect_leaks=0 because
# CPython and torch keep allocations alive until exit by design.
LIBASAN=$(gcc -print-file-name=libasan.so)
LIBUBSAN=$(gcc -print-file-name=libubsan.so)
export LD_PRELOAD="$LIBASAN:$LIBUBSAN"
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=1:detect_odr_violation=0:allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export PYTHONMALLOC=malloc   # let ASan see every allocation instead of pymalloc arenas
export PYTHONPATH="$OUT:$ROOT"
export HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-sanitize}"

if [ $# -eq 0 ]; then
  # the codec fuzzer drives the compiled decoder; the other fuzzers are Python decoders (`make fuzz`)
  set -- $OP_TESTS python_tests/fuzz/test_codec_fuzz.py
fi
# An editable install (pip install -e ., as `make install` does) puts an import hook ahead of
# PYTHONPATH; drop it so the sanitized module is the one imported, and prove it is.
BOOT="import sys
sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in (type(f).__module__ + type(f).__name__).lower()]
"
"$PY" -c "$BOOT
import fedkernels; f = fedkernels._C.__file__
sys.exit(0 if f == '$SO' else f'imported {f}, not $SO')"
echo "sanitize: running under ASan+UBSan with $SO"
# -p no:cacheprovider: nothing written into the checkout; one process per shard so a report aborts
# it (and fails the run); --capture=sys: pytest must not capture fd 2, or a report would vanish with
# the aborted process. The test files are split into FK_TEST_SHARDS shards (default: three per core)
# that run one per core (emu/test_shards.py).
"$PY" "$ROOT/emu/test_shards.py" -- "$PY" -c "$BOOT
import pytest; sys.exit(pytest.main(['-q', '--capture=sys', '-p', 'no:cacheprovider', '-p', 'no:xdist', *sys.argv[1:]]))" -- "$@"
echo "sanitize: no ASan/UBSan reports"
