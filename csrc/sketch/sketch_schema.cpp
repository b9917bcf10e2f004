// Schemas of the sketch family (FedMLH label hashing and count sketches), a STABLE_TORCH_LIBRARY_FRAGMENT
// of the fedkernels library; the kernels register per device in this folder's *_cpu.cpp / *_cuda.cpp.
// label_hash.out is defined in Python (src/fedkernels/ops/sketch.py): it carries Tag::out, which lets
// torch.compile functionalize it, and the stable ABI has no portable way to name a tag.
#include <torch/csrc/stable/library.h>

STABLE_TORCH_LIBRARY_FRAGMENT(fedkernels, m) {
  m.def("label_hash(Tensor indptr, Tensor indices, Tensor table, int num_buckets) -> Tensor");
  m.def("bucket_merge(Tensor logp, Tensor table, str reduce=\"mean\") -> Tensor");
  m.def("bucket_merge_backward(Tensor grad, Tensor table, int num_buckets) -> Tensor");
  m.def("bucket_merge_topk(Tensor logp, Tensor table, int k, str reduce=\"mean\") -> (Tensor, Tensor)");
  m.def("count_sketch(Tensor x, Tensor table, Tensor signs, int num_buckets) -> Tensor");
  m.def("count_sketch_query(Tensor sketch, Tensor table, Tensor signs, str reduce=\"median\") -> Tensor");
}
