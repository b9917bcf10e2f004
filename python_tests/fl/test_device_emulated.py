"""A short run of every algorithm with every fedkernels op on its CUDA kernel (run by the CUDA
emulator), against the same run on the CPU kernels: the loop a GPU user runs, checked without a GPU.

What is compared: the final state, the round records and the centralised and federated metrics.
Bit-identical where every op of the algorithm's round runs the same arithmetic in the same order on
both launchers (the averaging, row-mean, hashing, merge, kNN, spreadout and prox kernels:
docs/emulator.md). The FedSS family trains with ``linear_cross_entropy``, whose CUDA launcher
composes GEMMs per class chunk while the CPU path fuses forward and gradients in its own tile order,
so the gradients differ in the last bits. These algorithms are compared with SGD local training:
the trajectory then stays within float rounding of the CPU run, so the state must agree to ``RTOL``
relative to each tensor's scale, and the rankings of the tiny test set must agree. Adam divides by
``sqrt(v) + eps``: a last-bit difference in a near-zero gradient entry becomes up to ``lr`` on that
entry, so under Adam the comparison would measure Adam's conditioning, not the kernels; the other
algorithms train with Adam and are compared bit for bit. Runs under ``pytest --emulate-cuda`` (CI's emulator step).
"""

from __future__ import annotations

import pytest
import torch

from python_tests import conftest
from python_tests.support.fl_device_runs import algorithm_names, run_setting, setting

pytestmark = [
    pytest.mark.emu_direct,
    pytest.mark.skipif(not conftest.EMULATING, reason="needs the CUDA emulator (pytest --emulate-cuda)"),
]

# The algorithms that train with linear_cross_entropy (module docstring: why they match to RTOL only).
LCE_TRAINED = {"fedss", "fedss-negonly", "fedss-posonly", "fedss-fullsoftmax", "fedss-fedaws"}
RTOL = 1e-4  # relative to each tensor's largest magnitude, after two rounds of SGD
# The label-prior baseline counts the clients' labels and ranks by those counts: no fedkernels op in its
# round or its evaluation, so its emulated run launches nothing and must equal the CPU run exactly.
NO_KERNEL = {"labelprior"}


def test_special_sets_name_only_registered_algorithms() -> None:
    assert set(algorithm_names()) >= LCE_TRAINED | NO_KERNEL


@pytest.mark.parametrize("name", algorithm_names())
def test_emulated_cuda_run_matches_the_cpu_run(name: str) -> None:
    from emu import cuda_emulator

    data = setting(name)
    optimizer = "sgd" if name in LCE_TRAINED else "adam"  # module docstring: why
    cpu = run_setting(data, optimizer=optimizer)
    with cuda_emulator.recording() as launches, cuda_emulator.routed_to_cuda():
        emu = run_setting(data, optimizer=optimizer)
    assert bool(launches) == (name not in NO_KERNEL), f"{name}: {len(launches)} CUDA kernel launches"
    assert [(r.clients, r.failed, r.bytes_down, r.bytes_up) for r in emu.history] == [
        (r.clients, r.failed, r.bytes_down, r.bytes_up) for r in cpu.history
    ]
    assert emu.state.keys() == cpu.state.keys()
    if name not in LCE_TRAINED:
        for k in cpu.state:
            assert torch.equal(emu.state[k], cpu.state[k]), k
        assert emu.metrics == cpu.metrics and emu.federated == cpu.federated
        return
    for k, want in cpu.state.items():
        got = emu.state[k]
        if not want.is_floating_point():
            assert torch.equal(got, want), k
            continue
        if want.numel():
            scale = float(want.abs().max())
            assert float((got - want).abs().max()) <= RTOL * max(scale, 1e-30), k
    assert emu.metrics == pytest.approx(cpu.metrics, abs=1e-12)
    assert emu.federated == pytest.approx(cpu.federated, abs=1e-12)
