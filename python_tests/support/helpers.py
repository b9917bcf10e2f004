"""Small helpers shared by the op tests."""

from __future__ import annotations

import os

import torch


def csr_from_lists(rows: list[list[int]], device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """CSR (indptr int64 [N+1], indices int64 [nnz]) of a list of label lists."""
    indptr = [0]
    for r in rows:
        indptr.append(indptr[-1] + len(r))
    flat = [x for r in rows for x in r]
    return (
        torch.tensor(indptr, dtype=torch.int64, device=device),
        torch.tensor(flat, dtype=torch.int64, device=device).reshape(-1),
    )


def child_pythonpath() -> str:
    """PYTHONPATH for test subprocesses: the folder the imported fedkernels comes from (src/ for an
    in-tree or editable build, site-packages for an installed one) and the repo root (python_tests)."""
    from pathlib import Path

    import fedkernels

    from .paths import ROOT

    pkg_parent = Path(fedkernels.__file__).resolve().parents[1]
    return os.pathsep.join([str(pkg_parent), str(ROOT)])
