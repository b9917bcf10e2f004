"""The fuzz targets: every decoder of untrusted bytes, each as ``check(data)`` that returns when the
input is accepted (after checking that what was accepted is right) and raises ``ValueError`` when it is
refused (see :func:`python_tests.fuzz.mutate.verdict`).

- ``payload``: :func:`fedkernels.fl.payload.decode` against a spec with fixed, shared (``"n"``) and open
  dims, an optional tensor, id ranges and uniqueness. Accepted: every tensor meets the spec and holds
  exactly the bytes its header entry points at, and re-encoding decodes to the same tensors.
- ``request:<strategy>`` / ``upload:<strategy>``: the server's side of one client's round for every
  registered strategy (small models): the request decoded against ``request_spec`` and turned into a
  download by ``client_payload``; the upload decoded against ``upload_spec``, ``check_upload``ed and
  aggregated. Accepted: the download is no larger than the model plus its id list, the aggregate keeps
  the state's names, dtypes and shapes and is finite.
- ``checkpoint``: :func:`fedkernels.fl.checkpoint.load_checkpoint` of a real run's checkpoint. Accepted:
  the state and metadata equal the original's (its SHA-256 says they must).
- ``checkpoint_meta``: the checkpoint's metadata and history JSON, mutated and re-sealed with a valid
  checksum, then loaded. Accepted: every field of every record has its type.
- ``config``: a TOML run config through ``fedkernels run``'s parser and checks. Accepted: every field
  has its type and range.
- ``xc``, ``libsvm``, ``npz_x``, ``npz_y``: the dataset readers. Accepted: finite float32 features, ids in
  range, and the data round-trips through ``write_xc``/``save_npz`` to the same matrices.
- ``filter``, ``sparse_text``, ``metrics``, ``propensity``, ``model_shape``: the third sweep's inputs
  (:mod:`python_tests.fuzz.sweep3_targets`).
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from fedkernels.data import formats
from fedkernels.data.xc_format import XCData, read_xc
from fedkernels.fl import ClientResult, RunConfig, Server, TrainConfig
from fedkernels.fl import payload as pl
from fedkernels.fl.checkpoint import load_checkpoint
from fedkernels.fl.registry import make_strategy, strategies
from fedkernels.fl.server import bounded, client_seed
from python_tests.fuzz.mutate import seeds
from python_tests.support.fl_data import one_label_clients, tiny_clients

NUM_FEATURES, NUM_CLASSES, NUM_CLIENTS = 16, 8, 5
SECRET = b"fuzz-client-secret-0123456789abc"  # FedALC's out-of-band secret, fixed so the corpus is stable

# Small models for every registered strategy (each option the strategy takes).
OPTIONS: dict[str, dict] = {
    "fedavg": {"hidden": (8,)},
    "fedalc": {"dim": 8, "hidden": (8,), "client_secret": SECRET},
    "fedalc-fixed": {"dim": 8, "hidden": (8,), "client_secret": SECRET, "fixed_steps": 5},
    "fedaws": {"dim": 8, "hidden": (8,)},
    "fedmlh": {"num_tables": 2, "num_buckets": 4, "hidden": (8,)},
    "fedss": {"num_negatives": 3, "embed_dim": 8, "hidden": (8,)},
    "fedss-fullsoftmax": {"embed_dim": 8, "hidden": (8,)},
    "fedss-negonly": {"num_negatives": 3, "embed_dim": 8, "hidden": (8,)},
    "fedss-posonly": {"embed_dim": 8, "hidden": (8,)},
    "l1diff": {"gamma": 0.05},
    "l1diffnetwork": {"num_clients": NUM_CLIENTS, "hidden": (8,)},
    "partialexchange": {"hidden": (8,)},
    "fedavg-fixed": {"dim": 8, "hidden": (8,)},
    "fedavg-positive": {"dim": 8, "hidden": (8,)},
    "fedss-fedaws": {"embed_dim": 8, "hidden": (8,)},
    "labelprior": {},
}
ONE_LABEL = ("fedaws", "fedalc", "fedalc-fixed", "fedavg-fixed", "fedavg-positive")


def strategy_names() -> list[str]:
    names = list(strategies())
    missing = sorted(set(names) - set(OPTIONS))
    assert not missing, f"give the fuzzers small options for {missing}"
    return names


# ---- payload -----------------------------------------------------------------------------------

PAYLOAD_SPEC = pl.PayloadSpec(
    {
        "ids": pl.TensorSpec(torch.int64, ("n",), min_value=0, max_value=64, unique=True),
        "rows": pl.TensorSpec(torch.float32, ("n", 3)),
        "bias": pl.TensorSpec(torch.float16, (4,)),
        "stream": pl.TensorSpec(torch.uint8, (None,), max_numel=256),
    },
    optional={"scale": pl.TensorSpec(torch.float64, ())},
)


def check_payload(data: bytes) -> None:
    out = pl.decode(data, PAYLOAD_SPEC)
    entries = pl.check_header(data)
    n = int.from_bytes(data[:8], "little")
    for name, t in out.items():  # each tensor is exactly the bytes its entry points at
        begin, end = entries[name]["data_offsets"]
        assert t.contiguous().view(-1).view(torch.uint8).numpy().tobytes() == data[8 + n + begin : 8 + n + end], name
        assert list(t.shape) == entries[name]["shape"], name
    again = pl.decode(pl.encode(out), PAYLOAD_SPEC)
    assert again.keys() == out.keys() and all(torch.equal(again[k], out[k]) for k in out)
    assert len(data) <= PAYLOAD_SPEC.byte_limit()


# ---- strategies: requests and uploads ---------------------------------------------------------


class StrategyCase:
    """One strategy's server after ``init_state``/``setup``, and client 0's honest round 0: its
    request, the download built for it and its upload."""

    def __init__(self, name: str) -> None:
        self.name = name
        clients = one_label_clients(NUM_CLIENTS) if name in ONE_LABEL else tiny_clients(NUM_CLIENTS)
        cfg = RunConfig(rounds=1, clients_per_round=2, train=TrainConfig(epochs=1, batch_size=16, lr=0.3), seed=3)
        self.server = Server(make_strategy(name, **OPTIONS[name]), clients, NUM_FEATURES, NUM_CLASSES, cfg)
        self.strategy, self.state = self.server.strategy, self.server.state
        self.client, self.round = 0, 0
        self.seed = client_seed(cfg.seed, self.round, self.client)
        endpoint = self.server.endpoints[self.client]
        self.raw_request = endpoint.request(self.round, self.seed)
        self.request = None if self.raw_request is None else pl.decode(self.raw_request)
        self.down = self.download(self.raw_request)
        self.raw_upload = endpoint.update(pl.encode(self.down), self.round, self.seed)
        self.num_examples = len(clients[self.client])
        self.state_bytes = sum(t.numel() * t.element_size() for t in self.state.values())

    def download(self, raw: bytes | None) -> pl.Payload:
        """The server's handling of a request: decode against its spec (only PayloadError, which the
        adapters record as the client's failure), build the download (any ValueError)."""
        request = None
        if raw is not None:
            spec = self.strategy.request_spec(self.state)
            if spec is None:
                raise pl.PayloadError(f"strategy {self.strategy.name} takes no client request")
            try:
                request = pl.decode(raw, bounded(spec, None))
            except pl.PayloadError:
                raise
            except ValueError as e:
                raise AssertionError(f"request decode raised {type(e).__name__}, not PayloadError: {e}") from e
        return self.strategy.client_payload(self.state, self.client, request, self.round, self.seed)

    def check_request(self, data: bytes) -> None:
        down = self.download(data)
        size = sum(t.numel() * t.element_size() for t in down.values())
        # never more than the whole model plus the id list (FedSS: at most every class row once)
        assert size <= self.state_bytes + 8 * (NUM_CLASSES + 2), (size, self.state_bytes)

    def check_upload(self, data: bytes) -> None:
        s = self.strategy
        try:
            checked = pl.decode(data, s.upload_spec(self.state, self.down))
            checked = s.check_upload(self.state, self.down, checked, self.request)
        except pl.PayloadError:
            raise
        except ValueError as e:  # the adapters record PayloadError as the client's failure: nothing else
            raise AssertionError(f"upload check raised {type(e).__name__}, not PayloadError: {e}") from e
        new = s.aggregate(self.state, [ClientResult(self.client, checked, self.num_examples, len(data))], self.round)
        assert new.keys() == self.state.keys()
        for k, t in new.items():
            assert t.dtype == self.state[k].dtype and t.shape == self.state[k].shape, k
            assert not t.is_floating_point() or bool(torch.isfinite(t).all()), k


