"""Shared fixtures: the devices every op test runs on, and hypothesis profiles."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

import fedkernels  # registers the ops

settings.register_profile(
    "default", deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.register_profile(
    "ci",
    deadline=None,
    max_examples=40,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# Few examples under ASan/UBSan (tools/ci/sanitize.sh): every call is several times slower there.
settings.register_profile(
    "sanitize",
    deadline=None,
    max_examples=8,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "default"))

# In an xdist worker, every test but the op tests runs torch on one thread, and so does every process a
# test starts: -n N workers on N cores then never oversubscribe them, and OpenMP's idle threads, which
# spin, stop costing more CPU than the loop's small tensors need. The op tests keep torch's threads:
# their kernels' parallel paths are under test. Tests of thread-count behaviour set their counts.
OP_TEST_DIRS = ("ops", "metrics", "emu")
_DEFAULT_THREADS = torch.get_num_threads()
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"  # read by the processes tests start (this one's pool exists)


@pytest.fixture(autouse=True)
def _one_torch_thread_outside_op_tests(request: pytest.FixtureRequest) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    path = Path(str(request.node.fspath)).resolve()
    here = Path(__file__).resolve().parent
    op_test = path.is_relative_to(here) and path.relative_to(here).parts[0] in OP_TEST_DIRS
    want = _DEFAULT_THREADS if op_test else 1
    if torch.get_num_threads() != want:
        torch.set_num_threads(want)


# Every op test runs on CPU, and on CUDA automatically wherever a GPU exists.
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

# Real datasets: a test that needs one is marked real_data("name", ...) and skips, saying how to get
# it, where it is absent (python_tests/support/real_data.py: $FEDKERNELS_DATA_DIR, else ../shared/data
# and the download folder). No other test may find one by a bare name: the library's own fallbacks
# (./data, ../shared/data beside the working directory) are off here, in this process and the ones
# tests start, so the suite runs the same beside ../shared as in a user's fresh clone.
os.environ["FEDKERNELS_DATA_NO_FALLBACK"] = "1"


# ---- the CUDA execution emulator (docs/emulator.md): `pytest --emulate-cuda` runs every fedkernels op
# through its CUDA launcher and kernels on host tensors (FK_CUDA_EMU_MODULE names the built module).
def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fedkernels CUDA emulator")
    group.addoption(
        "--emulate-cuda",
        action="store_true",
        help="route every fedkernels op to its CUDA kernel, executed by the emulator",
    )
    group.addoption(
        "--emu-order",
        choices=["forward", "reverse", "random"],
        default="forward",
        help="order in which the emulator runs blocks and resumes threads",
    )
    group.addoption("--emu-seed", type=int, default=0, help="seed of the random order")
    group.addoption("--emu-coverage", default=None, help="write launched-kernel counts (JSON) to this path")


EMULATING = False


def _check_installed_copy() -> None:
    """FK_TEST_INSTALLED_AT=<folder>: the run tests the fedkernels installed there (a wheel, tools/ci/
    wheel_check.sh) and refuses to start on any other copy, such as the checkout's src/."""
    want = os.environ.get("FK_TEST_INSTALLED_AT")
    if not want:
        return
    got = Path(fedkernels.__file__).resolve()
    if not got.is_relative_to(Path(want).resolve()):
        raise pytest.UsageError(f"FK_TEST_INSTALLED_AT={want}, but fedkernels was imported from {got}")


