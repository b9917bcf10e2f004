// CUDA launchers of label_hash (ATen side): checks, allocation; the kernel is in sketch_cuda.cu.
// Compiled by the host compiler, only in CUDA builds (and the emulator's).
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <ATen/ops/empty.h>

#include "sketch/sketch_checks.h"
#include "sketch/sketch_cuda_kernels.h"

namespace fedkernels {

// Fills out [R, N, B] (validated, contiguous) from contiguous inputs; every byte is written.
static void label_hash_launch(const at::Tensor& ip, const at::Tensor& ix, const at::Tensor& tb, int64_t num_buckets,
                              at::Tensor& out) {
  const int64_t n_samples = ip.numel() - 1, r = tb.size(1);
  if (n_samples == 0) return;
  TORCH_CHECK(n_samples <= INT32_MAX, "label_hash: at most 2^31 - 1 samples per call on CUDA");
  launch_label_hash(out.data_ptr<uint8_t>(), ip.data_ptr<int64_t>(), ix.data_ptr<int64_t>(), tb.data_ptr<int32_t>(),
                    n_samples, r, num_buckets, c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

static at::Tensor label_hash_cuda(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& table,
                                  int64_t num_buckets) {
  check_label_hash_args(indptr, indices, table, num_buckets);
  const c10::cuda::CUDAGuard guard(indices.device());
  auto out = at::empty({table.size(1), indptr.numel() - 1, num_buckets}, indices.options().dtype(at::kByte));
  label_hash_launch(indptr.contiguous(), indices.contiguous(), table.contiguous(), num_buckets, out);
  return out;
}

static at::Tensor& label_hash_out_cuda(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& table,
                                       int64_t num_buckets, at::Tensor& out) {
  check_label_hash_args(indptr, indices, table, num_buckets);
  check_label_hash_out(out, indptr, indices, table, num_buckets);
  const c10::cuda::CUDAGuard guard(indices.device());
  label_hash_launch(indptr.contiguous(), indices.contiguous(), table.contiguous(), num_buckets, out);
  return out;
}

TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) {
  m.impl("label_hash", &label_hash_cuda);
  m.impl("label_hash.out", &label_hash_out_cuda);
}

}  // namespace fedkernels
