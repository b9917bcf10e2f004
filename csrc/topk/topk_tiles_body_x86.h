// The register tiles of the CPU linear_topk (topk_cpu_tiles.h), one body for every x86 level:
// included by topk_tiles_avx2.cpp and topk_tiles_avx512.cpp with FK_LEVEL defined
// (common/simd_levels_x86.h). A tile is kRows rows x kNr classes in kRows x 2 accumulators (kNr = two
// vectors of the level: one kCols panel at avx2, two at avx512, so each broadcast of h feeds twice
// the classes there), one fused multiply-add chain per (row, class) in q order, as the portable level
// does. The finished tile is scaled, biased (a multiply, then an add: never fused), and compared with
// each row's threshold in registers; a row whose scores all fall below it costs one compare and one
// mask. Every level gives the same bits. At avx512 a lone last panel runs the avx2 tile.
// No include guard: each level's translation unit includes it once, under its own FK_LEVEL.
#ifndef FK_LEVEL
#error "define FK_LEVEL (avx2 or avx512) before including topk_tiles_body_x86.h"
#endif

#include "common/simd_levels_x86.h"
#include "topk/topk_cpu_tiles.h"

#if FK_X86_LEVELS

#define FK_TOPK_SCAN_TILE_CAT(level) scan_tile_##level
#define FK_TOPK_SCAN_TILE(level) FK_TOPK_SCAN_TILE_CAT(level)

namespace fedkernels {
namespace topk_cpu {

namespace {

using V = simd::FK_LEVEL;  // what differs between the levels

constexpr int64_t kNv = 2;              // vectors per tile row
constexpr int64_t kNr = kNv * V::kF32;  // classes per tile: whole kCols panels
constexpr int64_t kStep = kNr / kCols;  // panels per tile
static_assert(kNr % kCols == 0 && kNr <= 32, "a tile is whole panels, its classes one uint32 mask");

// Offer row n the scores of one register-tile row whose threshold test passed (mask bit c: class c).
FK_LEVEL_TARGET void offer_masked(RowTopk& top, int64_t n, const V::F32* v, uint32_t mask, int64_t id0) {
  alignas(64) float s[kNr];
#pragma GCC unroll 2
  for (int i = 0; i < kNv; ++i) V::f32_store(s + i * V::kF32, v[i]);
  while (mask != 0) {
    const int c = __builtin_ctz(mask);
    mask &= mask - 1;
    if (!(s[c] < top.thr[n])) top.offer(n, s[c], id0 + c);  // the threshold may have risen meanwhile
  }
}

// The kStep panels at wp (panel p at wp + p * kCols * d) against one micro-panel of h.
FK_LEVEL_TARGET void scan_tile_panels(const float* hp, const float* wp, int64_t d, int64_t n0, int64_t rows,
                                      int64_t id0, uint32_t col_mask, float scale, const float* bias, RowTopk& top) {
  const float* wv[kNv];  // vector i: classes i * kF32 .., in panel i * kF32 / kCols
#pragma GCC unroll 2
  for (int i = 0; i < kNv; ++i) wv[i] = wp + (i * V::kF32 / kCols) * kCols * d + (i * V::kF32) % kCols;
  V::F32 acc[kRows][kNv];
#pragma GCC unroll 6
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 2
    for (int i = 0; i < kNv; ++i) acc[r][i] = V::f32_zero();
  }
#pragma GCC unroll 4
  for (int64_t q = 0; q < d; ++q) {
    V::F32 b[kNv];
#pragma GCC unroll 2
    for (int i = 0; i < kNv; ++i) b[i] = V::f32_loadu(wv[i] + q * kCols);
    const float* h = hp + q * kRows;
#pragma GCC unroll 6
    for (int r = 0; r < kRows; ++r) {
      const V::F32 x = V::f32_set1(h[r]);
#pragma GCC unroll 2
      for (int i = 0; i < kNv; ++i) acc[r][i] = V::f32_fmadd(x, b[i], acc[r][i]);
    }
  }
  const V::F32 vs = V::f32_set1(scale);
  V::F32 vb[kNv];
#pragma GCC unroll 2
  for (int i = 0; i < kNv; ++i) vb[i] = bias != nullptr ? V::f32_loadu(bias + i * V::kF32) : V::f32_zero();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = n0 + r;
    const V::F32 t = V::f32_set1(top.thr[n]);
    V::F32 v[kNv];
    uint32_t mask = 0;
#pragma GCC unroll 2
    for (int i = 0; i < kNv; ++i) {
      v[i] = V::f32_mul(vs, acc[r][i]);
      if (bias != nullptr) v[i] = V::f32_add(v[i], vb[i]);
      // not (v < t), true for NaN on either side: scores that may rank at or above the k-th kept one
      mask |= V::f32_nlt_bits(v[i], t) << (i * V::kF32);
    }
    mask &= col_mask;
    if (mask != 0) offer_masked(top, n, v, mask, id0);
  }
}

uint32_t low_bits(int64_t count) { return count >= 32 ? 0xFFFFFFFFu : (1u << count) - 1u; }

}  // namespace

FK_LEVEL_TARGET void FK_TOPK_SCAN_TILE(FK_LEVEL)(const TileJob& job, RowTopk& top) {
  const int64_t d = job.d, panels = (job.cols + kCols - 1) / kCols, whole = panels / kStep * kStep;
  for (int64_t b = job.block0; b < job.block1; ++b) {
    const float* hp = job.hpack + b * kRows * d;
    const int64_t n0 = b * kRows, rows = job.n - n0 < kRows ? job.n - n0 : kRows;
    for (int64_t t = 0; t < whole; t += kStep) {
      const int64_t c0 = t * kCols;
      scan_tile_panels(hp, job.wpack + t * kCols * d, d, n0, rows, job.col0 + c0, low_bits(job.cols - c0), job.scale,
                       job.bias != nullptr ? job.bias + c0 : nullptr, top);
    }
  }
  if (whole < panels) {  // a lone last panel: the avx2 tile (the same bits; the top k ignores offer order)
    const int64_t c0 = whole * kCols;
    TileJob last = job;
    last.wpack = job.wpack + c0 * d;
    last.col0 = job.col0 + c0;
    last.cols = job.cols - c0;
    last.bias = job.bias != nullptr ? job.bias + c0 : nullptr;
    scan_tile_avx2(last, top);
  }
}

}  // namespace topk_cpu
}  // namespace fedkernels
#endif
