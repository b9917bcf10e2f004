"""The batched pass (fedkernels.fl.batched) on the run's device, under autocast and DP-SGD off the host.

No GPU here, so the device is proven the way the rest of the loop proves it (fl/test_device.py,
fl/test_device_emulated.py): (1) with torch's *default* device set to ``meta`` while the run names
``cpu``, every tensor the batched pass makes must be placed explicitly (a tensor that follows the
default lands on ``meta`` and the run fails), and the run must equal the plain batched run bit for bit;
(2) under ``pytest --emulate-cuda`` every fedkernels op of a batched run runs its CUDA kernel, and the
run equals the CPU-kernel batched run and, within float rounding, the sequential loop; (3) the pass runs
with every tensor on ``meta``, a device that is not the host: a host tensor it made itself (a hard-coded
``cpu`` buffer, a host draw not moved) meets a device tensor and fails, as it would on a GPU (main's pass
failed so in the Gram form and DP-SGD). The transport's choice (which rounds take the pass, on which
device) is checked directly on its clients.

Autocast runs for real on the CPU (bfloat16 autocast exists there too): the pass's matrix products
run in bfloat16 and its uploads equal the sequential loop's within bfloat16 rounding (``BF16_TOL``).
That bound is as wide as autocast's own effect (measured: the float32 pass lands as near the sequential
autocast loop as the autocast pass does), so the products' dtype is what shows autocast is applied.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from fedkernels.fl import FedAvg, FedAwS, PartialExchange, RunConfig, Server, TrainConfig, batched
from fedkernels.fl.client import LocalClient
from fedkernels.fl.server import InProcessTransport
from python_tests import conftest
from python_tests.support.fl_data import one_label_clients, tiny_clients

SIZES = (3, 17, 40, 9)  # clients of different lengths: the pass drops them one by one
# bfloat16 keeps 8 significant bits: one rounding is up to 2^-9 relative. The pass casts the products'
# inputs as the sequential loop does but rounds at a few other points (vmap's linear adds the bias after
# the bf16 product, in float32, where the loop's addmm rounds its bf16 output), so each step's gradient
# may differ by bf16 roundings; Adam turns such a difference in a near-zero gradient into up to 2 lr on
# that entry. Hence a bound on the whole tensor's difference (Frobenius norm), relative to its norm.
BF16_TOL = 3e-2
# float32 rounding of another summation order (the batched pass's and the loop's; torch's matmul order
# also follows its thread count, which differs inside the full suite), carried through two rounds of
# local training, relative to each tensor's largest magnitude. A wrong client or step is off by orders more.
FP32_TOL = 1e-3


def _clients(one_label: bool = False) -> list:
    make = one_label_clients if one_label else tiny_clients
    return [c.rows(torch.arange(n)) for c, n in zip(make(len(SIZES), per_client=40), SIZES, strict=True)]


def _close(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], rel: float, norm: bool = False) -> None:
    """Every tensor of ``got`` within ``rel`` of ``want``'s: its largest difference relative to its largest
    magnitude, or (``norm``) the norm of the difference relative to its norm."""
    assert sorted(got) == sorted(want)
    for n, w in want.items():
        if not w.is_floating_point():
            assert torch.equal(got[n], w), n
            continue
        if not w.numel():
            continue
        if norm:
            assert float((got[n] - w).norm()) <= rel * max(float(w.norm()), 1e-30), n
        else:
            assert float((got[n] - w).abs().max()) <= rel * max(float(w.abs().max()), 1e-30), n


class _Spy:
    """Counts ``train_batched`` calls (the pass taken) and the clients each trained."""

    def __init__(self, monkeypatch) -> None:
        self.calls: list[int] = []
        real = batched.train_batched
        monkeypatch.setattr(batched, "train_batched", lambda p, *a, **k: self.calls.append(len(p)) or real(p, *a, **k))


# ---- the transport's choice ---------------------------------------------------------------------


def _transport(device: str, train: TrainConfig) -> InProcessTransport:
    strategy = FedAvg(hidden=(8,))
    return InProcessTransport([LocalClient(strategy, d, train, device) for d in tiny_clients(2)], None, batch=True)


@pytest.mark.parametrize("device", ["cpu", "cuda", "cuda:1"])
@pytest.mark.parametrize("autocast", ["off", "bf16"])
def test_the_pass_runs_on_any_device_and_under_autocast(device, autocast):
    # LocalClient needs no GPU to be made (its data is pinned only where CUDA exists)
    assert _transport(device, TrainConfig(autocast=autocast)).batchable([0, 1])


@pytest.mark.parametrize("device, batched_dp", [("cpu", False), ("cuda", True)])
def test_dp_sgd_takes_the_pass_off_the_host_only(device, batched_dp):
    """DP-SGD's per-example gradients: one vmap on a GPU, the loop's backward passes on the CPU (cheaper
    there: bench/fl/fl_batched.py)."""
    assert _transport(device, TrainConfig(dp_sample_clip=1.0, dp_sample_noise=1.0)).batchable([0, 1]) is batched_dp


def test_clients_on_two_devices_keep_the_sequential_loop():
    strategy, train = FedAvg(hidden=(8,)), TrainConfig()
    ends = [LocalClient(strategy, d, train, dev) for d, dev in zip(tiny_clients(2), ["cpu", "cuda"], strict=True)]
    assert not InProcessTransport(ends, None, batch=True).batchable([0, 1])


def test_the_pass_refuses_tensors_on_two_devices():
    strategy = FedAvg(hidden=(8,))
    clients, train = tiny_clients(2), TrainConfig()
    state = strategy.init_state(16, 8, 0)
    problems = [strategy.local_problem(state, d, train, 0, c) for c, d in enumerate(clients)]
    with pytest.raises(ValueError, match=r"problems\[1\]\.data\.x is on meta"):
        batched.train_batched(problems, [clients[0], clients[1].to("meta")], train)


def test_batched_client_updates_moves_data_and_downloads_to_the_clients_device():
    """The clients' data and downloads go to their device before the problems are built (here ``meta``,
    stopped at the first problem: meta tensors have no values to train on)."""
    seen = []
    strategy = FedAvg(hidden=(8,))

    def stop(down, data, config, round, seed):
        seen.append({data.x.device.type, data.indptr.device.type, *(t.device.type for t in down.values())})
        raise StopIteration

    strategy.local_problem = stop  # type: ignore[method-assign]
    clients = tiny_clients(2)
    state = strategy.init_state(16, 8, 0)
    downloads = {c: strategy.client_payload(state, c, None, 0, 0) for c in range(2)}
    with pytest.raises(StopIteration):
        batched.batched_client_updates(
            strategy, dict(enumerate(clients)), TrainConfig(), downloads, 0, {0: 1, 1: 2}, torch.device("meta")
        )
    assert seen == [{"meta"}]
    assert all(d.device.type == "cpu" for d in clients)  # the clients' own data stays where it was
    assert all(t.device.type == "cpu" for t in downloads[0].values())


# ---- placement: every tensor of the pass on the run's device --------------------------------------


class _Placement(TorchDispatchMode):
    """The devices of every op's tensors; an op that meets a ``meta`` tensor is recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.devices: set[str] = set()
        self.misplaced: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        devs = {t.device.type for t in tree_leaves((args, kwargs or {})) if isinstance(t, torch.Tensor)}
        self.devices |= devs
        if "meta" in devs:
            self.misplaced.append(str(func))
        return func(*args, **(kwargs or {}))


