"""The hash family of docs/design.md §2 in plain Python integers."""

from __future__ import annotations

MASK64 = (1 << 64) - 1
P61 = (1 << 61) - 1


def splitmix64(seed: int):
    state = seed & MASK64
    while True:
        state = (state + 0x9E3779B97F4A7C15) & MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        yield z ^ (z >> 31)


def params(seed: int, num_tables: int) -> list[tuple[int, int, int, int]]:
    g = splitmix64(seed)
    out = []
    for _ in range(num_tables):
        x0, x1, x2, x3 = next(g), next(g), next(g), next(g)
        out.append((1 + x0 % (P61 - 1), x1 % P61, 1 + x2 % (P61 - 1), x3 % P61))
    return out


def bucket(p: tuple[int, int, int, int], label: int, num_buckets: int) -> int:
    a, b, _, _ = p
    return ((a * label + b) % P61) % num_buckets


def sign(p: tuple[int, int, int, int], label: int) -> int:
    _, _, c, d = p
    return 1 if ((c * label + d) % P61) % 2 == 0 else -1
