// CUDA launchers of prox_tv1d and its backward (ATen side): checks, allocation, dispatch; the kernels
// are in prox_cuda.cu. Compiled by the host compiler, only in CUDA builds (and the emulator's).
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>

#include <tuple>

#include "prox/prox_checks.h"
#include "prox/prox_cuda_kernels.h"

namespace fedkernels {

static at::Tensor prox_tv1d_cuda(const at::Tensor& z_in, const at::Tensor& lam, bool anchored, int64_t block_size) {
  const at::Tensor lam_rows = check_prox_tv1d_args(z_in, lam, block_size);
  const c10::cuda::CUDAGuard guard(z_in.device());
  const auto z = z_in.contiguous();
  auto u = at::empty_like(z);
  const TvLayout l = tv_layout(z, block_size);
  if (l.items() == 0) return u;
  // Worst case each chain holds a whole item, so the workspace is 2 (block + 1) points per item.
  auto scratch =
      at::empty({l.items() * 2 * (l.block + 1) * static_cast<int64_t>(sizeof(TvPoint))}, z.options().dtype(at::kByte));
  auto bad = at::empty({l.items()}, z.options().dtype(at::kByte));
  AT_DISPATCH_FLOATING_TYPES(z.scalar_type(), "prox_tv1d_cuda", [&] {
    launch_tv1d<scalar_t>(z.data_ptr<scalar_t>(), u.data_ptr<scalar_t>(), lam_rows.data_ptr<double>(),
                          reinterpret_cast<TvPoint*>(scratch.data_ptr<uint8_t>()), bad.data_ptr<uint8_t>(), l, anchored,
                          c10::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  check_rows_finite(bad.any().item<bool>());
  return u;
}

static std::tuple<at::Tensor, at::Tensor> prox_tv1d_backward_cuda(const at::Tensor& grad_in, const at::Tensor& u_in,
                                                                  const at::Tensor& lam, bool anchored,
                                                                  int64_t block_size) {
  const at::Tensor lam_rows = check_prox_tv1d_backward_args(grad_in, u_in, lam, block_size);
  const c10::cuda::CUDAGuard guard(u_in.device());
  const auto g = grad_in.contiguous();
  const auto u = u_in.contiguous();
  auto gz = at::empty_like(u);
  const TvLayout l = tv_layout(u, block_size);
  auto glam_items = at::zeros({l.items()}, u.options().dtype(at::kDouble));
  if (l.items() > 0) {
    AT_DISPATCH_FLOATING_TYPES(u.scalar_type(), "prox_tv1d_backward_cuda", [&] {
      launch_tv1d_backward<scalar_t>(g.data_ptr<scalar_t>(), u.data_ptr<scalar_t>(), gz.data_ptr<scalar_t>(),
                                     lam_rows.data_ptr<double>(), glam_items.data_ptr<double>(), l, anchored,
                                     c10::cuda::getCurrentCUDAStream());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  }
  return {gz, reduce_lam_grad(glam_items, l, lam, u.sizes().slice(0, u.dim() - 1))};
}

TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) {
  m.impl("prox_tv1d", &prox_tv1d_cuda);
  m.impl("prox_tv1d_backward", &prox_tv1d_backward_cuda);
}

}  // namespace fedkernels
