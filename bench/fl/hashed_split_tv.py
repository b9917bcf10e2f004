"""How non-iid a FedMLH preset's split looks to each of its hashed sub-models.

FedMLH's sub-model r trains on bucket targets ``h_r(c)``, so what it sees of a client is that client's
label distribution pushed through the hash: classes owned by different clients share buckets, and the
clients look more alike than over the classes. This prints the split's mean pairwise label-distribution
TV (``fedkernels.data.split_statistics``) and how exclusively clients hold the labels (:func:`owner_share`)
over the p classes and over each table's B buckets, per seed, for the preset's own split (or another,
``--partition``) and hash family (no training).

    python -m bench.fl.hashed_split_tv                        # fedmlh-bibtex, seeds 0-2
    python -m bench.fl.hashed_split_tv --preset fedmlh-delicious
    python -m bench.fl.hashed_split_tv --partition dirichlet --beta 0.3   # the class-level numbers of another split
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from fedkernels.data.partition import Shard, split_statistics
from fedkernels.experiments.experiment import ExperimentConfig, prepare_data
from fedkernels.experiments.presets import load_preset, resolve_preset_dataset
from fedkernels.fl.registry import make_strategy


def hashed_split_tv(shards: list[Shard], table: torch.Tensor, num_buckets: int) -> list[float]:
    """Mean pairwise TV of the split over each table's buckets: ``table`` (integer ``[p, R]``) maps class c
    to its bucket in table r. Returns R values."""
    t = table.cpu().numpy()
    out = []
    for r in range(t.shape[1]):
        mapped = [Shard(s.rows, s.indptr, t[np.asarray(s.indices, dtype=np.int64), r], s.classes) for s in shards]
        out.append(split_statistics(mapped, num_buckets)["mean_pairwise_tv"])
    return out


def owner_share(shards: list[Shard], label_map: np.ndarray, num_labels: int) -> float:
    """How exclusively labels are held: over every label occurrence of the split, the share held by
    the client holding the most of that occurrence's label (``sum_c max_k n_kc / sum_c n_kc``, labels
    mapped through ``label_map`` [p] first). 1 / clients for an even spread, 1 when every label lives
    on one client."""
    counts = np.zeros((len(shards), num_labels))
    for k, s in enumerate(shards):
        np.add.at(counts[k], label_map[np.asarray(s.indices, dtype=np.int64)], 1)
    total = counts.sum(0)
    return float(counts.max(0).sum() / total.sum()) if total.sum() else 0.0


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="fedmlh-bibtex")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--data-dir", default="../shared/data")
    ap.add_argument("--partition", default=None, help="another split than the preset's (e.g. dirichlet, iid)")
    ap.add_argument("--beta", type=float, default=None, help="Dirichlet beta with --partition dirichlet")
    args = ap.parse_args(argv)
    print(
        "| seed | TV over classes | TV over each table's buckets | owner share, classes | owner share, buckets |\n"
        "|---|---|---|---|---|"
    )
    preset = load_preset(args.preset).config
    keep = {k: v for k, v in preset.items() if k in ExperimentConfig.__dataclass_fields__}
    keep["dataset"] = resolve_preset_dataset(preset["dataset"], args.data_dir)
    if args.partition:
        keep["partition"] = args.partition
    if args.beta is not None:
        keep["beta"] = args.beta
    for seed in range(args.seeds):
        data = prepare_data(ExperimentConfig(**{**keep, "seed": seed}))
        strategy = make_strategy("FedMLH", **preset["algorithm_options"]["FedMLH"])
        p, f = data.dataset.num_classes, data.dataset.train.x.shape[1]
        head = strategy._load(strategy.init_state(f, p, seed))  # the run's own hash family: table [p, R]
        shards = [Shard(np.arange(len(c)), c.indptr.numpy(), c.indices.numpy()) for c in data.clients]
        buckets = hashed_split_tv(shards, head.table, head.num_buckets)
        classes = split_statistics(shards, p)["mean_pairwise_tv"]
        t = head.table.cpu().numpy()
        own_classes = owner_share(shards, np.arange(p), p)
        own_buckets = [owner_share(shards, t[:, r], head.num_buckets) for r in range(t.shape[1])]
        print(
            f"| {seed} | {classes:.3f} | {', '.join(f'{v:.3f}' for v in buckets)} | {own_classes:.3f} | "
            f"{', '.join(f'{v:.3f}' for v in own_buckets)} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
