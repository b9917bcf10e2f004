// Schemas of the prox family (proximal l1-difference, TV1D), a STABLE_TORCH_LIBRARY_FRAGMENT of the
// fedkernels library; the kernels register per device in prox_{cpu.cpp,cuda.cu}.
#include <torch/csrc/stable/library.h>

STABLE_TORCH_LIBRARY_FRAGMENT(fedkernels, m) {
  m.def("prox_tv1d(Tensor z, Tensor lam, bool anchored=True, int block_size=0) -> Tensor");
  m.def("prox_tv1d_backward(Tensor grad, Tensor u, Tensor lam, bool anchored, int block_size) -> (Tensor, Tensor)");
}