RUNS = {
    "fedavg-sgd-gram": (lambda: FedAvg(hidden=(8,)), False, TrainConfig(epochs=2, batch_size=8, lr=0.3)),
    "fedavg-adam-dense": (
        lambda: FedAvg(hidden=(8,), loss="softmax"),
        False,
        TrainConfig(epochs=1, batch_size=6, lr=0.01, optimizer="adam"),
    ),
    "fedaws-sgd": (lambda: FedAwS(dim=4, hidden=(8,), k=2), True, TrainConfig(epochs=2, batch_size=6, lr=0.2)),
    "partial-adam": (
        lambda: PartialExchange(fraction=0.5, hidden=(8,), keep_unreceived=False),
        False,
        TrainConfig(epochs=1, batch_size=8, lr=0.01, optimizer="adam"),
    ),
    "fedavg-bf16": (
        lambda: FedAvg(hidden=(8,)),
        False,
        TrainConfig(epochs=2, batch_size=8, lr=0.3, autocast="bf16"),
    ),
}


def _server(name: str, batch: bool, clients=None) -> Server:
    make, one_label, train = RUNS[name]
    clients = _clients(one_label) if clients is None else clients
    cfg = RunConfig(rounds=2, clients_per_round=len(clients), seed=5, train=train, batch_clients=batch, device="cpu")
    return Server(make(), clients, 16, 8, cfg)


