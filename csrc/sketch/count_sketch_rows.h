// The count-sketch scatter of rows, shared by count_sketch and bucket_merge's backward (a count
// sketch with every sign +1 divided by R), so each op's launchers live in files named for the op.
// out[row, j, b] is at out + row * out_row_stride + j * out_table_stride + b; value = sum / divisor.
#pragma once

#include <cstdint>
#include <optional>

#include "common/stable/tensor.h"

namespace fedkernels {

// count_sketch_cpu.cpp: signs may be nullptr (all +1).
void count_sketch_rows_cpu(const Tensor& x2d, const Tensor& table, const int8_t* signs, int64_t num_buckets,
                           Tensor& out, int64_t out_row_stride, int64_t out_table_stride, double divisor);

// count_sketch_cuda.cpp: no signs means all +1.
void count_sketch_rows_cuda(const Tensor& x2d, const Tensor& table, const std::optional<Tensor>& signs, int64_t nb,
                            Tensor& out, int64_t out_row_stride, int64_t out_table_stride, double divisor);

}  // namespace fedkernels
