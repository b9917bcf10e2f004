// Schema of the hash family's op (docs/design.md §2), a TORCH_LIBRARY_FRAGMENT of the fedkernels library
// as every family declares its own; the kernels register per device in hash_ops{.cpp,_cuda.cu}.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(fedkernels, m) {
  m.def("hash_buckets(Tensor ids, Tensor params, int num_buckets) -> (Tensor, Tensor)");
}
