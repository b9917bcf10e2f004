// Argument checks of the sketching ops, shared by the CPU and CUDA launchers.
#pragma once

#include "common/checks.h"

namespace fedkernels {

// table: int32 [p, R] with every bucket in [0, B).
inline void check_hash_table(const at::Tensor& table, int64_t num_buckets) {
  check_dtype(table, at::kInt, "table");
  check_dim(table, 2, "table");
  TORCH_CHECK_VALUE(table.size(1) >= 1, "table must have at least one column (R >= 1), got shape ", table.sizes());
  TORCH_CHECK_VALUE(num_buckets >= 1, "num_buckets must be >= 1, got ", num_buckets);
  check_index_range(table, 0, num_buckets, "table");
}

inline void check_label_hash_args(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& table,
                                  int64_t num_buckets) {
  check_csr(indptr, indices, "indptr", "indices");
  check_hash_table(table, num_buckets);
  check_same_device(indices, "indices", table, "table");
  check_index_range(indices, 0, table.size(0), "indices (class ids)");
}

}  // namespace fedkernels
