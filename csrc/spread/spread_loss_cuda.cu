// CUDA kernels of the spreadout loss over selected pairs (launch table: bench/ops/spread.py).
//  - pair_weight_gather_kernel: a thread per pair (C k threads), a binary search in the CSR row.
//  - pair_terms_kernel: a warp per row, lanes over dims (coalesced 128-byte loads of both rows of a
//    pair), each pair's distance summed by the lanes in order and then the xor butterfly.
//  - ordered_sum_kernel: two passes, blocks of 256 threads over fixed chunks of 1024 row terms, then
//    one block over the chunk sums in order (a fixed tree, no atomics).
//  - pair_grad_kernel: a warp per row, lanes over dims; each dim sums the row's own pairs then its
//    reverse pairs (reached through a stable sort by target) in order; cosine's projection u_t . v
//    is one more warp reduction.
// Every sum has the same order as the CPU launcher's (spread.h: lane_distance, cosine_projection,
// block_tree_sum), so loss and gradient are bit-identical to the CPU op and deterministic.
//
// No torch header here: spread_loss_cuda.cpp checks, allocates and calls the launch_* below.
#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#include <cstdint>

#include "spread/spread.h"
#include "spread/spread_cuda_utils.cuh"
#include "spread/spread_loss_cuda_kernels.h"

namespace fedkernels {

namespace {

using spread_cuda::lane_id;
using spread_cuda::warp_item;
using spread_cuda::warp_sum;

__global__ void pair_weight_gather_kernel(const int64_t* indptr, const int64_t* indices, const float* values,
                                          const int64_t* idx, int64_t c, int64_t k, float* out) {
  const int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q < c * k) out[q] = spread::pair_weight_lookup(indptr, indices, values, q / k, idx[q]);
}

// A warp per row r: for each of its k pairs, the lanes sum the distance terms of dims lane, lane + 32,
// ... and combine them (spread::lane_distance's order); every lane then holds the same distance.
template <typename T>
__global__ void pair_terms_kernel(const T* w, const int64_t* nbr, const float* weight, const double* norms, int64_t c,
                                  int64_t d, int64_t k, int metric, double margin, double coef_scale, double* row_sums,
                                  double* coefs) {
  const int lane = lane_id();
  const int64_t r = warp_item();
  if (r >= c) return;  // the whole warp
  const bool cosine = metric == spread::kCosine;
  const double nr = cosine ? norms[r] : 0.0;
  double s = 0.0;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t p = nbr[r * k + j];
    const double np = cosine ? norms[p] : 0.0;
    const double part = spread::distance_partial(w + r * d, w + p * d, d, metric, nr, np, lane, 32);
    const double dist = spread::distance_from_sum(warp_sum(part), metric, nr, np);
    double coef = 0.0;
    s += spread::pair_term_from_distance(dist, metric, weight[r * k + j], margin, &coef);
    if (coefs && lane == 0) coefs[r * k + j] = coef * coef_scale;
  }
  if (row_sums && lane == 0) row_sums[r] = s;
}

// One pass of the ordered sum: block b reduces x[b * chunk, min(n, (b + 1) * chunk)) to out[b]
// (thread t adds every kSumThreads-th term from t in order, then a halving tree): block_tree_sum.
__global__ void ordered_sum_kernel(const double* x, int64_t n, int64_t chunk, double* out) {
  __shared__ double part[spread::kSumThreads];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * chunk;
  const int64_t len = n - base < chunk ? n - base : chunk;
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < len; i += spread::kSumThreads) s += x[base + i];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int h = spread::kSumThreads / 2; h > 0; h /= 2) {
    if (static_cast<int>(threadIdx.x) < h) part[threadIdx.x] += part[threadIdx.x + h];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}

