"""Assert that every torch.ops.fedkernels op has a CUDA kernel in this build (CI's CUDA compile check)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

import fedkernels


def main() -> int:
    installed_at = os.environ.get("FK_TEST_INSTALLED_AT")
    if installed_at and Path(installed_at).resolve() not in Path(fedkernels.__file__).resolve().parents:
        print(f"imported fedkernels from {fedkernels.__file__}, not from {installed_at}", file=sys.stderr)
        return 1
    print(f"fedkernels {fedkernels.__file__} on torch {torch.__version__}")
    if not fedkernels._C.build_info()["cuda_kernels"]:
        print("this build has no CUDA kernels", file=sys.stderr)
        return 1
    names = sorted(n for n in torch._C._dispatch_get_all_op_names() if n.startswith("fedkernels::"))
    missing = [
        n
        for n in names
        if not (
            torch._C._dispatch_has_kernel_for_dispatch_key(n, "CUDA")
            or torch._C._dispatch_has_kernel_for_dispatch_key(n, "CompositeImplicitAutograd")
        )
    ]
    print(f"{len(names)} fedkernels ops; CUDA kernels for {len(names) - len(missing)}")
    for n in missing:
        print(f"  no CUDA kernel: {n}", file=sys.stderr)
    return 1 if missing or not names else 0


if __name__ == "__main__":
    sys.exit(main())
