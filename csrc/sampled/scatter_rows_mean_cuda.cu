// CUDA kernels of scatter_rows_mean: one block per output row and column slice, threads over
// columns, sources summed in their stable order (sampled.h's per-row math, as the CPU twin
// scatter_rows_mean_cpu.cpp). No torch header: scatter_rows_mean_cuda.cpp sorts the rows into
// segments, allocates and launches.
#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#include "sampled/sampled.h"
#include "sampled/scatter_rows_mean_cuda_kernels.h"

namespace fedkernels {

template <typename acc_t>
__global__ void segment_weight_sum_kernel(const int64_t* seg, const int64_t* perm, const acc_t* w, int64_t num_rows,
                                          acc_t* wsum, acc_t* wscale) {
  const int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (u >= num_rows) return;
  wsum[u] = row_scaled_weight_sum(w, perm, seg[u], seg[u + 1], &wscale[u]);
}

constexpr int64_t kScatterCols = 1024;  // columns per block (the accumulator lives in shared memory)

template <typename scalar_t, typename acc_t>
__global__ void scatter_rows_mean_kernel(scalar_t* out, const scalar_t* src, const int64_t* rows, const int64_t* seg,
                                         const int64_t* perm, const acc_t* w, const acc_t* wsum, const acc_t* wscale,
                                         int64_t d) {
  __shared__ acc_t acc[kScatterCols];
  const int64_t u = blockIdx.x, c0 = static_cast<int64_t>(blockIdx.y) * kScatterCols;
  const int64_t cols = d - c0 < kScatterCols ? d - c0 : kScatterCols;
  // Each thread owns columns threadIdx.x + k * blockDim.x of acc: no synchronisation needed.
  // The same steps as the CPU (sampled.h): first source, the middle ones, the last one with the division.
  const int64_t s0 = seg[u], s1 = seg[u + 1];
  scalar_t* o = out + rows[u] * d + c0;
  const int64_t first = perm[s0], last = perm[s1 - 1];
  const acc_t sc = wscale[u];
  if (s1 - s0 == 1) {
    weighted_row_only(o, src + first * d + c0, w[first] * sc, wsum[u], cols, threadIdx.x, blockDim.x);
    return;
  }
  weighted_row_first(acc, src + first * d + c0, w[first] * sc, cols, threadIdx.x, blockDim.x);
  for (int64_t t = s0 + 1; t + 1 < s1; ++t) {
    const int64_t p = perm[t];
    weighted_row_accumulate(acc, src + p * d + c0, w[p] * sc, cols, threadIdx.x, blockDim.x);
  }
  weighted_row_last(o, acc, src + last * d + c0, w[last] * sc, wsum[u], cols, threadIdx.x, blockDim.x);
}

template <typename acc_t>
void launch_segment_weight_sum(const int64_t* seg, const int64_t* perm, const acc_t* w, int64_t num_rows, acc_t* wsum,
                               acc_t* wscale, cudaStream_t stream) {
  segment_weight_sum_kernel<acc_t>
      <<<static_cast<unsigned>((num_rows + 255) / 256), 256, 0, stream>>>(seg, perm, w, num_rows, wsum, wscale);
}

template <typename scalar_t, typename acc_t>
void launch_scatter_rows_mean(scalar_t* out, const scalar_t* src, const int64_t* rows, const int64_t* seg,
                              const int64_t* perm, const acc_t* w, const acc_t* wsum, const acc_t* wscale,
                              int64_t num_rows, int64_t d, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(num_rows), static_cast<unsigned>((d + kScatterCols - 1) / kScatterCols));
  scatter_rows_mean_kernel<scalar_t, acc_t><<<grid, 256, 0, stream>>>(out, src, rows, seg, perm, w, wsum, wscale, d);
}

template void launch_segment_weight_sum<float>(const int64_t*, const int64_t*, const float*, int64_t, float*, float*,
                                               cudaStream_t);
template void launch_segment_weight_sum<double>(const int64_t*, const int64_t*, const double*, int64_t, double*,
                                                double*, cudaStream_t);
#define FK_SCATTER_INSTANTIATE(S, A)                                                                                   \
  template void launch_scatter_rows_mean<S, A>(S*, const S*, const int64_t*, const int64_t*, const int64_t*, const A*, \
                                               const A*, const A*, int64_t, int64_t, cudaStream_t);
FK_SCATTER_INSTANTIATE(float, float)
FK_SCATTER_INSTANTIATE(double, double)
FK_SCATTER_INSTANTIATE(c10::Half, float)
FK_SCATTER_INSTANTIATE(c10::BFloat16, float)
#undef FK_SCATTER_INSTANTIATE

}  // namespace fedkernels