// A warp per row t, lanes over dims (coalesced gathers of the partners' rows and the gradient row).
template <typename T>
__global__ void pair_grad_kernel(const T* w, const double* norms, const int64_t* nbr, const double* coefs,
                                 const int64_t* rev, const int64_t* bounds, int64_t c, int64_t d, int64_t k, int metric,
                                 T* grad) {
  const int lane = lane_id();
  const int64_t t = warp_item();
  if (t >= c) return;  // the whole warp
  const int64_t rb = bounds[t], re = bounds[t + 1];
  double proj = 0.0;
  if (metric == spread::kCosine && norms[t] > spread::kCosineEps) {
    double part = 0.0;
    for (int64_t i = lane; i < d; i += 32)
      part += spread::cosine_projection_term(w, t, i, d, k, norms, nbr, coefs, rev, rb, re);
    proj = warp_sum(part);
  }
  spread::pair_grad_row(w, t, d, k, metric, norms, nbr, coefs, rev, rb, re, grad, lane, 32, proj);
}

}  // namespace

namespace spread_cuda {

void launch_pair_weight_gather(const int64_t* indptr, const int64_t* indices, const float* values, const int64_t* idx,
                               int64_t c, int64_t k, float* out, cudaStream_t stream) {
  pair_weight_gather_kernel<<<blocks_for(c * k), kThreads, 0, stream>>>(indptr, indices, values, idx, c, k, out);
}

template <typename T>
void launch_pair_terms(const T* w, const int64_t* nbr, const float* weight, const double* norms, int64_t c, int64_t d,
                       int64_t k, int metric, double margin, double coef_scale, double* row_sums, double* coefs,
                       cudaStream_t stream) {
  pair_terms_kernel<T><<<warp_blocks_for(c), kWarpThreads, 0, stream>>>(w, nbr, weight, norms, c, d, k, metric, margin,
                                                                        coef_scale, row_sums, coefs);
}

void launch_ordered_sum(const double* x, int64_t n, int64_t chunk, double* out, unsigned blocks, cudaStream_t stream) {
  ordered_sum_kernel<<<blocks, spread::kSumThreads, 0, stream>>>(x, n, chunk, out);
}

template <typename T>
void launch_pair_grad(const T* w, const double* norms, const int64_t* nbr, const double* coefs, const int64_t* rev,
                      const int64_t* bounds, int64_t c, int64_t d, int64_t k, int metric, T* grad,
                      cudaStream_t stream) {
  pair_grad_kernel<T>
      <<<warp_blocks_for(c), kWarpThreads, 0, stream>>>(w, norms, nbr, coefs, rev, bounds, c, d, k, metric, grad);
}

// The dtypes the launchers dispatch (FK_DISPATCH_FLOAT_HALF_BF16).
template void launch_pair_terms<float>(const float*, const int64_t*, const float*, const double*, int64_t, int64_t,
                                       int64_t, int, double, double, double*, double*, cudaStream_t);
template void launch_pair_terms<double>(const double*, const int64_t*, const float*, const double*, int64_t, int64_t,
                                        int64_t, int, double, double, double*, double*, cudaStream_t);
template void launch_pair_terms<c10::Half>(const c10::Half*, const int64_t*, const float*, const double*, int64_t,
                                           int64_t, int64_t, int, double, double, double*, double*, cudaStream_t);
template void launch_pair_terms<c10::BFloat16>(const c10::BFloat16*, const int64_t*, const float*, const double*,
                                               int64_t, int64_t, int64_t, int, double, double, double*, double*,
                                               cudaStream_t);
template void launch_pair_grad<float>(const float*, const double*, const int64_t*, const double*, const int64_t*,
                                      const int64_t*, int64_t, int64_t, int64_t, int, float*, cudaStream_t);
template void launch_pair_grad<double>(const double*, const double*, const int64_t*, const double*, const int64_t*,
                                       const int64_t*, int64_t, int64_t, int64_t, int, double*, cudaStream_t);
template void launch_pair_grad<c10::Half>(const c10::Half*, const double*, const int64_t*, const double*,
                                          const int64_t*, const int64_t*, int64_t, int64_t, int64_t, int, c10::Half*,
                                          cudaStream_t);
template void launch_pair_grad<c10::BFloat16>(const c10::BFloat16*, const double*, const int64_t*, const double*,
                                              const int64_t*, const int64_t*, int64_t, int64_t, int64_t, int,
                                              c10::BFloat16*, cudaStream_t);

}  // namespace spread_cuda

}  // namespace fedkernels
