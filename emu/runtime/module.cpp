// fedkernels._C_emu: the project's CUDA kernels, executed on the CPU by the emulator, registered
// under the CUDA dispatch key (by the rewritten .cu files themselves); this file adds the controls.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "emu/runtime/control.h"
#include "emu/runtime/shared_memory.h"

namespace py = pybind11;

PYBIND11_MODULE(_C_emu, m) {
  m.doc() = "fedkernels' CUDA kernels run on the CPU by the CUDA execution emulator (testing only)";
  m.attr("checks") = FK_EMU_CHECKS;  // "none", "asan" or "race": what this build was compiled with
  m.def(
      "set_order",
      [](const std::string& order, uint64_t seed) {
        if (order == "forward")
          fk_emu::set_order(fk_emu::Order::kForward, seed);
        else if (order == "reverse")
          fk_emu::set_order(fk_emu::Order::kReverse, seed);
        else if (order == "random")
          fk_emu::set_order(fk_emu::Order::kRandom, seed);
        else
          throw py::value_error("order must be 'forward', 'reverse' or 'random', got '" + order + "'");
      },
      py::arg("order"), py::arg("seed") = 0, "Order in which blocks run and threads are resumed.");
  m.def("set_execute", &fk_emu::set_execute, py::arg("execute"),
        "False: launches are recorded (and their configuration checked) but kernel bodies do not run.");
  m.def("set_poison", &fk_emu::set_poison, py::arg("on"), "Fill __shared__ memory with 0xFF before every block.");
  m.def("shared_bytes", &fk_emu::shared_size, "Bytes of __shared__ storage declared by all emulated kernels.");
  m.def("launch_counts", &fk_emu::launch_counts, "Launches per kernel name since load (or the last reset).");
  m.def("reset_launch_counts", &fk_emu::reset_launch_counts);
  m.def("start_recording", &fk_emu::start_recording, "Record each launch's name, grid and block from now on.");
  m.def("stop_recording", [] {
    py::list out;
    for (const auto& r : fk_emu::stop_recording())
      out.append(py::make_tuple(r.kernel, py::make_tuple(r.grid.x, r.grid.y, r.grid.z),
                                py::make_tuple(r.block.x, r.block.y, r.block.z)));
    return out;
  });
}
