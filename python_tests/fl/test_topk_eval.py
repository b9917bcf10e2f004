"""Every strategy's predict_topk goes through the fused top-k: it ranks exactly as the dense scores did
(small p, in process), and at p = 312,330 the whole evaluation runs under an address-space limit
(RLIMIT_AS, in a subprocess) that the dense [N, p] scores alone would exceed."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

from fedkernels.fl.registry import make_strategy, strategies
from python_tests.support.paths import ROOT

# Small models: the test is about the class dimension.
OPTIONS = {
    "fedavg": {"hidden": [8]},
    "fedmlh": {"hidden": [8], "num_tables": 2, "num_buckets": 64},
    "fedss": {"hidden": [8], "embed_dim": 8},
    "fedss-negonly": {"hidden": [8], "embed_dim": 8},
    "fedss-posonly": {"hidden": [8], "embed_dim": 8},
    "fedss-fullsoftmax": {"hidden": [8], "embed_dim": 8},
    "fedaws": {"hidden": [8], "dim": 8},
    "fedalc": {"hidden": [8], "dim": 8, "client_secret": b"k" * 32},
    "fedalc-fixed": {"hidden": [8], "dim": 8, "client_secret": b"k" * 32},
    "partialexchange": {"hidden": [8]},
    "l1diff": {"hidden": [8]},
    "l1diffnetwork": {"hidden": [8], "num_clients": 3},
}


def build(name: str):
    return make_strategy(name, **OPTIONS.get(name, {}))


def dense_topk(strategy, state, x, k):
    """The dense ranking each strategy computed before the fused op (its own model, full scores)."""
    name = strategy.name
    if name.startswith("FedSS"):
        return (strategy.scale * strategy._body(state)(x) @ state["classes"].T).topk(k, dim=1).indices
    if name.startswith(("FedAwS", "FedALC", "FedAvg-")):  # FedAvg-fixed / -positive: FedAwS's model
        z = F.normalize(strategy._extractor(state)(x), dim=1)
        rows = (z @ F.normalize(strategy._embeddings(state), dim=1).T).topk(k, dim=1).indices
        return strategy._permutation(state["W"].shape[0])[1][rows] if name.startswith("FedALC") else rows
    if name == "L1DiffNetwork":
        shared = {n: state[n] for n in strategy._model_names(state) if not n.startswith("personal.")}
        head = {n: state["personal." + n].mean(0) for n in strategy._head_names()}
        return strategy._client_model(shared, head)(x).topk(k, dim=1).indices
    if name == "PartialExchange":  # its state also holds the server's bookkeeping
        return strategy._model({n: state[n] for n in strategy._model_names(state)})(x).topk(k, dim=1).indices
    return strategy._model(state)(x).topk(k, dim=1).indices


@pytest.mark.parametrize("name", sorted(strategies()))
def test_fused_predict_topk_ranks_as_the_dense_scores(name):
    strategy = build(name)
    if strategy.name == "FedMLH":
        pytest.skip("FedMLH ranks merged bucket scores with bucket_merge_topk (its own fused op and tests)")
    if strategy.name == "LabelPrior":
        pytest.skip("LabelPrior ranks no scores: the same k most frequent classes for every row")
    state = strategy.init_state(12, 300, seed=1)
    x = torch.randn(40, 12, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        got = strategy.predict_topk(state, x, 7)
        want = dense_topk(strategy, state, x, 7)
    assert got.dtype == torch.int64 and got.shape == (40, 7)
    # Both rank float32 scores; orders may differ only where two scores are within rounding of each
    # other: the sets agree on every row but at most one.
    agree = (got.sort(1).values == want.sort(1).values).all(1)
    assert int((~agree).sum()) <= 1


SCRIPT = textwrap.dedent(
    """
    import json, resource, sys
    import torch
    from fedkernels.fl.registry import make_strategy, strategies
    from fedkernels.fl.server import Server, RunConfig
    from fedkernels.data.types import ClientData
    from python_tests.fl.test_topk_eval import OPTIONS

    p, n, f, k, budget = 312_330, 384, 8, 5, int(sys.argv[1])
    torch.manual_seed(0)
    x = torch.randn(n, f)
    labels = torch.randint(0, p, (n,))
    test = ClientData(x, torch.arange(n + 1), labels, p)
    inv_p = torch.full((p,), 2.0, dtype=torch.float64)
    models = {}
    for key in sorted(strategies()):
        if key == "fedalc-fixed":
            continue  # its predict_topk and init_state are FedALC's (checked by the test)
        s = make_strategy(key, **OPTIONS.get(key, {}))
        models[key] = (s, s.init_state(f, p, seed=0))
    for s, state in models.values():  # warm up: thread pools, allocator arenas, lazy tables
        s.predict_topk(state, x[:8], k)

    def vm_bytes():
        with open("/proc/self/status") as fh:
            return next(int(l.split()[1]) for l in fh if l.startswith("VmSize:")) * 1024

    limit = vm_bytes() + budget
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    out = {"dense_bytes": n * p * 4, "budget": budget}
    for key, (s, state) in models.items():
        server = Server.__new__(Server)  # evaluate() needs only the strategy, the state and the config
        server.strategy, server.state, server.config = s, state, RunConfig(eval_k=(1, 5))
        server.device = torch.device("cpu")
        m = server.evaluate(test, (1, 5), 4096, inv_p)
        out[s.name] = sorted(m)
    try:
        torch.empty(n, p).fill_(0.0)  # the dense path's score matrix alone
        out["dense"] = "allocated"
    except RuntimeError as e:
        out["dense"] = "refused: " + str(e).splitlines()[0][:80]
    print(json.dumps(out))
    """
)


def test_evaluation_at_312330_classes_in_bounded_memory():
    from fedkernels.fl.algorithms import FedALC, FedALCFixed

    assert FedALCFixed.predict_topk is FedALC.predict_topk and FedALCFixed.init_state is FedALC.init_state
    budget = 160 << 20  # the dense [384, 312330] float32 scores need 480 MB
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(budget)],
        capture_output=True,
        text=True,
        timeout=600,
        env={"PYTHONPATH": f"{ROOT / 'src'}:{ROOT}", "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["dense_bytes"] > 2 * out["budget"]
    assert out["dense"].startswith("refused"), "the limit did not bind: the test would prove nothing"
    names = {c.name for c in strategies().values()} - {"FedALC-fixed"}
    assert names <= set(out), f"not evaluated: {names - set(out)}"
    for name in names:
        assert {"P@5", "nDCG@5", "R@5", "PSP@5", "PSnDCG@5"} <= set(out[name]), name


def test_federated_evaluation_reports_propensity_metrics():
    """With inverse propensities sent beside the model, every client reports PSP@k and PSnDCG@k too;
    the server's numbers are the example-weighted means of each client's own ranking_metrics."""
    from fedkernels.data.types import ClientData
    from fedkernels.fl import FedAvg, RunConfig, Server
    from fedkernels.metrics import ranking_metrics

    g = torch.Generator().manual_seed(3)
    p, f = 50, 6

    def data(n: int) -> ClientData:
        return ClientData(
            torch.randn(n, f, generator=g), torch.arange(n + 1), torch.randint(0, p, (n,), generator=g), p
        )

    server = Server(FedAvg(hidden=[4]), [data(20), data(30)], f, p, RunConfig(rounds=1, clients_per_round=2))
    held = [data(7), data(11)]
    inv_p = torch.rand(p, dtype=torch.float64, generator=g) + 1.0
    metrics, failed = server.evaluate_federated(held, (1, 3), inv_p)
    assert not failed
    per = [
        ranking_metrics(server.strategy.predict_topk(server.state, d.x, 3), d.indptr, d.indices, (1, 3), inv_p)
        for d in held
    ]
    names = [f"{m}@{k}" for k in (1, 3) for m in ("P", "nDCG", "R", "PSP", "PSnDCG")]
    assert sorted(metrics) == sorted(names)
    for name in names:
        assert metrics[name] == pytest.approx((7 * per[0][name] + 11 * per[1][name]) / 18, rel=1e-12)
    plain, _ = server.evaluate_federated(held, (1, 3))  # without propensities: P, nDCG, R only
    assert sorted(plain) == sorted(n for n in names if not n.startswith("PS"))