@pytest.mark.cpu_path("the pass's tensor placement; the emulated run is below")
@pytest.mark.parametrize("name", list(RUNS))
def test_every_tensor_of_the_pass_is_placed_on_the_run_device(name, monkeypatch):
    spy = _Spy(monkeypatch)
    plain = _server(name, True)
    plain.run()
    clients = _clients(RUNS[name][1])  # made before the default device moves away
    recorder = _Placement()
    try:
        with torch.device("meta"), recorder:
            placed = _server(name, True, clients)
            placed.run()
    except Exception as e:  # the first misplaced tensor stops the run
        pytest.fail(f"{name}: {type(e).__name__}: {e}\nops that met a meta tensor: {recorder.misplaced[:5]}")
    assert spy.calls == [len(SIZES)] * 4  # both runs, both rounds: the batched pass, every client at once
    assert recorder.misplaced == [] and recorder.devices == {"cpu"}
    for k, v in plain.state.items():
        assert torch.equal(placed.state[k], v), k


@pytest.mark.cpu_path("the pass's tensor placement")
def test_batched_dp_sgd_places_every_tensor():
    """DP-SGD's batched steps (the GPU's path) draw on host generators and move the draws to the device."""
    strategy = FedAvg(hidden=(8,))
    clients = _clients()
    train = TrainConfig(epochs=1, batch_size=6, lr=0.05, dp_sample_clip=0.3, dp_sample_noise=0.7, dp_sample_seeded=True)
    state = strategy.init_state(16, 8, 0)

    def uploads():
        problems = [strategy.local_problem(state, d, train, 0, 11 + c) for c, d in enumerate(clients)]
        return batched.train_batched(problems, clients, train)

    plain = uploads()
    recorder = _Placement()
    with torch.device("meta"), recorder:
        placed = uploads()
    assert recorder.misplaced == []
    for p, q in zip(placed, plain, strict=True):
        for n in q:
            assert torch.equal(p[n], q[n]), n


def _on(device: str, problem, data):
    """A problem and its client's data with every tensor on ``device`` (the problem built on the host)."""
    import dataclasses

    move = {n: t.to(device) for n, t in problem.params.items()}
    consts = {n: t.to(device) for n, t in problem.consts.items()}
    p = dataclasses.replace(
        problem,
        params=move,
        consts=consts,
        targets=problem.targets.to(device),
        row_weight=problem.row_weight.to(device),
    )
    return p, data.to(device)


ON_META = {
    "fedavg-sgd-gram": (lambda: FedAvg(hidden=(8,)), False, TrainConfig(epochs=2, batch_size=6, lr=0.3)),
    "fedaws-sgd-gram": (lambda: FedAwS(dim=4, hidden=(8,), k=2), True, TrainConfig(epochs=2, batch_size=6, lr=0.2)),
    "fedavg-adam": (
        lambda: FedAvg(hidden=(8,), loss="softmax"),
        False,
        TrainConfig(epochs=2, batch_size=6, lr=0.01, optimizer="adam"),
    ),
    "fedaws-adam-wd": (
        lambda: FedAwS(dim=4, hidden=(8,), k=2),
        True,
        TrainConfig(epochs=1, batch_size=6, lr=0.01, optimizer="adam", weight_decay=0.1),
    ),
    "fedavg-dp-sgd": (
        lambda: FedAvg(hidden=(8,)),
        False,
        TrainConfig(epochs=1, batch_size=6, lr=0.05, dp_sample_clip=0.3, dp_sample_noise=0.7, dp_sample_seeded=True),
    ),
}


