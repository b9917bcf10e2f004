"""Type and range checks of every run setting, before any data is read, with the limits that the
machine sets where the machine is what bounds them (memory for clients and synthetic sizes, cores
for threads), and checks of the output and checkpoint folders before training, so a run never fails
after its work is done.

A config file (TOML or JSON) or a flag can hold any type: ``ks = [1.5]``, ``test_fraction = "0.2"``,
``clients = 1e9``. Each is a ``ValueError`` naming the field, raised by :func:`check_fields` (called
by ``ExperimentConfig.validate``) instead of a ``TypeError`` at the first evaluation, a
``MemoryError`` a minute in or an abort inside the OpenMP runtime.
"""

from __future__ import annotations

import inspect
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._memory import available_memory

MAX_ROUNDS = 2**31 - 1  # the checkpoint's round counter bound
MAX_INT = 2**63 - 1
MAX_DIM = 2**26  # the data readers' bound on F and L
MAX_KS = 64
CLIENT_BYTES = 16 << 10
"""Memory a client costs at the least (its data record, endpoint, partition entry and per-round
accounting: about 5 KiB measured, so 16 KiB leaves room), the unit of the bound on ``clients``."""
MEMORY_FRACTION = 0.5
"""The share of the machine's available memory a run's fixed structures (clients, synthetic data)
may claim before the run is refused up front."""


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_real(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _int_in(name: str, lo: int, hi: int, optional: bool = False) -> Callable[[object], None]:
    def check(v: object) -> None:
        if optional and v is None:
            return
        if not _is_int(v) or not lo <= v <= hi:  # type: ignore[operator]
            unset = " or unset" if optional else ""
            raise ValueError(f"{name} must be an integer in [{lo}, {hi}]{unset}, got {v!r}")

    return check


def _bool(name: str) -> Callable[[object], None]:
    def check(v: object) -> None:
        if not isinstance(v, bool):
            raise ValueError(f"{name} must be true or false, got {v!r}")

    return check


def _text(name: str, optional: bool = False) -> Callable[[object], None]:
    def check(v: object) -> None:
        if optional and v is None:
            return
        if not isinstance(v, str) or not v.strip() or "\x00" in v:
            raise ValueError(f"{name} must be a non-empty string{' or unset' if optional else ''}, got {v!r}")

    return check


def _open_real(name: str, lo: float, hi: float) -> Callable[[object], None]:
    def check(v: object) -> None:
        if not _is_real(v) or not lo < v < hi:  # type: ignore[operator]
            raise ValueError(f"{name} must be a finite number in ({lo:g}, {hi:g}), got {v!r}")

    return check


def _positive_real(name: str) -> Callable[[object], None]:
    def check(v: object) -> None:
        if not _is_real(v) or not v > 0:  # type: ignore[operator]
            raise ValueError(f"{name} must be a finite number > 0, got {v!r}")

    return check


def _ks(v: object) -> None:
    if (
        not isinstance(v, (list, tuple))
        or not 1 <= len(v) <= MAX_KS
        or not all(_is_int(k) and 1 <= k <= MAX_DIM for k in v)
    ):
        raise ValueError(f"ks must be a list of 1 to {MAX_KS} integers in [1, {MAX_DIM}], got {v!r:.80}")


def _names(v: object) -> None:
    if not isinstance(v, (list, tuple)) or not v or not all(isinstance(a, str) and a for a in v):
        raise ValueError(f"algorithms must be a non-empty list of algorithm names, got {v!r:.80}")


def _options(v: object) -> None:
    ok = isinstance(v, dict) and all(
        isinstance(k, str) and isinstance(o, dict) and all(isinstance(key, str) for key in o) for k, o in v.items()
    )
    if not ok:
        raise ValueError(f"algorithm_options must be a table of algorithm -> {{option: value}}, got {v!r:.80}")


def _propensity(v: object) -> None:
    """Unset, or ``[A, B]`` that :func:`fedkernels.metrics.check_propensity` takes (B <= 0 made every
    PSP@k 0.0 or NaN)."""
    from ..metrics import check_propensity

    if v is None:
        return
    if not isinstance(v, (list, tuple)) or len(v) != 2:
        raise ValueError(f"propensity (--propensity A B) must be [A, B] or unset, got {v!r:.80}")
    try:
        check_propensity(*v)
    except ValueError as e:
        raise ValueError(f"propensity (--propensity A B): {e}") from None


def _synthetic(v: object) -> None:
    if not isinstance(v, dict):
        raise ValueError(f"synthetic must be a table of synthetic_multilabel arguments, got {v!r:.80}")


def field_checks() -> dict[str, Callable[[object], None]]:
    """The type and range check of every ``ExperimentConfig`` field."""
    threads_max = usable_cores()
    return {
        "algorithms": _names,
        "algorithm_options": _options,
        "dataset": _text("dataset"),
        "synthetic": _synthetic,
        "feature_dim": _int_in("feature_dim", 1, MAX_DIM, optional=True),
        "l2_normalize": _bool("l2_normalize"),
        "sparse": _bool("sparse"),
        "test_fraction": _open_real("test_fraction", 0.0, 1.0),
        "partition": _text("partition"),
        "num_frequent": _int_in("num_frequent", 1, MAX_DIM, optional=True),
        "beta": _positive_real("beta"),
        "sample_fraction": _positive_real("sample_fraction"),
        "clients": _int_in("clients", 1, max_clients()),
        "clients_per_round": _int_in("clients_per_round", 1, MAX_ROUNDS),
        "rounds": _int_in("rounds", 1, MAX_ROUNDS),
        "local_epochs": _int_in("local_epochs", 0, 1 << 20),
        "batch_size": _int_in("batch_size", 1, MAX_ROUNDS),
        "lr": _positive_real("lr"),
        "optimizer": _text("optimizer"),
        "seed": _int_in("seed", 0, MAX_INT),
        "eval_every": _int_in("eval_every", 1, MAX_ROUNDS),
        "ks": _ks,
        "propensity": _propensity,
        "max_test": _int_in("max_test", 1, MAX_INT, optional=True),
        "output": _text("output"),
        # more threads than cores only slows these ops (and 10**6 aborts inside libgomp)
        "threads": _int_in("threads", 1, threads_max, optional=True),
        "checkpoint": _text("checkpoint", optional=True),
        "resume": _bool("resume"),
    }


def max_clients() -> int:
    """The most clients a run may have on this machine: :data:`MEMORY_FRACTION` of the available
    memory at :data:`CLIENT_BYTES` each."""
    return max(1, int(available_memory() * MEMORY_FRACTION) // CLIENT_BYTES)


def check_fields(cfg: Any) -> None:
    """Type and range of every field of ``cfg`` (an ``ExperimentConfig``), before anything else.

    Raises:
        ValueError: naming the first bad field and what it must be.
    """
    for name, check in field_checks().items():
        check(getattr(cfg, name))
    check_synthetic(cfg.synthetic)


def check_synthetic(kw: dict[str, Any]) -> None:
    """The ``synthetic`` table: known arguments of :func:`fedkernels.data.synthetic_multilabel`, each of
    its default's type, and a dataset that fits in memory (N x F features, N x p Gumbel keys per chunk)."""
    from ..data.synthetic import synthetic_multilabel

    params = inspect.signature(synthetic_multilabel).parameters
    for key, value in kw.items():
        if key not in params or key == "seed":
            known = sorted(k for k in params if k != "seed")
            raise ValueError(f"synthetic.{key} is not an argument of the synthetic data; known: {known}")
        default = params[key].default
        if _is_int(default) and not (_is_int(value) and 0 <= value <= MAX_INT):
            raise ValueError(f"synthetic.{key} must be an integer >= 0, got {value!r}")
        if isinstance(default, float) and not (_is_real(value) and value >= 0):
            raise ValueError(f"synthetic.{key} must be a finite number >= 0, got {value!r}")
    args = {k: p.default for k, p in params.items()} | kw
    n, f, p = args["num_samples"], args["num_features"], args["num_classes"]
    for key, value, hi in (("num_features", f, MAX_DIM), ("num_classes", p, MAX_DIM)):
        if not 1 <= value <= hi:
            raise ValueError(f"synthetic.{key} must lie in [1, {hi}], got {value}")
    # float64 features and noise (two N x F), the float32 copy, and a 2048 x p chunk of keys and ranks
    need = 20 * n * f + 16 * 2048 * p + 24 * n * max(1.0, float(args["labels_per_sample"]))
    budget = int(available_memory() * MEMORY_FRACTION)
    if need > budget:
        raise ValueError(
            f"synthetic data of num_samples={n}, num_features={f}, num_classes={p} needs about "
            f"{need / 2**30:.1f} GiB, more than the {budget / 2**30:.1f} GiB this machine can give it"
        )


def check_writable_folder(folder: str | Path, what: str) -> Path:
    """Make ``folder`` (and its parents) if needed and prove it takes a file, before any work.

    Raises:
        ValueError: ``folder`` is a file, cannot be made, or is not writable (naming it and ``what``).
    """
    path = Path(folder)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{what} {path} exists and is not a folder: choose another --{what}")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".fedkernels-write-test-"):
            pass
    except OSError as e:
        raise ValueError(f"{what} folder {path} is not writable ({e.strerror or e})") from None
    return path


def check_output_files(folder: Path, names: tuple[str, ...]) -> None:
    """The files a run writes into ``folder`` at its end: none may be a folder or other non-file.

    Raises:
        ValueError: naming the first one in the way.
    """
    for name in names:
        target = folder / name
        if target.exists() and not target.is_file():
            raise ValueError(f"output {target} exists and is not a file: the results could not be written there")
