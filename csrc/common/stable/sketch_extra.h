// Generic helpers the sketch family's stable-ABI launchers need beyond common/stable/: a
// deterministic parallel "all" (ATen's parallel_reduce has no stable twin), the storage-alias test
// of at::Tensor::is_alias_of, and shape equality.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/stable/tensor.h"

namespace fedkernels {

// pred(begin, end) over [begin, end) in fixed chunks of `grain` (the last one shorter), combined in
// chunk order: true when every chunk's pred holds. The chunks do not depend on the thread count, so
// the result is deterministic (for an "all" any order would do; the fixed split keeps it that way
// for whatever pred computes).
template <typename Pred>
bool parallel_all(int64_t begin, int64_t end, int64_t grain, const Pred& pred) {
  if (end <= begin) return true;
  const int64_t n_chunks = (end - begin + grain - 1) / grain;
  std::vector<uint8_t> ok(static_cast<size_t>(n_chunks), 1);
  torch::stable::parallel_for(0, n_chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t b = begin + c * grain;
      ok[c] = pred(b, std::min(end, b + grain)) ? 1 : 0;
    }
  });
  bool all_ok = true;
  for (const uint8_t v : ok) all_ok = all_ok && v != 0;
  return all_ok;
}

// The start of t's storage: its data pointer less its storage offset. Tensors of one storage share
// it, so two tensors holding data alias exactly when it is equal (a tensor with no data aliases
// nothing, which is all at::Tensor::is_alias_of can say of two empty storages too).
inline const void* storage_base(const Tensor& t) {
  const char* d = static_cast<const char*>(t.data_ptr());
  if (d == nullptr) return nullptr;
  return d - t.storage_offset() * static_cast<int64_t>(t.element_size());
}

// at::Tensor::is_alias_of: a and b view the same storage.
inline bool is_alias_of(const Tensor& a, const Tensor& b) {
  const void* pa = storage_base(a);
  return pa != nullptr && pa == storage_base(b);
}

// a.sizes() == b.sizes().
inline bool same_sizes(IntArrayRef a, IntArrayRef b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }

}  // namespace fedkernels
