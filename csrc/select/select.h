// Per-item math of the partial-weight-exchange family, shared by the CPU and CUDA launchers.
// An item is one fixed-size chunk of one tensor. Functions take (start, stride) so the CPU runs a
// chunk with (0, 1) and a CUDA block with (threadIdx.x, blockDim.x); the arithmetic is the same.
// Tensors of mixed dtypes travel through one work list, so the element type is a runtime tag.
#pragma once

#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#include <cmath>
#include <cstdint>

#include "common/macros.h"

namespace fedkernels {

// Elements per work item. Fixed (never derived from the thread count), so the per-chunk partial
// sums, and therefore the results, are the same whatever the parallelism.
constexpr int64_t kSelectChunk = 8192;
// Independent accumulators per thread: breaks the add dependency chain (and lets the compiler
// use SIMD) while keeping each float32 running sum short (kSelectChunk / kSelectLanes terms).
constexpr int kSelectLanes = 16;

enum class ElemType : int32_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2, kFloat64 = 3 };

// Loads widened to the accumulation type. float16 on the host uses a branchless bit conversion
// that the compiler vectorises (c10::Half's scalar path is far slower there); it is exact, so
// both devices see the same values.
FK_HOST_DEVICE FK_INLINE float widen(float x) { return x; }
FK_HOST_DEVICE FK_INLINE double widen(double x) { return x; }
FK_HOST_DEVICE FK_INLINE float widen(c10::BFloat16 x) { return static_cast<float>(x); }
FK_HOST_DEVICE FK_INLINE float widen(c10::Half x) {
#if defined(__CUDA_ARCH__)
  return static_cast<float>(x);
#else
  const uint32_t w = static_cast<uint32_t>(x.x) << 16;
  const uint32_t sign = w & 0x80000000u, two_w = w + w;
  uint32_t bits;
  float f;
  bits = (two_w >> 4) + (0xE0u << 23);  // normal: rebias the exponent by a multiply
  __builtin_memcpy(&f, &bits, 4);
  const float normalized = f * 0x1.0p-112f;
  bits = (two_w >> 17) | (126u << 23);  // subnormal: place the mantissa under a magic bias
  __builtin_memcpy(&f, &bits, 4);
  const float denormalized = f - 0.5f;
  uint32_t nb, db;
  __builtin_memcpy(&nb, &normalized, 4);
  __builtin_memcpy(&db, &denormalized, 4);
  bits = sign | (two_w < (1u << 27) ? db : nb);
  __builtin_memcpy(&f, &bits, 4);
  return f;
#endif
}

FK_HOST_DEVICE FK_INLINE int64_t num_chunks(int64_t numel) { return (numel + kSelectChunk - 1) / kSelectChunk; }

// Sum over i in [begin, end) (this thread's share: begin + start, step stride) of (a_i - b_i)^2.
// float32 accumulation for float32/16-bit inputs, float64 for float64; lanes combined in float64.
template <typename T, typename Acc>
FK_HOST_DEVICE FK_INLINE double sq_diff_sum_typed(const T* a, const T* b, int64_t begin, int64_t end, int64_t start,
                                                  int64_t stride) {
  Acc acc[kSelectLanes];
  for (int l = 0; l < kSelectLanes; ++l) acc[l] = Acc(0);
  int64_t i = begin + start;
  for (; i + (kSelectLanes - 1) * stride < end; i += kSelectLanes * stride) {
    for (int l = 0; l < kSelectLanes; ++l) {
      const Acc d = widen(a[i + l * stride]) - widen(b[i + l * stride]);
      acc[l] += d * d;
    }
  }
  for (int l = 0; l < kSelectLanes && i < end; i += stride, ++l) {  // fewer than kSelectLanes left
    const Acc d = widen(a[i]) - widen(b[i]);
    acc[l] += d * d;
  }
  double total = 0.0;
  for (int l = 0; l < kSelectLanes; ++l) total += static_cast<double>(acc[l]);
  return total;
}

