// Argument checks of hash_buckets, shared by its CPU and CUDA launchers.
#pragma once

#include "common/checks.h"

namespace fedkernels {

inline void check_hash_args(const at::Tensor& ids, const at::Tensor& params, int64_t num_buckets) {
  check_dtype(ids, at::kLong, "ids");
  check_dtype(params, at::kLong, "params");
  TORCH_CHECK_VALUE(params.dim() == 2 && params.size(1) == 4, "params must have shape [R, 4], got ", params.sizes());
  TORCH_CHECK_VALUE(params.size(0) >= 1, "params must describe at least one table (R >= 1)");
  TORCH_CHECK_VALUE(num_buckets >= 1, "num_buckets must be >= 1, got ", num_buckets);
  TORCH_CHECK_VALUE(ids.dim() == 1, "ids must be 1-D, got shape ", ids.sizes());
  check_same_device(ids, "ids", params, "params");
  check_nonnegative(ids, "ids");
}

}  // namespace fedkernels
