// The inverse of a hash table for the CUDA gathers: for every (table j, bucket b) the classes
// hashing there, in ascending class order (CSR), with the sign folded in (~i for sign -1).
// Built with tensor ops on the table's device, so it needs no host round trip of the table.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/stable/alloc.h"
#include "common/stable/calls.h"
#include "common/stable/check.h"
#include "common/stable/sketch_extra.h"
#include "common/stable/tensor.h"

namespace fedkernels {

struct FK_STABLE_HIDDEN TableInverse {
  Tensor offsets;  // int64 [R * B + 1]: bucket (j, b) owns members[offsets[j*B+b] : offsets[j*B+b+1]]
  Tensor members;  // int32 [R * p]
};

// Each table's column sorted stably by bucket: its classes come out bucket by bucket, ascending within
// a bucket, so row j of the order is the members of table j's buckets, laid out table-major (what a
// stable sort of the keys j * B + bucket gave). The bucket sizes come from searching each sorted
// column for 1..B (the classes with a bucket <= b) and differencing: no op here takes a Scalar.
inline TableInverse invert_table(const Tensor& table, const std::optional<Tensor>& signs, int64_t num_buckets) {
  const int64_t p = table.size(0), r = table.size(1);
  FK_CHECK_VALUE(p <= INT32_MAX, "table: at most 2^31 - 1 classes on CUDA, got ", p);
  const Tensor cols = contiguous_or_self(torch::stable::transpose(torch::stable::to(table, ScalarType::Long), 0, 1));
  const auto [sorted, order] =
      call_aten_pair("aten::sort", "stable", cols, std::optional<bool>(true), int64_t(1), false);  // [R, p] each
  Tensor members = order;                                                                          // [R, p]: class ids
  if (signs.has_value()) {
    const Tensor sign_sorted =
        call_aten_tensor("aten::gather", "", torch::stable::transpose(*signs, 0, 1), int64_t(1), order, false);
    const Tensor zero = zeros_on(sign_sorted, std::vector<int64_t>{});
    const Tensor negative = call_aten_tensor("aten::lt", "Tensor", sign_sorted, zero);
    members =
        call_aten_tensor("aten::where", "self", negative, call_aten_tensor("aten::bitwise_not", "", members), members);
  }
  // upto[j, b]: the classes of table j with bucket <= b = the count below b + 1.
  const Tensor ones = torch::stable::full({r, num_buckets}, 1.0, ScalarType::Long, std::nullopt, table.device());
  const Tensor bplus1 = call_aten_tensor("aten::cumsum", "", ones, int64_t(1), std::optional<ScalarType>());
  const Tensor upto = call_aten_tensor("aten::searchsorted", "Tensor", sorted, bplus1, false, false,
                                       std::optional<std::string>(), std::optional<Tensor>());
  const Tensor counts = call_aten_tensor("aten::diff", "", upto, int64_t(1), int64_t(1),
                                         std::optional<Tensor>(zeros_on(upto, {r, 1})), std::optional<Tensor>());
  Tensor offsets = zeros_on(table, {r * num_buckets + 1}, ScalarType::Long);
  Tensor tail = torch::stable::narrow(offsets, 0, 1, r * num_buckets);
  torch::stable::copy_(tail, call_aten_tensor("aten::cumsum", "", torch::stable::reshape(counts, {-1}), int64_t(0),
                                              std::optional<ScalarType>()));
  return {offsets, torch::stable::to(torch::stable::reshape(members, {-1}), ScalarType::Int)};
}

}  // namespace fedkernels
