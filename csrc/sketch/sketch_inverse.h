// The inverse of a hash table for the CUDA gathers: for every (table j, bucket b) the classes
// hashing there, in ascending class order (CSR), with the sign folded in (~i for sign -1).
// Built with ATen ops on the table's device, so it needs no host round trip of the table.
#pragma once

#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/bincount.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>

#include <optional>

namespace fedkernels {

struct TableInverse {
  at::Tensor offsets;  // int64 [R * B + 1]: bucket (j, b) owns members[offsets[j*B+b] : offsets[j*B+b+1]]
  at::Tensor members;  // int32 [R * p]
};

inline TableInverse invert_table(const at::Tensor& table, const std::optional<at::Tensor>& signs, int64_t num_buckets) {
  const int64_t p = table.size(0), r = table.size(1);
  TORCH_CHECK_VALUE(p <= INT32_MAX, "table: at most 2^31 - 1 classes on CUDA, got ", p);
  // key = j * B + bucket, laid out table-major and class-ascending, so a stable sort keeps classes ascending.
  const auto shift = at::arange(r, table.options().dtype(at::kLong)).mul_(num_buckets);
  const auto keys = (table.to(at::kLong) + shift.unsqueeze(0)).t().contiguous().view({-1});
  const auto order = std::get<1>(at::sort(keys, /*stable=*/true, /*dim=*/0, /*descending=*/false));
  auto members = order.remainder(p);  // position j * p + i -> class i
  if (signs.has_value()) {
    const auto sign_sorted = signs->t().contiguous().view({-1}).index_select(0, order);
    members = at::where(sign_sorted.lt(0), members.bitwise_not(), members);
  }
  const auto counts = at::bincount(keys, {}, r * num_buckets);
  auto offsets = at::zeros({r * num_buckets + 1}, counts.options());
  offsets.slice(0, 1).copy_(counts.cumsum(0));
  return {offsets, members.to(at::kInt)};
}

}  // namespace fedkernels
