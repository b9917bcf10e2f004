"""Argument errors keep their Python type on every torch (src/fedkernels/ops/_error_types.py).

torch 2.15 carries any exception of a stable-ABI kernel as RuntimeError; the kernels tag their
messages and the public wrappers restore the type. These tests hold on every torch the wheel loads on.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import fedkernels
from fedkernels.hashing import HashFamily
from fedkernels.ops._error_types import TAGS, keeps_error_types, typed_error

CHECK_H = Path(__file__).resolve().parents[2] / "csrc" / "common" / "stable" / "check.h"


def test_the_kernels_tag_with_the_tags_python_reads() -> None:
    source = CHECK_H.read_text()
    thrown = dict(re.findall(r"throw std::(invalid_argument|out_of_range)\(concat_message\(\"(\[\w+\] )\"", source))
    assert thrown == {"invalid_argument": "[ValueError] ", "out_of_range": "[IndexError] "}
    assert set(TAGS) == set(thrown.values())
    assert TAGS["[ValueError] "] is ValueError and TAGS["[IndexError] "] is IndexError


@pytest.mark.parametrize("carrier", [RuntimeError, ValueError, IndexError])
@pytest.mark.parametrize(("tag", "kind"), list(TAGS.items()))
def test_a_tagged_message_names_its_type_whatever_carried_it(carrier, tag, kind) -> None:
    got = typed_error(carrier(tag + "k must be >= 0, got -1"))
    assert type(got) is kind and str(got) == "k must be >= 0, got -1"


@pytest.mark.parametrize("message", ["", "CUDA error: out of memory", "[ValueError]no space", " [ValueError] x"])
def test_an_untagged_message_is_left_alone(message) -> None:
    assert typed_error(RuntimeError(message)) is None


def test_the_wrapper_raises_the_type_and_leaves_other_errors_as_they_are() -> None:
    def raising(exc: Exception):
        @keeps_error_types
        def op() -> None:
            raise exc

        return op

    with pytest.raises(ValueError, match=r"^lam must be >= 0$") as info:
        raising(RuntimeError("[ValueError] lam must be >= 0"))()
    assert info.value.__cause__ is None and info.value.__suppress_context__
    with pytest.raises(IndexError, match=r"^ids out of range$"):
        raising(ValueError("[IndexError] ids out of range"))()
    plain = RuntimeError("a failed launch")
    with pytest.raises(RuntimeError) as info:
        raising(plain)()
    assert info.value is plain
    with pytest.raises(TypeError):
        raising(TypeError("[ValueError] not ours to change"))()


def test_a_real_kernel_error_reaches_the_user_typed_and_untagged() -> None:
    hf = HashFamily(2, 16, seed=3)
    table, signs = hf.table(10), hf.signs(10).clone()
    signs[3, 1] = 5
    with pytest.raises(ValueError) as info:
        fedkernels.count_sketch(torch.zeros(10), table, signs, 16)
    assert str(info.value).startswith("signs values must be")
    with pytest.raises(IndexError) as info:
        fedkernels.label_hash(torch.tensor([0, 1]), torch.tensor([10]), table, 16)
    assert str(info.value).startswith("indices (class ids) values must lie in")


def test_the_raw_op_carries_the_tag_on_every_torch() -> None:
    # torch.ops.fedkernels.* is not wrapped: ValueError on torch 2.10-2.14, RuntimeError on 2.15, and
    # the tag says which either way
    table = HashFamily(2, 16, seed=3).table(10)
    with pytest.raises((ValueError, RuntimeError)) as info:
        torch.ops.fedkernels.label_hash(torch.tensor([0, 1]), torch.tensor([0]), table, 0)
    assert type(typed_error(info.value)) is ValueError
