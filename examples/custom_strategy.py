"""A federated algorithm of your own, written against ``fedkernels.fl.Strategy`` and run by the loop.

``ClippedFedAvgM``: clients train the whole model (as FedAvg); the server measures every client's
update with the compiled ``fedkernels.delta_norms`` (one pass over all tensors, no differences
allocated), clips each update to the median norm of the round (so one client cannot drag the model
far), averages the clipped updates weighted by example counts and applies them with server momentum.

The loop gives it the rest: client sampling, safetensors payloads checked against ``upload_spec``,
real byte counts, failure handling, checkpoints. It runs on the synthetic power-law data.

    python examples/custom_strategy.py --rounds 8
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F

import fedkernels
from fedkernels.data import fedmlh_partition, load_dataset, make_clients
from fedkernels.fl import ClientData, ClientResult, PayloadSpec, RunConfig, Server, State, Strategy, TrainConfig
from fedkernels.fl.local import train_local
from fedkernels.fl.models import load_state, mlp, state_of
from fedkernels.fl.payload import Payload, state_spec
from fedkernels.fl.seeding import generator
from fedkernels.metrics import precision_at_k


class ClippedFedAvgM(Strategy):
    """FedAvg with median-norm clipping of client updates and server momentum.

    Args:
        hidden: hidden widths of the MLP.
        momentum: server momentum (0 gives clipped FedAvg).
        server_lr: step size of the averaged update on the server.
    """

    name = "ClippedFedAvgM"

    def __init__(self, hidden: tuple[int, ...] = (64,), momentum: float = 0.5, server_lr: float = 1.0) -> None:
        self.hidden, self.momentum, self.server_lr = tuple(hidden), momentum, server_lr
        self.dims: tuple[int, int] | None = None
        self.last_norms: list[float] = []

    def init_state(self, num_features: int, num_classes: int, seed: int) -> State:
        self.dims = (num_features, num_classes)
        model = state_of(mlp(num_features, num_classes, self.hidden, seed))
        return {**model, **{f"velocity.{k}": torch.zeros_like(v) for k, v in model.items()}}

    def _weights(self, state: State) -> State:
        return {k: v for k, v in state.items() if not k.startswith("velocity.")}

    def client_payload(self, state: State, client_id: int, request: Payload | None, round: int, seed: int) -> Payload:
        return self._weights(state)  # the velocity stays on the server

    def client_update(self, payload: Payload, data: ClientData, config: TrainConfig, round: int, seed: int) -> Payload:
        model = load_state(mlp(*self.dims, self.hidden), payload)
        train_local(
            list(model.parameters()),
            lambda b: F.binary_cross_entropy_with_logits(model(b.x), b.dense_labels()),
            data,
            config,
            generator(seed, "shuffle"),
        )
        return state_of(model)

    def upload_spec(self, state: State, payload_sent: Payload) -> PayloadSpec:
        return PayloadSpec(state_spec(self._weights(state)))

    def aggregate(self, state: State, results: list[ClientResult], round: int) -> State:
        names = list(self._weights(state))
        old = [state[k] for k in names]
        norms = [
            float(fedkernels.delta_norms([r.payload[k] for k in names], old).square().sum().sqrt()) for r in results
        ]
        bound = float(torch.tensor(norms).median())
        self.last_norms = norms
        total = float(sum(r.num_examples for r in results))
        new: State = {}
        for i, k in enumerate(names):
            step = torch.zeros_like(old[i])
            for r, n in zip(results, norms, strict=True):
                scale = min(1.0, bound / n) if n > 0 else 0.0
                step += (r.payload[k] - old[i]) * (scale * r.num_examples / total)
            v = self.momentum * state[f"velocity.{k}"] + step
            new[k], new[f"velocity.{k}"] = old[i] + self.server_lr * v, v
        return new

    @torch.no_grad()
    def predict_topk(self, state: State, x: torch.Tensor, k: int) -> torch.Tensor:
        return load_state(mlp(*self.dims, self.hidden), self._weights(state))(x).topk(k, dim=1).indices


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.set_num_threads(1)
    ds = load_dataset("synthetic", seed=args.seed, num_samples=2000, num_features=32, num_classes=100)
    shards = fedmlh_partition(ds.train.indptr, ds.train.indices, ds.num_classes, num_clients=8, num_frequent=10)
    clients = make_clients(ds.train.x, shards, ds.num_classes)
    strategy = ClippedFedAvgM(hidden=(64,))
    cfg = RunConfig(
        rounds=args.rounds,
        clients_per_round=4,
        seed=args.seed,
        train=TrainConfig(epochs=2, batch_size=32, lr=0.01, optimizer="adam"),
    )
    server = Server(strategy, clients, ds.num_features, ds.num_classes, cfg)
    test = ds.test
    counts = torch.bincount(ds.train.indices, minlength=ds.num_classes)
    prior = precision_at_k(torch.full((len(test), 1), int(counts.argmax())), test.indptr, test.indices, 1)

    def after_round(rec) -> None:
        p1 = precision_at_k(strategy.predict_topk(server.state, test.x, 1), test.indptr, test.indices, 1)
        norms = ", ".join(f"{n:.2f}" for n in strategy.last_norms)
        print(
            f"round {rec.round + 1}: clients {rec.clients}, update norms [{norms}], "
            f"{(rec.bytes_up + rec.bytes_down) / 1e6:.2f} MB, test P@1 {p1:.3f}",
            flush=True,
        )

    initial = dict(server.state)
    server.run(None, after_round)
    first = precision_at_k(strategy.predict_topk(initial, test.x, 1), test.indptr, test.indices, 1)
    final = precision_at_k(strategy.predict_topk(server.state, test.x, 1), test.indptr, test.indices, 1)
    print(
        f"{strategy.name}: test P@1 {first:.3f} (untrained) -> {final:.3f} after {args.rounds} rounds "
        f"(label prior P@1 {prior:.3f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
