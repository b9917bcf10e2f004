// CUDA launchers of count_sketch (one thread per output bucket, gathering its classes from the
// inverse table in ascending order: no atomics; the row gather bucket_merge's backward shares,
// count_sketch_rows.h) and of count_sketch_query (one thread per (row, class)).
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "common/dispatch.h"
#include "sketch/count_sketch_rows.h"
#include "sketch/sketch.h"
#include "sketch/sketch_prepare.h"
#include "sketch/sketch_cuda_launch.cuh"
#include "sketch/sketch_inverse.h"

namespace fedkernels {

// out[row, j, b] at out + row * out_row_stride + j * out_table_stride + b.
template <typename scalar_t>
__global__ void bucket_gather_kernel(const scalar_t* x, int64_t rows, int64_t p, int64_t r, int64_t nb,
                                     const int64_t* offsets, const int32_t* members, int64_t out_row_stride,
                                     int64_t out_table_stride, at::opmath_type<scalar_t> divisor, scalar_t* out) {
  using acc_t = at::opmath_type<scalar_t>;
  FK_GRID_STRIDE(item, rows * r * nb) {
    const int64_t row = item / (r * nb), jb = item % (r * nb), j = jb / nb, b = jb % nb;
    const acc_t s = count_sketch_gather<scalar_t, acc_t>(x + row * p, members, offsets[jb], offsets[jb + 1]);
    out[row * out_row_stride + j * out_table_stride + b] = static_cast<scalar_t>(s / divisor);
  }
}

template <typename scalar_t>
__global__ void count_sketch_query_kernel(const scalar_t* sketch, const int32_t* table, const int8_t* signs,
                                          int64_t rows, int64_t p, int64_t r, int64_t nb, int64_t reduce,
                                          scalar_t* out) {
  using acc_t = at::opmath_type<scalar_t>;
  FK_GRID_STRIDE(item, rows * p) {
    const int64_t row = item / p, l = item % p;
    out[item] = static_cast<scalar_t>(
        merge_score<scalar_t, acc_t>(sketch + row * r * nb, nb, table + l * r, signs + l * r, r, reduce));
  }
}

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
    using acc_t = at::opmath_type<scalar_t>;
    bucket_gather_kernel<scalar_t>
        <<<sketch_blocks(rows * r * nb), kSketchThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
            x2d.const_data_ptr<scalar_t>(), rows, p, r, nb, inv.offsets.const_data_ptr<int64_t>(),
            inv.members.const_data_ptr<int32_t>(), out_row_stride, out_table_stride, static_cast<acc_t>(divisor),
            out.data_ptr<scalar_t>());
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
    count_sketch_query_kernel<scalar_t>
        <<<sketch_blocks(a.rows * a.p), kSketchThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
            a.m2d.const_data_ptr<scalar_t>(), a.table.const_data_ptr<int32_t>(), a.signs.const_data_ptr<int8_t>(),
            a.rows, a.p, a.r, a.nb, a.reduce, a.out.data_ptr<scalar_t>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return a.out;
}

TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) {
  m.impl("count_sketch", &count_sketch_cuda);
  m.impl("count_sketch_query", &count_sketch_query_cuda);
}

}  // namespace fedkernels
