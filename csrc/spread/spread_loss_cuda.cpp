// CUDA launchers of the spreadout loss over selected pairs (the torch side): checks, allocation,
// dispatch, the reverse-pair sort; the kernels and their summation orders are in spread_loss_cuda.cu.
// Compiled by the host compiler, only in CUDA builds (and the emulator's).
#include <cstdint>
#include <string>
#include <vector>

#include "common/stable/alloc.h"
#include "common/stable/calls.h"
#include "common/stable/check.h"
#include "common/stable/cuda.h"
#include "common/stable/dispatch.h"
#include "common/stable/tensor.h"
#include "spread/spread.h"
#include "spread/spread_checks.h"
#include "spread/spread_cuda_tensor.h"
#include "spread/spread_loss_cuda_kernels.h"

namespace fedkernels {

namespace {

// Row norms when the metric needs them (cosine); l2 kernels never read them: an empty tensor.
Tensor norms_if_cosine(const Tensor& W, int metric) {
  return metric == spread::kCosine ? spread_cuda::row_norms(W) : empty_on(W, {0}, ScalarType::Double);
}

Tensor pair_weight_gather_cuda(const Tensor& indptr, const Tensor& indices, const Tensor& values,
                               const Tensor& idx_in) {
  check_pair_weight_gather_args(indptr, indices, values, idx_in);
  const int64_t c = idx_in.size(0), k = idx_in.size(1);
  const CudaDeviceGuard guard(idx_in);
  const Tensor ip = contiguous_or_self(indptr), ix = contiguous_or_self(indices), vv = contiguous_or_self(values),
               idx = contiguous_or_self(idx_in);
  Tensor out = empty_on(values, {c, k});
  if (c * k == 0) return out;
  spread_cuda::launch_pair_weight_gather(ip.const_data_ptr<int64_t>(), ix.const_data_ptr<int64_t>(),
                                         vv.const_data_ptr<float>(), idx.const_data_ptr<int64_t>(), c, k,
                                         out.mutable_data_ptr<float>(), current_cuda_stream(idx));
  FK_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

void launch_pair_terms(const Tensor& W, const Tensor& idx, const Tensor& weight, const Tensor& norms, int metric,
                       double margin, double coef_scale, double* row_sums, double* coefs) {
  const int64_t c = W.size(0), d = W.size(1), k = idx.size(1);
  const cudaStream_t stream = current_cuda_stream(W);
  FK_DISPATCH_FLOAT_HALF_BF16(W.scalar_type(), "spread_pair_terms_cuda", [&] {
    spread_cuda::launch_pair_terms<scalar_t>(W.const_data_ptr<scalar_t>(), idx.const_data_ptr<int64_t>(),
                                             weight.const_data_ptr<float>(), norms.const_data_ptr<double>(), c, d, k,
                                             metric, margin, coef_scale, row_sums, coefs, stream);
  });
  FK_CUDA_KERNEL_LAUNCH_CHECK();
}

Tensor spreadout_pair_loss_cuda(const Tensor& W_in, const Tensor& idx_in, const Tensor& weight_in, double margin,
                                std::string metric_name) {
  check_pair_loss_args(W_in, idx_in, weight_in, margin, metric_name);
  const int metric = parse_metric(metric_name);
  const CudaDeviceGuard guard(W_in);
  const Tensor W = contiguous_or_self(W_in), idx = contiguous_or_self(idx_in), weight = contiguous_or_self(weight_in);
  const int64_t c = W.size(0);
  Tensor total = zeros_on(W, std::vector<int64_t>{}, ScalarType::Double);
  if (c > 0 && idx.size(1) > 0) {
    Tensor rows = empty_on(W, {c}, ScalarType::Double);
    launch_pair_terms(W, idx, weight, norms_if_cosine(W, metric), metric, margin, 1.0, rows.mutable_data_ptr<double>(),
                      nullptr);
    // Two passes of fixed shape (spread.h: block_tree_sum): chunk sums, then one block over them in order.
    const int64_t chunks = (c + spread::kSumChunk - 1) / spread::kSumChunk;
    FK_CHECK(chunks <= INT32_MAX, "spreadout_pair_loss: too many classes for one CUDA grid");
    Tensor partial = empty_on(W, {chunks}, ScalarType::Double);
    const cudaStream_t stream = current_cuda_stream(W);
    spread_cuda::launch_ordered_sum(rows.const_data_ptr<double>(), c, spread::kSumChunk,
                                    partial.mutable_data_ptr<double>(), static_cast<unsigned>(chunks), stream);
    FK_CUDA_KERNEL_LAUNCH_CHECK();
    spread_cuda::launch_ordered_sum(partial.const_data_ptr<double>(), chunks, chunks, total.mutable_data_ptr<double>(),
                                    1, stream);
    FK_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return W.scalar_type() == ScalarType::Double ? total : torch::stable::to(total, ScalarType::Float);
}

Tensor spreadout_pair_loss_backward_cuda(const Tensor& grad, const Tensor& W_in, const Tensor& idx_in,
                                         const Tensor& weight_in, double margin, std::string metric_name) {
  check_pair_loss_args(W_in, idx_in, weight_in, margin, metric_name);
  FK_CHECK_VALUE(grad.numel() == 1, "grad must be a scalar, got shape ", shape_text(grad.sizes()));
  const int metric = parse_metric(metric_name);
  const CudaDeviceGuard guard(W_in);
  const Tensor W = contiguous_or_self(W_in), idx = contiguous_or_self(idx_in), weight = contiguous_or_self(weight_in);
  const int64_t c = W.size(0), d = W.size(1), k = idx.size(1);
  Tensor gw = zeros_on(W, W.sizes());
  if (k == 0 || c == 0 || d == 0) return gw;
  const Tensor norms = norms_if_cosine(W, metric);
  Tensor coefs = empty_on(W, {c * k}, ScalarType::Double);
  launch_pair_terms(W, idx, weight, norms, metric, margin, item_double(grad), nullptr,
                    coefs.mutable_data_ptr<double>());
  const auto [order, bounds] = reverse_pairs(idx);
  const cudaStream_t stream = current_cuda_stream(W);
  FK_DISPATCH_FLOAT_HALF_BF16(W.scalar_type(), "spreadout_pair_loss_backward_cuda", [&] {
    spread_cuda::launch_pair_grad<scalar_t>(W.const_data_ptr<scalar_t>(), norms.const_data_ptr<double>(),
                                            idx.const_data_ptr<int64_t>(), coefs.const_data_ptr<double>(),
                                            order.const_data_ptr<int64_t>(), bounds.const_data_ptr<int64_t>(), c, d, k,
                                            metric, gw.mutable_data_ptr<scalar_t>(), stream);
  });
  FK_CUDA_KERNEL_LAUNCH_CHECK();
  return gw;
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) {
  m.impl("pair_weight_gather", TORCH_BOX(&pair_weight_gather_cuda));
  m.impl("spreadout_pair_loss", TORCH_BOX(&spreadout_pair_loss_cuda));
  m.impl("spreadout_pair_loss_backward", TORCH_BOX(&spreadout_pair_loss_backward_cuda));
}

}  // namespace fedkernels
