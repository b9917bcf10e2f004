"""The round protocol, whatever carries the bytes: select, request, payload, check, aggregate, record.

Both transports drive this one module: the in-process :class:`fedkernels.fl.Server` (clients are
:class:`~fedkernels.fl.client.ClientEndpoint` objects called in this process) and the Flower adapter
(:mod:`fedkernels.integrations.flower`, clients are SuperNodes reached by messages). A transport only
moves bytes: it hands each chosen client's answer to :meth:`Round.downloads` (the requests) and
:meth:`Round.finish` (the uploads) as ``bytes``, ``None`` (the client sent nothing) or an exception
(the client failed; :func:`failure_reason` turns it into the recorded reason). Everything else, the
selection, seeds, checks, failure strings, aggregation order and byte accounting, lives here, so the
two transports give bit-identical runs.

Nothing a client sends can abort a round: a failed call, a request or upload that fails its spec or
the strategy's content check (``ValueError``, of which ``PayloadError`` is one) fails that client only,
and the state changes only from the checked uploads, at the end.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from . import payload as pl
from .client import ROUND_TAG, ClientTimeout
from .device import state_device, to_device
from .seeding import derive_seed, numpy_rng
from .strategy import State, Strategy
from .types import ClientResult, RoundRecord


@dataclass(frozen=True)
class Carried:
    """A payload an in-process transport hands over as tensors instead of bytes, with ``nbytes`` the
    exact length its serialisation (with ``metadata``) would have (:func:`~fedkernels.fl.payload.encoded_size`): the
    batched pass of honest in-process clients skips the byte round trip, never the checks or the count."""

    payload: pl.Payload
    nbytes: int
    metadata: Mapping[str, str] = field(default_factory=dict)  # what encode's header would carry (the round tag)


Answer = bytes | None | Exception  # what a transport got from one client: bytes, nothing, or its failure
Upload = Answer | Carried  # an upload may also come carried (the in-process batched pass)


class ClientFailed(Exception):
    """A transport's failure for one client; the message is the reason recorded (e.g. "not
    connected", "timed out (no reply)", "crashed: <the node's error>")."""


class ClientSentNothing(Exception):
    """A client answered without an upload."""


def select_clients(seed: int, round: int, num_clients: int, clients_per_round: int) -> list[int]:
    """The clients of ``round`` of the run seeded ``seed``: a seeded sample without replacement, in
    ascending id order."""
    rng = numpy_rng(seed, "select", round)
    return sorted(int(c) for c in rng.choice(num_clients, size=clients_per_round, replace=False))


def client_seed(seed: int, round: int, client_id: int) -> int:
    """The seed of one client's work in one round."""
    return derive_seed(seed, "client", round, client_id)


def bounded(spec: pl.PayloadSpec, max_bytes: int | None) -> pl.PayloadSpec:
    """``spec`` with its byte limit lowered to ``max_bytes`` (if given)."""
    return spec if max_bytes is None else dataclasses.replace(spec, max_bytes=min(spec.max_bytes, max_bytes))


MAX_REASON_CHARS = 300
"""The longest failure reason a round records. Reasons quote what a client sent (tensor names,
its exception's message), so a hostile client could make every record, the history kept in memory,
results.json and every checkpoint grow at will; longer reasons are cut, saying how long they were."""


def failure_reason(e: BaseException) -> str:
    """The ``RoundRecord.failed`` reason for a client failure: "rejected: ...", "timed out ...",
    "sent no upload", a transport's own reason, or "crashed: <type>: <message>"; at most
    :data:`MAX_REASON_CHARS` characters."""
    if isinstance(e, ValueError):  # PayloadError and any other malformed-input error of a check
        why = f"rejected: {e}"
    elif isinstance(e, (ClientTimeout, ClientSentNothing, ClientFailed)):
        why = str(e)
    else:
        why = f"crashed: {type(e).__name__}: {e}"
    if len(why) <= MAX_REASON_CHARS:
        return why
    tail = f"... ({len(why)} characters)"
    return why[: MAX_REASON_CHARS - len(tail)] + tail


def has_setup_exchange(strategy: Strategy) -> bool:
    """Whether ``strategy`` collects setup reports from its clients before round 0."""
    return type(strategy).setup_report is not Strategy.setup_report


