"""Failure injection for tests and drills: clients that crash, hang past their deadline or send nothing.

Which client fails how is a pure function of ``(seed, round, client)``, so a faulty run is as
reproducible as a clean one.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from .client import ClientEndpoint
from .seeding import numpy_rng

FAULTS = ("crash", "timeout", "empty")


class InjectedCrash(RuntimeError):
    """The exception an injected crash raises."""


@dataclass
class FaultInjector:
    """Makes a fraction of client calls fail.

    Args:
        crash: probability a client raises :class:`InjectedCrash`.
        timeout: probability a client hangs (until :meth:`release` or ``hang_seconds``) and then
            sends nothing; the server's ``client_timeout`` turns that into a timeout.
        empty: probability a client returns no upload at all.
        seed: the draw for ``(round, client)`` comes from ``derive_seed(seed, "fault", round, client)``.
        hang_seconds: the longest a hanging client waits.
    """

    crash: float = 0.0
    timeout: float = 0.0
    empty: float = 0.0
    seed: int = 0
    hang_seconds: float = 60.0
    _released: threading.Event = field(default_factory=threading.Event, repr=False)

    def __post_init__(self) -> None:
        for name in FAULTS:
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be a probability in [0, 1], got {getattr(self, name)}")
        if self.crash + self.timeout + self.empty > 1.0:
            raise ValueError("crash + timeout + empty must be at most 1")

    def fault(self, round: int, client_id: int) -> str | None:
        """The fault of ``client_id`` in ``round``: "crash", "timeout", "empty" or None."""
        u = float(numpy_rng(self.seed, "fault", round, client_id).random())
        edge = 0.0
        for name in FAULTS:
            edge += getattr(self, name)
            if u < edge:
                return name
        return None

    def wrap(self, client_id: int, inner: ClientEndpoint) -> FaultyClient:
        """``inner`` with this injector's faults (use as the Server's ``client_wrapper``)."""
        return FaultyClient(self, client_id, inner)

    __call__ = wrap

    def release(self) -> None:
        """Let every hanging client return now (they send nothing)."""
        self._released.set()


class FaultyClient:
    """A client endpoint that fails where its :class:`FaultInjector` says, and is honest elsewhere."""

    def __init__(self, injector: FaultInjector, client_id: int, inner: ClientEndpoint) -> None:
        self.injector, self.client_id, self.inner = injector, client_id, inner

    def _fail(self, round: int) -> bool:
        kind = self.injector.fault(round, self.client_id)
        if kind == "crash":
            raise InjectedCrash(f"injected crash of client {self.client_id} in round {round}")
        if kind == "timeout":
            self.injector._released.wait(self.injector.hang_seconds)
        return kind is not None

    def request(self, round: int, seed: int) -> bytes | None:
        # Requests stay honest so the fault happens once per round, in the update.
        return self.inner.request(round, seed)

    def update(self, download: bytes, round: int, seed: int) -> bytes | None:
        return None if self._fail(round) else self.inner.update(download, round, seed)
