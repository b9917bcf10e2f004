"""bench/ops/peers.py: a torch.compile peer that dynamo would silently run eagerly is an error instead."""

from __future__ import annotations

import importlib.util

import pytest
import torch
import torch._dynamo

from python_tests.support.paths import ROOT


def _load_peers():
    spec = importlib.util.spec_from_file_location("fk_bench_peers_compile", ROOT / "bench" / "ops" / "peers.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@pytest.fixture
def dynamo_config():
    """Restore dynamo's global settings and caches after the test (compiled_peer changes them)."""
    saved = {k: getattr(torch._dynamo.config, k) for k in ("fail_on_recompile_limit_hit", "recompile_limit")}
    yield torch._dynamo.config
    for k, v in saved.items():
        setattr(torch._dynamo.config, k, v)
    torch._dynamo.reset()


def test_recompile_past_the_limit_raises_instead_of_running_eagerly(monkeypatch, dynamo_config):
    monkeypatch.delenv("FK_BENCH_NO_COMPILE", raising=False)
    peers = _load_peers()
    peers.fresh_compiles()
    cfn, why = peers.compiled_peer(_double, torch.ones(4))
    assert why == "ok" and cfn is not None
    assert dynamo_config.fail_on_recompile_limit_hit
    assert dynamo_config.recompile_limit >= peers.RECOMPILE_LIMIT
    dynamo_config.recompile_limit = 1  # the compile above used the one allowed entry
    with pytest.raises(Exception, match=r"(?i)recompile|cache.*limit"):
        cfn(torch.ones(3, 5))  # a new rank needs a recompile: past the limit
    peers.fresh_compiles()  # forgotten graphs: the same peer compiles again for the new shape
    torch.testing.assert_close(cfn(torch.ones(3, 5)), torch.full((3, 5), 2.0))
