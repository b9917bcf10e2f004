"""Print what the running interpreter's torch sees, as one JSON line (tools/gpu/gpu_check.py runs it
inside the environment it will build and test with). Run it from the checkout root, as a module:

    python -m tools.gpu.gpu_probe                    # torch version and CUDA build, GPUs, missing packages
    python -m tools.gpu.gpu_probe --copy-bandwidth   # plus the GPU's copy bandwidth (a 1 GiB copy_, GB/s)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys

# import name -> pip name of what the build, the tests and the benchmarks need besides torch
NEEDED = {
    "numpy": "numpy",
    "scipy": "scipy",
    "safetensors": "safetensors",
    "tqdm": "tqdm",
    "pytest": "pytest",
    "xdist": "pytest-xdist",
    "hypothesis": "hypothesis",
    "scikit_build_core": "scikit-build-core",
    "pybind11": "pybind11",
    "ninja": "ninja",
    "cmake": "cmake",
}
COPY_BYTES = 1 << 30


def probe(copy_bandwidth: bool = False) -> dict:
    """torch's version, CUDA build and devices, and the pip names of NEEDED packages that are missing."""
    facts: dict = {
        "python": sys.version.split()[0],
        "missing": [pip for mod, pip in NEEDED.items() if importlib.util.find_spec(mod) is None],
    }
    try:
        import torch
    except ImportError as e:
        return {**facts, "torch": None, "torch_cuda": None, "cuda_available": False, "error": str(e)}
    facts.update(torch=torch.__version__, torch_cuda=torch.version.cuda, cuda_available=torch.cuda.is_available())
    if not facts["cuda_available"]:
        return facts
    props = torch.cuda.get_device_properties(0)
    facts.update(
        device_count=torch.cuda.device_count(),
        name=props.name,
        capability=f"{props.major}.{props.minor}",
        memory_gib=round(props.total_memory / 2**30, 1),
    )
    if copy_bandwidth:
        from bench.common import copy_bandwidth_gbs  # a package of the checkout root, which -m puts on the path

        facts["copy_bandwidth_gbs"] = copy_bandwidth_gbs("cuda", nbytes=COPY_BYTES)
        facts["copy_bytes"] = COPY_BYTES
    return facts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copy-bandwidth", action="store_true", help="also time a 1 GiB copy_ on the GPU")
    print(json.dumps(probe(ap.parse_args().copy_bandwidth)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
