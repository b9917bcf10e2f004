// Host-side pieces of linear_cross_entropy shared by the CPU and CUDA launchers: how it is blocked
// (the same chunks, so the same summation order per chunk), and the inputs and outputs in the
// accumulation dtype.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <tuple>

#include "common/stable/sampled_extra.h"
#include "common/stable/tensor.h"
#include "sampled/sampled_checks.h"

namespace fedkernels {

constexpr int64_t kLceDefaultChunk = 512;  // classes per chunk: [tile, chunk] float32 stays in L2
constexpr int64_t kLceTileRows = 128;      // CPU: samples per N-tile
constexpr int64_t kLceMaxGroups = 8;       // CPU backward: class groups, each with a partial grad_h

struct LcePlan {
  int64_t chunk;       // classes per chunk
  int64_t num_chunks;  // ceil(s / chunk)
  int64_t num_tiles;   // ceil(N / kLceTileRows)
  int64_t num_groups;  // min(num_chunks, kLceMaxGroups): fixed by the shapes, never by the thread count

  LcePlan(int64_t n, int64_t s, int64_t chunk_size) {
    chunk = std::max<int64_t>(1, chunk_size > 0 ? chunk_size : kLceDefaultChunk);
    num_chunks = (s + chunk - 1) / chunk;
    num_tiles = (n + kLceTileRows - 1) / kLceTileRows;
    num_groups = std::max<int64_t>(1, std::min(num_chunks, kLceMaxGroups));
  }
  int64_t chunk_begin(int64_t c) const { return c * chunk; }
  int64_t chunk_cols(int64_t c, int64_t s) const { return std::min(chunk, s - c * chunk); }
  // Chunks [group_begin(g), group_begin(g + 1)) form class group g.
  int64_t group_begin(int64_t g) const { return g * num_chunks / num_groups; }
};

// Rows per tile of the CPU fused forward+backward: its logits block [rows, chunks * chunk] stays
// within kLceFusedBytes (so peak memory stays O(chunk budget), not O(N * s)), between 16 and
// kLceTileRows rows (fewer rows would starve the [chunk, rows] x [rows, d] gradient GEMMs).
constexpr int64_t kLceFusedBytes = int64_t(32) << 20;
inline int64_t lce_fused_tile_rows(const LcePlan& plan, int64_t s, int64_t elem_bytes) {
  const int64_t row_bytes = std::max<int64_t>(1, plan.num_chunks * plan.chunk * elem_bytes);
  return std::clamp<int64_t>(kLceFusedBytes / row_bytes, 16, kLceTileRows);
}

// h, W, bias contiguous, in the accumulation dtype; bias undefined when absent. No detach: the
// dispatcher runs these kernels below the Autograd key, so their tile ops record no graph.
struct FK_STABLE_HIDDEN LceInputs {
  Tensor h, W, bias;
  int64_t n, d, s;

  LceInputs(const Tensor& h_in, const Tensor& W_in, const std::optional<Tensor>& bias_in) {
    const ScalarType acc = acc_dtype_of(h_in.scalar_type());
    h = contiguous_or_self(to_dtype(h_in, acc));
    W = contiguous_or_self(to_dtype(W_in, acc));
    if (bias_in.has_value()) bias = contiguous_or_self(to_dtype(*bias_in, acc));
    n = h.size(0);
    d = h.size(1);
    s = W.size(0);
  }
};

// The gradients back in the dtypes of the inputs (grad_bias stays empty without a bias).
inline std::tuple<Tensor, Tensor, Tensor> lce_grads_in_input_dtypes(const Tensor& grad_h, const Tensor& grad_W,
                                                                    const Tensor& grad_bias, const Tensor& h,
                                                                    const Tensor& W,
                                                                    const std::optional<Tensor>& bias) {
  return {to_dtype(grad_h, h.scalar_type()), to_dtype(grad_W, W.scalar_type()),
          bias.has_value() ? to_dtype(grad_bias, bias->scalar_type()) : grad_bias};
}

}  // namespace fedkernels