@cache
def strategy_case(name: str) -> StrategyCase:
    return StrategyCase(name)


# ---- checkpoint --------------------------------------------------------------------------------


@cache
def checkpoint_reference() -> tuple[dict[str, torch.Tensor], dict]:
    """The state and metadata of ``corpus/checkpoint/valid_fedavg_2_rounds.ckpt``, loaded once."""
    path = Path(__file__).resolve().parent / "corpus" / "checkpoint" / "valid_fedavg_2_rounds.ckpt"
    return load_checkpoint(path, checkpoint_like())


def checkpoint_like() -> dict[str, torch.Tensor]:
    return strategy_case("fedavg").state


def check_checkpoint(data: bytes) -> None:
    with _temp_file(data, ".ckpt") as path:
        state, meta = load_checkpoint(path, checkpoint_like())
    ref_state, ref_meta = checkpoint_reference()
    assert meta == ref_meta and all(torch.equal(state[k], ref_state[k]) for k in ref_state)


# ---- datasets ----------------------------------------------------------------------------------


class _temp_file:
    def __init__(self, data: bytes, suffix: str) -> None:
        self.data, self.suffix = data, suffix

    def __enter__(self) -> Path:
        fd, name = tempfile.mkstemp(suffix=self.suffix, prefix="fk-fuzz-")
        with os.fdopen(fd, "wb") as f:
            f.write(self.data)
        self.path = Path(name)
        return self.path

    def __exit__(self, *exc) -> None:
        self.path.unlink(missing_ok=True)


