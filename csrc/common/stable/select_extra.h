// Small tensor helpers the select family's launchers need beyond common/stable/ (generic; a family
// that needs one may include this header).
#pragma once

#include "common/stable/tensor.h"

// For a struct with a member of a torch::stable type: torch declares those hidden (its
// HIDDEN_NAMESPACE), and GCC warns when a struct of default visibility holds one.
#if defined(__GNUG__) && !defined(_WIN32)
#define FK_STABLE_HIDDEN __attribute__((visibility("hidden")))
#else
#define FK_STABLE_HIDDEN
#endif

namespace fedkernels {

// t itself when it is contiguous, else a contiguous copy: ATen's Tensor::contiguous(), whose
// already-contiguous case costs no dispatcher call (torch::stable::contiguous always makes one).
inline Tensor contiguous_of(const Tensor& t) { return t.is_contiguous() ? t : torch::stable::contiguous(t); }

}  // namespace fedkernels
