"""The batched local-training pass (fedkernels.fl.batched) against the sequential loop it replaces.

The reference is each strategy's own ``client_update`` (``train_local``: one client at a time, torch.optim),
run on the same download and seed: the batched pass must give every client the same upload up to float
rounding, for clients of different sizes (so they stop at different steps), short last batches, SGD and
Adam, weight decay, both FedAvg losses, FedAwS's trained and fixed class embeddings, and partial exchange.
"""

from __future__ import annotations

import pytest
import torch

from fedkernels.fl import FedALCFixed, FedAvg, FedAwS, PartialExchange, RunConfig, Server, TrainConfig, encode
from fedkernels.fl.batched import batched_client_updates, train_batched
from fedkernels.fl.faults import FaultInjector
from fedkernels.fl.payload import encoded_size
from fedkernels.fl.server import InProcessTransport
from python_tests.support.fl_data import one_label_clients, tiny_clients

SIZES = (3, 17, 40, 9)  # clients of different lengths: the batched pass drops them one by one


def _clients(one_label: bool = False, sparse: str = "") -> list:
    """Clients of SIZES rows; ``sparse``: "" dense features, "zeros" about 5% nonzero (dense layout),
    "csr" the same as torch.sparse_csr tensors (both take the sparse-input pass under plain SGD)."""
    make = one_label_clients if one_label else tiny_clients
    out = [c.rows(torch.arange(n)) for c, n in zip(make(len(SIZES), per_client=40), SIZES, strict=True)]
    if sparse:
        g = torch.Generator().manual_seed(3)
        for c in out:
            c.x = c.x * (torch.rand(c.x.shape, generator=g) < 0.05)
            c.x[:, 0] = 0.0  # a feature no sample has
            if sparse == "csr":
                c.x = c.x.to_sparse_csr()
    return out


def _assert_uploads_match(strategy, clients, train: TrainConfig, one_label: bool = False) -> None:
    state = strategy.init_state(16, 8, 0)
    if one_label:  # a FedAwS-like strategy asks for its class row; build each client's download as the server does
        downloads = [
            strategy.client_payload(state, c, strategy.client_request(d, 0, 0), 0, 0) for c, d in enumerate(clients)
        ]
    else:
        downloads = [strategy.client_payload(state, c, None, 0, 0) for c in range(len(clients))]
    seeds = [11 + 7 * c for c in range(len(clients))]
    want = [strategy.client_update(p, d, train, 0, s) for p, d, s in zip(downloads, clients, seeds, strict=True)]
    problems = [strategy.local_problem(p, d, train, 0, s) for p, d, s in zip(downloads, clients, seeds, strict=True)]
    got = train_batched(problems, clients, train)
    for w, g in zip(want, got, strict=True):
        assert list(w) == list(g)  # same tensors, same order (the upload's names)
        for name in w:
            torch.testing.assert_close(g[name], w[name], rtol=1e-4, atol=2e-5)
    assert any(not torch.equal(w[n], downloads[0][n]) for w in want[:1] for n in w if n in downloads[0])  # it trained


@pytest.mark.parametrize(
    "train, loss",
    [
        (TrainConfig(epochs=2, batch_size=8, lr=0.3, optimizer="sgd"), "bce"),
        (TrainConfig(epochs=1, batch_size=5, lr=0.01, optimizer="adam"), "softmax"),
        (TrainConfig(epochs=2, batch_size=16, lr=0.05, optimizer="sgd", weight_decay=0.1), "softmax"),
        (TrainConfig(epochs=2, batch_size=7, lr=0.01, optimizer="adam", weight_decay=0.05), "bce"),
    ],
    ids=["sgd-bce", "adam-softmax", "sgd-wd-softmax", "adam-wd-bce"],
)
def test_fedavg_batched_equals_sequential(train, loss):
    _assert_uploads_match(FedAvg(hidden=(8,), loss=loss), _clients(), train)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])  # the Gram form and the dense pass
