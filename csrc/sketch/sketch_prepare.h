// Host-side preparation shared by the CPU and CUDA launchers: validate, make inputs contiguous,
// allocate the output. The launchers then only run their kernels.
#pragma once

#include <ATen/OpMathType.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <type_traits>

#include "sketch/sketch_checks.h"

namespace fedkernels {

// The CUDA kernels accumulate in sketch_acc_t (sketch.h), the CPU launchers in at::opmath_type: the same types.
static_assert(std::is_same_v<sketch_acc_t<float>, at::opmath_type<float>> &&
              std::is_same_v<sketch_acc_t<double>, at::opmath_type<double>> &&
              std::is_same_v<sketch_acc_t<c10::Half>, at::opmath_type<c10::Half>> &&
              std::is_same_v<sketch_acc_t<c10::BFloat16>, at::opmath_type<c10::BFloat16>>);

// bucket_merge / bucket_merge_topk: logp [R, N, B], table [p, R].
struct MergeArgs {
  at::Tensor logp, table;
  int64_t reduce, r, n_rows, nb, p;
};

inline MergeArgs prepare_merge(const at::Tensor& logp, const at::Tensor& table, c10::string_view reduce_name) {
  const int64_t reduce = parse_reduce(reduce_name);
  check_merge_args(logp, table, reduce);
  return {logp.contiguous(), table.contiguous(), reduce, logp.size(0), logp.size(1), logp.size(2), table.size(0)};
}

// The CPU launchers of bucket_merge and bucket_merge_topk: rows per at::parallel_for task, about
// 64 Ki (class, table) reads each.
inline int64_t merge_row_grain(int64_t work_per_row) {
  return std::max<int64_t>(1, 65536 / std::max<int64_t>(1, work_per_row));
}

inline std::tuple<at::Tensor, at::Tensor> alloc_topk(const MergeArgs& a, int64_t k) {
  check_topk_k(k, a.p);
  return {at::empty({a.n_rows, k}, a.logp.options()), at::empty({a.n_rows, k}, a.logp.options().dtype(at::kLong))};
}

// count_sketch: x [..., p] viewed as [rows, p]; out [..., R, B].
struct CountSketchArgs {
  at::Tensor x2d, table, signs, out;
};

inline CountSketchArgs prepare_count_sketch(const at::Tensor& x, const at::Tensor& table, const at::Tensor& signs,
                                            int64_t num_buckets) {
  check_count_sketch_args(x, table, signs, num_buckets);
  const int64_t p = table.size(0), r = table.size(1);
  auto shape = x.sizes().vec();
  shape.back() = r;
  shape.push_back(num_buckets);
  auto out = at::empty(shape, x.options());
  const int64_t rows = out.numel() / (r * num_buckets);  // the product of x's leading dims, even when p = 0
  return {x.contiguous().view({rows, p}), table.contiguous(), signs.contiguous(), out};
}

// count_sketch_query: sketch [..., R, B] viewed as [rows, R * B]; out [..., p].
struct QueryArgs {
  at::Tensor m2d, table, signs, out;
  int64_t reduce, rows, p, r, nb;
};

inline QueryArgs prepare_query(const at::Tensor& sketch, const at::Tensor& table, const at::Tensor& signs,
                               c10::string_view reduce_name) {
  const int64_t reduce = parse_reduce(reduce_name, /*allow_sum=*/true);
  check_query_args(sketch, table, signs, reduce);
  const int64_t p = table.size(0), r = table.size(1), nb = sketch.size(-1);
  auto shape = sketch.sizes().vec();
  shape.pop_back();
  shape.back() = p;
  auto out = at::empty(shape, sketch.options());
  const auto m2d = sketch.contiguous().view({-1, r * nb});
  return {m2d, table.contiguous(), signs.contiguous(), out, reduce, m2d.size(0), p, r, nb};
}

}  // namespace fedkernels
