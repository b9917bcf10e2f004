"""The third hostile sweep's XMC inputs (issue "The third hostile sweep", items 1-3): a filter file that
lists every label for one row no longer widens every row's prediction, the LF-* readers refuse a FIFO
by type instead of hanging (test_files.py's special-file test covers them), and every XMC file's
declared sizes are checked against the file and the label space, and its parsed values against the
machine's memory, before anything is sized from them."""

from __future__ import annotations

import functools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedkernels.data import declared_shape, read_filter, read_libsvm, read_sparse_text, read_xc, xc_format
from fedkernels.fl import FedAvg, RunConfig, Server
from fedkernels.fl.eval_batches import EVAL_ELEMENTS, eval_batches
from python_tests.reference import metrics_ref
from python_tests.support.fl_data import tiny_clients
from python_tests.support.helpers import csr_from_lists

NUM_FEATURES, NUM_CLASSES = 16, 8


class RecordingFedAvg(FedAvg):
    """FedAvg that records the (rows, width) of every prediction it is asked for."""

    def __init__(self) -> None:
        super().__init__(hidden=(8,))
        self.calls: list[tuple[int, int]] = []

    def predict_topk(self, state, x, k):
        self.calls.append((int(x.shape[0]), int(k)))
        return super().predict_topk(state, x, k)


def _reference_metrics(server: Server, test, filters: list[set[int]], k: int) -> float:
    """P@k by hand: every class ranked by the model's dense scores (ties to the smaller id), the
    filtered ids dropped, the first k scored."""
    model = server.strategy._model(server.state)
    with torch.no_grad():
        scores = model(test.x).tolist()
    ranked = [sorted(range(len(s)), key=lambda c, s=s: (-s[c], c)) for s in scores]
    kept = metrics_ref.filter_predictions(ranked, filters, k)
    truth = [set(test.indices[test.indptr[i] : test.indptr[i + 1]].tolist()) for i in range(len(test))]
    return metrics_ref.precision_at_k(kept, truth, k)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    wide=st.integers(0, 11),
    others=st.lists(st.sets(st.integers(0, NUM_CLASSES - 1), max_size=2), min_size=12, max_size=12),
    batch=st.integers(1, 12),
)
def test_a_filter_row_listing_every_label_widens_its_own_batch_only(wide, others, batch):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("fedkernels.fl.eval_batches.EVAL_ELEMENTS", 24)  # so the bound bites at this size
        _filtered_evaluation(wide, others, batch)


@functools.cache
def _server() -> Server:
    return Server(
        RecordingFedAvg(), tiny_clients(3), NUM_FEATURES, NUM_CLASSES, RunConfig(rounds=1, clients_per_round=2)
    )


def _filtered_evaluation(wide: int, others: list[set[int]], batch: int) -> None:
    server = _server()
    s = server.strategy
    assert isinstance(s, RecordingFedAvg)
    s.calls.clear()
    test = server.clients[0]
    n = len(test)
    filters = [set(others[i % 12]) for i in range(n)]
    filters[wide % n] = set(range(NUM_CLASSES))  # the hostile row: every label
    fp, fi = csr_from_lists([sorted(f) for f in filters])
    got = server.evaluate(test, (1, 3), batch, test_filter=(fp, fi))
    assert got["P@3"] == pytest.approx(_reference_metrics(server, test, filters, 3))
    assert got["P@1"] == pytest.approx(_reference_metrics(server, test, filters, 1))
    # every batch: rows x width within the bound (or one row), and only rows near the hostile one wide
    assert sum(r for r, _ in s.calls) == n
    for rows, width in s.calls:
        assert rows * width <= max(24, batch * 3, width), (rows, width)
    assert sum(r for r, w in s.calls if w == NUM_CLASSES) <= max(1, max(24, batch * 3) // NUM_CLASSES)


def test_eval_batches_cover_the_rows_within_the_bound():
    filtered = torch.zeros(10_000, dtype=torch.int64)
    filtered[5000] = 312_330  # LF-WikiSeeAlsoTitles-320K's every label, on one row
    batches = list(eval_batches(10_000, 2048, 5, 312_330, filtered))
    assert [b[0] for b in batches] == [0, *[b[1] for b in batches[:-1]]] and batches[-1][1] == 10_000
    for start, stop, width in batches:
        assert (stop - start) * width <= max(EVAL_ELEMENTS, 2048 * 5, width)
        assert width == min(5 + int(filtered[start:stop].max()), 312_330)
    assert sum(stop - start for start, stop, w in batches if w > 5) <= EVAL_ELEMENTS // 312_330 + 1
    # without a filter: the batches as before
    assert list(eval_batches(5000, 2048, 5, 100)) == [(0, 2048, 5), (2048, 4096, 5), (4096, 5000, 5)]


def test_evaluate_refuses_a_filter_of_another_length():
    clients = tiny_clients(2)
    server = Server(FedAvg(hidden=(8,)), clients, NUM_FEATURES, NUM_CLASSES, RunConfig(rounds=1, clients_per_round=2))
    fp, fi = csr_from_lists([[0]] * (len(clients[0]) + 1))
    with pytest.raises(ValueError, match="indptr must have N"):
        server.evaluate(clients[0], (1,), test_filter=(fp, fi))


# ---- the LF-* readers (on special files: test_files.py's READERS) ---------------------------------


def test_lf_readers_name_the_line_of_bytes_that_are_not_utf8(tmp_path):
    path = tmp_path / "m.txt"
    path.write_bytes(b"1 3\n0:1 \xe9\n")
    with pytest.raises(ValueError, match=rf"{path}:2: not UTF-8"):
        read_sparse_text(path)
    path.write_bytes(b"0 1\n\xff 2\n")
    with pytest.raises(ValueError, match=rf"{path}:2: not UTF-8"):
        read_filter(path, 3, 4)


# ---- declared sizes -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reader, text, match",
    [
        (read_xc, "1000000 3 3\n0 0:1\n", "header says N=1000000 samples but the file has only"),
        (read_sparse_text, "1000000 3\n0:1\n", "header says N=1000000 rows but the file has only"),
    ],
)
def test_a_row_count_the_file_cannot_hold_is_refused_before_reading(tmp_path, reader, text, match):
    path = tmp_path / "d.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        reader(path)


