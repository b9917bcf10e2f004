"""The bench configurations modelled (the sizes the benches in bench/ops time), full and quick."""

from __future__ import annotations

import torch

FEDMLH = [(3993, 4, 250), (30938, 4, 1000), (131073, 4, 4000), (312330, 8, 5000)]  # bench/ops/sketch.py (p, R, B)
FEDMLH_N, FEDMLH_K, LABELS_PER_SAMPLE, COUNT_SKETCH_ROWS = 1024, 5, 5, 64
FEDMLH_K_GENERAL = 100  # a top-100 (recall@100-style evaluation): beyond the 32-entry fast path
FEDSS = dict(n=4096, s=131072, d=256)  # bench/ops/sampled.py's largest LCE
SCATTER = [(4096, 16384), (131072, 65536)]  # bench/ops/sampled.py's (n rows, T sources), d = 256 (first and last)
NEGATIVES, SAMPLER_CLIENTS = 16384, 64  # sampler: m negatives of s classes; batched over 64 clients
PARTIAL_CLIENTS, PARTIAL_FRACTION = 4, 0.5  # bench/ops/select_norms.py's average
PROX_D = 10**7
SPREAD = [(100000, 64), (100000, 512)]  # bench/ops/spread.py's C = 100000, k = 10
SPREAD_K, SPREAD_MARGIN, PAIRS_PER_CLASS = 10, 1.0, 10
TOPK = [(131073, 128, 256), (312330, 512, 4096), (670091, 512, 4096)]  # bench/ops/topk.py's (p, d, N), k = 5
TOPK_K = 5


def quick_configs() -> dict:
    return dict(
        fedmlh=FEDMLH[:2],
        fedmlh_n=256,
        fedss=dict(n=256, s=16384, d=64),
        scatter=[(1024, 2048)],
        scatter_d=64,
        negatives=1024,
        sampler_clients=8,
        models=["resnet50"],
        dtypes=[torch.float32],
        prox=[(10**5, 0), (10**5, 1000)],
        spread=[(2000, 64)],
        topk=[(16384, 64, 256)],
    )


def full_configs() -> dict:
    return dict(
        fedmlh=FEDMLH,
        fedmlh_n=FEDMLH_N,
        fedss=FEDSS,
        scatter=SCATTER,
        scatter_d=256,
        negatives=NEGATIVES,
        sampler_clients=SAMPLER_CLIENTS,
        models=["resnet50", "bert-base"],
        dtypes=[torch.float32, torch.bfloat16],
        prox=[(PROX_D, 0), (PROX_D, 1000)],
        spread=SPREAD,
        topk=TOPK,
    )