@pytest.mark.parametrize("cls", [FedAwS, FedALCFixed])
def test_fedaws_batched_equals_sequential(cls, optimizer):
    kw = {"client_secret": b"0123456789abcdef"} if cls is FedALCFixed else {}
    strategy = cls(dim=4, hidden=(8,), k=2, **kw)
    train = TrainConfig(epochs=2, batch_size=6, lr=0.2 if optimizer == "sgd" else 0.01, optimizer=optimizer)
    _assert_uploads_match(strategy, _clients(one_label=True), train, True)


@pytest.mark.parametrize("sparse, model", [("zeros", "mlp"), ("csr", "embed")])
def test_gram_form_equals_sequential(monkeypatch, sparse, model):
    from fedkernels.fl.batched import _Stack

    taken = []
    real = _Stack.train_gram
    monkeypatch.setattr(_Stack, "train_gram", lambda self, *a: taken.append(a) or real(self, *a))
    train = TrainConfig(epochs=2, batch_size=6, lr=0.3, optimizer="sgd")
    _assert_uploads_match(
        FedAwS(dim=4, hidden=(8,), k=2, model=model, embed_dim=6), _clients(True, sparse), train, True
    )
    _assert_uploads_match(FedAvg(hidden=(8, 8), loss="softmax"), _clients(sparse=sparse), train)
    assert len(taken) == 2  # both went through the Gram form (embed: its input layer has no bias)


def test_dense_pass_for_adam(monkeypatch):
    from fedkernels.fl.batched import _Stack

    monkeypatch.setattr(_Stack, "train_gram", lambda *a: pytest.fail("the Gram form is for plain SGD only"))
    _assert_uploads_match(
        FedAvg(hidden=(8,)), _clients(sparse="zeros"), TrainConfig(epochs=1, batch_size=6, optimizer="adam", lr=0.01)
    )


def test_partial_exchange_batched_equals_sequential():
    _assert_uploads_match(
        PartialExchange(fraction=0.5, hidden=(8, 8)),
        _clients(),
        TrainConfig(epochs=1, batch_size=8, lr=0.01, optimizer="adam"),
    )


def test_samples_without_labels_count_as_in_the_sequential_loss():
    # softmax skips rows without labels (also a batch with none); bce counts them
    clients = _clients()
    empty = clients[1].rows(torch.arange(len(clients[1])))
    empty.indptr = torch.zeros_like(empty.indptr)
    empty.indices = empty.indices[:0]
    for loss in ("softmax", "bce"):
        _assert_uploads_match(
            FedAvg(hidden=(4,), loss=loss), [clients[0], empty, clients[2]], TrainConfig(epochs=1, batch_size=4)
        )


def _run(batch: bool, wrapper=None, rounds: int = 3) -> Server:
    cfg = RunConfig(
        rounds=rounds,
        clients_per_round=4,
        train=TrainConfig(epochs=2, batch_size=8, lr=0.2),
        seed=5,
        batch_clients=batch,
    )
    s = Server(FedAvg(hidden=(8,)), tiny_clients(5), 16, 8, cfg, client_wrapper=wrapper)
    s.run()
    return s


def test_server_batched_equals_sequential_and_counts_the_same_bytes(monkeypatch):
    calls = []
    real = train_batched

    def spy(*a, **k):
        calls.append(len(a[0]))
        return real(*a, **k)

    monkeypatch.setattr("fedkernels.fl.batched.train_batched", spy)
    fast, slow = _run(True), _run(False)
    assert calls == [4, 4, 4]  # every round went through the batched pass, all chosen clients at once
    for k in fast.state:
        torch.testing.assert_close(fast.state[k], slow.state[k], rtol=1e-4, atol=1e-5)
    for a, b in zip(fast.history, slow.history, strict=True):
        assert (a.clients, a.bytes_up, a.bytes_down, a.failed) == (b.clients, b.bytes_up, b.bytes_down, b.failed)


def test_wrapped_endpoints_keep_the_sequential_loop(monkeypatch):
    monkeypatch.setattr("fedkernels.fl.batched.train_batched", lambda *a, **k: pytest.fail("batched a wrapped client"))
    injector = FaultInjector(seed=0)  # no faults: still a wrapped endpoint
    s = _run(True, wrapper=injector, rounds=1)
    assert not s.history[0].failed


