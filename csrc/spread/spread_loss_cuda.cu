// CUDA launchers of the spreadout loss over selected pairs. One thread per row for the pair terms,
// a single-block fixed-order sum of the row terms, and one block per row for the gradient (threads
// over dims); reverse pairs reach their target through a stable sort, so there are no atomics.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "spread/spread.h"
#include "spread/spread_checks.h"
#include "spread/spread_cuda_utils.cuh"

namespace fedkernels {

namespace {

using spread_cuda::blocks_for;
using spread_cuda::kThreads;

__global__ void pair_weight_gather_kernel(const int64_t* indptr, const int64_t* indices, const float* values,
                                          const int64_t* idx, int64_t c, int64_t k, float* out) {
  const int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q < c * k) out[q] = spread::pair_weight_lookup(indptr, indices, values, q / k, idx[q]);
}

template <typename T>
__global__ void pair_terms_kernel(const T* w, const int64_t* nbr, const float* weight, const double* norms, int64_t c,
                                  int64_t d, int64_t k, int metric, double margin, double coef_scale,
                                  double* row_sums, double* coefs) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= c) return;
  double s = 0.0;
  for (int64_t j = 0; j < k; ++j) {
    double coef = 0.0;
    s += spread::pair_term(w, r, nbr[r * k + j], d, metric, norms, weight[r * k + j], margin, &coef);
    if (coefs) coefs[r * k + j] = coef * coef_scale;
  }
  if (row_sums) row_sums[r] = s;
}

// Sum of n doubles by one block: each thread a strided partial sum, then a fixed tree.
__global__ void ordered_sum_kernel(const double* x, int64_t n, double* out) {
  __shared__ double part[kThreads];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int h = blockDim.x / 2; h > 0; h /= 2) {
    if (threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = part[0];
}

template <typename T>
__global__ void pair_grad_kernel(const T* w, const double* norms, const int64_t* nbr, const double* coefs,
                                 const int64_t* rev, const int64_t* bounds, int64_t d, int64_t k, int metric, T* grad) {
  const int64_t t = blockIdx.x;
  spread::pair_grad_row(w, t, d, k, metric, norms, nbr, coefs, rev, bounds[t], bounds[t + 1], grad,
                        static_cast<int64_t>(threadIdx.x), static_cast<int64_t>(blockDim.x));
}

at::Tensor pair_weight_gather_cuda(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& values,
                                   const at::Tensor& idx_in) {
  check_pair_weight_gather_args(indptr, indices, values, idx_in);
  const int64_t c = idx_in.size(0), k = idx_in.size(1);
  const c10::cuda::CUDAGuard guard(idx_in.device());
  const auto ip = indptr.contiguous(), ix = indices.contiguous(), vv = values.contiguous(), idx = idx_in.contiguous();
  at::Tensor out = at::empty({c, k}, values.options());
  if (c * k == 0) return out;
  pair_weight_gather_kernel<<<blocks_for(c * k), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      ip.data_ptr<int64_t>(), ix.data_ptr<int64_t>(), vv.data_ptr<float>(), idx.data_ptr<int64_t>(), c, k,
      out.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

void launch_pair_terms(const at::Tensor& W, const at::Tensor& idx, const at::Tensor& weight, const at::Tensor& norms,
                       int metric, double margin, double coef_scale, double* row_sums, double* coefs) {
  const int64_t c = W.size(0), d = W.size(1), k = idx.size(1);
  FK_DISPATCH_FLOAT_HALF_BF16(W.scalar_type(), "spread_pair_terms_cuda", [&] {
    pair_terms_kernel<scalar_t><<<blocks_for(c), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
        W.data_ptr<scalar_t>(), idx.data_ptr<int64_t>(), weight.data_ptr<float>(), norms.data_ptr<double>(), c, d, k,
        metric, margin, coef_scale, row_sums, coefs);
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
    launch_pair_terms(W, idx, weight, spread_cuda::row_norms(W), metric, margin, 1.0, rows.data_ptr<double>(), nullptr);
    ordered_sum_kernel<<<1, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(rows.data_ptr<double>(), c,
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
  const at::Tensor norms = spread_cuda::row_norms(W);
  at::Tensor coefs = at::empty({c * k}, W.options().dtype(at::kDouble));
  launch_pair_terms(W, idx, weight, norms, metric, margin, grad.item<double>(), nullptr, coefs.data_ptr<double>());
  const auto [order, bounds] = reverse_pairs(idx);
  TORCH_CHECK(c <= INT32_MAX, "spreadout_pair_loss_backward: at most 2^31 - 1 classes on CUDA");
  FK_DISPATCH_FLOAT_HALF_BF16(W.scalar_type(), "spreadout_pair_loss_backward_cuda", [&] {
    pair_grad_kernel<scalar_t><<<static_cast<unsigned>(c), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
        W.data_ptr<scalar_t>(), norms.data_ptr<double>(), idx.data_ptr<int64_t>(), coefs.data_ptr<double>(),
        order.data_ptr<int64_t>(), bounds.data_ptr<int64_t>(), d, k, metric, gw.data_ptr<scalar_t>());
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
