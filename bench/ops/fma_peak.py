"""This core's float32 FMA peak at each x86 vector level: the ceiling a GEMM-bound op is judged against.

    python -m bench.ops.fma_peak [--out FILE]

Compiles a small C probe (the machine's ``cc``, per-function target attributes) into build/fma_peak/
and runs it on one thread: 12 independent chains of ``vfmadd231ps`` on 256-bit (avx2) and, where the
CPU has AVX-512 F, 512-bit registers (enough chains to cover the FMA latency on both FMA pipes of
current x86 cores, few enough to stay in registers). The best of 7 repetitions, in GFLOP/s
(2 flops per lane per FMA); ``--quick``: the best of 2. `linear_topk` and `linear_cross_entropy` are GEMM-bound: their
GFLOP/s over this peak is the share of the core they use, and a peer's time times this peak over
the flops is the most any kernel could gain on it (docs/api/topk.md).

Writes build/bench-results/fma_peak.json (the committed value: ``--out bench/results/ops/avx2/fma_peak.json``).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path

from bench.common import QUICK_RESULTS, results_path, write_results

SOURCE = r"""
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

#define CHAINS(OP) OP(0) OP(1) OP(2) OP(3) OP(4) OP(5) OP(6) OP(7) OP(8) OP(9) OP(10) OP(11)

__attribute__((target("avx2,fma"), noinline)) static float fma256(long iters) {
#define DECL(i) __m256 a##i = _mm256_set1_ps(1.0f + (i) * 1e-3f);
  CHAINS(DECL)
  const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-6f);
  for (long n = 0; n < iters; ++n) {
#define STEP(i) a##i = _mm256_fmadd_ps(a##i, b, c);
    CHAINS(STEP)
  }
  float out[8], s = 0;
#define SUM(i) _mm256_storeu_ps(out, a##i); s += out[0];
  CHAINS(SUM)
  return s;
}

__attribute__((target("avx512f"), noinline)) static float fma512(long iters) {
#define DECL5(i) __m512 a##i = _mm512_set1_ps(1.0f + (i) * 1e-3f);
  CHAINS(DECL5)
  const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-6f);
  for (long n = 0; n < iters; ++n) {
#define STEP5(i) a##i = _mm512_fmadd_ps(a##i, b, c);
    CHAINS(STEP5)
  }
  float s = 0;
#define SUM5(i) s += _mm512_reduce_add_ps(a##i);
  CHAINS(SUM5)
  return s;
}

int main(int argc, char** argv) {
  const long iters = 50000000;
  int wide = argc > 1 && strcmp(argv[1], "avx512") == 0;
  int reps = argc > 2 ? atoi(argv[2]) : 7;
  if (wide && !__builtin_cpu_supports("avx512f")) { printf("unsupported\n"); return 0; }
  double best = 0;
  volatile float sink = 0;
  for (int rep = 0; rep < reps; ++rep) {
    double t0 = now();
    sink += wide ? fma512(iters) : fma256(iters);
    double dt = now() - t0;
    double gflops = 12.0 * (wide ? 16 : 8) * 2 * iters / dt / 1e9;
    if (gflops > best) best = gflops;
  }
  printf("%.2f\n", best);
  return sink == 12345.0f;
}
"""


def build(out_dir: Path) -> Path:
    """Compile the probe with the machine's C compiler; its path."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise SystemExit("fma_peak: no C compiler (cc / gcc) on PATH")
    out_dir.mkdir(parents=True, exist_ok=True)
    src, exe = out_dir / "fma_peak.c", out_dir / "fma_peak"
    src.write_text(SOURCE)
    subprocess.run([cc, "-O2", str(src), "-o", str(exe)], check=True)
    return exe


def peak(exe: Path, level: str, repeat: int = 7) -> float | None:
    """GFLOP/s of one thread at ``level`` (avx2 | avx512), the best of ``repeat``; None where the CPU lacks it."""
    text = subprocess.run([str(exe), level, str(repeat)], check=True, capture_output=True, text=True).stdout.strip()
    return None if text == "unsupported" else float(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="best of 2 instead of 7")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    exe = build(QUICK_RESULTS.parent / "fma_peak")
    repeat = 2 if args.quick else 7
    rows = [{"level": level, "gflops_one_thread": peak(exe, level, repeat)} for level in ("avx2", "avx512")]
    for row in rows:
        print(row, flush=True)
    write_results("fma_peak", rows, path=results_path("fma_peak", "cpu", args.out, args.quick))


if __name__ == "__main__":
    main()