FK_HOST_DEVICE FK_INLINE double sq_diff_sum(const void* a, const void* b, ElemType type, int64_t begin, int64_t end,
                                            int64_t start, int64_t stride) {
  switch (type) {
    case ElemType::kFloat16:
      return sq_diff_sum_typed<c10::Half, float>(static_cast<const c10::Half*>(a), static_cast<const c10::Half*>(b),
                                                 begin, end, start, stride);
    case ElemType::kBFloat16:
      return sq_diff_sum_typed<c10::BFloat16, float>(static_cast<const c10::BFloat16*>(a),
                                                     static_cast<const c10::BFloat16*>(b), begin, end, start, stride);
    case ElemType::kFloat64:
      return sq_diff_sum_typed<double, double>(static_cast<const double*>(a), static_cast<const double*>(b), begin, end,
                                               start, stride);
    default:
      return sq_diff_sum_typed<float, float>(static_cast<const float*>(a), static_cast<const float*>(b), begin, end,
                                             start, stride);
  }
}

// The norm of one tensor from its per-chunk partial sums, added in chunk order (fixed).
FK_HOST_DEVICE FK_INLINE float norm_from_partials(const double* partials, int64_t count, int64_t numel,
                                                  bool normalize) {
  double s = 0.0;
  for (int64_t c = 0; c < count; ++c) s += partials[c];
  if (normalize) s = numel > 0 ? s / static_cast<double>(numel) : 0.0;
  return static_cast<float>(sqrt(s));
}

// Strict total order of the top-k selection: larger norm first, NaN before every number (as
// torch.sort(descending=True) does), ties to the smaller index.
FK_HOST_DEVICE FK_INLINE bool ranks_before(float norm_i, int64_t i, float norm_j, int64_t j) {
  const bool nan_i = norm_i != norm_i, nan_j = norm_j != norm_j;
  if (nan_i != nan_j) return nan_i;
  if (!nan_i && norm_i != norm_j) return norm_i > norm_j;
  return i < j;
}

// How many tensors the selection keeps: ceil(fraction * M), at least one, at most M. The 1e-9
// slack keeps exact products exact (0.3 * 10 is 3.0000000000000004 in binary, and gives 3).
FK_HOST_DEVICE FK_INLINE int64_t num_selected(int64_t num_tensors, double fraction) {
  if (num_tensors <= 0) return 0;
  int64_t k = static_cast<int64_t>(ceil(fraction * static_cast<double>(num_tensors) - 1e-9));
  return k < 1 ? 1 : (k > num_tensors ? num_tensors : k);
}

// dst_i = sum_m w_m x_m,i over the members (clients in order) for i in this thread's share of
// [begin, end); w holds the weights already divided by their sum.
template <typename T, typename Acc>
FK_HOST_DEVICE FK_INLINE void weighted_sum_typed(T* dst, const T* const* members, const double* w, int64_t n_members,
                                                 int64_t begin, int64_t end, int64_t start, int64_t stride) {
  int64_t i = begin + start;
  for (; i + (kSelectLanes - 1) * stride < end; i += kSelectLanes * stride) {
    Acc acc[kSelectLanes];
    for (int l = 0; l < kSelectLanes; ++l) acc[l] = Acc(0);
    for (int64_t m = 0; m < n_members; ++m) {
      const Acc wm = static_cast<Acc>(w[m]);
      const T* x = members[m];
      for (int l = 0; l < kSelectLanes; ++l) acc[l] += wm * widen(x[i + l * stride]);
    }
    for (int l = 0; l < kSelectLanes; ++l) dst[i + l * stride] = static_cast<T>(acc[l]);
  }
  for (; i < end; i += stride) {
    Acc acc = Acc(0);
    for (int64_t m = 0; m < n_members; ++m) acc += static_cast<Acc>(w[m]) * widen(members[m][i]);
    dst[i] = static_cast<T>(acc);
  }
}

