// CUDA launchers of prox_tv1d and its backward (the torch side): checks, allocation, dispatch; the
// kernels are in prox_cuda.cu. Compiled by the host compiler, only in CUDA builds (and the emulator's).
#include <tuple>

#include "common/stable/alloc.h"
#include "common/stable/cuda.h"
#include "common/stable/dispatch.h"
#include "prox/prox_checks.h"
#include "prox/prox_cuda_kernels.h"

namespace fedkernels {

static Tensor prox_tv1d_cuda(const Tensor& z_in, const Tensor& lam, bool anchored, int64_t block_size) {
  const Tensor lam_rows = check_prox_tv1d_args(z_in, lam, block_size);
  const CudaDeviceGuard guard(z_in);
  const Tensor z = contiguous_or_self(z_in);
  Tensor u = torch::stable::empty_like(z);
  const TvLayout l = tv_layout(z, block_size);
  if (l.items() == 0) return u;
  // Worst case each chain holds a whole item, so the workspace is 2 (block + 1) points per item.
  Tensor scratch =
      empty_on(z, {l.items() * 2 * (l.block + 1) * static_cast<int64_t>(sizeof(TvPoint))}, ScalarType::Byte);
  Tensor bad = empty_on(z, {l.items()}, ScalarType::Byte);
  const cudaStream_t stream = current_cuda_stream(z);
  FK_DISPATCH_FLOATING(z.scalar_type(), "prox_tv1d_cuda", [&] {
    launch_tv1d<scalar_t>(z.const_data_ptr<scalar_t>(), u.mutable_data_ptr<scalar_t>(),
                          lam_rows.const_data_ptr<double>(), static_cast<TvPoint*>(scratch.mutable_data_ptr()),
                          bad.mutable_data_ptr<uint8_t>(), l, anchored, stream);
    FK_CUDA_KERNEL_LAUNCH_CHECK();
  });
  check_rows_finite(item_bool(any(bad)));
  return u;
}

static std::tuple<Tensor, Tensor> prox_tv1d_backward_cuda(const Tensor& grad_in, const Tensor& u_in, const Tensor& lam,
                                                          bool anchored, int64_t block_size) {
  const Tensor lam_rows = check_prox_tv1d_backward_args(grad_in, u_in, lam, block_size);
  const CudaDeviceGuard guard(u_in);
  const Tensor g = contiguous_or_self(grad_in);
  const Tensor u = contiguous_or_self(u_in);
  Tensor gz = torch::stable::empty_like(u);
  const TvLayout l = tv_layout(u, block_size);
  Tensor glam_items = zeros_on(u, {l.items()}, ScalarType::Double);
  if (l.items() > 0) {
    const cudaStream_t stream = current_cuda_stream(u);
    FK_DISPATCH_FLOATING(u.scalar_type(), "prox_tv1d_backward_cuda", [&] {
      launch_tv1d_backward<scalar_t>(g.const_data_ptr<scalar_t>(), u.const_data_ptr<scalar_t>(),
                                     gz.mutable_data_ptr<scalar_t>(), lam_rows.const_data_ptr<double>(),
                                     glam_items.mutable_data_ptr<double>(), l, anchored, stream);
      FK_CUDA_KERNEL_LAUNCH_CHECK();
    });
  }
  return {gz, reduce_lam_grad(glam_items, l, lam, leading_sizes(u, u.dim() - 1))};
}

STABLE_TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) {
  m.impl("prox_tv1d", TORCH_BOX(&prox_tv1d_cuda));
  m.impl("prox_tv1d_backward", TORCH_BOX(&prox_tv1d_backward_cuda));
}

}  // namespace fedkernels