def _check_xc_data(d: XCData) -> None:
    f, lab = d.features.tocsr(), d.labels.tocsr()
    assert f.dtype == np.float32 and np.isfinite(f.data).all()
    assert f.shape[0] == lab.shape[0] and f.shape[1] <= 2**26 and lab.shape[1] <= 2**26
    assert (lab.data == 1).all()
    for m in (f, lab):  # every index inside the shape, pointers monotone (scipy does not check them)
        assert m.indptr[0] == 0 and m.indptr[-1] == m.indices.size and (np.diff(m.indptr) >= 0).all()
        assert m.indices.size == 0 or (m.indices.min() >= 0 and m.indices.max() < m.shape[1])


def _same(a: XCData, b: XCData) -> bool:
    return (
        a.features.shape == b.features.shape
        and a.labels.shape == b.labels.shape
        and (a.features != b.features).nnz == 0
        and (a.labels != b.labels).nnz == 0
    )


def check_xc(data: bytes) -> None:
    with _temp_file(data, ".txt") as path:
        d = read_xc(path)
    _check_xc_data(d)
    with _temp_file(b"", ".txt") as path:  # round trip through the writer
        formats.write_xc(d, path)
        assert _same(read_xc(path), d)


def check_libsvm(data: bytes) -> None:
    with _temp_file(data, ".svm") as path:
        d = formats.read_libsvm(path)
    _check_xc_data(d)
    with _temp_file(b"", ".txt") as path:
        formats.write_xc(d, path)
        assert _same(read_xc(path), d)


def _npz_pair(x: bytes, y: bytes) -> XCData:
    with tempfile.TemporaryDirectory(prefix="fk-fuzz-") as tmp:
        (Path(tmp) / "d_X.npz").write_bytes(x)
        (Path(tmp) / "d_Y.npz").write_bytes(y)
        return formats.read_any(Path(tmp) / "d_X.npz")


