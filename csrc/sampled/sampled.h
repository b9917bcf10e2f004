// Per-item math of the sampled-softmax family (FedSS), shared by the CPU and CUDA launchers:
// the counter-based sampler (one client per item), the online log-sum-exp and softmax gradient
// of linear_cross_entropy (one row per item), and the weighted row mean of scatter_rows_mean
// (one output row per item, columns split by (start, stride)).
#pragma once

#include <cstdint>

#include "common/macros.h"

#include <cmath>

namespace fedkernels {

// ---------------------------------------------------------------------------------------------
// Sampling: splitmix64 as a counter-based generator, so draw i needs no state but (key, i).

// The i-th output of the splitmix64 stream started at `key` (docs/design.md §2's next(), i from 0).
FK_HOST_DEVICE FK_INLINE uint64_t splitmix64_at(uint64_t key, uint64_t i) {
  uint64_t z = key + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The seed client c of a batched call uses: splitmix64_at(seed ^ golden, c), top bit cleared so
// it is a valid (non-negative) int64 seed for the single-client op.
FK_HOST_DEVICE FK_INLINE uint64_t client_seed(uint64_t seed, uint64_t client) {
  return splitmix64_at(seed ^ 0xD1B54A32D192ED03ull, client) & 0x7FFFFFFFFFFFFFFFull;
}

// Exactly uniform integer in [0, n) for n >= 1, by rejection (no modulo bias); advances *counter.
FK_HOST_DEVICE FK_INLINE uint64_t uniform_below(uint64_t key, uint64_t* counter, uint64_t n) {
  const uint64_t threshold = (0 - n) % n;  // 2^64 mod n: values below it would bias the modulo
  for (;;) {
    const uint64_t x = splitmix64_at(key, (*counter)++);
    if (x >= threshold) return x % n;
  }
}

// An open-addressing set of int64 >= 0 (empty slots hold -1); capacity is a power of two > size.
FK_HOST_DEVICE FK_INLINE bool int_set_insert(int64_t* slots, uint64_t capacity, int64_t value) {
  uint64_t h = splitmix64_at(0, static_cast<uint64_t>(value)) & (capacity - 1);
  for (;;) {
    if (slots[h] == value) return false;
    if (slots[h] < 0) {
      slots[h] = value;
      return true;
    }
    h = (h + 1) & (capacity - 1);
  }
}

// Smallest power of two >= 2 * m (the sampler's set capacity, load factor <= 1/2).
FK_HOST_DEVICE FK_INLINE uint64_t sampler_capacity(int64_t m) {
  uint64_t c = 2;
  while (c < 2 * static_cast<uint64_t>(m)) c <<= 1;
  return c;
}

// Complement index r (in [0, K)) -> class id, given shifted[k] = u[k] - k for the U sorted distinct
// positives u: the class is r + #{k : shifted[k] <= r} (shifted is non-decreasing). O(log U).
FK_HOST_DEVICE FK_INLINE int64_t complement_to_class(int64_t r, const int64_t* shifted, int64_t num_pos) {
  int64_t lo = 0, hi = num_pos;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (shifted[mid] <= r)
      lo = mid + 1;
    else
      hi = mid;
  }
  return r + lo;
}

// Floyd's algorithm: m distinct classes uniform over the K = num_classes - U classes that are not
// positives, written to out[0..m) in draw order. slots: sampler_capacity(m) int64, any contents.
// Expected time O(m log U), independent of num_classes.
FK_HOST_DEVICE FK_INLINE void sample_complement(uint64_t key, int64_t num_classes, const int64_t* shifted,
                                                int64_t num_pos, int64_t m, int64_t* slots, int64_t* out) {
  const uint64_t capacity = sampler_capacity(m);
  for (uint64_t i = 0; i < capacity; ++i) slots[i] = -1;
  const int64_t k_total = num_classes - num_pos;
  uint64_t counter = 0;
  for (int64_t i = 0; i < m; ++i) {
    const int64_t j = k_total - m + i;  // Floyd: draw t in [0, j]; take j itself if t was taken
    const int64_t t = static_cast<int64_t>(uniform_below(key, &counter, static_cast<uint64_t>(j) + 1));
    const int64_t r = int_set_insert(slots, capacity, t) ? t : j;
    if (r == j) int_set_insert(slots, capacity, j);
    out[i] = complement_to_class(r, shifted, num_pos);
  }
}

// ---------------------------------------------------------------------------------------------
// linear_cross_entropy: logits z = scale * (h . w_j) + bias_j, one row per item.

// exp and log of the accumulation type (CUDA's math headers give std:: overloads on the device).
template <typename T>
FK_HOST_DEVICE FK_INLINE T fk_exp(T x) {
  return std::exp(x);
}
template <typename T>
FK_HOST_DEVICE FK_INLINE T fk_log(T x) {
  return std::log(x);
}

// Online log-sum-exp state of one row: running max and sum of exp(z - max). T is the
// accumulation type (float for float32/float16/bfloat16 inputs, double for float64).
template <typename T>
struct LseState {
  T max;
  T sum;
};

// Fold (max2, sum2) into st. A -inf max (nothing seen, or only -inf logits) adds nothing.
template <typename T>
FK_HOST_DEVICE FK_INLINE void lse_merge(LseState<T>* st, T max2, T sum2) {
  if (max2 == -INFINITY) return;
  if (st->max == -INFINITY) {
    st->max = max2;
    st->sum = sum2;
    return;
  }
  const T m = st->max > max2 ? st->max : max2;
  st->sum = st->sum * fk_exp(st->max - m) + sum2 * fk_exp(max2 - m);
  st->max = m;
}

// z = scale * (h . w_j) + bias_j over one row chunk, in place on the raw products (bias may be null).
template <typename T>
FK_HOST_DEVICE FK_INLINE void lce_finish_logits(T* z, const T* bias, T scale, int64_t cols, int64_t start,
                                                int64_t stride) {
  for (int64_t j = start; j < cols; j += stride) z[j] = scale * z[j] + (bias != nullptr ? bias[j] : T(0));
}

// Partial (max, sum exp) of z[start], z[start + stride], ... below cols (NaN propagates).
template <typename T>
FK_HOST_DEVICE FK_INLINE LseState<T> lse_of_chunk(const T* z, int64_t cols, int64_t start, int64_t stride) {
  T m = -INFINITY;
  for (int64_t j = start; j < cols; j += stride) m = z[j] > m ? z[j] : m;
  T s = 0;
  if (m != -INFINITY) {
    for (int64_t j = start; j < cols; j += stride) s += fk_exp(z[j] - m);
  } else {
    for (int64_t j = start; j < cols; j += stride) {
      if (z[j] != z[j]) return LseState<T>{z[j], z[j]};  // NaN beside only -inf: keep it visible
    }
  }
  return LseState<T>{m, s};
}

template <typename T>
FK_HOST_DEVICE FK_INLINE T lse_value(const LseState<T>& st) {
  return st.max + fk_log(st.sum);
}

// Per-sample loss lse - z_target (0 when the sample is ignored).
template <typename T>
FK_HOST_DEVICE FK_INLINE T lce_sample_loss(T lse, T target_logit, bool ignored) {
  return ignored ? T(0) : lse - target_logit;
}

// d(g_loss * loss + g_lse * lse) / d z_j for the logits of one row chunk, in place:
// (g_loss + g_lse) p_j - g_loss [j == target], p_j = exp(z_j - lse). target_col is the target's
// column in this chunk, or -1. (The chain factor `scale` takes it to the raw product h . w_j.)
template <typename T>
FK_HOST_DEVICE FK_INLINE void lce_dlogits(T* z, int64_t cols, T lse, T g_loss, T g_lse, int64_t target_col,
                                          int64_t start, int64_t stride) {
  const T coef = g_loss + g_lse;
  for (int64_t j = start; j < cols; j += stride) {
    z[j] = coef * fk_exp(z[j] - lse) - (j == target_col ? g_loss : T(0));
  }
}

// ---------------------------------------------------------------------------------------------
// scatter_rows_mean: out[r] = sum_t w_t src_t / sum_t w_t over the segment of sources of row r,
// summed in the segment's (stable) order: acc = 0 + w x_first, acc += w x for the middle ones,
// out = (acc + w x_last) / sum w (a single source: out = (0 + w x) / sum w). acc has the row's d
// columns; (start, stride) split them. The w here are the row's weights times its scale (below).

// The scale of a row's weights: 1 when its largest weight is at most 1, else 2^-e with e the
// exponent of that weight (frexp), so the scaled weights are < 1. Why: with finite weights such as
// 3e38 and 3e38 the weight sum (or a product w x) overflows and the row would be inf/inf = NaN; with
// weights < 1 no product overflows where x does not, and the sum is at most the source count. A
// weighted mean does not depend on the scale of its weights, and a power of two scales exactly: a
// row gets the same bits as unscaled wherever the unscaled sums neither overflow nor fall into
// subnormals.
template <typename acc_t>
FK_HOST_DEVICE FK_INLINE acc_t row_weight_scale(acc_t max_weight) {
  if (!(max_weight > acc_t(1))) return acc_t(1);
  int e = 0;
  std::frexp(max_weight, &e);  // max_weight = m 2^e, m in [0.5, 1)
  return std::ldexp(acc_t(1), -e);
}

// Row segment [s0, s1) of perm: its weight scale, and the sum of its scaled weights in stable order
// (each weight scaled before it is added, as the row's sums use them). A row with no weight above 1
// takes one pass, as before the scale existed; the others a second one.
template <typename acc_t>
FK_HOST_DEVICE FK_INLINE acc_t row_scaled_weight_sum(const acc_t* w, const int64_t* perm, int64_t s0, int64_t s1,
                                                     acc_t* scale) {
  acc_t mx = 0, sum = 0;
  for (int64_t t = s0; t < s1; ++t) {
    const acc_t v = w[perm[t]];
    mx = v > mx ? v : mx;
    sum += v;
  }
  *scale = row_weight_scale(mx);
  if (*scale == acc_t(1)) return sum;
  sum = 0;
  for (int64_t t = s0; t < s1; ++t) sum += w[perm[t]] * *scale;
  return sum;
}

template <typename acc_t, typename scalar_t>
FK_HOST_DEVICE FK_INLINE void weighted_row_accumulate(acc_t* __restrict__ acc, const scalar_t* __restrict__ src_row,
                                                      acc_t w, int64_t d, int64_t start, int64_t stride) {
  if (stride == 1) {  // the same sums; a unit-stride loop the CPU compiler vectorises
    for (int64_t k = start; k < d; ++k) acc[k] += w * static_cast<acc_t>(src_row[k]);
    return;
  }
  for (int64_t k = start; k < d; k += stride) acc[k] += w * static_cast<acc_t>(src_row[k]);
}

// The first and last sources of a row fused with zeroing acc and with the division: acc = 0 + w x
// (not w x: 0 + -0 is +0, as when acc starts at 0) and out = (acc + w x) / weight_sum. The same
// operations in the same order as zero, accumulate all, divide: the same bits, two passes fewer.
template <typename acc_t, typename scalar_t>
FK_HOST_DEVICE FK_INLINE void weighted_row_first(acc_t* __restrict__ acc, const scalar_t* __restrict__ src_row, acc_t w,
                                                 int64_t d, int64_t start, int64_t stride) {
  for (int64_t k = start; k < d; k += stride) acc[k] = acc_t(0) + w * static_cast<acc_t>(src_row[k]);
}

// One output element of the last source: (acc + w x) / weight_sum. (The CPU's streaming stores
// write these same values.)
template <typename acc_t, typename scalar_t>
FK_HOST_DEVICE FK_INLINE scalar_t weighted_last_value(acc_t acc, scalar_t x, acc_t w, acc_t weight_sum) {
  return static_cast<scalar_t>((acc + w * static_cast<acc_t>(x)) / weight_sum);
}

// One output element of a row with a single source: (0 + w x) / weight_sum.
template <typename acc_t, typename scalar_t>
FK_HOST_DEVICE FK_INLINE scalar_t weighted_only_value(scalar_t x, acc_t w, acc_t weight_sum) {
  return weighted_last_value(acc_t(0), x, w, weight_sum);
}

template <typename acc_t, typename scalar_t>
FK_HOST_DEVICE FK_INLINE void weighted_row_last(scalar_t* __restrict__ out_row, const acc_t* __restrict__ acc,
                                                const scalar_t* __restrict__ src_row, acc_t w, acc_t weight_sum,
                                                int64_t d, int64_t start, int64_t stride) {
  for (int64_t k = start; k < d; k += stride) out_row[k] = weighted_last_value(acc[k], src_row[k], w, weight_sum);
}

// A row with a single source: out = (0 + w x) / weight_sum.
template <typename acc_t, typename scalar_t>
FK_HOST_DEVICE FK_INLINE void weighted_row_only(scalar_t* __restrict__ out_row, const scalar_t* __restrict__ src_row,
                                                acc_t w, acc_t weight_sum, int64_t d, int64_t start, int64_t stride) {
  for (int64_t k = start; k < d; k += stride) out_row[k] = weighted_only_value(src_row[k], w, weight_sum);
}

}  // namespace fedkernels
