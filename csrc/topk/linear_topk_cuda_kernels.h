// The CUDA kernels of linear_topk, launched on raw pointers: the whole interface between
// linear_topk_cuda.cu (the kernels and their tiling, which nvcc compiles without any torch header) and
// linear_topk_cuda.cpp (the stable-ABI launcher: checks, allocation, the GEMM of each tile).
// Lists of composites (topk.h) are [n_rows, splits, k] uint64, descending, 0 = an empty slot.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace fedkernels {

// Classes per tile for n rows and p classes (a multiple of the kernels' segment; capped by the memory
// of one tile of scores, or set by FEDKERNELS_TOPK_CUDA_TILE). Host only.
int64_t linear_topk_cuda_tile_cols(int64_t n, int64_t p);

// Items (blocks) per row of each tile, in [1, tile / segment]. Host only.
int64_t linear_topk_cuda_splits(int64_t n, int64_t tile);

// Folds one tile of dot products z [n_rows, cols] (classes col0 .. col0 + cols; bias of the tile or null)
// into best (each row's split lists), through scratch (as large as best).
void launch_linear_topk_tile(const float* z, int64_t n_rows, int64_t cols, int64_t col0, const float* bias, float scale,
                             int64_t k, int64_t splits, uint64_t* best, uint64_t* scratch, cudaStream_t stream);

// Merges each row's split lists into its first (splits > 1).
void launch_linear_topk_merge(int64_t n_rows, int64_t k, int64_t splits, uint64_t* best, uint64_t* scratch,
                              cudaStream_t stream);

// values / indices [n_rows, k] from row n's list best[n * stride .. + k).
void launch_linear_topk_finish(const uint64_t* best, int64_t n_rows, int64_t k, int64_t stride, float* values,
                               int64_t* indices, cudaStream_t stream);

}  // namespace fedkernels
