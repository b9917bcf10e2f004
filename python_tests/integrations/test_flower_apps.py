"""The Flower Apps' configuration: every run_config key an app reads is declared in its
pyproject's ``[tool.flwr.app.config]`` (Flower refuses overrides of undeclared keys), and every
paper preset has its ``conf/<preset>.toml`` in the Baselines app, naming one of its algorithms."""

from __future__ import annotations

import re

import pytest

from fedkernels.experiments.experiment import canonical_name, parse_toml
from fedkernels.experiments.presets import load_preset, preset_names
from python_tests.support.paths import ROOT

APPS = {
    "baselines/fedkernels": ["fedkernels_baseline/*.py"],
    "examples/flower_app": ["*.py"],
    "python_tests/support/flower_app": ["*.py"],
}
READ = re.compile(r"""(?:run_config|\bc)(?:\[|\.get\()\s*["']([a-z][a-z0-9-]*)["']""")


def declared(app: str) -> dict:
    return parse_toml((ROOT / app / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]


@pytest.mark.parametrize("app", sorted(APPS))
def test_every_key_read_is_declared(app):
    read = {k for pattern in APPS[app] for f in (ROOT / app).glob(pattern) for k in READ.findall(f.read_text())}
    assert read, f"{app}: no run_config reads found (the pattern is stale)"
    assert read <= set(declared(app)), sorted(read - set(declared(app)))


def test_example_declares_every_run_config_key():
    pytest.importorskip("flwr")
    from fedkernels.integrations.flower import RUN_CONFIG_KEYS

    assert set(RUN_CONFIG_KEYS) <= set(declared("examples/flower_app"))


@pytest.mark.parametrize("preset", preset_names())
def test_every_preset_is_a_baseline_conf(preset):
    conf = parse_toml((ROOT / "baselines/fedkernels/conf" / f"{preset}.toml").read_text())
    assert conf["preset"] == preset and set(conf) <= set(declared("baselines/fedkernels"))
    algorithms = [canonical_name(a) for a in load_preset(preset).config["algorithms"]]
    assert canonical_name(conf["algorithm"]) in algorithms
