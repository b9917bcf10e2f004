// Emulator stand-in for c10/cuda/CUDAStream.h: the current stream is a null handle.
#pragma once

#include <c10/core/Device.h>

#include "emu/runtime/runtime.h"

namespace c10::cuda {

struct CUDAStream {
  operator cudaStream_t() const { return nullptr; }
  cudaStream_t stream() const { return nullptr; }
};

inline CUDAStream getCurrentCUDAStream(c10::DeviceIndex = -1) { return {}; }

}  // namespace c10::cuda
