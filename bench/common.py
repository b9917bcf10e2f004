"""Shared helpers for the microbenchmarks: timing, peak memory, copy bandwidth, result tables.

Every benchmark compares a fedkernels op against the PyTorch composition a user would otherwise
write, in the same run, and reports ratios, peak extra memory and achieved bandwidth.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

# The committed CPU tables the README and docs quote: a run writes here only when its --out says so.
RESULTS = Path(__file__).resolve().parent / "results"
# Where a full run on a non-CPU device writes when --out is not given.
DEVICE_RESULTS = Path(__file__).resolve().parents[1] / "gpu-check" / "bench"
# Where a CPU run and any --quick (smoke) run write when --out is not given: never over the committed tables.
QUICK_RESULTS = Path(__file__).resolve().parents[1] / "build" / "bench-results"


def sync(device: str | torch.device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def timeit(
    fn: Callable[[], object], device: str = "cpu", warmup: int = 2, repeat: int = 7, min_time: float = 0.2
) -> float:
    """Median wall time of one call of ``fn`` in seconds (repeats until ``min_time`` is covered)."""
    for _ in range(warmup):
        fn()
    sync(device)
    times: list[float] = []
    total = 0.0
    while len(times) < repeat or (total < min_time and len(times) < 200):
        t0 = time.perf_counter()
        fn()
        sync(device)
        dt = time.perf_counter() - t0
        times.append(dt)
        total += dt
    return statistics.median(times)


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def peak_extra_bytes(fn: Callable[[], object], device: str = "cpu") -> int:
    """Peak memory ``fn`` needs above what is allocated before it (its output included).

    CUDA: the caching allocator's peak. CPU: the process's peak resident set (VmHWM, reset through
    /proc/self/clear_refs) above the resident set before the call; large tensors are mmap-backed, so
    their pages count while they live and are returned when freed.
    """
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        out = fn()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        del out
        return int(peak)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base = _rss_kib("VmRSS")
    out = fn()
    peak = _rss_kib("VmHWM") - base
    del out
    return max(0, peak) * 1024


_COPY_GBS: dict[str, float] = {}


def copy_bandwidth_gbs(device: str = "cpu", nbytes: int = 1 << 28) -> float:
    """Measured copy bandwidth (bytes read + written per second, in GB/s) of ``dst.copy_(src)``."""
    if device in _COPY_GBS:
        return _COPY_GBS[device]
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    t = timeit(lambda: dst.copy_(src), device, repeat=9)
    _COPY_GBS[device] = 2 * nbytes / t / 1e9
    return _COPY_GBS[device]


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_isa() -> dict:
    """The CPU level fedkernels' CPU kernels ran at (``level``), what the CPU supports (``host``) and the
    ``FK_CPU_ISA`` cap (``cap``, "" when unset): read from the imported build, so it is the level that ran."""
    from fedkernels._info import build_info

    info = build_info()
    return {"level": info["cpu_isa"], "host": info["cpu_isa_host"], "cap": info["cpu_isa_cap"]}


def machine() -> dict:
    """What the numbers were measured on, the CPU kernels' dispatch level included."""
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "cpu_isa": cpu_isa(),
    }


def add_device_arguments(ap: argparse.ArgumentParser) -> None:
    """Add ``--device`` (default cpu), ``--isa`` and ``--out`` to a benchmark's argument parser."""
    ap.add_argument(
        "--device", default="cpu", help="cpu (default) or cuda[:N]: where both the op and its PyTorch composition run"
    )
    ap.add_argument(
        "--isa",
        choices=["avx512", "avx2", "generic"],
        default=None,
        help="cap fedkernels' CPU kernels at this level (sets FK_CPU_ISA and restarts the script; default: "
        "FK_CPU_ISA as set, else the CPU's best). A level above the CPU's runs the CPU's: the JSON's "
        "machine.cpu_isa.level says which ran",
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="result JSON (default: build/bench-results/<name>.json on cpu and with --quick, "
        "gpu-check/bench/<name>.json on cuda; bench/results only when --out names it, and never from cuda)",
    )


