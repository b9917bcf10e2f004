// Argument checks of the sketching ops, shared by the CPU and CUDA launchers.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "common/stable/calls.h"
#include "common/stable/check.h"
#include "common/stable/checks.h"
#include "common/stable/sketch_extra.h"
#include "common/stable/tensor.h"
#include "sketch/sketch.h"

namespace fedkernels {

// table: int32 [p, R] with every bucket in [0, B).
inline void check_hash_table(const Tensor& table, int64_t num_buckets) {
  check_dtype(table, ScalarType::Int, "table");
  check_dim(table, 2, "table");
  FK_CHECK_VALUE(table.size(1) >= 1, "table must have at least one column (R >= 1), got shape ",
                 shape_text(table.sizes()));
  FK_CHECK_VALUE(num_buckets >= 1, "num_buckets must be >= 1, got ", num_buckets);
  check_index_range(table, 0, num_buckets, "table");
}

inline void check_label_hash_args(const Tensor& indptr, const Tensor& indices, const Tensor& table,
                                  int64_t num_buckets) {
  check_csr(indptr, indices, "indptr", "indices");
  check_hash_table(table, num_buckets);
  check_same_device(indices, "indices", table, "table");
  check_index_range(indices, 0, table.size(0), "indices (class ids)");
}

// label_hash.out: out must be exactly what label_hash would return (uint8 [R, N, B], contiguous, on the
// inputs' device) and must not share memory with an input: the kernel zeroes out while it reads them.
inline void check_label_hash_out(const Tensor& out, const Tensor& indptr, const Tensor& indices, const Tensor& table,
                                 int64_t num_buckets) {
  check_dtype(out, ScalarType::Byte, "out");
  check_same_device(out, "out", indices, "indices");
  const int64_t n_samples = indptr.numel() - 1, r = table.size(1);
  FK_CHECK_VALUE(out.dim() == 3 && out.size(0) == r && out.size(1) == n_samples && out.size(2) == num_buckets,
                 "out must have shape [R, N, B] = [", r, ", ", n_samples, ", ", num_buckets, "], got ",
                 shape_text(out.sizes()));
  FK_CHECK_VALUE(out.is_contiguous(), "out must be contiguous, got strides ", shape_text(out.strides()));
  FK_CHECK_VALUE(!is_alias_of(out, indptr) && !is_alias_of(out, indices) && !is_alias_of(out, table),
                 "out must not share memory with indptr, indices or table");
}

// reduce: "mean" or "median" ("sum" too where allow_sum: the adjoint of count_sketch).
inline int64_t parse_reduce(std::string_view reduce, bool allow_sum = false) {
  if (reduce == "mean") return kReduceMean;
  if (reduce == "median") return kReduceMedian;
  if (allow_sum && reduce == "sum") return kReduceSum;
  throw_value_error("reduce must be \"mean\" or \"median\"", allow_sum ? " (or \"sum\")" : "", ", got \"",
                    std::string(reduce.data(), reduce.size()), "\"");
}

inline void check_median_tables(int64_t reduce, int64_t r) {
  FK_CHECK_VALUE(reduce != kReduceMedian || r <= kMaxMedianTables, "reduce=\"median\" supports at most ",
                 kMaxMedianTables, " tables (table.shape[1] = R), got ", r);
}

// A bucket tensor whose last two dims are [R, B] (or, for logp, dims 0 and 2) against the table.
inline void check_buckets_vs_table(const Tensor& src, const char* name, int64_t r_src, int64_t b_src,
                                   const Tensor& table) {
  check_floating(src, name);
  check_dtype(table, ScalarType::Int, "table");
  check_dim(table, 2, "table");
  check_same_device(src, name, table, "table");
  FK_CHECK_VALUE(table.size(1) >= 1, "table must have at least one column (R >= 1), got shape ",
                 shape_text(table.sizes()));
  FK_CHECK_VALUE(r_src == table.size(1), name, " has R = ", r_src, " tables but table has ", table.size(1),
                 " columns (shapes ", shape_text(src.sizes()), " and ", shape_text(table.sizes()), ")");
  FK_CHECK_VALUE(b_src >= 1, name, " must have at least one bucket (B >= 1), got shape ", shape_text(src.sizes()));
  check_index_range(table, 0, b_src, "table");
}

// bucket_merge / bucket_merge_topk: logp [R, N, B], table [p, R].
inline void check_merge_args(const Tensor& logp, const Tensor& table, int64_t reduce) {
  check_dim(logp, 3, "logp");
  check_buckets_vs_table(logp, "logp", logp.size(0), logp.size(2), table);
  check_median_tables(reduce, table.size(1));
}

inline void check_topk_k(int64_t k, int64_t num_classes) {
  FK_CHECK_VALUE(k >= 0, "k must be >= 0, got ", k);
  FK_CHECK_VALUE(k <= num_classes, "k must be <= the number of classes p = ", num_classes, ", got ", k);
}

// bucket_merge_backward: grad [N, p] against table [p, R].
inline void check_merge_backward_args(const Tensor& grad, const Tensor& table, int64_t num_buckets) {
  check_floating(grad, "grad");
  check_dim(grad, 2, "grad");
  check_same_device(grad, "grad", table, "table");
  check_hash_table(table, num_buckets);
  FK_CHECK_VALUE(grad.size(1) == table.size(0), "grad must be [N, p] with p = table.shape[0] = ", table.size(0),
                 ", got shape ", shape_text(grad.sizes()));
}

// Every int8 is +1 or -1: (v + 1) is 0 or 2 exactly then, so OR-ing (v + 1) & ~2 over all of them
// stays 0. One vectorisable pass over the bytes; the tensor-op form (abs, ne, any) made three
// passes and two temporaries (at the largest bench size, longer than the sketch itself).
inline bool cpu_all_plus_minus_one(const Tensor& signs) {
  const auto* v = reinterpret_cast<const uint8_t*>(signs.const_data_ptr<int8_t>());
  return parallel_all(0, signs.numel(), int64_t(1) << 18, [v](int64_t begin, int64_t end) {
    uint8_t bad = 0;
    for (int64_t i = begin; i < end; ++i) bad |= static_cast<uint8_t>(v[i] + 1) & uint8_t(0xFD);
    return bad == 0;
  });
}

// Every int8 of a device tensor is +1 or -1: |v| (|-128| stays -128) has min and max 1.
inline bool device_all_plus_minus_one(const Tensor& signs) {
  const Tensor a = call_aten_tensor("aten::abs", "", signs);
  const auto [mn, mx] = call_aten_pair("aten::aminmax", "", a, std::optional<int64_t>(), false);
  return item_int64(mn) == 1 && item_int64(mx) == 1;
}

// signs: int8 [p, R] of +1/-1, like table.
inline void check_signs(const Tensor& signs, const Tensor& table) {
  check_dtype(signs, ScalarType::Char, "signs");
  check_same_device(signs, "signs", table, "table");
  FK_CHECK_VALUE(same_sizes(signs.sizes(), table.sizes()), "signs must have the shape of table ",
                 shape_text(table.sizes()), ", got ", shape_text(signs.sizes()));
  if (signs.numel() == 0) return;
  if (signs.is_cpu()) {
    FK_CHECK_VALUE(cpu_all_plus_minus_one(contiguous_or_self(signs)), "signs values must be +1 or -1");
  } else {
    FK_CHECK_VALUE(device_all_plus_minus_one(signs), "signs values must be +1 or -1");
  }
}

// count_sketch: x [..., p], table [p, R], signs [p, R].
inline void check_count_sketch_args(const Tensor& x, const Tensor& table, const Tensor& signs, int64_t num_buckets) {
  check_floating(x, "x");
  FK_CHECK_VALUE(x.dim() >= 1, "x must have at least one dim [..., p], got a scalar");
  check_same_device(x, "x", table, "table");
  check_hash_table(table, num_buckets);
  FK_CHECK_VALUE(x.size(-1) == table.size(0), "x must be [..., p] with p = table.shape[0] = ", table.size(0),
                 ", got shape ", shape_text(x.sizes()));
  check_signs(signs, table);
}

// count_sketch_query: sketch [..., R, B], table [p, R], signs [p, R].
inline void check_query_args(const Tensor& sketch, const Tensor& table, const Tensor& signs, int64_t reduce) {
  FK_CHECK_VALUE(sketch.dim() >= 2, "sketch must be [..., R, B], got shape ", shape_text(sketch.sizes()));
  check_buckets_vs_table(sketch, "sketch", sketch.size(-2), sketch.size(-1), table);
  check_signs(signs, table);
  check_median_tables(reduce, table.size(1));
}

}  // namespace fedkernels
