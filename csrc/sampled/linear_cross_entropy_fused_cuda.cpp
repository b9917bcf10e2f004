// The CUDA kernel of linear_cross_entropy_fused: the forward and backward ops composed through the
// dispatcher (on a GPU the backward's recomputed logit GEMMs are cheap, and the Python wrapper takes
// the fused op on CPU tensors only). It keeps every fedkernels op runnable on CUDA tensors, with the
// CPU kernel's contract: reduced loss, lse, and the gradients for an upstream gradient of 1, in the
// accumulation dtype. It launches no kernel itself, so it is a host-compiled _cuda.cpp: like every
// CUDA launcher it is built by CUDA builds and the emulated module only (the CPU twin:
// linear_cross_entropy_cpu.cpp).
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>
#include <ATen/ops/zeros_like.h>

#include <optional>
#include <string>
#include <tuple>

#include "sampled/sampled_checks.h"

namespace fedkernels {

using Tensor = at::Tensor;
using OptTensor = std::optional<at::Tensor>;

static std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> linear_cross_entropy_fused_composite(
    const Tensor& h, const Tensor& W, const Tensor& target, const OptTensor& bias, double scale, int64_t ignore_index,
    c10::string_view reduction, int64_t chunk_size) {
  const int64_t red = lce_reduction_code(std::string(reduction));
  TORCH_CHECK_VALUE(red != 0, "linear_cross_entropy_fused: reduction must be 'mean' or 'sum', got 'none'");
  static auto fwd = c10::Dispatcher::singleton()
                        .findSchemaOrThrow("fedkernels::linear_cross_entropy", "")
                        .typed<std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, const OptTensor&,
                                                          double, int64_t, c10::string_view, int64_t)>();
  static auto bwd = c10::Dispatcher::singleton()
                        .findSchemaOrThrow("fedkernels::linear_cross_entropy_backward", "")
                        .typed<std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&,
                                                                  const OptTensor&, const Tensor&, const Tensor&,
                                                                  const Tensor&, double, int64_t, int64_t)>();
  auto [loss, lse] = fwd.call(h, W, target, bias, scale, ignore_index, reduction, chunk_size);
  const auto live = target.ne(ignore_index).to(lse.scalar_type());
  const auto g_loss = red == 1 ? live : live / live.sum().clamp_min(1);
  auto [gh, gW, gb] =
      bwd.call(h, W, target, bias, lse, g_loss.contiguous(), at::zeros_like(lse), scale, ignore_index, chunk_size);
  const auto acc = lse.scalar_type();
  return {loss, lse, gh.to(acc), gW.to(acc), gb.to(acc)};
}

TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) { m.impl("linear_cross_entropy_fused", &linear_cross_entropy_fused_composite); }

}  // namespace fedkernels
