// CPU launcher of linear_topk: the top k of scale * h @ W.T + bias per row, without the [N, p] scores.
//
// h is packed once (float32 micro-panels of 6 rows); W is read a tile of classes at a time (the tile
// packed to float32 panels, about 256 KiB, so it stays in L2 while every micro-panel of h passes over
// it); the register-tile kernels (topk_cpu_tiles.h) keep a running top k per row in a min-heap of
// composites (topk.h) behind a float threshold, so a score that cannot enter costs a compare.
// Work is split into at most one chunk per thread: by tiles of classes (each chunk all rows, its own
// heaps) when there are enough tiles, else by rows. A final pass merges each row's heaps; since the
// top k of the composite order is one set whatever the split, and every score depends only on its
// row and class, the output is bit-identical for any thread count (and on every dispatch level).
// Extra memory: packed h (N x d floats), per chunk one packed tile and its bias, and the heaps
// (chunks x N x k composites).
#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <tuple>
#include <type_traits>
#include <vector>

#include "common/stable/alloc.h"
#include "common/stable/check.h"
#include "common/stable/tensor.h"
#include "common/stable/topk_extra.h"
#include "topk/topk.h"
#include "topk/topk_checks.h"
#include "topk/topk_cpu_tiles.h"

namespace fedkernels {

namespace {

using topk_cpu::kCols;
using topk_cpu::kRows;

constexpr int64_t kTileFloats = int64_t{1} << 16;  // packed W per tile: 256 KiB, L2-resident
constexpr int64_t kMaxTileCols = 4096;
// Multiply-adds per chunk below which a call uses fewer chunks (a parallel region costs a time
// slice whenever the other core is busy; a few milliseconds of work is not worth that).
constexpr int64_t kMinChunkWork = int64_t{1} << 24;

int64_t tile_cols(int64_t d) {
  const int64_t t = kTileFloats / std::max<int64_t>(d, 1) / kCols * kCols;
  return std::clamp<int64_t>(t, kCols, kMaxTileCols);
}

// Micro-panel b of h (rows b * kRows ..): [d][kRows] float32, rows past n zero.
template <typename T>
void pack_h_block(const T* h, int64_t s0, int64_t s1, int64_t n, int64_t d, int64_t b, float* dst) {
  for (int64_t r = 0; r < kRows; ++r) {
    const int64_t row = b * kRows + r;
    if (row < n) {
      const T* src = h + row * s0;
      for (int64_t q = 0; q < d; ++q) dst[q * kRows + r] = static_cast<float>(src[q * s1]);
    } else {
      for (int64_t q = 0; q < d; ++q) dst[q * kRows + r] = 0.0f;
    }
  }
}

// Classes [j0, j0 + cols) of W as panels of kCols: [d][kCols] float32 each, classes past cols zero.
template <typename T>
void pack_w_tile(const T* w, int64_t s0, int64_t s1, int64_t j0, int64_t cols, int64_t d, float* dst) {
  const int64_t panels = (cols + kCols - 1) / kCols;
  for (int64_t t = 0; t < panels; ++t) {
    float* pd = dst + t * kCols * d;
    for (int64_t c = 0; c < kCols; ++c) {
      const int64_t j = t * kCols + c;
      if (j < cols) {
        const T* src = w + (j0 + j) * s0;
        for (int64_t q = 0; q < d; ++q) pd[q * kCols + c] = static_cast<float>(src[q * s1]);
      } else {
        for (int64_t q = 0; q < d; ++q) pd[q * kCols + c] = 0.0f;
      }
    }
  }
}

struct Plan {
  int64_t n, d, p, k, tile, ntiles, nblocks, chunks;
  bool by_tiles;  // chunks split the tiles (each chunk: every row); else they split the row blocks
};

Plan make_plan(int64_t n, int64_t d, int64_t p, int64_t k) {
  Plan pl{n, d, p, k, tile_cols(d), 0, (n + kRows - 1) / kRows, 1, true};
  pl.ntiles = (p + pl.tile - 1) / pl.tile;
  const int64_t work = n * p * std::max<int64_t>(d, 1);
  const int64_t threads = torch::stable::get_num_threads();
  int64_t chunks = std::clamp<int64_t>(work / kMinChunkWork, 1, threads);
  pl.by_tiles = pl.ntiles >= chunks || pl.ntiles >= pl.nblocks;
  pl.chunks = std::min(chunks, pl.by_tiles ? pl.ntiles : pl.nblocks);
  return pl;
}

template <typename T>
struct Inputs {
  const T* h;
  int64_t hs0, hs1;
  const T* w;
  int64_t ws0, ws1;
  std::function<void(int64_t j0, int64_t cols, float* dst)> bias_tile;  // empty: no bias
  float scale;
};

// One chunk: tiles [t0, t1) against micro-panels [b0, b1), into `top` (rows indexed from 0 = row 0).
template <typename T>
void run_chunk(const Plan& pl, const Inputs<T>& in, const float* hpack, topk_cpu::Isa isa, int64_t t0, int64_t t1,
               int64_t b0, int64_t b1, topk_cpu::RowTopk& top) {
  const int64_t panels = pl.tile / kCols;
  std::vector<float> wpack(static_cast<size_t>(std::max<int64_t>(panels * kCols * pl.d, 1)));
  std::vector<float> bias(static_cast<size_t>(panels * kCols));
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t j0 = t * pl.tile, cols = std::min(pl.tile, pl.p - j0);
    if constexpr (std::is_same_v<T, float>) {
      if (isa != topk_cpu::Isa::kPortable && in.ws1 == 1) {  // rows contiguous: vector transposes
        topk_cpu::pack_w_panels_avx2(in.w + j0 * in.ws0, in.ws0, cols, pl.d, wpack.data());
      } else {
        pack_w_tile(in.w, in.ws0, in.ws1, j0, cols, pl.d, wpack.data());
      }
    } else {
      pack_w_tile(in.w, in.ws0, in.ws1, j0, cols, pl.d, wpack.data());
    }
    const float* bias_ptr = nullptr;
    if (in.bias_tile) {
      std::fill(bias.begin(), bias.end(), 0.0f);
      in.bias_tile(j0, cols, bias.data());
      bias_ptr = bias.data();
    }
    const topk_cpu::TileJob job{hpack, pl.n, b0, b1, wpack.data(), j0, cols, pl.d, in.scale, bias_ptr};
    if (isa == topk_cpu::Isa::kAvx512) {
      topk_cpu::scan_tile_avx512(job, top);
    } else if (isa == topk_cpu::Isa::kAvx2) {
      topk_cpu::scan_tile_avx2(job, top);
    } else {
      topk_cpu::scan_tile_portable(job, top);
    }
  }
}

template <typename T>
void linear_topk_impl(const Plan& pl, const Inputs<T>& in, float* out_val, int64_t* out_idx) {
  const topk_cpu::Isa isa = topk_cpu::select_isa();
  const int64_t n = pl.n, d = pl.d, k = pl.k;
  std::vector<float> hpack(static_cast<size_t>(std::max<int64_t>(pl.nblocks * kRows * d, 1)));
  const int64_t pack_grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(kRows * d, 1));
  torch::stable::parallel_for(0, pl.nblocks, pack_grain, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) pack_h_block(in.h, in.hs0, in.hs1, n, d, b, hpack.data() + b * kRows * d);
  });

  const int64_t sets = pl.by_tiles ? pl.chunks : 1;  // heap sets: one per chunk when chunks split the tiles
  std::vector<uint64_t> heap(static_cast<size_t>(sets * n * k));
  std::vector<int64_t> size(static_cast<size_t>(sets * n), 0);
  std::vector<float> thr(static_cast<size_t>(sets * n), std::numeric_limits<float>::quiet_NaN());
  auto top_of = [&](int64_t set) {
    return topk_cpu::RowTopk{heap.data() + set * n * k, size.data() + set * n, thr.data() + set * n, k};
  };
  torch::stable::parallel_for(0, pl.chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      topk_cpu::RowTopk top = top_of(pl.by_tiles ? c : 0);
      if (pl.by_tiles) {
        run_chunk(pl, in, hpack.data(), isa, c * pl.ntiles / pl.chunks, (c + 1) * pl.ntiles / pl.chunks, 0, pl.nblocks,
                  top);
      } else {
        run_chunk(pl, in, hpack.data(), isa, 0, pl.ntiles, c * pl.nblocks / pl.chunks, (c + 1) * pl.nblocks / pl.chunks,
                  top);
      }
    }
  });

  // Each row: its kept composites from every set, the k largest in descending order.
  torch::stable::parallel_for(0, n, 256, [&](int64_t r0, int64_t r1) {
    std::vector<uint64_t> all;
    for (int64_t r = r0; r < r1; ++r) {
      all.clear();
      for (int64_t s = 0; s < sets; ++s) {
        const uint64_t* hr = heap.data() + (s * n + r) * k;
        all.insert(all.end(), hr, hr + size[s * n + r]);
      }
      FK_CHECK(static_cast<int64_t>(all.size()) >= k, "linear_topk: fewer candidates than k");
      std::partial_sort(all.begin(), all.begin() + k, all.end(), std::greater<uint64_t>());
      for (int64_t i = 0; i < k; ++i) {
        out_val[r * k + i] = topk::composite_score(all[i]);
        out_idx[r * k + i] = topk::composite_id(all[i]);
      }
    }
  });
}

