// CUDA launchers of count_sketch, of the row gather bucket_merge's backward shares
// (count_sketch_rows.h) and of count_sketch_query (the torch side): checks, allocation, the inverse
// table, dispatch; the kernels are in count_sketch_cuda.cu. Compiled by the host compiler, only in
// CUDA builds (and the emulator's).

#include "common/stable/cuda.h"
#include "common/stable/dispatch.h"
#include "sketch/count_sketch_cuda_kernels.h"
#include "sketch/count_sketch_rows.h"
#include "sketch/sketch.h"
#include "sketch/sketch_inverse.h"
#include "sketch/sketch_prepare.h"

namespace fedkernels {

void count_sketch_rows_cuda(const Tensor& x2d, const Tensor& table, const std::optional<Tensor>& signs, int64_t nb,
                            Tensor& out, int64_t out_row_stride, int64_t out_table_stride, double divisor) {
  const int64_t rows = x2d.size(0), p = x2d.size(1), r = table.size(1);
  if (p == 0) {  // every bucket is an empty sum
    torch::stable::zero_(out);
    return;
  }
  const TableInverse inv = invert_table(table, signs, nb);
  const cudaStream_t stream = current_cuda_stream(x2d);
  FK_DISPATCH_FLOAT_HALF_BF16(x2d.scalar_type(), "count_sketch", [&] {
    using acc_t = sketch_acc_t<scalar_t>;
    launch_bucket_gather<scalar_t>(x2d.const_data_ptr<scalar_t>(), rows, p, r, nb,
                                   inv.offsets.const_data_ptr<int64_t>(), inv.members.const_data_ptr<int32_t>(),
                                   out_row_stride, out_table_stride, static_cast<acc_t>(divisor),
                                   out.mutable_data_ptr<scalar_t>(), stream);
  });
  FK_CUDA_KERNEL_LAUNCH_CHECK();
}

static Tensor count_sketch_cuda(const Tensor& x, const Tensor& table, const Tensor& signs, int64_t num_buckets) {
  const CudaDeviceGuard guard(x);
  CountSketchArgs a = prepare_count_sketch(x, table, signs, num_buckets);
  if (a.out.numel() == 0) return a.out;
  const int64_t r = a.table.size(1);
  count_sketch_rows_cuda(a.x2d, a.table, a.signs, num_buckets, a.out, r * num_buckets, num_buckets, 1.0);
  return a.out;
}

static Tensor count_sketch_query_cuda(const Tensor& sketch, const Tensor& table, const Tensor& signs,
                                      std::string reduce_name) {
  const CudaDeviceGuard guard(sketch);
  QueryArgs a = prepare_query(sketch, table, signs, reduce_name);
  if (a.out.numel() == 0) return a.out;
  const cudaStream_t stream = current_cuda_stream(a.m2d);
  FK_DISPATCH_FLOAT_HALF_BF16(a.m2d.scalar_type(), "count_sketch_query", [&] {
    launch_count_sketch_query<scalar_t>(a.m2d.const_data_ptr<scalar_t>(), a.table.const_data_ptr<int32_t>(),
                                        a.signs.const_data_ptr<int8_t>(), a.rows, a.p, a.r, a.nb, a.reduce,
                                        a.out.mutable_data_ptr<scalar_t>(), stream);
  });
  FK_CUDA_KERNEL_LAUNCH_CHECK();
  return a.out;
}

STABLE_TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) {
  m.impl("count_sketch", TORCH_BOX(&count_sketch_cuda));
  m.impl("count_sketch_query", TORCH_BOX(&count_sketch_query_cuda));
}

}  // namespace fedkernels
