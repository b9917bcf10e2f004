// Host-only: the register-tile kernels of the CPU linear_topk (topk_tiles_portable.cpp,
// topk_tiles_avx2.cpp) and the running per-row top k they feed.
//
// Layout: h is packed once into micro-panels of kRows rows ([d][kRows] floats each), a tile of W into
// panels of kCols classes ([d][kCols] floats each), both widened to float32 and zero-padded. A
// kRows x kCols register tile accumulates its dot products as one fused multiply-add chain per
// (row, class) in q = 0 .. d-1 order, the same on every level: a score depends only on its row and its
// class, never on where the tile falls, the level or the thread count (so duplicate classes tie
// exactly). Each finished register tile is compared against its rows' thresholds in registers; only
// scores that may enter a row's top k leave them.
#pragma once

#include <cstdint>

#include "topk/topk.h"

namespace fedkernels {
namespace topk_cpu {

constexpr int64_t kRows = 6;   // rows of h per register tile
constexpr int64_t kCols = 16;  // classes per register tile (two 8-float vectors on AVX2)

// The dispatch levels. Bit-identical results on every level (see above); they differ in speed only.
enum class Isa : int { kPortable = 0, kAvx2 = 1, kAvx512 = 2 };

// The level to run: fk::cpu_isa()'s (csrc/common/cpu_isa.h: the CPU's level under the FK_CPU_ISA
// cap): AVX-512, AVX2 with FMA, or portable.
Isa select_isa();
const char* isa_name(Isa isa);

// The running top k of a range of rows: a min-heap of composites per row (topk.h) and a float
// threshold below which no score can enter (NaN while the heap has room: every score may).
struct RowTopk {
  uint64_t* heap;  // [rows, k]
  int64_t* size;   // [rows]
  float* thr;      // [rows]
  int64_t k;

  void offer(int64_t n, float score, int64_t id) {
    uint64_t* hn = heap + n * k;
    topk::heap_offer(hn, size[n], k, topk::composite(score, id));
    if (size[n] == k) thr[n] = topk::composite_score(hn[0]);
  }
};

// One tile of classes against a range of h's micro-panels.
struct TileJob {
  const float* hpack;      // all of h, packed: micro-panel b at hpack + b * kRows * d
  int64_t n;               // rows of h (rows of the last micro-panel beyond n are padding)
  int64_t block0, block1;  // micro-panels [block0, block1) to scan
  const float* wpack;      // the tile's panels: panel t at wpack + t * kCols * d
  int64_t col0, cols;      // the tile's first class and class count
  int64_t d;
  float scale;
  const float* bias;  // the tile's bias (cols floats, padded to whole panels), or nullptr
};

void scan_tile_portable(const TileJob& job, RowTopk& top);
void scan_tile_avx2(const TileJob& job, RowTopk& top);    // only where select_isa() gives kAvx2 or above
void scan_tile_avx512(const TileJob& job, RowTopk& top);  // only where select_isa() gives kAvx512

// The panels of `cols` classes of a float32 W whose rows are contiguous (row stride ld), by 8 x 8
// AVX transposes: the same floats the generic packing writes (only where select_isa() gives kAvx2 or
// above).
void pack_w_panels_avx2(const float* w, int64_t ld, int64_t cols, int64_t d, float* dst);

}  // namespace topk_cpu
}  // namespace fedkernels
