// Operator schemas of torch.ops.fedkernels and the pybind11 module fedkernels._C.
// Kernels register themselves per device in csrc/<family>/<family>_{cpu.cpp,cuda.cu}.
#include <ATen/Parallel.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/library.h>

#include <vector>

#include "common/hash_family.h"

TORCH_LIBRARY(fedkernels, m) {
  // ---- common: the hash family (DESIGN.md §2)
  m.def("hash_buckets(Tensor ids, Tensor params, int num_buckets) -> (Tensor, Tensor)");

  // ---- sketch: FedMLH label hashing and count sketches
  m.def("label_hash(Tensor indptr, Tensor indices, Tensor table, int num_buckets) -> Tensor");
  // (sketch: more schemas here)

  // ---- sampled: FedSS sampled softmax
  // (sampled: schemas here)

  // ---- select: partial weight exchange
  // (select: schemas here)

  // ---- prox: proximal l1-difference (TV1D) and the network prox
  // (prox: schemas here)

  // ---- spread: FedAwS / FedALC spreadout
  m.def("knn_classes(Tensor W, int k, str metric=\"l2\") -> (Tensor, Tensor)");
  m.def("pair_weight_gather(Tensor indptr, Tensor indices, Tensor values, Tensor idx) -> Tensor");
  m.def("spreadout_pair_loss(Tensor W, Tensor idx, Tensor weight, float margin, str metric=\"l2\") -> Tensor");
  m.def("spreadout_pair_loss_backward(Tensor grad, Tensor W, Tensor idx, Tensor weight, float margin, "
        "str metric=\"l2\") -> Tensor");
  m.def("spreadout_loss(Tensor W, float margin, int k, Tensor? pw_indptr=None, Tensor? pw_indices=None, "
        "Tensor? pw_values=None, str metric=\"l2\") -> Tensor");
}

namespace {

// The R x 4 parameters (a, b, c, d) of DESIGN.md §2 drawn from splitmix64(seed), row-major.
std::vector<uint64_t> hash_params(uint64_t seed, int64_t num_tables) {
  using fedkernels::kMersenne61;
  if (num_tables < 1) throw pybind11::value_error("num_tables must be >= 1");
  fedkernels::SplitMix64 rng{seed};
  std::vector<uint64_t> out;
  out.reserve(static_cast<size_t>(num_tables) * 4);
  for (int64_t j = 0; j < num_tables; ++j) {
    const uint64_t x0 = rng.next(), x1 = rng.next(), x2 = rng.next(), x3 = rng.next();
    out.push_back(1 + x0 % (kMersenne61 - 1));
    out.push_back(x1 % kMersenne61);
    out.push_back(1 + x2 % (kMersenne61 - 1));
    out.push_back(x3 % kMersenne61);
  }
  return out;
}

pybind11::dict build_info() {
  pybind11::dict d;
  d["version"] = FK_VERSION;
  d["torch_version"] = FK_TORCH_VERSION;
#ifdef FK_WITH_CUDA
  d["cuda_kernels"] = true;
  d["cuda_archs"] = FK_CUDA_ARCHS;
#else
  d["cuda_kernels"] = false;
  d["cuda_archs"] = "";
#endif
  d["parallel_backend"] = at::get_parallel_info();
  return d;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "fedkernels compiled core; the ops themselves live in torch.ops.fedkernels";
  m.def("hash_params", &hash_params, pybind11::arg("seed"), pybind11::arg("num_tables"),
        "Hash-family parameters (a, b, c, d) per table from splitmix64(seed), as a flat list of uint64.");
  m.def("build_info", &build_info, "What this build of fedkernels was compiled with.");
}
