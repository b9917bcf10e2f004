// CUDA launchers of linear_cross_entropy and its backward (the torch side): checks, the per-chunk
// cuBLAS GEMMs (aten::mm) and the gradient GEMMs, allocation, dispatch; the per-row kernels are in
// linear_cross_entropy_cuda.cu. Compiled by the host compiler, only in CUDA builds (and the emulator's).
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "common/stable/check.h"
#include "common/stable/cuda.h"
#include "common/stable/dispatch.h"
#include "common/stable/sampled_extra.h"
#include "common/stable/tensor.h"
#include "sampled/lce_host.h"
#include "sampled/linear_cross_entropy_cuda_kernels.h"
#include "sampled/sampled_checks.h"

namespace fedkernels {

// Before each chunk kernel: it launches one block per kLceWarpsPerBlock rows.
static void check_row_blocks(int64_t n) {
  FK_CHECK(n <= int64_t(INT32_MAX) * kLceWarpsPerBlock, "linear_cross_entropy: too many samples for one CUDA call");
}

static std::tuple<Tensor, Tensor> linear_cross_entropy_cuda(const Tensor& h, const Tensor& W, const Tensor& target,
                                                            const std::optional<Tensor>& bias, double scale,
                                                            int64_t ignore_index, std::string_view reduction,
                                                            int64_t chunk_size) {
  check_lce_args(h, W, target, bias, ignore_index, chunk_size);
  const int64_t red = lce_reduction_code(std::string(reduction));
  const CudaDeviceGuard guard(h);
  const ScalarType acc = acc_dtype_of(h.scalar_type());
  const LceInputs in(h, W, bias);
  const Tensor &hh = in.h, &ww = in.W, &bb = in.bias;
  const Tensor tgt = contiguous_or_self(target);
  const int64_t n = hh.size(0), s = ww.size(0);
  const LcePlan plan(n, s, chunk_size);
  Tensor run_max = torch::stable::full({n}, -std::numeric_limits<double>::infinity(), acc, std::nullopt, hh.device());
  Tensor run_sum = zeros_on(hh, {n});
  Tensor target_logit = zeros_on(hh, {n});
  Tensor loss = empty_on(hh, {n});
  Tensor lse = empty_on(hh, {n});
  if (n > 0) {
    const cudaStream_t stream = current_cuda_stream(hh);
    FK_DISPATCH_FLOATING(acc, "linear_cross_entropy_cuda", [&] {
      for (int64_t c = 0; c < plan.num_chunks; ++c) {
        const int64_t c0 = plan.chunk_begin(c), cols = plan.chunk_cols(c, s);
        Tensor z = aten::mm(hh, t2(narrow_view(ww, 0, c0, cols)));
        check_row_blocks(n);
        launch_lce_forward_chunk<scalar_t>(
            z.mutable_data_ptr<scalar_t>(), bb.defined() ? bb.const_data_ptr<scalar_t>() + c0 : nullptr,
            static_cast<scalar_t>(scale), tgt.const_data_ptr<int64_t>(), ignore_index, n, c0, cols,
            run_max.mutable_data_ptr<scalar_t>(), run_sum.mutable_data_ptr<scalar_t>(),
            target_logit.mutable_data_ptr<scalar_t>(), stream);
        FK_CUDA_KERNEL_LAUNCH_CHECK();
      }
      launch_lce_forward_finish<scalar_t>(run_max.const_data_ptr<scalar_t>(), run_sum.const_data_ptr<scalar_t>(),
                                          target_logit.const_data_ptr<scalar_t>(), tgt.const_data_ptr<int64_t>(),
                                          ignore_index, n, loss.mutable_data_ptr<scalar_t>(),
                                          lse.mutable_data_ptr<scalar_t>(), stream);
      FK_CUDA_KERNEL_LAUNCH_CHECK();
    });
  }
  if (red == 0) return {loss, lse};
  const Tensor total = aten::sum_all(loss);  // a fixed-order device reduction
  if (red == 1) return {total, lse};
  const Tensor live = aten::sum_all(aten::ne(tgt, host_scalar_long(ignore_index)));
  const Tensor count = torch::stable::to(aten::clamp_min(live, host_scalar_long(1)), acc);
  return {aten::div(total, count), lse};  // no live sample: total is 0, so the mean is 0
}

static std::tuple<Tensor, Tensor, Tensor> linear_cross_entropy_backward_cuda(
    const Tensor& h, const Tensor& W, const Tensor& target, const std::optional<Tensor>& bias, const Tensor& lse,
    const Tensor& grad_loss, const Tensor& grad_lse, double scale, int64_t ignore_index, int64_t chunk_size) {
  check_lce_args(h, W, target, bias, ignore_index, chunk_size);
  check_lce_backward_args(h, lse, grad_loss, grad_lse);
  const CudaDeviceGuard guard(h);
  const ScalarType acc = acc_dtype_of(h.scalar_type());
  const LceInputs in(h, W, bias);
  const Tensor &hh = in.h, &ww = in.W, &bb = in.bias;
  const Tensor tgt = contiguous_or_self(target);
  const Tensor l = contiguous_or_self(lse), gl = contiguous_or_self(grad_loss), gs = contiguous_or_self(grad_lse);
  const int64_t n = hh.size(0), s = ww.size(0);
  const LcePlan plan(n, s, chunk_size);
  Tensor grad_h = zeros_on(hh, {hh.size(0), hh.size(1)});
  Tensor grad_W = zeros_on(ww, {ww.size(0), ww.size(1)});
  Tensor grad_bias = zeros_on(hh, {bias.has_value() ? s : 0});
  if (n > 0) {
    const cudaStream_t stream = current_cuda_stream(hh);
    const std::vector<int64_t> rows_dim{0};
    FK_DISPATCH_FLOATING(acc, "linear_cross_entropy_backward_cuda", [&] {
      for (int64_t c = 0; c < plan.num_chunks; ++c) {
        const int64_t c0 = plan.chunk_begin(c), cols = plan.chunk_cols(c, s);
        const Tensor Wc = narrow_view(ww, 0, c0, cols);
        Tensor z = aten::mm(hh, t2(Wc));
        check_row_blocks(n);
        launch_lce_backward_chunk<scalar_t>(
            z.mutable_data_ptr<scalar_t>(), bb.defined() ? bb.const_data_ptr<scalar_t>() + c0 : nullptr,
            static_cast<scalar_t>(scale), tgt.const_data_ptr<int64_t>(), ignore_index, n, c0, cols,
            l.const_data_ptr<scalar_t>(), gl.const_data_ptr<scalar_t>(), gs.const_data_ptr<scalar_t>(), stream);
        FK_CUDA_KERNEL_LAUNCH_CHECK();
        // Chunks in order: grad_h accumulates in a fixed order; grad_W / grad_bias rows are owned.
        aten::addmm_(grad_h, z, Wc, scale);
        Tensor grad_Wc = torch::stable::narrow(grad_W, 0, c0, cols);
        aten::addmm_(grad_Wc, t2(z), hh, scale);
        if (bb.defined()) {
          Tensor grad_bc = torch::stable::narrow(grad_bias, 0, c0, cols);
          torch::stable::copy_(grad_bc, torch::stable::sum(z, IntArrayRef(rows_dim)));
        }
      }
    });
  }
  return lce_grads_in_input_dtypes(grad_h, grad_W, grad_bias, h, W, bias);
}

STABLE_TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) {
  m.impl("linear_cross_entropy", TORCH_BOX(&linear_cross_entropy_cuda));
  m.impl("linear_cross_entropy_backward", TORCH_BOX(&linear_cross_entropy_backward_cuda));
}

}  // namespace fedkernels