template <typename B>
std::function<void(int64_t, int64_t, float*)> bias_reader(const Tensor& bias) {
  const B* b = bias.const_data_ptr<B>();
  const int64_t s = bias.stride(0);
  return [b, s](int64_t j0, int64_t cols, float* dst) {
    for (int64_t c = 0; c < cols; ++c) dst[c] = static_cast<float>(b[(j0 + c) * s]);
  };
}

template <typename T>
void dispatch_bias(const Plan& pl, const Tensor& h, const Tensor& W, const std::optional<Tensor>& bias, float scale,
                   float* out_val, int64_t* out_idx) {
  const T* hp = h.const_data_ptr<T>();
  const T* wp = W.const_data_ptr<T>();
  Inputs<T> in{hp, h.stride(0), h.stride(1), wp, W.stride(0), W.stride(1), {}, scale};
  if (bias.has_value()) {
    in.bias_tile = bias->scalar_type() == ScalarType::Float ? bias_reader<float>(*bias) : bias_reader<T>(*bias);
  }
  linear_topk_impl<T>(pl, in, out_val, out_idx);
}

std::tuple<Tensor, Tensor> linear_topk_cpu(const Tensor& h, const Tensor& W, const std::optional<Tensor>& bias,
                                           int64_t k, double scale) {
  check_linear_topk_args(h, W, bias, k, scale);
  const int64_t n = h.size(0), d = h.size(1), p = W.size(0);
  Tensor values = empty_on(h, {n, k}, ScalarType::Float);
  Tensor indices = empty_on(h, {n, k}, ScalarType::Long);
  if (n == 0 || k == 0) return {values, indices};
  const Plan pl = make_plan(n, d, p, k);
  if (h.scalar_type() == ScalarType::Float) {
    dispatch_bias<float>(pl, h, W, bias, static_cast<float>(scale), values.mutable_data_ptr<float>(),
                         indices.mutable_data_ptr<int64_t>());
  } else {
    dispatch_bias<torch::headeronly::BFloat16>(pl, h, W, bias, static_cast<float>(scale),
                                               values.mutable_data_ptr<float>(), indices.mutable_data_ptr<int64_t>());
  }
  return {values, indices};
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(fedkernels, CPU, m) { m.impl("linear_topk", TORCH_BOX(&linear_topk_cpu)); }

}  // namespace fedkernels
