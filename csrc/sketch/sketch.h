// Per-item math of the sketching family (FedMLH), shared by the CPU and CUDA launchers.
// Each function takes (start, stride) so a CPU caller runs it with (0, 1) and a CUDA block with
// (threadIdx.x, blockDim.x); the arithmetic is the same either way.
#pragma once

#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/macros.h"

namespace fedkernels {

// The accumulation type of scalar_t: at::opmath_type's for the dtypes the sketch ops dispatch
// (float for half/bfloat16), defined here so the CUDA kernels compile without ATen headers.
template <typename scalar_t>
struct SketchAcc {
  using type = scalar_t;
};
template <>
struct SketchAcc<c10::Half> {
  using type = float;
};
template <>
struct SketchAcc<c10::BFloat16> {
  using type = float;
};
template <typename scalar_t>
using sketch_acc_t = typename SketchAcc<scalar_t>::type;

// label_hash, step 1 for sample n: zero its R rows of B buckets in out [R, N, B].
FK_HOST_DEVICE FK_INLINE void label_hash_zero(uint8_t* out, int64_t n, int64_t num_samples, int64_t num_tables,
                                              int64_t num_buckets, int64_t start, int64_t stride) {
  for (int64_t k = start; k < num_tables * num_buckets; k += stride) {
    const int64_t j = k / num_buckets, b = k % num_buckets;
    out[(j * num_samples + n) * num_buckets + b] = 0;
  }
}

// label_hash, step 2 for sample n: out[j, n, table[l, j]] = 1 for each of its labels l.
FK_HOST_DEVICE FK_INLINE void label_hash_set(uint8_t* out, const int64_t* labels, int64_t num_labels,
                                             const int32_t* table, int64_t n, int64_t num_samples, int64_t num_tables,
                                             int64_t num_buckets, int64_t start, int64_t stride) {
  for (int64_t k = start; k < num_labels * num_tables; k += stride) {
    const int64_t i = k / num_tables, j = k % num_tables;
    const int32_t bucket = table[labels[i] * num_tables + j];
    out[(j * num_samples + n) * num_buckets + bucket] = 1;
  }
}

}  // namespace fedkernels

// ---------------------------------------------------------------------------------------------
// Bucket merging (bucket_merge, bucket_merge_topk) and count-sketch queries.
// A "source row" is R bucket rows of B values, table j's row at `src + j * table_stride`:
//   bucket_merge:        src = logp + n * B,      table_stride = N * B   (logp is [R, N, B])
//   count_sketch_query:  src = M + row * R * B,   table_stride = B       (M is [..., R, B])
// Values are read as scalar_t and reduced in acc_t (float for half/bfloat16).

