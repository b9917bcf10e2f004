"""DP-FTRL's tree aggregation (Kairouz et al. 2021, "Practical and Private (Deep) Learning without
Sampling or Shuffling"): client-level DP that needs no secret sample.

DP-FedAvg's epsilon leans on amplification by sampling, which holds only while nobody outside the
server knows which clients a round used. Here participation is public and nothing is amplified:

- **Participation**: the run is cut into epochs of ``floor(N / per_round)`` rounds; each epoch deals a
  seeded permutation of the clients into its rounds (:func:`tree_round`), so a client takes part in at
  most one round of an epoch, and anyone may know which.
- **Noise**: each epoch is one binary tree over its rounds (restarted every epoch). Node ``(level,
  start)`` covers rounds ``[start, start + 2^level)`` and carries ``N(0, sigma^2 C^2)`` noise. The noisy
  prefix sum after ``j`` rounds of a tree is the sum of the rounds' clipped sums plus the noise of the
  dyadic nodes covering ``[0, j)`` (:func:`dyadic_nodes`): at most ``log2(j) + 1`` of them. Round ``j``
  is released as the difference of the noisy prefix sums after ``j + 1`` and ``j`` rounds
  (:func:`round_noise`), so whatever the server does with the rounds is post-processing of the noisy
  prefix sums, and for a step linear in the sum (FedAvg's) the model after ``j`` rounds carries only
  the prefix noise.
- **Accounting**: one client changes one leaf of each tree by at most ``C``;
  ``dp_accounting.SingleEpochTreeAggregationDpEvent`` composes the trees (:mod:`.accounting`).

The nodes' noise comes from a secret seed kept in the server's state (drawn from OS randomness, or the
run's noise seed in a simulation), so a resumed run continues the same trees. The server adds the
noise, so it is trusted: it sees every update (central) or the exact sum (with secure aggregation).
"""

from __future__ import annotations

import os
from collections import Counter

import torch

from ..seeding import derive_seed, numpy_rng
from ..strategy import SERVER

TREE_SEED = SERVER + "ftrl_seed"  # int64 []: the secret seed of the trees' node noise (never sent)


def rounds_per_tree(num_clients: int, per_round: int) -> int:
    """Rounds of one epoch (one tree): every client takes part in at most one of them."""
    if not 1 <= per_round <= num_clients:
        raise ValueError(f"clients per round must be in [1, {num_clients}], got {per_round}")
    return num_clients // per_round


def tree_round(run_seed: int, round: int, num_clients: int, per_round: int) -> tuple[int, int, list[int]]:
    """Round ``round``'s tree (epoch), its position in the tree and its clients (ascending): the
    epoch's seeded permutation of the clients, dealt ``per_round`` to a round."""
    per_tree = rounds_per_tree(num_clients, per_round)
    tree, pos = divmod(round, per_tree)
    perm = numpy_rng(run_seed, "ftrl-epoch", tree).permutation(num_clients)
    return tree, pos, sorted(int(c) for c in perm[pos * per_round : (pos + 1) * per_round])


def dyadic_nodes(j: int) -> list[tuple[int, int]]:
    """The tree nodes ``(level, start)`` whose intervals ``[start, start + 2^level)`` partition
    ``[0, j)``: one per set bit of ``j``, largest first."""
    if j < 0:
        raise ValueError(f"j must be >= 0, got {j}")
    out, start = [], 0
    for level in range(j.bit_length() - 1, -1, -1):
        if j >> level & 1:
            out.append((level, start))
            start += 1 << level
    return out


def node_noise(
    seed: int, tree: int, node: tuple[int, int], shapes: dict[str, tuple[int, ...]], std: float
) -> dict[str, torch.Tensor]:
    """Node ``node`` of tree ``tree``: ``N(0, std^2)`` of every shape in ``shapes`` (float64),
    the same every time it is asked for."""
    g = torch.Generator().manual_seed(derive_seed(seed, "ftrl-node", tree, *node))
    return {n: torch.randn(s, dtype=torch.float64, generator=g) * std for n, s in shapes.items()}


def round_noise(
    seed: int, tree: int, pos: int, shapes: dict[str, tuple[int, ...]], std: float
) -> dict[str, torch.Tensor]:
    """The noise released with round ``pos`` of tree ``tree``: the prefix noise after ``pos + 1``
    rounds minus the prefix noise after ``pos`` (the nodes the two share cancel and are not drawn)."""
    diff = Counter(dyadic_nodes(pos + 1))
    diff.subtract(dyadic_nodes(pos))
    out = {n: torch.zeros(s, dtype=torch.float64) for n, s in shapes.items()}
    for node, sign in diff.items():
        if sign:
            for n, z in node_noise(seed, tree, node, shapes, std).items():
                out[n] += sign * z
    return out


def initial_entries(noise_seed: int | None) -> dict[str, torch.Tensor]:
    """The server state's tree seed: from OS randomness, or derived from a simulation's noise seed."""
    seed = int.from_bytes(os.urandom(7), "little") if noise_seed is None else derive_seed(noise_seed, "ftrl")
    return {TREE_SEED: torch.tensor(seed & (2**62 - 1), dtype=torch.int64)}
