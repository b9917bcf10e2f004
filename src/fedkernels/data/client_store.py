"""A population's clients on disk, memory-mapped, served one client at a time.

:class:`ClientStoreWriter` streams clients (one :class:`~fedkernels.data.types.ClientData` or a block of
many as arrays) into a folder once; :class:`ClientStore` maps that folder and serves ``store[c]`` as a
``ClientData``, keeping at most ``max_resident`` clients materialised (least recently used first out).
A process's memory then grows with the clients it touches at once (a round's cohort), not with the
population: the population costs one int64 per client (its row offset) plus what the OS pages in.

Layout (little-endian raw arrays, their lengths and dtypes in ``index.json``): every client's rows are
concatenated in client order.

- ``clients.bin`` int64 ``[C + 1]``: client c holds rows ``[clients[c], clients[c + 1])``;
- ``y_indptr.bin`` int64 ``[N + 1]`` and ``y_indices.bin`` int64 ``[nnz_y]``: the label CSR over all rows;
- dense features: ``x.bin`` ``[N, F]`` (float32 or float64);
- sparse features: ``x_indptr.bin`` int64 ``[N + 1]``, ``x_indices.bin`` (int32 or int64, the clients'
  column-id dtype) and ``x_values.bin`` ``[nnz_x]``.

The files may come from elsewhere, so nothing in them is trusted: the index is size-bounded and checked,
every file's byte length must match the index before it is mapped, and a client's row pointers are
checked (inside the file, non-decreasing) before its slice is copied out, so a corrupt store costs at
most one client's declared bytes and raises ``ValueError`` naming the file and the client. The index
also holds the population's data fingerprint (:mod:`fedkernels.data.fingerprint`, computed while
writing), so a run's identity needs no pass over the clients; it names the data, it does not
authenticate it (:meth:`ClientStore.verify_fingerprint` recomputes it).
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch

from .fingerprint import add_client_arrays, new_fingerprint
from .types import ClientData

__all__ = ["ClientStore", "ClientStoreWriter", "write_client_store"]

FORMAT = "fedkernels-client-store-v1"
INDEX = "index.json"
MAX_INDEX_BYTES = 1 << 16
MAX_COUNT = 1 << 48  # any count in an index above this is refused (no file of ours is that long)
VALUE_DTYPES = {"float32": np.float32, "float64": np.float64}
INDEX_DTYPES = {"int32": np.int32, "int64": np.int64}


def _torch(a: np.ndarray) -> torch.Tensor:
    """A tensor owning ``a``'s memory (an empty one made by torch, so its strides are the usual ones)."""
    return torch.from_numpy(a) if a.size else torch.empty(a.shape, dtype=torch.from_numpy(a[:0].copy()).dtype)


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().contiguous().numpy()


def client_arrays(
    c: ClientData,
) -> tuple[np.ndarray | tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray, np.ndarray]:
    """A client's features (dense ``[n, F]`` or CSR ``(crow, col, values)``) and label CSR as numpy arrays."""
    x = c.x
    if x.layout == torch.sparse_csr:
        parts: np.ndarray | tuple[np.ndarray, np.ndarray, np.ndarray] = (
            _np(x.crow_indices()),
            _np(x.col_indices()),
            _np(x.values()),
        )
    elif x.layout == torch.strided and x.dim() == 2:
        parts = _np(x)
    else:
        raise ValueError(f"data.x: a store holds dense 2-D or sparse CSR features, got layout {x.layout}, {x.dim()}-D")
    return parts, _np(c.indptr), _np(c.indices)


