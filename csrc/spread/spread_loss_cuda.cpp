// CUDA launchers of the spreadout loss over selected pairs (ATen side): checks, allocation, dispatch,
// the reverse-pair sort; the kernels and their summation orders are in spread_loss_cuda.cu. Compiled by
// the host compiler, only in CUDA builds (and the emulator's).
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>

#include <cstdint>
#include <string>

#include "common/dispatch.h"
#include "spread/spread.h"
#include "spread/spread_checks.h"
#include "spread/spread_cuda_tensor.h"
#include "spread/spread_loss_cuda_kernels.h"

namespace fedkernels {

namespace {

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
  spread_cuda::launch_pair_weight_gather(ip.data_ptr<int64_t>(), ix.data_ptr<int64_t>(), vv.data_ptr<float>(),
                                         idx.data_ptr<int64_t>(), c, k, out.data_ptr<float>(),
                                         c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

void launch_pair_terms(const at::Tensor& W, const at::Tensor& idx, const at::Tensor& weight, const at::Tensor& norms,
                       int metric, double margin, double coef_scale, double* row_sums, double* coefs) {
  const int64_t c = W.size(0), d = W.size(1), k = idx.size(1);
  FK_DISPATCH_FLOAT_HALF_BF16(W.scalar_type(), "spread_pair_terms_cuda", [&] {
    spread_cuda::launch_pair_terms<scalar_t>(W.data_ptr<scalar_t>(), idx.data_ptr<int64_t>(), weight.data_ptr<float>(),
                                             norms.data_ptr<double>(), c, d, k, metric, margin, coef_scale, row_sums,
                                             coefs, c10::cuda::getCurrentCUDAStream());
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
    spread_cuda::launch_ordered_sum(rows.data_ptr<double>(), c, spread::kSumChunk, partial.data_ptr<double>(),
                                    static_cast<unsigned>(chunks), stream);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    spread_cuda::launch_ordered_sum(partial.data_ptr<double>(), chunks, chunks, total.data_ptr<double>(), 1, stream);
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
    spread_cuda::launch_pair_grad<scalar_t>(W.data_ptr<scalar_t>(), norms.data_ptr<double>(), idx.data_ptr<int64_t>(),
                                            coefs.data_ptr<double>(), order.data_ptr<int64_t>(),
                                            bounds.data_ptr<int64_t>(), c, d, k, metric, gw.data_ptr<scalar_t>(),
                                            c10::cuda::getCurrentCUDAStream());
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
