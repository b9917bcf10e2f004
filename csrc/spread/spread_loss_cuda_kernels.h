// The CUDA kernels of the spreadout pair loss, launched on raw pointers: the whole interface between
// spread_loss_cuda.cu (the kernels, which nvcc compiles without any torch header) and
// spread_loss_cuda.cpp (the stable-ABI launchers).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace fedkernels {
namespace spread_cuda {

// A thread per pair: out [c, k] = the CSR pair weight (indptr, indices, values) of (row, idx[row, j]).
void launch_pair_weight_gather(const int64_t* indptr, const int64_t* indices, const float* values, const int64_t* idx,
                               int64_t c, int64_t k, float* out, cudaStream_t stream);

// A warp per row of w [c, d] over its k pairs nbr / weight [c, k]: row_sums [c] (the row's loss terms)
// and coefs [c k] (each pair's gradient coefficient times coef_scale); either may be null.
// T: float, double, c10::Half or c10::BFloat16.
template <typename T>
void launch_pair_terms(const T* w, const int64_t* nbr, const float* weight, const double* norms, int64_t c, int64_t d,
                       int64_t k, int metric, double margin, double coef_scale, double* row_sums, double* coefs,
                       cudaStream_t stream);

// One pass of the ordered sum (spread::block_tree_sum): block b of `blocks` reduces
// x[b chunk, min(n, (b + 1) chunk)) to out[b].
void launch_ordered_sum(const double* x, int64_t n, int64_t chunk, double* out, unsigned blocks, cudaStream_t stream);

// A warp per row t of w [c, d]: grad [c, d] from the pairs' coefs [c k], the row's own pairs nbr [c, k]
// and its reverse pairs rev [c k] within bounds [c + 1]. T as launch_pair_terms.
template <typename T>
void launch_pair_grad(const T* w, const double* norms, const int64_t* nbr, const double* coefs, const int64_t* rev,
                      const int64_t* bounds, int64_t c, int64_t d, int64_t k, int metric, T* grad, cudaStream_t stream);

}  // namespace spread_cuda
}  // namespace fedkernels
