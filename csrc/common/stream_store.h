// Host-only: write an output row that is not read again soon with non-temporal stores. A normal
// store first reads each line for ownership, so a row written once costs a read and a write of
// memory; streaming it costs the write only. Call stream_store_fence() before other threads may
// read the rows. x86-64 streams (stream_store_x86.h); other targets store normally (aarch64's
// non-temporal pair stores are not used yet: same results, without the saved reads).
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/stream_store_x86.h"

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

// dst[k] = src[k] for k in [0, d), streamed where can_stream_store<T>(). src is a row just computed (in L1).
template <typename T>
inline void stream_copy_row(T* __restrict__ dst, const T* __restrict__ src, int64_t d) {
#if defined(__SSE2__)
  if constexpr (can_stream_store<T>()) {
    stream_copy_row_sse2(dst, src, d);
    return;
  }
#endif
  for (int64_t k = 0; k < d; ++k) dst[k] = src[k];
}

// Order this thread's streamed stores before what follows (streaming stores are weakly ordered).
inline void stream_store_fence() {
#if defined(__SSE2__)
  stream_store_fence_sse2();
#endif
}

}  // namespace fedkernels