def _npz_round_trip(d: XCData) -> None:
    _check_xc_data(d)
    bx, by = io.BytesIO(), io.BytesIO()
    sp.save_npz(bx, d.features)
    sp.save_npz(by, d.labels)
    assert _same(_npz_pair(bx.getvalue(), by.getvalue()), d)


def check_npz_x(data: bytes) -> None:
    _npz_round_trip(_npz_pair(data, seeds("npz")["valid_Y.npz"]))


def check_npz_y(data: bytes) -> None:
    _npz_round_trip(_npz_pair(seeds("npz")["valid_X.npz"], data))


# ---- checkpoint metadata, re-sealed ------------------------------------------------------------


@cache
def checkpoint_parts() -> tuple[dict[str, torch.Tensor], str, bytes]:
    """The valid checkpoint's state, metadata JSON and history JSON (the re-sealed target's base)."""
    from python_tests.support.checkpoint_tools import unpack

    path = Path(__file__).resolve().parent / "corpus" / "checkpoint" / "valid_fedavg_2_rounds.ckpt"
    return unpack(path.read_bytes())


@cache
def checkpoint_identity() -> dict:
    """The run identity the valid checkpoint was written with (its metadata, less format and round)."""
    import json

    meta = json.loads(checkpoint_parts()[1])
    return {k: v for k, v in meta.items() if k not in ("format", "round")}


def check_checkpoint_meta(data: bytes) -> None:
    """``data`` is ``<metadata JSON>\\n<history JSON>``: sealed with a valid checksum around the valid
    checkpoint's tensors (as anyone with the project's writer can), then loaded. Accepted: every field
    has its type (an independent check of the record schema) and the records rebuild."""
    from fedkernels.fl.server import record_from_json
    from python_tests.support.checkpoint_tools import seal

    meta_raw, sep, history = data.partition(b"\n")
    if not sep:
        raise ValueError("not a test document (no newline)")
    from fedkernels.fl.server import check_identity

    state = checkpoint_parts()[0]
    raw = seal(state, meta_raw.decode("utf-8"), history)
    with _temp_file(raw, ".ckpt") as path:
        _, meta = load_checkpoint(path, checkpoint_like())  # what Server.load_checkpoint does:
        check_identity(meta, checkpoint_identity(), path)  # the file, then this run's identity
    rnd = meta["round"]
    assert type(rnd) is int and rnd >= 0 and len(meta["history"]) == rnd
    for key in ("seed", "num_clients", "clients_per_round"):
        assert type(meta[key]) is int, key
    for i, rec in enumerate(meta["history"]):
        assert type(rec["round"]) is int and rec["round"] == i
        assert all(type(c) is int and 0 <= c < meta["num_clients"] for c in rec["clients"])
        assert all(type(c) is int and c in rec["clients"] and type(w) is str for c, w in rec["failed"])
        assert type(rec["bytes_up"]) is int and type(rec["bytes_down"]) is int
        assert rec["bytes_up"] >= 0 and rec["bytes_down"] >= 0
        assert isinstance(rec["metrics"], dict)
        assert all(type(k) is str and type(v) in (int, float) for k, v in rec["metrics"].items())
        assert type(rec["seconds"]) in (int, float) and type(rec["skipped"]) is str
        record_from_json(rec)


# ---- the run config (TOML) ---------------------------------------------------------------------

_CONFIG_TYPES: dict[str, tuple[type, ...]] = {
    "algorithms": (list,),
    "algorithm_options": (dict,),
    "dataset": (str,),
    "synthetic": (dict,),
    "feature_dim": (int, type(None)),
    "l2_normalize": (bool,),
    "sparse": (bool,),
    "test_fraction": (float, int),
    "partition": (str,),
    "num_frequent": (int, type(None)),
    "beta": (float, int),
    "clients": (int,),
    "clients_per_round": (int,),
    "rounds": (int,),
    "local_epochs": (int,),
    "batch_size": (int,),
    "lr": (float, int),
    "optimizer": (str,),
    "seed": (int,),
    "eval_every": (int,),
    "ks": (list,),
    "max_test": (int, type(None)),
    "output": (str,),
    "threads": (int, type(None)),
    "checkpoint": (str, type(None)),
    "resume": (bool,),
}