def setup_exchange(
    strategy: Strategy, state: State, reports: Mapping[int, Answer], seed: int, max_bytes: int | None = None
) -> tuple[dict[int, str], int, State]:
    """The server side of the setup exchange: check each client's raw setup report (spec, then
    ``check_setup_report``) and hand the checked ones, in ascending client id, to
    ``strategy.setup_from_reports``. A client whose report fails (or who sent none) is left out.
    The reports stay on the host (they are digests and ids); the entries the strategy returns join
    the state on the state's device.

    Returns:
        The failures (client -> reason), the bytes of the reports taken, and ``state`` with the
        entries ``setup_from_reports`` returned added (a new dict; ``state`` is not modified).
    """
    spec = strategy.setup_report_spec(state)
    if spec is None:
        raise ValueError(f"strategy {strategy.name} makes setup reports but gives no setup_report_spec")
    failed, checked, taken = {}, [], 0
    for c in sorted(reports):
        answer = reports[c]
        if isinstance(answer, BaseException) or not answer:
            failed[c] = failure_reason(
                answer if isinstance(answer, BaseException) else ClientSentNothing("sent no report")
            )
            continue
        try:
            checked.append(strategy.check_setup_report(pl.decode(answer, bounded(spec, max_bytes))))
        except ValueError as e:
            failed[c] = failure_reason(e)
            continue
        taken += len(answer)
    extra = to_device(strategy.setup_from_reports(state, checked, seed), state_device(state))
    return failed, taken, with_entries(state, extra)


def with_entries(state: State, extra: State) -> State:
    """``state`` plus the setup's ``extra`` entries (a new dict); an entry may not replace one of the state's."""
    clash = sorted(set(extra) & set(state))
    if clash:
        raise ValueError(f"setup returned state entries the state already has: {clash}")
    return {**state, **extra}


def aggregate_round(strategy: Strategy, state: State, results: list[ClientResult], round: int) -> tuple[State, str]:
    """The state after a round and why its update was skipped ("" if applied or nobody succeeded).

    A round whose successful clients all hold 0 examples has nothing to average (example-weighted
    averages have no weight): the state is kept and the reason recorded, instead of aborting the run.
    """
    if not results:
        return state, ""
    if sum(r.num_examples for r in results) <= 0:
        return state, f"update skipped: the {len(results)} successful clients hold 0 examples"
    return strategy.aggregate(state, results, round), ""


