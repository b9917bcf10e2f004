// CPU launchers of the sketching family: torch's parallel_for over samples / rows.

#include <algorithm>
#include <cstring>

#include "common/stable/alloc.h"
#include "common/huge_pages.h"

#include "sketch/sketch.h"
#include "sketch/sketch_checks.h"

namespace fedkernels {

// Fills out [R, N, B] (validated, contiguous) from contiguous inputs; every byte is written.
static void label_hash_fill_cpu(const Tensor& ip, const Tensor& ix, const Tensor& tb, int64_t num_buckets,
                                Tensor& out) {
  if (out.numel() == 0) return;
  const int64_t n_samples = ip.numel() - 1, r = tb.size(1);
  const int64_t* p = ip.const_data_ptr<int64_t>();
  const int64_t* labels = ix.const_data_ptr<int64_t>();
  const int32_t* t = tb.const_data_ptr<int32_t>();
  uint8_t* o = out.mutable_data_ptr<uint8_t>();
  // One pass: a block of samples zeroes its R row runs (contiguous in each table) and sets its
  // labels while those rows are still in cache. Each sample owns its R rows, so blocks run in
  // parallel with no shared writes; a thread gets at least 256 KiB of output (one core cannot write
  // a 1 MB output at copy bandwidth on its own).
  const int64_t row_bytes = r * num_buckets;
  const int64_t block = std::max<int64_t>(1, (192 << 10) / row_bytes);  // rows of a block stay in L2
  const int64_t grain = std::max<int64_t>(1, (256 << 10) / row_bytes);
  torch::stable::parallel_for(0, n_samples, grain, [&](int64_t begin, int64_t end) {
    for (int64_t n0 = begin; n0 < end; n0 += block) {
      const int64_t n1 = std::min(end, n0 + block);
      for (int64_t j = 0; j < r; ++j) {
        std::memset(o + (j * n_samples + n0) * num_buckets, 0, static_cast<size_t>((n1 - n0) * num_buckets));
      }
      for (int64_t n = n0; n < n1; ++n) {
        label_hash_set(o, labels + p[n], p[n + 1] - p[n], t, n, n_samples, r, num_buckets, 0, 1);
      }
    }
  });
}

static Tensor label_hash_cpu(const Tensor& indptr, const Tensor& indices, const Tensor& table, int64_t num_buckets) {
  check_label_hash_args(indptr, indices, table, num_buckets);
  const int64_t n_samples = indptr.numel() - 1, r = table.size(1);
  Tensor out = empty_on(indices, {r, n_samples, num_buckets}, ScalarType::Byte);
  advise_huge_pages(out.mutable_data_ptr(), static_cast<size_t>(out.numel()));  // fresh pages only; see huge_pages.h
  label_hash_fill_cpu(contiguous_or_self(indptr), contiguous_or_self(indices), contiguous_or_self(table), num_buckets,
                      out);
  return out;
}

// The out= overload: a reused, already resident buffer skips the page faults of a fresh output.
static Tensor label_hash_out_cpu(const Tensor& indptr, const Tensor& indices, const Tensor& table, int64_t num_buckets,
                                 Tensor out) {
  check_label_hash_args(indptr, indices, table, num_buckets);
  check_label_hash_out(out, indptr, indices, table, num_buckets);
  label_hash_fill_cpu(contiguous_or_self(indptr), contiguous_or_self(indices), contiguous_or_self(table), num_buckets,
                      out);
  return out;
}

STABLE_TORCH_LIBRARY_IMPL(fedkernels, CPU, m) {
  m.impl("label_hash", TORCH_BOX(&label_hash_cpu));
  m.impl("label_hash.out", TORCH_BOX(&label_hash_out_cpu));
}

}  // namespace fedkernels
