// CUDA kernels of count_sketch (one thread per output bucket, gathering its classes from the
// inverse table in ascending order: no atomics; the row gather bucket_merge's backward shares) and
// of count_sketch_query (one thread per (row, class)). No torch header: count_sketch_cuda.cpp
// checks, allocates, builds the inverse table and calls the launch_* below.
#include "sketch/count_sketch_cuda_kernels.h"
#include "sketch/sketch.h"
#include "sketch/sketch_cuda_launch.cuh"

namespace fedkernels {

// out[row, j, b] at out + row * out_row_stride + j * out_table_stride + b.
template <typename scalar_t>
__global__ void bucket_gather_kernel(const scalar_t* x, int64_t rows, int64_t p, int64_t r, int64_t nb,
                                     const int64_t* offsets, const int32_t* members, int64_t out_row_stride,
                                     int64_t out_table_stride, sketch_acc_t<scalar_t> divisor, scalar_t* out) {
  using acc_t = sketch_acc_t<scalar_t>;
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
  using acc_t = sketch_acc_t<scalar_t>;
  FK_GRID_STRIDE(item, rows * p) {
    const int64_t row = item / p, l = item % p;
    out[item] = static_cast<scalar_t>(
        merge_score<scalar_t, acc_t>(sketch + row * r * nb, nb, table + l * r, signs + l * r, r, reduce));
  }
}

template <typename scalar_t>
void launch_bucket_gather(const scalar_t* x, int64_t rows, int64_t p, int64_t r, int64_t nb, const int64_t* offsets,
                          const int32_t* members, int64_t out_row_stride, int64_t out_table_stride,
                          sketch_acc_t<scalar_t> divisor, scalar_t* out, cudaStream_t stream) {
  bucket_gather_kernel<scalar_t><<<sketch_blocks(rows * r * nb), kSketchThreads, 0, stream>>>(
      x, rows, p, r, nb, offsets, members, out_row_stride, out_table_stride, divisor, out);
}

template <typename scalar_t>
void launch_count_sketch_query(const scalar_t* sketch, const int32_t* table, const int8_t* signs, int64_t rows,
                               int64_t p, int64_t r, int64_t nb, int64_t reduce, scalar_t* out, cudaStream_t stream) {
  count_sketch_query_kernel<scalar_t>
      <<<sketch_blocks(rows * p), kSketchThreads, 0, stream>>>(sketch, table, signs, rows, p, r, nb, reduce, out);
}

// The dtypes FK_DISPATCH_FLOAT_HALF_BF16 dispatches.
#define FK_COUNT_SKETCH_DTYPE(T)                                                                                      \
  template void launch_bucket_gather<T>(const T*, int64_t, int64_t, int64_t, int64_t, const int64_t*, const int32_t*, \
                                        int64_t, int64_t, sketch_acc_t<T>, T*, cudaStream_t);                         \
  template void launch_count_sketch_query<T>(const T*, const int32_t*, const int8_t*, int64_t, int64_t, int64_t,      \
                                             int64_t, int64_t, T*, cudaStream_t);
FK_COUNT_SKETCH_DTYPE(float)
FK_COUNT_SKETCH_DTYPE(double)
FK_COUNT_SKETCH_DTYPE(c10::Half)
FK_COUNT_SKETCH_DTYPE(c10::BFloat16)
#undef FK_COUNT_SKETCH_DTYPE

}  // namespace fedkernels
