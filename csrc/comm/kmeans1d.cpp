// The Python binding of kmeans1d.h (fedkernels.comm's k-means of run values): validates its
// arguments, then solves without the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "comm/comm.h"
#include "comm/kmeans1d.h"

namespace py = pybind11;

namespace fedkernels {
namespace {

// kmeans1d(values, weights, k) -> (centres ascending, label of each value).
std::tuple<std::vector<double>, std::vector<int64_t>, double> kmeans1d_py(const std::vector<double>& values,
                                                                          const std::vector<double>& weights,
                                                                          int64_t k) {
  if (values.size() != weights.size()) throw py::value_error("values and weights must have the same length");
  if (k < 1) throw py::value_error("k must be >= 1, got " + std::to_string(k));
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) throw py::value_error("values must be finite");
    if (!(weights[i] > 0) || !std::isfinite(weights[i])) throw py::value_error("weights must be finite and > 0");
  }
  py::gil_scoped_release nogil;
  return kmeans1d_optimal(values, weights, k);
}

}  // namespace

void register_kmeans1d(py::module_& m) {
  m.def("kmeans1d", &kmeans1d_py, py::arg("values"), py::arg("weights"), py::arg("k"),
        "Exact weighted 1D k-means (DP, monotone divide and conquer): (centres, labels, cost).");
}

}  // namespace fedkernels