def pytest_configure(config: pytest.Config) -> None:
    global EMULATING
    config.addinivalue_line(
        "markers",
        "emu_direct: runs the CPU kernels and calls CUDA kernels itself "
        "(the emulator's routing is not installed for it)",
    )
    config.addinivalue_line(
        "markers",
        "deployment: a Flower deployment scenario (a process per message): `make test-deployment`, not `make test`",
    )
    config.addinivalue_line(
        "markers",
        "real_data(*names): reads these real datasets (python_tests/support/real_data.py); skips, saying how to "
        "get them, where they are absent",
    )
    config.addinivalue_line(
        "markers",
        "cpu_path(reason): checks a CPU-only code path (a CPU kernel's path choice, scratch or stores) or "
        "no op at all, so it launches no CUDA kernel of its own; the emulated runs skip it",
    )
    _check_installed_copy()
    if config.getoption("--emulate-cuda"):
        from emu import cuda_emulator

        module = cuda_emulator.load()
        module.set_order(config.getoption("--emu-order"), config.getoption("--emu-seed"))
        EMULATING = True


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under --emulate-cuda, skip the tests marked cpu_path: routed to the CUDA kernels they would only
    repeat inputs the op's other tests give the kernel (emu/coverage_check.py still checks every
    kernel is launched), at minutes of emulated time. A test parametrized over CPU levels (`level`)
    runs once there, at this process's level: the CUDA kernels do not depend on it. A test marked
    real_data skips where a dataset it names is absent."""
    _skip_without_real_data(items)
    if not EMULATING:
        return
    from python_tests.support.cpu_levels import process_level

    top = process_level()
    for item in items:
        mark = item.get_closest_marker("cpu_path")
        if mark is not None:
            why = mark.args[0] if mark.args else "a CPU-only path"
            item.add_marker(pytest.mark.skip(reason=f"cpu_path: {why}; no CUDA kernel of its own to emulate"))
        level = getattr(item, "callspec", None) and item.callspec.params.get("level")
        if level is not None and level != top:
            item.add_marker(pytest.mark.skip(reason=f"emulated: the CUDA kernels run at any CPU level; {top} runs"))


def pytest_report_header(config: pytest.Config) -> list[str]:
    # The CPU kernels' dispatch level this run tests (FK_CPU_ISA caps it; csrc/common/cpu_isa.h).
    from fedkernels._info import build_info, cpu_isa_line

    lines = [
        f"fedkernels from {Path(fedkernels.__file__).parent} on torch {torch.__version__}",
        f"fedkernels CPU kernels: {cpu_isa_line(build_info())}",
    ]
    if not EMULATING:
        return lines
    from emu import cuda_emulator

    m = cuda_emulator.loaded()
    lines.append(
        f"fedkernels: ops run their CUDA kernels in the emulator ({Path(m.__file__).name}, checks={m.checks}, "
        f"order={config.getoption('--emu-order')}, seed={config.getoption('--emu-seed')})"
    )
    return lines


@pytest.fixture(autouse=True)
def _emulated_cuda_routing(request: pytest.FixtureRequest):
    """Under --emulate-cuda, every test runs with fedkernels ops routed to their CUDA kernels."""
    if not EMULATING or request.node.get_closest_marker("emu_direct"):
        yield
        return
    from emu import cuda_emulator

    with cuda_emulator.routed_to_cuda():
        yield


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = session.config.getoption("--emu-coverage")
    if not (EMULATING and path):
        return
    import json

    from emu import cuda_emulator

    # one file per process: an xdist worker's, or an emu/test_shards.py shard's
    shard = os.environ.get("FK_TEST_SHARD")
    worker = os.environ.get("PYTEST_XDIST_WORKER") or (f"shard{shard}" if shard else None)
    out = Path(f"{path}.{worker}" if worker else path)
    out.write_text(json.dumps(cuda_emulator.loaded().launch_counts(), indent=1, sort_keys=True))


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


def _skip_without_real_data(items: list[pytest.Item]) -> None:
    from python_tests.support.real_data import missing_reason

    reasons: dict[tuple[str, ...], str | None] = {}
    for item in items:
        names = tuple(name for mark in item.iter_markers("real_data") for name in mark.args)
        if not names:
            continue
        if names not in reasons:
            reasons[names] = missing_reason(names)
        if reasons[names] is not None:
            item.add_marker(pytest.mark.skip(reason=f"real_data: {reasons[names]}"))
