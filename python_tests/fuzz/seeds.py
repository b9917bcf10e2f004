"""Writes the seed corpora of the fuzz targets in :mod:`python_tests.fuzz.targets`:
``python -m python_tests.fuzz.seeds`` (re-run it when a strategy's payloads change: the tests check
that every honest seed is still accepted). The codec's corpus is written by ``codec_streams``.

Each corpus holds valid inputs (so mutations start from real data) and the hostile-client audit's
examples for that decoder, scaled down where the original was large (the 16 MB FedSS
request of id 0 repeated is here as 4,096 repeats: the same claim, refused the same way).
"""

from __future__ import annotations

import io
import json
import struct
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from fedkernels.fl import payload as pl
from python_tests.fuzz.codec_streams import AUDIT_V1, v2
from python_tests.fuzz.mutate import CORPUS_ROOT


def raw_payload(header: dict, body: bytes, pad: bool = True) -> bytes:
    """Safetensors bytes with this header taken at its word (for hostile headers)."""
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + body


def payload_seeds() -> dict[str, bytes]:
    good = {
        "ids": torch.tensor([3, 1, 7], dtype=torch.int64),
        "rows": torch.arange(9, dtype=torch.float32).reshape(3, 3),
        "bias": torch.tensor([1.0, -2.0, 0.5, 0.0], dtype=torch.float16),
        "stream": torch.arange(20, dtype=torch.uint8),
    }
    f32 = {"dtype": "F32", "shape": [1 << 40], "data_offsets": [0, 4]}
    entry = b'{"dtype":"F16","shape":[4],"data_offsets":[0,8]}'
    dup = b'{"bias":' + entry + b',"bias":' + entry + b"}"
    return {
        "valid.bin": pl.encode(good),
        "valid_optional.bin": pl.encode({**good, "scale": torch.tensor(2.0, dtype=torch.float64)}),
        "valid_empty_rows.bin": pl.encode({**good, "ids": good["ids"][:0], "rows": good["rows"][:0]}),
        "hostile_shape_2pow40.bin": raw_payload({"rows": f32}, bytes(4)),
        "hostile_offsets_past_end.bin": raw_payload(
            {"bias": {"dtype": "F16", "shape": [4], "data_offsets": [0, 1 << 62]}}, bytes(8)
        ),
        "hostile_header_len_2pow64.bin": struct.pack("<Q", (1 << 64) - 1) + b"{}",
        "hostile_nested_json.bin": struct.pack("<Q", 600) + b"[" * 600,
        "hostile_repeated_ids.bin": pl.encode({**good, "ids": torch.zeros(3, dtype=torch.int64)}),
        "hostile_nan_rows.bin": pl.encode({**good, "rows": torch.full((3, 3), float("nan"))}),
        "hostile_stream_too_long.bin": pl.encode({**good, "stream": torch.zeros(257, dtype=torch.uint8)}),
        "hostile_duplicate_key.bin": struct.pack("<Q", len(dup)) + dup + bytes(8),
    }


