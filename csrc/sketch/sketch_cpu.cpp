// CPU launchers of the sketching family: at::parallel_for over samples / rows.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "sketch/sketch.h"
#include "sketch/sketch_checks.h"

namespace fedkernels {

static at::Tensor label_hash_cpu(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& table,
                                 int64_t num_buckets) {
  check_label_hash_args(indptr, indices, table, num_buckets);
  const auto ip = indptr.contiguous();
  const auto ix = indices.contiguous();
  const auto tb = table.contiguous();
  const int64_t n_samples = ip.numel() - 1, r = tb.size(1);
  // One vectorised, parallel memset for the zeros; samples then only set their labels' buckets.
  auto out = at::zeros({r, n_samples, num_buckets}, indices.options().dtype(at::kByte));
  const int64_t* p = ip.data_ptr<int64_t>();
  const int64_t* labels = ix.data_ptr<int64_t>();
  const int32_t* t = tb.data_ptr<int32_t>();
  uint8_t* o = out.data_ptr<uint8_t>();
  // Each sample owns its R rows, so samples run in parallel with no shared writes.
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, r * (ix.numel() / std::max<int64_t>(1, n_samples) + 1)));
  at::parallel_for(0, n_samples, grain, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      label_hash_set(o, labels + p[n], p[n + 1] - p[n], t, n, n_samples, r, num_buckets, 0, 1);
    }
  });
  return out;
}

TORCH_LIBRARY_IMPL(fedkernels, CPU, m) { m.impl("label_hash", &label_hash_cpu); }

}  // namespace fedkernels
