// Schemas of the select family (partial weight exchange), a STABLE_TORCH_LIBRARY_FRAGMENT of the
// fedkernels library; the kernels register per device in select_{cpu,cuda}.cpp.
#include <torch/csrc/stable/library.h>

STABLE_TORCH_LIBRARY_FRAGMENT(fedkernels, m) {
  // normalize has no schema default on purpose: torch 2.13 drops defaulted args from the call,
  // which breaks register_autograd's structure check for ops with Tensor[] inputs.
  m.def("delta_norms(Tensor[] new, Tensor[] old, bool normalize) -> Tensor");
  m.def("select_topk_tensors(Tensor[] new, Tensor[] old, float fraction, bool normalize) -> Tensor");
  m.def(
      "masked_weighted_average(Tensor(a!)[] dst, Tensor[] sent, Tensor client_of, Tensor tensor_of, "
      "Tensor weights) -> ()");
}