def _meta_features(x: torch.Tensor):
    """The Gram-form view of host features ``x`` with its tensors moved to ``meta`` (made on the host:
    it reads the features' nonzero count, which ``meta`` has no values for)."""
    feats = batched._GramFeatures(x)
    for name in ("dense", "dense_t", "x", "x_t"):
        setattr(feats, name, getattr(feats, name).to("meta"))
    return feats


@pytest.mark.cpu_path("the pass's tensor placement")
@pytest.mark.parametrize("name", list(ON_META))
def test_the_pass_trains_on_a_device_that_is_not_the_host(name, monkeypatch):
    """The pass on ``meta``, a device that is not the host and has no values: any host tensor the pass
    made (a hard-coded ``cpu``, a host draw not moved) would meet a device tensor and fail, as on a GPU.
    The host's part (the shuffles and Poisson draws on the clients' generators) still runs; the uploads
    come back on the device, in the host run's shapes."""
    make, one_label, train = ON_META[name]
    strategy, clients = make(), _clients(one_label)
    state = strategy.init_state(16, 8, 0)
    downloads = [
        strategy.client_payload(state, c, strategy.client_request(d, 0, 0) if one_label else None, 0, 0)
        for c, d in enumerate(clients)
    ]
    problems = [
        strategy.local_problem(p, d, train, 0, 11 + c) for c, (p, d) in enumerate(zip(downloads, clients, strict=True))
    ]
    host = batched.train_batched(problems, clients, train)
    moved = [_on("meta", p, d) for p, d in zip(problems, clients, strict=True)]
    feats = {id(m.x): _meta_features(d.x) for (_, m), d in zip(moved, clients, strict=True)}
    gram = []
    monkeypatch.setattr(batched, "gram_features", lambda x: gram.append(1) or feats[id(x)])
    got = batched.train_batched([p for p, _ in moved], [d for _, d in moved], train)
    assert bool(gram) == name.endswith("gram")  # the Gram form ran where it applies
    for g, h in zip(got, host, strict=True):
        assert sorted(g) == sorted(h)
        assert all(g[n].device.type == "meta" and g[n].shape == h[n].shape for n in h)


@pytest.mark.cpu_path("the loop's tensor placement")
def test_sequential_dp_sgd_places_every_tensor():
    """The sequential DP-SGD, which the batched one must equal on a GPU: its draws are made on the host
    generators and its noise moved to the parameters' device (a host tensor added to a device one fails)."""
    strategy = FedAvg(hidden=(8,))
    clients = _clients()[:2]
    train = TrainConfig(epochs=1, batch_size=6, lr=0.05, dp_sample_clip=0.3, dp_sample_noise=0.7, dp_sample_seeded=True)
    state = strategy.init_state(16, 8, 0)
    plain = [strategy.client_update(state, d, train, 0, 11 + c) for c, d in enumerate(clients)]
    recorder = _Placement()
    with torch.device("meta"), recorder:
        placed = [strategy.client_update(state, d, train, 0, 11 + c) for c, d in enumerate(clients)]
    assert recorder.misplaced == []
    for p, q in zip(placed, plain, strict=True):
        for n in q:
            assert torch.equal(p[n], q[n]), n


# ---- autocast ------------------------------------------------------------------------------------


