// Schema of the hash family's op (docs/design.md §2), a STABLE_TORCH_LIBRARY_FRAGMENT of the fedkernels
// library as every family declares its own; the kernels register per device in hash_ops{.cpp,_cuda.cpp}.
#include <torch/csrc/stable/library.h>

STABLE_TORCH_LIBRARY_FRAGMENT(fedkernels, m) {
  m.def("hash_buckets(Tensor ids, Tensor params, int num_buckets) -> (Tensor, Tensor)");
}
