// The register tiles of the CPU linear_topk at the avx2 level: topk_tiles_body_x86.h over simd::avx2
// (6 rows x 16 classes in twelve 8-float accumulators), and the packing of W's panels by 8 x 8
// transposes, which the avx512 level uses too.
#include "common/cpu_isa.h"
#include "topk/topk_cpu_tiles.h"

#if FK_X86_LEVELS
#include <immintrin.h>
#define FK_LEVEL avx2
#include "topk/topk_tiles_body_x86.h"  // scan_tile_avx2
#endif

namespace fedkernels {
namespace topk_cpu {

#if FK_X86_LEVELS

namespace {

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
