// hash_buckets: buckets and signs of arbitrary int64 ids under a HashFamily's parameters (CPU).
#include <tuple>

#include "common/hash_checks.h"
#include "common/hash_family.h"

namespace fedkernels {

static std::tuple<Tensor, Tensor> hash_buckets_cpu(const Tensor& ids, const Tensor& params, int64_t num_buckets) {
  check_hash_args(ids, params, num_buckets);
  const Tensor ids_c = torch::stable::contiguous(ids);
  const Tensor params_c = torch::stable::contiguous(params);
  const int64_t n = ids_c.numel(), r = params_c.size(0);
  Tensor buckets = torch::stable::new_empty(ids, {n, r}, ScalarType::Int);
  Tensor signs = torch::stable::new_empty(ids, {n, r}, ScalarType::Char);
  const int64_t* id = ids_c.const_data_ptr<int64_t>();
  const auto* tp = reinterpret_cast<const TableParams*>(params_c.const_data_ptr<int64_t>());
  int32_t* bk = buckets.mutable_data_ptr<int32_t>();
  int8_t* sg = signs.mutable_data_ptr<int8_t>();
  torch::stable::parallel_for(0, n, 2048, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      for (int64_t j = 0; j < r; ++j) {
        bk[i * r + j] = hash_bucket(tp[j], static_cast<uint64_t>(id[i]), static_cast<uint64_t>(num_buckets));
        sg[i * r + j] = hash_sign(tp[j], static_cast<uint64_t>(id[i]));
      }
    }
  });
  return {buckets, signs};
}

STABLE_TORCH_LIBRARY_IMPL(fedkernels, CPU, m) { m.impl("hash_buckets", TORCH_BOX(&hash_buckets_cpu)); }

}  // namespace fedkernels
