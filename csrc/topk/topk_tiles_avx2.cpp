// AVX2 + FMA register tiles of the CPU linear_topk (topk_cpu_tiles.h): 6 rows x 16 classes in twelve
// 8-float accumulators, one fused multiply-add per (row, class) and step q, as the portable level does.
// The finished tile is scaled, biased (a multiply, then an add: never fused), and compared with each
// row's threshold in registers; a row whose 16 scores all fall below it costs one compare and one mask.
#include "common/cpu_isa.h"
#include "topk/topk_cpu_tiles.h"

#if FK_X86_LEVELS
#include <immintrin.h>
#endif

namespace fedkernels {
namespace topk_cpu {

#if FK_X86_LEVELS

namespace {

// Offer row n the scores of one register-tile row whose threshold test passed (mask bit c: class c).
FK_TARGET_AVX2 void offer_masked(RowTopk& top, int64_t n, __m256 v0, __m256 v1, unsigned mask, int64_t id0) {
  alignas(32) float s[kCols];
  _mm256_store_ps(s, v0);
  _mm256_store_ps(s + 8, v1);
  while (mask != 0) {
    const int c = __builtin_ctz(mask);
    mask &= mask - 1;
    if (!(s[c] < top.thr[n])) top.offer(n, s[c], id0 + c);  // the threshold may have risen meanwhile
  }
}

FK_TARGET_AVX2 void scan_panel(const float* hp, const float* wp, int64_t d, int64_t n0, int64_t rows, int64_t id0,
                               unsigned col_mask, float scale, const float* bias, RowTopk& top) {
  __m256 a00 = _mm256_setzero_ps(), a01 = _mm256_setzero_ps(), a10 = _mm256_setzero_ps(), a11 = _mm256_setzero_ps();
  __m256 a20 = _mm256_setzero_ps(), a21 = _mm256_setzero_ps(), a30 = _mm256_setzero_ps(), a31 = _mm256_setzero_ps();
  __m256 a40 = _mm256_setzero_ps(), a41 = _mm256_setzero_ps(), a50 = _mm256_setzero_ps(), a51 = _mm256_setzero_ps();
#pragma GCC unroll 4
  for (int64_t q = 0; q < d; ++q) {
    const __m256 b0 = _mm256_loadu_ps(wp + q * kCols), b1 = _mm256_loadu_ps(wp + q * kCols + 8);
    const float* h = hp + q * kRows;
    __m256 x = _mm256_broadcast_ss(h);
    a00 = _mm256_fmadd_ps(x, b0, a00);
    a01 = _mm256_fmadd_ps(x, b1, a01);
    x = _mm256_broadcast_ss(h + 1);
    a10 = _mm256_fmadd_ps(x, b0, a10);
    a11 = _mm256_fmadd_ps(x, b1, a11);
    x = _mm256_broadcast_ss(h + 2);
    a20 = _mm256_fmadd_ps(x, b0, a20);
    a21 = _mm256_fmadd_ps(x, b1, a21);
    x = _mm256_broadcast_ss(h + 3);
    a30 = _mm256_fmadd_ps(x, b0, a30);
    a31 = _mm256_fmadd_ps(x, b1, a31);
    x = _mm256_broadcast_ss(h + 4);
    a40 = _mm256_fmadd_ps(x, b0, a40);
    a41 = _mm256_fmadd_ps(x, b1, a41);
    x = _mm256_broadcast_ss(h + 5);
    a50 = _mm256_fmadd_ps(x, b0, a50);
    a51 = _mm256_fmadd_ps(x, b1, a51);
  }
  const __m256 vs = _mm256_set1_ps(scale);
  const bool with_bias = bias != nullptr;
  const __m256 bias0 = with_bias ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();
  const __m256 bias1 = with_bias ? _mm256_loadu_ps(bias + 8) : _mm256_setzero_ps();
  const __m256 acc[kRows][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}, {a40, a41}, {a50, a51}};
  for (int64_t r = 0; r < rows; ++r) {
    __m256 v0 = _mm256_mul_ps(vs, acc[r][0]), v1 = _mm256_mul_ps(vs, acc[r][1]);
    if (with_bias) {
      v0 = _mm256_add_ps(v0, bias0);
      v1 = _mm256_add_ps(v1, bias1);
    }
    const int64_t n = n0 + r;
    const __m256 t = _mm256_set1_ps(top.thr[n]);
    // not (v < t), true for NaN on either side: scores that may rank at or above the k-th kept one
    const unsigned m0 = static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(v0, t, _CMP_NLT_UQ)));
    const unsigned m1 = static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(v1, t, _CMP_NLT_UQ)));
    const unsigned mask = (m0 | (m1 << 8)) & col_mask;
    if (mask != 0) offer_masked(top, n, v0, v1, mask, id0);
  }
}

