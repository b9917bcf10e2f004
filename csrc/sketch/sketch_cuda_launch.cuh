// Launch helper of the sketching CUDA kernels: a grid-stride loop over int64 items.
#pragma once

#include <algorithm>
#include <cstdint>

namespace fedkernels {

constexpr int kSketchThreads = 256;

inline unsigned sketch_blocks(int64_t items) {
  return static_cast<unsigned>(std::min<int64_t>((items + kSketchThreads - 1) / kSketchThreads, int64_t(1) << 20));
}

#define FK_GRID_STRIDE(i, n)                                                             \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

}  // namespace fedkernels
