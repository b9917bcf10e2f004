// hash_buckets: buckets and signs of arbitrary int64 ids under a HashFamily's parameters (CPU).
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <ATen/ops/empty.h>

#include "common/hash_checks.h"
#include "common/hash_family.h"

namespace fedkernels {

static std::tuple<at::Tensor, at::Tensor> hash_buckets_cpu(const at::Tensor& ids, const at::Tensor& params,
                                                           int64_t num_buckets) {
  check_hash_args(ids, params, num_buckets);
  const auto ids_c = ids.contiguous();
  const auto params_c = params.contiguous();
  const int64_t n = ids_c.numel(), r = params_c.size(0);
  auto buckets = at::empty({n, r}, ids.options().dtype(at::kInt));
  auto signs = at::empty({n, r}, ids.options().dtype(at::kChar));
  const auto* id = ids_c.data_ptr<int64_t>();
  const auto* tp = reinterpret_cast<const TableParams*>(params_c.data_ptr<int64_t>());
  auto* bk = buckets.data_ptr<int32_t>();
  auto* sg = signs.data_ptr<int8_t>();
  at::parallel_for(0, n, 2048, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      for (int64_t j = 0; j < r; ++j) {
        bk[i * r + j] = hash_bucket(tp[j], static_cast<uint64_t>(id[i]), static_cast<uint64_t>(num_buckets));
        sg[i * r + j] = hash_sign(tp[j], static_cast<uint64_t>(id[i]));
      }
    }
  });
  return {buckets, signs};
}

TORCH_LIBRARY_IMPL(fedkernels, CPU, m) { m.impl("hash_buckets", &hash_buckets_cpu); }

}  // namespace fedkernels