@pytest.mark.parametrize(
    "num_rows, num_labels, name", [(-1, 4, "num_rows"), (3, -2, "num_labels"), (3, 2**27, "num_labels")]
)
def test_read_filter_checks_its_sizes(tmp_path, num_rows, num_labels, name):
    path = tmp_path / "f.txt"
    path.write_text("0 0\n")
    with pytest.raises(ValueError, match=name):
        read_filter(path, num_rows, num_labels)


def test_declared_shape_reads_only_the_headers(tmp_path):
    # a 108-byte-style file: the header declares 2**26 classes, the file holds two samples
    (tmp_path / "train.txt").write_text(f"2 4 {2**26}\n0 0:1\n1 1:1\n")
    (tmp_path / "test.txt").write_text(f"1 4 {2**26}\n0 2:1\n")
    assert declared_shape(tmp_path) == (2, 1, 4, 2**26)
    lf = tmp_path / "lf"
    lf.mkdir()
    for part, n in (("trn", 5), ("tst", 2)):
        (lf / f"{part}_X_Xf.txt").write_text(f"{n} 7\n" + "0:1\n" * n)
        (lf / f"{part}_X_Y.txt").write_text(f"{n} 312330\n" + "0:1\n" * n)
    assert declared_shape(lf) == (5, 2, 7, 312330)
    (tmp_path / "x.svm").write_text("0 1:1\n")
    assert declared_shape(tmp_path / "x.svm") is None  # libsvm: no header, sizes known once read


# ---- what a reader holds, against the machine ---------------------------------------------------

READ_ALL = {
    "read_xc": (read_xc, "200 4 3\n" + "0,1 0:1 1:2 2:3 3:4\n" * 200),
    "read_libsvm": (lambda p: read_libsvm(p), "0,1 0:1 1:2 2:3 3:4\n" * 200),
    "read_sparse_text": (read_sparse_text, "200 4\n" + "0:1 1:2 2:3 3:4\n" * 200),
    "read_filter": (lambda p: read_filter(p, 200, 4), "".join(f"{i} {i % 4}\n" for i in range(200))),
}


@pytest.mark.parametrize("reader", sorted(READ_ALL))
def test_readers_stop_at_the_memory_the_machine_can_give_them(tmp_path, monkeypatch, reader):
    read, text = READ_ALL[reader]
    path = tmp_path / "d.txt"
    path.write_text(text)
    read(path)  # reads whole with the machine's memory
    # a machine with room for about 100 values (8 bytes each, over PARSE_COPIES) stops it part-way
    monkeypatch.setattr(xc_format, "available_memory", lambda: 8 * 100 * xc_format.PARSE_COPIES)
    with pytest.raises(ValueError, match=rf"{path}:\d+: the values read so far take .* GiB a reader may hold"):
        read(path)
