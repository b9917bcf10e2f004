// Emulator stand-in for cub::BlockReduce with CUB's default algorithm (BLOCK_REDUCE_WARP_REDUCTIONS)
// and its order of additions: each warp folds its lanes with shfl_down at offsets 1, 2, 4, 8, 16
// (lane + other), lane 0 of every warp stores the warp's aggregate, and after a barrier thread 0
// adds the aggregates of warps 1, 2, ... to warp 0's in order. The result is valid in thread 0.
// Only full blocks of BLOCK_DIM_X threads (a multiple of 32) are modelled.
#pragma once

#include "emu/runtime/runtime.h"

namespace cub {

template <typename T, int BLOCK_DIM_X, int ALGORITHM = 0, int BLOCK_DIM_Y = 1, int BLOCK_DIM_Z = 1, int PTX_ARCH = 0>
class BlockReduce {
  static constexpr int kThreads = BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z;
  static constexpr int kWarps = kThreads / 32;
  static_assert(kThreads % 32 == 0, "the emulator's BlockReduce models whole warps only");

 public:
  struct TempStorage {
    T warp_aggregates[kWarps];
  };

  explicit BlockReduce(TempStorage& storage) : storage_(storage) {}

  template <typename ReductionOp>
  T Reduce(T input, ReductionOp op) {
    const int tid = static_cast<int>(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
    const int lane = tid % 32, warp = tid / 32;
    for (int offset = 1; offset < 32; offset *= 2) {
      const T other = __shfl_down_sync(0xffffffffu, input, offset);
      if (lane + offset < 32) input = op(input, other);
    }
    if (lane == 0) storage_.warp_aggregates[warp] = input;
    __syncthreads();
    if (tid == 0)
      for (int w = 1; w < kWarps; ++w) input = op(input, storage_.warp_aggregates[w]);
    return input;
  }

  T Sum(T input) {
    return Reduce(input, [](const T& a, const T& b) { return a + b; });
  }

 private:
  TempStorage& storage_;
};

}  // namespace cub
