// The CUDA side of the stable-ABI launchers (the _cuda.cpp units): the current stream of a tensor's
// device, a guard that makes that device current, and the check after a launch. In CUDA builds they
// go through torch's C shim (libtorch_cuda); the emulator (FK_CUDA_EMU, docs/emulator.md) supplies
// its own, with one emulated device and a null stream.
#pragma once

#include <cuda_runtime_api.h>

#include "common/stable/check.h"
#include "common/stable/tensor.h"

#if defined(FK_CUDA_EMU)
#include <c10/cuda/CUDAException.h>  // the emulator's stand-in
#else
#ifndef USE_CUDA
// The shim declares its CUDA functions only under USE_CUDA, and any stable header includes it first.
#error "define USE_CUDA for every unit of a CUDA build (cmake/stable_ops.cmake does)"
#endif
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/macros.h>
#endif

namespace fedkernels {

#if defined(FK_CUDA_EMU)

inline cudaStream_t current_cuda_stream(const Tensor&) { return nullptr; }

class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(const Tensor&) {}
};

#define FK_CUDA_KERNEL_LAUNCH_CHECK() C10_CUDA_KERNEL_LAUNCH_CHECK()

#else

// The stream torch runs work on for t's device now (what c10::cuda::getCurrentCUDAStream returns).
inline cudaStream_t current_cuda_stream(const Tensor& t) {
  void* stream = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(t.get_device_index(), &stream));
  return static_cast<cudaStream_t>(stream);
}

// Makes t's device the current CUDA device for the guard's lifetime (c10::cuda::CUDAGuard).
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(const Tensor& t) {
    STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_create_cuda_guard(t.get_device_index(), &guard_));
  }
  ~CudaDeviceGuard() { aoti_torch_delete_cuda_guard(guard_); }
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  CUDAGuardHandle guard_ = nullptr;
};

#define FK_CUDA_KERNEL_LAUNCH_CHECK() STD_CUDA_KERNEL_LAUNCH_CHECK()

#endif

}  // namespace fedkernels
