"""What the Flower test and the in-process reference run share: strategies by name, data, config."""

from __future__ import annotations

import torch

from fedkernels.fl import ClientData, RunConfig, Strategy, TrainConfig
from fedkernels.fl.registry import make_strategy as registered
from python_tests.support.fl_data import one_label_clients, tiny_clients

NUM_FEATURES, NUM_CLASSES = 16, 8


# Small options for the tiny data; a registered strategy not listed here runs with its defaults.
CLIENT_SECRET = b"test clients' shared secret"  # FedALC: same secret, same run (the seed cannot give it)
SMALL = {
    "fedavg": dict(hidden=(8,)),
    "fedmlh": dict(num_tables=2, num_buckets=4, hidden=(8,)),
    # stateless clients: the loops here (Flower, private rounds, checkpoints) carry no client memory
    "partialexchange": dict(fraction=0.5, hidden=(8,), keep_unreceived=False),
    "fedss": dict(num_negatives=3, embed_dim=8, hidden=(8,)),
    "fedss-negonly": dict(num_negatives=3, embed_dim=8, hidden=(8,)),
    "fedss-posonly": dict(num_negatives=3, embed_dim=8, hidden=(8,)),
    "fedss-fullsoftmax": dict(embed_dim=8, hidden=(8,)),
    "l1diff": dict(gamma=0.01, hidden=(8,)),
    "l1diffnetwork": dict(num_clients=5, k=2, gamma=0.01, hidden=(8,)),
    "fedaws": dict(dim=8, hidden=(8,), k=2),
    "fedalc": dict(dim=8, hidden=(8,), k=2, client_secret=CLIENT_SECRET),
    "fedalc-fixed": dict(dim=8, hidden=(8,), k=2, fixed_steps=20, client_secret=CLIENT_SECRET),
    "fedavg-fixed": dict(dim=8, hidden=(8,)),
    "fedavg-positive": dict(dim=8, hidden=(8,)),
}


def make_strategy(name: str) -> Strategy:
    """A registered strategy by name (``fedkernels.fl.registry``), small for the tiny data."""
    return registered(name, **SMALL.get(name.lower(), {}))


ONE_LABEL = ("fedaws", "fedalc", "fedalc-fixed", "fedavg-fixed", "fedavg-positive")  # one class per client


def shared_one_label_clients(num_clients: int, seed: int, per_client: int = 20) -> list[ClientData]:
    """Client i holds class i; its first 4 rows are also client i+1's (an instance with two labels),
    so FedALC's label sets have co-occurrences and its pair weights are not all 1."""
    base = one_label_clients(num_clients, per_client, seed)
    out = []
    for i, d in enumerate(base):
        x = d.x.clone()
        if i + 1 < num_clients:
            x[:4] = base[i + 1].x[:4]
        out.append(ClientData(x, d.indptr, d.indices, d.num_classes))
    return out


def client_data(partition: int, num_clients: int, strategy: str = "fedavg") -> ClientData:
    """Client ``partition``'s training data for ``strategy`` (one-label data for the FedAwS family)."""
    if strategy.lower() in ONE_LABEL:
        return shared_one_label_clients(num_clients, seed=3)[partition]
    return tiny_clients(num_clients, seed=3)[partition]


def held_out_data(partition: int, num_clients: int, strategy: str = "fedavg") -> ClientData:
    """Client ``partition``'s held-out data (federated evaluation); sizes differ between clients."""
    if strategy.lower() in ONE_LABEL:
        return one_label_clients(num_clients, 6 + 3 * partition, seed=11)[partition]
    return tiny_clients(num_clients, 6 + 3 * partition, seed=11)[partition]


def run_config(
    rounds: int, clients_per_round: int, seed: int, timeout: float | None = None, checkpoint: str | None = None
) -> RunConfig:
    return RunConfig(
        rounds=rounds,
        clients_per_round=clients_per_round,
        seed=seed,
        train=TrainConfig(epochs=1, batch_size=16, lr=0.3),
        client_timeout=timeout,
        checkpoint=checkpoint,
        batch_clients=False,  # Flower trains client by client: the in-process twin does too, bit for bit
    )


class Drill:
    """A client that crashes or sends garbage in chosen rounds (``faults``: {round: "crash"|"garbage"}).
    Garbage is a well-formed payload of the wrong tensors (every tensor's bytes as uint8, each byte
    flipped), so it reaches the server's checks over any transport (Flower carries tensors, not raw
    bytes): float tensors fail their dtype, codec streams their checks."""

    def __init__(self, inner, faults: dict[int, str]) -> None:
        self.inner, self.faults = inner, faults

    def request(self, round: int, seed: int):
        return self.inner.request(round, seed)

    def update(self, download: bytes, round: int, seed: int):
        kind = self.faults.get(round)
        if kind == "crash":
            raise RuntimeError(f"drill crash in round {round}")
        up = self.inner.update(download, round, seed)
        return as_bytes(up) if kind == "garbage" else up


def as_bytes(upload: bytes) -> bytes:
    """The upload with every tensor as its raw uint8 bytes, each flipped (names kept)."""
    from fedkernels.fl import payload as pl

    return pl.encode({n: t.reshape(-1).view(torch.uint8) ^ 0x5A for n, t in pl.decode(upload).items()})


def drill_wrapper(spec: str):
    """``"crash:2:0,garbage:0:1"`` (kind:client:round, ...) as a ``(client_id, endpoint) -> endpoint``
    wrapper; used identically by the in-process Server and the Flower client app."""
    plan: dict[int, dict[int, str]] = {}
    for item in filter(None, spec.split(",")):
        kind, cid, rnd = item.split(":")
        plan.setdefault(int(cid), {})[int(rnd)] = kind
    return lambda cid, inner: Drill(inner, plan[cid]) if cid in plan else inner
