// Operator schemas of torch.ops.fedkernels and the pybind11 module fedkernels._C.
// Kernels register themselves per device in csrc/<family>/<family>_{cpu.cpp,cuda.cu}.
#include <ATen/Parallel.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/library.h>
#include <torch/version.h>

#include <optional>
#include <string>
#include <vector>

#include "common/cpu_isa.h"
#include "common/hash_family.h"

namespace fedkernels {
void register_prox_codec(pybind11::module_& m);  // csrc/prox/run_codec.cpp
}

TORCH_LIBRARY(fedkernels, m) {
  // ---- common: the hash family (docs/design.md §2)
  m.def("hash_buckets(Tensor ids, Tensor params, int num_buckets) -> (Tensor, Tensor)");

  // ---- sketch: FedMLH label hashing and count sketches
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
  // (sketch: more schemas here)

  // ---- sampled: FedSS sampled softmax
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
  // (sampled: schemas here)

  // ---- select: partial weight exchange
  // normalize has no schema default on purpose: torch 2.13 drops defaulted args from the call,
  // which breaks register_autograd's structure check for ops with Tensor[] inputs.
  m.def("delta_norms(Tensor[] new, Tensor[] old, bool normalize) -> Tensor");
  m.def("select_topk_tensors(Tensor[] new, Tensor[] old, float fraction, bool normalize) -> Tensor");
  m.def(
      "masked_weighted_average(Tensor(a!)[] dst, Tensor[] sent, Tensor client_of, Tensor tensor_of, "
      "Tensor weights) -> ()");

  // ---- prox: proximal l1-difference (TV1D) and the network prox
  m.def("prox_tv1d(Tensor z, Tensor lam, bool anchored=True, int block_size=0) -> Tensor");
  m.def("prox_tv1d_backward(Tensor grad, Tensor u, Tensor lam, bool anchored, int block_size) -> (Tensor, Tensor)");
  // (prox: schemas here)

  // ---- spread: FedAwS / FedALC spreadout
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

namespace {

// The R x 4 parameters (a, b, c, d) of docs/design.md §2 drawn from splitmix64(seed), row-major.
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
  d["cpu_isa"] = fedkernels::cpu_isa_name(fedkernels::cpu_isa());
  d["cpu_isa_host"] = fedkernels::cpu_isa_name(fedkernels::cpu_isa_host());
  d["cpu_isa_cap"] = fedkernels::cpu_isa_cap_text();
  return d;
}

// Tests only: run a lower CPU level in this process (csrc/common/cpu_isa.h). None lifts the limit.
std::string set_cpu_isa_limit(const std::optional<std::string>& level) {
  using fedkernels::CpuIsa;
  CpuIsa limit = CpuIsa::avx512;
  if (level.has_value()) {
    if (*level == "generic") {
      limit = CpuIsa::generic;
    } else if (*level == "avx2") {
      limit = CpuIsa::avx2;
    } else if (*level != "avx512") {
      throw pybind11::value_error("level must be 'avx512', 'avx2', 'generic' or None, got '" + *level + "'");
    }
  }
  return fedkernels::cpu_isa_name(fedkernels::set_cpu_isa_limit(limit));
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "fedkernels compiled core; the ops themselves live in torch.ops.fedkernels";
  fedkernels::cpu_isa_init();  // reads FK_CPU_ISA once; an unknown value fails the import (ImportError naming it)
  m.def("hash_params", &hash_params, pybind11::arg("seed"), pybind11::arg("num_tables"),
        "Hash-family parameters (a, b, c, d) per table from splitmix64(seed), as a flat list of uint64.");
  m.def("build_info", &build_info, "What this build of fedkernels was compiled with.");
  m.def("_set_cpu_isa_limit", &set_cpu_isa_limit, pybind11::arg("level"),
        "Tests only: cap the CPU level below the import-time one (None: no extra cap); returns the level in use.");
  fedkernels::register_prox_codec(m);  // prox: fedkernels.comm host-side codec
}
