// Fused AVX2 + FMA tile of the CPU knn_classes (the avx2 level; knn_tiles_avx512.cpp is the avx512
// one, with the same design): a 6 x 16 register-blocked dot-product kernel (12 of the 16 ymm
// registers accumulate, two hold the column panel, one the broadcast row value) whose epilogue turns
// the accumulators into keys and tests them against the rows' and the columns' gates in registers,
// so the [tile, tile] block of keys is never written or re-read. Almost every key fails its gate;
// the few that pass are inserted into the row's (or column's) candidate list with vector compares.
// The dot products use FMA and their own summation order: keys only choose candidates within the
// rounding band of spread.h (which bounds any summation order, FMA included), and the final
// distances are recomputed in float64, so the output is the same as at every other level.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "spread/knn_tiles.h"

#if FK_X86_LEVELS
#include <immintrin.h>

namespace fedkernels {
namespace spread_cpu {
namespace avx2 {

namespace {

constexpr int64_t kPanel = 16;  // rows per packed panel: two ymm of float32
constexpr int64_t kMr = 6;      // rows per micro-tile
constexpr int64_t kNr = 16;     // columns per micro-tile: one panel
// Rows of the row block swept against all column panels before the next rows: 48 rows of A stay in
// L2 while the packed column block streams past them (at d = 512: 96 KiB against 512 KiB), instead of
// all 256 rows of A streaming past every column panel.
constexpr int64_t kRowChunk = 48;

int64_t padded_rows(int64_t n) { return (n + kNr - 1) / kNr * kNr; }

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

// Offers the set bits of mask (lane t = column col + t of keys) to list `row` (as_rows) or the
// lists of those columns, each offered `other` (!as_rows).
FK_TARGET_AVX2 inline void offer_bits(Candidates<float>& cand, uint32_t mask, const float* keys, int64_t base,
                                      int64_t other, bool as_rows) {
  while (mask) {
    const int t = __builtin_ctz(mask);
    mask &= mask - 1;
    offer(cand, as_rows ? other : base + t, keys[t], as_rows ? base + t : other);
  }
}

// The 6 x 16 micro-tile's dot products in registers: acc0[r] (columns 0-7) and acc1[r] (8-15) for
// rows a0 + r * d (rows past nrow repeat the last one, their products unused) times the packed panel b.
struct MicroTile {
  __m256 acc0[kMr], acc1[kMr];
};

FK_TARGET_AVX2 inline void dot_micro_tile(const float* a0, int64_t nrow, const float* b, int64_t d, MicroTile& t) {
  const float* a[kMr];
#pragma GCC unroll 6
  for (int r = 0; r < kMr; ++r) a[r] = a0 + std::min<int64_t>(r, nrow - 1) * d;
#pragma GCC unroll 6
  for (int r = 0; r < kMr; ++r) t.acc0[r] = t.acc1[r] = _mm256_setzero_ps();
#pragma GCC unroll 2
  for (int64_t q = 0; q < d; ++q) {
    const __m256 b0 = _mm256_loadu_ps(b + q * kPanel);
    const __m256 b1 = _mm256_loadu_ps(b + q * kPanel + 8);
#pragma GCC unroll 6
    for (int r = 0; r < kMr; ++r) {
      const __m256 ar = _mm256_broadcast_ss(a[r] + q);
      t.acc0[r] = _mm256_fmadd_ps(ar, b0, t.acc0[r]);
      t.acc1[r] = _mm256_fmadd_ps(ar, b1, t.acc1[r]);
    }
  }
}

// Lanes [0, live) of a 16-lane step as all-ones masks (lo: lanes 0-7, hi: 8-15).
FK_TARGET_AVX2 inline void live_masks(int64_t live, __m256& lo, __m256& hi) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i n = _mm256_set1_epi32(static_cast<int>(std::min<int64_t>(live, 16)));
  lo = _mm256_castsi256_ps(_mm256_cmpgt_epi32(n, idx));
  hi = _mm256_castsi256_ps(_mm256_cmpgt_epi32(n, _mm256_add_epi32(idx, _mm256_set1_epi32(8))));
}

// 16 values at p (lanes past live: `fill`), never reading past p + live.
FK_TARGET_AVX2 inline void load16(const float* p, int64_t live, float fill, __m256& lo, __m256& hi) {
  if (live >= 16) {
    lo = _mm256_loadu_ps(p);
    hi = _mm256_loadu_ps(p + 8);
    return;
  }
  __m256 m_lo, m_hi;
  live_masks(live, m_lo, m_hi);
  const __m256 f = _mm256_set1_ps(fill);
  lo = _mm256_blendv_ps(f, _mm256_maskload_ps(p, _mm256_castps_si256(m_lo)), m_lo);
  hi = _mm256_blendv_ps(f, _mm256_maskload_ps(p + 8, _mm256_castps_si256(m_hi)), m_hi);
}

FK_TARGET_AVX2 inline uint32_t le_mask(__m256 k0, __m256 k1, __m256 g0, __m256 g1) {
  return static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(k0, g0, _CMP_LE_OQ))) |
         (static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(k1, g1, _CMP_LE_OQ))) << 8);
}

