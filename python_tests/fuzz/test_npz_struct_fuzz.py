"""Structure-aware fuzzing of the ``.npz`` reader (``python_tests/fuzz/npz_struct.py``): valid csr,
csc and coo files whose members are mutated (extreme index values, other dtypes and shapes, another
``format`` or ``shape``, members dropped or added) must be read exactly when the slow reference says
the members describe a valid matrix, to that matrix, and refused with ValueError otherwise. Before
the second sweep's fixes this found the SIGSEGV (a CSC row index of 2**40), accepted out-of-range
columns, complex and datetime values, and raised AttributeError for an integer ``format``."""

from __future__ import annotations

import io
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedkernels.data import formats
from python_tests.fuzz.npz_struct import apply, base_members, ops, reference, to_npz


def check_members(arrays: dict[str, np.ndarray]) -> str:
    """``"ok"`` (read, equal to the reference), ``"rejected"`` (ValueError, the reference agrees) or a finding."""
    data = to_npz(arrays)
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        total = sum(i.file_size for i in z.infolist())
    want = reference(arrays, total)
    with tempfile.TemporaryDirectory(prefix="fk-npz-") as tmp:
        path = Path(tmp) / "x_X.npz"
        path.write_bytes(data)
        try:
            got = formats._load_sparse(path, "features")
        except ValueError as e:
            if want is not None:
                return f"refused a valid file: {e}"
            return "rejected" if str(path) in str(e) else f"message without the path: {e}"
        except Exception as e:
            return f"{type(e).__name__}: {e}"
    if want is None:
        return f"accepted an invalid file (shape {got.shape})"
    if got.dtype != np.float32 or got.shape != want.shape:
        return f"read as {got.dtype} {got.shape}, expected float32 {want.shape}"
    # duplicate entries are summed in another order than the reference's (float64 then rounded)
    if not np.allclose(got.toarray(), want, rtol=1e-6, atol=0):
        return "read to another matrix"
    return "ok"


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_unmutated_files_read(fmt):
    assert check_members(base_members(fmt, 0)) == "ok"


@settings(max_examples=150, deadline=None, derandomize=True)
@given(fmt=st.sampled_from(["csr", "csc", "coo"]), seed=st.integers(0, 3), muts=ops())
def test_mutated_members_agree_with_the_reference(fmt, seed, muts):
    arrays = base_members(fmt, seed)
    for op in muts:
        arrays = apply(arrays, op)
    verdict = check_members(arrays)
    assert verdict in ("ok", "rejected"), (fmt, seed, muts, verdict)
