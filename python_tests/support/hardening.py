"""Shared pieces of the hardening tests: a small run, client wrappers that misbehave, and a toy
strategy whose uploads carry class ids (to test id ranges and matching lengths through the Server)."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch._dynamo

from fedkernels.fl import (
    ClientData,
    ClientResult,
    FedAvg,
    PayloadSpec,
    RunConfig,
    Server,
    State,
    Strategy,
    TensorSpec,
    TrainConfig,
)
from fedkernels.fl import payload as pl
from fedkernels.fl.client import ClientEndpoint
from fedkernels.fl.seeding import generator
from python_tests.support.fl_data import one_label_clients, tiny_clients

NUM_FEATURES, NUM_CLASSES = 16, 8


def run_config(**kw) -> RunConfig:
    base = dict(rounds=4, clients_per_round=3, train=TrainConfig(epochs=1, batch_size=16, lr=0.3), seed=5)
    base.update(kw)
    return RunConfig(**base)


def make_server(strategy: Strategy | None = None, num_clients: int = 5, wrapper=None, **cfg) -> Server:
    strategy = strategy or FedAvg(hidden=(8,))
    # they need one label per client
    one_label = strategy.name.lower() in ("fedaws", "fedalc", "fedalc-fixed", "fedavg-fixed", "fedavg-positive")
    clients = one_label_clients(num_clients) if one_label else tiny_clients(num_clients)
    return Server(strategy, clients, NUM_FEATURES, NUM_CLASSES, run_config(**cfg), client_wrapper=wrapper)


def snapshot(state: State) -> State:
    return {k: v.clone() for k, v in state.items()}


def same_state(a: State, b: State) -> bool:
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)


class Tampered:
    """A client whose upload bytes pass through ``tamper`` (only for clients in ``bad``)."""

    def __init__(
        self, client_id: int, inner: ClientEndpoint, tamper: Callable[[bytes], bytes | None], bad: set[int]
    ) -> None:
        self.client_id, self.inner, self.tamper, self.bad = client_id, inner, tamper, bad

    def request(self, round: int, seed: int) -> bytes | None:
        return self.inner.request(round, seed)

    def update(self, download: bytes, round: int, seed: int) -> bytes | None:
        up = self.inner.update(download, round, seed)
        return self.tamper(up) if self.client_id in self.bad else up


def tampering(tamper: Callable[[bytes], bytes | None], bad: set[int]):
    """A Server ``client_wrapper`` making clients ``bad`` tamper with their uploads."""
    return lambda cid, inner: Tampered(cid, inner, tamper, bad)


def edit_tensors(edit: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]) -> Callable[[bytes], bytes]:
    """A tamper that decodes the honest upload, edits its tensors and re-encodes them."""
    return lambda up: pl.encode(edit(pl.decode(up)))


class SilentWhereFaulty:
    """Sends nothing exactly where ``injector`` would inject a fault, and is honest elsewhere: the
    survivors-only twin of a faulty run."""

    def __init__(self, injector, client_id: int, inner: ClientEndpoint) -> None:
        self.injector, self.client_id, self.inner = injector, client_id, inner

    def request(self, round: int, seed: int) -> bytes | None:
        return self.inner.request(round, seed)

    def update(self, download: bytes, round: int, seed: int) -> bytes | None:
        if self.injector.fault(round, self.client_id):
            return None
        return self.inner.update(download, round, seed)


class Slow:
    """A client that sleeps ``seconds`` before an honest update."""

    def __init__(self, inner: ClientEndpoint, seconds: float) -> None:
        self.inner, self.seconds = inner, seconds

    def request(self, round: int, seed: int) -> bytes | None:
        return self.inner.request(round, seed)

    def update(self, download: bytes, round: int, seed: int) -> bytes | None:
        time.sleep(self.seconds)
        return self.inner.update(download, round, seed)


class SparseRows(Strategy):
    """A toy sparse-update strategy: a linear model W [p, F]; each client sends the rows of the
    classes it saw (``ids``, unique, in [0, p)) after a few gradient steps, and the server averages
    each row over the clients that sent it. Exists to test id ranges and matching lengths."""

    name = "SparseRows"

    def init_state(self, num_features: int, num_classes: int, seed: int) -> State:
        return {"W": torch.randn(num_classes, num_features, generator=generator(seed, "W")) * 0.1}

    def client_payload(self, state, client_id, request, round, seed):
        return {"W": state["W"]}

    def client_update(self, payload, data: ClientData, config: TrainConfig, round, seed):
        W = payload["W"].clone().requires_grad_(True)
        for _ in range(3):
            loss = torch.nn.functional.binary_cross_entropy_with_logits(data.x @ W.T, data.dense_labels())
            (g,) = torch.autograd.grad(loss, W)
            W = (W - config.lr * g).detach().requires_grad_(True)
        ids = torch.unique(data.indices)
        return {"ids": ids, "rows": W.detach()[ids]}

    def upload_spec(self, state, payload_sent) -> PayloadSpec:
        p, f = state["W"].shape
        return PayloadSpec(
            {
                "ids": TensorSpec(torch.int64, ("n",), min_value=0, max_value=p, unique=True),
                "rows": TensorSpec(torch.float32, ("n", f)),
            }
        )

    def aggregate(self, state, results: list[ClientResult], round) -> State:
        W = state["W"].clone()
        total = torch.zeros(W.shape[0], 1)
        acc = torch.zeros_like(W)
        for r in results:
            acc.index_add_(0, r.payload["ids"], r.payload["rows"] * r.num_examples)
            total.index_add_(0, r.payload["ids"], torch.full((len(r.payload["ids"]), 1), float(r.num_examples)))
        sent = total.squeeze(1) > 0
        W[sent] = acc[sent] / total[sent]
        return {"W": W}

    def predict_topk(self, state, x, k):
        return (x @ state["W"].T).topk(k, dim=1).indices


class SparseRowsAsking(SparseRows):
    """SparseRows whose clients first ask for the rows of their own classes (a ``client_request``,
    as FedSS asks for its sampled classes); the download holds only those rows."""

    name = "SparseRowsAsking"

    def client_request(self, data, round, seed):
        return {"want": torch.unique(data.indices)}

    def request_spec(self, state) -> PayloadSpec:
        return PayloadSpec(
            {"want": TensorSpec(torch.int64, (None,), min_value=0, max_value=state["W"].shape[0], unique=True)}
        )

    def client_payload(self, state, client_id, request, round, seed):
        return {"ids": request["want"], "W": state["W"][request["want"]]}

    def client_update(self, payload, data: ClientData, config: TrainConfig, round, seed):
        W = torch.zeros(int(payload["ids"].max()) + 1 if len(payload["ids"]) else 0, data.x.shape[1])
        W[payload["ids"]] = payload["W"]
        full = {"W": torch.cat([W, torch.zeros(max(0, data.num_classes - len(W)), W.shape[1])])}
        return super().client_update(full, data, config, round, seed)

    def upload_spec(self, state, payload_sent) -> PayloadSpec:
        spec = super().upload_spec(state, payload_sent)
        spec.required["ids"] = TensorSpec(torch.int64, ("n",), min_value=0, max_value=state["W"].shape[0], unique=True)
        return spec
