// Schemas of the spread family (FedAwS / FedALC spreadout), a STABLE_TORCH_LIBRARY_FRAGMENT of the
// fedkernels library; the kernels register per device in this folder's *_cpu.cpp / *_cuda.cpp
// (spreadout_loss has none: its CompositeImplicitAutograd kernel is src/fedkernels/ops/spread.py's).
#include <torch/csrc/stable/library.h>

STABLE_TORCH_LIBRARY_FRAGMENT(fedkernels, m) {
  m.def("knn_classes(Tensor W, int k, str metric=\"l2\") -> (Tensor, Tensor)");
  m.def("pair_weight_gather(Tensor indptr, Tensor indices, Tensor values, Tensor idx) -> Tensor");
  m.def("spreadout_pair_loss(Tensor W, Tensor idx, Tensor weight, float margin, str metric=\"l2\") -> Tensor");
  m.def(
      "spreadout_pair_loss_backward(Tensor grad, Tensor W, Tensor idx, Tensor weight, float margin, "
      "str metric=\"l2\") -> Tensor");
  m.def(
      "spreadout_loss(Tensor W, float margin, int k, Tensor? pw_indptr=None, Tensor? pw_indices=None, "
      "Tensor? pw_values=None, str metric=\"l2\") -> Tensor");
  // Internal: the float32 matmul precision of the backend that runs a GEMM on W's device (0 IEEE,
  // 1 TF32, 2 bf16), which knn_classes' CUDA launcher needs and the stable ABI cannot read; its
  // kernel is src/fedkernels/ops/spread.py's, from torch.backends' fp32_precision settings.
  m.def("_matmul_fp32_precision(Tensor W) -> int");
}