class ClientStoreWriter:
    """Writes ``num_clients`` clients into the empty (or new) folder ``path``, in client order.

    Features must have one layout (dense or sparse CSR), one value dtype (float32/float64) and, when
    sparse, one column-id dtype across the population; labels are int64. The index is written by
    :meth:`close`, after every client: a folder without it is not a store.

    Args:
        path: the store's folder.
        num_clients: how many clients will be appended (the fingerprint hashes the count first).
        num_features: F (every client's ``x.shape[1]``).
        num_classes: p (every client's ``num_classes``; label ids are checked against it).
    """

    def __init__(self, path: str | Path, num_clients: int, num_features: int, num_classes: int) -> None:
        for name, v in (("num_clients", num_clients), ("num_features", num_features), ("num_classes", num_classes)):
            if not isinstance(v, int | np.integer) or v < 0 or v > MAX_COUNT:
                raise ValueError(f"{name} must be an int in [0, 2**48], got {v!r}")
        self.path = Path(path)
        if self.path.exists() and any(self.path.iterdir()):
            raise ValueError(f"path: {self.path} exists and is not empty (a store is written into a new folder)")
        self.path.mkdir(parents=True, exist_ok=True)
        self.num_clients, self.num_features, self.num_classes = int(num_clients), int(num_features), int(num_classes)
        self.layout: str | None = None  # "dense" | "csr", fixed by the first client
        self.x_dtype: np.dtype | None = None
        self.index_dtype: np.dtype | None = None
        self._files: dict[str, BinaryIO] = {}
        self._hash = new_fingerprint(self.num_clients)
        self.clients_written, self.rows, self.x_nnz, self.y_nnz = 0, 0, 0, 0
        self._write("clients", np.zeros(1, np.int64))
        self._write("y_indptr", np.zeros(1, np.int64))
        self._closed = False

    def _write(self, name: str, a: np.ndarray) -> None:
        f = self._files.get(name)
        if f is None:
            f = self._files[name] = open(self.path / f"{name}.bin", "wb")  # noqa: SIM115 (closed in close())
        f.write(np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False).tobytes())

    def _fix_layout(self, layout: str, x_dtype: np.dtype, index_dtype: np.dtype | None) -> None:
        if self.layout is None:
            if x_dtype not in [np.dtype(d) for d in VALUE_DTYPES.values()]:
                raise ValueError(f"x: feature values must be float32 or float64, got {x_dtype}")
            if index_dtype is not None and index_dtype not in [np.dtype(d) for d in INDEX_DTYPES.values()]:
                raise ValueError(f"x: sparse column ids must be int32 or int64, got {index_dtype}")
            self.layout, self.x_dtype, self.index_dtype = layout, x_dtype, index_dtype
            if layout == "csr":
                self._write("x_indptr", np.zeros(1, np.int64))
            return
        if (layout, x_dtype, index_dtype) != (self.layout, self.x_dtype, self.index_dtype):
            raise ValueError(
                f"x: every client must share one feature layout and dtypes; the first was {self.layout} "
                f"{self.x_dtype} {self.index_dtype}, client {self.clients_written} is {layout} {x_dtype} {index_dtype}"
            )

    def append(self, data: ClientData) -> None:
        """Append the next client."""
        if data.num_classes != self.num_classes:
            raise ValueError(f"data.num_classes is {data.num_classes}, the store's is {self.num_classes}")
        x, indptr, indices = client_arrays(data)
        n = len(indptr) - 1
        if isinstance(x, tuple):
            crow, col, val = x
            self.append_block(np.array([n], np.int64), (crow, col, val), indptr, indices)
        else:
            self.append_block(np.array([n], np.int64), x, indptr, indices)

    def append_block(
        self,
        rows: np.ndarray,
        x: np.ndarray | tuple[np.ndarray, np.ndarray, np.ndarray],
        indptr: np.ndarray,
        indices: np.ndarray,
    ) -> None:
        """Append ``len(rows)`` clients at once: client k holds the next ``rows[k]`` rows of the block's
        features ``x`` (dense ``[R, F]`` or a CSR ``(crow [R + 1], col, values)``) and labels
        (``indptr`` int64 ``[R + 1]``, ``indices`` int64), ``R = rows.sum()``. Pointers start at 0."""
        if self._closed:
            raise ValueError("the writer is closed")
        rows = np.asarray(rows, dtype=np.int64)
        if rows.ndim != 1 or (rows < 0).any():
            raise ValueError("rows must be a 1-D array of non-negative counts")
        if self.clients_written + len(rows) > self.num_clients:
            raise ValueError(f"more than num_clients = {self.num_clients} clients appended")
        total = int(rows.sum())
        indptr, indices = np.asarray(indptr), np.asarray(indices)
        _check_ptr("indptr", indptr, total, len(indices))
        if indices.dtype != np.int64:
            raise ValueError(f"indices: label ids must be int64, got {indices.dtype}")
        if len(indices) and (indices.min() < 0 or indices.max() >= self.num_classes):
            raise ValueError(f"indices: label ids must lie in [0, {self.num_classes})")
        starts = np.concatenate([[0], np.cumsum(rows)])
        if isinstance(x, tuple):
            crow, col, val = (np.asarray(a) for a in x)
            self._fix_layout("csr", val.dtype, col.dtype)
            _check_ptr("x crow", crow, total, len(col))
            if len(val) != len(col):
                raise ValueError(f"x: {len(col)} column ids but {len(val)} values")
            if len(col) and (col.min() < 0 or col.max() >= self.num_features):
                raise ValueError(f"x: column ids must lie in [0, {self.num_features})")
            self._write("x_indptr", (crow[1:] + self.x_nnz).astype(np.int64))
            self._write("x_indices", col)
            self._write("x_values", val)
            self.x_nnz += len(col)
        else:
            x = np.asarray(x)
            if x.ndim != 2 or x.shape != (total, self.num_features):
                raise ValueError(f"x: expected dense [{total}, {self.num_features}], got {list(x.shape)}")
            self._fix_layout("dense", x.dtype, None)
            self._write("x", x)
        for k in range(len(rows)):  # each client's fingerprint bytes, from its own slices
            r0, r1 = int(starts[k]), int(starts[k + 1])
            yp = indptr[r0 : r1 + 1]
            yp = yp - yp[0]
            yi = indices[int(indptr[r0]) : int(indptr[r1])]
            if isinstance(x, tuple):
                xp = crow[r0 : r1 + 1]
                xparts: np.ndarray | tuple[np.ndarray, np.ndarray, np.ndarray] = (
                    (xp - xp[0]).astype(col.dtype, copy=False),
                    col[int(xp[0]) : int(xp[-1])],
                    val[int(xp[0]) : int(xp[-1])],
                )
            else:
                xparts = x[r0:r1]
            add_client_arrays(self._hash, xparts, (r1 - r0, self.num_features), yp, yi, self.num_classes)
        self._write("clients", starts[1:] + self.rows)
        self._write("y_indptr", indptr[1:].astype(np.int64) + self.y_nnz)
        self._write("y_indices", indices)
        self.y_nnz += len(indices)
        self.rows += total
        self.clients_written += len(rows)

    def close(self) -> None:
        """Write the index (every client must have been appended)."""
        if self._closed:
            return
        if self.clients_written != self.num_clients:
            raise ValueError(f"num_clients is {self.num_clients} but {self.clients_written} clients were appended")
        if self.layout is None:  # no client had a row: a dense [0, F] layout
            self._fix_layout("dense", np.dtype(np.float32), None)
        for name in ("x",) if self.layout == "dense" else ("x_indices", "x_values"):
            self._write(name, np.zeros(0, self.x_dtype if name != "x_indices" else self.index_dtype))
        self._write("y_indices", np.zeros(0, np.int64))
        for f in self._files.values():
            f.close()
        assert self.x_dtype is not None
        index = {
            "format": FORMAT,
            "num_clients": self.num_clients,
            "num_rows": self.rows,
            "num_features": self.num_features,
            "num_classes": self.num_classes,
            "layout": self.layout,
            "x_dtype": self.x_dtype.name,
            "x_index_dtype": None if self.index_dtype is None else self.index_dtype.name,
            "x_nnz": self.x_nnz,
            "y_nnz": self.y_nnz,
            "fingerprint": self._hash.hexdigest(),
        }
        tmp = self.path / (INDEX + ".tmp")
        tmp.write_text(json.dumps(index, indent=1))
        os.replace(tmp, self.path / INDEX)
        self._closed = True

    def __enter__(self) -> ClientStoreWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
        else:
            for f in self._files.values():
                f.close()


