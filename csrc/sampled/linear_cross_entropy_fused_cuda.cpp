// The CUDA kernel of linear_cross_entropy_fused: the forward and backward ops composed through the
// dispatcher (on a GPU the backward's recomputed logit GEMMs are cheap, and the Python wrapper takes
// the fused op on CPU tensors only). It keeps every fedkernels op runnable on CUDA tensors, with the
// CPU kernel's contract: reduced loss, lse, and the gradients for an upstream gradient of 1, in the
// accumulation dtype. It launches no kernel itself, so it is a host-compiled _cuda.cpp: like every
// CUDA launcher it is built by CUDA builds and the emulated module only (the CPU twin:
// linear_cross_entropy_cpu.cpp).
#include <optional>
#include <string>
#include <string_view>
#include <tuple>

#include "common/stable/calls.h"
#include "common/stable/check.h"
#include "common/stable/sampled_extra.h"
#include "common/stable/tensor.h"
#include "sampled/sampled_checks.h"

namespace fedkernels {

using OptTensor = std::optional<Tensor>;

static std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> linear_cross_entropy_fused_composite(
    const Tensor& h, const Tensor& W, const Tensor& target, const OptTensor& bias, double scale, int64_t ignore_index,
    std::string_view reduction, int64_t chunk_size) {
  const int64_t red = lce_reduction_code(std::string(reduction));
  FK_CHECK_VALUE(red != 0, "linear_cross_entropy_fused: reduction must be 'mean' or 'sum', got 'none'");
  // The forward's checks here first: an error of an op called through the stable dispatcher comes
  // back as RuntimeError, and these must raise their own ValueError / IndexError.
  check_lce_args(h, W, target, bias, ignore_index, chunk_size);
  // The two ops by name through the stable dispatcher (every argument in schema order).
  auto [loss, lse] = call_aten_pair("fedkernels::linear_cross_entropy", "", h, W, target, bias, scale, ignore_index,
                                    std::string(reduction), chunk_size);
  const Tensor live = torch::stable::to(aten::ne(target, host_scalar_long(ignore_index)), lse.scalar_type());
  const Tensor one = to_dtype(host_scalar_double(1.0), lse.scalar_type());  // of live's dtype
  const Tensor g_loss = red == 1 ? live : aten::div(live, aten::clamp_min(aten::sum_all(live), one));
  auto [gh, gW, gb] =
      call_aten_triple("fedkernels::linear_cross_entropy_backward", "", h, W, target, bias, lse,
                       contiguous_or_self(g_loss), zeros_on(lse, {lse.size(0)}), scale, ignore_index, chunk_size);
  const ScalarType acc = lse.scalar_type();
  return {loss, lse, to_dtype(gh, acc), to_dtype(gW, acc), to_dtype(gb, acc)};
}

STABLE_TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) {
  m.impl("linear_cross_entropy_fused", TORCH_BOX(&linear_cross_entropy_fused_composite));
}

}  // namespace fedkernels
