// Host-side preparation shared by the CPU and CUDA launchers: validate, make inputs contiguous,
// allocate the output. The launchers then only run their kernels.
#pragma once

#include <algorithm>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include "common/stable/alloc.h"
#include "common/stable/tensor.h"
#include "sketch/sketch_checks.h"

namespace fedkernels {

// Every launcher accumulates in sketch_acc_t (sketch.h): ATen's opmath_type of the dtype (float for
// half/bfloat16), which the ATen build's CPU launchers used.
static_assert(std::is_same_v<sketch_acc_t<float>, float> && std::is_same_v<sketch_acc_t<double>, double> &&
              std::is_same_v<sketch_acc_t<c10::Half>, float> && std::is_same_v<sketch_acc_t<c10::BFloat16>, float>);

// bucket_merge / bucket_merge_topk: logp [R, N, B], table [p, R].
struct FK_STABLE_HIDDEN MergeArgs {
  Tensor logp, table;
  int64_t reduce, r, n_rows, nb, p;
};

inline MergeArgs prepare_merge(const Tensor& logp, const Tensor& table, std::string_view reduce_name) {
  const int64_t reduce = parse_reduce(reduce_name);
  check_merge_args(logp, table, reduce);
  return {contiguous_or_self(logp),
          contiguous_or_self(table),
          reduce,
          logp.size(0),
          logp.size(1),
          logp.size(2),
          table.size(0)};
}

// The CPU launchers of bucket_merge and bucket_merge_topk: rows per parallel_for task, about
// 64 Ki (class, table) reads each.
inline int64_t merge_row_grain(int64_t work_per_row) {
  return std::max<int64_t>(1, 65536 / std::max<int64_t>(1, work_per_row));
}

inline std::tuple<Tensor, Tensor> alloc_topk(const MergeArgs& a, int64_t k) {
  check_topk_k(k, a.p);
  return {empty_on(a.logp, {a.n_rows, k}), empty_on(a.logp, {a.n_rows, k}, ScalarType::Long)};
}

// count_sketch: x [..., p] viewed as [rows, p]; out [..., R, B].
struct FK_STABLE_HIDDEN CountSketchArgs {
  Tensor x2d, table, signs, out;
};

inline CountSketchArgs prepare_count_sketch(const Tensor& x, const Tensor& table, const Tensor& signs,
                                            int64_t num_buckets) {
  check_count_sketch_args(x, table, signs, num_buckets);
  const int64_t p = table.size(0), r = table.size(1);
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = r;
  shape.push_back(num_buckets);
  Tensor out = empty_on(x, shape);
  const int64_t rows = out.numel() / (r * num_buckets);  // the product of x's leading dims, even when p = 0
  return {torch::stable::view(contiguous_or_self(x), {rows, p}), contiguous_or_self(table), contiguous_or_self(signs),
          out};
}

// count_sketch_query: sketch [..., R, B] viewed as [rows, R * B]; out [..., p].
struct FK_STABLE_HIDDEN QueryArgs {
  Tensor m2d, table, signs, out;
  int64_t reduce, rows, p, r, nb;
};

inline QueryArgs prepare_query(const Tensor& sketch, const Tensor& table, const Tensor& signs,
                               std::string_view reduce_name) {
  const int64_t reduce = parse_reduce(reduce_name, /*allow_sum=*/true);
  check_query_args(sketch, table, signs, reduce);
  const int64_t p = table.size(0), r = table.size(1), nb = sketch.size(-1);
  std::vector<int64_t> shape(sketch.sizes().begin(), sketch.sizes().end());
  shape.pop_back();
  shape.back() = p;
  Tensor out = empty_on(sketch, shape);
  const Tensor m2d = torch::stable::view(contiguous_or_self(sketch), {-1, r * nb});
  return {m2d, contiguous_or_self(table), contiguous_or_self(signs), out, reduce, m2d.size(0), p, r, nb};
}

}  // namespace fedkernels