def _check_ptr(name: str, ptr: np.ndarray, rows: int, nnz: int) -> None:
    if ptr.ndim != 1 or len(ptr) != rows + 1:
        raise ValueError(f"{name}: expected {rows + 1} row pointers, got shape {list(ptr.shape)}")
    if ptr[0] != 0 or ptr[-1] != nnz or (np.diff(ptr) < 0).any():
        raise ValueError(f"{name}: row pointers must start at 0, not decrease and end at {nnz}")


def write_client_store(path: str | Path, clients: Iterable[ClientData], num_clients: int | None = None) -> None:
    """Write ``clients`` (a sequence, or an iterable of ``num_clients``) to a new store at ``path``.
    The first client gives F and p; an empty population needs a sequence (and is refused: no client
    to take F and p from)."""
    if num_clients is None:
        if not isinstance(clients, Sequence):
            raise ValueError("num_clients: required when clients is an iterator")
        num_clients = len(clients)
    it = iter(clients)
    first = next(it, None)
    if first is None:
        raise ValueError("clients must not be empty")
    with ClientStoreWriter(path, num_clients, int(first.x.shape[1]), first.num_classes) as w:
        w.append(first)
        for c in it:
            w.append(c)


class ClientStore(Sequence[ClientData]):
    """The clients of a store written by :class:`ClientStoreWriter`, served lazily.

    ``store[c]`` is client c's :class:`ClientData` (host tensors of its own, copied out of the mapped
    files); at most ``max_resident`` clients are kept materialised, least recently used evicted first
    (0: none kept). ``num_examples[c]`` and :attr:`fingerprint` come from the index, without
    materialising a client.

    Args:
        path: the store's folder.
        max_resident: the bound on materialised clients this object keeps (>= 0).

    Raises:
        ValueError: the folder is not a store, or its index or files are malformed or disagree (the
            message names the file).
    """

    def __init__(self, path: str | Path, max_resident: int = 1024) -> None:
        if not isinstance(max_resident, int) or max_resident < 0:
            raise ValueError(f"max_resident must be an int >= 0, got {max_resident!r}")
        self.path, self.max_resident = Path(path), max_resident
        meta = _read_index(self.path)
        self.num_clients: int = meta["num_clients"]
        self.num_rows: int = meta["num_rows"]
        self.num_features: int = meta["num_features"]
        self.num_classes: int = meta["num_classes"]
        self.layout: str = meta["layout"]
        self.fingerprint: str = meta["fingerprint"]
        self.x_dtype = np.dtype(VALUE_DTYPES[meta["x_dtype"]])
        x_nnz, y_nnz = meta["x_nnz"], meta["y_nnz"]
        self._arrays: dict[str, np.ndarray] = {}
        self._map("clients", np.int64, self.num_clients + 1)
        self._map("y_indptr", np.int64, self.num_rows + 1)
        self._map("y_indices", np.int64, y_nnz)
        if self.layout == "dense":
            self._map("x", self.x_dtype, self.num_rows * self.num_features)
        else:
            self.index_dtype = np.dtype(INDEX_DTYPES[meta["x_index_dtype"]])
            self._map("x_indptr", np.int64, self.num_rows + 1)
            self._map("x_indices", self.index_dtype, x_nnz)
            self._map("x_values", self.x_dtype, x_nnz)
        offsets = np.array(self._arrays["clients"])  # C + 1 int64: the population's only resident cost
        if offsets[0] != 0 or offsets[-1] != self.num_rows or (np.diff(offsets) < 0).any():
            raise ValueError(
                f"ClientStore {self.path}: clients.bin's row offsets must start at 0, not decrease and end at "
                f"num_rows = {self.num_rows}"
            )
        for name, nnz in (("y_indptr", y_nnz), ("x_indptr", x_nnz)):
            if name in self._arrays and (self._arrays[name][0] != 0 or self._arrays[name][-1] != nnz):
                raise ValueError(f"ClientStore {self.path}: {name}.bin must start at 0 and end at {nnz}")
        self.num_examples = np.diff(offsets)
        """int64 ``[C]``: each client's example count (from the offsets, no client read)."""
        self.num_examples.flags.writeable = False
        self._offsets = offsets
        self._cache: OrderedDict[int, ClientData] = OrderedDict()
        self.loads = 0
        """How many times a client was materialised from the files (cache misses and :meth:`load` calls)."""

    def _map(self, name: str, dtype: type | np.dtype, count: int) -> None:
        file = self.path / f"{name}.bin"
        dt = np.dtype(dtype).newbyteorder("<")
        want = count * dt.itemsize
        try:
            have = file.stat().st_size
        except OSError as e:
            raise ValueError(f"ClientStore {self.path}: {file.name} is missing ({e.strerror})") from None
        if have != want:
            raise ValueError(
                f"ClientStore {self.path}: {file.name} holds {have} bytes, the index says {count} x "
                f"{dt.name} = {want}: a truncated or foreign file"
            )
        # an empty file cannot be mapped; its array is empty
        self._arrays[name] = np.memmap(file, dtype=dt, mode="r") if count else np.zeros(0, dt)

    def __len__(self) -> int:
        return self.num_clients

    def __reduce__(self) -> tuple:
        # pickled as its path (another process, e.g. a Flower node, maps the files itself), not its arrays
        return (ClientStore, (str(self.path), self.max_resident))

    def _index(self, c: int) -> int:
        if isinstance(c, bool) or not isinstance(c, int | np.integer):
            raise TypeError(f"client index must be an int, got {type(c).__name__}")
        c = int(c)
        if c < 0:
            c += self.num_clients
        if not 0 <= c < self.num_clients:
            raise IndexError(f"client {c} out of range for a store of {self.num_clients} clients")
        return c

    def __getitem__(self, c):
        """Client ``c`` (kept among the ``max_resident`` most recently used); a slice gives a list."""
        if isinstance(c, slice):
            return [self[i] for i in range(*c.indices(self.num_clients))]
        c = self._index(c)
        hit = self._cache.get(c)
        if hit is not None:
            self._cache.move_to_end(c)
            return hit
        data = self.load(c)
        if self.max_resident:
            self._cache[c] = data
            while len(self._cache) > self.max_resident:
                self._cache.popitem(last=False)
        return data

    def __iter__(self) -> Iterator[ClientData]:
        """Every client in order, each read afresh and not kept (a pass over the population costs one
        client's memory at a time)."""
        for c in range(self.num_clients):
            yield self.load(c)

    @property
    def resident(self) -> int:
        """How many clients this object keeps materialised now."""
        return len(self._cache)

    def load(self, c: int) -> ClientData:
        """Client ``c`` read from the files, not kept. Its pointers are checked before its slices are
        copied, so a corrupt file costs no more than the client's declared bytes."""
        c = self._index(c)
        self.loads += 1
        r0, r1 = int(self._offsets[c]), int(self._offsets[c + 1])
        n = r1 - r0
        yp = self._pointers("y_indptr", c, r0, r1, len(self._arrays["y_indices"]))
        indices = np.array(self._arrays["y_indices"][yp[0] : yp[-1]])
        if len(indices) and (indices.min() < 0 or indices.max() >= self.num_classes):
            raise ValueError(
                f"ClientStore {self.path}: client {c} has label ids outside [0, {self.num_classes}) in y_indices.bin"
            )
        F = self.num_features
        if self.layout == "dense":
            xa = np.array(self._arrays["x"][r0 * F : r1 * F]).reshape(n, F)
            x = _torch(xa)
        else:
            xp = self._pointers("x_indptr", c, r0, r1, len(self._arrays["x_indices"]))
            col = np.array(self._arrays["x_indices"][xp[0] : xp[-1]])
            if len(col) and (col.min() < 0 or col.max() >= F):
                raise ValueError(
                    f"ClientStore {self.path}: client {c} has column ids outside [0, {F}) in x_indices.bin"
                )
            val = np.array(self._arrays["x_values"][xp[0] : xp[-1]])
            crow = _torch((xp - xp[0]).astype(self.index_dtype))
            x = torch.sparse_csr_tensor(crow, _torch(col), _torch(val), size=(n, F), check_invariants=False)
        return ClientData(x, _torch(yp - yp[0]), _torch(indices), self.num_classes)

    def _pointers(self, name: str, c: int, r0: int, r1: int, nnz: int) -> np.ndarray:
        p = np.array(self._arrays[name][r0 : r1 + 1], dtype=np.int64)
        if p[0] < 0 or p[-1] > nnz or (np.diff(p) < 0).any():
            raise ValueError(
                f"ClientStore {self.path}: client {c}'s row pointers in {name}.bin leave [0, {nnz}] or decrease"
            )
        return p

    def verify_fingerprint(self) -> bool:
        """Whether the clients' bytes still hash to the index's :attr:`fingerprint` (one pass)."""
        from .fingerprint import add_client

        h = new_fingerprint(self.num_clients)
        for data in self:
            add_client(h, data)
        return h.hexdigest() == self.fingerprint


