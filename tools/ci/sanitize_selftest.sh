#!/usr/bin/env bash
# Proves tools/ci/sanitize.sh catches a real memory bug. In a scratch copy of the repo (never the
# checkout), delete label_hash's check that every table bucket is < B, so a bad table makes the
# kernel write past the end of its output; then run one call under tools/ci/sanitize.sh and require
# an ASan heap-buffer-overflow WRITE report and a failed run. The checkout's own sanitized build
# must reject the same call with a clean IndexError (the control).
#
#   tools/ci/sanitize_selftest.sh          (PYTHON as for tools/ci/sanitize.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
SCRATCH="${FK_SELFTEST_DIR:-$ROOT/build/sanitize-selftest}"   # kept, so rebuilds are incremental
rm -rf "$SCRATCH/src" "$SCRATCH/csrc" "$SCRATCH/python_tests"
mkdir -p "$SCRATCH"
cp -rp CMakeLists.txt cmake csrc emu tools "$SCRATCH/"
tar --exclude='*.so' --exclude=__pycache__ -cf - src | tar -xf - -C "$SCRATCH"
mkdir -p "$SCRATCH/python_tests"
cp python_tests/conftest.py python_tests/__init__.py "$SCRATCH/python_tests/"

# The bug: drop the range check of table (buckets must be in [0, B)).
CHECKS="$SCRATCH/csrc/sketch/sketch_checks.h"
grep -q 'check_index_range(table, 0, num_buckets, "table");' "$CHECKS"
sed -i '/check_index_range(table, 0, num_buckets, "table");/d' "$CHECKS"

# One call whose table sends table 1's bucket two bytes past the end of the 2 x 1 x 8 output (into the redzone).
cat > "$SCRATCH/python_tests/test_oob_selftest.py" <<'EOF'
import pytest
import torch
import fedkernels

def test_out_of_range_bucket():
    indptr = torch.tensor([0, 1]); indices = torch.tensor([0])
    table = torch.tensor([[1, 9]], dtype=torch.int32)
    with pytest.raises(IndexError, match="table"):
        fedkernels.label_hash(indptr, indices, table, 8)
EOF

echo "selftest: control (checkout's sanitized build must raise IndexError, no report)"
tools/ci/sanitize.sh "$SCRATCH/python_tests/test_oob_selftest.py"

echo "selftest: scratch build with the range check removed (must be reported)"
set +e
FK_SANITIZE_BUILD="$SCRATCH/build" "$SCRATCH/tools/ci/sanitize.sh" "$SCRATCH/python_tests/test_oob_selftest.py" \
  > "$SCRATCH/report.txt" 2>&1
rc=$?
set -e
grep -m1 -A6 "ERROR: AddressSanitizer" "$SCRATCH/report.txt" || true
if [ $rc -ne 0 ] && grep -q "AddressSanitizer: heap-buffer-overflow" "$SCRATCH/report.txt" \
   && grep -q "WRITE of size" "$SCRATCH/report.txt"; then
  echo "selftest: OK, the out-of-bounds write was reported and failed the run (exit $rc)"
else
  echo "selftest: FAILED, the harness did not report the out-of-bounds write (exit $rc)"
  grep -v '^  File ' "$SCRATCH/report.txt" | head -60
  exit 1
fi
