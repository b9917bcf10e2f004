"""The pure parts of tools/gpu/gpu_check.py: read nvidia-smi, pytest and the benchmarks' JSON, and put
them into the one gpu-check JSON. No subprocesses and no torch here, so every function is tested on
fake inputs (python_tests/tools/test_gpu_check.py).

A gpu-check bench row is: bench, op, config, vs (the PyTorch composition it is timed against),
ours_ms, torch_ms, speedup (torch_ms / ours_ms: above 1 means fedkernels is faster), gbs (bytes the
op must move / its time; None for compute-bound ops) and pct_copy (gbs against the device's copy
bandwidth measured by gpu-check).
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable

Row = dict[str, object]

# ---- nvidia-smi

SMI_QUERY = "name,driver_version,compute_cap,memory.total"


def parse_smi_csv(text: str) -> list[dict[str, str]]:
    """GPUs from ``nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader``."""
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0]:
            # strict=False: an older nvidia-smi may print fewer columns; the fields present are kept
            gpus.append(dict(zip(("name", "driver", "compute_cap", "memory"), parts, strict=False)))
    return gpus


def parse_smi_cuda_version(text: str) -> str | None:
    """The driver's CUDA version from plain ``nvidia-smi`` output ("CUDA Version: 13.0"), if shown."""
    m = re.search(r"CUDA Version:\s*([0-9.]+)", text)
    return m.group(1) if m else None


def parse_nvcc_version(text: str) -> str | None:
    """The release from ``nvcc --version`` ("Cuda compilation tools, release 13.0, V13.0.48")."""
    m = re.search(r"release\s+([0-9.]+)", text)
    return m.group(1) if m else None


def arch_list(capability: str, extra: str = "9.0") -> str:
    """TORCH_CUDA_ARCH_LIST for a device of compute capability ``capability`` ("8.6"), plus ``extra``."""
    archs = sorted({capability, extra}, key=lambda a: tuple(int(x) for x in a.split(".")))
    return ";".join(archs)


# ---- pytest

_COUNT = re.compile(r"(\d+) (passed|failed|skipped|xfailed|xpassed|errors?|deselected|warnings?)\b")
_SUMMARY = re.compile(r"\b(passed|failed|skipped|xfailed|xpassed|errors?|deselected|no tests ran)\b.* in [0-9.]+s")
TEST_KEYS = ("passed", "failed", "skipped", "errors", "xfailed", "xpassed", "deselected")


def parse_pytest_summary(text: str) -> dict[str, int]:
    """Counts from pytest's last summary line, e.g. ``3 failed, 120 passed, 2 skipped, 4 warnings in 9.12s``.

    Raises ValueError when the text has no summary line (pytest crashed or was killed).
    """
    for line in reversed(text.splitlines()):
        if _SUMMARY.search(line):
            counts = dict.fromkeys(TEST_KEYS, 0)
            for n, what in _COUNT.findall(line):
                key = {"error": "errors", "warning": "warnings"}.get(what, what)
                counts[key] = counts.get(key, 0) + int(n)
            return counts
    raise ValueError("no pytest summary line found")


def junit_device_counts(xml_text: str, device: str = "cuda") -> dict[str, int]:
    """Outcomes of the test cases parametrised on ``device`` (``[cuda]``, ``[cuda-3]``...) in a junit XML."""
    pattern = re.compile(r"\[(?:[^\]]*[-_])?" + re.escape(device) + r"(?:[-_:][^\]]*)?\]")
    counts = {"total": 0, "passed": 0, "failed": 0, "skipped": 0}
    for case in ET.fromstring(xml_text).iter("testcase"):
        if not pattern.search(case.get("name", "")):
            continue
        counts["total"] += 1
        if case.find("failure") is not None or case.find("error") is not None:
            counts["failed"] += 1
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return counts


