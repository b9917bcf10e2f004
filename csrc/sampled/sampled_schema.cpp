// Schemas of the sampled family (FedSS sampled softmax), a STABLE_TORCH_LIBRARY_FRAGMENT of the fedkernels
// library; the kernels register per device in this folder's *_cpu.cpp / *_cuda.cpp.
#include <torch/csrc/stable/library.h>

STABLE_TORCH_LIBRARY_FRAGMENT(fedkernels, m) {
  m.def("sample_negatives(Tensor positives, int num_classes, int m, int seed) -> Tensor");
  m.def("sample_negatives_batched(Tensor indptr, Tensor indices, int num_classes, int m, int seed) -> Tensor");
  m.def(
      "linear_cross_entropy(Tensor h, Tensor W, Tensor target, Tensor? bias=None, float scale=1.0, "
      "int ignore_index=-100, str reduction=\"mean\", int chunk_size=0) -> (Tensor, Tensor)");
  m.def(
      "linear_cross_entropy_backward(Tensor h, Tensor W, Tensor target, Tensor? bias, Tensor lse, "
      "Tensor grad_loss, Tensor grad_lse, float scale, int ignore_index, int chunk_size) -> (Tensor, Tensor, Tensor)");
  // The reduced loss, lse, and the gradients for an upstream gradient of 1 (the CPU autograd path).
  m.def(
      "linear_cross_entropy_fused(Tensor h, Tensor W, Tensor target, Tensor? bias, float scale, int ignore_index, "
      "str reduction, int chunk_size) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
  // In place on out; returns nothing (an aliased return cannot be functionalised); the Python wrapper returns out.
  m.def("scatter_rows_mean(Tensor(a!) out, Tensor idx, Tensor src, Tensor weight) -> ()");
}
