"""The argument parser of ``fedkernels``, built without importing torch or fedkernels."""

from __future__ import annotations

import argparse

from .defaults import DEFAULT_OPTIONS, RUN_DEFAULTS

DESCRIPTION = """Federated learning with huge label spaces, on compiled CPU/CUDA kernels.

examples:
  fedkernels run --demo                    # FedAvg vs FedMLH vs FedSS on synthetic data
  fedkernels run --list-presets            # named paper reproductions: rounds, seeds, measured time
  fedkernels run --preset fedmlh-bibtex    # 3 seeds, mean ± std beside the paper's P@1
  fedkernels run --config exp.toml --rounds 30
  fedkernels data list                     # public datasets; `fedkernels data get NAME` downloads one
  fedkernels data get bibtex
  fedkernels run --dataset bibtex --algorithms FedAvg FedMLH --option FedMLH.num_buckets=40
  fedkernels info                          # build facts and registered algorithms (--runtime: GPU, threads)
  fedkernels bench                         # the benchmarks of a checkout; `fedkernels bench NAME` runs one

`fedkernels COMMAND --help` describes a command's options.
"""

# Flags map one to one onto ExperimentConfig fields (dashes for underscores).
RUN_FLAGS: dict[str, tuple[type, str]] = {
    "dataset": (
        str,
        "'synthetic', a file/folder (XC, libsvm, .npz), a shipped name (bibtex; see --data-dir) "
        "or one from `fedkernels data list`",
    ),
    "partition": (str, "fedmlh | fedmlh_single | dirichlet | dirichlet_sample | iid | one_label | primary_label"),
    "rounds": (int, "federated rounds"),
    "clients": (int, "number of clients"),
    "clients_per_round": (int, "clients sampled per round"),
    "local_epochs": (int, "local epochs per round"),
    "batch_size": (int, "local minibatch size"),
    "lr": (float, "local learning rate"),
    "optimizer": (str, "sgd | adam"),
    "seed": (int, "the run's one seed"),
    "feature_dim": (int, "hash features to this many buckets (XC data)"),
    "num_frequent": (int, "frequent classes (FedMLH split, freq/infreq metrics); default 10%% of classes"),
    "beta": (float, "Dirichlet concentration (partition=dirichlet or dirichlet_sample)"),
    "eval_every": (int, "evaluate every this many rounds"),
    "max_test": (int, "evaluate on at most this many test samples"),
    "output": (str, "output folder (JSON, CSV, PNG)"),
    "threads": (
        int,
        "torch threads (default 1: not slowed by other work on the machine; more can pay for large models when idle)",
    ),
    "device": (str, "where training, aggregation and evaluation run: cpu | cuda | cuda:N"),
    "autocast": (str, "mixed precision of local training: off | bf16 (state and aggregation stay float32)"),
    # privacy (docs/api/privacy.md); --secagg is a switch, below
    "secagg_corrupt_fraction": (
        float,
        "SecAgg+ threat model: the share of a round's clients that may collude with the server (default 0.1)",
    ),
    "secagg_dropout_fraction": (
        float,
        "SecAgg+ threat model: the share of a round's clients that may drop out, sum still recovered (default 0.1)",
    ),
    "secagg_dropouts": (
        int,
        "SecAgg+: an explicit k - threshold (default: the smallest safe threshold for the threat model), checked",
    ),
    "secagg_bits": (int, "SecAgg+: the ring is Z_2^bits (32: 4 bytes a value)"),
    "secagg_bound": (float, "SecAgg+ without DP: each contributed value is clamped to [-bound, bound]"),
    "secagg_degree": (
        int,
        "SecAgg+: an explicit neighbour count k (default: the smallest safe one for the threat model), checked",
    ),
    "secagg_weight_cap": (
        float,
        "SecAgg+ without DP: a client weighs itself by min(examples, cap) / cap, masked (default 4096)",
    ),
    "l1diff_segments": (
        int,
        "L1Diff under --secagg/--dp-*: every K-th round dense, the K-1 between one value per public segment "
        "(0: every round dense)",
    ),
    "dp_clip": (float, "client-level DP: L2 clip of each client's update (needs --dp-noise or --target-epsilon)"),
    "dp_noise": (float, "client-level DP: noise multiplier sigma (noise std = sigma * clip)"),
    "target_epsilon": (float, "client-level DP: pick sigma so the run ends at this epsilon"),
    "dp_delta": (float, "DP delta of the reported epsilon"),
    "dp_mechanism": (
        str,
        "client-level DP: poisson (DP-FedAvg: a secret Poisson sample each round) | tree (DP-FTRL: public "
        "participation, each client once an epoch, no sampling assumed)",
    ),
    "dp_sample_clip": (float, "sample-level DP-SGD in local training: per-example L2 clip"),
    "dp_sample_noise": (float, "sample-level DP-SGD: noise multiplier"),
}


def _default_help(help_: str, name: str) -> str:
    default = RUN_DEFAULTS.get(name)
    return f"{help_} (default: {default})" if default is not None else help_


