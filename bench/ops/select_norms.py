"""Partial weight exchange microbenchmarks: fused delta norms, top-k tensor selection and
the server's masked weighted average, against the PyTorch a user would write and torch.compile of
it, in the same run (CPU: calls alternated, minimum of 21), with the op's 1 -> 2 thread speed-up and
the copy bandwidth at 1 and 2 threads (the ceiling of that speed-up for these memory-bound ops).

Models: the parameter shapes of ResNet-50 (161 tensors, 25.6M) and BERT-base (199 tensors, 109.5M).
Run: ``PYTHONPATH=src python -m bench.ops.select_norms`` (writes build/bench-results/select.json;
``--out bench/results/ops/select.json`` for the committed table; prints a table).
``--quick``: ResNet-50 only (writes select-quick.json); ``--device cuda``: on a GPU (writes
gpu-check/bench/select[-quick].json unless ``--out`` names a file).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

import fedkernels
from bench.common import (
    add_device_arguments,
    check_device_arguments,
    copy_bandwidth_gbs,
    load_note,
    markdown_table,
    mib,
    peak_extra_bytes,
    results_path,
    timeit,
    write_results,
)
from bench.ops.peers import alternating_min, compiled_peer, fresh_compiles, thread_scaling
from bench.ops.select_shapes import bert_base_shapes, resnet50_shapes

MODELS = {"resnet50": resnet50_shapes, "bert-base": bert_base_shapes}


def copy_scaling(device: str = "cpu", nbytes: int = 1 << 27) -> dict[str, float]:
    """Copy bandwidth (GB/s, read + write) at 1 and 2 threads: the ceiling of a memory-bound op's
    thread scaling (when 2 threads copy barely faster than 1, no streaming op can scale better)."""
    src = torch.ones(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    sc = thread_scaling(lambda: dst.copy_(src))
    return {"copy_gbs_1thr": 2 * nbytes / sc["t1_s"] / 1e9, "copy_gbs_2thr": 2 * nbytes / sc["t2_s"] / 1e9}


def with_peers(methods: dict, peers: dict, args: tuple, skipped: dict[str, str]) -> dict:
    """``methods`` plus each ``torch.compile`` peer that compiles (the reason goes to ``skipped`` if not)."""
    out = dict(methods)
    for name, fn in peers.items():
        cfn, why = compiled_peer(fn, *args)
        if cfn is None:
            skipped[name] = why
        else:
            out[name] = lambda cfn=cfn: cfn(*args)
    return out


def make_pair(
    shapes: list[tuple[int, ...]], dtype: torch.dtype, seed: int, device: str = "cpu"
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(after, before) lists: random weights and a small random local update (drawn on the CPU, then moved)."""
    g = torch.Generator().manual_seed(seed)
    old = [torch.randn(s, generator=g).to(dtype) for s in shapes]
    new = [(o.float() + 0.01 * torch.randn(s, generator=g)).to(dtype) for o, s in zip(old, shapes, strict=True)]
    return [t.to(device) for t in new], [t.to(device) for t in old]


def loop_norms(new: list[torch.Tensor], old: list[torch.Tensor]) -> torch.Tensor:
    """The obvious loop."""
    return torch.stack([(a - b).float().norm() for a, b in zip(new, old, strict=True)])


def foreach_norms(new: list[torch.Tensor], old: list[torch.Tensor]) -> torch.Tensor:
    """The fused PyTorch route: foreach sub then foreach norm."""
    return torch.stack(torch._foreach_norm(torch._foreach_sub(new, old))).float()


def loop_average(dst: list[torch.Tensor], sent: list[tuple[torch.Tensor, list[torch.Tensor], float]]) -> None:
    """A Python loop of per-tensor weighted sums over the clients that sent each tensor."""
    for t in range(len(dst)):
        contribs = [(w, xs[pos]) for idx, xs, w in sent for pos in (idx == t).nonzero().flatten().tolist()]
        if contribs:
            dst[t].copy_(sum(w * x for w, x in contribs) / sum(w for w, _ in contribs))