def strategy_seeds() -> dict[str, bytes]:
    from python_tests.fuzz.targets import strategy_case, strategy_names

    out: dict[str, bytes] = {}
    for name in strategy_names():
        case = strategy_case(name)
        if case.raw_request is not None:
            out[f"{name}.request.bin"] = case.raw_request
        out[f"{name}.upload.bin"] = case.raw_upload
    # FedSS: the audit's request of id 0 repeated (16 MB there; the same claim at 32 KiB), a lie about
    # num_positives, an id out of range, more ids than classes.
    for name in ("fedss", "fedss-negonly"):
        out[f"{name}.request_repeated_id0.bin"] = pl.encode(
            {"class_ids": torch.zeros(4096, dtype=torch.int64), "num_positives": torch.tensor([1])}
        )
        out[f"{name}.request_num_positives_lie.bin"] = pl.encode(
            {"class_ids": torch.tensor([0, 1]), "num_positives": torch.tensor([8])}
        )
        out[f"{name}.request_id_out_of_range.bin"] = pl.encode(
            {"class_ids": torch.tensor([0, 1 << 40]), "num_positives": torch.tensor([1])}
        )
        out[f"{name}.request_more_ids_than_classes.bin"] = pl.encode(
            {"class_ids": torch.arange(9), "num_positives": torch.tensor([1])}
        )
    # Uploads: a shape bomb in the header, and the codec's bias bomb inside an l1-difference upload.
    out["fedavg.upload_shape_bomb.bin"] = raw_payload(
        {"0.bias": {"dtype": "F32", "shape": [1 << 40], "data_offsets": [0, 4]}}, bytes(4)
    )
    l1 = pl.decode(out["l1diff.upload.bin"])
    bomb = v2(AUDIT_V1["audit_35B_bias_bomb"])
    name = sorted(l1)[0]
    out["l1diff.upload_bias_bomb.bin"] = pl.encode({**l1, name: torch.frombuffer(bytearray(bomb), dtype=torch.uint8)})
    return out


XC_VALID = b"3 6 4\n0,2 0:1.5 3:-2\n 1:0.25\n3 5:1e-3 0:7\n"
XC_SEEDS = {
    "valid.txt": XC_VALID,
    "valid_empty_lines.txt": b"2 3 2\n\n1 2:1\n",
    "hostile_nan.txt": b"1 2 2\n0 0:nan\n",
    "hostile_inf.txt": b"1 2 2\n0 0:inf 1:-inf\n",
    "hostile_1e999.txt": b"1 2 2\n0 0:1e999\n",
    "hostile_non_ascii_digit.txt": "1 4 4\n\u0663 \u00b2:1\n".encode(),
    "hostile_huge_header.txt": b"1 99999999999999999999 99999999999999999999\n0 0:1\n",
    "valid_74_bytes_f_l_at_the_bound.txt": b"2 67108864 67108864\n0,67108863 67108863:1 0:2\n1 5:1.25\n",
    "hostile_n_mismatch.txt": b"5 3 3\n0 0:1\n",
    "hostile_negative.txt": b"1 3 3\n-1 0:1\n",
}
LIBSVM_SEEDS = {
    "valid.svm": b"0,2 1:1.5 4:-2\n1 2:0.25 # comment\n\n3 5:1e-3 1:7\n",
    "valid_zero_based.svm": b"0 0:1 3:2\n1 1:0.5\n",
    "hostile_nan.svm": b"0 1:nan\n",
    "hostile_huge_id.svm": b"0 99999999999999999999:1\n",
    "hostile_label_2pow26.svm": b"67108864 1:1\n",
    "hostile_non_ascii.svm": "\u0663 1:1\n".encode(),
    "hostile_utf8_garbage.svm": b"0 1:1\n\xff\xfe 2:1\n",
}


