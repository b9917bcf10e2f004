"""How non-iid a FedMLH preset's split looks to each of its hashed sub-models.

FedMLH's sub-model r trains on bucket targets ``h_r(c)``, so what it sees of a client is that client's
label distribution pushed through the hash: classes owned by different clients share buckets, and the
clients look more alike than over the classes. This prints the split's mean pairwise label-distribution
TV (``fedkernels.data.split_statistics``) over the p classes and over each table's B buckets, per seed,
for the preset's own split and hash family (no training).

    python -m bench.fl.hashed_split_tv                        # fedmlh-bibtex, seeds 0-2
    python -m bench.fl.hashed_split_tv --preset fedmlh-delicious
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from fedkernels.data.partition import Shard, split_statistics
from fedkernels.experiments.experiment import ExperimentConfig, prepare_data
from fedkernels.experiments.presets import load_preset, resolve_preset_dataset
from fedkernels.experiments.strategies import make_strategy


def hashed_split_tv(shards: list[Shard], table: torch.Tensor, num_buckets: int) -> list[float]:
    """Mean pairwise TV of the split over each table's buckets: ``table`` int64 ``[p, R]`` maps class c
    to its bucket in table r. Returns R values."""
    t = table.cpu().numpy()
    out = []
    for r in range(t.shape[1]):
        mapped = [Shard(s.rows, s.indptr, t[np.asarray(s.indices, dtype=np.int64), r], s.classes) for s in shards]
        out.append(split_statistics(mapped, num_buckets)["mean_pairwise_tv"])
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="fedmlh-bibtex")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--data-dir", default="../shared/data")
    args = ap.parse_args(argv)
    print("| seed | TV over classes | TV over each table's buckets |\n|---|---|---|")
    for seed in range(args.seeds):
        preset = load_preset(args.preset).config
        keep = {k: v for k, v in preset.items() if k in ExperimentConfig.__dataclass_fields__}
        keep["dataset"] = resolve_preset_dataset(preset["dataset"], args.data_dir)
        cfg = ExperimentConfig(**{**keep, "seed": seed})
        data = prepare_data(cfg)
        strategy = make_strategy("FedMLH", **preset["algorithm_options"]["FedMLH"])
        p, f = data.dataset.num_classes, data.dataset.train.x.shape[1]
        head = strategy._load(strategy.init_state(f, p, seed))
        table = head.table if head.table.shape[0] == p else head.table.T
        shards = [Shard(np.arange(len(c)), c.indptr.numpy(), c.indices.numpy()) for c in data.clients]
        buckets = hashed_split_tv(shards, table, head.num_buckets)
        classes = split_statistics(shards, p)["mean_pairwise_tv"]
        print(f"| {seed} | {classes:.3f} | {', '.join(f'{v:.3f}' for v in buckets)} |", flush=True)


if __name__ == "__main__":
    main()