def bench_norms(model: str, dtype: torch.dtype, rows: list[dict], copy_gbs: float, device: str = "cpu") -> None:
    fresh_compiles()  # compiled peers see this model and dtype as their first shapes
    shapes = MODELS[model]()
    new, old = make_pair(shapes, dtype, seed=0, device=device)
    nbytes = 2 * sum(t.numel() * t.element_size() for t in new)  # both tensors read once
    model_bytes = nbytes // 2
    # correctness against float64 (the loop rounds 16-bit differences to 16 bits, so it is no reference)
    want = torch.stack([(a.double() - b.double()).norm() for a, b in zip(new, old, strict=True)])
    got = fedkernels.delta_norms(new, old).double()
    assert torch.allclose(got, want, rtol=1e-5, atol=0.0), "delta_norms disagrees with float64"
    base = {
        "fedkernels.delta_norms": lambda: fedkernels.delta_norms(new, old),
        "python loop": lambda: loop_norms(new, old),
        "_foreach_norm(_foreach_sub)": lambda: foreach_norms(new, old),
    }
    skipped: dict[str, str] = {}
    compiled = {"torch.compile(foreach)": foreach_norms, "torch.compile(loop)": loop_norms} if device == "cpu" else {}
    methods = with_peers(base, compiled, (new, old), skipped)
    times = timed(methods, device)
    scaling = thread_scaling(base["fedkernels.delta_norms"], repeat=11) if device == "cpu" else None
    for name, why in skipped.items():
        rows.append(
            {
                "model": model,
                "dtype": str(dtype).replace("torch.", ""),
                "op": "delta_norms",
                "method": name,
                "note": why,
            }
        )
    for name, fn in methods.items():
        peak = peak_extra_bytes(fn, device)
        rows.append(
            {
                "model": model,
                "dtype": str(dtype).replace("torch.", ""),
                "op": "delta_norms",
                "method": name,
                "tensors": len(shapes),
                "time_ms": 1e3 * times[name],
                "fk_speedup": times[name] / times["fedkernels.delta_norms"],
                "gbs": nbytes / times[name] / 1e9,
                "pct_copy_bw": 100 * nbytes / times[name] / 1e9 / copy_gbs,
                "peak_extra_mib": mib(peak),
                "peak_extra_pct_model": 100 * peak / model_bytes,
                **({"1->2 thr": scaling["speedup"]} if scaling and name == "fedkernels.delta_norms" else {}),
            }
        )
    topk = {
        "fedkernels.select_topk_tensors": lambda: fedkernels.select_topk_tensors(new, old, 0.1),
        "foreach + sort": lambda: torch.sort(foreach_norms(new, old), descending=True, stable=True)[1][
            : fedkernels.num_selected(len(new), 0.1)
        ],
    }
    k = fedkernels.num_selected(len(new), 0.1)
    want_idx = torch.sort(want, descending=True, stable=True)[1][:k]  # float64 ranking
    assert torch.equal(topk["fedkernels.select_topk_tensors"](), want_idx), "top-k disagrees with float64"
    ttimes = timed(topk, device)
    for name in topk:
        rows.append(
            {
                "model": model,
                "dtype": str(dtype).replace("torch.", ""),
                "op": "select_topk_tensors (p=0.1)",
                "method": name,
                "tensors": len(shapes),
                "time_ms": 1e3 * ttimes[name],
                "fk_speedup": ttimes[name] / ttimes["fedkernels.select_topk_tensors"],
                "gbs": nbytes / ttimes[name] / 1e9,
                "pct_copy_bw": 100 * nbytes / ttimes[name] / 1e9 / copy_gbs,
            }
        )


