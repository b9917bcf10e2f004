// Small CUDA helpers shared by the spreadout kernels (no torch header; the Tensor-level row_norms is
// in spread_cuda_tensor.h).
#pragma once

#include <cstdint>

#include "spread/spread.h"

namespace fedkernels {
namespace spread_cuda {

constexpr int kThreads = 128;
constexpr unsigned kFullMask = 0xffffffffu;
// Kernels with a warp per row run blocks of kWarpsPerBlock warps (256 threads).
constexpr int kWarpsPerBlock = 8;
constexpr int kWarpThreads = kWarpsPerBlock * 32;

inline unsigned blocks_for(int64_t n, int threads = kThreads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

// Blocks for one warp per item.
inline unsigned warp_blocks_for(int64_t n) { return static_cast<unsigned>((n + kWarpsPerBlock - 1) / kWarpsPerBlock); }

// This thread's warp-per-item index (blocks of kWarpsPerBlock warps) and lane.
__device__ __forceinline__ int64_t warp_item() {
  return static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
}
__device__ __forceinline__ int lane_id() { return static_cast<int>(threadIdx.x % 32); }

// Sum over the 32 lanes by the xor butterfly: every lane gets the same bits, those of
// spread::lane_tree_sum over the lanes' values (so the CPU twin can reproduce it).
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

// Float64 row norms, a block per 128 rows. The block stages [128 rows, 32 dims] slabs in shared
// memory (loads run along the rows' contiguous dims, so a warp reads 128 contiguous bytes), then
// thread r sums its row's dims in order: bit-identical to spread::row_sq_norm.
constexpr int kNormRows = 128;
constexpr int kNormDims = 32;

template <typename T>
__global__ void row_norms_kernel(const T* w, int64_t c, int64_t d, double* norms) {
  __shared__ double slab[kNormRows][kNormDims + 1];
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kNormRows;
  const int rows = static_cast<int>(c - row0 < kNormRows ? c - row0 : kNormRows);
  double s = 0.0;
  for (int64_t d0 = 0; d0 < d; d0 += kNormDims) {
    const int dn = static_cast<int>(d - d0 < kNormDims ? d - d0 : kNormDims);
    for (int e = threadIdx.x; e < rows * dn; e += blockDim.x) {
      const int r = e / dn, dd = e % dn;
      slab[r][dd] = spread::as_double(w[(row0 + r) * d + d0 + dd]);
    }
    __syncthreads();
    if (static_cast<int>(threadIdx.x) < rows) {
      for (int dd = 0; dd < dn; ++dd) {
        const double x = slab[threadIdx.x][dd];
        s += x * x;
      }
    }
    __syncthreads();
  }
  if (static_cast<int>(threadIdx.x) < rows) norms[row0 + threadIdx.x] = sqrt(s);
}

}  // namespace spread_cuda
}  // namespace fedkernels