def _read_index(path: Path) -> dict:
    file = path / INDEX
    try:
        with open(file, "rb") as f:
            raw = f.read(MAX_INDEX_BYTES + 1)
    except OSError as e:
        raise ValueError(f"ClientStore {path}: no readable {INDEX} ({e.strerror}): not a client store") from None
    if len(raw) > MAX_INDEX_BYTES:
        raise ValueError(
            f"ClientStore {path}: {INDEX} is larger than {MAX_INDEX_BYTES} bytes (not a client store index)"
        )
    try:
        meta = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"ClientStore {path}: {INDEX} is not JSON ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError(f"ClientStore {path}: {INDEX} is not a {FORMAT} index")
    for key in ("num_clients", "num_rows", "num_features", "num_classes", "x_nnz", "y_nnz"):
        v = meta.get(key)
        if type(v) is not int or not 0 <= v <= MAX_COUNT:
            raise ValueError(f"ClientStore {path}: {INDEX} field {key} must be an int in [0, 2**48], got {v!r}")
    if meta.get("layout") not in ("dense", "csr"):
        raise ValueError(
            f"ClientStore {path}: {INDEX} field layout must be 'dense' or 'csr', got {meta.get('layout')!r}"
        )
    if meta.get("x_dtype") not in VALUE_DTYPES:
        raise ValueError(f"ClientStore {path}: {INDEX} field x_dtype must be one of {sorted(VALUE_DTYPES)}")
    if meta["layout"] == "csr" and meta.get("x_index_dtype") not in INDEX_DTYPES:
        raise ValueError(f"ClientStore {path}: {INDEX} field x_index_dtype must be one of {sorted(INDEX_DTYPES)}")
    fp = meta.get("fingerprint")
    if not isinstance(fp, str) or len(fp) != 64 or any(ch not in "0123456789abcdef" for ch in fp):
        raise ValueError(f"ClientStore {path}: {INDEX} field fingerprint must be 64 lowercase hex digits")
    if meta["layout"] == "dense" and meta["num_rows"] * meta["num_features"] > MAX_COUNT:
        raise ValueError(f"ClientStore {path}: {INDEX} num_rows x num_features exceeds 2**48")
    return meta