def bench_average(
    model: str, rows: list[dict], copy_gbs: float, clients: int = 4, fraction: float = 0.5, device: str = "cpu"
) -> None:
    fresh_compiles()
    shapes = MODELS[model]()
    g = torch.Generator().manual_seed(1)
    sent = []
    for c in range(clients):
        new, old = make_pair(shapes, torch.float32, seed=10 + c, device=device)
        idx = fedkernels.select_topk_tensors(new, old, fraction)
        sent.append((idx, [new[i] for i in idx.tolist()], float(torch.randint(50, 500, (1,), generator=g))))
        del old
    dst = [torch.zeros(s, device=device) for s in shapes]
    nbytes = sum(x.numel() * x.element_size() for _, xs, _ in sent for x in xs)
    nbytes += sum(dst[t].numel() * 4 for t in {i for idx, _, _ in sent for i in idx.tolist()})  # reads + writes
    ref = [d.clone() for d in dst]
    loop_average(ref, sent)
    fedkernels.masked_weighted_average(dst, sent)
    assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(dst, ref, strict=True)), "average disagrees"
    skipped: dict[str, str] = {}
    base = {
        "fedkernels.masked_weighted_average": lambda: fedkernels.masked_weighted_average(dst, sent),
        "python loop": lambda: loop_average(ref, sent),
    }
    cref = [d.clone() for d in dst]
    compiled = {"torch.compile(loop)": loop_average} if device == "cpu" else {}
    methods = with_peers(base, compiled, (cref, sent), skipped)
    if "torch.compile(loop)" in methods:
        assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(cref, ref, strict=True))
    times = timed(methods, device)
    scaling = thread_scaling(base["fedkernels.masked_weighted_average"], repeat=11) if device == "cpu" else None
    op = f"masked_weighted_average ({clients} clients, p={fraction})"
    for name, why in skipped.items():
        rows.append({"model": model, "dtype": "float32", "op": op, "method": name, "note": why})
    for name, fn in methods.items():
        peak = peak_extra_bytes(fn, device)
        rows.append(
            {
                "model": model,
                "dtype": "float32",
                "op": op,
                "method": name,
                "tensors": len(shapes),
                "time_ms": 1e3 * times[name],
                "fk_speedup": times[name] / times["fedkernels.masked_weighted_average"],
                "gbs": nbytes / times[name] / 1e9,
                "pct_copy_bw": 100 * nbytes / times[name] / 1e9 / copy_gbs,
                "peak_extra_mib": mib(peak),
                **(
                    {"1->2 thr": scaling["speedup"]} if scaling and name == "fedkernels.masked_weighted_average" else {}
                ),
            }
        )


def timed(methods: dict, device: str) -> dict[str, float]:
    """Seconds per call of each method: on the CPU calls alternated, minimum of 21 (peers.alternating_min).

    21, not 7: this VM's memory bandwidth moves between runs and within one (a BERT-base delta_norms
    call's minimum of 7 varied widely across runs), and each call here is short streaming.
    """
    if device != "cpu":
        return {name: timeit(fn, device, repeat=5) for name, fn in methods.items()}
    return alternating_min(methods, repeat=21)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", nargs="*", default=None, help=f"default: {' '.join(MODELS)} (--quick: resnet50)")
    parser.add_argument("--dtypes", nargs="*", default=["float32", "bfloat16"])
    parser.add_argument("--quick", action="store_true", help="ResNet-50 only (a smoke run); writes select-quick.json")
    add_device_arguments(parser)
    args = parser.parse_args()
    device = check_device_arguments(parser, args)
    unknown = sorted(set(args.models or []) - set(MODELS))
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {', '.join(MODELS)}")
    models = args.models if args.models is not None else (["resnet50"] if args.quick else list(MODELS))
    name = "select-quick" if args.quick else "select"
    copy_gbs = copy_bandwidth_gbs(device)
    copy_thr = copy_scaling(device) if device == "cpu" else {}
    rows: list[dict] = []
    for model in models:
        for dtype in args.dtypes:
            bench_norms(model, getattr(torch, dtype), rows, copy_gbs, device)
        bench_average(model, rows, copy_gbs, device=device)
    load = os.getloadavg()
    note = load_note(load) if device == "cpu" else "ratios are measured in the same run"
    path = write_results(
        name,
        rows,
        {
            "copy_bandwidth_gbs": copy_gbs,
            **copy_thr,
            "note": note,
            "load_average_at_end": list(load),
        },
        path=results_path(name, device, args.out, args.quick),
        device=device,
    )
    cols = ["model", "dtype", "op", "method", "time_ms", "fk_speedup", "gbs", "pct_copy_bw", "peak_extra_mib"]
    cols += ["1->2 thr", "note"]
    print(f"copy bandwidth {copy_gbs:.1f} GB/s, threads {torch.get_num_threads()}, {copy_thr}\n")
    print(markdown_table(rows, cols))
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
