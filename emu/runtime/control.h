// The emulator's settings and its launch record, shared by the scheduler and the Python module.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "emu/runtime/runtime.h"

namespace fk_emu {

enum class Order { kForward, kReverse, kRandom };

struct LaunchRecord {
  std::string kernel;
  dim3 grid, block;
};

void set_order(Order order, uint64_t seed);
void set_execute(bool execute);
bool execute_enabled();
// The order threads are resumed in (forward, reverse, or a fresh permutation per call).
std::vector<int> make_order(int n);
// The order blocks run in; empty means forward (so the common case allocates nothing).
std::vector<uint64_t> make_block_order(uint64_t num_blocks);

void record_launch(const char* name, dim3 grid, dim3 block);
std::map<std::string, int64_t> launch_counts();
void reset_launch_counts();
void start_recording();
std::vector<LaunchRecord> stop_recording();

}  // namespace fk_emu