// Two disjoint blocks: each key goes to the row's list and the column's.
template <int kMetric>
FK_TARGET_AVX2 void tile_pair(const float* wa, int64_t row0, int64_t na, const float* pb, int64_t col0, int64_t nb,
                              int64_t d, Candidates<float>& cand) {
  const float* ct = cand.col_term;
  const float* gates = cand.gates.data();
  alignas(32) float keys[kNr];
  for (int64_t r0 = 0; r0 < na; r0 += kRowChunk) {
    for (int64_t jb = 0; jb < nb; jb += kNr) {
      const float* b = pb + jb * d;  // panel jb / 16
      const int64_t ncol = std::min(kNr, nb - jb);
      const int64_t j0 = col0 + jb;
      // Lanes past the last column read NaN terms (so their keys fail every test) and -inf gates.
      __m256 ctj0, ctj1;
      load16(ct + j0, ncol, std::numeric_limits<float>::quiet_NaN(), ctj0, ctj1);
      for (int64_t ib = r0; ib < std::min(na, r0 + kRowChunk); ib += kMr) {
        const int64_t nrow = std::min(kMr, na - ib);
        MicroTile t;
        dot_micro_tile(wa + ib * d, nrow, b, d, t);
        __m256 gc0, gc1;
        load16(gates + j0, ncol, -std::numeric_limits<float>::infinity(), gc0, gc1);
#pragma GCC unroll 6
        for (int r = 0; r < kMr; ++r) {
          if (r >= nrow) break;
          const int64_t i = row0 + ib + r;
          // l2 key: |w_j|^2 - 2 w_i.w_j; cosine: -(w_i.w_j) / |w_j| (as in Candidates::scan).
          const __m256 t0 = kMetric == spread::kL2 ? _mm256_add_ps(t.acc0[r], t.acc0[r]) : t.acc0[r];
          const __m256 t1 = kMetric == spread::kL2 ? _mm256_add_ps(t.acc1[r], t.acc1[r]) : t.acc1[r];
          const __m256 kr0 = kMetric == spread::kL2 ? _mm256_sub_ps(ctj0, t0) : _mm256_mul_ps(ctj0, t0);
          const __m256 kr1 = kMetric == spread::kL2 ? _mm256_sub_ps(ctj1, t1) : _mm256_mul_ps(ctj1, t1);
          const __m256 gr = _mm256_set1_ps(gates[i]);
          const uint32_t mr = le_mask(kr0, kr1, gr, gr);
          if (mr) {
            _mm256_store_ps(keys, kr0);
            _mm256_store_ps(keys + 8, kr1);
            offer_bits(cand, mr, keys, j0, i, true);
          }
          const __m256 cti = _mm256_set1_ps(ct[i]);
          const __m256 kc0 = kMetric == spread::kL2 ? _mm256_sub_ps(cti, t0) : _mm256_mul_ps(cti, t0);
          const __m256 kc1 = kMetric == spread::kL2 ? _mm256_sub_ps(cti, t1) : _mm256_mul_ps(cti, t1);
          const uint32_t mc = le_mask(kc0, kc1, gc0, gc1);
          if (mc) {
            _mm256_store_ps(keys, kc0);
            _mm256_store_ps(keys + 8, kc1);
            offer_bits(cand, mc, keys, j0, i, false);
            load16(gates + j0, ncol, -std::numeric_limits<float>::infinity(), gc0, gc1);  // the offers may lower them
          }
        }
      }
    }
  }
}