@dataclass
class Round:
    """One round in progress. Create it, pass the clients' requests to :meth:`downloads`, send each
    download, pass the uploads to :meth:`finish`.

    Args:
        strategy: the algorithm.
        state: the global state at the start of the round (never modified).
        round: the round index (0-based).
        chosen: the clients of this round (see :func:`select_clients`), ascending.
        run_seed: the run's seed (gives each client's seed).
        max_upload_bytes: a tighter bound than the strategy's specs on any client's bytes.
    """

    strategy: Strategy
    state: State
    round: int
    chosen: list[int]
    run_seed: int
    max_upload_bytes: int | None = None
    failed: dict[int, str] = field(default_factory=dict)
    errors: dict[int, BaseException] = field(default_factory=dict)  # what failed each client in ``failed``
    uploaded: set[int] = field(default_factory=set)  # clients whose upload arrived (checked or not)
    t0: float = field(default_factory=time.perf_counter)
    _requests: dict[int, pl.Payload | None] = field(default_factory=dict)
    _sent: dict[int, tuple[pl.Payload, int]] = field(default_factory=dict)  # client -> (download, its bytes)
    _bytes_up: dict[int, int] = field(default_factory=dict)
    _encoded: dict[tuple, bytes] = field(default_factory=dict)  # download tensors -> their bytes (in-process)
    _keep: list[pl.Payload] = field(default_factory=list)

    @property
    def device(self) -> torch.device:
        """Where the state lives: checked requests and uploads are moved there before the strategy uses them."""
        return state_device(self.state)

    def seeds(self) -> dict[int, int]:
        """Each live client's seed for this round (the clients not yet failed)."""
        return {c: client_seed(self.run_seed, self.round, c) for c in self.chosen if c not in self.failed}

    def wants_requests(self) -> bool:
        """Whether the strategy takes a ``client_request`` (a transport may skip asking otherwise)."""
        return self.strategy.request_spec(self.state) is not None

    def fail(self, client_id: int, error: BaseException) -> None:
        """Record ``client_id`` as failed (e.g. a transport cannot reach it)."""
        if client_id not in self.failed:
            self.failed[client_id], self.errors[client_id] = failure_reason(error), error

    def downloads(self, requests: Mapping[int, Answer]) -> dict[int, bytes]:
        """Check each live client's request and build its download. ``requests[c]`` is the raw
        request (``None``: it made none; a missing client made none). Returns the serialised
        download of every client still live, ascending; clients whose downloads hold the same
        tensors share one ``bytes`` object (serialised once)."""
        return {c: self._encoded[_tensors_key(down)] for c, down in self._build(requests, encode=True).items()}

    def download_payloads(self, requests: Mapping[int, Answer]) -> dict[int, pl.Payload]:
        """As :meth:`downloads`, but the downloads as tensors, for a transport with its own wire
        form; each is counted at its serialised length all the same
        (:func:`~fedkernels.fl.payload.encoded_size`, nothing serialised)."""
        return self._build(requests, encode=False)

    def carried_downloads(self, requests: Mapping[int, Answer]) -> dict[int, Carried]:
        """:meth:`downloads` as :class:`Carried` payloads, each counted at its encoded length
        (:func:`~fedkernels.fl.payload.encoded_size`, nothing serialised), for an in-process transport
        that hands tensors over."""
        built = self._build(requests, encode=False)
        return {c: Carried(down, self._sent[c][1]) for c, down in built.items()}

    def _build(self, requests: Mapping[int, Answer], encode: bool) -> dict[int, pl.Payload]:
        """Each live client's checked request and its download, recorded with its serialised size
        (``encode``: serialised and the bytes kept, else the length computed)."""
        spec = self.strategy.request_spec(self.state)
        out = {}
        for c, seed in self.seeds().items():
            try:
                raw = _unwrap(requests.get(c))
                request = None
                if raw is not None:
                    self._bytes_up[c] = len(raw)
                    if spec is None:
                        raise pl.PayloadError(f"strategy {self.strategy.name} takes no client request")
                    request = to_device(pl.decode(raw, bounded(spec, self.max_upload_bytes)), self.device)
                # A request that passed its spec may still be refused by the strategy: this client only.
                down = self.strategy.client_payload(self.state, c, request, self.round, seed)
                size = self._encode(down) if encode else pl.encoded_size(down)
            except Exception as e:
                self.fail(c, e)
                continue
            self._requests[c], self._sent[c] = request, (down, size)
            out[c] = down
        return out

    def _encode(self, down: pl.Payload) -> int:
        """Serialise ``down`` (its bytes kept for :meth:`downloads`) and return their length, once per
        distinct set of tensors: a download holding the same tensor objects (same versions) as an
        earlier one shares its bytes (e.g. every client's copy of the global state)."""
        key = _tensors_key(down)
        if key not in self._encoded:
            self._encoded[key] = pl.encode(down)
            self._keep.append(down)  # the tensors stay alive, so their ids are not reused this round
        return len(self._encoded[key])

    def upload_limit(self, client_id: int) -> int:
        """The most bytes ``client_id``'s upload may take (its spec's bound, lowered by
        ``max_upload_bytes``): a transport refuses more before decoding anything."""
        down, _ = self._sent[client_id]
        return bounded(self.strategy.upload_spec(self.state, down), self.max_upload_bytes).byte_limit()

    def request_limit(self) -> int:
        """The most bytes a client request may take (0 when the strategy takes none)."""
        spec = self.strategy.request_spec(self.state)
        return 0 if spec is None else bounded(spec, self.max_upload_bytes).byte_limit()

    def bytes_down(self, client_id: int) -> int:
        """The bytes of the download built for ``client_id`` (0 if none was)."""
        sent = self._sent.get(client_id)
        return 0 if sent is None else sent[1]

    def collect(self, uploads: Mapping[int, Upload], num_examples: Mapping[int, int]) -> list[ClientResult]:
        """Check every upload (a client missing from ``uploads`` timed out); ``num_examples[c]``
        weighs client c. Returns the checked results, ascending; failures go to ``self.failed``."""
        results = []
        for c in sorted(self._sent):
            down, _ = self._sent[c]
            answer = uploads.get(c, ClientFailed("timed out (no reply)"))
            if isinstance(answer, BaseException) or not answer:  # the transport's own failures
                self.fail(c, answer if isinstance(answer, BaseException) else ClientSentNothing("sent no upload"))
                continue
            size = answer.nbytes if isinstance(answer, Carried) else len(answer)
            self._bytes_up[c] = self._bytes_up.get(c, 0) + size
            self.uploaded.add(c)  # its update reached the server, whether or not it passes the checks
            try:
                spec = bounded(self.strategy.upload_spec(self.state, down), self.max_upload_bytes)
                # a carried payload gets decode's limits and checks on its tensors
                checked = _check_carried(answer, spec) if isinstance(answer, Carried) else pl.decode(answer, spec)
                checked = self.strategy.check_upload(self.state, down, checked, self._requests[c])
                check_round_tag(answer, self.round)  # a well-formed upload, but for this round?
                checked = to_device(checked, self.device)
            except ValueError as e:  # the decoders and checks raise only this (PayloadError) on bad bytes
                self.fail(c, e)
                continue
            results.append(ClientResult(c, checked, int(num_examples[c]), self._bytes_up[c]))
        return results

    def finish(self, uploads: Mapping[int, Upload], num_examples: Mapping[int, int]) -> tuple[State, RoundRecord]:
        """:meth:`collect` the uploads, aggregate the checked ones in ascending client id and record
        the round. Returns the new state (``self.state`` itself if nothing was applied) and the record."""
        results = self.collect(uploads, num_examples)
        state, skipped = aggregate_round(self.strategy, self.state, results, self.round)
        ok = {r.client_id for r in results}
        rec = RoundRecord(
            self.round,
            list(self.chosen),
            sorted(self.failed.items()),
            sum(n for c, (_, n) in self._sent.items() if c in ok),
            sum(r.bytes_up for r in results),
            skipped=skipped,
            contributed=sorted(self.uploaded),
        )
        rec.seconds = time.perf_counter() - self.t0
        return state, rec