def npz_seeds() -> dict[str, bytes]:
    def save(m) -> bytes:
        buf = io.BytesIO()
        sp.save_npz(buf, m)
        return buf.getvalue()

    x = sp.csr_matrix(np.array([[1.5, 0, -2], [0, 0.25, 0], [0, 0, 0]], dtype=np.float32))
    y = sp.csr_matrix(np.array([[1, 0], [0, 1], [1, 1]], dtype=np.float32))
    out = {
        "valid_X.npz": save(x),
        "valid_Y.npz": save(y),
        "valid_coo_X.npz": save(sp.coo_matrix(x)),
        "hostile_nan_X.npz": save(sp.csr_matrix(np.array([[np.nan, 0, 0]] * 3, dtype=np.float32))),
        # a COO matrix claiming 2^40 rows (one entry): converting it to CSR would allocate 8 TiB
        "hostile_coo_rows_2pow40.npz": save(
            sp.coo_matrix((np.ones(1, np.float32), (np.zeros(1, np.int64), np.zeros(1, np.int64))), shape=(1 << 40, 3))
        ),
        "hostile_not_a_zip.npz": b"PK\x03\x04" + bytes(40),
    }
    # the second sweep's crafted files: every member well formed, their values lying
    from python_tests.fuzz.npz_struct import to_npz

    def members(m) -> dict:
        with np.load(io.BytesIO(save(m))) as z:
            return {k: z[k] for k in z.files}

    csr, csc = members(x), members(sp.csc_matrix(x))
    out["hostile_csc_row_2pow40_X.npz"] = to_npz({**csc, "indices": np.array([0, 1 << 40, 0], dtype=np.int64)})
    out["hostile_csr_col_minus_2pow40_X.npz"] = to_npz({**csr, "indices": np.array([0, -(1 << 40), 1])})
    out["hostile_format_int_X.npz"] = to_npz({**csr, "format": np.array(3)})
    out["hostile_complex_X.npz"] = to_npz({**csr, "data": csr["data"].astype(np.complex64)})
    out["hostile_datetime_X.npz"] = to_npz({**csr, "data": csr["data"].astype("datetime64[s]")})
    # A CSR whose data.npy header claims 2^40 float32 elements, backed by 4 bytes.
    npy = io.BytesIO()
    np.lib.format.write_array_header_1_0(npy, {"descr": "<f4", "fortran_order": False, "shape": (1 << 40,)})
    out["hostile_npy_claims_2pow40.npz"] = _replace_member(out["valid_X.npz"], "data.npy", npy.getvalue() + bytes(4))
    return out


def _replace_member(npz: bytes, name: str, data: bytes) -> bytes:
    src, out = zipfile.ZipFile(io.BytesIO(npz)), io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, data if info.filename == name else src.read(info))
    return out.getvalue()


def checkpoint_seeds() -> dict[str, bytes]:
    from fedkernels.fl.checkpoint import encode_checkpoint
    from python_tests.fuzz.targets import StrategyCase

    case = StrategyCase("fedavg")  # its own server: the cached case's stays at round 0
    with tempfile.TemporaryDirectory() as tmp:
        case.server.config.rounds = 2
        case.server.run()
        path = Path(tmp) / "c.ckpt"
        case.server.save_checkpoint(path)
        good = path.read_bytes()
    # the writer refuses it (a checkpoint the reader would refuse), so it is encoded directly
    bad_round = encode_checkpoint(case.server.state, {"round": -5, "history": []})
    return {"valid_fedavg_2_rounds.ckpt": good, "hostile_round_minus_5.ckpt": bad_round}


def checkpoint_meta_seeds(valid_ckpt: bytes) -> dict[str, bytes]:
    """``<metadata JSON>\\n<history JSON>`` documents: the valid checkpoint's, and the second sweep's
    re-sealed records with wrong types."""
    from python_tests.support.checkpoint_tools import unpack

    _, meta_json, history = unpack(valid_ckpt)
    meta, hist = json.loads(meta_json), json.loads(history)

    def doc(m: dict, h: list) -> bytes:
        return json.dumps(m).encode() + b"\n" + json.dumps(h).encode()

    def rec(**changes: object) -> list:
        return [{**hist[0], **changes}, *hist[1:]]

    return {
        "valid.json": doc(meta, hist),
        "hostile_metrics_string.json": doc(meta, rec(metrics="P@1")),
        "hostile_clients_strings.json": doc(meta, rec(clients=["a"])),
        "hostile_failed_not_pairs.json": doc(meta, rec(failed=[[0, 5]])),
        "hostile_bytes_string.json": doc(meta, rec(bytes_up="12")),
        "hostile_seconds_string.json": doc(meta, rec(seconds="fast")),
        "hostile_seed_string.json": doc({**meta, "seed": "5"}, hist),
        "hostile_round_true.json": doc({**meta, "round": True}, hist),
    }