def summarize_tests(returncode: int, output: str, junit_xml: str | None = None) -> dict:
    """The gpu-check "tests" entry: counts, cuda-parametrised counts, and ok (pytest exited 0, none failed)."""
    try:
        counts: dict = parse_pytest_summary(output)
        problem = None
    except ValueError as e:
        counts, problem = dict.fromkeys(TEST_KEYS, 0), str(e)
    counts["returncode"] = returncode
    if junit_xml:
        try:
            counts["cuda"] = junit_device_counts(junit_xml)
        except ET.ParseError as e:
            counts["cuda"] = {"error": f"junit XML unreadable: {e}"}
    counts["ok"] = (
        returncode == 0 and problem is None and counts["failed"] == 0 and counts["errors"] == 0 and counts["passed"] > 0
    )
    if problem:
        counts["problem"] = problem
    return counts


# ---- benchmark rows


def _row(bench: str, op: str, config: str, vs: str, ours_ms: float, torch_ms: float | None, gbs: float | None) -> Row:
    return {"bench": bench, "op": op, "config": config, "vs": vs, "ours_ms": ours_ms, "torch_ms": torch_ms, "gbs": gbs}


def _sketch(rows: list[dict]) -> Iterable[Row]:
    for r in rows:
        yield _row(
            "sketch",
            r["op"],
            f"p={r['p']} R={r['R']} B={r['B']}",
            "PyTorch composition (bench/ops/sketch.py)",
            r["ours_ms"],
            r["torch_ms"],
            r["GB/s"],
        )


def _sampled(rows: list[dict]) -> Iterable[Row]:
    for r in rows:
        if r["op"] == "linear_cross_entropy":
            yield _row(
                "sampled",
                f"linear_cross_entropy {r['mode']}",
                f"N={r['N']} d={r['d']} s={r['s']} bias={r['bias']} threads={r['threads']}",
                "F.cross_entropy(h @ W.T + b)" if r["bias"] else "F.cross_entropy(h @ W.T)",
                r["ours_ms"],
                r["eager_ms"],
                None,
            )
        else:
            yield _row(
                "sampled",
                r["op"],
                f"n={r['n']} d={r['d']} T={r['T']}",
                "index_add_ weighted mean",
                r["fedkernels_ms"],
                r["torch_ms"],
                r["GB/s"],
            )


def _select(rows: list[dict]) -> Iterable[Row]:
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["model"], r["dtype"], r["op"]), []).append(r)
    for (model, dtype, op), group in groups.items():
        ours = [r for r in group if r["method"].startswith("fedkernels.")]
        if len(ours) != 1:
            raise ValueError(f"select: {model} {dtype} {op}: expected one fedkernels row, found {len(ours)}")
        for r in group:
            if r is not ours[0]:
                yield _row(
                    "select", op, f"{model} {dtype}", r["method"], ours[0]["time_ms"], r["time_ms"], ours[0]["gbs"]
                )


def _prox(rows: list[dict]) -> Iterable[Row]:
    for r in rows:
        d = r["d"]
        pg = r.get("pg100 ns/elem")
        yield _row(
            "prox",
            "prox_tv1d (float32, anchored)",
            f"d={d} lam={r['lam']}",
            "FISTA, 100 iterations",
            r["ns/elem f32 anchored"] * d / 1e6,
            pg * d / 1e6 if pg is not None else None,
            r["GB/s f32"],
        )


def _spread(rows: list[dict]) -> Iterable[Row]:
    for r in rows:
        config = f"C={r['C']} d={r['d']} k={r['k']}"
        torch_knn, torch_loss = r.get("torch_knn_s"), r.get("torch_loss_fwd_bwd_s")
        yield _row(
            "spread",
            "knn_classes",
            config,
            "cdist + topk",
            1e3 * r["fk_knn_s"],
            1e3 * torch_knn if torch_knn is not None else None,
            r["fk_knn_gbs"],
        )
        yield _row(
            "spread",
            "spreadout_loss fwd+bwd",
            config,
            "cdist + topk + hinge, autograd",
            1e3 * r["fk_loss_fwd_bwd_s"],
            1e3 * torch_loss if torch_loss is not None else None,
            None,
        )


