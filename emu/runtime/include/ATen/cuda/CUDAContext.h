// Emulator stand-in for ATen/cuda/CUDAContext.h: the current stream is a null handle.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>

#include "emu/runtime/runtime.h"

namespace at::cuda {

struct CUDAStream {
  operator cudaStream_t() const { return nullptr; }
  cudaStream_t stream() const { return nullptr; }
};

inline CUDAStream getCurrentCUDAStream(c10::DeviceIndex = -1) { return {}; }

}  // namespace at::cuda
