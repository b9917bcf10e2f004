"""Shared fixtures: the devices every op test runs on, and hypothesis profiles."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

import fedkernels  # noqa: F401  (registers the ops)

settings.register_profile(
    "default", deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile(
    "ci", deadline=None, max_examples=40, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
# Few examples under ASan/UBSan (tools/sanitize.sh): every call is several times slower there.
settings.register_profile(
    "sanitize", deadline=None, max_examples=8, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "default"))

# Every op test runs on CPU, and on CUDA automatically wherever a GPU exists.
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

# The real datasets live beside the checkout (../shared/data); tests that need them skip without.
DATA_DIR = Path(os.environ.get("FEDKERNELS_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


@pytest.fixture
def data_dir() -> Path:
    if not DATA_DIR.is_dir():
        pytest.skip(f"real datasets not found at {DATA_DIR} (set FEDKERNELS_DATA)")
    return DATA_DIR
