// The pybind11 module fedkernels._C: the host-side helpers (hash parameters, the codec, build facts),
// no torch type. The ops of torch.ops.fedkernels register themselves: each family's schemas in
// csrc/<family>/<family>_schema.cpp, its kernels per device in the family's *_cpu.cpp / *_cuda.cpp files.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "common/cpu_isa.h"
#include "common/hash_family.h"

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
  // The compilers and CPU levels of this build, as cmake/build_info.cmake records them beside the module.
  d["compiler"] = FK_COMPILER;
  d["cuda_compiler"] = FK_CUDA_COMPILER;
#if FK_X86_LEVELS
  d["cpu_levels"] = std::vector<std::string>{"generic", "avx2", "avx512"};
#else
  d["cpu_levels"] = std::vector<std::string>{"generic"};
#endif
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
  fedkernels::register_run_codec(m);  // comm: fedkernels.comm's run-length codec
  fedkernels::register_kmeans1d(m);   // comm: k-means of run values
}
