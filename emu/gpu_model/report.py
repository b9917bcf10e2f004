"""All ops' models at the full or quick configurations, and the rows and markdown tables made of them."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from .common import FEW_WARPS_PER_SM, FP32_FLOPS, OpModel, bound_us, grouped, launch_stats
from .configs import full_configs, quick_configs
from .partial import Shape, partial_models
from .prox import prox_models
from .sampled import lce_models, sampler_models, scatter_models
from .sketch import fedmlh_models
from .spread import spread_models
from .topk import topk_models


def build_models(
    quick: bool,
    model_shapes: Mapping[str, Callable[[], list[Shape]]],
    log: Callable[[str], None] = print,
    exact_lce: bool = False,
) -> list[OpModel]:
    """Every op's model; ``model_shapes`` gives the parameter shapes of each network the configurations
    name for the partial exchange (the caller's: bench/ops/select_shapes.py)."""
    cfg = quick_configs() if quick else full_configs()
    models: list[OpModel] = []

    def step(what: str, fn: Callable[[], list[OpModel]]) -> None:
        t0 = time.perf_counter()
        got = fn()
        models.extend(got)
        log(f"  recorded {what}: {sum(len(m.launches) for m in got)} launches, {time.perf_counter() - t0:.1f} s")

    for p, r, b in cfg["fedmlh"]:
        step(f"FedMLH p={p}", lambda p=p, r=r, b=b: fedmlh_models(p, r, b, cfg["fedmlh_n"]))
    ss = cfg["fedss"]
    step("sampler", lambda: sampler_models(ss["s"], ss["n"], cfg["negatives"], cfg["sampler_clients"]))
    step("linear_cross_entropy", lambda: lce_models(ss["n"], ss["s"], ss["d"], exact_lce))
    for n, t in cfg["scatter"]:
        step(f"scatter_rows_mean n={n} T={t}", lambda n=n, t=t: scatter_models(n, t, cfg["scatter_d"]))
    for model in cfg["models"]:
        shapes = model_shapes[model]()
        step(f"partial exchange {model}", lambda m=model, s=shapes: partial_models(m, s, cfg["dtypes"]))
    for d, bs in cfg["prox"]:
        step(f"prox d={d} block={bs}", lambda d=d, bs=bs: prox_models(d, bs))
    for i, (c, d) in enumerate(cfg["spread"]):
        step(f"spread C={c} d={d}", lambda c=c, d=d, i=i: spread_models(c, d, with_pair_weights=i == 0))
    for p, d, n in cfg["topk"]:
        step(f"linear_topk p={p} d={d} N={n}", lambda p=p, d=d, n=n: topk_models(p, d, n))
    return models


def rows_of(models: list[OpModel]) -> tuple[list[dict], list[dict]]:
    """Per-kernel rows and per-op summary rows."""
    krows, orows = [], []
    for m in models:
        groups = grouped(m.launches)
        fk_total, known = 0, True
        min_wps, main = None, (-1, None)  # main: (bytes, warps/SM) of the kernel that moves the most bytes
        for name, shapes in groups.items():
            stats = [launch_stats(gr, bl) for gr, bl in shapes]
            big = max(range(len(stats)), key=lambda i: stats[i]["warps"])
            s = stats[big]
            nbytes, reason = m.kernel_bytes.get(name, (None, "no bytes function for this kernel"))
            if nbytes is None:
                known = False
            else:
                fk_total += nbytes
            min_wps = s["warps_per_sm"] if min_wps is None else min(min_wps, s["warps_per_sm"])
            if (nbytes or 0) > main[0]:
                main = (nbytes or 0, s["warps_per_sm"])
            distinct = sorted({(gr, bl) for gr, bl in shapes})
            row = {
                "op": m.op,
                "config": m.config,
                "kernel": name,
                "launches": len(shapes),
                "grid": list(shapes[big][0]),
                "block": list(shapes[big][1]),
                **s,
                "shapes": [[list(gr), list(bl)] for gr, bl in distinct],
                "few_warps": s["warps_per_sm"] < FEW_WARPS_PER_SM,
                "bytes": nbytes,
                "bound_us": bound_us(nbytes),
                "bytes_why": reason,
            }
            if name in m.flops:
                row["flops"] = m.flops[name]
                row["fp32_bound_us"] = m.flops[name] / FP32_FLOPS * 1e6
            krows.append(row)
        for name, count, (nbytes, reason) in m.extra_rows:
            fk_total += nbytes
            row = {
                "op": m.op,
                "config": m.config,
                "kernel": name,
                "launches": count,
                "bytes": nbytes,
                "bound_us": bound_us(nbytes),
                "bytes_why": reason,
                "few_warps": False,
            }
            if name in m.flops:
                row["flops"] = m.flops[name]
                row["fp32_bound_us"] = m.flops[name] / FP32_FLOPS * 1e6
            krows.append(row)
        torch_bytes = m.torch[0] if m.torch else None
        orows.append(
            {
                "op": m.op,
                "config": m.config,
                "kernels": len(groups),
                "launches": len(m.launches),
                "fk_bytes": fk_total if known else None,
                "fk_bound_us": bound_us(fk_total) if known else None,
                "floor_bytes": m.floor[0] if m.floor else None,
                "floor_bound_us": bound_us(m.floor[0]) if m.floor else None,
                "floor_why": m.floor[1] if m.floor else None,
                "torch_bytes": torch_bytes,
                "torch_bound_us": bound_us(torch_bytes),
                "torch_why": m.torch[1] if m.torch else m.note,
                "torch_over_fk": (torch_bytes / fk_total) if (torch_bytes and known and fk_total) else None,
                "min_warps_per_sm": min_wps,
                "main_kernel_warps_per_sm": main[1],
                "few_warps": min_wps is not None and min_wps < FEW_WARPS_PER_SM,
                "how": m.how,
                "note": m.note,
            }
        )
    return krows, orows


def _fmt_bytes(n: float | None) -> str:
    if n is None:
        return "?"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


def _fmt_us(t: float | None) -> str:
    if t is None:
        return "—"
    return f"{t:.3g}" if t < 1000 else f"{t:,.0f}"


def markdown(krows: list[dict], orows: list[dict]) -> str:
    """One table: each op's kernels, then the op's total beside the PyTorch composition's bound."""
    head = (
        "| op | config | kernel | launches | blocks | threads | warps/SM | waves | bytes | bound µs "
        "| torch bytes | torch bound µs | torch/fk |\n|" + "---|" * 13 + "\n"
    )
    lines = []
    for o in orows:
        for k in (r for r in krows if r["op"] == o["op"] and r["config"] == o["config"]):
            if "blocks" in k:
                wps = f"{k['warps_per_sm']:.3g}" + (" ⚠" if k["few_warps"] else "")
                shape = [str(k["blocks"]), str(k["threads_per_block"]), wps, str(k["waves"])]
                if len(k["shapes"]) > 1:
                    shape[0] += f" (max of {len(k['shapes'])} shapes)"
            else:
                shape = ["—", "—", "—", "—"]
            lines.append(
                f"| {o['op']} | {o['config']} | {k['kernel']} | {k['launches']} | "
                + " | ".join(shape)
                + f" | {_fmt_bytes(k['bytes'])} | {_fmt_us(k['bound_us'])} |  |  |  |"
            )
        ratio = f"{o['torch_over_fk']:.3g}x" if o["torch_over_fk"] else "—"
        lines.append(
            f"| {o['op']} | {o['config']} | **total** | {o['launches']} |  |  |  |  "
            f"| **{_fmt_bytes(o['fk_bytes'])}** | **{_fmt_us(o['fk_bound_us'])}** "
            f"| {_fmt_bytes(o['torch_bytes']) if o['torch_bytes'] else 'n/a'} "
            f"| {_fmt_us(o['torch_bound_us'])} | {ratio} |"
        )
    return head + "\n".join(lines)


def summary_markdown(orows: list[dict]) -> str:
    """One row per op and configuration: the fewest warps per SM of its launches and of its main kernel
    (the one moving the most bytes), and both bounds."""
    head = (
        "| op | config | kernels | min warps/SM | main kernel warps/SM | fedkernels bytes | bound µs "
        "| torch bytes | torch bound µs | torch/fk |\n|" + "---|" * 10 + "\n"
    )
    lines = []

    def w(v: float | None) -> str:
        return "—" if v is None else f"{v:.3g}" + (" ⚠" if v < FEW_WARPS_PER_SM else "")

    for o in orows:
        wps = f"{w(o['min_warps_per_sm'])} | {w(o['main_kernel_warps_per_sm'])}"
        ratio = f"{o['torch_over_fk']:.3g}x" if o["torch_over_fk"] else "—"
        lines.append(
            f"| {o['op']} | {o['config']} | {o['kernels']} | {wps} | {_fmt_bytes(o['fk_bytes'])} "
            f"| {_fmt_us(o['fk_bound_us'])} | {_fmt_bytes(o['torch_bytes']) if o['torch_bytes'] else 'n/a'} "
            f"| {_fmt_us(o['torch_bound_us'])} | {ratio} |"
        )
    return head + "\n".join(lines)


def flagged(krows: list[dict]) -> list[str]:
    return [
        f"{k['op']} [{k['config']}] {k['kernel']}: {k['warps_per_sm']:.3g} warps/SM "
        f"({k['blocks']} blocks x {k['threads_per_block']} threads)"
        for k in krows
        if k.get("few_warps")
    ]
