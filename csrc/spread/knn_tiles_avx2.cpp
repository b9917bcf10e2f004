// The fused tile of the CPU knn_classes at the avx2 level: knn_tiles_body_x86.h over simd::avx2 with
// a 6 x 16 micro-tile (12 of the 16 ymm registers accumulate, two hold the column panel, one the
// broadcast row value), and this level's list insertion and packing transpose.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "common/simd_levels_x86.h"
#include "spread/knn_tiles.h"

#if FK_X86_LEVELS
#include <immintrin.h>

#define FK_LEVEL avx2

namespace fedkernels {
namespace spread_cpu {
namespace avx2 {

namespace {

constexpr int64_t kMr = 6;  // rows per micro-tile
// Rows of the row block swept against all column panels before the next rows: 48 rows of A stay in
// L2 while the packed column block streams past them (at d = 512: 96 KiB against 512 KiB), instead of
// all 256 rows of A streaming past every column panel.
constexpr int64_t kRowChunk = 48;
constexpr int64_t kPackDims = 8;  // dims per packing transpose

// A 16-entry list with (key, j) inserted at pos in registers: entries from pos move up one slot (the
// last one falls off: beyond the size, or dropped from a full list). Keys are 2 vectors, ids 4.
FK_TARGET_AVX2 inline void insert16(float* kr, int64_t* ir, int64_t pos, float key, int64_t j) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i up = _mm256_setr_epi32(0, 0, 1, 2, 3, 4, 5, 6);  // lane l takes lane l - 1
  const __m256 k0 = _mm256_loadu_ps(kr), k1 = _mm256_loadu_ps(kr + 8);
  const __m256 s0 = _mm256_permutevar8x32_ps(k0, up);
  const __m256 s1 =
      _mm256_blend_ps(_mm256_permutevar8x32_ps(k1, up), _mm256_permutevar8x32_ps(k0, _mm256_set1_epi32(7)), 0x01);
  const __m256i p = _mm256_set1_epi32(static_cast<int>(pos));
  const __m256 kv = _mm256_set1_ps(key);
  for (int v = 0; v < 2; ++v) {
    const __m256i l = _mm256_add_epi32(lane, _mm256_set1_epi32(8 * v));
    const __m256 keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(p, l));  // l < pos: stays
    const __m256 here = _mm256_castsi256_ps(_mm256_cmpeq_epi32(p, l));  // l == pos: the new key
    const __m256 moved = _mm256_blendv_ps(v == 0 ? s0 : s1, kv, here);
    _mm256_storeu_ps(kr + 8 * v, _mm256_blendv_ps(moved, v == 0 ? k0 : k1, keep));
  }
  // ids: 64-bit lanes, four per vector; lane l of vector v is entry 4 v + l
  const __m256i up64 = _mm256_setr_epi32(0, 1, 0, 1, 2, 3, 4, 5);
  const __m256i last64 = _mm256_setr_epi32(6, 7, 6, 7, 6, 7, 6, 7);
  const __m256i lane64 = _mm256_setr_epi64x(0, 1, 2, 3);
  const __m256i p64 = _mm256_set1_epi64x(pos), jv = _mm256_set1_epi64x(j);
  __m256i prev = _mm256_setzero_si256();
  for (int v = 0; v < 4; ++v) {
    const __m256i cur = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ir + 4 * v));
    const __m256i shifted =
        _mm256_blend_epi32(_mm256_permutevar8x32_epi32(cur, up64), _mm256_permutevar8x32_epi32(prev, last64), 0x03);
    const __m256i l = _mm256_add_epi64(lane64, _mm256_set1_epi64x(4 * v));
    const __m256i keep = _mm256_cmpgt_epi64(p64, l), here = _mm256_cmpeq_epi64(p64, l);
    const __m256i moved = _mm256_blendv_epi8(shifted, jv, here);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(ir + 4 * v), _mm256_blendv_epi8(moved, cur, keep));
    prev = cur;
  }
}

