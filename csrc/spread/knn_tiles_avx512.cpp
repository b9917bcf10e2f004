// The fused tile of the CPU knn_classes at the avx512 level: knn_tiles_body_x86.h over simd::avx512
// with an 8 x 32 micro-tile (two panels: 16 of the 32 zmm registers accumulate), and this level's
// list insertion (masked expands) and packing transpose.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "common/simd_levels_x86.h"
#include "spread/knn_tiles.h"

#if FK_X86_LEVELS
#include <immintrin.h>
// GCC 12 flags the intrinsics' internal undefined-vector placeholders as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define FK_LEVEL avx512

namespace fedkernels {
namespace spread_cpu {
namespace avx512 {

namespace {

constexpr int64_t kMr = 8;                                          // rows per micro-tile
constexpr int64_t kRowChunk = std::numeric_limits<int64_t>::max();  // the whole row block per column panel
constexpr int64_t kPackDims = 16;                                   // dims per packing transpose

// Candidates::offer with the insertion in registers, for lists of at most 32 (cap <= 32, ld 16 or
// 32): the position is the count of kept entries that precede (key, j) under spread::key_less, and
// one masked expand per vector moves the entries from it on up a lane and puts the new one in its
// place (the lanes past a row's size are never read). Same list, overflow flag and gate as offer().
template <bool kTwo>
FK_TARGET_AVX512 inline void offer_vector(Candidates<float>& cand, int64_t i, float key, int64_t j) {
  if (!(key <= cand.gates[i]) || j == i) return;
  const int64_t cap = cand.cap, size = cand.sizes[i];
  float* kr = cand.keys.data() + i * cand.ld;
  int64_t* ir = cand.ids.data() + i * cand.ld;
  const __m512 kv = _mm512_set1_ps(key);
  const __m512 k0 = _mm512_loadu_ps(kr), k1 = kTwo ? _mm512_loadu_ps(kr + 16) : kv;
  const uint32_t live = size >= 32 ? ~0u : (1u << size) - 1;
  uint32_t before = static_cast<uint32_t>(_mm512_cmp_ps_mask(k0, kv, _CMP_LT_OQ));
  uint32_t equal = static_cast<uint32_t>(_mm512_cmp_ps_mask(k0, kv, _CMP_EQ_OQ));
  if (kTwo) {
    before |= static_cast<uint32_t>(_mm512_cmp_ps_mask(k1, kv, _CMP_LT_OQ)) << 16;
    equal |= static_cast<uint32_t>(_mm512_cmp_ps_mask(k1, kv, _CMP_EQ_OQ)) << 16;
  }
  before &= live;
  for (uint32_t e = equal & live; e; e &= e - 1) {  // equal keys (rare): the smaller id goes first
    const int l = __builtin_ctz(e);
    if (ir[l] < j) before |= 1u << l;
  }
  const int pos = __builtin_popcount(before);
  if (pos >= cap) {  // after all cap kept entries: a near-tie of the k-th that the list cannot hold
    cand.overflow[i] = 1;
    return;
  }
  const bool full = size == cap;
  const float dropped = full ? kr[cap - 1] : 0.0f;
  const uint32_t keep = ~(1u << pos);  // the lanes that take the old entries, in order
  const __m512 n0 = _mm512_mask_expand_ps(kv, static_cast<__mmask16>(keep), k0);
  _mm512_storeu_ps(kr, n0);
  if (kTwo) {
    const __m512 from =
        pos < 16 ? _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(k1), _mm512_castps_si512(k0), 15))
                 : k1;  // k0[15], k1[0..14] when lane 15 moved up
    _mm512_storeu_ps(kr + 16, _mm512_mask_expand_ps(kv, static_cast<__mmask16>(keep >> 16), from));
  }
  const __m512i jv = _mm512_set1_epi64(j);
  __m512i prev = _mm512_loadu_si512(ir);
  _mm512_storeu_si512(ir, _mm512_mask_expand_epi64(jv, static_cast<__mmask8>(keep), prev));
#pragma GCC unroll 3
  for (int b = 1; b < (kTwo ? 4 : 2); ++b) {
    const __m512i cur = _mm512_loadu_si512(ir + 8 * b);
    const __m512i from = pos < 8 * b ? _mm512_alignr_epi64(cur, prev, 7) : cur;
    _mm512_storeu_si512(ir + 8 * b, _mm512_mask_expand_epi64(jv, static_cast<__mmask8>(keep >> (8 * b)), from));
    prev = cur;
  }
  if (!full) cand.sizes[i] = size + 1;
  if (size + 1 < cand.k) return;
  // The new k-th key from the register (cap <= 32 and k < cap, so k <= 16 when kTwo is false).
  const int64_t kth = cand.k - 1;
  const __m512 kth_vec = kth < 16 ? n0 : _mm512_loadu_ps(kr + 16);
  const float gate =
      _mm512_cvtss_f32(_mm512_permutexvar_ps(_mm512_set1_epi32(static_cast<int>(kth & 15)), kth_vec)) + cand.bands[i];
  if (full && dropped <= gate) cand.overflow[i] = 1;  // a dropped near-tie of the k-th
  cand.gates[i] = gate;
}

FK_TARGET_AVX512 inline void offer(Candidates<float>& cand, int64_t i, float key, int64_t j) {
  if (cand.ld == 16)
    offer_vector<false>(cand, i, key, j);
  else if (cand.ld == 32)
    offer_vector<true>(cand, i, key, j);
  else
    cand.offer(i, key, j);
}

// dst[q * 16 + r] = rows[r][q0 + q] for q < nq (<= 16): a 16 x 16 transpose in registers (two
// in-lane shuffle stages, two 128-bit lane stages); rows past `live` read as zero.
FK_TARGET_AVX512 void transpose_panel(const float* src, int64_t ld, int64_t live, int64_t nq, float* dst) {
  const __mmask16 qm = static_cast<__mmask16>(nq >= 16 ? 0xFFFF : (1u << nq) - 1);
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = i < live ? _mm512_maskz_loadu_ps(qm, src + i * ld) : _mm512_setzero_ps();
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // r[4i + m]: rows 4i..4i+3 of columns m, m + 4, m + 8, m + 12
    r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int m = 0; m < 4; ++m) {
    const __m512 u = _mm512_shuffle_f32x4(r[m], r[4 + m], 0x88), v = _mm512_shuffle_f32x4(r[m], r[4 + m], 0xDD);
    const __m512 x = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0x88);
    const __m512 y = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0xDD);
    const __m512 cols[4] = {_mm512_shuffle_f32x4(u, x, 0x88), _mm512_shuffle_f32x4(v, y, 0x88),
                            _mm512_shuffle_f32x4(u, x, 0xDD), _mm512_shuffle_f32x4(v, y, 0xDD)};
    for (int l = 0; l < 4; ++l) {
      if (m + 4 * l < nq) _mm512_storeu_ps(dst + (m + 4 * l) * 16, cols[l]);
    }
  }
}

}  // namespace

}  // namespace avx512
}  // namespace spread_cpu
}  // namespace fedkernels

#include "spread/knn_tiles_body_x86.h"
#endif
