// Argument checks of hash_buckets, shared by its CPU and CUDA launchers.
#pragma once

#include "common/stable/checks.h"
#include "common/stable/alloc.h"

namespace fedkernels {

inline void check_hash_args(const Tensor& ids, const Tensor& params, int64_t num_buckets) {
  check_dtype(ids, ScalarType::Long, "ids");
  check_dtype(params, ScalarType::Long, "params");
  FK_CHECK_VALUE(params.dim() == 2 && params.size(1) == 4, "params must have shape [R, 4], got ",
                 shape_text(params.sizes()));
  FK_CHECK_VALUE(params.size(0) >= 1, "params must describe at least one table (R >= 1)");
  FK_CHECK_VALUE(num_buckets >= 1, "num_buckets must be >= 1, got ", num_buckets);
  FK_CHECK_VALUE(ids.dim() == 1, "ids must be 1-D, got shape ", shape_text(ids.sizes()));
  check_same_device(ids, "ids", params, "params");
  check_nonnegative(ids, "ids");
}

}  // namespace fedkernels
