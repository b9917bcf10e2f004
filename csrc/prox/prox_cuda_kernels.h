// The CUDA kernels of prox_tv1d, launched on raw pointers: the whole interface between prox_cuda.cu
// (the kernels, which nvcc compiles without any torch header) and prox_cuda.cpp (the stable-ABI launchers).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "prox/prox.h"

namespace fedkernels {

// One thread per item: u = prox(z) of each item, bad[item] = 1 where a value was not finite.
// scratch: 2 (l.block + 1) points per item. T: float or double.
template <typename T>
void launch_tv1d(const T* z, T* u, const double* lam_rows, TvPoint* scratch, uint8_t* bad, TvLayout l, bool anchored,
                 cudaStream_t stream);

// One thread per item: gz and the item's lambda gradient glam[item].
template <typename T>
void launch_tv1d_backward(const T* g, const T* u, T* gz, const double* lam_rows, double* glam, TvLayout l,
                          bool anchored, cudaStream_t stream);

}  // namespace fedkernels
