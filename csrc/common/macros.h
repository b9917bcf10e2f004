// Host/device qualifiers: the per-item math in each family header compiles for CPU and CUDA.
#pragma once

#if defined(__CUDACC__)
#define FK_HOST_DEVICE __host__ __device__
#define FK_INLINE __forceinline__
#else
#define FK_HOST_DEVICE
#define FK_INLINE inline
#endif

// FK_CPU_AVX2_CLONE on a hot, non-template CPU function (not in a header compiled by nvcc) builds
// it twice, for AVX2 and for baseline x86-64, and picks one at load time (GCC/Clang ifunc). The
// wheel stays portable while machines with AVX2 get 8-wide float loops. FMA is deliberately not
// enabled: contracting a * b + c would round differently from the CUDA kernels and the references.
#if !defined(__CUDACC__) && (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__) && defined(__linux__)
#define FK_CPU_AVX2_CLONE __attribute__((target_clones("avx2", "default")))
#else
#define FK_CPU_AVX2_CLONE
#endif

// FK_CPU_AVX512_CLONE: the same with an AVX-512F build too, for loops that only add or move data
// (so no contraction question) and were measured faster with 64-byte vectors.
#if !defined(__CUDACC__) && (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__) && defined(__linux__)
#define FK_CPU_AVX512_CLONE __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define FK_CPU_AVX512_CLONE
#endif
