"""Private label-set collection for FedALC.

Each client holds instances with one (or a few) labels. To learn which labels co-occur without the
server learning instance contents or label names, every client sends, per (instance, label), two
keyed digests: HMAC-SHA-256 of the instance's bytes and of the label id, keyed by a secret the
clients share and the server does not have. The server groups reports by instance digest into label
sets, counts ``count(c)`` (instances holding label c) and ``cooc(c, c')`` (instances holding both),
and builds the sparse FedALC weights ``alpha[c, c'] = 1 - cooc(c, c') / count(c)`` over co-occurring
pairs only. Classes are the distinct label digests in sorted order; clients find their class's row
by digesting their own label (:meth:`LabelSets.row_of`), so the server never sees a label id.

The key must be a secret the server cannot know: agreed among the clients out of band (or made by
:func:`new_client_secret`), never derived from the run seed or anything else the server holds. With
it, the server cannot map a label digest back to a label id by trying all ids (it cannot compute
HMACs), nor an instance digest to a feature row. A client that colludes with the server can do both.

Example:
    >>> key = new_client_secret()
    >>> r1 = client_report(key, [b"doc-1", b"doc-2"], [3, 3])       # client holding label 3
    >>> r2 = client_report(key, [b"doc-1"], [7])                     # client holding label 7
    >>> sets = merge_reports([r1, r2])
    >>> pw = sets.pair_weights()   # alpha[row(3), row(7)] = 1 - 1/2, alpha[row(7), row(3)] = 0
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from .._files import check_regular, read_regular
from ..ops.spread import PairWeights

DIGEST_BYTES = 32
_INSTANCE_DOMAIN = b"fedkernels/instance\x00"
_LABEL_DOMAIN = b"fedkernels/label\x00"
_ROW_DOMAIN = b"fedkernels/class-row\x00"
_KEY_ID_DOMAIN = b"fedkernels/key-id\x00"
MIN_SECRET_BYTES = 16


def new_client_secret() -> bytes:
    """A fresh 32-byte client secret from :mod:`secrets` (the OS's CSPRNG), to hand to the clients."""
    return secrets.token_bytes(32)


def check_secret(secret: object) -> bytes:
    """``secret`` as bytes, if it is bytes of at least :data:`MIN_SECRET_BYTES` (else ``ValueError``)."""
    if not isinstance(secret, (bytes, bytearray)):
        raise ValueError(f"client_secret must be bytes, got {type(secret).__name__}")
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError(f"client_secret must hold at least {MIN_SECRET_BYTES} bytes, got {len(secret)}")
    return bytes(secret)


def secret_from_file(path: str | Path) -> bytes:
    """The client secret stored at ``path`` (64 hex digits), made there first if the file is missing:
    a fresh :func:`new_client_secret`, written with mode 0600 (created exclusively, so two runs
    racing to make it end with one secret). A run that resumes a checkpoint reads the same secret
    back, and the secret itself is never written anywhere else (results record only the path).

    Raises:
        ValueError: the file is not a regular file, is readable by others, or does not hold a secret.
    """
    path = Path(path)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            pass  # another run made it first: read theirs
        else:
            with os.fdopen(fd, "w") as f:
                f.write(new_client_secret().hex() + "\n")
    st = check_regular(path, "client_secret_file")
    if st.st_mode & 0o077:
        raise ValueError(
            f"client_secret_file {path} is readable or writable by others (mode {st.st_mode & 0o777:o}); "
            f"chmod 600 {path}"
        )
    text = read_regular(path, 4096, "client_secret_file").decode("ascii", "replace").strip()
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        raise ValueError(f"client_secret_file {path} must hold the secret as hex digits") from None
    return check_secret(secret)


def key_id(secret: bytes) -> str:
    """A 16-hex-digit tag of the secret (HMAC of a constant), to tell two secrets apart without
    revealing either (e.g. in a checkpoint's run identity)."""
    return hmac.new(check_secret(secret), _KEY_ID_DOMAIN, hashlib.sha256).hexdigest()[:16]


def class_permutation(secret: bytes, num_classes: int) -> torch.Tensor:
    """int64 ``[num_classes]``: ``perm[c]``, the server row of class ``c`` under ``secret``.

    A keyed random permutation (the rank of ``HMAC(secret, c)`` among all classes): clients name
    their class to the server only by this row, so a server without the secret sees a uniformly
    random relabelling of the classes and guesses a class id right with probability 1/C.
    """
    secret = check_secret(secret)
    if not 0 <= int(num_classes) < 2**31:
        raise ValueError(f"num_classes must lie in [0, 2**31), got {num_classes}")
    tags = [
        hmac.new(secret, _ROW_DOMAIN + c.to_bytes(8, "little"), hashlib.sha256).digest()
        for c in range(int(num_classes))
    ]
    order = sorted(range(len(tags)), key=tags.__getitem__)  # order[r] = class at row r
    perm = torch.empty(len(tags), dtype=torch.int64, device="cpu")
    perm[torch.tensor(order, dtype=torch.int64, device="cpu")] = torch.arange(
        len(tags), dtype=torch.int64, device="cpu"
    )
    return perm


def _instance_bytes(instance: bytes | bytearray | np.ndarray | torch.Tensor) -> bytes:
    if isinstance(instance, (bytes, bytearray)):
        return bytes(instance)
    if isinstance(instance, torch.Tensor):
        instance = instance.detach().cpu().contiguous().numpy()
    if isinstance(instance, np.ndarray):
        # dtype and shape are part of the content, so equal bytes of different arrays don't collide
        header = f"{instance.dtype.str}{instance.shape}".encode()
        return header + np.ascontiguousarray(instance).tobytes()
    raise TypeError(f"instance must be bytes, a numpy array or a tensor, got {type(instance).__name__}")


def instance_digest(key: bytes, instance: bytes | np.ndarray | torch.Tensor) -> bytes:
    """HMAC-SHA-256 (32 bytes) of an instance's bytes under the clients' shared ``key``."""
    return hmac.new(check_secret(key), _INSTANCE_DOMAIN + _instance_bytes(instance), hashlib.sha256).digest()


def label_digest(key: bytes, label: int) -> bytes:
    """HMAC-SHA-256 (32 bytes) of a label id (as 8 little-endian bytes) under the shared ``key``."""
    if not 0 <= int(label) < 2**63:
        raise ValueError(f"label must lie in [0, 2**63), got {label}")
    return hmac.new(check_secret(key), _LABEL_DOMAIN + int(label).to_bytes(8, "little"), hashlib.sha256).digest()


@dataclass(frozen=True)
class LabelReport:
    """What one client uploads: ``pairs[i] = (instance digest, label digest)``, sorted and unique."""

    pairs: tuple[tuple[bytes, bytes], ...]

    def to_tensor(self) -> torch.Tensor:
        """uint8 ``[n, 64]``: instance digest then label digest per row (for safetensors payloads)."""
        flat = b"".join(i + l for i, l in self.pairs)
        return torch.frombuffer(bytearray(flat), dtype=torch.uint8).reshape(len(self.pairs), 2 * DIGEST_BYTES)

    @staticmethod
    def from_tensor(t: torch.Tensor) -> LabelReport:
        if t.dtype != torch.uint8 or t.dim() != 2 or t.shape[1] != 2 * DIGEST_BYTES:
            raise ValueError(f"report tensor must be uint8 [n, {2 * DIGEST_BYTES}], got {t.dtype} {tuple(t.shape)}")
        raw = t.contiguous().numpy().tobytes()
        step = 2 * DIGEST_BYTES
        pairs = [(raw[o : o + DIGEST_BYTES], raw[o + DIGEST_BYTES : o + step]) for o in range(0, len(raw), step)]
        return LabelReport(tuple(sorted(set(pairs))))

    @property
    def nbytes(self) -> int:
        return len(self.pairs) * 2 * DIGEST_BYTES


def client_report(
    key: bytes, instances: Sequence[bytes | np.ndarray | torch.Tensor], labels: Sequence[int | Iterable[int]]
) -> LabelReport:
    """Digest a client's (instance, label) pairs; ``labels[i]`` is one id or an iterable of ids.

    Sorted and de-duplicated, so the report reveals neither the client's order nor repeats.
    """
    if len(instances) != len(labels):
        raise ValueError(f"instances and labels must have the same length, got {len(instances)} and {len(labels)}")
    pairs = set()
    for inst, lab in zip(instances, labels, strict=True):
        di = instance_digest(key, inst)
        for l in [lab] if isinstance(lab, (int, np.integer)) else lab:
            pairs.add((di, label_digest(key, int(l))))
    return LabelReport(tuple(sorted(pairs)))


@dataclass(frozen=True)
class LabelSets:
    """The server's merged view: label sets over opaque classes (sorted label digests).

    Attributes:
        label_digests: the classes, row order of every per-class tensor here.
        indptr, indices: int64 CSR ``[N + 1]``, ``[nnz]``: class rows of each instance's label set
            (instances in sorted digest order, rows ascending within a set).
    """

    label_digests: tuple[bytes, ...]
    indptr: torch.Tensor
    indices: torch.Tensor

    @property
    def num_classes(self) -> int:
        return len(self.label_digests)

    @property
    def num_instances(self) -> int:
        return self.indptr.numel() - 1

    def row_of(self, digest: bytes) -> int:
        """The class row of a label digest (clients call this with :func:`label_digest` of their label)."""
        i = int(np.searchsorted(np.array(self.label_digests, dtype=object), digest))
        if i == len(self.label_digests) or self.label_digests[i] != digest:
            raise KeyError("unknown label digest")
        return i

    def _incidence(self) -> sp.csr_matrix:
        data = np.ones(self.indices.numel(), dtype=np.int64)
        return sp.csr_matrix(
            (data, self.indices.numpy(), self.indptr.numpy()), shape=(self.num_instances, self.num_classes)
        )

    def counts(self) -> torch.Tensor:
        """int64 ``[C]``: ``count(c)``, the number of instances whose label set holds c."""
        return torch.bincount(self.indices, minlength=self.num_classes)

    def cooccurrence(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sparse ``cooc(c, c')`` for c != c' that co-occur, as CSR (indptr, indices, int64 counts)."""
        a = self._incidence()
        cooc = (a.T @ a).tocsr()
        cooc.setdiag(0)
        cooc.eliminate_zeros()
        cooc.sort_indices()
        return (
            torch.from_numpy(cooc.indptr.astype(np.int64)),
            torch.from_numpy(cooc.indices.astype(np.int64)),
            torch.from_numpy(cooc.data.astype(np.int64)),
        )

    def pair_weights(self) -> PairWeights:
        """FedALC ``alpha[c, c'] = 1 - cooc(c, c') / count(c)`` over co-occurring pairs (others weigh 1)."""
        indptr, indices, cooc = self.cooccurrence()
        rows = torch.repeat_interleave(torch.arange(self.num_classes, device=indptr.device), indptr.diff())
        alpha = 1.0 - cooc.double() / self.counts()[rows].double()
        return PairWeights(indptr, indices, alpha.to(torch.float32))


def merge_reports(reports: Iterable[LabelReport]) -> LabelSets:
    """Server side: group every client's pairs by instance digest into label sets."""
    pairs = sorted({p for r in reports for p in r.pairs})
    labels = sorted({l for _, l in pairs})
    row = {l: i for i, l in enumerate(labels)}
    indptr, indices, last = [0], [], None
    for inst, lab in pairs:  # sorted by instance digest, then label digest
        if inst != last and last is not None:
            indptr.append(len(indices))
        last = inst
        indices.append(row[lab])
    if last is not None:
        indptr.append(len(indices))
    # rows within a set ascend: label digests are sorted and rows follow digest order
    return LabelSets(
        tuple(labels),
        torch.tensor(indptr, dtype=torch.int64, device="cpu"),
        torch.tensor(indices, dtype=torch.int64, device="cpu"),
    )