namespace fedkernels {

enum SketchReduce : int64_t { kReduceMean = 0, kReduceMedian = 1, kReduceSum = 2 };

// The median keeps the R values of one class in registers/stack; this bounds R for it.
constexpr int64_t kMaxMedianTables = 64;

template <typename T>
FK_HOST_DEVICE FK_INLINE bool fk_isnan(T v) {
  return v != v;
}

// An integer whose order is the float order of x (non-NaN; -0 and +0 map to the same key), so
// comparisons of keys compile without branches.
template <typename acc_t>
struct OrderKeyInt;
template <>
struct OrderKeyInt<float> {
  using type = int32_t;
};
template <>
struct OrderKeyInt<double> {
  using type = int64_t;
};

template <typename acc_t>
FK_HOST_DEVICE FK_INLINE typename OrderKeyInt<acc_t>::type order_key(acc_t x) {
  using I = typename OrderKeyInt<acc_t>::type;
  constexpr int kSignBit = 8 * sizeof(I) - 1;
  x += acc_t(0);  // -0 + 0 = +0: the two zeros compare equal, so they must share a key
  I u;
  memcpy(&u, &x, sizeof(u));
  return u ^ ((u >> kSignBit) & ~(I(1) << kSignBit));  // negatives: flip the magnitude bits
}

// Median of v[0..r). NaN propagates as in torch.median (the first NaN is returned); an even
// count gives the mean of the two middle values. The values picked are those a stable ascending
// sort puts at positions m - 1 and m (ties rank by index), found with branch-free ranks: a sort
// of random values mispredicts about half its comparisons (much slower at small R).
// kR > 0 fixes r at compile time so the rank loops unroll (faster for small R); 0 reads r.
template <int64_t kR, typename acc_t>
FK_HOST_DEVICE FK_INLINE acc_t median_of(const acc_t* v, int64_t r_runtime) {
  using I = typename OrderKeyInt<acc_t>::type;
  const int64_t r = kR > 0 ? kR : r_runtime;
  for (int64_t j = 0; j < r; ++j) {
    if (fk_isnan(v[j])) return v[j];
  }
  I key[kR > 0 ? kR : kMaxMedianTables];
  for (int64_t j = 0; j < r; ++j) key[j] = order_key(v[j]);
  const int64_t m = r / 2;
  int64_t lo = 0, hi = 0;
  for (int64_t i = 0; i < r; ++i) {
    int64_t rank = 0;
    for (int64_t j = 0; j < r; ++j) rank += (key[j] < key[i]) | ((key[j] == key[i]) & (j < i));
    lo += i * (rank == m - 1);  // arithmetic, not a select: compilers turn selects into branches
    hi += i * (rank == m);
  }
  return (r % 2 == 1) ? v[hi] : (v[lo] + v[hi]) * acc_t(0.5);
}

// The value table j contributes for one class: src[j, trow[j]], times its sign when signs are given.
template <typename scalar_t, typename acc_t>
FK_HOST_DEVICE FK_INLINE acc_t table_value(const scalar_t* src, int64_t table_stride, const int32_t* trow,
                                           const int8_t* srow, int64_t j) {
  const acc_t v = static_cast<acc_t>(src[j * table_stride + trow[j]]);
  return (srow != nullptr && srow[j] < 0) ? -v : v;
}

// score of one class: reduce_j sign_j * src[j, trow[j]]. Mean and sum add tables in order 0..R-1
// starting from 0, so every launcher (and the reference) rounds identically.
template <typename scalar_t, typename acc_t>
FK_HOST_DEVICE FK_INLINE acc_t merge_score(const scalar_t* src, int64_t table_stride, const int32_t* trow,
                                           const int8_t* srow, int64_t r, int64_t reduce) {
  if (reduce == kReduceMedian) {
    acc_t v[kMaxMedianTables];
    for (int64_t j = 0; j < r; ++j) v[j] = table_value<scalar_t, acc_t>(src, table_stride, trow, srow, j);
    switch (r) {  // the paper's R values, unrolled
      case 2:
        return median_of<2>(v, r);
      case 3:
        return median_of<3>(v, r);
      case 4:
        return median_of<4>(v, r);
      case 5:
        return median_of<5>(v, r);
      case 6:
        return median_of<6>(v, r);
      case 7:
        return median_of<7>(v, r);
      case 8:
        return median_of<8>(v, r);
      default:
        return median_of<0>(v, r);
    }
  }
  acc_t s = acc_t(0);
  for (int64_t j = 0; j < r; ++j) s += table_value<scalar_t, acc_t>(src, table_stride, trow, srow, j);
  return reduce == kReduceMean ? s / static_cast<acc_t>(r) : s;
}

// An upper bound of a mean score knowing only table 0's value v0: tables 1.. replaced by their row
// maxima, added in the same order. Rounded addition is monotone, so score <= bound exactly.
template <typename acc_t>
FK_HOST_DEVICE FK_INLINE acc_t mean_bound(acc_t v0, const acc_t* row_max, int64_t r) {
  acc_t s = acc_t(0);
  s += v0;
  for (int64_t j = 1; j < r; ++j) s += row_max[j];
  return s / static_cast<acc_t>(r);
}

// The same bound knowing the first two tables' values v0, v1 (R >= 2).
template <typename acc_t>
FK_HOST_DEVICE FK_INLINE acc_t mean_bound2(acc_t v0, acc_t v1, const acc_t* row_max, int64_t r) {
  acc_t s = acc_t(0);
  s += v0;
  s += v1;
  for (int64_t j = 2; j < r; ++j) s += row_max[j];
  return s / static_cast<acc_t>(r);
}

// Output order of top-k: a ranks before b. NaN counts as the largest value (as in torch.topk);
// ties go to the smaller class id.
template <typename acc_t>
FK_HOST_DEVICE FK_INLINE bool ranks_before(acc_t va, int64_t ia, acc_t vb, int64_t ib) {
  const bool na = fk_isnan(va), nb = fk_isnan(vb);
  if (na || nb) return na && (!nb || ia < ib);
  return va > vb || (va == vb && ia < ib);
}

// The top-k order as one unsigned integer per value (the CUDA top-k selects on these):
// ranks_before(a, ia, b, ib) holds exactly when topk_key(a) > topk_key(b), or the keys are equal and
// ia < ib. Every NaN gets the largest key (NaN ranks first, whatever its payload); -0 and +0 share
// a key (they compare equal); every other value's key is above 0, so 0 can mark an empty slot.
template <typename acc_t>
struct TopkKeyInt;
template <>
struct TopkKeyInt<float> {
  using type = uint32_t;
};
template <>
struct TopkKeyInt<double> {
  using type = uint64_t;
};

template <typename acc_t>
FK_HOST_DEVICE FK_INLINE typename TopkKeyInt<acc_t>::type topk_key(acc_t x) {
  using U = typename TopkKeyInt<acc_t>::type;
  if (fk_isnan(x)) return ~U(0);
  return static_cast<U>(order_key(x)) ^ (U(1) << (8 * sizeof(U) - 1));  // signed order -> unsigned order
}

// The key of a (scalar_t-rounded) mean score, knowing only table 0's value v0: no class with that v0
// has a larger key. When the bound is +inf or NaN some table may hold +inf, so the score could be
// NaN (inf - inf), which outranks every number: then the largest key, which excludes nothing.
// For a NaN-free row (row_max holds its per-table maxima).
template <typename scalar_t, typename acc_t>
FK_HOST_DEVICE FK_INLINE typename TopkKeyInt<acc_t>::type mean_bound_key(acc_t v0, const acc_t* row_max, int64_t r) {
  using U = typename TopkKeyInt<acc_t>::type;
  const acc_t bound = mean_bound(v0, row_max, r);
  if (!(bound < static_cast<acc_t>(INFINITY))) return ~U(0);
  return topk_key(static_cast<acc_t>(static_cast<scalar_t>(bound)));
}

template <typename scalar_t>
FK_HOST_DEVICE FK_INLINE void heap_swap(scalar_t* vals, int64_t* ids, int64_t a, int64_t b) {
  const scalar_t tv = vals[a];
  vals[a] = vals[b];
  vals[b] = tv;
  const int64_t ti = ids[a];
  ids[a] = ids[b];
  ids[b] = ti;
}

// A heap of (value, id) whose root is the entry ranked last, so it is the one a newcomer must beat.
template <typename scalar_t>
FK_HOST_DEVICE FK_INLINE void heap_sift_down(scalar_t* vals, int64_t* ids, int64_t size, int64_t i) {
  using acc_t = sketch_acc_t<scalar_t>;
  while (true) {
    const int64_t l = 2 * i + 1, rr = l + 1;
    int64_t worst = i;
    if (l < size && ranks_before<acc_t>(vals[worst], ids[worst], vals[l], ids[l])) worst = l;
    if (rr < size && ranks_before<acc_t>(vals[worst], ids[worst], vals[rr], ids[rr])) worst = rr;
    if (worst == i) return;
    heap_swap(vals, ids, i, worst);
    i = worst;
  }
}

template <typename scalar_t>
FK_HOST_DEVICE FK_INLINE void heap_sift_up(scalar_t* vals, int64_t* ids, int64_t i) {
  using acc_t = sketch_acc_t<scalar_t>;
  while (i > 0) {
    const int64_t parent = (i - 1) / 2;
    if (!ranks_before<acc_t>(vals[parent], ids[parent], vals[i], ids[i])) return;
    heap_swap(vals, ids, i, parent);
    i = parent;
  }
}

// Offer class `id` with (already output-rounded) value v to a top-k heap holding `size` entries.
template <typename scalar_t>
FK_HOST_DEVICE FK_INLINE void heap_offer(scalar_t* vals, int64_t* ids, int64_t& size, int64_t k, scalar_t v,
                                         int64_t id) {
  using acc_t = sketch_acc_t<scalar_t>;
  if (size < k) {
    vals[size] = v;
    ids[size] = id;
    heap_sift_up(vals, ids, size);
    ++size;
  } else if (ranks_before<acc_t>(v, id, vals[0], ids[0])) {
    vals[0] = v;
    ids[0] = id;
    heap_sift_down(vals, ids, k, 0);
  }
}

// Turn a full heap into descending output order in place (heapsort: the worst goes last).
template <typename scalar_t>
FK_HOST_DEVICE FK_INLINE void heap_to_sorted(scalar_t* vals, int64_t* ids, int64_t size) {
  for (int64_t end = size - 1; end > 0; --end) {
    heap_swap(vals, ids, 0, end);
    heap_sift_down(vals, ids, end, 0);
  }
}

// Offer classes [l_begin, l_end) of one source row to its top-k heap (vals/ids are the output row).
// row_max (per-table maxima of the row, or nullptr) enables exact pruning for the mean: a class
// whose bound cannot beat the heap's root skips its other R - 1 gathers.
template <typename scalar_t, typename acc_t>
FK_HOST_DEVICE FK_INLINE void merge_topk_range(const scalar_t* src, int64_t table_stride, const int32_t* table,
                                               int64_t r, int64_t reduce, int64_t l_begin, int64_t l_end,
                                               const acc_t* row_max, int64_t k, scalar_t* vals, int64_t* ids,
                                               int64_t& size) {
  for (int64_t l = l_begin; l < l_end; ++l) {
    const int32_t* trow = table + l * r;
    if (size == k && row_max != nullptr) {
      const acc_t v0 = static_cast<acc_t>(src[trow[0]]);
      // Ids only grow, so a newcomer must rank strictly above the root by value to enter.
      if (mean_bound_key<scalar_t, acc_t>(v0, row_max, r) <= topk_key(static_cast<acc_t>(vals[0]))) continue;
    }
    const scalar_t v = static_cast<scalar_t>(merge_score<scalar_t, acc_t>(src, table_stride, trow, nullptr, r, reduce));
    heap_offer(vals, ids, size, k, v, l);
  }
}

// Per-table maxima of one source row, for merge_topk_range; false when the row holds a NaN
// (NaN scores rank first, so pruning by maxima would be wrong there).
template <typename scalar_t, typename acc_t>
FK_HOST_DEVICE FK_INLINE bool row_maxima(const scalar_t* src, int64_t table_stride, int64_t r, int64_t num_buckets,
                                         acc_t* row_max) {
  for (int64_t j = 0; j < r; ++j) {
    const scalar_t* row = src + j * table_stride;
    acc_t m = static_cast<acc_t>(row[0]);
    for (int64_t b = 0; b < num_buckets; ++b) {
      const acc_t v = static_cast<acc_t>(row[b]);
      if (fk_isnan(v)) return false;
      m = v > m ? v : m;
    }
    row_max[j] = m;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// count_sketch and bucket_merge's backward: out[j, b] = sum over classes i with table[i, j] == b
// of sign_j(i) * x[i], each bucket summed in ascending class order from 0, so the CPU scatter and
// the CUDA gather below round identically.

// CPU form: one pass over the classes of one row, scattering into acc[(j - j_begin) * B + b]
// for tables j in [j_begin, j_end). acc must be zeroed.
template <typename scalar_t, typename acc_t>
FK_HOST_DEVICE FK_INLINE void count_sketch_scatter(const scalar_t* x, int64_t p, const int32_t* table,
                                                   const int8_t* signs, int64_t r, int64_t j_begin, int64_t j_end,
                                                   int64_t num_buckets, acc_t* acc) {
  for (int64_t i = 0; i < p; ++i) {
    const acc_t xi = static_cast<acc_t>(x[i]);
    for (int64_t j = j_begin; j < j_end; ++j) {
      const acc_t v = (signs != nullptr && signs[i * r + j] < 0) ? -xi : xi;
      acc[(j - j_begin) * num_buckets + table[i * r + j]] += v;
    }
  }
}

// CUDA form: one bucket's classes from the inverse table (CSR, ascending class ids; a negative
// entry c means class ~c with sign -1).
template <typename scalar_t, typename acc_t>
FK_HOST_DEVICE FK_INLINE acc_t count_sketch_gather(const scalar_t* x, const int32_t* members, int64_t begin,
                                                   int64_t end) {
  acc_t s = acc_t(0);
  for (int64_t e = begin; e < end; ++e) {
    const int32_t c = members[e];
    s += c < 0 ? -static_cast<acc_t>(x[~c]) : static_cast<acc_t>(x[c]);
  }
  return s;
}

}  // namespace fedkernels