def _check_carried(answer: Carried, spec: pl.PayloadSpec) -> pl.Payload:
    """:func:`~fedkernels.fl.payload.decode`'s length limit and tensor checks on a carried payload."""
    if answer.nbytes > spec.byte_limit():
        raise pl.PayloadError(f"payload of {answer.nbytes} bytes exceeds the limit of {spec.byte_limit()}")
    try:
        pl.check(answer.payload, spec)
    except pl.PayloadError:
        raise
    except Exception as e:  # as decode: a check that cannot run is a rejection, never a crash
        raise pl.PayloadError(f"payload could not be checked: {type(e).__name__}: {e}") from None
    return dict(answer.payload)


def tensor_identity(t: torch.Tensor) -> tuple[int, object]:
    """A tensor's identity while unchanged: its object and version (in-place writes bump it). An
    inference tensor has no version: it gets a fresh token, so it is never taken for another."""
    try:
        return id(t), t._version
    except RuntimeError:
        return id(t), object()


def _tensors_key(payload: pl.Payload) -> tuple:
    """Names and tensor identities of a payload: equal keys, equal bytes."""
    return tuple((name, *tensor_identity(t)) for name, t in sorted(payload.items()))


def check_round_tag(upload: bytes | Carried, round: int) -> None:
    """Refuse an upload not tagged with ``round`` (:data:`fedkernels.fl.client.ROUND_TAG`): a
    client's upload replayed in a later round, or a late answer to an earlier one, is never
    aggregated again. Call after the upload decoded.

    Raises:
        PayloadError: the tag is missing or names another round.
    """
    metadata = upload.metadata if isinstance(upload, Carried) else pl.read_metadata(upload)
    tag = metadata.get(ROUND_TAG)
    if tag is None:
        raise pl.PayloadError(f"upload carries no round tag ({ROUND_TAG!r} metadata); this is round {round}")
    if tag != str(round):
        raise pl.PayloadError(f"upload is tagged for round {tag!r:.24}, this is round {round} (a replayed upload?)")


def _unwrap(answer: Answer) -> bytes | None:
    if isinstance(answer, BaseException):
        raise answer
    return answer