def parser() -> argparse.ArgumentParser:
    """The argument parser of ``fedkernels``; ``args.command`` names the subcommand to run."""
    p = argparse.ArgumentParser(
        prog="fedkernels", description=DESCRIPTION, formatter_class=argparse.RawTextHelpFormatter
    )
    sub = p.add_subparsers(dest="command", required=True)
    i = sub.add_parser(
        "info",
        help="build facts and registered algorithms",
        description="Build facts (version, torch, CUDA kernels, CPU level, compiler) and registered algorithms, "
        "read without loading torch.",
    )
    i.add_argument(
        "--runtime",
        action="store_true",
        help="also load torch and the compiled module: the torch in use, whether a GPU is usable now, the "
        "thread count, and the build facts as the module itself reports them (seconds)",
    )
    b = sub.add_parser("bench", help="run bench/<name>.py of a checkout (no name: list them)")
    b.add_argument("name", nargs="?", default=None)
    b.add_argument("bench_args", nargs=argparse.REMAINDER)
    add_run_parser(sub)
    add_data_parser(sub)
    return p


def add_run_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``run`` subcommand to ``fedkernels``'s subparsers."""
    defaults = "; ".join(f"{a}: {o}" for a, o in DEFAULT_OPTIONS.items())
    r = sub.add_parser(
        "run",
        help="run algorithms on a dataset and partition",
        description="Run algorithms on a dataset. Precedence: defaults < --demo < --preset < --config < flags. "
        f"Per-algorithm default options (under --option and config files): {defaults}.",
    )
    r.add_argument("--demo", action="store_true", help="FedAvg vs FedMLH vs FedSS on the synthetic default")
    r.add_argument("--preset", help="a named paper reproduction (see --list-presets), or a preset .toml file")
    r.add_argument("--list-presets", action="store_true", help="list the presets, one line each, and exit")
    r.add_argument(
        "--seeds",
        type=int,
        default=None,
        help="run seeds seed..seed+N-1 and report mean ± std (default: 3 with --preset, else 1)",
    )
    r.add_argument(
        "--data-dir",
        default=None,
        help="a folder holding datasets by name, searched first (then the data folder of `fedkernels data list`, "
        "and ./data)",
    )
    r.add_argument("--config", help="a JSON or TOML file of run settings (flags override it)")
    r.add_argument(
        "--algorithms",
        nargs="+",
        help="registered algorithm names, any case (see `fedkernels info`) "
        f"(default: {' '.join(RUN_DEFAULTS['algorithms'])})",
    )
    r.add_argument(
        "--option", action="append", metavar="ALG.key=value", help="a constructor option of a selected algorithm"
    )
    r.add_argument("--ks", nargs="+", type=int, help="the k of P@k (default: 1 3 5)")
    r.add_argument(
        "--metrics",
        nargs="+",
        help="metric families the results table shows at every k: P nDCG PSP PSnDCG R "
        "(default: all; every one is computed and saved in results.json)",
    )
    r.add_argument(
        "--propensity",
        nargs=2,
        type=float,
        metavar=("A", "B"),
        help="Jain et al.'s propensity A and B for PSP@k/PSnDCG@k (default: the dataset's, "
        "from fedkernels.metrics.PROPENSITY; 0.55 1.5 for others)",
    )
    r.add_argument("--no-progress", action="store_true", help="no progress bars")
    r.add_argument(
        "--sparse",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="keep a file dataset's features sparse (torch.sparse_csr) from file to model; "
        "memory grows with the nonzeros, not N x F (default: dense; the synthetic default is always dense)",
    )
    r.add_argument(
        "--batch-clients",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="train a round's clients in one batched pass where the algorithm allows it (FedAvg, FedAwS, "
        "FedALC, partial exchange): faster on the CPU, equal to the one-by-one loop up to float rounding "
        "(default: one by one)",
    )
    r.add_argument(
        "--secagg",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="sum the clients' updates with SecAgg+ secure aggregation: the server sees only sums "
        "(the privacy guide of the documentation)",
    )
    r.add_argument(
        "--dp-seeded",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="draw DP noise, the DP sample and DP-SGD's batches from the run seed: a reproducible "
        "simulation, not private (anyone who knows the seed can subtract the noise); default: OS randomness",
    )
    r.add_argument(
        "--checkpoint",
        default=None,
        help="folder of per-algorithm checkpoints, written after every round (resume with --resume); "
        "default <output>/checkpoints, removed when the run ends",
    )
    r.add_argument(
        "--no-checkpoint",
        action="store_true",
        help="write no checkpoints (an interrupted run cannot be resumed)",
    )
    r.add_argument(
        "--resume",
        action="store_true",
        help="continue the run checkpointed in --checkpoint (default folder: <output>/checkpoints)",
    )
    for name, (typ, help_) in RUN_FLAGS.items():
        r.add_argument(
            "--" + name.replace("_", "-"), dest=name, type=typ, default=None, help=_default_help(help_, name)
        )


def add_data_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``data`` subcommand to ``fedkernels``'s subparsers."""
    d = sub.add_parser("data", help="list, describe, download and verify public datasets")
    d.add_argument("action", choices=("list", "info", "get", "verify"))
    d.add_argument("name", nargs="?", help="a dataset name from `fedkernels data list` (any case)")
    d.add_argument("--url", help="get: download from this URL instead (a mirror, or file:///... for a manual download)")
    d.add_argument(
        "--force", action="store_true", help="get: download again (the old copy stays until the new one verified)"
    )
    d.add_argument("--no-progress", action="store_true", help="get: no progress bar")
    d.add_argument(
        "--data-dir", default=None, help="the data folder (default: $FEDKERNELS_DATA_DIR or ~/.cache/fedkernels/data)"
    )
