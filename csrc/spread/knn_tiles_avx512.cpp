// Fused AVX-512 tile of the CPU knn_classes (the avx512 level; knn_tiles_avx2.cpp is the avx2 one): an 8 x 32
// register-blocked dot-product kernel whose epilogue turns the accumulators into keys and tests them against the rows'
// (and columns') gates in registers, so the [tile, tile] block of keys is never written or re-read. Almost every key
// fails its gate; the few that pass go to Candidates::offer, which re-tests them against the
// current gate. The dot products use FMA and their own summation order: keys only choose
// candidates within the rounding band of spread.h (which bounds any summation order, FMA
// included), and the final distances are recomputed in float64, so the output does not depend on
// how the keys were rounded.
#include "spread/knn_tiles.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <limits>
#include <vector>

#if FK_X86_LEVELS
#include <immintrin.h>
// GCC 12 flags the intrinsics' internal undefined-vector placeholders as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace fedkernels {
namespace spread_cpu {
namespace avx512 {

namespace {
constexpr int64_t kPanel = 16;  // rows per packed panel: one zmm of float32
constexpr int64_t kMr = 8;      // rows per micro-tile
constexpr int64_t kNr = 32;     // columns per micro-tile: two panels

int64_t padded_rows(int64_t n) { return (n + kNr - 1) / kNr * kNr; }
}  // namespace

int64_t packed_tile_floats(int64_t n, int64_t d) { return padded_rows(n) * d; }

namespace {

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

// Offers the set bits of mask (lane t = column col + t of keys) to list `row` (as_rows) or the
// lists of those columns, each offered `other` (!as_rows).
FK_TARGET_AVX512 inline void offer_bits(Candidates<float>& cand, uint32_t mask, const float* keys, int64_t base,
                                        int64_t other, bool as_rows) {
  while (mask) {
    const int t = __builtin_ctz(mask);
    mask &= mask - 1;
    const int64_t i = as_rows ? other : base + t, j = as_rows ? base + t : other;
    if (cand.ld == 16)
      offer_vector<false>(cand, i, keys[t], j);
    else if (cand.ld == 32)
      offer_vector<true>(cand, i, keys[t], j);
    else
      cand.offer(i, keys[t], j);
  }
}

// g[r][t] = row r . column t for the 8 x 32 micro-tile: rows a (row-major, stride d; rows past nrow
// repeat the last one, their products unused) times two packed panels b (b + q * 16, b + 16 d + q * 16).
FK_TARGET_AVX512 inline void dot_micro_tile(const float* a0, int64_t nrow, const float* b, int64_t d, float (*g)[kNr]) {
  const float* a[kMr];
#pragma GCC unroll 8
  for (int r = 0; r < kMr; ++r) a[r] = a0 + std::min<int64_t>(r, nrow - 1) * d;
  __m512 acc0[kMr], acc1[kMr];
#pragma GCC unroll 8
  for (int r = 0; r < kMr; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
  for (int64_t q = 0; q < d; ++q) {
    const __m512 b0 = _mm512_loadu_ps(b + q * kPanel);
    const __m512 b1 = _mm512_loadu_ps(b + kPanel * d + q * kPanel);
#pragma GCC unroll 8
    for (int r = 0; r < kMr; ++r) {
      const __m512 ar = _mm512_set1_ps(a[r][q]);
      acc0[r] = _mm512_fmadd_ps(ar, b0, acc0[r]);
      acc1[r] = _mm512_fmadd_ps(ar, b1, acc1[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kMr; ++r) {
    _mm512_storeu_ps(g[r], acc0[r]);
    _mm512_storeu_ps(g[r] + 16, acc1[r]);
  }
}

// Two disjoint blocks: each key goes to the row's list and the column's.
template <int kMetric>
FK_TARGET_AVX512 void tile_pair(const float* wa, int64_t row0, int64_t na, const float* pb, int64_t col0, int64_t nb,
                                int64_t d, Candidates<float>& cand) {
  const __m512 nan = _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN());
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const float* ct = cand.col_term;
  const float* gates = cand.gates.data();
  alignas(64) float keys[kNr];
  for (int64_t jb = 0; jb < nb; jb += kNr) {
    const float* b = pb + jb * d;  // panels jb / 16 and jb / 16 + 1
    const int64_t ncol = std::min(kNr, nb - jb);
    const int64_t j0 = col0 + jb;
    // Lanes past the last column read NaN terms (so their keys fail every test) and -inf gates.
    const __mmask16 cm0 = static_cast<__mmask16>(ncol >= 16 ? 0xFFFF : (1u << ncol) - 1);
    const __mmask16 cm1 = static_cast<__mmask16>(ncol >= 32 ? 0xFFFF : ncol > 16 ? (1u << (ncol - 16)) - 1 : 0);
    const __m512 ctj0 = _mm512_mask_loadu_ps(nan, cm0, ct + j0);
    const __m512 ctj1 = _mm512_mask_loadu_ps(nan, cm1, ct + j0 + 16);
    for (int64_t ib = 0; ib < na; ib += kMr) {
      const int64_t nrow = std::min(kMr, na - ib);
      // The micro-tile's products stay in registers for the epilogue (no store and reload).
      const float* a[kMr];  // row-major rows; rows past na repeat the last one (their keys are unused)
#pragma GCC unroll 8
      for (int r = 0; r < kMr; ++r) a[r] = wa + (ib + std::min<int64_t>(r, nrow - 1)) * d;
      __m512 acc0[kMr], acc1[kMr];
#pragma GCC unroll 8
      for (int r = 0; r < kMr; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
      for (int64_t q = 0; q < d; ++q) {
        const __m512 b0 = _mm512_loadu_ps(b + q * kPanel);
        const __m512 b1 = _mm512_loadu_ps(b + kPanel * d + q * kPanel);
#pragma GCC unroll 8
        for (int r = 0; r < kMr; ++r) {
          const __m512 ar = _mm512_set1_ps(a[r][q]);
          acc0[r] = _mm512_fmadd_ps(ar, b0, acc0[r]);
          acc1[r] = _mm512_fmadd_ps(ar, b1, acc1[r]);
        }
      }
      __m512 gc0 = _mm512_mask_loadu_ps(neg_inf, cm0, gates + j0);
      __m512 gc1 = _mm512_mask_loadu_ps(neg_inf, cm1, gates + j0 + 16);
#pragma GCC unroll 8
      for (int r = 0; r < kMr; ++r) {
        if (r >= nrow) break;
        const int64_t i = row0 + ib + r;
        // l2 key: |w_j|^2 - 2 w_i.w_j; cosine: -(w_i.w_j) / |w_j| (as in Candidates::scan).
        const __m512 t0 = kMetric == spread::kL2 ? _mm512_add_ps(acc0[r], acc0[r]) : acc0[r];
        const __m512 t1 = kMetric == spread::kL2 ? _mm512_add_ps(acc1[r], acc1[r]) : acc1[r];
        const __m512 kr0 = kMetric == spread::kL2 ? _mm512_sub_ps(ctj0, t0) : _mm512_mul_ps(ctj0, t0);
        const __m512 kr1 = kMetric == spread::kL2 ? _mm512_sub_ps(ctj1, t1) : _mm512_mul_ps(ctj1, t1);
        const __m512 gr = _mm512_set1_ps(gates[i]);
        const uint32_t mr = static_cast<uint32_t>(_mm512_cmp_ps_mask(kr0, gr, _CMP_LE_OQ)) |
                            (static_cast<uint32_t>(_mm512_cmp_ps_mask(kr1, gr, _CMP_LE_OQ)) << 16);
        if (mr) {
          _mm512_store_ps(keys, kr0);
          _mm512_store_ps(keys + 16, kr1);
          offer_bits(cand, mr, keys, j0, i, true);
        }
        const __m512 cti = _mm512_set1_ps(ct[i]);
        const __m512 kc0 = kMetric == spread::kL2 ? _mm512_sub_ps(cti, t0) : _mm512_mul_ps(cti, t0);
        const __m512 kc1 = kMetric == spread::kL2 ? _mm512_sub_ps(cti, t1) : _mm512_mul_ps(cti, t1);
        const uint32_t mc = static_cast<uint32_t>(_mm512_cmp_ps_mask(kc0, gc0, _CMP_LE_OQ)) |
                            (static_cast<uint32_t>(_mm512_cmp_ps_mask(kc1, gc1, _CMP_LE_OQ)) << 16);
        if (mc) {
          _mm512_store_ps(keys, kc0);
          _mm512_store_ps(keys + 16, kc1);
          offer_bits(cand, mc, keys, j0, i, false);
          gc0 = _mm512_mask_loadu_ps(neg_inf, cm0, gates + j0);  // the offers may have lowered them
          gc1 = _mm512_mask_loadu_ps(neg_inf, cm1, gates + j0 + 16);
        }
      }
    }
  }
}

// A row's list from its keys `keys` (columns col0 + t for t < n, +inf where excluded), when the list is
// still empty: the smallest keys in (key, id) order by repeated vector minimum, appended, until the
// next one is above the gate (the k-th plus the band) or the list is full (then a near-tie is dropped:
// overflow). The same list offer() would build from these keys in any order, without the about
// k (1 + ln(n / k)) one-at-a-time insertions. keys: 16-float vectors, nv of them.
FK_TARGET_AVX512 void select_into_empty(Candidates<float>& cand, int64_t i, float* keys, int64_t nv, int64_t col0) {
  const __m512 inf = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  float* kr = cand.keys.data() + i * cand.ld;
  int64_t* ir = cand.ids.data() + i * cand.ld;
  int64_t size = 0;
  float gate = std::numeric_limits<float>::infinity();
  for (;;) {
    __m512 m = inf;
    for (int64_t v = 0; v < nv; ++v) m = _mm512_min_ps(m, _mm512_load_ps(keys + 16 * v));
    const float mn = _mm512_reduce_min_ps(m);
    if (mn == std::numeric_limits<float>::infinity() || !(mn <= gate)) break;
    int64_t lane = 0;  // the first column holding mn: equal keys go to the smaller id
    for (int64_t v = 0; v < nv; ++v) {
      const uint32_t eq = _mm512_cmp_ps_mask(_mm512_load_ps(keys + 16 * v), _mm512_set1_ps(mn), _CMP_EQ_OQ);
      if (eq) {
        lane = 16 * v + __builtin_ctz(eq);
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
// its gate, as tile_pair does. Costs the scratch's writes over tile_pair's diagonal case.
template <int kMetric>
FK_TARGET_AVX512 void diagonal_block(const float* wa, int64_t row0, int64_t n, const float* pb, int64_t d,
                                     Candidates<float>& cand) {
  const int64_t ldg = padded_rows(n);
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>(ldg * ldg + ldg + 16));
  float* dots = scratch.data();
  float* keys = dots + ldg * ldg;
  keys += (16 - reinterpret_cast<uintptr_t>(keys) / sizeof(float) % 16) % 16;  // 64-byte aligned
  alignas(64) float g[kMr][kNr];
  for (int64_t jb = 0; jb < n; jb += kNr) {
    for (int64_t ib = 0; ib < n; ib += kMr) {
      if (jb + kNr - 1 <= ib) break;
      dot_micro_tile(wa + ib * d, std::min(kMr, n - ib), pb + jb * d, d, g);
      for (int64_t r = 0; r < std::min(kMr, n - ib); ++r) std::copy(g[r], g[r] + kNr, dots + (ib + r) * ldg + jb);
    }
  }
  for (int64_t r = 1; r < n; ++r)  // products with j < i from their mirror j > i
    for (int64_t t = 0; t < r; ++t) dots[r * ldg + t] = dots[t * ldg + r];
  const float* ct = cand.col_term + row0;
  const __m512 inf = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  const int64_t nv = ldg / 16;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t i = row0 + r;
    bool finite = true;
    for (int64_t v = 0; v < nv; ++v) {
      const int64_t live = std::min<int64_t>(16, n - 16 * v);
      const __mmask16 m = static_cast<__mmask16>(live >= 16 ? 0xFFFF : live > 0 ? (1u << live) - 1 : 0);
      const __m512 gv = _mm512_loadu_ps(dots + r * ldg + 16 * v);
      const __m512 cv = _mm512_maskz_loadu_ps(m, ct + 16 * v);
      // l2 key: |w_j|^2 - 2 w_i.w_j; cosine: -(w_i.w_j) / |w_j| (as in tile_pair).
      const __m512 kv = kMetric == spread::kL2 ? _mm512_sub_ps(cv, _mm512_add_ps(gv, gv)) : _mm512_mul_ps(cv, gv);
      finite = finite && _mm512_mask_cmp_ps_mask(m, _mm512_abs_ps(kv), inf, _CMP_LT_OQ) == m;
      _mm512_store_ps(keys + 16 * v, _mm512_mask_mov_ps(inf, m, kv));
    }
    keys[r] = std::numeric_limits<float>::infinity();  // not its own neighbour
    if (finite && cand.sizes[i] == 0) {
      select_into_empty(cand, i, keys, nv, row0);
      continue;
    }
    for (int64_t t = 0; t < n; ++t) {
      if (t == r) continue;
      if (cand.ld == 16)
        offer_vector<false>(cand, i, keys[t], row0 + t);
      else if (cand.ld == 32)
        offer_vector<true>(cand, i, keys[t], row0 + t);
      else
        cand.offer(i, keys[t], row0 + t);
    }
  }
}

// dst[q * 16 + r] = rows[r][q0 + q] for q < nq (<= 16): a 16 x 16 transpose in registers (two
// in-lane shuffle stages, two 128-bit lane stages); rows past `live` read as zero.
FK_TARGET_AVX512 void transpose_16x16(const float* src, int64_t ld, int64_t live, int64_t nq, float* dst) {
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
      if (m + 4 * l < nq) _mm512_storeu_ps(dst + (m + 4 * l) * kPanel, cols[l]);
    }
  }
}

}  // namespace

// Panels of 16 rows, dimension-major: row p, dim q at dst[(p / 16) * 16 d + q * 16 + p % 16];
// rows past n (up to a multiple of 32) are zero so the kernel can always load two full panels.
void pack_tile_rows(const float* w, int64_t r0, int64_t n, int64_t d, float* dst) {
  for (int64_t p0 = 0; p0 < padded_rows(n); p0 += kPanel) {
    const int64_t live = std::max<int64_t>(0, std::min(kPanel, n - p0));
    const float* src = w + (r0 + std::min(p0, n)) * d;  // never formed past the rows that exist
    for (int64_t q0 = 0; q0 < d; q0 += kPanel) {
      transpose_16x16(src + q0, d, live, std::min(kPanel, d - q0), dst + p0 * d + q0 * kPanel);
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

}  // namespace avx512
}  // namespace spread_cpu
}  // namespace fedkernels
#endif
