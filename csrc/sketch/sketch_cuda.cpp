// CUDA launchers of label_hash (the torch side): checks, allocation; the kernel is in sketch_cuda.cu.
// Compiled by the host compiler, only in CUDA builds (and the emulator's).

#include "common/stable/alloc.h"
#include "common/stable/cuda.h"
#include "sketch/sketch_checks.h"
#include "sketch/sketch_cuda_kernels.h"

namespace fedkernels {

// Fills out [R, N, B] (validated, contiguous) from contiguous inputs; every byte is written.
static void label_hash_launch(const Tensor& ip, const Tensor& ix, const Tensor& tb, int64_t num_buckets, Tensor& out) {
  const int64_t n_samples = ip.numel() - 1, r = tb.size(1);
  if (n_samples == 0) return;
  FK_CHECK(n_samples <= INT32_MAX, "label_hash: at most 2^31 - 1 samples per call on CUDA");
  launch_label_hash(out.mutable_data_ptr<uint8_t>(), ip.const_data_ptr<int64_t>(), ix.const_data_ptr<int64_t>(),
                    tb.const_data_ptr<int32_t>(), n_samples, r, num_buckets, current_cuda_stream(out));
  FK_CUDA_KERNEL_LAUNCH_CHECK();
}

static Tensor label_hash_cuda(const Tensor& indptr, const Tensor& indices, const Tensor& table, int64_t num_buckets) {
  check_label_hash_args(indptr, indices, table, num_buckets);
  const CudaDeviceGuard guard(indices);
  Tensor out = empty_on(indices, {table.size(1), indptr.numel() - 1, num_buckets}, ScalarType::Byte);
  label_hash_launch(contiguous_or_self(indptr), contiguous_or_self(indices), contiguous_or_self(table), num_buckets,
                    out);
  return out;
}

static Tensor label_hash_out_cuda(const Tensor& indptr, const Tensor& indices, const Tensor& table, int64_t num_buckets,
                                  Tensor out) {
  check_label_hash_args(indptr, indices, table, num_buckets);
  check_label_hash_out(out, indptr, indices, table, num_buckets);
  const CudaDeviceGuard guard(indices);
  label_hash_launch(contiguous_or_self(indptr), contiguous_or_self(indices), contiguous_or_self(table), num_buckets,
                    out);
  return out;
}

STABLE_TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) {
  m.impl("label_hash", TORCH_BOX(&label_hash_cuda));
  m.impl("label_hash.out", TORCH_BOX(&label_hash_out_cuda));
}

}  // namespace fedkernels
