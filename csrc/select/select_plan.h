// Host-side work lists of the partial-weight-exchange ops, shared by the CPU and CUDA launchers.
// A plan flattens a list of tensors of mixed shapes and dtypes into one list of fixed-size
// chunks, packed into int64 records so the CUDA launcher can ship it in one host-to-device copy.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/stable/check.h"
#include "common/stable/alloc.h"
#include "common/stable/tensor.h"
#include "select/select.h"
#include "select/select_checks.h"

namespace fedkernels {

inline int64_t ptr_bits(const void* p) { return static_cast<int64_t>(reinterpret_cast<intptr_t>(p)); }

// delta_norms: per tensor t a record {new ptr, old ptr, numel, elem type, first chunk}, then the
// owning tensor of every chunk. Non-contiguous inputs are read through a contiguous copy.
struct FK_STABLE_HIDDEN NormPlan {
  std::vector<Tensor> hold;     // keeps contiguous copies alive while their pointers are in use
  std::vector<int64_t> packed;  // num_tensors kNormRecord records, then total_chunks owners
  int64_t num_tensors = 0;
  int64_t total_chunks = 0;
};

inline NormPlan make_norm_plan(const std::vector<Tensor>& new_, const std::vector<Tensor>& old) {
  NormPlan plan;
  plan.num_tensors = static_cast<int64_t>(new_.size());
  plan.packed.reserve(plan.num_tensors * kNormRecord);
  std::vector<int64_t> owners;
  for (int64_t t = 0; t < plan.num_tensors; ++t) {
    Tensor a = contiguous_or_self(new_[t]), b = contiguous_or_self(old[t]);
    const int64_t n = a.numel(), first = plan.total_chunks;
    plan.packed.insert(plan.packed.end(), {ptr_bits(a.const_data_ptr()), ptr_bits(b.const_data_ptr()), n,
                                           static_cast<int64_t>(elem_type_of(a, "new", t)), first});
    plan.total_chunks += num_chunks(n);
    owners.insert(owners.end(), num_chunks(n), t);
    plan.hold.push_back(std::move(a));
    plan.hold.push_back(std::move(b));
  }
  plan.packed.insert(plan.packed.end(), owners.begin(), owners.end());
  return plan;
}

// masked_weighted_average: one group per dst tensor that at least one client sent, with record
// {dst ptr, numel, elem type, first chunk, first member, member count}; then per member its
// pointer; then the owning group of every chunk. Weights (divided by the group's sum) go apart.
struct FK_STABLE_HIDDEN MaskedPlan {
  std::vector<Tensor> hold;
  std::vector<std::pair<Tensor, Tensor>> write_back;  // (contiguous work copy, original dst)
  std::vector<int64_t> packed;                        // groups * kMaskedRecord, then member pointers, then chunk owners
  std::vector<double> member_weight;
  int64_t num_groups = 0;
  int64_t num_members = 0;
  int64_t total_chunks = 0;
};

inline MaskedPlan make_masked_plan(const std::vector<Tensor>& dst, const std::vector<Tensor>& sent,
                                   const Tensor& client_of, const Tensor& tensor_of, const Tensor& weights) {
  for (size_t t = 0; t < dst.size(); ++t) {
    FK_CHECK_VALUE(dst[t].defined(), "dst[", t, "] must be a defined tensor");
    FK_CHECK_VALUE(same_device(dst[t], dst[0]), "dst[", t, "] must be on the device of dst[0] (", device_text(dst[0]),
                   "), got ", device_text(dst[t]));
    elem_type_of(dst[t], "dst", t);
  }
  check_masked_metadata(dst, sent, client_of, tensor_of, weights);
  const Tensor co = contiguous_or_self(client_of), to = contiguous_or_self(tensor_of), wt = contiguous_or_self(weights);
  const int64_t* client = co.const_data_ptr<int64_t>();
  const int64_t* target = to.const_data_ptr<int64_t>();
  const double* w = wt.const_data_ptr<double>();
  const int64_t s_count = static_cast<int64_t>(sent.size());
  for (int64_t s = 0; s < s_count; ++s) check_sent_matches(sent[s], s, client[s], dst[target[s]], target[s]);

  // Sent tensors ordered by (dst tensor, client, position): each group's members in client order.
  std::vector<int64_t> order(s_count);
  for (int64_t s = 0; s < s_count; ++s) order[s] = s;
  std::sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
    if (target[x] != target[y]) return target[x] < target[y];
    if (client[x] != client[y]) return client[x] < client[y];
    return x < y;
  });
  MaskedPlan plan;
  std::vector<int64_t> members, owners;
  for (int64_t lo = 0; lo < s_count;) {
    const int64_t t = target[order[lo]];
    int64_t hi = lo;
    double wsum = 0.0;
    for (; hi < s_count && target[order[hi]] == t; ++hi) {
      FK_CHECK_VALUE(hi == lo || client[order[hi]] != client[order[hi - 1]], "duplicate idx: client ",
                     client[order[hi]], " sent tensor ", t, " more than once");
      wsum += w[client[order[hi]]];
    }
    FK_CHECK_VALUE(wsum > 0.0, "weights of the clients that sent idx ", t, " sum to zero");
    const bool in_place = dst[t].is_contiguous();
    Tensor out = in_place ? dst[t] : contiguous_or_self(dst[t]);
    if (!in_place) plan.write_back.emplace_back(out, dst[t]);
    const int64_t n = out.numel();
    plan.packed.insert(plan.packed.end(),
                       {ptr_bits(out.mutable_data_ptr()), n, static_cast<int64_t>(elem_type_of(out, "dst", t)),
                        plan.total_chunks, plan.num_members, hi - lo});
    for (int64_t m = lo; m < hi; ++m) {
      Tensor x = contiguous_or_self(sent[order[m]]);
      members.push_back(ptr_bits(x.const_data_ptr()));
      plan.member_weight.push_back(w[client[order[m]]] / wsum);
      plan.hold.push_back(std::move(x));
    }
    plan.num_members += hi - lo;
    owners.insert(owners.end(), num_chunks(n), plan.num_groups);
    plan.total_chunks += num_chunks(n);
    plan.hold.push_back(std::move(out));
    ++plan.num_groups;
    lo = hi;
  }
  plan.packed.insert(plan.packed.end(), members.begin(), members.end());
  plan.packed.insert(plan.packed.end(), owners.begin(), owners.end());
  return plan;
}

}  // namespace fedkernels
