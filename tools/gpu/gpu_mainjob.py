"""The main job on each device, for `make gpu-check`: every preset, shortened, through `fedkernels run`.

    python -m tools.gpu.gpu_mainjob [--devices cpu,cuda] [--rounds 3] [--data-dir DIR] [--out mainjob.json]

For every shipped preset (one seed, ``--rounds`` rounds, every algorithm it runs, plus the registered
algorithms no preset runs, on the dataset of the preset that runs their family) it calls
``fedkernels run`` once per device, in this process, and records each algorithm's final P@1 and its
seconds per round (the mean over the rounds after the first, which pays for warm-up: CUDA context,
cuBLAS handles, allocator growth). A device pair agrees when the final P@1 differ by at most ``TOL``:
float32 reductions run in another order on a GPU (cuBLAS against the CPU's BLAS, CUB trees against
the CPU kernels' loops), so a few rounds of local training end a little apart. Without the data
folder the presets cannot run: the script says so and exits 3.

Exit status: 0 every run finished and every pair agreed; 1 a run failed or a pair differed; 3 no data.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOL = 0.02  # |P@1(cuda) - P@1(cpu)| after the shortened run (2515 Bibtex test samples: about 50 of them)
# Registered algorithms that no preset runs: the preset whose data and options they share.
EXTRA = {
    "fedss-bibtex": (["FedSS-NegOnly", "FedSS-PosOnly"], {}),
    "l1diff-bibtex": (["L1DiffNetwork"], {"L1DiffNetwork.num_clients": "clients"}),
}


def preset_runs(rounds: int) -> list[tuple[str, list[str]]]:
    """(preset, extra CLI args) for every run: the presets as shipped, shortened, plus :data:`EXTRA`."""
    from fedkernels.experiments.presets import list_presets, load_preset

    runs = []
    for p in list_presets():
        base = ["--preset", p.name, "--seeds", "1", "--rounds", str(rounds), "--eval-every", "1", "--no-progress"]
        runs.append((p.name, base))
        if p.name in EXTRA:
            algorithms, options = EXTRA[p.name]
            cfg = load_preset(p.name).config
            opts = [f"--option={k}={cfg[v] if isinstance(v, str) else v}" for k, v in options.items()]
            runs.append((f"{p.name}+{'+'.join(algorithms)}", [*base, "--algorithms", *algorithms, *opts]))
    return runs


def run_once(args: list[str], device: str, data_dir: str, out: Path) -> dict:
    """One ``fedkernels run`` on ``device``; per algorithm its final P@1 and seconds per round."""
    from fedkernels_cli import main

    t0 = time.perf_counter()
    log = io.StringIO()
    with contextlib.redirect_stdout(log):
        rc = main(["run", *args, "--device", device, "--data-dir", data_dir, "--output", str(out)])
    wall = time.perf_counter() - t0
    entry: dict = {"device": device, "returncode": rc, "wall_s": round(wall, 2), "algorithms": {}}
    found = sorted(out.rglob("results.json"))
    if rc or not found:
        entry["tail"] = log.getvalue()[-1500:]
        return entry
    for r in json.loads(found[0].read_text())["results"]:
        secs = [h["seconds"] for h in r["history"]]
        later = secs[1:] or secs
        entry["algorithms"][r["algorithm"]] = {
            "P@1": r["final"].get("P@1"),
            "s_per_round": round(sum(later) / len(later), 4),
            "first_round_s": round(secs[0], 4) if secs else None,
        }
    return entry


def compare(runs: dict[str, dict]) -> list[dict]:
    """One row per (run, algorithm): P@1 and seconds per round on each device, and whether they agree."""
    rows = []
    for name, by_device in runs.items():
        algs = sorted({a for e in by_device.values() for a in e["algorithms"]})
        for alg in algs:
            row: dict = {"run": name, "algorithm": alg}
            for dev, e in by_device.items():
                got = e["algorithms"].get(alg, {})
                row[f"P@1 {dev}"] = got.get("P@1")
                row[f"s/round {dev}"] = got.get("s_per_round")
            p = [row[f"P@1 {d}"] for d in by_device]
            row["agree"] = None not in p and max(p) - min(p) <= TOL
            rows.append(row)
    return rows


def write_report(a: argparse.Namespace, runs: dict[str, dict]) -> tuple[list[dict], bool]:
    """Write the JSON for the runs so far; return its rows and whether every run ran and every pair agrees."""
    rows = compare(runs)
    ok = all(e["returncode"] == 0 for r in runs.values() for e in r.values()) and all(r["agree"] for r in rows)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(
        json.dumps({"tolerance_P@1": TOL, "rounds": a.rounds, "runs": runs, "rows": rows, "ok": ok}, indent=2)
    )
    return rows, ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", default="cpu,cuda", help="comma-separated devices (default: cpu,cuda)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per run (default 3)")
    ap.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"), help="the shipped datasets' folder")
    ap.add_argument("--only", default="", help="comma-separated preset names (default: all)")
    ap.add_argument("--out", type=Path, default=ROOT / "gpu-check" / "mainjob.json")
    a = ap.parse_args(argv)
    if not (Path(a.data_dir) / "bibtex").is_dir():
        print(f"gpu_mainjob: the presets' data is not in {a.data_dir} (pass --data-dir)", file=sys.stderr)
        return 3
    devices = [d for d in a.devices.split(",") if d]
    only = {n for n in a.only.split(",") if n}
    runs: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in preset_runs(a.rounds):
            if only and name.split("+")[0] not in only:
                continue
            runs[name] = {}
            for dev in devices:
                entry = run_once(args, dev, a.data_dir, Path(tmp) / name / dev)
                runs[name][dev] = entry
                algs = ", ".join(
                    f"{k} {v['P@1']:.4f} ({v['s_per_round']:.3f} s/round)" for k, v in entry["algorithms"].items()
                )
                print(f"{name} on {dev}: rc {entry['returncode']}, {entry['wall_s']:.1f} s: {algs}", flush=True)
                if entry["returncode"]:
                    print(entry.get("tail", ""), flush=True)
            rows, ok = write_report(a, runs)  # after every preset: a run cut short by a timeout keeps its rows
    rows, ok = write_report(a, runs)
    for r in rows:
        cells = "  ".join(f"{k} {v}" for k, v in r.items() if k not in ("run", "algorithm"))
        print(f"{r['run']:<34} {r['algorithm']:<18} {cells}")
    print(f"main job: {'every pair agrees' if ok else 'FAILED'} (tolerance {TOL} P@1); wrote {a.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
