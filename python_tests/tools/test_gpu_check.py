"""`make gpu-check` (tools/gpu/gpu_check.py) and the benchmarks' --device / --out handling.

What runs here without a GPU: the tool's refusal (exit 2, nothing created), the benchmarks' argument
checks, the JSON assembly on fake inputs and on the committed CPU results, and the tool's glue with
its GPU steps replaced. What needs a GPU (the build, the tests and the benches on cuda) is not run.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from python_tests.support.helpers import child_pythonpath
from python_tests.support.paths import ROOT
from python_tests.support.scripts import load_script

TOOL = ROOT / "tools" / "gpu" / "gpu_check.py"
BENCHES = ["sketch", "sampled", "select", "prox", "spread", "topk"]
NO_GPU = "no NVIDIA GPU found: gpu-check needs one; see README 'Verifying the CUDA kernels'"
# what a gpu-check run would create in the checkout
ROOT_OUTPUTS = [ROOT / ".venv-cuda", ROOT / "gpu-check", ROOT / "build" / "gpu-check"]

needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a GPU")


report = load_script(ROOT / "tools" / "gpu" / "gpu_check_report.py")
gpu_check = load_script(TOOL)
gpu_mainjob = load_script(ROOT / "tools" / "gpu" / "gpu_mainjob.py")
common = load_script(ROOT / "bench" / "common.py")


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _env(path: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CUDACXX", "CUDA_HOME", "CUDA_PATH")}
    return {**env, "PATH": path, **extra}


def _run_tool(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``python -m tools.gpu.gpu_check`` with the checkout importable from ``cwd`` (as from its root)."""
    return subprocess.run(
        [sys.executable, "-m", "tools.gpu.gpu_check", *args],
        cwd=cwd,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )


# ---- the tool on a machine without a GPU


@pytest.mark.parametrize("explicit_paths", [False, True], ids=["defaults", "venv-and-out-given"])
def test_no_nvidia_smi_exits_2_and_creates_nothing(tmp_path, explicit_paths):
    cwd, empty_bin = tmp_path / "cwd", tmp_path / "bin"
    cwd.mkdir()
    empty_bin.mkdir()
    before = [p.exists() for p in ROOT_OUTPUTS]
    args = ["--venv", str(tmp_path / "venv"), "--out", str(tmp_path / "out" / "g.json")] if explicit_paths else []
    res = _run_tool(args, cwd, _env(str(empty_bin)))
    assert res.returncode == 2, res.stdout + res.stderr
    assert NO_GPU in res.stderr and "Traceback" not in res.stderr
    assert list(cwd.iterdir()) == []
    assert not (tmp_path / "venv").exists() and not (tmp_path / "out").exists()
    assert [p.exists() for p in ROOT_OUTPUTS] == before


