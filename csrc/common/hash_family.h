// The hash family of docs/design.md §2, shared by the CPU and CUDA kernels.
// Parameters are four uint64 per table (a, b, c, d); buckets and signs use exact 128-bit
// products reduced modulo the Mersenne prime P = 2^61 - 1.
#pragma once

#include <cstdint>

#include "common/macros.h"

namespace fedkernels {

constexpr uint64_t kMersenne61 = (uint64_t(1) << 61) - 1;

// Exact (x * y) mod P for x < 2^64, y < 2^64 with x * y < 2^125.
FK_HOST_DEVICE FK_INLINE uint64_t mul_mod_p61(uint64_t x, uint64_t y) {
#if defined(__CUDA_ARCH__)
  const uint64_t lo = x * y;
  const uint64_t hi = __umul64hi(x, y);
#else
  const unsigned __int128 prod = static_cast<unsigned __int128>(x) * y;
  const uint64_t lo = static_cast<uint64_t>(prod);
  const uint64_t hi = static_cast<uint64_t>(prod >> 64);
#endif
  // v = hi * 2^64 + lo;  v mod P == (v & P) + (v >> 61) mod P, since 2^61 == 1 (mod P).
  const uint64_t low61 = lo & kMersenne61;
  const uint64_t high = (hi << 3) | (lo >> 61);              // v >> 61, < 2^64 since v < 2^125
  uint64_t s = (high & kMersenne61) + (high >> 61) + low61;  // < 2^62 + 2^3
  s = (s & kMersenne61) + (s >> 61);
  return s >= kMersenne61 ? s - kMersenne61 : s;
}

// (a * l + b) mod P with b < P.
FK_HOST_DEVICE FK_INLINE uint64_t affine_mod_p61(uint64_t a, uint64_t b, uint64_t l) {
  uint64_t s = mul_mod_p61(a, l) + b;  // < 2P
  return s >= kMersenne61 ? s - kMersenne61 : s;
}

struct TableParams {
  uint64_t a, b, c, d;
};

FK_HOST_DEVICE FK_INLINE int32_t hash_bucket(const TableParams& t, uint64_t label, uint64_t num_buckets) {
  return static_cast<int32_t>(affine_mod_p61(t.a, t.b, label) % num_buckets);
}

FK_HOST_DEVICE FK_INLINE int8_t hash_sign(const TableParams& t, uint64_t label) {
  return (affine_mod_p61(t.c, t.d, label) & 1u) == 0 ? int8_t(1) : int8_t(-1);
}

// splitmix64: the stream the parameters are drawn from (host only; the server broadcasts a seed).
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    state += 0x9E3779B97F4A7C15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

}  // namespace fedkernels
