// Host-side preparation shared by the CPU and CUDA launchers, written with ATen ops so it runs on
// either device: distinct sorted positives per client, and the row segments of scatter_rows_mean.
#pragma once

#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/bincount.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/repeat_interleave.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/unique_consecutive.h>
#include <ATen/ops/zeros.h>

#include "common/checks.h"

namespace fedkernels {

// Distinct positives of each CSR row, sorted, as shifted[k] = u[k] - (rank of u[k] in its row)
// (what complement_to_class searches), with their row pointer uptr [C + 1]. Raises ValueError when
// a row leaves fewer than m classes to sample from.
struct ComplementIndex {
  at::Tensor uptr;     // int64 [C + 1]
  at::Tensor shifted;  // int64 [U]
};

inline ComplementIndex build_complement_index(const at::Tensor& indptr, const at::Tensor& indices, int64_t num_classes,
                                              int64_t m) {
  const int64_t c = indptr.numel() - 1;
  const auto opts = indptr.options();
  const auto rows = at::repeat_interleave(at::arange(c, opts), indptr.diff(), std::nullopt, indices.numel());
  // Sort by (row, class): stable by class, then stable by row.
  const auto by_class = std::get<1>(at::sort(indices, /*stable=*/true, 0, false));
  const auto rows1 = rows.index_select(0, by_class);
  const auto by_row = std::get<1>(at::sort(rows1, /*stable=*/true, 0, false));
  const auto vals = indices.index_select(0, by_class).index_select(0, by_row);
  const auto rws = rows1.index_select(0, by_row);
  auto keep = at::ones({vals.numel()}, opts.dtype(at::kBool));
  if (vals.numel() > 1) {
    keep.narrow(0, 1, vals.numel() - 1)
        .copy_(vals.narrow(0, 1, vals.numel() - 1)
                   .ne(vals.narrow(0, 0, vals.numel() - 1))
                   .logical_or_(rws.narrow(0, 1, vals.numel() - 1).ne(rws.narrow(0, 0, vals.numel() - 1))));
  }
  const auto uvals = vals.masked_select(keep);
  const auto urows = rws.masked_select(keep);
  const auto ucount = at::bincount(urows, {}, c);
  auto uptr = at::zeros({c + 1}, opts);
  if (c > 0) uptr.narrow(0, 1, c).copy_(ucount.cumsum(0));
  const auto rank = at::arange(uvals.numel(), opts) - uptr.index_select(0, urows);
  if (c > 0) {
    const int64_t most = ucount.max().item<int64_t>();
    TORCH_CHECK_VALUE(num_classes - most >= m, "too few classes to sample m = ", m, " negatives: a client has ", most,
                      " distinct positives out of num_classes = ", num_classes, ", leaving ", num_classes - most);
  }
  return {uptr, uvals - rank};
}

// The segments of scatter_rows_mean: idx sorted stably, the source order perm, the distinct rows
// and their segment pointer seg [U + 1] into perm.
struct RowSegments {
  at::Tensor perm;  // int64 [T]
  at::Tensor rows;  // int64 [U]
  at::Tensor seg;   // int64 [U + 1]
};

inline RowSegments build_row_segments(const at::Tensor& idx) {
  const auto [sorted, perm] = at::sort(idx, /*stable=*/true, 0, false);
  const auto [rows, inverse, counts] = at::unique_consecutive(sorted, false, true);
  auto seg = at::zeros({rows.numel() + 1}, idx.options());
  if (rows.numel() > 0) seg.narrow(0, 1, rows.numel()).copy_(counts.cumsum(0));
  return {perm, rows, seg};
}

}  // namespace fedkernels
