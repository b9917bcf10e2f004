"""Markdown tables of the federated experiments, printed from bench/results/fl/fl_*.json (the numbers
in README.md and docs/experiments.md come from here, not typed by hand).

    python -m bench.fl.fl_report [partial] [fedmlh] [sampled] [fedaws]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results" / "fl"


def fmt(v: object, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)


def table(rows: list[list[object]], head: list[str]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(fmt(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def load(name: str) -> dict | None:
    path = RESULTS / name
    return json.loads(path.read_text()) if path.is_file() else None


def partial(name: str = "fl_partial.json") -> str:
    d = load(name)
    if d is None:
        return f"(no {name})"
    rows = []
    for r in d["rows"]:
        avg = next(x for x in d["rows"] if x["beta"] == r["beta"] and x["algorithm"] == "FedAvg")
        best = max(p1 for _, p1 in r["P@1_curve"]) if r.get("P@1_curve") else None
        rows.append(
            [
                f"{r['beta']:g}",
                "FedAvg" if r["p"] is None else f"p = {r['p']}",
                r["P@1"],
                r["P@3"],
                r["P@5"],
                best,
                r["MB_up"],
                f"{r['MB_up'] / avg['MB_up']:.3g}",
                r["seconds"],
            ]
        )
    a = d["args"]
    rank = "RMS change" if a.get("normalize") else "norm of the change"
    head = (
        f"{d['dataset']}, tensors ranked by {rank}, hidden {a['hidden']}, {a['clients']} clients, "
        f"{a['per_round']} per round, "
        f"{a['rounds']} rounds, {a['epochs']} local epochs, {a['optimizer']} lr {a['lr']}, seed {a['seed']}\n\n"
    )
    return head + table(
        rows,
        ["beta", "run", "P@1", "P@3", "P@5", "best P@1 (every 5 rounds)", "MB up", "up / FedAvg", "s (shared machine)"],
    )


def fedmlh() -> str:
    d = load("fl_fedmlh.json")
    if d is None:
        return "(no fl_fedmlh.json)"
    if "columns" not in d:
        return "(fl_fedmlh.json has no 'columns': it predates them; rerun python -m bench.fl.fl_fedmlh)"
    cols = [c for c in d["columns"] if c not in ("dataset", "algorithm")]
    out = []
    for ds in dict.fromkeys(r["dataset"] for r in d["rows"]):
        rows = [[r.get("seed", 0), r["algorithm"], *(r.get(c) for c in cols)] for r in d["rows"] if r["dataset"] == ds]
        rounds = d["runs"][ds]["config"]["rounds"]
        out.append(f"{ds}, {rounds} rounds:\n\n" + table(rows, ["seed", "algorithm", *cols]))
    lines, by_ds = [], {}
    for key, run in d["runs"].items():
        r = run["ratios"]
        t = r["bytes_to_target_FedAvg_over_FedMLH"]
        lines.append(
            f"- {key}: model FedAvg/FedMLH {r['model_bytes_FedAvg_over_FedMLH']:.2f}x; bytes to P@1 >= "
            f"{run['target_P@1']:.4f}: FedAvg/FedMLH " + ("-" if t is None else f"{t:.2f}x")
        )
        if t is not None:
            by_ds.setdefault(key.split("/")[0], []).append(t)
    for ds, v in by_ds.items():
        if len(v) > 1:
            lines.append(
                f"- {ds}: bytes-to-target ratio over {len(v)} seeds {statistics.mean(v):.2f} +- "
                f"{statistics.stdev(v):.2f}x"
            )
    out.append("\n".join(lines))
    summ = [r for r in d.get("seed_summary", []) if r["seeds"] > 1]
    if summ:
        keys = [k for k in summ[0] if k not in ("dataset", "algorithm", "seeds")]
        out.append(
            "mean +- std over seeds:\n\n"
            + table(
                [[r["dataset"], r["algorithm"], r["seeds"], *(r.get(k) for k in keys)] for r in summ],
                ["dataset", "algorithm", "seeds", *keys],
            )
        )
    return "\n\n".join(out)


def sampled() -> str:
    d = load("fl_sampled.json")
    if d is None:
        return "(no fl_sampled.json)"
    pop = d.get("popularity", {})
    rows = [
        [r["algorithm"], r["m"], r["P@1"], r["P@3"], r["P@5"], r["MB_down"], r["MB_up"], r["seconds"]]
        for r in d["rows"]
    ]
    if pop:
        rows.append(["popularity baseline", "-", pop["P@1"], pop["P@3"], pop["P@5"], None, None, None])
    a = d.get("args", {})
    head = (
        f"{d['dataset']}, {a.get('rounds')} rounds, {a.get('epochs')} local epochs, {a.get('optimizer')} lr "
        f"{a.get('lr')}, hidden {a.get('hidden')}, d = {a.get('embed_dim')}\n\n"
    )
    return head + table(rows, ["algorithm", "m (negatives)", "P@1", "P@3", "P@5", "MB down", "MB up", "s"])


def fedaws() -> str:
    d = load("fl_fedaws.json")
    if d is None:
        return "(no fl_fedaws.json)"
    rows = [
        [r["algorithm"], r.get("seed", 0), r["P@1"], r["P@3"], r["P@5"], r["MB_up"], r["MB_down"], r["setup_MB_up"]]
        for r in d["rows"]
    ]
    out = table(rows, ["algorithm", "seed", "P@1", "P@3", "P@5", "MB up", "MB down", "setup MB up"])
    if d.get("summary"):
        srows = [
            [s["algorithm"], s.get("rounds", ""), s["seeds"]]
            + [f"{s[k]:.3f} +- {s[k + '_std']:.3f}" for k in ("P@1", "P@3", "P@5")]
            for s in d["summary"]
        ]
        out += "\n\nmean +- std over seeds\n\n" + table(srows, ["algorithm", "rounds", "seeds", "P@1", "P@3", "P@5"])
    return out


def main() -> None:
    parts = {
        "partial": partial,
        "partial_rms": lambda: partial("fl_partial_rms.json"),
        "fedmlh": fedmlh,
        "sampled": sampled,
        "fedaws": fedaws,
    }
    for name in sys.argv[1:] or list(parts):
        print(f"## {name}\n\n{parts[name]()}\n")


if __name__ == "__main__":
    main()
