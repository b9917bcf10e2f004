"""Privacy costs: SecAgg+ bytes and seconds per round at 10/100/1000 clients; P@1 against epsilon.

  python -m bench.fl.privacy --quick [--out FILE.json]                    # make bench: cost at 10 clients, 1000 values
  python -m bench.fl.privacy cost [--length 10000] [--clients 10 100 1000] [--degree K ...] [--out FILE.json]
  python -m bench.fl.privacy rows --dataset ../shared/data/bibtex        # FedSS/FedAwS row-subset bytes
  python -m bench.fl.privacy epsilon --datasets ../shared/data/bibtex ../shared/data/delicious --out F.json
  python -m bench.fl.privacy plot F.json bench/results/fl/privacy_epsilon.png

``cost`` runs one SecAgg+ session of n simulated clients (real X25519, ChaCha20-Poly1305, Shamir,
ChaCha20 masks) summing vectors of ``length`` float32-sized values, and reports per client and for
the server: bytes each way and seconds per stage, beside the plain sum (each client sends its 4-byte
values, the server adds them). Client seconds are the mean over clients (they run in parallel on
devices); server seconds are the server's own work. ``rows`` measures what the private request union
costs FedSS on a real dataset. ``epsilon`` runs client-level DP (central noise, same epsilon as
distributed) for FedAvg and FedMLH over a grid of noise multipliers and writes P@1 against epsilon.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import torch

from fedkernels.fl import payload as pl
from fedkernels.fl.privacy.ring import RingCodec
from fedkernels.fl.privacy.secagg import SecAggClient, SecAggParams, SecAggServer
from fedkernels.fl.privacy.secagg_params import graph_params
from fedkernels.fl.privacy.session import session_header

STAGES = ("advertise", "share", "masked", "seeds", "unmask", "repair")


def session_cost(
    n: int,
    length: int,
    bits: int = 32,
    drop: int = 0,
    degree: int | None = None,
    corrupt: float = 0.1,
    dropout: float = 0.1,
) -> dict:
    """One session; ``drop`` clients leave after sharing keys (their masks are rebuilt from their
    shares); the graph is the threat model's for n (``corrupt``, ``dropout``), or ``degree``
    neighbours with the smallest safe threshold."""
    g = graph_params(n, corrupt, dropout, degree)
    params = SecAggParams(tuple(range(n)), length, bits, g.k, g.threshold, 1, b"bench")
    codec = RingCodec(bits, n, 4.0)
    x = codec.encode(torch.randn(length) * 0.1)
    srv = SecAggServer(params)
    clients = {c: SecAggClient(c, params) for c in range(n)}
    up = dict.fromkeys(STAGES, 0)
    down = dict(up)
    client_s = dict.fromkeys(STAGES, 0.0)
    server_s = dict.fromkeys(STAGES, 0.0)
    dropped = set(range(drop))

    client_cpu = dict.fromkeys(STAGES, 0.0)
    server_cpu = dict.fromkeys(STAGES, 0.0)

    def timed(fn, wall: dict, cpu: dict, name: str):
        # CPU seconds beside wall seconds: on a shared machine the wall clock measures the load too.
        t0, c0 = time.perf_counter(), time.thread_time()
        out = fn()
        wall[name] += time.perf_counter() - t0
        cpu[name] += time.thread_time() - c0
        return out

    def stage(name, messages, answer, take):
        msgs = timed(lambda: {c: pl.encode(m) for c, m in messages().items()}, server_s, server_cpu, name)
        for c, raw in msgs.items():
            if name in ("masked", "unmask") and c in dropped:
                continue
            down[name] += len(raw)
            reply = timed(lambda c=c, raw=raw: pl.encode(answer(c, pl.decode(raw))), client_s, client_cpu, name)
            up[name] += len(reply)
            timed(lambda c=c, reply=reply: take(c, pl.decode(reply, srv.spec(name, c))), server_s, server_cpu, name)

    header = session_header(params, 4.0)  # the session's parameters, as a private round sends them
    stage("advertise", lambda: dict.fromkeys(range(n), header), lambda c, m: clients[c].advertise(), srv.take_advertise)
    stage("share", srv.share_messages, lambda c, m: clients[c].share_keys(m), srv.take_shares)
    stage("masked", srv.masked_messages, lambda c, m: clients[c].masked_input(m, x), srv.take_masked)
    stage("seeds", srv.seeds_messages, lambda c, m: clients[c].seeds(m), srv.take_seeds)
    stage("unmask", srv.unmask_messages, lambda c, m: clients[c].unmask(m), srv.take_unmask)
    stage("repair", srv.repair_messages, lambda c, m: clients[c].seeds(m), srv.take_seeds)
    server_s["result"] = server_cpu["result"] = 0.0
    timed(srv.result, server_s, server_cpu, "result")
    # the plain sum: every client sends its float32 vector, the server adds them
    plain_msg = pl.encode({"x": torch.randn(length)})
    t0 = time.perf_counter()
    acc = torch.zeros(length, dtype=torch.float64)
    for _ in range(n):
        acc += pl.decode(plain_msg)["x"]
    plain_server = time.perf_counter() - t0
    live = n - drop
    return {
        "clients": n,
        "length": length,
        "degree": g.k,
        "threshold": g.threshold,
        "max_dropouts": g.max_dropouts,
        "corrupt_fraction": corrupt,
        "dropout_fraction": dropout,
        "dropped": drop,
        "client_bytes_up": sum(up.values()) / n,
        "client_bytes_down": sum(down.values()) / n,
        "plain_client_bytes_up": len(plain_msg),
        "client_seconds": {s: v / (live if s in ("masked", "unmask") else n) for s, v in client_s.items()},
        "server_seconds": server_s,
        "server_seconds_total": sum(server_s.values()),
        "client_cpu_seconds": {s: v / (live if s in ("masked", "unmask") else n) for s, v in client_cpu.items()},
        "server_cpu_seconds": server_cpu,
        "server_cpu_seconds_total": sum(server_cpu.values()),
        "plain_server_seconds": plain_server,
    }


def cmd_cost(args) -> None:
    torch.set_num_threads(1)  # thread_time then counts all of a stage's CPU work
    rows = []
    for n, degree in [(n, d) for n in args.clients for d in (args.degree or [None])]:
        r = session_cost(
            n, args.length, drop=args.drop if n > 10 else 0, degree=degree, corrupt=args.corrupt, dropout=args.dropout
        )
        r["load_average"] = os.getloadavg()
        rows.append(r)
        cs = sum(r["client_seconds"].values())
        rebuild = r["server_seconds"]["repair"] + r["server_seconds"]["result"]  # secrets rebuilt, masks removed
        print(
            f"n={n:5d} k={r['degree']:3d} threshold={r['threshold']:3d} | client up "
            f"{r['client_bytes_up'] / 1e3:8.1f} kB (plain {r['plain_client_bytes_up'] / 1e3:.1f}) down "
            f"{r['client_bytes_down'] / 1e3:8.1f} kB | client {cs:.3f} s (masking {r['client_seconds']['masked']:.3f}) "
            f"| server {r['server_seconds_total']:.2f} s (unmasking {rebuild:.2f}; plain sum "
            f"{r['plain_server_seconds']:.4f}) | server CPU {r['server_cpu_seconds_total']:.2f} s "
            f"| load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        out = {"load_average": os.getloadavg(), "length": args.length, "rows": rows}
        if args.out:
            Path(args.out).write_text(json.dumps(out, indent=2))


def _config(args, dataset: str, algorithm: str, seed: int, privacy: dict):
    from fedkernels.experiments.experiment import ExperimentConfig

    hidden = list(args.hidden)
    cfg = ExperimentConfig(
        algorithms=[algorithm],
        algorithm_options={algorithm: {"hidden": hidden}},
        dataset=dataset,
        clients=args.clients,
        clients_per_round=args.per_round,
        rounds=args.rounds,
        local_epochs=args.local_epochs,
        lr=args.lr,
        seed=seed,
        eval_every=args.rounds,
        threads=1,
        partition="iid",
        **privacy,
    )
    cfg.validate()
    return cfg


def cmd_epsilon(args) -> None:
    """Client-level DP over a grid of noise multipliers for each mechanism (``poisson``: DP-FedAvg with
    a secret Poisson sample, central noise; ``tree``: DP-FTRL, public participation): final P@1 and
    epsilon for observers of the model and against the server, per (dataset, algorithm, mechanism,
    noise, seed), written as rows. Runs are seeded simulations (``dp_seeded``), so rows reproduce; a
    deployment draws noise and sample from OS randomness, with the same epsilons."""
    from fedkernels.experiments.experiment import prepare_data, run_algorithm

    torch.set_num_threads(1)
    done = json.loads(Path(args.out).read_text())["rows"] if args.out and Path(args.out).exists() else []
    rows = list(done)
    seen = {(r["dataset"], r["algorithm"], r.get("mechanism", "poisson"), r["noise"], r["seed"]) for r in done}
    for dataset in args.datasets:
        name = Path(dataset).name
        for seed in range(args.seeds):
            prepared = None  # the partition depends on the seed only: shared by every run of it
            for algorithm in args.algorithms:
                for mechanism, noise in [(m, x) for m in args.mechanisms for x in args.noise if x >= 0] + [
                    ("none", x) for x in args.noise if x < 0
                ]:
                    if (name, algorithm, mechanism, noise, seed) in seen:
                        continue
                    priv = {}
                    if noise >= 0:
                        priv = {"dp_clip": args.clip, "dp_noise": noise, "dp_mechanism": mechanism, "dp_seeded": True}
                    cfg = _config(args, dataset, algorithm, seed, priv)
                    prepared = prepared or prepare_data(cfg)
                    t0 = time.perf_counter()
                    res = run_algorithm(algorithm, cfg, prepared)
                    took = time.perf_counter() - t0
                    eps = res["privacy"].get("epsilon", math.inf) if noise >= 0 else math.inf
                    eps_server = res["privacy"].get("epsilon_server", math.inf) if noise >= 0 else math.inf
                    p1 = res["final"]["P@1"]
                    rows.append(
                        {
                            "dataset": name,
                            "algorithm": algorithm,
                            "mechanism": mechanism,
                            "noise": noise,
                            "seed": seed,
                            "epsilon": eps,
                            "epsilon_server": eps_server,
                            "P@1": p1,
                            "seconds": took,
                            "load_average": os.getloadavg(),
                        }
                    )
                    print(
                        f"{name} {algorithm} {mechanism} noise={noise} seed={seed}: eps={eps:.3g} "
                        f"(server {eps_server:.3g}) P@1={p1:.4f} ({took:.0f} s)"
                    )
                    sys.stdout.flush()
                    if args.out:
                        Path(args.out).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1, default=str))


def cmd_plot(args) -> None:
    """P@1 against epsilon from an ``epsilon`` run's JSON: one panel per dataset, one line per
    algorithm (mean over seeds, bars from min to max), its no-DP P@1 dashed."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    got = json.loads(Path(args.json).read_text())
    rows, setting = got["rows"], got["args"]
    for r in rows:  # rows written before ``--datasets`` name no dataset: their run had one, ``--dataset``
        r.setdefault("dataset", Path(setting.get("dataset", "?")).name)
    datasets = sorted({r["dataset"] for r in rows})
    fig, axes = plt.subplots(1, len(datasets), figsize=(5.2 * len(datasets), 4), squeeze=False)
    for ax, dataset in zip(axes[0], datasets, strict=True):
        for i, algorithm in enumerate(sorted({r["algorithm"] for r in rows if r["dataset"] == dataset})):
            mine = [r for r in rows if r["dataset"] == dataset and r["algorithm"] == algorithm]
            color = f"C{i}"
            for mechanism, style in (("poisson", "o-"), ("tree", "s:")):
                private = [r for r in mine if r["noise"] >= 0 and r.get("mechanism", "poisson") == mechanism]
                eps, mean, lo, hi = [], [], [], []
                for noise in sorted({r["noise"] for r in private}, reverse=True):
                    at = [r for r in private if r["noise"] == noise]
                    p1 = [r["P@1"] for r in at]
                    eps.append(sum(r["epsilon"] for r in at) / len(at))
                    mean.append(sum(p1) / len(p1))
                    lo.append(mean[-1] - min(p1))
                    hi.append(max(p1) - mean[-1])
                if eps:
                    label = f"{algorithm}, {'DP-FedAvg' if mechanism == 'poisson' else 'DP-FTRL'}"
                    ax.errorbar(eps, mean, yerr=[lo, hi], fmt=style, capsize=3, color=color, label=label)
            plain = [r["P@1"] for r in mine if r["noise"] < 0]
            if plain:
                ax.axhline(sum(plain) / len(plain), color=color, linestyle="--", label=f"{algorithm}, no DP")
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # minor labels overlap on a short range
        ax.set_xlabel(f"epsilon (delta = 1e-5, {setting['rounds']} rounds)")
        ax.set_ylabel("test P@1")
        q = setting["per_round"] / setting["clients"]
        ax.set_title(f"{dataset}: {setting['clients']} clients, q = {q:g}, clip {setting['clip']}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)
    print(f"wrote {args.png}")


def cmd_rows(args) -> None:
    """FedSS on a real dataset, one round of plain FedSS against the SecAgg+ round with the private
    request union: bytes per client each way and the row set's size."""
    from fedkernels.experiments.experiment import ExperimentConfig, prepare_data, run_algorithm

    torch.set_num_threads(1)
    for secagg in (False, True):
        cfg = ExperimentConfig(
            algorithms=["FedSS"],
            algorithm_options={"FedSS": {"hidden": [], "num_negatives": 64}},
            dataset=args.dataset,
            clients=args.clients,
            clients_per_round=args.per_round,
            rounds=1,
            local_epochs=1,
            threads=1,
            secagg=secagg,
        )
        cfg.validate()
        res = run_algorithm("FedSS", cfg, prepare_data(cfg))
        h = res["history"][0]
        live = len(h["clients"]) - len(h["failed"])
        priv = h.get("privacy", {})
        print(
            f"FedSS secagg={secagg}: per client up {h['bytes_up'] / live / 1e3:.1f} kB, "
            f"down {h['bytes_down'] / live / 1e3:.1f} kB, round rows {priv.get('round_rows', '-')}, "
            f"of which SecAgg+ messages up {priv.get('secagg_bytes_up', 0) / live / 1e3:.1f} kB",
            flush=True,
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="one small cost session (10 clients, 1000 values)")
    p.add_argument("--out", dest="quick_out", help="with --quick: the JSON to write")
    sub = p.add_subparsers(dest="cmd")
    c = sub.add_parser("cost")
    c.add_argument("--clients", type=int, nargs="+", default=[10, 100, 1000])
    c.add_argument("--length", type=int, default=10_000)
    c.add_argument("--drop", type=int, default=2, help="clients that drop before their masked input (n > 10)")
    c.add_argument("--degree", type=int, nargs="+", help="neighbours per client, each (default: the threat model's)")
    c.add_argument("--corrupt", type=float, default=0.1, help="the threat model's colluding fraction")
    c.add_argument("--dropout", type=float, default=0.1, help="the threat model's dropout fraction")
    c.add_argument("--out")
    e = sub.add_parser("epsilon")
    e.add_argument("--datasets", nargs="+", required=True)
    e.add_argument("--algorithms", nargs="+", default=["FedAvg", "FedMLH"])
    e.add_argument("--noise", type=float, nargs="+", default=[-1, 0.5, 0.8, 1.2, 2.0], help="-1: no DP")
    e.add_argument("--clip", type=float, default=0.5)
    e.add_argument(
        "--mechanisms", nargs="+", default=["poisson", "tree"], help="poisson (DP-FedAvg) and/or tree (DP-FTRL)"
    )
    e.add_argument("--seeds", type=int, default=3)
    e.add_argument("--rounds", type=int, default=20)
    e.add_argument("--clients", type=int, default=2000)
    e.add_argument("--per-round", type=int, default=200)
    e.add_argument("--hidden", type=int, nargs="*", default=[], help="hidden layer sizes (default: linear)")
    e.add_argument("--local-epochs", type=int, default=5)
    e.add_argument("--lr", type=float, default=0.05)
    e.add_argument("--out", help="JSON of rows, appended to (a run resumes where it stopped)")
    pl_ = sub.add_parser("plot")
    pl_.add_argument("json")
    pl_.add_argument("png")
    r = sub.add_parser("rows")
    r.add_argument("--dataset", required=True)
    r.add_argument("--clients", type=int, default=10)
    r.add_argument("--per-round", type=int, default=4)
    args = p.parse_args()
    if args.cmd is None:
        if not args.quick:
            p.error("choose a command (cost, epsilon, rows) or --quick")
        args = argparse.Namespace(
            clients=[10], length=1000, drop=2, degree=None, corrupt=0.1, dropout=0.1, out=args.quick_out
        )
        cmd_cost(args)
        return
    {"cost": cmd_cost, "epsilon": cmd_epsilon, "rows": cmd_rows, "plot": cmd_plot}[args.cmd](args)


if __name__ == "__main__":
    main()
