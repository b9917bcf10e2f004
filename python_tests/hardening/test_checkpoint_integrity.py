"""Checkpoint integrity (issue "A server no client can exhaust or fool", item 6): a checksum over
tensors and metadata, a run identity that includes TrainConfig and the strategy's options, field
checks of the metadata naming path and field, and no temp files left by a killed save."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fedkernels.fl import FedAvg, TrainConfig
from fedkernels.fl import checkpoint as ck
from python_tests.support.hardening import make_server


def _written(tmp_path, rounds: int = 1):
    ckpt = tmp_path / "run.ckpt"
    make_server(rounds=rounds, checkpoint=str(ckpt)).run()
    return ckpt


def _tensor_region(raw: bytes) -> tuple[int, int]:
    n = int.from_bytes(raw[:8], "little")
    return 8 + n, len(raw)


def _rewrite_meta(ckpt, edit, keep_checksum: bool = False) -> None:
    """Rewrite the checkpoint's JSON metadata (its history included, as ``meta["history"]``) with
    ``edit(meta) -> JSON text`` (re-sealed unless ``keep_checksum``)."""
    import torch

    from fedkernels.fl import payload as pl
    from python_tests.support.checkpoint_tools import seal, unpack

    raw = ckpt.read_bytes()
    state, meta_json, history = unpack(raw)
    meta = json.loads(meta_json)
    meta["history"] = json.loads(history)
    new_json = edit(meta)
    try:
        obj = json.loads(new_json)
    except ValueError:
        obj = None
    if isinstance(obj, dict) and "history" in obj:
        history = json.dumps(obj.pop("history")).encode()
        new_json = json.dumps(obj)
    if keep_checksum:
        tensors = {**state, ck.HISTORY: torch.frombuffer(bytearray(history), dtype=torch.uint8)}
        old_sum = pl.read_metadata(raw)[ck._SUM_KEY]
        ckpt.write_bytes(pl.encode(tensors, metadata={ck._META_KEY: new_json, ck._SUM_KEY: old_sum}))
    else:
        ckpt.write_bytes(seal(state, new_json, history))


def test_every_single_bit_flip_in_a_tensor_is_refused(tmp_path):
    ckpt = _written(tmp_path)
    raw = ckpt.read_bytes()
    lo, hi = _tensor_region(raw)
    for pos in range(lo, hi, max(1, (hi - lo) // 40)):
        for bit in (0, 7):
            bad = bytearray(raw)
            bad[pos] ^= 1 << bit
            ckpt.write_bytes(bytes(bad))
            with pytest.raises(ValueError, match=f"{ckpt}.*checksum"):
                make_server(rounds=2, checkpoint=str(ckpt))


def test_changed_metadata_without_reseal_is_refused(tmp_path):
    ckpt = _written(tmp_path)
    _rewrite_meta(ckpt, lambda m: json.dumps({**m, "round": 0, "history": []}), keep_checksum=True)
    with pytest.raises(ValueError, match="checksum"):
        make_server(rounds=2, checkpoint=str(ckpt))


@pytest.mark.parametrize(
    "change, field",
    [
        (dict(train=TrainConfig(epochs=1, batch_size=16, lr=0.01)), "train.lr=0.3, this run has 0.01"),
        (dict(train=TrainConfig(epochs=2, batch_size=16, lr=0.3)), "train.epochs"),
        (dict(train=TrainConfig(epochs=1, batch_size=16, lr=0.3, optimizer="adam")), "train.optimizer"),
        (dict(strategy=FedAvg(hidden=(8,), loss="softmax")), "strategy_options.loss='bce', this run has 'softmax'"),
    ],
)
def test_resume_with_other_train_config_or_options_is_refused(tmp_path, change, field):
    ckpt = _written(tmp_path)
    with pytest.raises(ValueError, match=field.replace("(", r"\(").replace(".", r"\.")):
        make_server(change.pop("strategy", None), rounds=2, checkpoint=str(ckpt), **change)


def test_same_config_still_resumes(tmp_path):
    ckpt = _written(tmp_path)
    assert make_server(rounds=2, checkpoint=str(ckpt)).round == 1


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda m: "{not json", "'fedkernels.checkpoint' is not valid JSON"),
        (lambda m: json.dumps([1, 2]), "must be a JSON object"),
        (lambda m: json.dumps({k: v for k, v in m.items() if k != "round"}), "field 'round'"),
        (lambda m: json.dumps({**m, "round": -5}), "field 'round'.*-5"),
        (lambda m: json.dumps({**m, "round": 2**40}), "field 'round'"),
        (lambda m: json.dumps({**m, "round": "1"}), "field 'round'"),
        (lambda m: json.dumps({**m, "round": True}), "field 'round'"),
        (lambda m: json.dumps({**m, "round": 3}), "field 'history'"),
        (lambda m: json.dumps({**m, "history": {"a": 1}}), "field 'history'"),
        (lambda m: json.dumps({**m, "history": [{"round": 0}]}), r"field 'history\[0\]'"),
        (lambda m: json.dumps({**m, "history": [{**m["history"][0], "round": 4}]}), r"field 'history\[0\]"),
    ],
)
def test_malformed_metadata_names_path_and_field(tmp_path, edit, field):
    ckpt = _written(tmp_path)
    _rewrite_meta(ckpt, edit)
    with pytest.raises(ValueError, match=f"{ckpt}.*{field}"):
        make_server(rounds=2, checkpoint=str(ckpt))


def test_corrupt_tensors_name_the_path(tmp_path):
    ckpt = _written(tmp_path)
    ckpt.write_bytes(ckpt.read_bytes()[:-3])
    with pytest.raises(ValueError, match=str(ckpt)):
        make_server(rounds=2, checkpoint=str(ckpt))


def test_temp_file_of_a_killed_save_is_removed(tmp_path):
    ckpt = _written(tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".run.ckpt.tmp-{int(dead.stdout)}"
    stale.write_bytes(b"half a checkpoint")
    live = tmp_path / f".run.ckpt.tmp-{1}"  # pid 1 is alive: a writer still at work keeps its file
    live.write_bytes(b"in progress")
    other = tmp_path / ".other.ckpt.tmp-99999999"
    other.write_bytes(b"not ours")
    s = make_server(rounds=2, checkpoint=str(ckpt))  # resume cleans
    assert not stale.exists() and live.exists() and other.exists()
    stale.write_bytes(b"again")
    s.run()  # and so does the next save
    assert not stale.exists() and live.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [".other.ckpt.tmp-99999999", ".run.ckpt.tmp-1", "run.ckpt"]
    )


def test_sigkill_mid_save_leaves_a_temp_that_the_next_save_removes(tmp_path):
    """A real kill in the middle of the write (between the temp file and the rename)."""
    ckpt = tmp_path / "run.ckpt"
    code = f"""
import os, signal
import fedkernels.fl.checkpoint as ck
from python_tests.support.hardening import make_server
real = os.replace
def die(*a):
    os.kill(os.getpid(), signal.SIGKILL)
s = make_server(rounds=1, checkpoint={str(ckpt)!r})
os.replace = die
s.run()
"""
    from python_tests.support.helpers import child_pythonpath

    env = {**os.environ, "PYTHONPATH": child_pythonpath()}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    temps = [p for p in tmp_path.iterdir() if p.name.startswith(".run.ckpt.tmp-")]
    assert len(temps) == 1 and not ckpt.exists()
    make_server(rounds=1, checkpoint=str(ckpt)).run()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.ckpt"]
