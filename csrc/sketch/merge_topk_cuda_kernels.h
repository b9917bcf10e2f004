// The CUDA kernels of bucket_merge_topk, launched on raw pointers: the whole interface between
// merge_topk_cuda.cu (the kernels, which nvcc compiles without any torch header) and
// merge_topk_cuda.cpp (the stable-ABI launcher). logp [R, N, B] and table [p, R] are contiguous.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace fedkernels {

// Per-thread list capacities of the fast path (float, half, bfloat16 scores; k <= kLargeK).
constexpr int kSmallK = 8, kLargeK = 32;

// The fast path's launch shape (host side; bench/ops/sketch.py reports it through the emulator's launch record).
struct TopkLaunch {
  int64_t splits, split_len;
  bool stage;
};

TopkLaunch topk_launch(int64_t n_rows, int64_t p, int64_t r, int64_t nb);

// Fast path, pass 1 (topk_scan_kernel): with L.splits == 1 writes vals/ids [N, k]; otherwise the
// sorted k composites of each (row, split) to part [N, L.splits, k]. scalar_t: float, c10::Half,
// c10::BFloat16; KCAP: kSmallK or kLargeK, >= k.
template <typename scalar_t, int KCAP>
void launch_topk_scan(const scalar_t* logp, const int32_t* table, int64_t n_rows, int64_t nb, int64_t p, int64_t r,
                      int64_t reduce, int k, const TopkLaunch& L, scalar_t* vals, int64_t* ids, uint64_t* part,
                      cudaStream_t stream);

// Fast path, pass 2 (topk_merge_kernel, L.splits > 1): merges part into vals/ids [N, k].
template <typename scalar_t, int KCAP>
void launch_topk_merge(const scalar_t* logp, const int32_t* table, int64_t n_rows, int64_t nb, int64_t r,
                       int64_t reduce, int k, const TopkLaunch& L, const uint64_t* part, scalar_t* vals, int64_t* ids,
                       cudaStream_t stream);

// General path (topk_general_kernel): any k <= p, any dtype (also double). vals/ids [N, k].
template <typename scalar_t>
void launch_topk_general(const scalar_t* logp, const int32_t* table, int64_t n_rows, int64_t nb, int64_t p, int64_t r,
                         int64_t reduce, int64_t k, scalar_t* vals, int64_t* ids, cudaStream_t stream);

}  // namespace fedkernels
