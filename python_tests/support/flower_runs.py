"""What the Flower test and the in-process reference run share: strategies by name, data, config."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from fedkernels.fl import ClientData, RunConfig, Server, Strategy, TrainConfig
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


# The Flower test app's run (python_tests/support/flower_app): the deployment test and its in-process
# twin over Flower messages run every strategy this way, against the in-process Server below.
NUM_CLIENTS, ROUNDS, PER_ROUND, SEED = 3, 3, 2, 7
DRILL = "crash:2:0,garbage:0:1"  # client 2 crashes in round 0, client 0 sends garbage in round 1
# The strategies the issue named (FedMLH, FedSS, partial exchange, l1-difference) plus FedAvg and FedALC
# (its label-set setup exchange and federated evaluation); the adapter is generic.
STRATEGIES = ["fedavg", "fedmlh", "fedss", "partialexchange", "l1diff", "fedalc"]
FED_EVAL = ("fedalc",)  # runs federated evaluation too (Flower's evaluate messages)


def in_process_reference(strategy: str) -> Server:
    """The test app's run of ``strategy`` in one process: the same data, seed, drill and evaluation."""
    clients = [client_data(i, NUM_CLIENTS, strategy) for i in range(NUM_CLIENTS)]
    s = Server(
        make_strategy(strategy),
        clients,
        NUM_FEATURES,
        NUM_CLASSES,
        run_config(ROUNDS, PER_ROUND, SEED),
        client_wrapper=drill_wrapper(DRILL),
    )
    held_out = [held_out_data(i, NUM_CLIENTS, strategy) for i in range(NUM_CLIENTS)] if strategy in FED_EVAL else None
    s.run(held_out=held_out)
    return s


def assert_matches_reference(strategy: str, checkpoint: Path, events: list[dict]) -> None:
    """A Flower run of the test app (its checkpoint and its node events, as dicts): the second node
    claiming client 1 was refused and every client joined; the final state is bit-identical to the
    in-process Server's, and so is every round's record (clients, bytes, metrics, failures and their
    kinds: the drill really failed clients); an in-process Server resumes from the checkpoint."""
    from fedkernels.fl.checkpoint import load_checkpoint

    refused = [e for e in events if e["kind"] == "refused"]  # the second node claiming client 1: never fatal
    assert len(refused) == 1 and refused[0]["client"] == 1 and "duplicate claim of client 1" in refused[0]["reason"]
    assert sorted(e["client"] for e in events if e["kind"] == "joined") == list(range(NUM_CLIENTS))
    ref = in_process_reference(strategy)
    state, meta = load_checkpoint(checkpoint, ref.state)
    assert meta["round"] == ROUNDS and meta["strategy"] == ref.strategy.name
    assert all(state[k].dtype == ref.state[k].dtype and (state[k] == ref.state[k]).all() for k in ref.state)
    for got, want in zip(meta["history"], ref.history, strict=True):
        assert got["clients"] == want.clients and got["bytes_up"] == want.bytes_up
        assert got["bytes_down"] == want.bytes_down
        assert got["metrics"] == want.metrics  # FedALC: the federated P@k/nDCG@k, bit for bit
        assert [c for c, _ in got["failed"]] == [c for c, _ in want.failed]
        for (_, g), (_, w) in zip(got["failed"], want.failed, strict=True):
            assert g.split(":")[0] == w.split(":")[0], (g, w)  # same kind: crashed / rejected
    assert [len(h.failed) for h in ref.history] == [1, 1, 0]  # the drill really failed clients
    again = Server(  # an in-process Server resumes from the Flower checkpoint (same format)
        make_strategy(strategy),
        [client_data(i, NUM_CLIENTS, strategy) for i in range(NUM_CLIENTS)],
        NUM_FEATURES,
        NUM_CLASSES,
        dataclasses.replace(run_config(ROUNDS, PER_ROUND, SEED), checkpoint=str(checkpoint)),
    )
    assert again.round == ROUNDS and all(torch.equal(again.state[k], ref.state[k]) for k in ref.state)
