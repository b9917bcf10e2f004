"""Fuzzing ``fedkernels run``'s config (TOML) checks (second hostile sweep: ``ks = [1.5]``,
``test_fraction = "0.2"``, ``beta = "x"`` gave TypeErrors, huge sizes MemoryErrors or an abort):
mutated TOML files, and files of random fields with values of every TOML type. Every result must be
a ValueError, or a config whose every field has its type and range; nothing reads data."""

from __future__ import annotations

import datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from python_tests.fuzz.harness import check_seeds, fuzz_mutations
from python_tests.fuzz.mutate import verdict
from python_tests.fuzz.targets import _CONFIG_TYPES, check_config

SCALARS = (
    st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.sampled_from([0, 1, 2, 3, 10**6, 10**9, 2**31, 2**40])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from(["", "x", "0.2", "adam", "fedmlh", "FedAvg", "synthetic", "1"])
    | st.just(datetime.date(2024, 1, 1))
)
VALUES = (
    SCALARS
    | st.lists(SCALARS, max_size=3)
    | st.dictionaries(st.sampled_from(["num_samples", "hidden", "x"]), SCALARS, max_size=2)
)


def toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if v != v else ("inf" if v == float("inf") else ("-inf" if v == float("-inf") else repr(v)))
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, datetime.date):
        return v.isoformat()
    return str(v)


def test_seeds():
    check_seeds("config")


@settings(max_examples=60, deadline=None, derandomize=True)
@given(data=st.data())
def test_byte_mutations(data):
    fuzz_mutations("config", data)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    fields=st.dictionaries(st.sampled_from(sorted(set(_CONFIG_TYPES) - {"checkpoint", "resume"})), VALUES, max_size=4)
)
def test_random_fields(fields):
    text = "\n".join(f"{k} = {toml_value(v)}" for k, v in fields.items()) + "\n"
    v = verdict(check_config, text.encode())
    assert v in ("ok", "rejected"), (fields, v)
