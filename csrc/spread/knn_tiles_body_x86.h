// The fused tile of the CPU knn_classes, one body for every x86 level: an kMr x kNr register-blocked
// dot-product kernel (kNr = two vectors of the level: 16 columns at avx2, 32 at avx512) whose
// epilogue turns the accumulators into keys and tests them against the rows' and the columns' gates
// in registers, so the [tile, tile] block of keys is never written or re-read. Almost every key fails
// its gate; the few that pass go to the level's offer(). The dot products use FMA and their own
// summation order: keys only choose candidates within the rounding band of spread.h (which bounds
// any summation order, FMA included), and the final distances are recomputed in float64, so the
// output is the same as at every other level.
//
// Included by knn_tiles_avx2.cpp and knn_tiles_avx512.cpp with FK_LEVEL defined
// (common/simd_levels_x86.h), after they define in namespace FK_LEVEL's anonymous namespace:
//   kMr (rows per micro-tile), kRowChunk (rows of a row block swept against all column panels before
//   the next rows), kPackDims and transpose_panel(src, ld, live, nq, dst) (the packing transpose:
//   dst[q * 16 + p] = src[p * ld + q] for p < 16, q < nq <= kPackDims; rows past live read as zero),
//   and offer(cand, i, key, j) (Candidates::offer, the level's way).
// No include guard: each level's translation unit includes it once, under its own FK_LEVEL.
#ifndef FK_LEVEL
#error "define FK_LEVEL (avx2 or avx512) before including knn_tiles_body_x86.h"
#endif

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "common/simd_levels_x86.h"
#include "spread/knn_tiles.h"

#if FK_X86_LEVELS
#include <immintrin.h>

