// Host-only: write an output row that is not read again soon with non-temporal stores. A normal
// store first reads each line for ownership, so a row written once costs a read and a write of
// memory; streaming it costs the write only. Call stream_store_fence() before other threads may
// read the rows.
#pragma once

#include <cstdint>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace fedkernels {

// True where T rows can be streamed here (float and double on x86-64; elsewhere plain stores).
template <typename T>
constexpr bool can_stream_store() {
#if defined(__SSE2__)
  return std::is_same_v<T, float> || std::is_same_v<T, double>;
#else
  return false;
#endif
}

// dst[k] = src[k] for k in [0, d): plain stores up to the first 16-byte boundary of dst and after
// the last one, 16-byte non-temporal stores between. src is a row just computed (in L1).
template <typename T>
inline void stream_copy_row(T* __restrict__ dst, const T* __restrict__ src, int64_t d) {
  int64_t k = 0;
#if defined(__SSE2__)
  if constexpr (can_stream_store<T>()) {
    constexpr int64_t kLanes = 16 / sizeof(T);
    for (; k < d && (reinterpret_cast<uintptr_t>(dst + k) & 15) != 0; ++k) dst[k] = src[k];
    for (; k + kLanes <= d; k += kLanes) {
      if constexpr (std::is_same_v<T, float>) {
        _mm_stream_ps(dst + k, _mm_loadu_ps(src + k));
      } else {
        _mm_stream_pd(dst + k, _mm_loadu_pd(src + k));
      }
    }
  }
#endif
  for (; k < d; ++k) dst[k] = src[k];
}

// Order this thread's streamed stores before what follows (streaming stores are weakly ordered).
inline void stream_store_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace fedkernels
