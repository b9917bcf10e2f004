// CUDA launchers of the spreadout loss over selected pairs (launch table: bench/ops/spread.py).
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
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>

#include "spread/spread.h"
#include "spread/spread_checks.h"
#include "spread/spread_cuda_utils.cuh"

namespace fedkernels {

namespace {

using spread_cuda::blocks_for;
using spread_cuda::kThreads;
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

// Row norms when the metric needs them (cosine); l2 kernels never read them: an empty tensor.
at::Tensor norms_if_cosine(const at::Tensor& W, int metric) {
  return metric == spread::kCosine ? spread_cuda::row_norms(W) : at::empty({0}, W.options().dtype(at::kDouble));
}

at::Tensor pair_weight_gather_cuda(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& values,
                                   const at::Tensor& idx_in) {
  check_pair_weight_gather_args(indptr, indices, values, idx_in);
  const int64_t c = idx_in.size(0), k = idx_in.size(1);
  const c10::cuda::CUDAGuard guard(idx_in.device());
  const auto ip = indptr.contiguous(), ix = indices.contiguous(), vv = values.contiguous(), idx = idx_in.contiguous();
  at::Tensor out = at::empty({c, k}, values.options());
  if (c * k == 0) return out;
  pair_weight_gather_kernel<<<blocks_for(c * k), kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
      ip.data_ptr<int64_t>(), ix.data_ptr<int64_t>(), vv.data_ptr<float>(), idx.data_ptr<int64_t>(), c, k,
      out.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

void launch_pair_terms(const at::Tensor& W, const at::Tensor& idx, const at::Tensor& weight, const at::Tensor& norms,
                       int metric, double margin, double coef_scale, double* row_sums, double* coefs) {
  const int64_t c = W.size(0), d = W.size(1), k = idx.size(1);
  FK_DISPATCH_FLOAT_HALF_BF16(W.scalar_type(), "spread_pair_terms_cuda", [&] {
    pair_terms_kernel<scalar_t>
        <<<spread_cuda::warp_blocks_for(c), spread_cuda::kWarpThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
            W.data_ptr<scalar_t>(), idx.data_ptr<int64_t>(), weight.data_ptr<float>(), norms.data_ptr<double>(), c, d,
            k, metric, margin, coef_scale, row_sums, coefs);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

at::Tensor spreadout_pair_loss_cuda(const at::Tensor& W_in, const at::Tensor& idx_in, const at::Tensor& weight_in,
                                    double margin, std::string metric_name) {
  check_pair_loss_args(W_in, idx_in, weight_in, margin, metric_name);
  const int metric = parse_metric(metric_name);
  const c10::cuda::CUDAGuard guard(W_in.device());
  const auto W = W_in.contiguous(), idx = idx_in.contiguous(), weight = weight_in.contiguous();
  const int64_t c = W.size(0);
  at::Tensor total = at::zeros({}, W.options().dtype(at::kDouble));
  if (c > 0 && idx.size(1) > 0) {
    at::Tensor rows = at::empty({c}, W.options().dtype(at::kDouble));
    launch_pair_terms(W, idx, weight, norms_if_cosine(W, metric), metric, margin, 1.0, rows.data_ptr<double>(),
                      nullptr);
    // Two passes of fixed shape (spread.h: block_tree_sum): chunk sums, then one block over them in order.
    const int64_t chunks = (c + spread::kSumChunk - 1) / spread::kSumChunk;
    TORCH_CHECK(chunks <= INT32_MAX, "spreadout_pair_loss: too many classes for one CUDA grid");
    at::Tensor partial = at::empty({chunks}, W.options().dtype(at::kDouble));
    const auto stream = c10::cuda::getCurrentCUDAStream();
    ordered_sum_kernel<<<static_cast<unsigned>(chunks), spread::kSumThreads, 0, stream>>>(
        rows.data_ptr<double>(), c, spread::kSumChunk, partial.data_ptr<double>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    ordered_sum_kernel<<<1, spread::kSumThreads, 0, stream>>>(partial.data_ptr<double>(), chunks, chunks,
                                                              total.data_ptr<double>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return W.scalar_type() == at::kDouble ? total : total.to(at::kFloat);
}

at::Tensor spreadout_pair_loss_backward_cuda(const at::Tensor& grad, const at::Tensor& W_in, const at::Tensor& idx_in,
                                             const at::Tensor& weight_in, double margin, std::string metric_name) {
  check_pair_loss_args(W_in, idx_in, weight_in, margin, metric_name);
  TORCH_CHECK_VALUE(grad.numel() == 1, "grad must be a scalar, got shape ", grad.sizes());
  const int metric = parse_metric(metric_name);
  const c10::cuda::CUDAGuard guard(W_in.device());
  const auto W = W_in.contiguous(), idx = idx_in.contiguous(), weight = weight_in.contiguous();
  const int64_t c = W.size(0), d = W.size(1), k = idx.size(1);
  at::Tensor gw = at::zeros_like(W);
  if (k == 0 || c == 0 || d == 0) return gw;
  const at::Tensor norms = norms_if_cosine(W, metric);
  at::Tensor coefs = at::empty({c * k}, W.options().dtype(at::kDouble));
  launch_pair_terms(W, idx, weight, norms, metric, margin, grad.item<double>(), nullptr, coefs.data_ptr<double>());
  const auto [order, bounds] = reverse_pairs(idx);
  FK_DISPATCH_FLOAT_HALF_BF16(W.scalar_type(), "spreadout_pair_loss_backward_cuda", [&] {
    pair_grad_kernel<scalar_t>
        <<<spread_cuda::warp_blocks_for(c), spread_cuda::kWarpThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
            W.data_ptr<scalar_t>(), norms.data_ptr<double>(), idx.data_ptr<int64_t>(), coefs.data_ptr<double>(),
            order.data_ptr<int64_t>(), bounds.data_ptr<int64_t>(), c, d, k, metric, gw.data_ptr<scalar_t>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return gw;
}

}  // namespace

TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) {
  m.impl("pair_weight_gather", &pair_weight_gather_cuda);
  m.impl("spreadout_pair_loss", &spreadout_pair_loss_cuda);
  m.impl("spreadout_pair_loss_backward", &spreadout_pair_loss_backward_cuda);
}

}  // namespace fedkernels
