// Host/device qualifiers: the per-item math in each family header compiles for CPU and CUDA.
#pragma once

#if defined(__CUDACC__)
#define FK_HOST_DEVICE __host__ __device__
#define FK_INLINE __forceinline__
#else
#define FK_HOST_DEVICE
#define FK_INLINE inline
#endif