// A row's list from its keys `keys` (columns col0 + t for t < n, +inf where excluded), when the list
// is still empty: the smallest keys in (key, id) order by repeated vector minimum, appended, until the
// next one is above the gate (the k-th plus the band) or the list is full (then a near-tie is dropped:
// overflow). The same list offer() would build from these keys in any order. keys: nv ymm vectors.
FK_TARGET_AVX2 void select_into_empty(Candidates<float>& cand, int64_t i, float* keys, int64_t nv, int64_t col0) {
  const __m256 inf = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  float* kr = cand.keys.data() + i * cand.ld;
  int64_t* ir = cand.ids.data() + i * cand.ld;
  int64_t size = 0;
  float gate = std::numeric_limits<float>::infinity();
  for (;;) {
    __m256 m = inf;
    for (int64_t v = 0; v < nv; ++v) m = _mm256_min_ps(m, _mm256_load_ps(keys + 8 * v));
    __m128 h = _mm_min_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_min_ps(h, _mm_shuffle_ps(h, h, _MM_SHUFFLE(1, 0, 3, 2)));
    h = _mm_min_ps(h, _mm_shuffle_ps(h, h, _MM_SHUFFLE(2, 3, 0, 1)));
    const float mn = _mm_cvtss_f32(h);
    if (mn == std::numeric_limits<float>::infinity() || !(mn <= gate)) break;
    int64_t lane = 0;  // the first column holding mn: equal keys go to the smaller id
    const __m256 mv = _mm256_set1_ps(mn);
    for (int64_t v = 0; v < nv; ++v) {
      const int eq = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_load_ps(keys + 8 * v), mv, _CMP_EQ_OQ));
      if (eq) {
        lane = 8 * v + __builtin_ctz(eq);
        break;
      }
    }
    if (size == cand.cap) {  // a near-tie of the k-th that the list cannot hold
      cand.overflow[i] = 1;
      break;
    }
    kr[size] = mn;
    ir[size] = col0 + lane;
    keys[lane] = std::numeric_limits<float>::infinity();
    if (++size == cand.k) gate = mn + cand.bands[i];
  }
  cand.sizes[i] = size;
  if (size >= cand.k) cand.gates[i] = gate;
}

// A block with itself (rows row0 .. row0 + n, packed in pb): the dot products of its upper micro-tiles
// into a [n, n] scratch, mirrored below the diagonal, then each row's keys at once. A row whose list
// is empty (the usual case: the whole-matrix schedule runs every block's diagonal pair first) fills it
// by select_into_empty; any other row, or one with a key that is not finite, offers each key that passes
// its gate, as tile_pair does.
template <int kMetric>
FK_TARGET_AVX2 void diagonal_block(const float* wa, int64_t row0, int64_t n, const float* pb, int64_t d,
                                   Candidates<float>& cand) {
  const int64_t ldg = padded_rows(n);
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>(ldg * ldg + ldg + 8));
  float* dots = scratch.data();
  float* keys = dots + ldg * ldg;
  keys += (8 - reinterpret_cast<uintptr_t>(keys) / sizeof(float) % 8) % 8;  // 32-byte aligned
  for (int64_t jb = 0; jb < n; jb += kNr) {
    for (int64_t ib = 0; ib < n; ib += kMr) {
      if (jb + kNr - 1 <= ib) break;
      const int64_t nrow = std::min(kMr, n - ib);
      MicroTile t;
      dot_micro_tile(wa + ib * d, nrow, pb + jb * d, d, t);
      for (int64_t r = 0; r < nrow; ++r) {
        _mm256_storeu_ps(dots + (ib + r) * ldg + jb, t.acc0[r]);
        _mm256_storeu_ps(dots + (ib + r) * ldg + jb + 8, t.acc1[r]);
      }
    }
  }
  for (int64_t r = 1; r < n; ++r)  // products with j < i from their mirror j > i
    for (int64_t t = 0; t < r; ++t) dots[r * ldg + t] = dots[t * ldg + r];
  const float* ct = cand.col_term + row0;
  const __m256 inf = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const int64_t nv = ldg / 8;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t i = row0 + r;
    bool finite = true;
    for (int64_t v = 0; v < nv; v += 2) {
      const int64_t live = std::max<int64_t>(0, n - 8 * v);
      __m256 m_lo, m_hi, c_lo, c_hi;
      live_masks(live, m_lo, m_hi);
      load16(ct + 8 * v, live, 0.0f, c_lo, c_hi);
      for (int h = 0; h < 2; ++h) {
        const __m256 m = h == 0 ? m_lo : m_hi, cv = h == 0 ? c_lo : c_hi;
        const __m256 gv = _mm256_loadu_ps(dots + r * ldg + 8 * (v + h));
        // l2 key: |w_j|^2 - 2 w_i.w_j; cosine: -(w_i.w_j) / |w_j| (as in tile_pair).
        const __m256 kv = kMetric == spread::kL2 ? _mm256_sub_ps(cv, _mm256_add_ps(gv, gv)) : _mm256_mul_ps(cv, gv);
        const int live_bits = _mm256_movemask_ps(m);
        finite = finite && (_mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(kv, abs_mask), inf, _CMP_LT_OQ)) &
                            live_bits) == live_bits;
        _mm256_store_ps(keys + 8 * (v + h), _mm256_blendv_ps(inf, kv, m));
      }
    }
    keys[r] = std::numeric_limits<float>::infinity();  // not its own neighbour
    if (finite && cand.sizes[i] == 0) {
      select_into_empty(cand, i, keys, nv, row0);
      continue;
    }
    for (int64_t t = 0; t < n; ++t) {
      if (t != r) offer(cand, i, keys[t], row0 + t);
    }
  }
}

