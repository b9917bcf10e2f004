// The x86-64 non-temporal row copy of stream_store.h, in SSE2 (the x86-64 baseline: no runtime
// dispatch needed). Included only by stream_store.h where __SSE2__ is defined.
#pragma once

#if defined(__SSE2__)
#include <emmintrin.h>

#include <cstdint>
#include <type_traits>

namespace fedkernels {

// dst[k] = src[k] for k in [0, d): plain stores up to the first 16-byte boundary of dst and after
// the last one, 16-byte non-temporal stores between.
template <typename T>
inline void stream_copy_row_sse2(T* __restrict__ dst, const T* __restrict__ src, int64_t d) {
  constexpr int64_t kLanes = 16 / sizeof(T);
  int64_t k = 0;
  for (; k < d && (reinterpret_cast<uintptr_t>(dst + k) & 15) != 0; ++k) dst[k] = src[k];
  for (; k + kLanes <= d; k += kLanes) {
    if constexpr (std::is_same_v<T, float>) {
      _mm_stream_ps(dst + k, _mm_loadu_ps(src + k));
    } else {
      _mm_stream_pd(dst + k, _mm_loadu_pd(src + k));
    }
  }
  for (; k < d; ++k) dst[k] = src[k];
}

inline void stream_store_fence_sse2() { _mm_sfence(); }

}  // namespace fedkernels

#endif
