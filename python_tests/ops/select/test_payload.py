"""The loop helpers make_partial_payload / apply_partial_payloads on real state_dicts."""

from __future__ import annotations

import pytest
import torch

from fedkernels.fl.partial_exchange import apply_partial_payloads, candidate_names, make_partial_payload
from python_tests.reference import select_ref


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def _perturbed(state: dict[str, torch.Tensor], scale: dict[str, float]) -> dict[str, torch.Tensor]:
    return {n: (t + scale.get(n, 0.0)) if t.is_floating_point() else t.clone() for n, t in state.items()}


def test_payload_selects_the_largest_changes():
    before = {n: t.clone() for n, t in _model().state_dict().items()}
    after = _perturbed(before, {"0.bias": 1.0, "3.weight": 0.5, "1.running_mean": 0.01})
    names = candidate_names(before)
    assert "1.num_batches_tracked" not in names
    payload = make_partial_payload(before, after, fraction=0.2)
    # norms: 0.bias 1*sqrt(8), 3.weight 0.5*sqrt(24), running_mean 0.01*sqrt(8); k = ceil(0.2 * 8) = 2
    assert list(payload["tensors"]) == ["0.bias", "3.weight"]
    assert payload["indices"].tolist() == [names.index("0.bias"), names.index("3.weight")]
    assert all(torch.equal(payload["tensors"][n], after[n]) for n in payload["tensors"])
    rms = make_partial_payload(before, after, fraction=0.2, normalize=True)
    assert list(rms["tensors"]) == ["0.bias", "3.weight"]  # RMS: 1.0 and 0.5 lead as well


def test_apply_matches_reference():
    state = {n: t.clone() for n, t in _model().state_dict().items()}
    names = candidate_names(state)
    g = torch.Generator().manual_seed(3)
    payloads, sent = [], []
    for weight in (10.0, 30.0, 5.0):
        after = {n: (t + torch.randn(t.shape, generator=g)) if t.is_floating_point() else t for n, t in state.items()}
        payload = make_partial_payload(state, after, fraction=0.5)
        payloads.append((payload, weight))
        sent.append(
            (torch.tensor([names.index(n) for n in payload["tensors"]]), list(payload["tensors"].values()), weight)
        )
    want = select_ref.masked_weighted_average([state[n] for n in names], sent)
    apply_partial_payloads(state, payloads)
    for n, w in zip(names, want, strict=True):
        torch.testing.assert_close(state[n], w, rtol=2e-6, atol=2e-6)


def test_apply_updates_the_model_in_place():
    model = _model()
    state = model.state_dict()
    new_bias = torch.full((3,), 2.0)
    apply_partial_payloads(state, [({"indices": torch.tensor([7]), "tensors": {"3.bias": new_bias}}, 1.0)])
    assert torch.equal(model[3].bias.detach(), new_bias)


def test_unknown_names_rejected():
    state = _model().state_dict()
    with pytest.raises(ValueError, match="not floating-point entries"):
        apply_partial_payloads(state, [({"tensors": {"1.num_batches_tracked": torch.tensor(1)}}, 1.0)])
    with pytest.raises(ValueError, match="same floating-point entries"):
        make_partial_payload(state, {k: v for k, v in list(state.items())[1:]}, 0.5)
