// Cheaper forms of a few stable-ABI calls for the launchers' small-call path: torch::stable's
// contiguous / new_empty / min go through the dispatcher by schema name on every call (a lookup and a
// boxed call each), which costs about as much as hashing a few dozen ids. These keep the results of
// those calls and skip the lookup where the shim has a direct function or the answer is on the host.
#pragma once

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/macros.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/stable/check.h"
#include "common/stable/checks.h"
#include "common/stable/tensor.h"

namespace fedkernels {

// t itself when it is contiguous (as Tensor.contiguous() returns it), else a contiguous copy.
inline Tensor contiguous_or_self(const Tensor& t) { return t.is_contiguous() ? t : torch::stable::contiguous(t); }

// A new uninitialised contiguous tensor of `sizes` and `dtype` on `like`'s device (torch::stable::new_empty
// of a strided tensor), made by the shim's empty_strided.
inline Tensor empty_on(const Tensor& like, IntArrayRef sizes, ScalarType dtype) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (size_t k = sizes.size(); k-- > 1;) strides[k - 1] = strides[k] * std::max<int64_t>(sizes[k], 1);
  const int32_t shim_dtype = torch::stable::detail::to<int32_t>(torch::stable::detail::from(dtype));
  int32_t device_type = 0;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_type(like.get(), &device_type));
  AtenTensorHandle out = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(static_cast<int64_t>(sizes.size()), sizes.data(),
                                                         strides.data(), shim_dtype, device_type,
                                                         like.get_device_index(), &out));
  return Tensor(out);
}

// check_nonnegative (same check, same message); a 1-D int64 host tensor is read in place, through its
// stride, in fixed chunks on torch's threads, instead of a dispatched min.
inline void check_nonnegative_fast(const Tensor& t, const char* name) {
  if (!(t.is_cpu() && t.dim() == 1 && t.scalar_type() == ScalarType::Long)) return check_nonnegative(t, name);
  const int64_t n = t.numel();
  if (n == 0) return;
  const int64_t* base = t.const_data_ptr<int64_t>();
  const int64_t stride = t.stride(0);
  constexpr int64_t kChunk = int64_t(1) << 15;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<int64_t> chunk_min(static_cast<size_t>(chunks), std::numeric_limits<int64_t>::max());
  torch::stable::parallel_for(0, chunks, 1, [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; ++c) {
      int64_t m = std::numeric_limits<int64_t>::max();
      const int64_t end = std::min(n, (c + 1) * kChunk);
      for (int64_t i = c * kChunk; i < end; ++i) m = std::min(m, base[i * stride]);
      chunk_min[static_cast<size_t>(c)] = m;
    }
  });
  const int64_t mn = *std::min_element(chunk_min.begin(), chunk_min.end());
  FK_CHECK_INDEX(mn >= 0, name, " values must be >= 0, got min ", mn);
}

}  // namespace fedkernels
