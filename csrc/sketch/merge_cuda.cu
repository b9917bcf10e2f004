// CUDA kernel of bucket_merge (one thread per (row, class)), over the same sketch.h math as the CPU.
// No torch header: merge_cuda.cpp checks, allocates and calls launch_bucket_merge; bucket_merge's
// backward (count_sketch's row gather) is launched there too. bucket_merge_topk: merge_topk_cuda.cu.
#include "sketch/merge_cuda_kernels.h"
#include "sketch/sketch.h"
#include "sketch/sketch_cuda_launch.cuh"

namespace fedkernels {

template <typename scalar_t>
__global__ void bucket_merge_kernel(const scalar_t* logp, const int32_t* table, int64_t n_rows, int64_t nb, int64_t p,
                                    int64_t r, int64_t reduce, scalar_t* out) {
  using acc_t = sketch_acc_t<scalar_t>;
  FK_GRID_STRIDE(item, n_rows * p) {
    const int64_t n = item / p, l = item % p;
    out[item] = static_cast<scalar_t>(
        merge_score<scalar_t, acc_t>(logp + n * nb, n_rows * nb, table + l * r, nullptr, r, reduce));
  }
}

template <typename scalar_t>
void launch_bucket_merge(const scalar_t* logp, const int32_t* table, int64_t n_rows, int64_t nb, int64_t p, int64_t r,
                         int64_t reduce, scalar_t* out, cudaStream_t stream) {
  bucket_merge_kernel<scalar_t>
      <<<sketch_blocks(n_rows * p), kSketchThreads, 0, stream>>>(logp, table, n_rows, nb, p, r, reduce, out);
}

// The dtypes FK_DISPATCH_FLOAT_HALF_BF16 dispatches.
#define FK_MERGE_DTYPE(T)                                                                                         \
  template void launch_bucket_merge<T>(const T*, const int32_t*, int64_t, int64_t, int64_t, int64_t, int64_t, T*, \
                                       cudaStream_t);
FK_MERGE_DTYPE(float)
FK_MERGE_DTYPE(double)
FK_MERGE_DTYPE(c10::Half)
FK_MERGE_DTYPE(c10::BFloat16)
#undef FK_MERGE_DTYPE

}  // namespace fedkernels