def test_batched_uploads_pass_the_round_checks_and_count_exact_bytes():
    # carried uploads get decode's checks on their tensors and are counted at their serialised length
    s = _run(True, rounds=1)
    ref = _run(False, rounds=1)
    assert s.history[0].bytes_up == ref.history[0].bytes_up and s.history[0].bytes_down == ref.history[0].bytes_down
    from fedkernels.fl.round import Carried, Round

    rnd = Round(s.strategy, s.state, 1, [0, 1], 5)
    downs = rnd.carried_downloads({})
    assert all(isinstance(d, Carried) and d.nbytes == len(encode(d.payload)) for d in downs.values())
    nan = {n: torch.full_like(t, float("nan")) for n, t in s.state.items()}
    bad = {0: Carried(nan, encoded_size(nan)), 1: Carried(dict(s.state), 10**12)}
    assert rnd.collect(bad, {0: 1, 1: 1}) == []
    assert "NaN" in rnd.failed[0] and "exceeds" in rnd.failed[1]


def test_carried_uploads_answer_to_the_round_tag():
    # the batched pass tags its uploads as LocalClient does; an untagged or stale carried upload is refused
    s = _run(True, rounds=1)
    from fedkernels.fl.client import ROUND_TAG
    from fedkernels.fl.round import Carried, Round

    rnd = Round(s.strategy, s.state, 3, [0, 1, 2], 5)
    downs = rnd.carried_downloads({})
    up = {n: t.clone() for n, t in downs[0].payload.items()}
    tags = {0: {ROUND_TAG: "3"}, 1: {ROUND_TAG: "2"}, 2: {}}
    got = rnd.collect({c: Carried(up, encoded_size(up, tags[c]), tags[c]) for c in tags}, {0: 1, 1: 1, 2: 1})
    assert [r.client_id for r in got] == [0]
    assert "tagged for round '2'" in rnd.failed[1] and "no round tag" in rnd.failed[2]


@pytest.mark.parametrize("seed", range(4))
def test_encoded_size_is_the_serialised_length(seed):
    g = torch.Generator().manual_seed(seed)
    dtypes = [torch.float32, torch.float16, torch.int64, torch.uint8, torch.float64]
    payload = {
        f"t{i}.{'x' * int(torch.randint(0, 30, (1,), generator=g))}": torch.zeros(
            tuple(int(v) for v in torch.randint(0, 5, (int(torch.randint(0, 3, (1,), generator=g)),), generator=g)),
            dtype=dtypes[i % len(dtypes)],
        )
        for i in range(int(torch.randint(0, 7, (1,), generator=g)))
    }
    assert encoded_size(payload) == len(encode(payload))
    assert encoded_size(payload) == len(encode(payload))  # the cached answer too
    tag = {"fedkernels.round": str(seed * 1000)}
    assert encoded_size(payload, tag) == len(encode(payload, metadata=tag))


def test_strategy_without_a_problem_falls_back():
    transport = InProcessTransport([], None, batch=True)
    assert not transport.batchable([])  # nothing to batch
    from fedkernels.fl import L1Diff

    clients = tiny_clients(2)
    strategy = L1Diff()
    state = strategy.init_state(16, 8, 0)
    downloads = {c: strategy.client_payload(state, c, None, 0, 0) for c in range(2)}
    assert batched_client_updates(strategy, dict(enumerate(clients)), TrainConfig(), downloads, 0, {0: 1, 1: 2}) is None


def test_client_update_replaced_on_the_class_falls_back(monkeypatch):
    from fedkernels.fl.batched import has_local_problem

    assert has_local_problem(FedAvg())

    def crash(self, *a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(FedAvg, "client_update", crash)  # e.g. a test's failing client
    assert not has_local_problem(FedAvg())


def test_structures_must_match():
    clients = tiny_clients(2)
    a, b = FedAvg(hidden=(4,)), FedAvg(hidden=(5,))
    pa = a.local_problem(a.init_state(16, 8, 0), clients[0], TrainConfig(), 0, 0)
    pb = b.local_problem(b.init_state(16, 8, 0), clients[1], TrainConfig(), 0, 0)
    with pytest.raises(ValueError, match="structure"):
        train_batched([pa, pb], clients, TrainConfig())