namespace fedkernels {
namespace spread_cpu {
namespace FK_LEVEL {

namespace {

using V = simd::FK_LEVEL;  // what differs between the levels

constexpr int64_t kPanel = 16;          // rows per packed panel (the layout of every level)
constexpr int64_t kNv = 2;              // vectors per micro-tile row
constexpr int64_t kNr = kNv * V::kF32;  // columns per micro-tile: one panel (avx2) or two (avx512)
static_assert(kNr % kPanel == 0 && kNr <= 32, "a micro-tile is whole panels, its lanes one uint32 mask");

int64_t padded_rows(int64_t n) { return (n + kNr - 1) / kNr * kNr; }

// Offers the set bits of mask (lane t = column col + t of keys) to list `row` (as_rows) or the
// lists of those columns, each offered `other` (!as_rows).
FK_LEVEL_TARGET inline void offer_bits(Candidates<float>& cand, uint32_t mask, const float* keys, int64_t base,
                                       int64_t other, bool as_rows) {
  while (mask) {
    const int t = __builtin_ctz(mask);
    mask &= mask - 1;
    offer(cand, as_rows ? other : base + t, keys[t], as_rows ? base + t : other);
  }
}

// The kMr x kNr micro-tile's dot products in registers: acc[r][v] holds columns v * kF32 .. for
// rows a0 + r * d (rows past nrow repeat the last one, their products unused) times the packed
// columns b (column c, dim q at b + (c / 16) * 16 d + q * 16 + c % 16).
struct MicroTile {
  V::F32 acc[kMr][kNv];
};

FK_LEVEL_TARGET inline void dot_micro_tile(const float* a0, int64_t nrow, const float* b, int64_t d, MicroTile& t) {
  const float* a[kMr];
#pragma GCC unroll 8
  for (int r = 0; r < kMr; ++r) a[r] = a0 + std::min<int64_t>(r, nrow - 1) * d;
  const float* bv[kNv];
#pragma GCC unroll 2
  for (int v = 0; v < kNv; ++v) bv[v] = b + (v * V::kF32 / kPanel) * kPanel * d + (v * V::kF32) % kPanel;
#pragma GCC unroll 8
  for (int r = 0; r < kMr; ++r) {
#pragma GCC unroll 2
    for (int v = 0; v < kNv; ++v) t.acc[r][v] = V::f32_zero();
  }
#pragma GCC unroll 2
  for (int64_t q = 0; q < d; ++q) {
    V::F32 bq[kNv];
#pragma GCC unroll 2
    for (int v = 0; v < kNv; ++v) bq[v] = V::f32_loadu(bv[v] + q * kPanel);
#pragma GCC unroll 8
    for (int r = 0; r < kMr; ++r) {
      const V::F32 ar = V::f32_set1(a[r][q]);
#pragma GCC unroll 2
      for (int v = 0; v < kNv; ++v) t.acc[r][v] = V::f32_fmadd(ar, bq[v], t.acc[r][v]);
    }
  }
}

// Bits [0, n) of a vector's lanes (none for n <= 0, all kF32 for n >= kF32).
inline uint32_t first_bits(int64_t n) { return n <= 0 ? 0u : n >= V::kF32 ? (1u << V::kF32) - 1 : (1u << n) - 1; }

// Two disjoint blocks: each key goes to the row's list and the column's.
template <int kMetric>
FK_LEVEL_TARGET void tile_pair(const float* wa, int64_t row0, int64_t na, const float* pb, int64_t col0, int64_t nb,
                               int64_t d, Candidates<float>& cand) {
  constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const float* ct = cand.col_term;
  const float* gates = cand.gates.data();
  alignas(64) float keys[kNr];
  for (int64_t r0 = 0; r0 < na; r0 += kRowChunk) {
    const int64_t r1 = na - r0 > kRowChunk ? r0 + kRowChunk : na;
    for (int64_t jb = 0; jb < nb; jb += kNr) {
      const float* b = pb + jb * d;  // panels jb / 16 ..
      const int64_t ncol = std::min(kNr, nb - jb);
      const int64_t j0 = col0 + jb;
      // Lanes past the last column read NaN terms (so their keys fail every test) and -inf gates.
      V::F32 ctj[kNv], gc[kNv];
#pragma GCC unroll 2
      for (int v = 0; v < kNv; ++v) ctj[v] = V::f32_load_first_or(ct + j0 + v * V::kF32, ncol - v * V::kF32, kNan);
      for (int64_t ib = r0; ib < r1; ib += kMr) {
        const int64_t nrow = std::min(kMr, na - ib);
        MicroTile t;
        dot_micro_tile(wa + ib * d, nrow, b, d, t);
#pragma GCC unroll 2
        for (int v = 0; v < kNv; ++v)
          gc[v] = V::f32_load_first_or(gates + j0 + v * V::kF32, ncol - v * V::kF32, kNegInf);
#pragma GCC unroll 8
        for (int r = 0; r < kMr; ++r) {
          if (r >= nrow) break;
          const int64_t i = row0 + ib + r;
          // l2 key: |w_j|^2 - 2 w_i.w_j; cosine: -(w_i.w_j) / |w_j| (as in Candidates::scan).
          V::F32 tv[kNv], k[kNv];
          const V::F32 gr = V::f32_set1(gates[i]);
          uint32_t mr = 0;
#pragma GCC unroll 2
          for (int v = 0; v < kNv; ++v) {
            tv[v] = kMetric == spread::kL2 ? V::f32_add(t.acc[r][v], t.acc[r][v]) : t.acc[r][v];
            k[v] = kMetric == spread::kL2 ? V::f32_sub(ctj[v], tv[v]) : V::f32_mul(ctj[v], tv[v]);
            mr |= V::f32_le_bits(k[v], gr) << (v * V::kF32);
          }
          if (mr) {
#pragma GCC unroll 2
            for (int v = 0; v < kNv; ++v) V::f32_store(keys + v * V::kF32, k[v]);
            offer_bits(cand, mr, keys, j0, i, true);
          }
          const V::F32 cti = V::f32_set1(ct[i]);
          uint32_t mc = 0;
#pragma GCC unroll 2
          for (int v = 0; v < kNv; ++v) {
            k[v] = kMetric == spread::kL2 ? V::f32_sub(cti, tv[v]) : V::f32_mul(cti, tv[v]);
            mc |= V::f32_le_bits(k[v], gc[v]) << (v * V::kF32);
          }
          if (mc) {
#pragma GCC unroll 2
            for (int v = 0; v < kNv; ++v) V::f32_store(keys + v * V::kF32, k[v]);
            offer_bits(cand, mc, keys, j0, i, false);
#pragma GCC unroll 2
            for (int v = 0; v < kNv; ++v)  // the offers may have lowered them
              gc[v] = V::f32_load_first_or(gates + j0 + v * V::kF32, ncol - v * V::kF32, kNegInf);
          }
        }
      }
    }
  }
}

// A row's list from its keys `keys` (columns col0 + t for t < n, +inf where excluded), when the list
// is still empty: the smallest keys in (key, id) order by repeated vector minimum, appended, until the
// next one is above the gate (the k-th plus the band) or the list is full (then a near-tie is dropped:
// overflow). The same list offer() would build from these keys in any order, without the about
// k (1 + ln(n / k)) one-at-a-time insertions. keys: nv aligned vectors.
FK_LEVEL_TARGET void select_into_empty(Candidates<float>& cand, int64_t i, float* keys, int64_t nv, int64_t col0) {
  const V::F32 inf = V::f32_set1(std::numeric_limits<float>::infinity());
  float* kr = cand.keys.data() + i * cand.ld;
  int64_t* ir = cand.ids.data() + i * cand.ld;
  int64_t size = 0;
  float gate = std::numeric_limits<float>::infinity();
  for (;;) {
    V::F32 m = inf;
    for (int64_t v = 0; v < nv; ++v) m = V::f32_min(m, V::f32_load(keys + V::kF32 * v));
    const float mn = V::f32_reduce_min(m);
    if (mn == std::numeric_limits<float>::infinity() || !(mn <= gate)) break;
    int64_t lane = 0;  // the first column holding mn: equal keys go to the smaller id
    const V::F32 mv = V::f32_set1(mn);
    for (int64_t v = 0; v < nv; ++v) {
      const uint32_t eq = V::f32_eq_bits(V::f32_load(keys + V::kF32 * v), mv);
      if (eq) {
        lane = V::kF32 * v + __builtin_ctz(eq);
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
FK_LEVEL_TARGET void diagonal_block(const float* wa, int64_t row0, int64_t n, const float* pb, int64_t d,
                                    Candidates<float>& cand) {
  const int64_t ldg = padded_rows(n);
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>(ldg * ldg + ldg + V::kF32));
  float* dots = scratch.data();
  float* keys = dots + ldg * ldg;
  keys += (V::kF32 - reinterpret_cast<uintptr_t>(keys) / sizeof(float) % V::kF32) % V::kF32;  // vector-aligned
  for (int64_t jb = 0; jb < n; jb += kNr) {
    for (int64_t ib = 0; ib < n; ib += kMr) {
      if (jb + kNr - 1 <= ib) break;
      const int64_t nrow = std::min(kMr, n - ib);
      MicroTile t;
      dot_micro_tile(wa + ib * d, nrow, pb + jb * d, d, t);
      for (int64_t r = 0; r < nrow; ++r) {
#pragma GCC unroll 2
        for (int v = 0; v < kNv; ++v) V::f32_storeu(dots + (ib + r) * ldg + jb + v * V::kF32, t.acc[r][v]);
      }
    }
  }
  for (int64_t r = 1; r < n; ++r)  // products with j < i from their mirror j > i
    for (int64_t t = 0; t < r; ++t) dots[r * ldg + t] = dots[t * ldg + r];
  const float* ct = cand.col_term + row0;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const int64_t nv = ldg / V::kF32;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t i = row0 + r;
    bool finite = true;
    for (int64_t v = 0; v < nv; ++v) {
      const int64_t live = n - V::kF32 * v;  // lanes past n (live <= 0: all of them) are excluded
      const V::F32 gv = V::f32_loadu(dots + r * ldg + V::kF32 * v);
      const V::F32 cv = V::f32_load_first_or(ct + V::kF32 * v, live, 0.0f);
      // l2 key: |w_j|^2 - 2 w_i.w_j; cosine: -(w_i.w_j) / |w_j| (as in tile_pair).
      const V::F32 kv = kMetric == spread::kL2 ? V::f32_sub(cv, V::f32_add(gv, gv)) : V::f32_mul(cv, gv);
      const uint32_t live_bits = first_bits(live);
      finite = finite && (V::f32_finite_bits(kv) & live_bits) == live_bits;
      V::f32_store(keys + V::kF32 * v, V::f32_first_or(kv, live, kInf));
    }
    keys[r] = kInf;  // not its own neighbour
    if (finite && cand.sizes[i] == 0) {
      select_into_empty(cand, i, keys, nv, row0);
      continue;
    }
    for (int64_t t = 0; t < n; ++t) {
      if (t != r) offer(cand, i, keys[t], row0 + t);
    }
  }
}

}  // namespace

int64_t packed_tile_floats(int64_t n, int64_t d) { return padded_rows(n) * d; }

// Panels of 16 rows, dimension-major: row p, dim q at dst[(p / 16) * 16 d + q * 16 + p % 16];
// rows past n (up to a multiple of kNr) are zero so the kernel can always load whole micro-tiles.
void pack_tile_rows(const float* w, int64_t r0, int64_t n, int64_t d, float* dst) {
  for (int64_t p0 = 0; p0 < padded_rows(n); p0 += kPanel) {
    const int64_t live = std::max<int64_t>(0, std::min(kPanel, n - p0));
    const float* src = w + (r0 + std::min(p0, n)) * d;  // never formed past the rows that exist
    for (int64_t q0 = 0; q0 < d; q0 += kPackDims) {
      transpose_panel(src + q0, d, live, std::min(kPackDims, d - q0), dst + p0 * d + q0 * kPanel);
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

}  // namespace FK_LEVEL
}  // namespace spread_cpu
}  // namespace fedkernels
#endif
