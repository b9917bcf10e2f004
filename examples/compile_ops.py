"""fedkernels ops under ``torch.compile(fullgraph=True)``: each op is a registered custom op with a fake
(meta) implementation and autograd, so a compiled graph holds it whole, forward and backward.

Three compiled functions, each checked against eager mode:

1. a FedMLH step: bucket logits -> ``label_hash`` targets -> BCE, its gradient, and ``bucket_merge_topk``;
2. a sampled-softmax step: ``sample_negatives`` + ``linear_cross_entropy`` with its gradient;
3. the server side: ``count_sketch`` of two client updates, summed, then ``count_sketch_query``.

    python examples/compile_ops.py                      # inductor (the default backend; compiles C++)
    python examples/compile_ops.py --backend aot_eager  # traces the same graphs, no code generation
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
import torch.nn.functional as F

import fedkernels
from fedkernels import HashFamily

P, R, B, N, D = 5000, 4, 64, 32, 16  # classes, hash tables, buckets, batch, feature width


def fedmlh_step(w: torch.Tensor, x: torch.Tensor, indptr: torch.Tensor, indices: torch.Tensor, table: torch.Tensor):
    logits = torch.einsum("nd,rdb->rnb", x, w)  # [R, N, B]
    z = fedkernels.label_hash(indptr, indices, table, B).to(logits.dtype)
    loss = F.binary_cross_entropy_with_logits(logits, z)
    values, classes = fedkernels.bucket_merge_topk(
        F.logsigmoid(logits.detach()), table, 5, "mean"
    )  # not differentiable
    return loss, values, classes


def sampled_step(h: torch.Tensor, w_full: torch.Tensor, target: torch.Tensor, positives: torch.Tensor):
    neg = fedkernels.sample_negatives(positives, P, 64, 7)
    ids = torch.cat([positives, neg])
    local = torch.searchsorted(positives, target)  # targets are positives (sorted)
    return fedkernels.linear_cross_entropy(h, w_full[ids], local)


def sketch_sum(u1: torch.Tensor, u2: torch.Tensor, table: torch.Tensor, signs: torch.Tensor):
    m = fedkernels.count_sketch(u1, table, signs, 4096) + fedkernels.count_sketch(u2, table, signs, 4096)
    return fedkernels.count_sketch_query(m, table, signs)


def with_grads(fn, params: list[torch.Tensor], *rest) -> list[torch.Tensor]:
    """``fn(*params, *rest)``'s outputs, then the gradients of its first output (a loss) for ``params``."""
    out = fn(*params, *rest)
    out = out if isinstance(out, tuple) else (out,)
    grads = torch.autograd.grad(out[0], params)
    return [o.detach() for o in out] + list(grads)


def check(name: str, eager, compiled) -> bool:
    """Compare outputs (and the gradients the functions return) of eager and compiled runs."""
    ok = all(
        torch.allclose(a, b, rtol=1e-5, atol=1e-6) if a.is_floating_point() else torch.equal(a, b)
        for a, b in zip(eager, compiled, strict=True)
    )
    print(f"{name}: compiled {'matches' if ok else 'DIFFERS FROM'} eager")
    return ok


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="inductor", help="torch.compile backend (inductor, aot_eager, ...)")
    args = p.parse_args()
    torch.manual_seed(0)
    hf = HashFamily(R, B, seed=1)
    table, signs = hf.table(P), hf.signs(P)
    x = torch.randn(N, D)
    counts = torch.randint(1, 4, (N,))
    indptr = torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)])
    indices = torch.randint(0, P, (int(counts.sum()),))
    results = []

    t0 = time.perf_counter()
    w = torch.randn(R, D, B, requires_grad=True)
    compiled = torch.compile(fedmlh_step, fullgraph=True, backend=args.backend)  # the backward is compiled too
    results.append(
        check(
            "fedmlh step (label_hash, BCE + grad, bucket_merge_topk)",
            with_grads(fedmlh_step, [w], x, indptr, indices, table),
            with_grads(compiled, [w], x, indptr, indices, table),
        )
    )

    h = torch.randn(N, D, requires_grad=True)
    w_full = torch.randn(P, D, requires_grad=True)
    positives = torch.unique(indices[:N])
    target = positives[torch.randint(0, len(positives), (N,))]
    compiled = torch.compile(sampled_step, fullgraph=True, backend=args.backend)
    results.append(
        check(
            "sampled softmax (sample_negatives, linear_cross_entropy + grads)",
            with_grads(sampled_step, [h, w_full], target, positives),
            with_grads(compiled, [h, w_full], target, positives),
        )
    )

    u1, u2 = torch.zeros(P), torch.zeros(P)
    u1[[3, 100]], u2[[3, 4000]] = torch.tensor([1.0, 2.0]), torch.tensor([0.5, -1.0])
    compiled = torch.compile(sketch_sum, fullgraph=True, backend=args.backend)
    got = compiled(u1, u2, table, signs)
    results.append(check("count sketch sum and query", (sketch_sum(u1, u2, table, signs),), (got,)))
    print(f"sketch recovers the summed update at [3, 100, 4000]: {got[[3, 100, 4000]].tolist()}")
    print(
        f"backend {args.backend}: {sum(results)}/{len(results)} compiled graphs match eager "
        f"({time.perf_counter() - t0:.1f} s including compilation)"
    )
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
