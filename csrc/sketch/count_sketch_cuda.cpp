// CUDA launchers of count_sketch, of the row gather bucket_merge's backward shares
// (count_sketch_rows.h) and of count_sketch_query (ATen side): checks, allocation, the inverse
// table, dispatch; the kernels are in count_sketch_cuda.cu. Compiled by the host compiler, only in
// CUDA builds (and the emulator's).
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "common/dispatch.h"
#include "sketch/count_sketch_cuda_kernels.h"
#include "sketch/count_sketch_rows.h"
#include "sketch/sketch.h"
#include "sketch/sketch_inverse.h"
#include "sketch/sketch_prepare.h"

namespace fedkernels {

void count_sketch_rows_cuda(const at::Tensor& x2d, const at::Tensor& table, const std::optional<at::Tensor>& signs,
                            int64_t nb, at::Tensor& out, int64_t out_row_stride, int64_t out_table_stride,
                            double divisor) {
  const int64_t rows = x2d.size(0), p = x2d.size(1), r = table.size(1);
  if (p == 0) {  // every bucket is an empty sum
    out.zero_();
    return;
  }
  const auto inv = invert_table(table, signs, nb);
  FK_DISPATCH_FLOAT_HALF_BF16(x2d.scalar_type(), "count_sketch", [&] {
    using acc_t = sketch_acc_t<scalar_t>;
    launch_bucket_gather<scalar_t>(x2d.const_data_ptr<scalar_t>(), rows, p, r, nb,
                                   inv.offsets.const_data_ptr<int64_t>(), inv.members.const_data_ptr<int32_t>(),
                                   out_row_stride, out_table_stride, static_cast<acc_t>(divisor),
                                   out.data_ptr<scalar_t>(), c10::cuda::getCurrentCUDAStream());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

static at::Tensor count_sketch_cuda(const at::Tensor& x, const at::Tensor& table, const at::Tensor& signs,
                                    int64_t num_buckets) {
  const c10::cuda::CUDAGuard guard(x.device());
  CountSketchArgs a = prepare_count_sketch(x, table, signs, num_buckets);
  if (a.out.numel() == 0) return a.out;
  const int64_t r = a.table.size(1);
  count_sketch_rows_cuda(a.x2d, a.table, a.signs, num_buckets, a.out, r * num_buckets, num_buckets, 1.0);
  return a.out;
}

static at::Tensor count_sketch_query_cuda(const at::Tensor& sketch, const at::Tensor& table, const at::Tensor& signs,
                                          c10::string_view reduce_name) {
  const c10::cuda::CUDAGuard guard(sketch.device());
  QueryArgs a = prepare_query(sketch, table, signs, reduce_name);
  if (a.out.numel() == 0) return a.out;
  FK_DISPATCH_FLOAT_HALF_BF16(a.m2d.scalar_type(), "count_sketch_query", [&] {
    launch_count_sketch_query<scalar_t>(a.m2d.const_data_ptr<scalar_t>(), a.table.const_data_ptr<int32_t>(),
                                        a.signs.const_data_ptr<int8_t>(), a.rows, a.p, a.r, a.nb, a.reduce,
                                        a.out.data_ptr<scalar_t>(), c10::cuda::getCurrentCUDAStream());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return a.out;
}

TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) {
  m.impl("count_sketch", &count_sketch_cuda);
  m.impl("count_sketch_query", &count_sketch_query_cuda);
}

}  // namespace fedkernels
