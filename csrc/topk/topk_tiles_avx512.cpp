// AVX-512 register tiles of the CPU linear_topk (topk_cpu_tiles.h): two kCols panels at a time, 6 rows
// x 32 classes in twelve 16-float accumulators (32 registers leave room for the two W loads and the
// broadcast), so each broadcast of h feeds twice the classes of the AVX2 tile. A score is still one
// fused multiply-add chain per (row, class) in q order, scaled then biased (never fused): the same
// bits as the avx2 and portable levels. A lone last panel runs the avx2 tile.
#include "common/cpu_isa.h"
#include "topk/topk_cpu_tiles.h"

#if FK_X86_LEVELS
#include <immintrin.h>
#endif

namespace fedkernels {
namespace topk_cpu {

#if FK_X86_LEVELS

namespace {

constexpr int64_t kPair = 2 * kCols;  // classes of the wide tile

// Offer row n the scores of one register-tile row whose threshold test passed (mask bit c: class c).
FK_TARGET_AVX512 void offer_masked(RowTopk& top, int64_t n, __m512 v0, __m512 v1, uint32_t mask, int64_t id0) {
  alignas(64) float s[kPair];
  _mm512_store_ps(s, v0);
  _mm512_store_ps(s + kCols, v1);
  while (mask != 0) {
    const int c = __builtin_ctz(mask);
    mask &= mask - 1;
    if (!(s[c] < top.thr[n])) top.offer(n, s[c], id0 + c);  // the threshold may have risen meanwhile
  }
}

// scale * acc (+ bias), then the classes that may rank at or above row n's k-th kept score: not
// (v < threshold), true for NaN on either side.
FK_TARGET_AVX512 __m512 finish(__m512 acc, __m512 vs, const float* bias) {
  const __m512 v = _mm512_mul_ps(vs, acc);
  return bias != nullptr ? _mm512_add_ps(v, _mm512_loadu_ps(bias)) : v;
}

FK_TARGET_AVX512 uint32_t candidates(__m512 v, float thr) {
  return static_cast<uint32_t>(_mm512_cmp_ps_mask(v, _mm512_set1_ps(thr), _CMP_NLT_UQ));
}

// Panels t and t + 1 (wp and wp + kCols * d) against one micro-panel of h: 32 classes.
FK_TARGET_AVX512 void scan_pair(const float* hp, const float* wp, int64_t d, int64_t n0, int64_t rows, int64_t id0,
                                uint32_t col_mask, float scale, const float* bias, RowTopk& top) {
  const float* wq = wp + kCols * d;
  __m512 a00 = _mm512_setzero_ps(), a01 = _mm512_setzero_ps(), a10 = _mm512_setzero_ps(), a11 = _mm512_setzero_ps();
  __m512 a20 = _mm512_setzero_ps(), a21 = _mm512_setzero_ps(), a30 = _mm512_setzero_ps(), a31 = _mm512_setzero_ps();
  __m512 a40 = _mm512_setzero_ps(), a41 = _mm512_setzero_ps(), a50 = _mm512_setzero_ps(), a51 = _mm512_setzero_ps();
#pragma GCC unroll 4
  for (int64_t q = 0; q < d; ++q) {
    const __m512 b0 = _mm512_loadu_ps(wp + q * kCols), b1 = _mm512_loadu_ps(wq + q * kCols);
    const float* h = hp + q * kRows;
    __m512 x = _mm512_set1_ps(h[0]);
    a00 = _mm512_fmadd_ps(x, b0, a00);
    a01 = _mm512_fmadd_ps(x, b1, a01);
    x = _mm512_set1_ps(h[1]);
    a10 = _mm512_fmadd_ps(x, b0, a10);
    a11 = _mm512_fmadd_ps(x, b1, a11);
    x = _mm512_set1_ps(h[2]);
    a20 = _mm512_fmadd_ps(x, b0, a20);
    a21 = _mm512_fmadd_ps(x, b1, a21);
    x = _mm512_set1_ps(h[3]);
    a30 = _mm512_fmadd_ps(x, b0, a30);
    a31 = _mm512_fmadd_ps(x, b1, a31);
    x = _mm512_set1_ps(h[4]);
    a40 = _mm512_fmadd_ps(x, b0, a40);
    a41 = _mm512_fmadd_ps(x, b1, a41);
    x = _mm512_set1_ps(h[5]);
    a50 = _mm512_fmadd_ps(x, b0, a50);
    a51 = _mm512_fmadd_ps(x, b1, a51);
  }
  const __m512 vs = _mm512_set1_ps(scale);
  const __m512 acc[kRows][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}, {a40, a41}, {a50, a51}};
  for (int64_t r = 0; r < rows; ++r) {
    const __m512 v0 = finish(acc[r][0], vs, bias), v1 = finish(acc[r][1], vs, bias != nullptr ? bias + kCols : nullptr);
    const int64_t n = n0 + r;
    const uint32_t mask = (candidates(v0, top.thr[n]) | (candidates(v1, top.thr[n]) << kCols)) & col_mask;
    if (mask != 0) offer_masked(top, n, v0, v1, mask, id0);
  }
}

uint32_t low_bits(int64_t count) { return count >= 32 ? 0xFFFFFFFFu : (1u << count) - 1u; }

}  // namespace

FK_TARGET_AVX512 void scan_tile_avx512(const TileJob& job, RowTopk& top) {
  const int64_t d = job.d, panels = (job.cols + kCols - 1) / kCols, pairs = panels / 2;
  for (int64_t b = job.block0; b < job.block1; ++b) {
    const float* hp = job.hpack + b * kRows * d;
    const int64_t n0 = b * kRows, rows = job.n - n0 < kRows ? job.n - n0 : kRows;
    for (int64_t t = 0; t < 2 * pairs; t += 2) {
      const int64_t c0 = t * kCols;
      scan_pair(hp, job.wpack + t * kCols * d, d, n0, rows, job.col0 + c0, low_bits(job.cols - c0), job.scale,
                job.bias != nullptr ? job.bias + c0 : nullptr, top);
    }
  }
  if (panels % 2 != 0) {  // a lone last panel: the avx2 tile (the same bits; the top k ignores offer order)
    const int64_t c0 = 2 * pairs * kCols;
    TileJob last = job;
    last.wpack = job.wpack + c0 * d;
    last.col0 = job.col0 + c0;
    last.cols = job.cols - c0;
    last.bias = job.bias != nullptr ? job.bias + c0 : nullptr;
    scan_tile_avx2(last, top);
  }
}

#else  // not x86-64 with GCC/Clang: select_isa() never picks AVX-512

void scan_tile_avx512(const TileJob& job, RowTopk& top) { scan_tile_portable(job, top); }

#endif

}  // namespace topk_cpu
}  // namespace fedkernels
