"""Shared pieces of the fuzzers: seed corpora, byte mutations (as hypothesis strategies and as a seeded
random stream for the bounded child runs), and the verdict every target shares.

A target is a function ``check(data: bytes) -> object`` that runs one untrusted decoder (and whatever
the server does with what it returns). It must return (the input was accepted and passed its own
round-trip or equality checks inside ``check``) or raise ``ValueError`` (any subclass). Anything else,
or a case slower than :data:`CASE_SECONDS`, is a finding.
"""

from __future__ import annotations

import random
import struct
import time
from collections.abc import Callable
from pathlib import Path

from hypothesis import strategies as st

CORPUS_ROOT = Path(__file__).resolve().parent / "corpus"
# A case using more CPU than this is a hang (the decoders take milliseconds on these seeds). CPU time,
# not wall time, so a machine shared with other jobs does not fail the run; a case blocked for
# CASE_WALL_SECONDS of wall time is a hang too.
CASE_SECONDS = 1.0
CASE_WALL_SECONDS = 10.0

# Values a length, count, offset or dimension field is overwritten with.
EXTREME_U64 = [0, 1, 2, 7, 255, 1 << 16, (1 << 31) - 1, 1 << 32, 1 << 40, (1 << 62) + 1, (1 << 63) - 1, (1 << 64) - 1]
# Text tokens that stress number parsers (JSON headers, XC/libsvm files).
EXTREME_TEXT = [
    b"18446744073709551616",
    b"99999999999999999999999",
    b"-1",
    b"1e999",
    b"nan",
    b"inf",
    b"-0",
    b"1.5",
    b"\xd9\xa3",  # ARABIC-INDIC DIGIT THREE, a str.isdigit() digit
    b"\xc2\xb2",  # SUPERSCRIPT TWO
    b"\xff",
    b"[[[[[[[[[[[[[[[[",
    b"67108864",
    b"4294967296",
]


def seeds(target: str) -> dict[str, bytes]:
    """The seed corpus of ``target``: ``corpus/<target>/*`` by file name."""
    folder = CORPUS_ROOT / target
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def mutate(data: bytes, op: tuple, others: list[bytes]) -> bytes:
    """Apply one mutation ``(kind, a, b)`` to ``data`` (positions wrap around its length)."""
    kind, a, b = op
    buf = bytearray(data)
    n = len(buf)
    if kind == "flip" and n:
        buf[a % n] ^= 1 << (b % 8)
    elif kind == "set" and n:
        buf[a % n] = b % 256
    elif kind == "insert":
        at = a % (n + 1)
        buf[at:at] = b
    elif kind == "delete" and n:
        del buf[a % n : a % n + b]
    elif kind == "truncate":
        del buf[a % (n + 1) :]
    elif kind == "u64" and n >= 8:  # a little-endian size field anywhere (the first 8 bytes are one)
        at = (a % (n - 7)) if a % 3 else 0
        buf[at : at + 8] = struct.pack("<Q", b)
    elif kind == "u32" and n >= 4:
        at = a % (n - 3)
        buf[at : at + 4] = struct.pack("<I", b & 0xFFFFFFFF)
    elif kind == "text" and n:  # a number-ish token written over the bytes at a
        at = a % n
        buf[at : at + len(b)] = b
    elif kind == "splice" and others:  # our head, another seed's tail
        other = others[a % len(others)]
        cut = b % (n + 1)
        buf = buf[:cut] + other[cut % (len(other) + 1) :]
    elif kind == "duplicate" and n:  # repeat a stretch (lines, JSON entries, runs)
        at = a % n
        piece = buf[at : at + 1 + b % 64]
        buf[at:at] = piece * (1 + b % 5)
    return bytes(buf)


def mutation_strategy(others: list[bytes]) -> st.SearchStrategy:
    """One mutation, as a hypothesis strategy (shrinks towards small positions and values)."""
    pos = st.integers(0, 1 << 16)
    return st.one_of(
        st.tuples(st.just("flip"), pos, st.integers(0, 7)),
        st.tuples(st.just("set"), pos, st.integers(0, 255)),
        st.tuples(st.just("insert"), pos, st.binary(min_size=1, max_size=16)),
        st.tuples(st.just("delete"), pos, st.integers(1, 32)),
        st.tuples(st.just("truncate"), pos, st.just(0)),
        st.tuples(st.just("u64"), pos, st.sampled_from(EXTREME_U64)),
        st.tuples(st.just("u32"), pos, st.sampled_from(EXTREME_U64)),
        st.tuples(st.just("text"), pos, st.sampled_from(EXTREME_TEXT)),
        st.tuples(st.just("splice"), pos, pos) if others else st.tuples(st.just("flip"), pos, st.just(0)),
        st.tuples(st.just("duplicate"), pos, st.integers(0, 255)),
    )


def random_op(rng: random.Random) -> tuple:
    """One mutation drawn from ``rng`` (the same kinds as :func:`mutation_strategy`)."""
    kind = rng.choice(["flip", "set", "insert", "delete", "truncate", "u64", "u32", "text", "splice", "duplicate"])
    pos = rng.randrange(1 << 16)
    b: object
    if kind == "insert":
        b = rng.randbytes(rng.randint(1, 16))
    elif kind in ("u64", "u32"):
        b = rng.choice(EXTREME_U64)
    elif kind == "text":
        b = rng.choice(EXTREME_TEXT)
    else:
        b = rng.randrange(1 << 16)
    return kind, pos, b


def verdict(check: Callable[[bytes], object], data: bytes) -> str:
    """``"ok"`` (accepted), ``"rejected"`` (ValueError), or a finding: the exception's type and
    message, or ``"slow: <s>"`` for a case over :data:`CASE_SECONDS` of CPU time (or
    :data:`CASE_WALL_SECONDS` of wall time)."""
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        check(data)
        out = "ok"
    except ValueError:
        out = "rejected"
    except Exception as e:  # any other type is a finding: the server must see only ValueError
        return f"{type(e).__name__}: {e}"
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    return f"slow: {cpu:.2f} s CPU, {wall:.2f} s wall" if cpu > CASE_SECONDS or wall > CASE_WALL_SECONDS else out
