"""Fuzzing the checkpoint reader with re-sealed records (second hostile sweep): the metadata and
history of a real checkpoint, mutated (bytes of the JSON text, and whole values replaced by any JSON
value at any place) and sealed again with a valid checksum, as anyone holding the project's writer
could. Every result must be a ValueError naming the file, or a checkpoint whose every field has its
type (not a TypeError on some record, nor ``metrics="P@1"`` or string client ids accepted)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from python_tests.fuzz.harness import check_seeds, fuzz_mutations
from python_tests.fuzz.mutate import seeds, verdict
from python_tests.fuzz.targets import check_checkpoint_meta

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def test_seeds():
    check_seeds("checkpoint_meta")


@settings(max_examples=80, deadline=None, derandomize=True)
@given(data=st.data())
def test_byte_mutations(data):
    fuzz_mutations("checkpoint_meta", data)


def _places(doc: object, path: tuple = ()) -> list[tuple]:
    """Every path into ``doc`` (dict keys and list positions), the root excluded."""
    out = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += [(*path, k), *_places(v, (*path, k))]
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += [(*path, i), *_places(v, (*path, i))]
    return out


@settings(max_examples=120, deadline=None, derandomize=True)
@given(pick=st.integers(0, 10**6), value=JSON_VALUES, drop=st.booleans())
def test_values_replaced_anywhere(pick, value, drop):
    meta_raw, _, history = seeds("checkpoint_meta")["valid.json"].partition(b"\n")
    doc = {"meta": json.loads(meta_raw), "history": json.loads(history)}
    places = [p for p in _places(doc) if len(p) > 1]  # inside the metadata or the history
    path = places[pick % len(places)]
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if drop and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    data = json.dumps(doc["meta"]).encode() + b"\n" + json.dumps(doc["history"]).encode()
    v = verdict(check_checkpoint_meta, data)
    assert v in ("ok", "rejected"), (path, value, drop, v)