// dst[q * kCols + c] = a[c * lda + q] for an 8 x 8 block (c, q < 8): rows of W in, q-major panel out.
FK_TARGET_AVX2 inline void transpose8x8(const float* a, int64_t lda, float* dst) {
  __m256 r0 = _mm256_loadu_ps(a), r1 = _mm256_loadu_ps(a + lda), r2 = _mm256_loadu_ps(a + 2 * lda);
  __m256 r3 = _mm256_loadu_ps(a + 3 * lda), r4 = _mm256_loadu_ps(a + 4 * lda), r5 = _mm256_loadu_ps(a + 5 * lda);
  __m256 r6 = _mm256_loadu_ps(a + 6 * lda), r7 = _mm256_loadu_ps(a + 7 * lda);
  const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
  const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
  const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
  const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(dst + 0 * kCols, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(dst + 1 * kCols, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(dst + 2 * kCols, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(dst + 3 * kCols, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(dst + 4 * kCols, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(dst + 5 * kCols, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(dst + 6 * kCols, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(dst + 7 * kCols, _mm256_permute2f128_ps(u3, u7, 0x31));
}

}  // namespace

FK_TARGET_AVX2 void pack_w_panels_avx2(const float* w, int64_t ld, int64_t cols, int64_t d, float* dst) {
  const int64_t panels = (cols + kCols - 1) / kCols, q8 = d / 8 * 8;
  for (int64_t t = 0; t < panels; ++t) {
    float* pd = dst + t * kCols * d;
    const int64_t c0 = t * kCols;
    if (cols - c0 >= kCols) {  // a whole panel: 8 x 8 transposes, then the d % 8 tail
      for (int64_t half = 0; half < kCols; half += 8) {
        const float* src = w + (c0 + half) * ld;
        for (int64_t q = 0; q < q8; q += 8) transpose8x8(src + q, ld, pd + q * kCols + half);
      }
      for (int64_t c = 0; c < kCols; ++c)
        for (int64_t q = q8; q < d; ++q) pd[q * kCols + c] = w[(c0 + c) * ld + q];
    } else {  // the last, partial panel: zero-padded classes
      for (int64_t c = 0; c < kCols; ++c)
        for (int64_t q = 0; q < d; ++q) pd[q * kCols + c] = c0 + c < cols ? w[(c0 + c) * ld + q] : 0.0f;
    }
  }
}

FK_TARGET_AVX2 void scan_tile_avx2(const TileJob& job, RowTopk& top) {
  const int64_t d = job.d, panels = (job.cols + kCols - 1) / kCols;
  for (int64_t b = job.block0; b < job.block1; ++b) {
    const float* hp = job.hpack + b * kRows * d;
    const int64_t n0 = b * kRows, rows = job.n - n0 < kRows ? job.n - n0 : kRows;
    for (int64_t t = 0; t < panels; ++t) {
      const int64_t c0 = t * kCols, ncol = job.cols - c0 < kCols ? job.cols - c0 : kCols;
      const unsigned col_mask = ncol == kCols ? 0xFFFFu : (1u << ncol) - 1u;
      scan_panel(hp, job.wpack + t * kCols * d, d, n0, rows, job.col0 + c0, col_mask, job.scale,
                 job.bias != nullptr ? job.bias + c0 : nullptr, top);
    }
  }
}

#else  // not x86-64 with GCC/Clang: select_isa() never picks AVX2

void scan_tile_avx2(const TileJob& job, RowTopk& top) { scan_tile_portable(job, top); }

void pack_w_panels_avx2(const float* w, int64_t ld, int64_t cols, int64_t d, float* dst) {
  const int64_t panels = (cols + kCols - 1) / kCols;
  for (int64_t t = 0; t < panels; ++t)
    for (int64_t c = 0; c < kCols; ++c)
      for (int64_t q = 0; q < d; ++q)
        dst[t * kCols * d + q * kCols + c] = t * kCols + c < cols ? w[(t * kCols + c) * ld + q] : 0.0f;
}

#endif

}  // namespace topk_cpu
}  // namespace fedkernels