def _topk(rows: list[dict]) -> Iterable[Row]:
    for r in rows:
        eager = r.get("eager_t1_s")
        yield _row(
            "topk",
            "linear_topk",
            f"p={r['p']} d={r['d']} N={r['N']} k={r['k']}",
            "topk(h @ W.T)",
            1e3 * r["fk_t1_s"],
            1e3 * eager if eager is not None else None,
            None,
        )


NORMALIZERS: dict[str, Callable[[list[dict]], Iterable[Row]]] = {
    "sketch": _sketch,
    "sampled": _sampled,
    "select": _select,
    "prox": _prox,
    "spread": _spread,
    "topk": _topk,
}


def bench_rows(bench: str, payload: dict, copy_gbs: float | None) -> list[Row]:
    """A benchmark's JSON (``{"rows": [...]}``) as gpu-check rows, with speedup and pct_copy filled in.

    Raises KeyError / ValueError when the rows do not have the fields that benchmark writes.
    """
    out = []
    for row in NORMALIZERS[bench](payload["rows"]):
        ours, theirs, gbs = row["ours_ms"], row["torch_ms"], row["gbs"]
        row["speedup"] = theirs / ours if theirs is not None and ours else None
        row["pct_copy"] = 100 * gbs / copy_gbs if gbs is not None and copy_gbs else None
        out.append({k: _finite(v) for k, v in row.items()})
    return out


def _finite(x: object) -> object:
    """JSON has no NaN/inf: such floats become None."""
    return None if isinstance(x, float) and not math.isfinite(x) else x


# ---- the whole report


def assemble(
    gpu: dict,
    build: dict,
    tests: dict,
    benches: dict[str, dict],
    steps: dict[str, float],
    setup_s: float = 0.0,
    target_s: float = 600.0,
    mainjob: dict | None = None,
) -> dict:
    """The gpu-check JSON: device facts, build, test counts, every bench's rows and status, the main
    job on each device, step times, ok.

    ``build`` and ``tests`` carry ``ok``; ``benches`` maps a bench name to ``{"status": "ok" | "failed" |
    "timeout", "rows": [...], ...}``; ``mainjob`` is tools/gpu/gpu_mainjob.py's JSON plus its ``status``
    (``None``: not asked for); ``steps`` are seconds per step; ``setup_s`` (creating the venv, a
    one-off download) is left out of the time compared with ``target_s``.
    """
    elapsed = sum(steps.values())
    ok = (
        bool(build.get("ok"))
        and bool(tests.get("ok"))
        and bool(benches)
        and all(b.get("status") == "ok" for b in benches.values())
        # a checkout without the datasets skips the main job (recorded why): the kernels' check stands
        and (mainjob is None or mainjob.get("status") in ("ok", "skipped"))
    )
    return {
        "tool": "gpu-check",
        "ok": ok,
        "gpu": gpu,
        "build": build,
        "tests": tests,
        "benches": benches,
        "bench_rows": [row for b in benches.values() for row in b.get("rows", [])],
        "mainjob": mainjob,
        "timing": {
            "steps_s": steps,
            "elapsed_s": elapsed,
            "setup_s": setup_s,
            "check_s": elapsed - setup_s,
            "target_s": target_s,
            "within_target": elapsed - setup_s <= target_s,
        },
    }


def exit_code(report: dict) -> int:
    """0 when every test passed and every benchmark ran, else 1."""
    return 0 if report.get("ok") else 1


def format_rows(rows: list[Row]) -> str:
    """The bench rows as a markdown table (times in ms, 3 significant digits)."""
    cols = ("bench", "op", "config", "vs", "ours_ms", "torch_ms", "speedup", "gbs", "pct_copy")

    def fmt(v: object) -> str:
        return "-" if v is None else f"{v:.3g}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines)
