// CUDA kernels of linear_cross_entropy: for each class chunk, after the launcher's cuBLAS GEMM built
// the [N, chunk] logit block, a small kernel (one warp per row) folds it into the online log-sum-exp
// (forward) or turns it into d/dlogits (backward). The per-row math is sampled.h's, as on the CPU.
// No torch header: linear_cross_entropy_cuda.cpp runs the GEMMs, allocates and launches.
#include "sampled/linear_cross_entropy_cuda_kernels.h"
#include "sampled/sampled.h"

namespace fedkernels {

constexpr int kWarpsPerBlock = kLceWarpsPerBlock;

template <typename T>
__global__ void lce_forward_chunk_kernel(T* z, const T* bias, T scale, const int64_t* target, int64_t ignore_index,
                                         int64_t n, int64_t c0, int64_t cols, T* run_max, T* run_sum, T* target_logit) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= n) return;
  T* zr = z + r * cols;
  lce_finish_logits(zr, bias, scale, cols, lane, 32);
  __syncwarp();
  LseState<T> part = lse_of_chunk(zr, cols, lane, 32);
  // Fixed butterfly: every lane ends with the same merge of all 32 partials.
  for (int off = 16; off > 0; off >>= 1) {
    const T m2 = __shfl_xor_sync(0xffffffffu, part.max, off);
    const T s2 = __shfl_xor_sync(0xffffffffu, part.sum, off);
    lse_merge(&part, m2, s2);
  }
  if (lane == 0) {
    LseState<T> st{run_max[r], run_sum[r]};
    lse_merge(&st, part.max, part.sum);
    run_max[r] = st.max;
    run_sum[r] = st.sum;
    const int64_t tc = target[r] - c0;
    if (target[r] != ignore_index && tc >= 0 && tc < cols) target_logit[r] = zr[tc];
  }
}

template <typename T>
__global__ void lce_forward_finish_kernel(const T* run_max, const T* run_sum, const T* target_logit,
                                          const int64_t* target, int64_t ignore_index, int64_t n, T* loss, T* lse) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= n) return;
  lse[r] = lse_value(LseState<T>{run_max[r], run_sum[r]});
  loss[r] = lce_sample_loss(lse[r], target_logit[r], target[r] == ignore_index);
}

template <typename T>
__global__ void lce_backward_chunk_kernel(T* z, const T* bias, T scale, const int64_t* target, int64_t ignore_index,
                                          int64_t n, int64_t c0, int64_t cols, const T* lse, const T* g_loss,
                                          const T* g_lse) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= n) return;
  T* zr = z + r * cols;
  lce_finish_logits(zr, bias, scale, cols, lane, 32);
  const int64_t tc = target[r] != ignore_index ? target[r] - c0 : -1;
  lce_dlogits(zr, cols, lse[r], g_loss[r], g_lse[r], tc, lane, 32);
}

// The launcher has checked n <= INT32_MAX * kWarpsPerBlock.
static unsigned row_blocks(int64_t n) { return static_cast<unsigned>((n + kWarpsPerBlock - 1) / kWarpsPerBlock); }

template <typename T>
void launch_lce_forward_chunk(T* z, const T* bias, T scale, const int64_t* target, int64_t ignore_index, int64_t n,
                              int64_t c0, int64_t cols, T* run_max, T* run_sum, T* target_logit, cudaStream_t stream) {
  lce_forward_chunk_kernel<T><<<row_blocks(n), kWarpsPerBlock * 32, 0, stream>>>(
      z, bias, scale, target, ignore_index, n, c0, cols, run_max, run_sum, target_logit);
}

template <typename T>
void launch_lce_forward_finish(const T* run_max, const T* run_sum, const T* target_logit, const int64_t* target,
                               int64_t ignore_index, int64_t n, T* loss, T* lse, cudaStream_t stream) {
  lce_forward_finish_kernel<T><<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(
      run_max, run_sum, target_logit, target, ignore_index, n, loss, lse);
}

template <typename T>
void launch_lce_backward_chunk(T* z, const T* bias, T scale, const int64_t* target, int64_t ignore_index, int64_t n,
                               int64_t c0, int64_t cols, const T* lse, const T* g_loss, const T* g_lse,
                               cudaStream_t stream) {
  lce_backward_chunk_kernel<T><<<row_blocks(n), kWarpsPerBlock * 32, 0, stream>>>(z, bias, scale, target, ignore_index,
                                                                                  n, c0, cols, lse, g_loss, g_lse);
}

#define FK_LCE_INSTANTIATE(T)                                                                                        \
  template void launch_lce_forward_chunk<T>(T*, const T*, T, const int64_t*, int64_t, int64_t, int64_t, int64_t, T*, \
                                            T*, T*, cudaStream_t);                                                   \
  template void launch_lce_forward_finish<T>(const T*, const T*, const T*, const int64_t*, int64_t, int64_t, T*, T*, \
                                             cudaStream_t);                                                          \
  template void launch_lce_backward_chunk<T>(T*, const T*, T, const int64_t*, int64_t, int64_t, int64_t, int64_t,    \
                                             const T*, const T*, const T*, cudaStream_t);
FK_LCE_INSTANTIATE(float)
FK_LCE_INSTANTIATE(double)
#undef FK_LCE_INSTANTIATE

}  // namespace fedkernels