// dst[q * 16 + p] = src[p * ld + q] for p < 16, q < nq (<= 8): one 8 x 8 transpose in registers per
// half panel (unpack, shuffle, 128-bit permute); rows past `live` read as zero.
FK_TARGET_AVX2 void transpose_16x8(const float* src, int64_t ld, int64_t live, int64_t nq, float* dst) {
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
    for (int q = 0; q < nq; ++q) _mm256_storeu_ps(dst + q * kPanel + 8 * half, cols[q]);
  }
}

}  // namespace

int64_t packed_tile_floats(int64_t n, int64_t d) { return padded_rows(n) * d; }

// Panels of 16 rows, dimension-major: row p, dim q at dst[(p / 16) * 16 d + q * 16 + p % 16];
// rows past n (up to a multiple of 16) are zero so the kernel can always load a full panel.
void pack_tile_rows(const float* w, int64_t r0, int64_t n, int64_t d, float* dst) {
  for (int64_t p0 = 0; p0 < padded_rows(n); p0 += kPanel) {
    const int64_t live = std::max<int64_t>(0, std::min(kPanel, n - p0));
    const float* src = w + (r0 + std::min(p0, n)) * d;  // never formed past the rows that exist
    for (int64_t q0 = 0; q0 < d; q0 += 8) {
      transpose_16x8(src + q0, d, live, std::min<int64_t>(8, d - q0), dst + p0 * d + q0 * kPanel);
    }
  }
}

void fused_tile_pair(const float* rows, int64_t row0, int64_t na, const float* packed_cols, int64_t col0, int64_t nb,
                     int64_t d, Candidates<float>& cand) {
  const bool diagonal = row0 == col0;
  // With more lists than fit in L2 (many classes), each offer would wait for its row's list to come
  // from L3: fetch the lists of both blocks into L2 first (a few hundred lines against the pair's
  // na * nb * d multiply-adds).
  if (cand.sizes.size() * static_cast<size_t>(cand.ld) * 12 > (size_t{1} << 19)) {
    for (const auto& [r0, n] : {std::make_pair(row0, na), std::make_pair(col0, nb)}) {
      for (int64_t i = r0; i < r0 + n; ++i) {
        for (int64_t x = 0; x < cand.ld; x += 16) _mm_prefetch(cand.keys.data() + i * cand.ld + x, _MM_HINT_T1);
        for (int64_t x = 0; x < cand.ld; x += 8) _mm_prefetch(cand.ids.data() + i * cand.ld + x, _MM_HINT_T1);
      }
      if (diagonal) break;
    }
  }
  if (cand.metric == spread::kL2) {
    if (diagonal)
      diagonal_block<spread::kL2>(rows, row0, na, packed_cols, d, cand);
    else
      tile_pair<spread::kL2>(rows, row0, na, packed_cols, col0, nb, d, cand);
  } else {
    if (diagonal)
      diagonal_block<spread::kCosine>(rows, row0, na, packed_cols, d, cand);
    else
      tile_pair<spread::kCosine>(rows, row0, na, packed_cols, col0, nb, d, cand);
  }
}

}  // namespace avx2
}  // namespace spread_cpu
}  // namespace fedkernels
#endif
