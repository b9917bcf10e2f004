// Host-side preparation shared by the CPU and CUDA launchers, written with torch ops (by the stable
// dispatcher) so it runs on either device: distinct sorted positives per client, and the row segments of
// scatter_rows_mean.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/stable/calls.h"
#include "common/stable/check.h"
#include "common/stable/sampled_extra.h"
#include "common/stable/tensor.h"

namespace fedkernels {

// Distinct positives of each CSR row, sorted, as shifted[k] = u[k] - (rank of u[k] in its row)
// (what complement_to_class searches), with their row pointer uptr [C + 1]. Raises ValueError when
// a row leaves fewer than m classes to sample from.
struct FK_STABLE_HIDDEN ComplementIndex {
  Tensor uptr;     // int64 [C + 1]
  Tensor shifted;  // int64 [U]
};

inline ComplementIndex build_complement_index(const Tensor& indptr, const Tensor& indices, int64_t num_classes,
                                              int64_t m) {
  const int64_t c = indptr.numel() - 1;
  const Tensor rows = aten::repeat_interleave(arange_long(c, indptr), aten::diff(indptr), indices.numel());
  // Sort by (row, class): stable by class, then stable by row.
  const Tensor by_class = aten::sort_stable(indices, 0).second;
  const Tensor rows1 = aten::index_select(rows, 0, by_class);
  const Tensor by_row = aten::sort_stable(rows1, 0).second;
  const Tensor vals = aten::index_select(aten::index_select(indices, 0, by_class), 0, by_row);
  const Tensor rws = aten::index_select(rows1, 0, by_row);
  const int64_t nv = vals.numel();
  Tensor keep = empty_on(indptr, {nv}, ScalarType::Bool);
  torch::stable::fill_(keep, 1.0);
  if (nv > 1) {
    Tensor changed = aten::ne(narrow_view(vals, 0, 1, nv - 1), narrow_view(vals, 0, 0, nv - 1));
    changed = aten::logical_or_(changed, aten::ne(narrow_view(rws, 0, 1, nv - 1), narrow_view(rws, 0, 0, nv - 1)));
    Tensor tail = torch::stable::narrow(keep, 0, 1, nv - 1);
    torch::stable::copy_(tail, changed);
  }
  const Tensor uvals = aten::masked_select(vals, keep);
  const Tensor urows = aten::masked_select(rws, keep);
  const Tensor ucount = aten::bincount(urows, c);
  Tensor uptr = zeros_on(indptr, {c + 1});
  if (c > 0) {
    Tensor tail = torch::stable::narrow(uptr, 0, 1, c);
    torch::stable::copy_(tail, aten::cumsum(ucount, 0));
  }
  const Tensor rank = aten::sub_exact(arange_long(uvals.numel(), indptr), aten::index_select(uptr, 0, urows));
  if (c > 0) {
    const int64_t most = item_int64(max(ucount));
    FK_CHECK_VALUE(num_classes - most >= m, "too few classes to sample m = ", m, " negatives: a client has ", most,
                   " distinct positives out of num_classes = ", num_classes, ", leaving ", num_classes - most);
  }
  return {uptr, aten::sub_exact(uvals, rank)};
}

// build_complement_index for the CPU launchers, as a host loop over the rows: the same two arrays
// (each row's distinct positives sorted, shifted by their rank), without the tensor ops' dispatcher
// calls, which cost the small calls more than the work. The CUDA launchers keep the ops above (the
// emulator runs those on the host, so CI covers both).
inline ComplementIndex build_complement_index_host(const Tensor& indptr, const Tensor& indices, int64_t num_classes,
                                                   int64_t m) {
  const int64_t c = indptr.numel() - 1;
  const Tensor ip_c = contiguous_or_self(indptr), ix_c = contiguous_or_self(indices);
  const int64_t* ip = ip_c.const_data_ptr<int64_t>();
  const int64_t* ix = ix_c.const_data_ptr<int64_t>();
  Tensor uptr = empty_on(indptr, {c + 1});
  int64_t* up = uptr.mutable_data_ptr<int64_t>();
  std::vector<int64_t> shifted;
  shifted.reserve(static_cast<size_t>(indices.numel()));
  std::vector<int64_t> row;
  int64_t most = 0;
  up[0] = 0;
  for (int64_t r = 0; r < c; ++r) {
    row.assign(ix + ip[r], ix + ip[r + 1]);
    std::sort(row.begin(), row.end());
    row.erase(std::unique(row.begin(), row.end()), row.end());
    const int64_t u = static_cast<int64_t>(row.size());
    for (int64_t k = 0; k < u; ++k) shifted.push_back(row[k] - k);
    up[r + 1] = up[r] + u;
    most = std::max(most, u);
  }
  if (c > 0) {
    FK_CHECK_VALUE(num_classes - most >= m, "too few classes to sample m = ", m, " negatives: a client has ", most,
                   " distinct positives out of num_classes = ", num_classes, ", leaving ", num_classes - most);
  }
  const int64_t total = static_cast<int64_t>(shifted.size());
  Tensor sh = empty_on(indices, {total});
  std::copy(shifted.begin(), shifted.end(), sh.mutable_data_ptr<int64_t>());
  return {uptr, sh};
}

// The segments of scatter_rows_mean: idx sorted stably, the source order perm, the distinct rows
// and their segment pointer seg [U + 1] into perm.
struct FK_STABLE_HIDDEN RowSegments {
  Tensor perm;  // int64 [T]
  Tensor rows;  // int64 [U]
  Tensor seg;   // int64 [U + 1]
};

inline RowSegments build_row_segments(const Tensor& idx) {
  const auto [sorted, perm] = aten::sort_stable(idx, 0);
  const auto [rows, inverse, counts] = aten::unique_consecutive_counts(sorted);
  Tensor seg = zeros_on(idx, {rows.numel() + 1});
  if (rows.numel() > 0) {
    Tensor tail = torch::stable::narrow(seg, 0, 1, rows.numel());
    torch::stable::copy_(tail, aten::cumsum(counts, 0));
  }
  return {perm, rows, seg};
}

}  // namespace fedkernels