_CONFIG_VALID = (
    'algorithms = ["FedAvg", "FedMLH"]\nrounds = 2\nclients = 3\nclients_per_round = 2\n'
    "ks = [1, 3]\ntest_fraction = 0.25\nbeta = 0.5\nlr = 0.05\nseed = 7\nthreads = 1\n"
    "[synthetic]\nnum_samples = 100\nnum_features = 8\nnum_classes = 40\n"
    "[algorithm_options.FedMLH]\nnum_buckets = 5\nhidden = [4]\n"
)
CONFIG_SEEDS = {
    "valid.toml": _CONFIG_VALID.encode(),
    "valid_minimal.toml": b"rounds = 1\n",
    "hostile_ks_float.toml": b"ks = [1.5]\n",
    "hostile_test_fraction_string.toml": b'test_fraction = "0.2"\n',
    "hostile_beta_string.toml": b'beta = "x"\n',
    "hostile_clients_1e9.toml": b"clients = 1000000000\n",
    "hostile_threads_1e6.toml": b"threads = 1000000\n",
    "hostile_hidden_negative.toml": b'algorithms = ["FedAvg"]\n[algorithm_options.FedAvg]\nhidden = [-5]\n',
    "hostile_synthetic_huge.toml": b"[synthetic]\nnum_samples = 1000000000\n",
    "hostile_rounds_bool.toml": b"rounds = true\n",
    "hostile_seed_negative.toml": b"seed = -1\n",
}


