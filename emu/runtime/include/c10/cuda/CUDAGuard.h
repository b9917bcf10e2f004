// Emulator stand-in for c10/cuda/CUDAGuard.h: there is one (emulated) device.
#pragma once

#include <c10/core/Device.h>

namespace c10::cuda {

struct CUDAGuard {
  explicit CUDAGuard(c10::Device) {}
  explicit CUDAGuard(c10::DeviceIndex) {}
};

}  // namespace c10::cuda
