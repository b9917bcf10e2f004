// The comm family's functions of fedkernels._C (host-side byte work for fedkernels.comm: no torch
// ops). pybind11 has no library fragments, so the module (csrc/ops.cpp) calls these, in this order.
#pragma once

#include <pybind11/pybind11.h>

namespace fedkernels {

void register_run_codec(pybind11::module_& m);  // run_codec.cpp: rle_encode, rle_decode, rle_read_header
void register_kmeans1d(pybind11::module_& m);   // kmeans1d.cpp: kmeans1d

}  // namespace fedkernels
