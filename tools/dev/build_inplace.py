"""Build fedkernels._C into src/fedkernels for development (import with PYTHONPATH=src), with the build
record `fedkernels info` reads beside it (src/fedkernels/_build_info.json, cmake/build_info.cmake).

Uses the running interpreter's torch. Set FK_CUDA=ON|OFF|AUTO and TORCH_CUDA_ARCH_LIST as for pip.
Build files go to build/inplace-<cpu|cuda>, so repeated builds are incremental.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    cuda = os.environ.get("FK_CUDA", "AUTO")
    flavour = "cuda" if torch.version.cuda and cuda != "OFF" else "cpu"
    build = ROOT / "build" / f"inplace-{flavour}"
    cfg = [
        "cmake",
        "-S",
        str(ROOT),
        "-B",
        str(build),
        "-G",
        "Ninja",
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DPython_EXECUTABLE={sys.executable}",
        "-DFK_INPLACE=ON",
        f"-DFK_CUDA={cuda}",
    ]
    if os.environ.get("FK_SANITIZE"):
        cfg.append("-DFK_SANITIZE=ON")
    subprocess.run(cfg, check=True)
    subprocess.run(["cmake", "--build", str(build), "-j", str(os.cpu_count() or 2)], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
