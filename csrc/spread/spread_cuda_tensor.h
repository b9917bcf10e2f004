// Tensor-level helpers of the spreadout CUDA launchers (host compiler only; the device side is
// spread_cuda_utils.cuh).
#pragma once

#include "common/stable/alloc.h"
#include "common/stable/cuda.h"
#include "common/stable/dispatch.h"
#include "common/stable/tensor.h"
#include "spread/spread_cuda_kernels.h"

namespace fedkernels {
namespace spread_cuda {

// Float64 norm of every row of a contiguous [C, d] W, as a CUDA tensor [C].
inline Tensor row_norms(const Tensor& W) {
  const int64_t c = W.size(0), d = W.size(1);
  Tensor norms = empty_on(W, {c}, ScalarType::Double);
  if (c == 0) return norms;
  const cudaStream_t stream = current_cuda_stream(W);
  FK_DISPATCH_FLOAT_HALF_BF16(W.scalar_type(), "spread_row_norms", [&] {
    launch_row_norms<scalar_t>(W.const_data_ptr<scalar_t>(), c, d, norms.mutable_data_ptr<double>(), stream);
  });
  FK_CUDA_KERNEL_LAUNCH_CHECK();
  return norms;
}

}  // namespace spread_cuda
}  // namespace fedkernels
