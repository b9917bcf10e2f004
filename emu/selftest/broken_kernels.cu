// Kernels for the emulator's own tests: one correct kernel that exercises every warp operation the
// emulator models, and deliberately broken kernels, each of which one detector must catch
// (python_tests/emu/test_selftest.py). Compiled only into the emulated module, never into a
// real CUDA build; registered as torch.ops.fk_emu_selftest.*.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include "sketch/sketch.h"

namespace fk_emu_selftest {

constexpr int kThreads = 64;

// out[t] for each of 64 threads (2 warps): [0] xor-butterfly warp sum, [1] shfl_up(1, width 16),
// [2] shfl_down(3), [3] shfl_sync from lane 5 (width 8), [4] ballot of odd values, [5] any(x > 60),
// [6] all(x >= 0), [7] block sum through shared memory.
__global__ void warp_ops_kernel(const int64_t* x, int64_t* out) {
  __shared__ int64_t slots[kThreads];
  const int t = threadIdx.x;
  const int64_t v = x[t];
  int64_t s = v;
  for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  out[t * 8 + 0] = s;
  out[t * 8 + 1] = __shfl_up_sync(0xffffffffu, v, 1, 16);
  out[t * 8 + 2] = __shfl_down_sync(0xffffffffu, v, 3);
  out[t * 8 + 3] = __shfl_sync(0xffffffffu, v, 5, 8);
  out[t * 8 + 4] = __ballot_sync(0xffffffffu, (v & 1) != 0);
  out[t * 8 + 5] = __any_sync(0xffffffffu, v > 60);
  out[t * 8 + 6] = __all_sync(0xffffffffu, v >= 0);
  slots[t] = v;
  __syncthreads();
  int64_t total = 0;
  for (int k = 0; k < kThreads; ++k) total += slots[k];
  out[t * 8 + 7] = total;
}

// Broken: thread 0 sums slots that the other threads write, with no barrier between.
__global__ void missing_barrier_kernel(const float* x, float* out) {
  __shared__ float slots[kThreads];
  slots[threadIdx.x] = x[threadIdx.x];
  if (threadIdx.x == 0) {
    float s = 0;
    for (int k = 0; k < kThreads; ++k) s += slots[k];
    *out = s;
  }
}

// Broken: slot kThreads - 1 is never written, but every slot is summed.
__global__ void uninitialised_shared_kernel(const float* x, float* out) {
  __shared__ float slots[kThreads];
  if (threadIdx.x + 1 < kThreads) slots[threadIdx.x] = x[threadIdx.x];
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0;
    for (int k = 0; k < kThreads; ++k) s += slots[k];
    *out = s;
  }
}

// Broken: one element past the end of a global buffer of n floats.
__global__ void global_overflow_kernel(float* x, int64_t n) {
  if (threadIdx.x == 0) x[n] = 1.0f;
}

// Broken: one element past the end of a __shared__ array.
__global__ void shared_overflow_kernel(float* out, int64_t past) {
  __shared__ float slots[kThreads];
  slots[threadIdx.x] = 1.0f;
  __syncthreads();
  if (threadIdx.x == 0) slots[kThreads - 1 + past] = 2.0f;
  __syncthreads();
  out[threadIdx.x] = slots[threadIdx.x];
}

// Broken: the two halves of the block wait at different __syncthreads.
__global__ void divergent_barrier_kernel(float* out) {
  if (threadIdx.x < kThreads / 2) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1.0f;
}

// Broken: lane 0 waits for the block while lanes 1-31 wait for lane 0 in a warp barrier.
__global__ void deadlock_kernel(float* out) {
  if (threadIdx.x == 0)
    __syncthreads();
  else
    __syncwarp();
  out[threadIdx.x] = 1.0f;
}

// Broken: lanes 16-31 exit, lanes 0-15 shuffle with a full-warp mask.
__global__ void shuffle_exited_lane_kernel(const float* x, float* out) {
  if (threadIdx.x >= 16) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, x[threadIdx.x], 1);
}

// label_hash's kernel with its one __syncthreads() deleted: a thread may zero a row after another
// thread set a label in it. Only some thread orders show it.
__global__ void label_hash_no_barrier_kernel(uint8_t* out, const int64_t* indptr, const int64_t* labels,
                                             const int32_t* table, int64_t n_samples, int64_t r, int64_t b) {
  const int64_t n = blockIdx.x;
  fedkernels::label_hash_zero(out, n, n_samples, r, b, threadIdx.x, blockDim.x);
  fedkernels::label_hash_set(out, labels + indptr[n], indptr[n + 1] - indptr[n], table, n, n_samples, r, b, threadIdx.x,
                             blockDim.x);
}

at::Tensor warp_ops(const at::Tensor& x) {
  TORCH_CHECK(x.numel() == kThreads && x.scalar_type() == at::kLong && x.is_contiguous());
  auto out = at::empty({kThreads, 8}, x.options());
  warp_ops_kernel<<<1, kThreads>>>(x.data_ptr<int64_t>(), out.data_ptr<int64_t>());
  return out;
}

at::Tensor block_sum(const at::Tensor& x, int64_t variant) {
  TORCH_CHECK(x.numel() == kThreads && x.scalar_type() == at::kFloat && x.is_contiguous());
  auto out = at::zeros({}, x.options());
  if (variant == 0)
    missing_barrier_kernel<<<1, kThreads>>>(x.data_ptr<float>(), out.data_ptr<float>());
  else
    uninitialised_shared_kernel<<<1, kThreads>>>(x.data_ptr<float>(), out.data_ptr<float>());
  return out;
}

void overflow(at::Tensor x, int64_t where) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && x.is_contiguous());
  if (where == 0)
    global_overflow_kernel<<<1, 32>>>(x.data_ptr<float>(), x.numel());
  else
    shared_overflow_kernel<<<1, kThreads>>>(x.data_ptr<float>(), 1);
}

void barrier_misuse(at::Tensor x, int64_t variant) {
  TORCH_CHECK(x.numel() >= kThreads && x.scalar_type() == at::kFloat && x.is_contiguous());
  if (variant == 0)
    divergent_barrier_kernel<<<1, kThreads>>>(x.data_ptr<float>());
  else if (variant == 1)
    deadlock_kernel<<<1, 32>>>(x.data_ptr<float>());
  else
    shuffle_exited_lane_kernel<<<1, 32>>>(x.data_ptr<float>(), x.data_ptr<float>());
}

at::Tensor label_hash_no_barrier(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& table,
                                 int64_t num_buckets) {
  const int64_t n = indptr.numel() - 1, r = table.size(1);
  auto out = at::empty({r, n, num_buckets}, indices.options().dtype(at::kByte));
  label_hash_no_barrier_kernel<<<static_cast<unsigned>(n), 256>>>(out.data_ptr<uint8_t>(), indptr.data_ptr<int64_t>(),
                                                                  indices.data_ptr<int64_t>(),
                                                                  table.data_ptr<int32_t>(), n, r, num_buckets);
  return out;
}

TORCH_LIBRARY(fk_emu_selftest, m) {
  m.def("warp_ops(Tensor x) -> Tensor", &warp_ops);
  m.def("block_sum(Tensor x, int variant) -> Tensor", &block_sum);
  m.def("overflow(Tensor(a!) x, int where) -> ()", &overflow);
  m.def("barrier_misuse(Tensor(a!) x, int variant) -> ()", &barrier_misuse);
  m.def("label_hash_no_barrier(Tensor indptr, Tensor indices, Tensor table, int num_buckets) -> Tensor",
        &label_hash_no_barrier);
}

}  // namespace fk_emu_selftest