# The third sweep's inputs (python_tests/fuzz/sweep3_targets.py).
FILTER_SEEDS = {
    "valid.txt": b"0 1\n0 2\n3 5\n",
    "valid_empty.txt": b"",
    "valid_repeated_pairs.txt": b"1 4\n1 4\n1 4\n\n2 0\n",
    # the case: one row listing every label (handled: it widens its own batch only)
    "valid_every_label_one_row.txt": b"".join(b"2 %d\n" % c for c in range(6)),
    "hostile_row_out_of_range.txt": b"4 0\n",
    "hostile_label_out_of_range.txt": b"0 6\n",
    "hostile_negative.txt": b"-1 0\n",
    "hostile_non_ascii_digit.txt": "0 \u0663\n".encode(),
    "hostile_three_fields.txt": b"0 1 2\n",
    "hostile_not_utf8.txt": b"0 1\n\xff 2\n",
}
SPARSE_TEXT_SEEDS = {
    "valid.txt": b"3 5\n0:1.5 3:-2\n\n4:0.25 0:1e-3\n",
    "valid_empty_rows.txt": b"2 3\n\n\n",
    "hostile_rows_beyond_the_file.txt": b"1000000 3\n0:1\n",
    "hostile_c_2pow27.txt": b"1 134217728\n0:1\n",
    "hostile_nan.txt": b"1 3\n0:nan\n",
    "hostile_column_out_of_range.txt": b"1 3\n3:1\n",
    "hostile_n_mismatch.txt": b"3 3\n0:1\n",
}
METRICS_SEEDS = {
    "valid.txt": b"topk 2 3 ; 3 0 ; 1 0\nindptr 0 2 3 3\nindices 1 2 0\nw 2 4 1 3\n",
    "valid_empty_slots.txt": b"topk 1 -1 ; -1 -1\nindptr 0 1 2\nindices 1 0\n",
    # the false hits: a label of -1 keyed onto the row before, a prediction near 2**62 wrapping
    "hostile_label_minus_one.txt": b"topk 3 ; 0\nindptr 0 0 1\nindices -1\n",
    "hostile_prediction_2pow62.txt": b"topk 5 ; 0 ; 0 ; 0 ; 4611686018427387904\nindptr 0 0 0 0 0 1\nindices 1\n",
    "hostile_indptr_decreasing.txt": b"topk 0 ; 1\nindptr 0 2 1\nindices 0 1\n",
    "hostile_repeated_prediction.txt": b"topk 3 3\nindptr 0 1\nindices 3\n",
    "hostile_weight_nan.txt": b"topk 0 1\nindptr 0 1\nindices 0\nw 1 nan\n",
}
PROPENSITY_SEEDS = {
    "valid_default.txt": b"0.55 1.5",
    "valid_amazon.txt": b"0.6 2.6",
    "valid_wikipedia.txt": b"0.5 0.4",
    "hostile_b_zero.txt": b"0.55 0",
    "hostile_b_negative.txt": b"0.55 -1.5",
    "hostile_b_minus_one.txt": b"0.55 -1",
    "hostile_a_nan.txt": b"nan 1.5",
    "hostile_overflow.txt": b"2000 1e-9",
}
_SMALL = "[synthetic]\nnum_samples = 100\nnum_features = 8\nnum_classes = 40\n"
MODEL_SHAPE_SEEDS = {
    "valid.toml": (
        'algorithms = ["FedAvg", "FedMLH", "FedSS", "FedAwS"]\nbatch_size = 16\n'
        + _SMALL
        + "[algorithm_options.FedAvg]\nhidden = [32, 16]\n[algorithm_options.FedMLH]\nnum_buckets = 8\n"
        "num_tables = 2\nhidden = [16]\n[algorithm_options.FedSS]\nembed_dim = 8\nhidden = [16]\n"
        "[algorithm_options.FedAwS]\ndim = 8\nhidden = [16]\n"
    ).encode(),
    # the model: each width within [1, 2**24], 4 TB together
    "hostile_fedavg_hidden_1e6_1e6.toml": (
        'algorithms = ["FedAvg"]\n' + _SMALL + "[algorithm_options.FedAvg]\nhidden = [1000000, 1000000]\n"
    ).encode(),
    "hostile_classes_2pow16_hidden_2pow24.toml": (
        b'algorithms = ["FedAvg"]\n[synthetic]\nnum_samples = 100\nnum_features = 8\nnum_classes = 65536\n'
        b"[algorithm_options.FedAvg]\nhidden = [16777216]\n"
    ),
    "hostile_fedmlh_r_b.toml": (
        'algorithms = ["FedMLH"]\n'
        + _SMALL
        + "[algorithm_options.FedMLH]\nnum_tables = 65536\nnum_buckets = 16777216\nhidden = [16]\n"
    ).encode(),
    "hostile_fedss_embed_dim.toml": (
        'algorithms = ["FedSS"]\n' + _SMALL + "[algorithm_options.FedSS]\nembed_dim = 16777216\nhidden = [16777216]\n"
    ).encode(),
    "hostile_batch_activations.toml": (
        b'algorithms = ["FedAvg"]\nbatch_size = 1000000\n[synthetic]\nnum_samples = 2000000\n'
        b"num_features = 1\nnum_classes = 2\n[algorithm_options.FedAvg]\nhidden = [16777216, 1]\n"
    ),
}


def write_corpus() -> None:
    groups = {
        "payload": payload_seeds(),
        "xc": XC_SEEDS,
        "libsvm": LIBSVM_SEEDS,
        "npz": npz_seeds(),
        "checkpoint": checkpoint_seeds(),
        "strategy": strategy_seeds(),
        "config": CONFIG_SEEDS,
        "filter": FILTER_SEEDS,
        "sparse_text": SPARSE_TEXT_SEEDS,
        "metrics": METRICS_SEEDS,
        "propensity": PROPENSITY_SEEDS,
        "model_shape": MODEL_SHAPE_SEEDS,
    }
    groups["checkpoint_meta"] = checkpoint_meta_seeds(groups["checkpoint"]["valid_fedavg_2_rounds.ckpt"])
    for group, files in groups.items():
        folder = CORPUS_ROOT / group
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.iterdir():
            old.unlink()
        for name, data in files.items():
            (folder / name).write_bytes(data)


if __name__ == "__main__":
    write_corpus()
