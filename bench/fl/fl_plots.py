"""The papers' sweeps as plots of accuracy against communication, drawn from the committed result JSONs.

One PNG per sweep, x = MB communicated (up + down, the whole run), y = test P@1 at the end of the run
(the regulariser sweep: see below):

- ``fl_sampled_sweep.png``: FedSS sample size m (fl_sampled.json; FedSS and NegOnly over m, the full
  softmax and PosOnly as single points);
- ``fl_partial_sweep.png``: partial exchange fraction p, one line per Dirichlet beta (fl_partial.json;
  FedAvg of each beta as a star);
- ``fl_l1diff_sweep.png``: l1-difference gamma (fl_l1diff.json, rows with MB_up / MB_down);
- ``fl_fedaws_sweep_tradeoff.png``: FedAwS / FedALC regulariser weight (fl_fedaws_sweep.json). Every
  weight sends the same bytes, so the left panel puts the weight on x (P@1: the mean of the second
  half's evaluations, and the final one), the right one per weight the P@1 curve over cumulative MB
  (the JSON's ``curve`` holds exact bytes per evaluation).

Each point is one run's numbers, no interpolation. Reads ``--results DIR`` (default: the folder of
the committed tables); writes the PNGs beside ``--out`` (default build/bench-results/fl_plots.json, an
index of what was drawn). A sweep whose JSON is missing, or lacks the fields, is skipped with a note.
``--quick``: the same plots (they cost no training), for the smoke run of tools/dev/bench_all.py.

    PYTHONPATH=src python -m bench.fl.fl_plots --out bench/results/fl/fl_plots.json   # the committed PNGs
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bench.common import results_path

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "bench" / "results" / "fl"  # read only: the committed tables


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _mb(row: dict[str, Any]) -> float:
    return float(row["MB_up"]) + float(row["MB_down"])


def _finish(ax: Any, title: str, path: Path) -> Path:
    ax.set_xlabel("MB communicated, up + down (whole run)")
    ax.set_ylabel("test P@1 (end of run)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.figure.tight_layout()
    ax.figure.savefig(path, dpi=110)
    _plt().close(ax.figure)
    return path


def _lines(ax: Any, rows: list[dict[str, Any]], key: str, label: str, fmt: str) -> None:
    """One line through ``rows`` sorted by ``key``, each point annotated with its ``key`` value."""
    rows = sorted(rows, key=lambda r: r[key])
    xs, ys = [_mb(r) for r in rows], [float(r["P@1"]) for r in rows]
    ax.plot(xs, ys, fmt, ms=4, label=label)
    for r, x, y in zip(rows, xs, ys, strict=True):
        ax.annotate(f"{r[key]:g}", (x, y), textcoords="offset points", xytext=(3, 3), fontsize=6)


def plot_sampled(data: dict[str, Any], path: Path) -> Path:
    """FedSS and NegOnly over the sample size m; the full softmax and PosOnly as single points."""
    ax = _plt().subplots(figsize=(6.5, 4.2))[1]
    rows = data["rows"]
    _lines(ax, [r for r in rows if r["algorithm"] == "FedSS"], "m", "FedSS (label = m)", "o-")
    _lines(ax, [r for r in rows if r["algorithm"] == "FedSS-NegOnly"], "m", "NegOnly (label = m)", "s--")
    for name, marker in (("FedSS-FullSoftmax", "*"), ("FedSS-PosOnly", "^")):
        for r in (r for r in rows if r["algorithm"] == name):
            ax.plot([_mb(r)], [float(r["P@1"])], marker, ms=9, ls="", label=name.removeprefix("FedSS-"))
    a = data.get("args", {})
    title = f"FedSS sample size, {data.get('dataset', '?')}, {a.get('rounds', '?')} rounds, seed {a.get('seed', 0)}"
    return _finish(ax, title, path)


def plot_partial(data: dict[str, Any], path: Path) -> Path:
    """Partial exchange over the uploaded fraction p, one line per Dirichlet beta, FedAvg as a star."""
    ax = _plt().subplots(figsize=(6.5, 4.2))[1]
    rows = data["rows"]
    for beta in sorted({r["beta"] for r in rows}, reverse=True):
        group = [r for r in rows if r["beta"] == beta]
        line = [r for r in group if r["algorithm"] == "PartialExchange"]
        _lines(ax, line, "p", f"partial, beta {beta:g} (label = p)", "o-")
        for r in (r for r in group if r["algorithm"] == "FedAvg"):
            ax.plot([_mb(r)], [float(r["P@1"])], "*", ms=9, ls="", label=f"FedAvg, beta {beta:g}")
    a = data.get("args", {})
    title = f"Partial exchange, {data.get('dataset', '?')}, {a.get('rounds', '?')} rounds, seed {a.get('seed', 0)}"
    return _finish(ax, title, path)


def plot_l1diff(data: dict[str, Any], path: Path) -> Path:
    """The l1-difference update over gamma (relative to the mean |gradient| at initialisation)."""
    ax = _plt().subplots(figsize=(6.5, 4.2))[1]
    rows = [dict(r, g=r["gamma / mean|g0|"]) for r in data["rows"]]
    _lines(ax, [r for r in rows if r["strategy"] == "L1Diff"], "g", "L1Diff (label = gamma / mean|g0|)", "o-")
    for name, marker in (("L1Diff f16", "^"), ("L1DiffNetwork", "s")):
        for r in (r for r in rows if r["strategy"] == name):
            ax.plot([_mb(r)], [float(r["P@1"])], marker, ms=7, ls="", label=f"{name}, gamma {r['g']:g}")
    ax.set_xscale("log")
    rounds = rows[0]["rounds"] if rows else "?"
    dataset = str(data.get("dataset", "?")).split(",")[0]
    return _finish(ax, f"l1-difference gamma, {dataset}, iid, {rounds} rounds (downloads: the dense model)", path)


def late_mean(curve: list[list[float]]) -> float:
    """Mean P@1 over the evaluations in the second half of a run (``curve``: [round, P@1, MB] rows).

    One label per client, 20 of 159 classes move each round, so single evaluations swing by up to
    0.1: the late mean ranks the weights more stably than the last one."""
    last = curve[-1][0]
    late = [c[1] for c in curve if c[0] > last / 2]
    return sum(late) / len(late)


def plot_fedaws(data: dict[str, Any], path: Path) -> Path:
    """FedAwS / FedALC over the regulariser weight: late-mean P@1 against the whole run's MB (left; the
    final P@1 as open markers), and per weight P@1 over cumulative MB (right)."""
    plt = _plt()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    rows = data["rows"]
    for name, fmt in (("FedAwS", "s--"), ("FedALC", "o-")):
        group = sorted((r for r in rows if r["algorithm"] == name), key=lambda r: r["reg_weight"])
        if not group:
            continue
        xs = [_mb(r) for r in group]
        weights = [r["reg_weight"] for r in group]
        late = [late_mean(r["curve"]) for r in group]
        left.plot(weights, late, fmt, ms=4, label=f"{name}: mean P@1, second half of the run")
        left.plot(weights, [float(r["P@1"]) for r in group], fmt[0], mfc="none", ls="", label=f"{name}: final P@1")
        for r in group:
            right.plot(
                [c[2] for c in r["curve"]], [c[1] for c in r["curve"]], fmt, ms=3, label=f"{name} {r['reg_weight']:g}"
            )
        left.annotate(f"{xs[0]:.0f} MB each (up + down)", (weights[0], late[0]), fontsize=6)
    a = data.get("args", {})
    left.set_xscale("log")
    left.set_xlabel("regulariser weight lambda (server step = lambda x lr; same MB each)")
    left.set_ylabel("test P@1")
    left.set_title(
        f"Bibtex, one label per client, {a.get('rounds', '?')} rounds, seed {a.get('seeds', [0])[0]}", fontsize=9
    )
    left.grid(alpha=0.3)
    left.legend(fontsize=6)
    right.set_xlabel("MB communicated, up + down (cumulative)")
    right.set_ylabel("test P@1")
    right.grid(alpha=0.3)
    right.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# JSON stem -> (plotter, PNG stem, fields every row must hold)
PLOTS = {
    "fl_sampled": (plot_sampled, "fl_sampled_sweep", ("algorithm", "m", "P@1", "MB_up", "MB_down")),
    "fl_partial": (plot_partial, "fl_partial_sweep", ("algorithm", "beta", "p", "P@1", "MB_up", "MB_down")),
    "fl_l1diff": (plot_l1diff, "fl_l1diff_sweep", ("strategy", "gamma / mean|g0|", "P@1", "MB_up", "MB_down")),
    "fl_fedaws_sweep": (plot_fedaws, "fl_fedaws_sweep_tradeoff", ("algorithm", "reg_weight", "P@1", "curve")),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=COMMITTED, help="folder of the fl_*.json to plot")
    ap.add_argument("--out", type=Path, default=None, help="index JSON; the PNGs go beside it")
    ap.add_argument("--quick", action="store_true", help="smoke run (the same plots: they train nothing)")
    args = ap.parse_args(argv)
    index_path = results_path("fl_plots", out=args.out, quick=args.quick)
    index_path.parent.mkdir(parents=True, exist_ok=True)
    results = args.results.resolve()
    shown = results.relative_to(ROOT) if ROOT in results.parents else results  # no machine paths in the index
    index: dict[str, Any] = {"benchmark": "fl_plots", "results": str(shown), "plots": {}, "skipped": {}}
    for stem, (fn, png, fields) in PLOTS.items():
        src = args.results / f"{stem}.json"
        if not src.is_file():
            index["skipped"][stem] = "no JSON"
            continue
        data = json.loads(src.read_text())
        missing = sorted({f for r in data.get("rows", []) for f in fields if f not in r})
        if not data.get("rows") or missing:
            index["skipped"][stem] = f"rows lack {missing}" if missing else "no rows"
            continue
        out = fn(data, index_path.parent / f"{png}.png")
        index["plots"][stem] = out.name
        print(f"{src.name} -> {out}")
    for stem, why in index["skipped"].items():
        print(f"{stem}: skipped ({why})")
    index_path.write_text(json.dumps(index, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