def check_device_arguments(ap: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """Validate ``--device`` / ``--out`` and return the device; errors exit via ``ap.error`` (status 2).

    cuda needs a visible GPU and a fedkernels build with CUDA kernels; a non-CPU run may not write
    into bench/results (those files are the CPU tables the README quotes). ``--isa`` takes effect here
    (apply_isa) and the level that runs is printed.
    """
    apply_isa(args.isa)
    from fedkernels._info import build_info, cpu_isa_line

    print(f"fedkernels CPU kernels: {cpu_isa_line(build_info())}", flush=True)
    try:
        dev = torch.device(args.device)
    except (RuntimeError, ValueError) as e:
        ap.error(f"--device {args.device!r}: {e}")
    if dev.type not in ("cpu", "cuda"):
        ap.error(f"--device {args.device!r}: choose cpu or cuda[:N]")
    if dev.type != "cpu" and args.out is not None and RESULTS.resolve() in args.out.resolve().parents:
        ap.error(f"--out {args.out}: a {dev.type} run must not write into bench/results (the CPU tables)")
    if dev.type == "cuda":
        built = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU-only build"
        if not torch.cuda.is_available():
            ap.error(
                f"--device {args.device}: no CUDA GPU is available (torch {torch.__version__}, {built}); "
                "use --device cpu, or see the README section 'Verifying the CUDA kernels on your GPU'"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            ap.error(f"--device {args.device}: only {torch.cuda.device_count()} CUDA device(s) visible")
        import fedkernels

        if not fedkernels._C.build_info()["cuda_kernels"]:
            ap.error(
                f"--device {args.device}: this fedkernels build has no CUDA kernels "
                "(rebuild with FK_CUDA=ON against a CUDA torch)"
            )
        torch.cuda.set_device(dev.index or 0)
    return str(dev)


def rerun_argv() -> list[str]:
    """The command line that starts this benchmark again with the same arguments: ``python -m bench.ops.x ...``
    (the benches run as modules of the repo root, so that ``bench`` imports without a ``sys.path`` edit)."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    if spec is not None and spec.name:
        return [sys.executable, "-m", spec.name.removesuffix(".__main__"), *sys.argv[1:]]
    return [sys.executable, *sys.argv]


def apply_isa(isa: str | None) -> None:
    """Run this script at CPU level ``isa``: fedkernels reads ``FK_CPU_ISA`` once, when it is imported,
    so the script starts again (same arguments) with it set, unless it already is. None: as it is."""
    if isa is None or os.environ.get("FK_CPU_ISA") == isa:
        return
    os.environ["FK_CPU_ISA"] = isa
    sys.stdout.flush()
    os.execv(sys.executable, rerun_argv())


def results_path(name: str, device: str = "cpu", out: Path | None = None, quick: bool = False) -> Path:
    """Where a run writes: ``out`` if given; else build/bench-results/<name>.json on cpu or for a
    ``quick`` (smoke) run, gpu-check/bench/<name>.json for a full run on any other device. bench/results
    (the committed CPU tables) is written only when ``out`` names it."""
    if out is not None:
        return Path(out)
    if quick or torch.device(device).type == "cpu":
        return QUICK_RESULTS / f"{name}.json"
    return DEVICE_RESULTS / f"{name}.json"


def device_info(device: str) -> dict:
    """The device a non-CPU run measured on (name, compute capability, torch's CUDA version)."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return {"device": str(dev)}
    props = torch.cuda.get_device_properties(dev)
    return {
        "device": str(dev),
        "device_name": props.name,
        "compute_capability": f"{props.major}.{props.minor}",
        "torch_cuda": torch.version.cuda,
    }


def write_results(
    name: str, rows: list[dict], extra: dict | None = None, path: Path | None = None, device: str = "cpu"
) -> Path:
    """Write the rows, the machine and ``extra`` as JSON to ``path`` (default build/bench-results/<name>.json).

    A non-CPU ``device`` adds its :func:`device_info` under "device" (CPU files are unchanged).
    """
    path = Path(path) if path is not None else results_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": name, "machine": machine(), "rows": rows, **(extra or {})}
    if torch.device(device).type != "cpu":
        payload["device"] = device_info(device)
    path.write_text(json.dumps(payload, indent=2))
    return path


def load_note(load: tuple[float, float, float] | None = None) -> str:
    """How busy the machine was when a bench ended (``load``: its 1 / 5 / 15-minute load average, read
    now if not given, so a bench that also stores the numbers reads them once), for the JSON's note.

    On this project's 2-core machine a bench alone keeps the 5-minute average below the threshold of 2.5
    used here; above it something else ran beside it and absolute times are inflated.
    """
    load = load or os.getloadavg()
    state = "quiet (only this bench running)" if load[1] < 2.5 else "loaded: absolute times are noisy"
    return (
        f"load average at the end {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1 / 5 / 15 min): {state}; "
        "every ratio was measured in the same run"
    )


def markdown_table(rows: list[dict], columns: list[str]) -> str:
    """A markdown table of ``rows`` restricted to ``columns`` (floats to 3 significant digits)."""

    def fmt(v: object) -> str:
        if isinstance(v, float):
            return f"{v:.3g}"
        return str(v)

    head = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
    return head + "\n".join("| " + " | ".join(fmt(r.get(c, "")) for c in columns) + " |" for r in rows)


def mib(nbytes: float) -> float:
    return nbytes / 2**20


def read_xc_dense(path: str | Path):
    """An Extreme Classification file as a ClientData with dense float32 features (the library's reader)."""
    from fedkernels.data import read_xc, to_client_data

    d = read_xc(path)
    return to_client_data(torch.from_numpy(d.features.toarray()).float(), d.labels)


# ---- datasets (read with fedkernels.data, the library's one XC reader)

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def read_xc(path: Path, limit: int | None = None) -> tuple[torch.Tensor, list[list[int]], int]:
    """Dense float32 features ``[N, F]``, the label lists and the label count of an XC file (the
    first ``limit`` samples when given), through :func:`fedkernels.data.read_xc`."""
    from fedkernels.data import read_xc as _read

    d = _read(path)
    n = d.num_samples if limit is None else min(d.num_samples, limit)
    x = torch.from_numpy(d.features[:n].toarray()).float()
    lab = d.labels[:n]
    labels = [lab.indices[lab.indptr[i] : lab.indptr[i + 1]].tolist() for i in range(n)]
    return x, labels, d.num_labels


def multi_hot(labels: list[list[int]], num_labels: int) -> torch.Tensor:
    """float32 ``[N, L]`` 0/1 matrix of label lists."""
    y = torch.zeros(len(labels), num_labels)
    for i, ls in enumerate(labels):
        y[i, ls] = 1.0
    return y
