"""FedAwS and FedALC over the regulariser weight lambda on Bibtex: P@1 against bytes communicated.

The FedALC paper's sweep (its Bibtex table: lambda = 1, 10, 100, 150, 200, 500). lambda scales the
server's spreadout step: ``spread_lr = lambda * lr`` (FedAwS's learning-rate multiplier). Every other
setting is ``bench/fl/fl_fedaws.py``'s (same flags). Writes build/bench-results/fl_fedaws_sweep.json and
.png; ``--out PATH.json`` writes there (and PATH.png) instead. ``--quick``: two weights, 2 rounds, tiny models.

    PYTHONPATH=src python -m bench.fl.fl_fedaws_sweep --weights 1 10 100 --rounds 100
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from bench.common import markdown_table, results_path, write_results
from bench.fl.fl_fedaws import QUICK, load, one_label_per_client, parse_args, parser, run_one


def plot(rows: list[dict], path: Path) -> Path | None:
    """P@1 against cumulative MB (up + down), one line per (algorithm, lambda); None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in rows:
        mb = [c[2] for c in r["curve"]]
        p1 = [c[1] for c in r["curve"]]
        ax.plot(mb, p1, marker="o", ms=3, ls="-" if r["algorithm"] == "FedALC" else "--", label=r["label"])
    ax.set_xlabel("MB communicated (up + down, cumulative)")
    ax.set_ylabel("test P@1")
    ax.set_title("Bibtex, one label per client: regulariser weight sweep")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main() -> None:
    ap = parser()
    ap.description = __doc__
    ap.add_argument("--weights", type=float, nargs="+", default=[1, 10, 100, 150, 200, 500])
    ap.set_defaults(algorithms=["FedAwS", "FedALC"], rounds=100)  # FedALC with the preset's pull 0.1
    args = parse_args(ap, {**QUICK, "algorithms": ["FedAwS", "FedALC"], "weights": [1, 100]})
    if any(w <= 0 for w in args.weights):
        ap.error("--weights must be positive")
    if "FedAvg" in args.algorithms or "FedALC-fixed" in args.algorithms:
        ap.error("the sweep is over FedAwS and FedALC (FedAvg and FedALC-fixed take no spreadout step)")
    torch.set_num_threads(args.threads)
    if args.eval_every is None:
        args.eval_every = max(1, args.rounds // 10)
    train, test = load(args)
    clients = one_label_per_client(train)
    rows = []
    for weight in args.weights:
        run_args = copy.copy(args)
        run_args.reg_weight = weight
        for seed in args.seeds:
            for name in args.algorithms:
                row = run_one(name, seed, run_args, clients, train, test)
                row.update(reg_weight=weight, label=f"{name} lambda={weight:g}")
                rows.append(row)
                print({k: v for k, v in row.items() if k != "curve"}, flush=True)
    path = results_path("fl_fedaws_sweep", out=args.out)
    run_args = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    extra = {"dataset": "bibtex (official split)", "clients": len(clients), "args": run_args}
    path = write_results("fl_fedaws_sweep", rows, extra, path=path)
    png = plot(rows, path.with_suffix(".png"))
    print(markdown_table(rows, ["algorithm", "reg_weight", "seed", "P@1", "P@3", "P@5", "MB_up", "MB_down"]))
    print(f"results in {path}" + (f", plot in {png}" if png else ""))


if __name__ == "__main__":
    main()
