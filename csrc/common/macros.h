// Host/device qualifiers: the per-item math in each family header compiles for CPU and CUDA.
#pragma once

#if defined(__CUDACC__)
#define FK_HOST_DEVICE __host__ __device__
#define FK_INLINE __forceinline__
#else
#define FK_HOST_DEVICE
// Forced on the host too, as on the device: GCC's own choice depends on the caller's unit, and a
// per-item function left out of line in a kernel's inner loop costs a call per item.
#define FK_INLINE inline __attribute__((always_inline))
#endif
