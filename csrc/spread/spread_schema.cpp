// Schemas of the spread family (FedAwS / FedALC spreadout), a TORCH_LIBRARY_FRAGMENT of the
// fedkernels library; the kernels register per device in this folder's *_cpu.cpp / *_cuda.cu
// (spreadout_loss has none: its CompositeImplicitAutograd kernel is src/fedkernels/ops/spread.py's).
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(fedkernels, m) {
  m.def("knn_classes(Tensor W, int k, str metric=\"l2\") -> (Tensor, Tensor)");
  m.def("pair_weight_gather(Tensor indptr, Tensor indices, Tensor values, Tensor idx) -> Tensor");
  m.def("spreadout_pair_loss(Tensor W, Tensor idx, Tensor weight, float margin, str metric=\"l2\") -> Tensor");
  m.def(
      "spreadout_pair_loss_backward(Tensor grad, Tensor W, Tensor idx, Tensor weight, float margin, "
      "str metric=\"l2\") -> Tensor");
  m.def(
      "spreadout_loss(Tensor W, float margin, int k, Tensor? pw_indptr=None, Tensor? pw_indices=None, "
      "Tensor? pw_values=None, str metric=\"l2\") -> Tensor");
}
