// hash_buckets: buckets and signs of arbitrary int64 ids under a HashFamily's parameters (CPU).
#include <tuple>

#include "common/stable/alloc.h"
#include "common/hash_checks.h"
#include "common/hash_family.h"

namespace fedkernels {

static std::tuple<Tensor, Tensor> hash_buckets_cpu(const Tensor& ids, const Tensor& params, int64_t num_buckets) {
  check_hash_args(ids, params, num_buckets);
  const Tensor ids_c = contiguous_or_self(ids);
  const Tensor params_c = contiguous_or_self(params);
  const int64_t n = ids_c.numel(), r = params_c.size(0);
  Tensor buckets = empty_on(ids, {n, r}, ScalarType::Int);
  Tensor signs = empty_on(ids, {n, r}, ScalarType::Char);
  const int64_t* id = ids_c.const_data_ptr<int64_t>();
  const auto* tp = reinterpret_cast<const TableParams*>(params_c.const_data_ptr<int64_t>());
  int32_t* bk = buckets.mutable_data_ptr<int32_t>();
  int8_t* sg = signs.mutable_data_ptr<int8_t>();
  const uint64_t nb = static_cast<uint64_t>(num_buckets);
  torch::stable::parallel_for(0, n, 2048, [id, tp, bk, sg, r, nb](int64_t begin, int64_t end) {
    // Locals, not the closure's members: the closure reaches torch through the shim (opaque here), and the
    // int8 stores below may alias anything behind a pointer, so members would be reloaded every store.
    const int64_t* const idl = id;
    const TableParams* const tpl = tp;
    int32_t* const bkl = bk;
    int8_t* const sgl = sg;
    const int64_t rl = r;
    const uint64_t nbl = nb;
    for (int64_t i = begin; i < end; ++i) {
      for (int64_t j = 0; j < rl; ++j) {
        bkl[i * rl + j] = hash_bucket(tpl[j], static_cast<uint64_t>(idl[i]), nbl);
        sgl[i * rl + j] = hash_sign(tpl[j], static_cast<uint64_t>(idl[i]));
      }
    }
  });
  return {buckets, signs};
}

STABLE_TORCH_LIBRARY_IMPL(fedkernels, CPU, m) { m.impl("hash_buckets", TORCH_BOX(&hash_buckets_cpu)); }

}  // namespace fedkernels
