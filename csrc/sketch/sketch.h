// Per-item math of the sketching family (FedMLH), shared by the CPU and CUDA launchers.
// Each function takes (start, stride) so a CPU caller runs it with (0, 1) and a CUDA block with
// (threadIdx.x, blockDim.x); the arithmetic is the same either way.
#pragma once

#include <cstdint>

#include "common/macros.h"

namespace fedkernels {

// label_hash, step 1 for sample n: zero its R rows of B buckets in out [R, N, B].
FK_HOST_DEVICE FK_INLINE void label_hash_zero(uint8_t* out, int64_t n, int64_t num_samples, int64_t num_tables,
                                              int64_t num_buckets, int64_t start, int64_t stride) {
  for (int64_t k = start; k < num_tables * num_buckets; k += stride) {
    const int64_t j = k / num_buckets, b = k % num_buckets;
    out[(j * num_samples + n) * num_buckets + b] = 0;
  }
}

// label_hash, step 2 for sample n: out[j, n, table[l, j]] = 1 for each of its labels l.
FK_HOST_DEVICE FK_INLINE void label_hash_set(uint8_t* out, const int64_t* labels, int64_t num_labels,
                                             const int32_t* table, int64_t n, int64_t num_samples,
                                             int64_t num_tables, int64_t num_buckets, int64_t start,
                                             int64_t stride) {
  for (int64_t k = start; k < num_labels * num_tables; k += stride) {
    const int64_t i = k / num_tables, j = k % num_tables;
    const int32_t bucket = table[labels[i] * num_tables + j];
    out[(j * num_samples + n) * num_buckets + bucket] = 1;
  }
}

}  // namespace fedkernels