def check_config(data: bytes) -> None:
    """A TOML run config through ``fedkernels run``'s parser and checks (no data is read). Accepted:
    every field has its type (bools are not numbers), numbers are finite and in range."""
    import math

    from fedkernels_cli import parser
    from fedkernels_cli.config import build_config

    text = data.decode("utf-8")
    if "client_secret_file" in text:
        raise ValueError("not a test document (a secret file would be made)")
    with _temp_file(text.encode(), ".toml") as path:
        cfg = build_config(parser().parse_args(["run", "--config", str(path)]))
    for name, types in _CONFIG_TYPES.items():
        v = getattr(cfg, name)
        assert isinstance(v, types) and not (isinstance(v, bool) and bool not in types), (name, v)
        if isinstance(v, float):
            assert math.isfinite(v), name
    assert all(type(k) is int and k >= 1 for k in cfg.ks)
    assert 0 < cfg.test_fraction < 1 and cfg.beta > 0 and cfg.lr > 0
    assert cfg.clients_per_round >= 1 and cfg.rounds >= 1 and cfg.seed >= 0


# ---- registry ----------------------------------------------------------------------------------


def target(name: str) -> tuple[dict[str, bytes], Callable[[bytes], object]]:
    """``(seeds, check)`` of a target: ``payload``, ``request:<s>``, ``upload:<s>``, ``checkpoint``,
    ``xc``, ``libsvm``, ``npz_x``, ``npz_y`` or one of :data:`SWEEP3_TARGETS`
    (:mod:`python_tests.fuzz.sweep3_targets`)."""
    if name.startswith(("request:", "upload:")):
        kind, strat = name.split(":")
        case = strategy_case(strat)
        chosen = {k: v for k, v in seeds("strategy").items() if k.startswith(f"{strat}.{kind}")}
        return chosen, case.check_request if kind == "request" else case.check_upload
    if name == "checkpoint":
        checkpoint_reference()  # set-up outside the timed cases
    if name == "config":  # the first config builds every strategy once (lazy imports): outside the timed cases
        check_config(seeds("config")["valid.toml"])
    if name.startswith("npz_"):
        return seeds("npz"), {"npz_x": check_npz_x, "npz_y": check_npz_y}[name]
    from python_tests.fuzz import sweep3_targets as s3

    if name == "model_shape":  # the first config builds every strategy once (lazy imports): outside the timed cases
        s3.check_model_shape(seeds("model_shape")["valid.toml"])
    checks = {
        "filter": s3.check_filter,
        "sparse_text": s3.check_sparse_text,
        "metrics": s3.check_metrics,
        "propensity": s3.check_propensity,
        "model_shape": s3.check_model_shape,
        "payload": check_payload,
        "checkpoint": check_checkpoint,
        "checkpoint_meta": check_checkpoint_meta,
        "config": check_config,
        "xc": check_xc,
        "libsvm": check_libsvm,
    }
    return seeds(name), checks[name]


SWEEP3_TARGETS = ("filter", "sparse_text", "metrics", "propensity", "model_shape")


def strategy_targets() -> list[str]:
    """``request:<s>`` for every strategy whose clients send a request, ``upload:<s>`` for all (from
    the corpus file names, so collecting the tests builds nothing)."""
    names = {k.split(".")[0] + ":" + k.split(".")[1].split("_")[0] for k in seeds("strategy")}
    out = []
    for s in strategy_names():
        out += [f"{kind}:{s}" for kind in ("request", "upload") if f"{s}:{kind}" in names]
    return out


def all_targets() -> list[str]:
    return [
        "payload",
        "checkpoint",
        "checkpoint_meta",
        "config",
        "xc",
        "libsvm",
        "npz_x",
        "npz_y",
        *SWEEP3_TARGETS,
        *strategy_targets(),
    ]
