"""`make gpu-check`: verify the CUDA kernels on this machine's NVIDIA GPU with one command.

    python3 -m tools.gpu.gpu_check [--venv .venv-cuda] [--out gpu-check/gpu-check.json] [--full] [--workers N]
                                   [--tests all|ops|cuda]

Run it from the checkout root, as a module (``make gpu-check`` does): tools and emu are packages there.

1. Finds a GPU: nvidia-smi must list one, and torch in the venv must see it. Without one it prints
   why and exits 2 having done nothing (no venv, no build, no output folder).
2. Creates the venv if it does not exist (torch==2.14.1, PyPI's CUDA 13.0 build, and the packages the
   build and the tests need; a few GB, once). An existing venv is used as it is, missing packages added.
3. Builds and installs fedkernels into it with FK_CUDA=ON for the device's compute capability (plus
   9.0), build files in build/gpu-check, and checks every op has a CUDA kernel. The in-tree
   src/fedkernels/_C*.so of a development build is left alone.
4. Measures the GPU's copy bandwidth (a 1 GiB ``copy_``).
5. Runs ``pytest python_tests`` (every op test runs on cpu and on cuda where a GPU exists) with the
   hypothesis profile 'ci'. ``--tests ops``: only the op test files (no federated loop, Flower, CLI,
   docs); ``--tests cuda``: only the op tests whose id names cuda (the GPU half, when time is short).
6. Runs every op benchmark (bench/ops/sketch.py, sampled.py, select_norms.py, prox.py, spread.py) with
   ``--device cuda --quick`` (``--full``: the README's sizes), each op against its PyTorch composition.
7. Runs the main job on cuda and on cpu (tools/gpu/gpu_mainjob.py: every preset, shortened to
   ``--mainjob-rounds`` rounds, through ``fedkernels run --device``): each algorithm's final P@1 on
   both devices (they must agree within its stated tolerance) and its seconds per round.
   ``--data-dir`` names the shipped datasets' folder; without it the step is skipped, and says so.
8. Writes one JSON (default gpu-check/gpu-check.json; logs and each benchmark's own JSON beside it,
   never in bench/results) and prints the rows.

Exit status: 0 every test passed and every benchmark ran; 1 a build, test or benchmark failed;
2 no NVIDIA GPU; 3 a prerequisite is missing (nvcc, or a --venv whose torch is not a CUDA build).
The tool itself needs only Python 3.10+ (torch lives in the venv).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run by its path: the root's packages are not importable
    sys.exit("gpu-check: run it as a module from the checkout root: python3 -m tools.gpu.gpu_check (or make gpu-check)")

from emu.emulate import op_test_files
from tools.gpu import gpu_check_report as report
from tools.gpu.gpu_probe import NEEDED

ROOT = Path(__file__).resolve().parents[2]
NO_GPU = "no NVIDIA GPU found: gpu-check needs one; see README 'Verifying the CUDA kernels'"
TORCH = "torch==2.14.1"  # PyPI's Linux wheel of 2.14.1 is the CUDA 13.0 build
BENCHES = {  # each bench's command after the interpreter: run as a module of the repo root
    "sketch": ["-m", "bench.ops.sketch"],
    "sampled": ["-m", "bench.ops.sampled"],
    "select": ["-m", "bench.ops.select_norms"],
    "prox": ["-m", "bench.ops.prox"],
    "spread": ["-m", "bench.ops.spread"],
    "topk": ["-m", "bench.ops.topk"],
}
EXIT_NO_GPU, EXIT_PREREQ = 2, 3


class Stop(Exception):
    """A check failed before any work was done: the message to print and the exit status."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def find_gpus() -> tuple[list[dict[str, str]], str | None]:
    """The GPUs nvidia-smi lists and the driver's CUDA version; Stop(2) when there are none."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise Stop(f"{NO_GPU}\n(nvidia-smi is not on PATH)", EXIT_NO_GPU)
    gpus: list[dict[str, str]] = []
    detail = ""
    for query in (report.SMI_QUERY, "name,driver_version"):  # old drivers do not know compute_cap
        try:
            res = subprocess.run(
                [smi, f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True, text=True, timeout=60
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise Stop(f"{NO_GPU}\n(nvidia-smi failed: {e})", EXIT_NO_GPU) from e
        gpus = report.parse_smi_csv(res.stdout) if res.returncode == 0 else []
        detail = (res.stderr or res.stdout).strip()[:300]
        if gpus:
            break
    if not gpus:
        raise Stop(f"{NO_GPU}\n(nvidia-smi lists no GPU: {detail})", EXIT_NO_GPU)
    try:
        plain = subprocess.run([smi], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        plain = ""
    return gpus, report.parse_smi_cuda_version(plain)


def find_nvcc() -> Path | None:
    """nvcc from $CUDACXX, $CUDA_HOME, $CUDA_PATH, /usr/local/cuda, then PATH."""
    candidates = [os.environ.get("CUDACXX")]
    candidates += [str(Path(os.environ[v]) / "bin" / "nvcc") for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    candidates += ["/usr/local/cuda/bin/nvcc", shutil.which("nvcc")]
    for c in candidates:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return Path(c)
    return None


def child_env(venv: Path, nvcc: Path, **extra: str) -> dict[str, str]:
    """The environment of every step: venv and nvcc first on PATH, no PYTHONPATH (the installed build is tested)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = os.pathsep.join([str(venv / "bin"), str(nvcc.parent), env.get("PATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def probe(python: Path, copy_bandwidth: bool = False) -> dict:
    """tools/gpu/gpu_probe.py's facts as seen by ``python`` (run as a module of the checkout root, its
    working folder); Stop(3) if it cannot run."""
    cmd = [str(python), "-m", "tools.gpu.gpu_probe"] + (["--copy-bandwidth"] if copy_bandwidth else [])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise Stop(f"could not run {python} -m tools.gpu.gpu_probe: {e}", EXIT_PREREQ) from e
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError) as e:
        raise Stop(f"could not run {python} -m tools.gpu.gpu_probe: {res.stderr.strip()[-500:]}", EXIT_PREREQ) from e


def check_torch(facts: dict, venv: Path, gpus: list[dict[str, str]]) -> None:
    """Stop unless the venv's torch is a CUDA build that sees a GPU."""
    if facts.get("torch") is None:
        raise Stop(
            f"{venv} has no torch ({facts.get('error')}): delete it (gpu-check then creates it) or pass --venv",
            EXIT_PREREQ,
        )
    if not facts.get("torch_cuda"):
        raise Stop(
            f"torch {facts['torch']} in {venv} is a CPU-only build: delete the venv (gpu-check then "
            f"creates it with {TORCH}) or pass --venv with a CUDA torch",
            EXIT_PREREQ,
        )
    if not facts.get("cuda_available"):
        names = ", ".join(g["name"] for g in gpus)
        raise Stop(
            f"{NO_GPU}\n(nvidia-smi lists {names}, but torch {facts['torch']} (CUDA {facts['torch_cuda']}) "
            f"in {venv} sees no GPU: is the driver too old for CUDA {facts['torch_cuda']}?)",
            EXIT_NO_GPU,
        )


def run_logged(
    cmd: list[str], log: Path, env: dict[str, str], timeout: float | None = None, echo: bool = False
) -> tuple[int, str]:
    """Run ``cmd`` in the repo root, its output to ``log`` (and the console if ``echo``).

    Returns (exit status, output); 124 when it ran past ``timeout`` seconds and was killed.
    """
    with open(log, "w") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        chunks: list[str] = []

        def pump() -> None:
            for line in proc.stdout:
                f.write(line)
                chunks.append(line)
                if echo:
                    sys.stdout.write(line)
                    sys.stdout.flush()

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = 124
        reader.join(timeout=30)
        if rc == 124:
            f.write(f"\n[gpu-check: killed after {timeout} s]\n")
    return rc, "".join(chunks)


def create_venv(venv: Path, log: Path) -> None:
    """A new venv with the CUDA torch and NEEDED packages."""
    print(f"== creating {venv}: {TORCH} (CUDA 13.0 build) and the build/test packages (a few GB, once)", flush=True)
    py = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for cmd in (
        [sys.executable, "-m", "venv", str(venv)],
        [py, "-m", "pip", "install", "-q", "--upgrade", "pip"],
        [py, "-m", "pip", "install", "-q", TORCH, *NEEDED.values()],
    ):
        rc, out = run_logged(cmd, log, env)
        if rc:
            raise Stop(f"creating {venv} failed ({' '.join(cmd[:4])} ...): see {log}\n{out[-1000:]}", 1)


def build(venv: Path, nvcc: Path, archs: str, out_dir: Path) -> dict:
    """pip-install fedkernels with FK_CUDA=ON into the venv, then check every op has a CUDA kernel."""
    py = str(venv / "bin" / "python")
    env = child_env(
        venv, nvcc, FK_CUDA="ON", TORCH_CUDA_ARCH_LIST=archs, CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 2)
    )
    log = out_dir / "build.log"
    print(f"== building the CUDA kernels for {archs} (log: {log})", flush=True)
    cmd = [
        py,
        "-m",
        "pip",
        "install",
        "-v",
        "--no-build-isolation",
        "--no-deps",
        "--force-reinstall",
        f"--config-settings=build-dir={ROOT / 'build' / 'gpu-check'}",
        str(ROOT),
    ]
    rc, out = run_logged(cmd, log, env)
    if rc:
        return {"ok": False, "arch_list": archs, "log": str(log), "tail": out[-2000:]}
    rc, out = run_logged([py, str(ROOT / "tools" / "ci" / "check_cuda_registered.py")], out_dir / "registered.log", env)
    print(out.strip(), flush=True)
    return {"ok": rc == 0, "arch_list": archs, "log": str(log), "registered": out.strip()[-2000:]}


def selected_tests(which: str) -> list[str]:
    """pytest arguments for ``--tests``: all of python_tests, the op test files, or their cuda-parametrised tests."""
    if which == "all":
        return ["python_tests"]
    files = op_test_files()  # emu/emulate.py: the op test files the emulator also runs
    return files if which == "ops" else ["-k", "cuda", *files]


def run_tests(venv: Path, nvcc: Path, out_dir: Path, workers: int, timeout: float, which: str = "all") -> dict:
    """pytest python_tests (``which``: see selected_tests) with the 'ci' hypothesis profile; counts from its
    summary and junit XML."""
    xml = out_dir / "pytest.xml"
    xml.unlink(missing_ok=True)
    cmd = [str(venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}"]
    cmd += (["-n", str(workers)] if workers > 1 else []) + selected_tests(which)
    print(f"== pytest ({which}) on cpu and cuda ({workers} workers, log: {out_dir / 'pytest.log'})", flush=True)
    rc, out = run_logged(
        cmd, out_dir / "pytest.log", child_env(venv, nvcc, HYPOTHESIS_PROFILE="ci"), timeout, echo=True
    )
    tests = report.summarize_tests(rc, out, xml.read_text() if xml.exists() else None)
    tests["log"] = str(out_dir / "pytest.log")
    return tests


def run_bench(
    name: str,
    venv: Path,
    nvcc: Path,
    out_dir: Path,
    full: bool,
    timeout: float,
    copy_gbs: float | None,
    compile_peers: bool = True,
) -> dict:
    """One benchmark on cuda: its status, its rows in gpu-check form, and where its JSON and log are."""
    bench_dir = out_dir / "bench"
    bench_dir.mkdir(exist_ok=True)
    js, log = bench_dir / f"{name}.json", bench_dir / f"{name}.log"
    js.unlink(missing_ok=True)
    cmd = [str(venv / "bin" / "python"), *BENCHES[name], "--device", "cuda", "--out", str(js)]
    cmd += [] if full else ["--quick"]
    print(f"== bench {name} on cuda (log: {log})", flush=True)
    env = child_env(venv, nvcc, **({} if compile_peers else {"FK_BENCH_NO_COMPILE": "1"}))
    rc, out = run_logged(cmd, log, env, timeout, echo=True)
    entry: dict = {"status": "ok", "json": str(js), "log": str(log), "returncode": rc, "rows": []}
    if rc:
        entry.update(status="timeout" if rc == 124 else "failed", tail=out[-2000:])
        return entry
    try:
        entry["rows"] = report.bench_rows(name, json.loads(js.read_text()), copy_gbs)
    except (OSError, ValueError, KeyError, TypeError) as e:
        entry.update(status="failed", problem=f"could not read {js}: {type(e).__name__}: {e}")
    return entry


def run_mainjob(venv: Path, nvcc: Path, out_dir: Path, args: argparse.Namespace) -> dict:
    """tools/gpu/gpu_mainjob.py on cuda and cpu in the venv: its JSON plus ``status`` (ok, failed, timeout, skipped)."""
    js, log = out_dir / "mainjob.json", out_dir / "mainjob.log"
    js.unlink(missing_ok=True)
    if args.mainjob_rounds < 1:
        return {"status": "skipped", "why": "--mainjob-rounds 0"}
    if not (args.data_dir / "bibtex").is_dir():
        print(f"== main job skipped: no datasets in {args.data_dir} (pass --data-dir)", flush=True)
        return {"status": "skipped", "why": f"no datasets in {args.data_dir}"}
    cmd = [str(venv / "bin" / "python"), "-m", "tools.gpu.gpu_mainjob", "--devices", "cuda,cpu"]  # in ROOT
    cmd += ["--rounds", str(args.mainjob_rounds), "--data-dir", str(args.data_dir), "--out", str(js)]
    cmd += ["--only", args.mainjob_only] if args.mainjob_only else []
    print(f"== main job on cuda and cpu, {args.mainjob_rounds} rounds per preset (log: {log})", flush=True)
    rc, out = run_logged(cmd, log, child_env(venv, nvcc), args.mainjob_timeout, echo=True)
    try:
        entry = json.loads(js.read_text())
    except (OSError, ValueError):
        entry = {"tail": out[-2000:]}
    entry["status"] = "ok" if rc == 0 else "timeout" if rc == 124 else "failed"
    entry["log"] = str(log)
    return entry


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--venv", type=Path, default=ROOT / ".venv-cuda", help="CUDA-torch venv (created if missing)")
    ap.add_argument("--out", type=Path, default=ROOT / "gpu-check" / "gpu-check.json", help="the JSON to write")
    ap.add_argument("--full", action="store_true", help="benchmarks at the README's sizes, not --quick (slower)")
    ap.add_argument(
        "--workers",
        type=int,
        default=min(8, max(1, (os.cpu_count() or 2) // 2)),
        help="pytest-xdist workers (1: no xdist)",
    )
    ap.add_argument("--benches", default=",".join(BENCHES), help="comma-separated subset of " + ", ".join(BENCHES))
    ap.add_argument(
        "--tests",
        choices=("all", "ops", "cuda"),
        default="all",
        help="all of python_tests; the op test files; or only their cuda-parametrised tests",
    )
    ap.add_argument(
        "--no-compile-peers",
        action="store_true",
        help="skip the benchmarks' torch.compile peers (inductor's Triton compiles take minutes)",
    )
    ap.add_argument("--bench-timeout", type=float, default=240.0, help="seconds per benchmark before it is killed")
    ap.add_argument(
        "--data-dir",
        type=Path,
        default=ROOT.parent / "shared" / "data",
        help="the shipped datasets (bibtex, delicious) the main job's presets read",
    )
    ap.add_argument("--mainjob-rounds", type=int, default=3, help="rounds of each preset in the main job (0: skip it)")
    ap.add_argument("--mainjob-only", default="", help="comma-separated presets for the main job (default: all)")
    ap.add_argument("--mainjob-timeout", type=float, default=420.0, help="seconds for the main job")
    ap.add_argument("--test-timeout", type=float, default=1800.0, help="seconds for the test suite")
    args = ap.parse_args(argv)
    args.venv, args.out, args.data_dir = args.venv.absolute(), args.out.absolute(), args.data_dir.absolute()
    if (ROOT / "bench" / "results").resolve() in args.out.resolve().parents:
        ap.error(f"--out {args.out}: bench/results holds the CPU tables; write somewhere else")
    benches = [b for b in args.benches.split(",") if b]
    if not benches or set(benches) - set(BENCHES):
        ap.error(f"--benches: choose from {', '.join(BENCHES)}")
    args.benches = benches
    return args


def preflight(args: argparse.Namespace) -> tuple[list[dict[str, str]], str | None, Path, dict | None]:
    """Everything checked before any work: GPU, nvcc, and an existing venv's torch. Raises Stop."""
    gpus, driver_cuda = find_gpus()
    nvcc = find_nvcc()
    if nvcc is None:
        raise Stop(
            "nvcc not found: gpu-check compiles the CUDA kernels, which needs the CUDA toolkit 13.x "
            "(set CUDA_HOME, or put nvcc on PATH)",
            EXIT_PREREQ,
        )
    facts = None
    if (args.venv / "bin" / "python").exists():
        facts = probe(args.venv / "bin" / "python")
        check_torch(facts, args.venv, gpus)
    return gpus, driver_cuda, nvcc, facts


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        gpus, driver_cuda, nvcc, facts = preflight(args)
        out_dir = args.out.parent
        out_dir.mkdir(parents=True, exist_ok=True)
        steps: dict[str, float] = {}
        t0 = time.perf_counter()
        if facts is None:
            create_venv(args.venv, out_dir / "venv.log")
            facts = probe(args.venv / "bin" / "python")
            check_torch(facts, args.venv, gpus)
        setup_s = time.perf_counter() - t0
        if facts.get("missing"):
            rc, out = run_logged(
                [str(args.venv / "bin" / "python"), "-m", "pip", "install", "-q", *facts["missing"]],
                out_dir / "venv.log",
                child_env(args.venv, nvcc),
            )
            if rc:
                raise Stop(f"installing {facts['missing']} into {args.venv} failed:\n{out[-1000:]}", 1)
        steps["setup"] = time.perf_counter() - t0
    except Stop as e:
        print(str(e), file=sys.stderr)
        return e.code
    nvcc_text = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True).stdout
    gpu = {
        "nvidia_smi": gpus,
        "driver_cuda": driver_cuda,
        "nvcc": report.parse_nvcc_version(nvcc_text),
        **{k: facts.get(k) for k in ("name", "capability", "memory_gib", "device_count", "torch", "torch_cuda")},
    }
    print(
        f"== {gpu['name']} (compute capability {gpu['capability']}), driver {gpus[0].get('driver')} "
        f"(CUDA {driver_cuda}), torch {gpu['torch']} (CUDA {gpu['torch_cuda']}), nvcc {gpu['nvcc']}",
        flush=True,
    )

    t = time.perf_counter()
    built = build(args.venv, nvcc, report.arch_list(facts["capability"]), out_dir)
    steps["build"] = time.perf_counter() - t
    tests: dict = {"ok": False, "problem": "not run: the build failed"}
    benches: dict[str, dict] = {}
    mainjob: dict | None = None
    if built["ok"]:
        t = time.perf_counter()
        try:
            copy = probe(args.venv / "bin" / "python", copy_bandwidth=True)
            gpu["copy_bandwidth_gbs"] = copy.get("copy_bandwidth_gbs")
        except Stop as e:  # the rows then carry no % of copy; the tests and benchmarks still run
            gpu["copy_bandwidth_gbs"], gpu["copy_bandwidth_error"] = None, str(e)
        print(f"== copy bandwidth {gpu['copy_bandwidth_gbs']} GB/s (1 GiB copy_ on the GPU)", flush=True)
        steps["copy_bandwidth"] = time.perf_counter() - t
        t = time.perf_counter()
        tests = run_tests(args.venv, nvcc, out_dir, args.workers, args.test_timeout, args.tests)
        tests["selection"] = args.tests
        steps["tests"] = time.perf_counter() - t
        for name in args.benches:
            t = time.perf_counter()
            benches[name] = run_bench(
                name,
                args.venv,
                nvcc,
                out_dir,
                args.full,
                args.bench_timeout,
                gpu["copy_bandwidth_gbs"],
                not args.no_compile_peers,
            )
            steps[f"bench {name}"] = time.perf_counter() - t
        t = time.perf_counter()
        mainjob = run_mainjob(args.venv, nvcc, out_dir, args)
        steps["main job"] = time.perf_counter() - t
    result = report.assemble(gpu, built, tests, benches, steps, setup_s=setup_s, mainjob=mainjob)
    args.out.write_text(json.dumps(result, indent=2))
    print()
    print(report.format_rows(result["bench_rows"]))
    print(f"\nbuild: {'ok' if built['ok'] else 'FAILED, see ' + built['log']}")
    print(
        "tests: "
        + ", ".join(f"{tests.get(k, 0)} {k}" for k in ("passed", "failed", "errors", "skipped"))
        + (f" (cuda-parametrised: {tests['cuda']})" if "cuda" in tests else "")
    )
    for name, b in benches.items():
        if b["status"] != "ok":
            print(f"bench {name}: {b['status'].upper()}, see {b['log']}")
    if mainjob is not None:
        print(f"main job: {mainjob['status']}" + (f", see {mainjob['log']}" if "log" in mainjob else ""))
    timing = result["timing"]
    print(f"time: {timing['check_s']:.0f} s (target {timing['target_s']:.0f} s) plus {timing['setup_s']:.0f} s setup")
    print(f"{'PASSED' if result['ok'] else 'FAILED'}; wrote {args.out}")
    return report.exit_code(result)


if __name__ == "__main__":
    sys.exit(main())