class _Products(TorchDispatchMode):
    """The dtypes the matrix products of a call run in."""

    PRODUCTS = ("mm", "bmm", "addmm", "baddbmm", "matmul", "linear")

    def __init__(self) -> None:
        super().__init__()
        self.dtypes: set[torch.dtype] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.__name__.split(".")[0] in self.PRODUCTS:
            self.dtypes |= {t.dtype for t in tree_leaves(args) if isinstance(t, torch.Tensor)}
        return func(*args, **(kwargs or {}))


@pytest.mark.cpu_path("autocast on the CPU; no fedkernels op")
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("loss", ["bce", "softmax"])
def test_autocast_pass_equals_the_sequential_autocast_loop(optimizer, loss):
    strategy = FedAvg(hidden=(8,), loss=loss)
    clients = _clients()
    lr = 0.3 if optimizer == "sgd" else 0.01
    train = TrainConfig(epochs=2, batch_size=6, lr=lr, optimizer=optimizer, autocast="bf16")
    state = strategy.init_state(16, 8, 0)
    seeds = [11 + 7 * c for c in range(len(clients))]
    want = [strategy.client_update(state, d, train, 0, s) for d, s in zip(clients, seeds, strict=True)]
    problems = [strategy.local_problem(state, d, train, 0, s) for d, s in zip(clients, seeds, strict=True)]
    products = _Products()
    with products:
        got = batched.train_batched(problems, clients, train)
    assert torch.bfloat16 in products.dtypes  # the pass's products ran in bfloat16 ...
    for g, w in zip(got, want, strict=True):
        assert all(t.dtype == torch.float32 for t in g.values())  # ... its parameters and uploads in float32
        _close(g, w, BF16_TOL, norm=True)
    off = TrainConfig(epochs=2, batch_size=6, lr=lr, optimizer=optimizer)
    plain = _Products()
    with plain:
        batched.train_batched(
            [strategy.local_problem(state, d, off, 0, s) for d, s in zip(clients, seeds, strict=True)], clients, off
        )
    assert torch.bfloat16 not in plain.dtypes  # without autocast: float32 throughout


@pytest.mark.cpu_path("autocast on the CPU; no fedkernels op")
def test_autocast_round_takes_the_pass_and_ends_near_the_sequential_loop(monkeypatch):
    spy = _Spy(monkeypatch)
    fast, slow = _server("fedavg-bf16", True), _server("fedavg-bf16", False)
    fast.run()
    assert spy.calls == [len(SIZES)] * 2
    slow.run()
    assert spy.calls == [len(SIZES)] * 2  # the sequential run did not batch
    _close(fast.state, slow.state, BF16_TOL, norm=True)
    assert all(v.dtype == torch.float32 for v in fast.state.values() if v.is_floating_point())


# ---- the emulated CUDA run -----------------------------------------------------------------------


@pytest.mark.emu_direct
@pytest.mark.skipif(not conftest.EMULATING, reason="needs the CUDA emulator (pytest --emulate-cuda)")
@pytest.mark.parametrize("name", ["fedavg-sgd-gram", "fedaws-sgd", "partial-adam"])
def test_emulated_cuda_batched_run_equals_the_cpu_batched_run_and_the_sequential_loop(name, monkeypatch):
    """Every fedkernels op of the round (aggregation, FedAwS's spreadout step) on its CUDA kernel: the
    batched run equals the CPU-kernel batched run bit for bit (these kernels compute what the CPU ones do,
    docs/emulator.md) and the emulated sequential run within float32 rounding (``FP32_TOL``)."""
    from emu import cuda_emulator

    spy = _Spy(monkeypatch)
    cpu = _server(name, True)
    cpu.run()
    with cuda_emulator.recording() as launches, cuda_emulator.routed_to_cuda():
        emu = _server(name, True)
        emu.run()
        seq = _server(name, False)
        seq.run()
    assert launches, f"{name}: no CUDA kernel launched"
    assert spy.calls == [len(SIZES)] * 4  # the two batched runs, two rounds each
    for k, v in cpu.state.items():
        assert torch.equal(emu.state[k], v), k
    _close(emu.state, seq.state, FP32_TOL)
