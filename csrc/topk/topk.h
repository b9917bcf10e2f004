// Per-item math of linear_topk, shared by the CPU and CUDA launchers: the score of one (row, class)
// pair from its dot product, and the one integer order in which the top k is selected.
//
// Order: a score ranks before another when it is larger; NaN ranks above every number (as in
// torch.topk), -0 and +0 are equal, and equal scores (NaNs among themselves included) rank by the
// smaller class id. topk_composite() turns (score, id) into a uint64 whose unsigned order is exactly
// that order, so every selection below is "the k largest composites", a set that does not depend on
// the order in which candidates are offered (tiles, threads, blocks): that is what makes the result
// the same for any thread count and on both devices (given the same scores).
#pragma once

#include <cstdint>
#include <cstring>

#include "common/macros.h"

namespace fedkernels {
namespace topk {

// Class ids must fit in 31 bits: the composite stores ~id in its low 32 bits, which is then >= 2^31,
// so no composite is 0 and 0 marks an empty slot.
constexpr int64_t kMaxClasses = (int64_t{1} << 31) - 1;
constexpr uint64_t kEmpty = 0;

// The float's order as an unsigned key: NaN (any payload) is the largest key, -0 and +0 share one,
// every other key is > 0 and < the NaN key.
FK_HOST_DEVICE FK_INLINE uint32_t score_key(float x) {
  if (x != x) return 0xFFFFFFFFu;
  x += 0.0f;  // -0 + 0 = +0: equal values share a key
  uint32_t u;
  memcpy(&u, &x, sizeof(u));
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // negatives: reverse the magnitude order
}

// The score a key stands for (NaN for the NaN key; +0 for both zeros).
FK_HOST_DEVICE FK_INLINE float key_score(uint32_t key) {
  if (key == 0xFFFFFFFFu) {
    const uint32_t qnan = 0x7FC00000u;
    float f;
    memcpy(&f, &qnan, sizeof(f));
    return f;
  }
  const uint32_t u = (key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key;
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

// (score, id) as one integer: larger means ranks before (id in [0, kMaxClasses]).
FK_HOST_DEVICE FK_INLINE uint64_t composite(float score, int64_t id) {
  return (static_cast<uint64_t>(score_key(score)) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(id));
}
FK_HOST_DEVICE FK_INLINE float composite_score(uint64_t c) { return key_score(static_cast<uint32_t>(c >> 32)); }
FK_HOST_DEVICE FK_INLINE int64_t composite_id(uint64_t c) { return static_cast<int64_t>(~static_cast<uint32_t>(c)); }

// The score of a pair from its float32 dot product: scale * dot rounded, then + bias rounded (never
// fused, so every launcher rounds alike).
FK_HOST_DEVICE FK_INLINE float finish_score(float dot, float scale, const float* bias, int64_t j) {
  const float s = scale * dot;
  return bias != nullptr ? s + bias[j] : s;
}

// A min-heap of composites (the root, h[0], is the smallest kept: the k-th best once full). Offering
// a composite keeps the `cap` largest ever offered, whatever the order of the offers.
FK_HOST_DEVICE FK_INLINE void heap_sift_down(uint64_t* h, int64_t size, int64_t i) {
  const uint64_t v = h[i];
  while (true) {
    const int64_t l = 2 * i + 1;
    if (l >= size) break;
    const int64_t c = (l + 1 < size && h[l + 1] < h[l]) ? l + 1 : l;
    if (h[c] >= v) break;
    h[i] = h[c];
    i = c;
  }
  h[i] = v;
}

FK_HOST_DEVICE FK_INLINE void heap_offer(uint64_t* h, int64_t& size, int64_t cap, uint64_t c) {
  if (size < cap) {
    int64_t i = size++;
    while (i > 0) {  // sift up
      const int64_t parent = (i - 1) / 2;
      if (h[parent] <= c) break;
      h[i] = h[parent];
      i = parent;
    }
    h[i] = c;
  } else if (cap > 0 && c > h[0]) {
    h[0] = c;
    heap_sift_down(h, size, 0);
  }
}

}  // namespace topk
}  // namespace fedkernels
