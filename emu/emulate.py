"""Build the emulated CUDA module and run the op tests against the CUDA kernels on this CPU.

    python emu/emulate.py build [--checks none|asan|race]      # prints the module's path
    python emu/emulate.py test  [--checks ...] [--order forward|reverse|random] [--seed N]
                                  [--coverage FILE] [--loop] [-- PYTEST_ARGS...]

`test` builds (incrementally, in build/emu-<checks>), then runs pytest with --emulate-cuda over the
op tests (op_test_files(): python_tests/ops and the folders beside it that run ops), or
over the test files the pytest arguments name. With --checks asan the interpreter preloads ASan, as tools/ci/sanitize.sh
does. See docs/emulator.md.
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECKS = ("none", "asan", "race")


def build(checks: str, python: str = sys.executable) -> Path:
    """Configure and build ``_C_emu`` with ``checks`` compiled in; returns the module's path."""
    build_dir = ROOT / "build" / f"emu-{checks}"
    out_dir = build_dir / "module"
    subprocess.run(
        [
            "cmake",
            "-S",
            str(ROOT),
            "-B",
            str(build_dir),
            "-G",
            "Ninja",
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython_EXECUTABLE={python}",
            "-DFK_CUDA=OFF",
            "-DFK_CUDA_EMU=ON",
            f"-DFK_CUDA_EMU_CHECKS={checks}",
            f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={out_dir}",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=sys.stderr,
    )
    # Build output goes to stderr: stdout carries only the module's path (`$(... build)` in a shell).
    subprocess.run(
        ["cmake", "--build", str(build_dir), "--target", "_C_emu", "-j", str(os.cpu_count() or 2)],
        check=True,
        stdout=sys.stderr,
    )
    found = sorted(glob.glob(str(out_dir / "_C_emu*.so")))
    if not found:
        raise SystemExit(f"emulate: no _C_emu module under {out_dir}")
    return Path(found[0])


# The op tests: the test folders whose files launch the kernels of their own ops (python_tests/ops/<family>
# and the modules beside the ops), and single files elsewhere that do. The federated-loop, Flower,
# hardening, CLI, data, docs, tools and packaging tests run no op of their own: they stay out of the
# emulated and sanitized op runs (tools/ci/sanitize.sh too).
OP_TEST_DIRS = ("python_tests/ops", "python_tests/metrics", "python_tests/emu")
# The privacy tests are the federated loop's (pure Python over the ops, run once by make test); of them
# only the l1-difference segments test calls a kernel of its own (the prox).
OP_TEST_FILES = ("python_tests/bench/test_peers.py", "python_tests/privacy/test_l1diff_segments.py")


# The federated loop with every op on its (emulated) CUDA kernel, against the CPU run: added to a run
# by `test --loop` (CI's default-order run), not to the op runs (sanitized, ASan-emulated, step 2).
LOOP_TESTS = ("python_tests/fl/test_device_emulated.py",)


def op_test_files() -> list[str]:
    """The op test files: every test_*.py under OP_TEST_DIRS, and OP_TEST_FILES."""
    found = [p for d in OP_TEST_DIRS for p in (ROOT / d).rglob("test_*.py")] + [ROOT / f for f in OP_TEST_FILES]
    return sorted(str(p.relative_to(ROOT)) for p in found)


def asan_env() -> dict[str, str]:
    """Environment that loads ASan into an uninstrumented interpreter (as tools/ci/sanitize.sh)."""

    def gcc_lib(name: str) -> str:
        return subprocess.run(
            ["gcc", f"-print-file-name={name}"], capture_output=True, text=True, check=True
        ).stdout.strip()

    # libstdc++ too: ASan's __cxa_throw interceptor needs the real one present at start-up.
    return {
        "LD_PRELOAD": f"{gcc_lib('libasan.so')}:{gcc_lib('libstdc++.so')}",
        "PYTHONMALLOC": "malloc",
        "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1:abort_on_error=1:detect_odr_violation=0:"
        "allocator_may_return_null=1",
    }


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["build", "test"])
    ap.add_argument("--checks", choices=CHECKS, default="none")
    ap.add_argument("--order", choices=["forward", "reverse", "random"], default="forward")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--coverage", help="write the launched-kernel counts (JSON) to this file")
    ap.add_argument("--loop", action="store_true", help="also run the federated loop's emulated-vs-CPU test")
    own, pytest_args = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    a = ap.parse_args(own)
    module = build(a.checks)
    if a.command == "build":
        print(module)
        return 0
    env = dict(os.environ, FK_CUDA_EMU_MODULE=str(module))
    if a.checks == "asan":
        env.update(asan_env())
    args = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--emulate-cuda",
        f"--emu-order={a.order}",
        f"--emu-seed={a.seed}",
    ]
    if a.coverage:
        args.append(f"--emu-coverage={a.coverage}")
    names_tests = any(a.endswith(".py") or "::" in a or os.path.isdir(a) for a in pytest_args)
    targets = pytest_args + ([] if names_tests else op_test_files()) + (list(LOOP_TESTS) if a.loop else [])
    print(f"emulate: {module.name} (checks={a.checks}, order={a.order}, seed={a.seed})", flush=True)
    if a.checks == "asan":
        # One process per shard, so a report aborts it (and fails the run); fd 2 not captured.
        # Shards (FK_TEST_SHARDS, default: three per core) run one per core: one process left a core idle.
        # The sharded runner sits beside this file: a sibling when run by path, emu.test_shards when imported.
        if __package__:
            from . import test_shards
        else:
            import test_shards

        args += ["--capture=sys", "-p", "no:xdist"]
        return test_shards.run(args, targets, test_shards.default_shards(), env=env, cwd=ROOT)
    return subprocess.run(args + targets, cwd=ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
