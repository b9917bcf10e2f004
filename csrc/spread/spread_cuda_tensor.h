// Tensor-level helpers of the spreadout CUDA launchers (host compiler only; the device side is
// spread_cuda_utils.cuh).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <ATen/ops/empty.h>

#include "common/dispatch.h"
#include "spread/spread_cuda_kernels.h"

namespace fedkernels {
namespace spread_cuda {

// Float64 norm of every row of a contiguous [C, d] W, as a CUDA tensor [C].
inline at::Tensor row_norms(const at::Tensor& W) {
  const int64_t c = W.size(0), d = W.size(1);
  at::Tensor norms = at::empty({c}, W.options().dtype(at::kDouble));
  if (c == 0) return norms;
  FK_DISPATCH_FLOAT_HALF_BF16(W.scalar_type(), "spread_row_norms", [&] {
    launch_row_norms<scalar_t>(W.data_ptr<scalar_t>(), c, d, norms.data_ptr<double>(),
                               c10::cuda::getCurrentCUDAStream());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return norms;
}

}  // namespace spread_cuda
}  // namespace fedkernels
