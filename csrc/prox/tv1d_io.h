// Loads, stores and the finiteness test of the direct scan (tv1d_direct.h, tv1d_short_pieces.h):
// float and double rows, converted to double on load and back on store, without the x86 scalar
// conversions' false dependencies.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/macros.h"

#include "prox/tv1d_x86.h"  // x86-64 host code: SSE2 forms, and FK_TV_SSE2

namespace fedkernels {

// True when x is NaN or +-inf (a bit test: cheap, branch-free, and immune to fast-math rewrites).
FK_HOST_DEVICE FK_INLINE bool tv_nonfinite(double x) {
  uint64_t b;
  memcpy(&b, &x, sizeof b);
  return ((b >> 52) & 0x7ff) == 0x7ff;
}

// Whether z[a, b) holds NaN or inf: the exponent field plus one carries into the sign bit only when the
// field is all ones. An or of integers, so the compiler vectorises the loop.
FK_HOST_DEVICE FK_INLINE bool tv_any_nonfinite(const double* z, int64_t a, int64_t b) {
  uint64_t acc = 0;
  for (int64_t i = a; i < b; ++i) {
    uint64_t bits;
    memcpy(&bits, z + i, sizeof bits);
    acc |= (bits & 0x7ff0000000000000ULL) + (1ULL << 52);
  }
  return (acc >> 63) != 0;
}
FK_HOST_DEVICE FK_INLINE bool tv_any_nonfinite(const float* z, int64_t a, int64_t b) {
  uint32_t acc = 0;
  for (int64_t i = a; i < b; ++i) {
    uint32_t bits;
    memcpy(&bits, z + i, sizeof bits);
    acc |= (bits & 0x7f800000U) + (1U << 23);
  }
  return (acc >> 31) != 0;
}

// z[i] as a double. On x86 hosts a plain float -> double conversion (cvtss2sd) merges into its
// destination register, a false dependency that chains loop iterations; tv1d_x86.h converts packed
// from a zeroed register instead. Same value.
FK_HOST_DEVICE FK_INLINE double tv_load(const double* z, int64_t i) { return z[i]; }
FK_HOST_DEVICE FK_INLINE double tv_load(const float* z, int64_t i) {
#if defined(FK_TV_SSE2)
  return tv_load_sse2(z, i);
#else
  return static_cast<double>(z[i]);
#endif
}

// v as a T. On x86 hosts double -> float (cvtsd2ss) has the same false dependency as in tv_load;
// tv1d_x86.h converts packed instead (cvtpd2ps writes the whole register).
template <typename T>
FK_HOST_DEVICE FK_INLINE T tv_cast(double v) {
  return static_cast<T>(v);
}
#if defined(FK_TV_SSE2)
template <>
FK_HOST_DEVICE FK_INLINE float tv_cast<float>(double v) {
  return tv_to_float_sse2(v);
}
#endif

// u[a..b) = v. Runs are short and of random length, so a loop exit per sample mispredicts: write
// four at a time instead, spilling up to three past b when the row has room. The spill is harmless
// because runs are written left to right and every later sample is written again by a later run.
template <typename T>
FK_HOST_DEVICE FK_INLINE void tv_fill(T* u, int64_t a, int64_t b, int64_t n, double v) {
  const T t = tv_cast<T>(v);
  if (b + 3 <= n) {
    for (int64_t i = a; i < b; i += 4) {
      u[i] = t;
      u[i + 1] = t;
      u[i + 2] = t;
      u[i + 3] = t;
    }
  } else {
    for (int64_t i = a; i < b; ++i) u[i] = t;
  }
}

}  // namespace fedkernels
