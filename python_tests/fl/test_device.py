"""The federated loop's device (``RunConfig.device``, ``fedkernels run --device``).

No GPU here, so placement is proven another way: torch's *default* device is set to ``meta`` while
the run names ``cpu``. Every tensor the loop makes must then be placed explicitly (on the run's
device, or on the host for what stays there: metadata, payload bytes, metrics); one that follows the
default lands on ``meta``, where it has no values, and a dispatch mode records the op that meets it.
The run must also be bit-identical to a plain run. On a machine with a GPU the same runs go to
``cuda`` (``make gpu-check`` runs the main job there); under the CUDA emulator
(fl/test_device_emulated.py) every fedkernels op of the loop runs its CUDA kernel.
"""

from __future__ import annotations

import traceback

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from fedkernels.fl import RunConfig, Server
from fedkernels.fl.device import DeviceUnavailable, resolve_device
from fedkernels.fl.registry import make_strategy
from python_tests.support.fl_data import tiny_clients
from python_tests.support.fl_device_runs import algorithm_names, run_setting, setting, short_run

pytestmark = pytest.mark.cpu_path("the loop's tensor placement; the emulated run is fl/test_device_emulated.py")


class DeviceRecorder(TorchDispatchMode):
    """Records the devices of every op's tensor arguments; an op that meets a ``meta`` tensor is
    recorded with the loop frame that called it, then fails (a meta tensor has no values to go on)."""

    def __init__(self) -> None:
        super().__init__()
        self.devices: set[str] = set()
        self.misplaced: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        devs = {t.device.type for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        self.devices |= devs
        if "meta" in devs:
            frames = [f for f in traceback.extract_stack() if "/fedkernels/" in f.filename]
            where = f"{frames[-1].filename.split('/fedkernels/')[-1]}:{frames[-1].lineno}" if frames else "?"
            self.misplaced.append(f"{func} at {where}")
        return func(*args, **kwargs)


@pytest.mark.parametrize("name", algorithm_names())
def test_every_tensor_of_the_loop_is_placed_on_the_run_device(name: str) -> None:
    data = setting(name)
    plain = run_setting(data)
    recorder = DeviceRecorder()
    try:
        with torch.device("meta"), recorder:  # the default device is not the run's device
            placed = run_setting(data, device="cpu")
    except Exception as e:  # the first misplaced tensor stops the run; the recorder says where
        pytest.fail(f"{name}: {type(e).__name__}: {e}\nops that met a meta tensor: {recorder.misplaced[:5]}")
    assert recorder.misplaced == [], recorder.misplaced[:5]
    assert recorder.devices == {"cpu"}
    assert placed.state.keys() == plain.state.keys()
    for k in plain.state:
        assert torch.equal(placed.state[k], plain.state[k]), k
    assert placed.metrics == plain.metrics and placed.federated == plain.federated


def test_recorder_catches_a_tensor_made_on_the_default_device() -> None:
    """The check above can fail: a strategy that makes a tensor without naming a device is caught."""
    recorder = DeviceRecorder()
    with pytest.raises(Exception), torch.device("meta"), recorder:  # noqa: B017  (any failure will do)
        state = {"w": torch.ones(3, device="cpu")}
        _ = state["w"] + torch.zeros(3)  # the bug: no device, so the default (meta) one
        float(state["w"].sum())
    assert recorder.misplaced and "add" in recorder.misplaced[0]


def test_a_run_resolves_its_device_before_building_anything() -> None:
    clients = tiny_clients(2, per_client=8)
    strategy = make_strategy("fedavg", hidden=[4])
    with pytest.raises(ValueError, match="device must be"):
        Server(strategy, clients, 16, 8, RunConfig(rounds=1, clients_per_round=1, device="tpu"))
    if not torch.cuda.is_available():
        with pytest.raises(DeviceUnavailable, match="no CUDA GPU"):
            Server(strategy, clients, 16, 8, RunConfig(rounds=1, clients_per_round=1, device="cuda"))


@pytest.mark.parametrize("spec", ["cpu", "CPU", torch.device("cpu"), None])
def test_resolve_device_cpu(spec) -> None:
    if spec == "CPU":
        with pytest.raises(ValueError, match="device must be"):
            resolve_device(spec)
        return
    assert resolve_device(spec) == torch.device("cpu")


@pytest.mark.parametrize("spec", ["cuda", "cuda:0", "cuda:7", torch.device("cuda", 1)])
def test_resolve_device_cuda_without_a_gpu_names_the_problem(spec) -> None:
    if torch.cuda.is_available() and torch.cuda.device_count() > 7:
        pytest.skip("this machine has every GPU named here")
    if torch.cuda.is_available():
        if spec in ("cuda", "cuda:0"):
            assert resolve_device(spec).type == "cuda"
        else:
            with pytest.raises(DeviceUnavailable, match="GPU"):
                resolve_device(spec)
        return
    with pytest.raises(DeviceUnavailable, match="no CUDA GPU"):
        resolve_device(spec)


@pytest.mark.parametrize("spec", ["gpu", "cuda:-1", "mps", "xla", "cuda:x", 3, 1.5])
def test_resolve_device_refuses_other_spellings(spec) -> None:
    with pytest.raises(ValueError, match="device"):
        resolve_device(spec)


@pytest.mark.parametrize("name", ["fedavg", "fedss", "fedmlh"])
def test_bf16_autocast_trains_in_mixed_precision_and_keeps_float32_state(name: str) -> None:
    """Autocast changes the forward pass only: the state stays float32 and finite, the run differs
    from the float32 run (bf16 products), and it still ranks the tiny test set about as well."""
    full, mixed = short_run(name), short_run(name, autocast="bf16")
    assert {k: v.dtype for k, v in mixed.state.items()} == {k: v.dtype for k, v in full.state.items()}
    assert all(torch.isfinite(v).all() for v in mixed.state.values() if v.is_floating_point())
    assert any(not torch.equal(mixed.state[k], full.state[k]) for k in full.state if full.state[k].is_floating_point())
    assert abs(mixed.metrics["P@1"] - full.metrics["P@1"]) <= 0.25


def test_cli_refuses_a_missing_gpu_before_reading_any_data(tmp_path, monkeypatch, capsys) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    import fedkernels_cli as cli
    from fedkernels.experiments import preparation

    def no_reading(*args, **kwargs):
        raise AssertionError("data was read before the device was checked")

    monkeypatch.setattr(preparation, "load_dataset", no_reading)
    rc = cli.main(["run", "--dataset", "synthetic", "--device", "cuda:1", "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "--device" in err and "no CUDA GPU" in err
    assert not (tmp_path / "out").exists()


def test_cli_refuses_an_unknown_autocast(tmp_path, capsys) -> None:
    import fedkernels_cli as cli

    rc = cli.main(["run", "--demo", "--autocast", "fp8", "--output", str(tmp_path / "out")])
    assert rc == 2 and "--autocast" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["fedss", "fedalc"])
def test_a_checkpoint_resumes_on_the_run_device(tmp_path, name: str) -> None:
    """Checkpoints hold host tensors: a run resumed from one (here with the default device moved
    away, as on a GPU machine) places the loaded state on its device and ends where an
    uninterrupted run ends."""
    from python_tests.support.fl_device_runs import NUM_CLIENTS, SMALL

    data = setting(name)
    ckpt = str(tmp_path / "run.ckpt")

    def server(rounds: int, checkpoint: str | None) -> Server:
        config = RunConfig(rounds=rounds, clients_per_round=NUM_CLIENTS, seed=1, checkpoint=checkpoint, device="cpu")
        strategy = make_strategy(name, **SMALL[name])
        return Server(strategy, data.clients, 6, data.clients[0].num_classes, config)

    whole = server(2, None)
    whole.run()
    server(1, ckpt).run()
    with torch.device("meta"):
        resumed = server(2, ckpt)  # loads round 1 from the file
        assert resumed.round == 1
        resumed.run()
    for k, v in whole.state.items():
        assert resumed.state[k].device.type == "cpu" and torch.equal(resumed.state[k], v), k
