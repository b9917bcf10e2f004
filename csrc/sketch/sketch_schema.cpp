// Schemas of the sketch family (FedMLH label hashing and count sketches), a TORCH_LIBRARY_FRAGMENT
// of the fedkernels library; the kernels register per device in this folder's *_cpu.cpp / *_cuda.cu.
#include <torch/library.h>
#include <torch/version.h>

TORCH_LIBRARY_FRAGMENT(fedkernels, m) {
  m.def("label_hash(Tensor indptr, Tensor indices, Tensor table, int num_buckets) -> Tensor");
  // out= variant: writes every element of out (uint8 [R, N, B]); Tag::out lets torch.compile functionalize it.
  // torch < 2.13 has no Tag::out (gpu-check may meet an older CUDA torch): the schema alone there.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 13)
  m.def("label_hash.out(Tensor indptr, Tensor indices, Tensor table, int num_buckets, *, Tensor(a!) out) -> Tensor(a!)",
        {at::Tag::out});
#else
  m.def(
      "label_hash.out(Tensor indptr, Tensor indices, Tensor table, int num_buckets, *, Tensor(a!) out) -> Tensor(a!)");
#endif
  m.def("bucket_merge(Tensor logp, Tensor table, str reduce=\"mean\") -> Tensor");
  m.def("bucket_merge_backward(Tensor grad, Tensor table, int num_buckets) -> Tensor");
  m.def("bucket_merge_topk(Tensor logp, Tensor table, int k, str reduce=\"mean\") -> (Tensor, Tensor)");
  m.def("count_sketch(Tensor x, Tensor table, Tensor signs, int num_buckets) -> Tensor");
  m.def("count_sketch_query(Tensor sketch, Tensor table, Tensor signs, str reduce=\"median\") -> Tensor");
}
