// The CUDA kernels of knn_classes (and the row norms the loss shares), launched on raw pointers: the
// whole interface between spread_cuda.cu (the kernels, which nvcc compiles without any torch header)
// and the stable-ABI launchers (spread_cuda.cpp, spread_loss_cuda.cpp via spread_cuda_tensor.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace fedkernels {
namespace spread_cuda {

// Float64 norm of every row of a contiguous [c, d] w into norms [c]; c > 0.
// T: float, double, c10::Half or c10::BFloat16.
template <typename T>
void launch_row_norms(const T* w, int64_t c, int64_t d, double* norms, cudaStream_t stream);

// A warp per row of the G tile g [nrows, ncols] (rows row0.., columns col0..): offers the row's keys
// to its candidate list (cand_keys / cand_ids [C, cap], cand_sizes and overflow [C]). ACC: float or double.
template <typename ACC>
void launch_knn_tile_merge(const ACC* g, int64_t row0, int64_t nrows, int64_t col0, int64_t ncols, const ACC* col_term,
                           const double* norms, int64_t d, int metric, double unit_roundoff, double max_norm, int64_t k,
                           int64_t cap, ACC* cand_keys, int64_t* cand_ids, int64_t* cand_sizes, bool* overflow,
                           cudaStream_t stream);

// A warp per row of w [c, d]: the k nearest from its kept candidates (or an exact rescan of an
// overflowed row) into out_dist / out_idx [c, k]; exact [c, cap] is scratch. T as launch_row_norms,
// OUT: double for double T, else float.
template <typename T, typename OUT>
void launch_knn_finalize(const T* w, const double* norms, int64_t c, int64_t d, int metric, int64_t cap,
                         int64_t* cand_ids, const int64_t* cand_sizes, const bool* overflow, double* exact, int64_t k,
                         OUT* out_dist, int64_t* out_idx, cudaStream_t stream);

}  // namespace spread_cuda
}  // namespace fedkernels
