"""The client side of a round, bytes in and bytes out, so the same code runs in-process and in Flower.

A :class:`ClientEndpoint` is whatever answers for one client: the honest :class:`LocalClient`, or a
wrapper around it (:class:`fedkernels.fl.faults.FaultyClient`, a test's malicious client, ...).
The server only ever sees the bytes it returns, and checks them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

import torch

from . import payload as pl
from .device import to_device
from .strategy import Strategy
from .types import ClientData, TrainConfig


class ClientEndpoint(Protocol):
    """One client as the server sees it. ``None`` means the client sent nothing."""

    def request(self, round: int, seed: int) -> bytes | None:
        """The serialised ``client_request`` (``None`` when the strategy makes none)."""

    def update(self, download: bytes, round: int, seed: int) -> bytes | None:
        """Train on the serialised download; return the serialised upload."""


class LocalClient:
    """An honest client: runs the strategy's client side on its own data.

    Args:
        strategy: the algorithm (only its client-side methods are used).
        data: this client's local data (kept on the host; pinned when training on a GPU).
        train: the local training settings.
        device: where it trains: its data and its decoded download go there for each call.
    """

    def __init__(
        self, strategy: Strategy, data: ClientData, train: TrainConfig, device: torch.device | str = "cpu"
    ) -> None:
        self.device = torch.device(device)
        self.strategy, self.train = strategy, train
        self.data = data.pin_memory() if self.device.type == "cuda" else data
        # what a stateful client kept from its last round (Strategy.stateful_clients), on the host; None before
        # its first
        self.memory: pl.Payload | None = None

    def _local_data(self) -> ClientData:
        # one copy per call, freed after it: the GPU holds one client's data at a time
        return self.data.to(self.device, non_blocking=True)

    def request(self, round: int, seed: int) -> bytes | None:
        req = self.strategy.client_request(self._local_data(), round, seed)
        return None if req is None else pl.encode(req)

    def update(self, download: bytes, round: int, seed: int) -> bytes | None:
        received = to_device(pl.decode(download), self.device, non_blocking=True)
        if self.strategy.stateful_clients:
            memory = None if self.memory is None else to_device(self.memory, self.device, non_blocking=True)
            upload, memory = self.strategy.client_update_stateful(
                received, self._local_data(), self.train, round, seed, memory
            )
            self.memory = None if memory is None else to_device(memory, torch.device("cpu"))
        else:
            upload = self.strategy.client_update(received, self._local_data(), self.train, round, seed)
        return pl.encode(upload, metadata={ROUND_TAG: str(round)})


ROUND_TAG = "fedkernels.round"
"""The upload's metadata entry naming the round it answers: the server refuses an upload tagged
with another round (a replayed or stale one). Not authentication: whoever can send as the client
can write any tag; the transport's identity (Flower's node authentication, TLS) is what stops a third
party sending as a client."""


class ClientTimeout(Exception):
    """A client did not answer before its deadline."""


def call_with_deadline(fn: Callable[[], bytes | None], timeout: float | None) -> bytes | None:
    """``fn()``, or :class:`ClientTimeout` if it takes longer than ``timeout`` seconds.

    With a deadline the call runs in a daemon thread: Python cannot stop a thread, so a late
    client keeps running in the background, but its answer is dropped and never reaches the state.
    Exceptions raised by ``fn`` are re-raised here.
    """
    if timeout is None:
        return fn()
    values: list[bytes | None] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            values.append(fn())
        except BaseException as e:  # handed to the caller, who records the crash
            errors.append(e)

    worker = threading.Thread(target=target, name="fedkernels-client", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise ClientTimeout(f"timed out after {timeout:g} s")
    if errors:
        raise errors[0]
    return values[0]