def test_run_by_its_path_names_the_module_form(tmp_path):
    res = subprocess.run(
        [sys.executable, str(TOOL)], cwd=ROOT, env=_env(str(tmp_path)), capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 1 and "python3 -m tools.gpu.gpu_check" in res.stderr and "Traceback" not in res.stderr


def test_nvidia_smi_without_driver_exits_2(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    _script(
        fake / "nvidia-smi",
        "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'; exit 9",
    )
    res = _run_tool(
        ["--venv", str(tmp_path / "venv"), "--out", str(tmp_path / "out" / "g.json")], tmp_path, _env(str(fake))
    )
    assert res.returncode == 2 and NO_GPU in res.stderr and "could not communicate" in res.stderr
    assert not (tmp_path / "venv").exists() and not (tmp_path / "out").exists()


@needs_no_gpu
def test_gpu_listed_but_torch_cannot_use_it(tmp_path):
    """nvidia-smi (fake) lists an H100, but the venv's torch sees no GPU: stop before building anything."""
    venv = Path(sys.prefix)
    if not (venv / "bin" / "python").exists():
        pytest.skip("the test interpreter is not a venv-style prefix with bin/python")
    fake = tmp_path / "bin"
    fake.mkdir()
    _script(fake / "nvidia-smi", "echo 'NVIDIA H100 80GB HBM3, 580.65.06, 9.0, 81559 MiB'")
    nvcc = _script(fake / "nvcc", "echo 'Cuda compilation tools, release 13.0, V13.0.48'")
    before = [p.exists() for p in ROOT_OUTPUTS]
    res = _run_tool(
        ["--venv", str(venv), "--out", str(tmp_path / "out" / "g.json")], tmp_path, _env(str(fake), CUDACXX=str(nvcc))
    )
    if torch.version.cuda:  # a CUDA torch without a GPU: the same refusal as without nvidia-smi
        assert res.returncode == 2 and NO_GPU in res.stderr and "sees no GPU" in res.stderr
    else:  # a CPU-only torch in the given venv: a prerequisite, exit 3
        assert res.returncode == 3 and "CPU-only build" in res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()
    assert [p.exists() for p in ROOT_OUTPUTS] == before


def test_out_inside_bench_results_is_refused(tmp_path):
    res = _run_tool(["--out", str(ROOT / "bench" / "results" / "g.json")], tmp_path, _env(str(tmp_path)))
    assert res.returncode == 2 and "bench/results" in res.stderr


# ---- the benchmarks' --device / --out


@needs_no_gpu
@pytest.mark.parametrize("bench", BENCHES)
def test_bench_device_cuda_without_gpu_is_a_clear_error(bench, tmp_path):
    res = subprocess.run(
        [
            sys.executable,
            *gpu_check.BENCHES[bench],
            "--device",
            "cuda",
            "--quick",
            "--out",
            str(tmp_path / "r.json"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": child_pythonpath()},
    )
    assert res.returncode == 2, res.stderr
    assert "--device cuda: no CUDA GPU is available" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "r.json").exists()


def _check(argv: list[str]) -> str:
    ap = argparse.ArgumentParser()
    common.add_device_arguments(ap)
    return common.check_device_arguments(ap, ap.parse_args(argv))


def test_device_argument_defaults_to_cpu():
    assert _check([]) == "cpu"
    assert _check(["--device", "cpu", "--out", "x.json"]) == "cpu"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--device", "mps"], "choose cpu or cuda"),
        (["--device", "cuda:x"], "--device 'cuda:x'"),
        (
            ["--device", "cuda", "--out", str(ROOT / "bench" / "results" / "ops" / "sketch.json")],
            "must not write into bench/results",
        ),
    ],
)
def test_device_argument_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        _check(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_results_path():
    assert common.results_path("sketch") == ROOT / "build" / "bench-results" / "sketch.json"
    assert common.results_path("sketch", "cuda") == ROOT / "gpu-check" / "bench" / "sketch.json"
    assert common.results_path("sketch", "cuda", Path("/tmp/x.json")) == Path("/tmp/x.json")


# ---- parsing and assembly (fake inputs)


@pytest.mark.parametrize(
    "text, want",
    [
        ("....\n3 failed, 120 passed, 2 skipped, 4 warnings in 9.12s\n", dict(failed=3, passed=120, skipped=2)),
        ("===== 1201 passed, 7 skipped in 245.03s (0:04:05) =====", dict(passed=1201, skipped=7)),
        ("x\n1 error in 0.50s\n", dict(errors=1)),
        ("2 passed, 1 xfailed, 1 xpassed, 3 errors in 1.0s", dict(passed=2, xfailed=1, xpassed=1, errors=3)),
        ("no tests ran in 0.01s", {}),
    ],
)
def test_parse_pytest_summary(text, want):
    got = report.parse_pytest_summary("test_x.py::test_passed [cuda] 5 passed earlier\n" + text)
    assert {k: v for k, v in got.items() if v and k != "warnings"} == want


def test_parse_pytest_summary_missing():
    with pytest.raises(ValueError):
        report.parse_pytest_summary("Segmentation fault (core dumped)\n")


JUNIT = """<?xml version="1.0"?><testsuites><testsuite>
<testcase classname="t" name="test_a[cpu]"/>
<testcase classname="t" name="test_a[cuda]"/>
<testcase classname="t" name="test_b[cuda-float16-3]"><skipped message="x"/></testcase>
<testcase classname="t" name="test_c[float32-cuda]"><failure message="boom"/></testcase>
<testcase classname="t" name="test_d[cudaless]"/>
<testcase classname="t" name="test_e"/>
</testsuite></testsuites>"""


def test_junit_cuda_counts():
    assert report.junit_device_counts(JUNIT) == {"total": 3, "passed": 1, "failed": 1, "skipped": 1}


def test_summarize_tests():
    ok = report.summarize_tests(0, "10 passed, 1 skipped in 3.0s", JUNIT)
    assert ok["ok"] and ok["passed"] == 10 and ok["cuda"]["total"] == 3
    assert not report.summarize_tests(1, "1 failed, 9 passed in 3.0s")["ok"]
    assert not report.summarize_tests(0, "no tests ran in 0.1s")["ok"]
    crashed = report.summarize_tests(-11, "Fatal Python error: Segmentation fault")
    assert not crashed["ok"] and "no pytest summary" in crashed["problem"]
    assert "error" in report.summarize_tests(0, "1 passed in 1s", "<not xml")["cuda"]


def test_smi_and_nvcc_parsing():
    gpus = report.parse_smi_csv(
        "NVIDIA H100 80GB HBM3, 580.65.06, 9.0, 81559 MiB\n\nNVIDIA A100-SXM4-40GB, 580.65.06, 8.0, 40960 MiB\n"
    )
    assert [g["name"] for g in gpus] == ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"]
    assert gpus[0]["compute_cap"] == "9.0" and gpus[1]["driver"] == "580.65.06"
    assert report.parse_smi_csv("") == []
    smi = "| NVIDIA-SMI 580.65.06   Driver Version: 580.65.06   CUDA Version: 13.0 |"
    assert report.parse_smi_cuda_version(smi) == "13.0"
    assert report.parse_smi_cuda_version("nothing") is None
    assert report.parse_nvcc_version("Cuda compilation tools, release 13.0, V13.0.48") == "13.0"


@pytest.mark.parametrize("cap, want", [("9.0", "9.0"), ("8.6", "8.6;9.0"), ("10.0", "9.0;10.0"), ("12.0", "9.0;12.0")])
def test_arch_list(cap, want):
    assert report.arch_list(cap) == want


FAKE_PAYLOADS = {
    "sketch": [{"op": "label_hash", "p": 3993, "R": 4, "B": 250, "ours_ms": 0.5, "torch_ms": 2.0, "GB/s": 1000.0}],
    "sampled": [
        {
            "op": "linear_cross_entropy",
            "mode": "fwd",
            "bias": True,
            "N": 4096,
            "d": 256,
            "s": 1024,
            "threads": 1,
            "ours_ms": 1.0,
            "eager_ms": 1.5,
        },
        {
            "op": "scatter_rows_mean",
            "n": 4096,
            "d": 256,
            "T": 16384,
            "fedkernels_ms": 0.1,
            "torch_ms": 1.0,
            "GB/s": 2000.0,
        },
    ],
    "select": [
        {
            "model": "resnet50",
            "dtype": "float32",
            "op": "delta_norms",
            "method": "fedkernels.delta_norms",
            "time_ms": 1.0,
            "gbs": 1500.0,
        },
        {
            "model": "resnet50",
            "dtype": "float32",
            "op": "delta_norms",
            "method": "python loop",
            "time_ms": 8.0,
            "gbs": 100.0,
        },
        {
            "model": "resnet50",
            "dtype": "float32",
            "op": "delta_norms",
            "method": "foreach",
            "time_ms": 2.0,
            "gbs": 500.0,
        },
    ],
    "prox": [
        {"d": 1000, "lam": 1.0, "ns/elem f32 anchored": 100.0, "pg100 ns/elem": 400.0, "GB/s f32": 0.08},
        {"d": 10**7, "lam": 1.0, "ns/elem f32 anchored": 1.0, "GB/s f32": 8.0},
    ],
    "spread": [
        {
            "C": 1000,
            "d": 64,
            "k": 10,
            "fk_knn_s": 0.001,
            "torch_knn_s": 0.004,
            "fk_knn_gbs": 0.3,
            "fk_loss_fwd_bwd_s": 0.002,
            "torch_loss_fwd_bwd_s": 0.01,
        },
        {"C": 100000, "d": 64, "k": 10, "fk_knn_s": 0.5, "fk_knn_gbs": 0.1, "fk_loss_fwd_bwd_s": 1.0},
    ],
    "topk": [
        {"p": 16384, "d": 64, "N": 64, "k": 5, "fk_t1_s": 0.002, "eager_t1_s": 0.006},
        {"p": 670091, "d": 512, "N": 4096, "k": 5, "fk_t1_s": 2.0},
    ],
}


def test_bench_rows_from_fake_payloads():
    rows = {b: report.bench_rows(b, {"rows": r}, copy_gbs=2000.0) for b, r in FAKE_PAYLOADS.items()}
    sk = rows["sketch"][0]
    assert (sk["ours_ms"], sk["torch_ms"], sk["speedup"], sk["gbs"], sk["pct_copy"]) == (0.5, 2.0, 4.0, 1000.0, 50.0)
    lce, scatter = rows["sampled"]
    assert lce["op"] == "linear_cross_entropy fwd" and lce["gbs"] is None and lce["pct_copy"] is None
    assert lce["speedup"] == 1.5 and "bias=True threads=1" in lce["config"]
    assert scatter["speedup"] == 10.0 and scatter["pct_copy"] == 100.0
    assert [(r["vs"], r["speedup"], r["gbs"]) for r in rows["select"]] == [
        ("python loop", 8.0, 1500.0),
        ("foreach", 2.0, 1500.0),
    ]
    small, big = rows["prox"]
    assert small["ours_ms"] == pytest.approx(0.1) and small["speedup"] == pytest.approx(4.0)
    assert big["torch_ms"] is None and big["speedup"] is None
    knn, loss, knn_big, loss_big = rows["spread"]
    assert knn["speedup"] == pytest.approx(4.0) and loss["speedup"] == pytest.approx(5.0)
    assert knn_big["torch_ms"] is None and loss_big["speedup"] is None
    tk, tk_big = rows["topk"]
    assert tk["op"] == "linear_topk" and tk["vs"] == "topk(h @ W.T)" and "p=16384 d=64 N=64 k=5" in tk["config"]
    assert tk["ours_ms"] == pytest.approx(2.0) and tk["speedup"] == pytest.approx(3.0)
    assert tk_big["torch_ms"] is None and tk_big["speedup"] is None
    for rs in rows.values():
        for r in rs:
            assert set(r) == {"bench", "op", "config", "vs", "ours_ms", "torch_ms", "speedup", "gbs", "pct_copy"}
    json.dumps(rows, allow_nan=False)


def test_bench_rows_edge_cases():
    nan_row = dict(FAKE_PAYLOADS["sketch"][0], torch_ms=float("nan"))
    assert report.bench_rows("sketch", {"rows": [nan_row]}, None)[0]["speedup"] is None
    assert report.bench_rows("sketch", {"rows": FAKE_PAYLOADS["sketch"]}, None)[0]["pct_copy"] is None
    with pytest.raises(ValueError, match="one fedkernels row"):
        report.bench_rows("select", {"rows": FAKE_PAYLOADS["select"][1:]}, 1.0)
    with pytest.raises(KeyError):
        report.bench_rows("sketch", {"rows": [{"op": "label_hash"}]}, 1.0)


@pytest.mark.parametrize("bench", BENCHES)
def test_bench_rows_read_the_committed_results(bench):
    """The same fields the benchmarks write (a cuda run writes the same row keys as the CPU tables)."""
    path = ROOT / "bench" / "results" / "ops" / f"{bench}.json"
    if not path.exists():
        pytest.skip(f"{path} not committed")
    rows = report.bench_rows(bench, json.loads(path.read_text()), copy_gbs=50.0)
    assert rows and all(r["ours_ms"] > 0 for r in rows)
    assert any(r["speedup"] is not None for r in rows)


def test_assemble_and_exit_code():
    build, tests = {"ok": True}, {"ok": True, "passed": 5}
    benches = {"sketch": {"status": "ok", "rows": [{"op": "a"}]}, "prox": {"status": "ok", "rows": [{"op": "b"}]}}
    rep = report.assemble({"name": "H100"}, build, tests, benches, {"setup": 100.0, "tests": 200.0}, setup_s=90.0)
    assert rep["ok"] and report.exit_code(rep) == 0
    assert rep["bench_rows"] == [{"op": "a"}, {"op": "b"}]
    assert rep["timing"]["elapsed_s"] == 300.0 and rep["timing"]["check_s"] == 210.0 and rep["timing"]["within_target"]
    for bad in (
        dict(build={"ok": False}),
        dict(tests={"ok": False}),
        dict(benches={}),
        dict(benches={**benches, "spread": {"status": "timeout", "rows": []}}),
    ):
        kw = {"build": build, "tests": tests, "benches": benches, **bad}
        assert report.exit_code(report.assemble({}, kw["build"], kw["tests"], kw["benches"], {})) == 1
    assert "| sketch |" in report.format_rows([{"bench": "sketch", "ours_ms": 1.0, "torch_ms": None}])


# ---- the tool's glue, GPU steps replaced


def test_run_logged_kills_on_timeout(tmp_path):
    rc, out = gpu_check.run_logged(
        [sys.executable, "-c", "print('hi', flush=True); import time; time.sleep(60)"],
        tmp_path / "log",
        dict(os.environ),
        timeout=2,
    )
    assert rc == 124 and "hi" in out and "killed after" in (tmp_path / "log").read_text()


def test_find_nvcc_prefers_cudacxx(tmp_path, monkeypatch):
    nvcc = _script(tmp_path / "nvcc", "true")
    monkeypatch.setenv("CUDACXX", str(nvcc))
    assert gpu_check.find_nvcc() == nvcc


FAKE_BENCH = """import argparse, json, sys
ap = argparse.ArgumentParser(); ap.add_argument("--device"); ap.add_argument("--out"); ap.add_argument("--quick",
    action="store_true")
a = ap.parse_args()
assert a.device == "cuda" and a.quick
if "{fail}" == "yes":
    sys.exit("bench failed")
json.dump({{"rows": {rows}}}, open(a.out, "w"))
"""


def _fake_main(
    tmp_path, monkeypatch, tests_ok: bool, bench_fails: bool, mainjob_status: str = "ok"
) -> tuple[int, dict]:
    """gpu_check.main with preflight, build, probe, pytest and the main job replaced; the benches are small scripts."""
    if not (Path(sys.prefix) / "bin" / "python").exists():
        pytest.skip("the test interpreter is not a venv-style prefix with bin/python")
    nvcc = _script(tmp_path / "nvcc", "echo 'Cuda compilation tools, release 13.0, V13.0.48'")
    facts = {
        "torch": "2.14.1",
        "torch_cuda": "13.0",
        "cuda_available": True,
        "name": "NVIDIA H100",
        "capability": "9.0",
        "missing": [],
    }
    gpus = [{"name": "NVIDIA H100", "driver": "580.65.06", "compute_cap": "9.0"}]
    monkeypatch.setattr(gpu_check, "preflight", lambda args: (gpus, "13.0", nvcc, facts))
    monkeypatch.setattr(gpu_check, "build", lambda venv, nvcc, archs, out_dir: {"ok": True, "arch_list": archs})
    monkeypatch.setattr(gpu_check, "probe", lambda python, copy_bandwidth=False: {"copy_bandwidth_gbs": 2000.0})
    monkeypatch.setattr(
        gpu_check,
        "run_tests",
        lambda *a: report.summarize_tests(
            0 if tests_ok else 1, "10 passed in 1s" if tests_ok else "1 failed, 9 passed in 1s"
        ),
    )
    benches = {}
    for name in ("sketch", "select"):
        script = tmp_path / f"{name}.py"
        script.write_text(
            FAKE_BENCH.format(rows=FAKE_PAYLOADS[name], fail="yes" if bench_fails and name == "select" else "no")
        )
        benches[name] = [str(script)]
    monkeypatch.setattr(gpu_check, "BENCHES", benches)
    monkeypatch.setattr(
        gpu_check, "run_mainjob", lambda venv, nvcc, out_dir, args: {"status": mainjob_status, "rows": []}
    )
    out = tmp_path / "out" / "gpu-check.json"
    rc = gpu_check.main(["--venv", sys.prefix, "--out", str(out), "--benches", "sketch,select"])
    return rc, json.loads(out.read_text())


def test_main_assembles_one_json(tmp_path, monkeypatch, capsys):
    rc, rep = _fake_main(tmp_path, monkeypatch, tests_ok=True, bench_fails=False)
    assert rc == 0 and rep["ok"]
    assert rep["gpu"]["name"] == "NVIDIA H100" and rep["gpu"]["nvcc"] == "13.0"
    assert rep["gpu"]["copy_bandwidth_gbs"] == 2000.0
    assert rep["build"]["arch_list"] == "9.0" and rep["tests"]["passed"] == 10
    assert [r["bench"] for r in rep["bench_rows"]] == ["sketch", "select", "select"]
    assert rep["bench_rows"][0]["pct_copy"] == 50.0
    assert all((tmp_path / "out" / "bench" / f).exists() for f in ("sketch.json", "sketch.log"))
    assert rep["mainjob"]["status"] == "ok" and "main job" in rep["timing"]["steps_s"]
    assert "PASSED" in capsys.readouterr().out


def test_main_job_without_the_datasets_is_skipped_and_says_why(tmp_path):
    args = gpu_check.parse_args(["--data-dir", str(tmp_path / "nothing-here")])
    entry = gpu_check.run_mainjob(Path(sys.prefix), Path("/bin/true"), tmp_path, args)
    assert entry["status"] == "skipped" and "nothing-here" in entry["why"]
    ok = report.assemble({}, {"ok": True}, {"ok": True}, {"a": {"status": "ok"}}, {}, mainjob=entry)
    assert ok["ok"] and ok["mainjob"]["status"] == "skipped"


def test_main_job_rows_agree_only_within_the_tolerance():
    def run(p_cpu: float, p_cuda: float) -> dict:
        entry = lambda p: {"algorithms": {"FedAvg": {"P@1": p, "s_per_round": 1.0}}}  # noqa: E731
        return {"fedmlh-bibtex": {"cpu": entry(p_cpu), "cuda": entry(p_cuda)}}

    assert gpu_mainjob.compare(run(0.40, 0.40 + gpu_mainjob.TOL / 2))[0]["agree"]
    assert not gpu_mainjob.compare(run(0.40, 0.40 + 2 * gpu_mainjob.TOL))[0]["agree"]
    missing = run(0.40, 0.40)
    missing["fedmlh-bibtex"]["cuda"]["algorithms"] = {}
    assert not gpu_mainjob.compare(missing)[0]["agree"]


@pytest.mark.parametrize(
    "tests_ok, bench_fails, mainjob",
    [(False, False, "ok"), (True, True, "ok"), (True, False, "failed"), (True, False, "timeout")],
    ids=["test-fails", "bench-fails", "mainjob-fails", "mainjob-timeout"],
)
def test_main_exits_1_on_a_failure(tmp_path, monkeypatch, tests_ok, bench_fails, mainjob):
    rc, rep = _fake_main(tmp_path, monkeypatch, tests_ok=tests_ok, bench_fails=bench_fails, mainjob_status=mainjob)
    assert rc == 1 and not rep["ok"]
    assert rep["mainjob"]["status"] == mainjob
    if bench_fails:
        assert rep["benches"]["select"]["status"] == "failed" and "bench failed" in rep["benches"]["select"]["tail"]


def test_test_selection_picks_op_files_and_their_cuda_half():
    """--tests all / ops / cuda: the whole suite, the op test files, or their cuda-parametrised tests."""
    assert gpu_check.selected_tests("all") == ["python_tests"]
    ops = gpu_check.selected_tests("ops")
    assert "python_tests/ops/sketch/test_merge.py" in ops and not any("test_fl_" in f for f in ops)
    assert gpu_check.selected_tests("cuda") == ["-k", "cuda", *ops]
    with pytest.raises(SystemExit):
        gpu_check.parse_args(["--tests", "some"])
    assert gpu_check.parse_args(["--tests", "cuda", "--no-compile-peers"]).no_compile_peers


def test_no_compile_peers_skips_torch_compile(monkeypatch):
    """FK_BENCH_NO_COMPILE=1 (gpu_check --no-compile-peers): no compile, and the peer says why."""
    peers = load_script(ROOT / "bench" / "ops" / "peers.py")
    calls = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: calls.append(fn) or fn)
    monkeypatch.setenv("FK_BENCH_NO_COMPILE", "1")
    cfn, why = peers.compiled_peer(lambda x: x + 1, torch.ones(2))
    assert cfn is None and "FK_BENCH_NO_COMPILE" in why and calls == []
    monkeypatch.delenv("FK_BENCH_NO_COMPILE")
    cfn, why = peers.compiled_peer(lambda x: x + 1, torch.ones(2))
    assert why == "ok" and len(calls) == 1 and torch.equal(cfn(torch.ones(2)), torch.full((2,), 2.0))