// Candidates::offer for lists of at most 32 (ld 16 or 32): the position is the count of kept entries
// that precede (key, j) under spread::key_less (two or four vector compares), then the entries from
// there move up one slot. Same list, overflow flag and gate as offer().
FK_TARGET_AVX2 inline void offer_vector(Candidates<float>& cand, int64_t i, float key, int64_t j) {
  if (!(key <= cand.gates[i]) || j == i) return;
  const int64_t cap = cand.cap, size = cand.sizes[i];
  float* kr = cand.keys.data() + i * cand.ld;
  int64_t* ir = cand.ids.data() + i * cand.ld;
  const __m256 kv = _mm256_set1_ps(key);
  uint32_t before = 0, equal = 0;
  for (int64_t v = 0; v < cand.ld; v += 8) {
    const __m256 kk = _mm256_loadu_ps(kr + v);
    before |= static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(kk, kv, _CMP_LT_OQ))) << v;
    equal |= static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(kk, kv, _CMP_EQ_OQ))) << v;
  }
  const uint32_t live = size >= 32 ? ~0u : (1u << size) - 1;
  before &= live;
  for (uint32_t e = equal & live; e; e &= e - 1) {  // equal keys (rare): the smaller id goes first
    const int l = __builtin_ctz(e);
    if (ir[l] < j) before |= 1u << l;
  }
  const int64_t pos = __builtin_popcount(before);
  if (pos >= cap) {  // after all cap kept entries: a near-tie of the k-th that the list cannot hold
    cand.overflow[i] = 1;
    return;
  }
  const bool full = size == cap;
  const float dropped = full ? kr[cap - 1] : 0.0f;
  if (cand.ld == 16) {
    insert16(kr, ir, pos, key, j);
  } else {
    const int64_t moved = (full ? cap - 1 : size) - pos;
    std::memmove(kr + pos + 1, kr + pos, static_cast<size_t>(moved) * sizeof(float));
    std::memmove(ir + pos + 1, ir + pos, static_cast<size_t>(moved) * sizeof(int64_t));
    kr[pos] = key;
    ir[pos] = j;
  }
  if (!full) cand.sizes[i] = size + 1;
  if (size + 1 < cand.k) return;
  const float gate = kr[cand.k - 1] + cand.bands[i];
  if (full && dropped <= gate) cand.overflow[i] = 1;  // a dropped near-tie of the k-th
  cand.gates[i] = gate;
}

FK_TARGET_AVX2 inline void offer(Candidates<float>& cand, int64_t i, float key, int64_t j) {
  if (cand.ld <= 32)
    offer_vector(cand, i, key, j);
  else
    cand.offer(i, key, j);
}

// dst[q * 16 + p] = src[p * ld + q] for p < 16, q < nq (<= 8): one 8 x 8 transpose in registers per
// half panel (unpack, shuffle, 128-bit permute); rows past `live` read as zero.
FK_TARGET_AVX2 void transpose_panel(const float* src, int64_t ld, int64_t live, int64_t nq, float* dst) {
  for (int half = 0; half < 2; ++half) {
    __m256 r[8];
    for (int p = 0; p < 8; ++p) {
      const int64_t row = 8 * half + p;
      if (row >= live) {
        r[p] = _mm256_setzero_ps();
      } else if (nq == 8) {
        r[p] = _mm256_loadu_ps(src + row * ld);
      } else {
        alignas(32) float tmp[8] = {};
        std::copy(src + row * ld, src + row * ld + nq, tmp);
        r[p] = _mm256_load_ps(tmp);
      }
    }
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    // u_m: rows 0-3 (low 128) and 4-7 (high 128) of columns m (and m + 4 after the permute)
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    const __m256 cols[8] = {_mm256_permute2f128_ps(u0, u4, 0x20), _mm256_permute2f128_ps(u1, u5, 0x20),
                            _mm256_permute2f128_ps(u2, u6, 0x20), _mm256_permute2f128_ps(u3, u7, 0x20),
                            _mm256_permute2f128_ps(u0, u4, 0x31), _mm256_permute2f128_ps(u1, u5, 0x31),
                            _mm256_permute2f128_ps(u2, u6, 0x31), _mm256_permute2f128_ps(u3, u7, 0x31)};
    for (int q = 0; q < nq; ++q) _mm256_storeu_ps(dst + q * 16 + 8 * half, cols[q]);
  }
}

}  // namespace

}  // namespace avx2
}  // namespace spread_cpu
}  // namespace fedkernels

#include "spread/knn_tiles_body_x86.h"
#endif