FK_HOST_DEVICE FK_INLINE void weighted_sum(void* dst, const void* const* members, const double* w, int64_t n_members,
                                           ElemType type, int64_t begin, int64_t end, int64_t start, int64_t stride) {
  switch (type) {
    case ElemType::kFloat16:
      weighted_sum_typed<c10::Half, float>(static_cast<c10::Half*>(dst),
                                           reinterpret_cast<const c10::Half* const*>(members), w, n_members, begin, end,
                                           start, stride);
      break;
    case ElemType::kBFloat16:
      weighted_sum_typed<c10::BFloat16, float>(static_cast<c10::BFloat16*>(dst),
                                               reinterpret_cast<const c10::BFloat16* const*>(members), w, n_members,
                                               begin, end, start, stride);
      break;
    case ElemType::kFloat64:
      weighted_sum_typed<double, double>(static_cast<double*>(dst), reinterpret_cast<const double* const*>(members), w,
                                         n_members, begin, end, start, stride);
      break;
    default:
      weighted_sum_typed<float, float>(static_cast<float*>(dst), reinterpret_cast<const float* const*>(members), w,
                                       n_members, begin, end, start, stride);
  }
}

// ---- Items decoded from the packed plans of select_plan.h (the same int64 buffer on both devices).
// Norm plan record per tensor: {new ptr, old ptr, numel, elem type, first chunk}; then chunk owners.
constexpr int64_t kNormRecord = 5;
// Masked plan record per group: {dst ptr, numel, elem type, first chunk, first member, members};
// then member pointers; then chunk owners.
constexpr int64_t kMaskedRecord = 6;

FK_HOST_DEVICE FK_INLINE const void* as_ptr(int64_t bits) { return reinterpret_cast<const void*>(bits); }

// delta_norms item c: the sum of squared differences over chunk c of its tensor.
FK_HOST_DEVICE FK_INLINE double norm_chunk_partial(const int64_t* packed, int64_t num_tensors, int64_t c, int64_t start,
                                                   int64_t stride) {
  const int64_t* rec = packed + packed[num_tensors * kNormRecord + c] * kNormRecord;
  const int64_t begin = (c - rec[4]) * kSelectChunk;
  const int64_t end = begin + kSelectChunk < rec[2] ? begin + kSelectChunk : rec[2];
  return sq_diff_sum(as_ptr(rec[0]), as_ptr(rec[1]), static_cast<ElemType>(rec[3]), begin, end, start, stride);
}

// delta_norms, tensor t: its chunk partials added in chunk order.
FK_HOST_DEVICE FK_INLINE float norm_of_tensor(const int64_t* packed, const double* partials, int64_t t,
                                              bool normalize) {
  const int64_t* rec = packed + t * kNormRecord;
  return norm_from_partials(partials + rec[4], num_chunks(rec[2]), rec[2], normalize);
}

// masked_weighted_average item c: the weighted average of chunk c of its group's dst tensor.
FK_HOST_DEVICE FK_INLINE void masked_chunk(const int64_t* packed, const double* member_weight, int64_t num_groups,
                                           int64_t num_members, int64_t c, int64_t start, int64_t stride) {
  const int64_t* member_ptrs = packed + num_groups * kMaskedRecord;
  const int64_t* rec = packed + member_ptrs[num_members + c] * kMaskedRecord;
  const int64_t begin = (c - rec[3]) * kSelectChunk;
  const int64_t end = begin + kSelectChunk < rec[1] ? begin + kSelectChunk : rec[1];
  weighted_sum(reinterpret_cast<void*>(rec[0]), reinterpret_cast<const void* const*>(member_ptrs + rec[4]),
               member_weight + rec[4], rec[5], static_cast<ElemType>(rec[2]), begin, end, start, stride);
}

}  // namespace fedkernels
