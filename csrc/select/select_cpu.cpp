// CPU launchers of the partial-weight-exchange family: torch's parallel_for over the flat list of
// (tensor, chunk) work items; per-tensor results are then reduced in a fixed chunk order.
#include <algorithm>
#include <numeric>
#include <vector>

#include "common/stable/alloc.h"
#include "common/stable/tensor.h"
#include "select/select.h"
#include "select/select_checks.h"
#include "select/select_plan.h"
#include "select/widen_half.h"

namespace fedkernels {

static_assert(sizeof(void*) == sizeof(int64_t), "plans pack pointers into int64");

// Chunks are short (kSelectChunk elements, select.h), so a few per task keeps scheduling cheap.
constexpr int64_t kChunksPerTask = 4;

// The partial of chunk c. float16 chunks are widened into float32 buffers first where the level
// converts in vectors (widen_half.h: F16C at avx2; c10::Half's scalar conversion is slow per
// value), then run through the float32 instance of the same item math: lanes, order and the
// (exact) converted values match the direct path, so every level gives the same bits.
static double norm_chunk_partial_cpu(CpuIsa isa, const int64_t* packed, int64_t num_tensors, int64_t c, float* buf_a,
                                     float* buf_b) {
  const int64_t* rec = packed + packed[num_tensors * kNormRecord + c] * kNormRecord;
  if (!widen_half_vectorized(isa) || static_cast<ElemType>(rec[3]) != ElemType::kFloat16) {
    return norm_chunk_partial(packed, num_tensors, c, 0, 1);
  }
  const int64_t begin = (c - rec[4]) * kSelectChunk, n = std::min(kSelectChunk, rec[2] - begin);
  widen_half(isa, static_cast<const c10::Half*>(as_ptr(rec[0])) + begin, buf_a, n);
  widen_half(isa, static_cast<const c10::Half*>(as_ptr(rec[1])) + begin, buf_b, n);
  return sq_diff_sum_typed<float, float>(buf_a, buf_b, 0, n, 0, 1);
}

static Tensor delta_norms_cpu(const std::vector<Tensor>& new_, const std::vector<Tensor>& old, bool normalize) {
  check_tensor_pairs(new_, old);
  const NormPlan plan = make_norm_plan(new_, old);
  std::vector<double> partials(plan.total_chunks);
  const int64_t* packed = plan.packed.data();
  const CpuIsa isa = cpu_isa();
  torch::stable::parallel_for(0, plan.total_chunks, kChunksPerTask, [&](int64_t begin, int64_t end) {
    std::vector<float> buf_a(widen_half_vectorized(isa) ? kSelectChunk : 0), buf_b(buf_a.size());
    for (int64_t c = begin; c < end; ++c) {
      partials[c] = norm_chunk_partial_cpu(isa, packed, plan.num_tensors, c, buf_a.data(), buf_b.data());
    }
  });
  Tensor out = empty_cpu(plan.num_tensors, ScalarType::Float);
  float* o = out.mutable_data_ptr<float>();
  for (int64_t t = 0; t < plan.num_tensors; ++t) o[t] = norm_of_tensor(packed, partials.data(), t, normalize);
  return out;
}

static Tensor select_topk_tensors_cpu(const std::vector<Tensor>& new_, const std::vector<Tensor>& old, double fraction,
                                      bool normalize) {
  check_fraction(fraction);
  const Tensor norms = delta_norms_cpu(new_, old, normalize);
  const float* nv = norms.const_data_ptr<float>();
  const int64_t m = norms.numel(), k = num_selected(m, fraction);
  std::vector<int64_t> order(m);
  std::iota(order.begin(), order.end(), int64_t{0});
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int64_t i, int64_t j) { return ranks_before(nv[i], i, nv[j], j); });
  Tensor out = empty_cpu(k, ScalarType::Long);
  std::copy(order.begin(), order.begin() + k, out.mutable_data_ptr<int64_t>());
  return out;
}

static void masked_weighted_average_cpu(const std::vector<Tensor>& dst, const std::vector<Tensor>& sent,
                                        const Tensor& client_of, const Tensor& tensor_of, const Tensor& weights) {
  const MaskedPlan plan = make_masked_plan(dst, sent, client_of, tensor_of, weights);
  const int64_t* packed = plan.packed.data();
  const double* mw = plan.member_weight.data();
  torch::stable::parallel_for(0, plan.total_chunks, kChunksPerTask, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) masked_chunk(packed, mw, plan.num_groups, plan.num_members, c, 0, 1);
  });
  for (auto [work, original] : plan.write_back) torch::stable::copy_(original, work);
}

STABLE_TORCH_LIBRARY_IMPL(fedkernels, CPU, m) {
  m.impl("delta_norms", TORCH_BOX(&delta_norms_cpu));
  m.impl("select_topk_tensors", TORCH_BOX(&select_topk_tensors_cpu));
  m.impl("masked_weighted_average", TORCH_BOX(&masked_weighted_average_cpu));
}

}  // namespace fedkernels
