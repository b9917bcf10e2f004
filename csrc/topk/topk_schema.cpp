// Schemas of the topk family. The family registers its own schemas (a STABLE_TORCH_LIBRARY_FRAGMENT of
// the fedkernels library), so adding it needs no edit of csrc/ops.cpp; its kernels register per
// device in linear_topk_{cpu,cuda}.cpp.
#include <torch/csrc/stable/library.h>

STABLE_TORCH_LIBRARY_FRAGMENT(fedkernels, m) {
  // The top k of scale * h @ W.T + bias per row: (values float32 [N, k], indices int64 [N, k]).
  m.def("linear_topk(Tensor h, Tensor W, Tensor? bias, int k, float scale=1.0) -> (Tensor, Tensor)");
}
