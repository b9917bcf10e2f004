// Small CUDA helpers shared by the spreadout launchers.
#pragma once

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

#include "common/dispatch.h"
#include "spread/spread.h"

namespace fedkernels {
namespace spread_cuda {

constexpr int kThreads = 128;

inline unsigned blocks_for(int64_t n, int threads = kThreads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

template <typename T>
__global__ void row_norms_kernel(const T* w, int64_t c, int64_t d, double* norms) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < c) norms[i] = sqrt(spread::row_sq_norm(w + i * d, d));
}

// Float64 norm of every row of a contiguous [C, d] W, as a CUDA tensor [C].
inline at::Tensor row_norms(const at::Tensor& W) {
  const int64_t c = W.size(0), d = W.size(1);
  at::Tensor norms = at::empty({c}, W.options().dtype(at::kDouble));
  if (c == 0) return norms;
  FK_DISPATCH_FLOAT_HALF_BF16(W.scalar_type(), "spread_row_norms", [&] {
    row_norms_kernel<scalar_t><<<blocks_for(c), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
        W.data_ptr<scalar_t>(), c, d, norms.data_ptr<double>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return norms;
}

}  // namespace spread_cuda
}  // namespace fedkernels
