// Settings (thread/block order, execute or record only) and the record of launches.
#include "emu/runtime/control.h"

#include <algorithm>
#include <mutex>
#include <numeric>

namespace fk_emu {

namespace {

std::mutex g_mutex;
Order g_order = Order::kForward;
uint64_t g_rng = 0;
bool g_execute = true;
bool g_recording = false;
std::map<std::string, int64_t> g_counts;
std::vector<LaunchRecord> g_records;

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

template <typename T>
void shuffle(std::vector<T>& v) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[splitmix64(g_rng) % i]);
}

}  // namespace

void set_order(Order order, uint64_t seed) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_order = order;
  g_rng = seed;
}

void set_execute(bool execute) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_execute = execute;
}

bool execute_enabled() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_execute;
}

std::vector<int> make_order(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_order == Order::kReverse) std::reverse(v.begin(), v.end());
  if (g_order == Order::kRandom) shuffle(v);
  return v;
}

std::vector<uint64_t> make_block_order(uint64_t num_blocks) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_order == Order::kForward) return {};
  std::vector<uint64_t> v(num_blocks);
  std::iota(v.begin(), v.end(), uint64_t(0));
  if (g_order == Order::kReverse) std::reverse(v.begin(), v.end());
  if (g_order == Order::kRandom) shuffle(v);
  return v;
}

void record_launch(const char* name, dim3 grid, dim3 block) {
  std::lock_guard<std::mutex> lock(g_mutex);
  ++g_counts[name];
  if (g_recording) g_records.push_back(LaunchRecord{name, grid, block});
}

std::map<std::string, int64_t> launch_counts() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_counts;
}

void reset_launch_counts() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_counts.clear();
}

void start_recording() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_recording = true;
  g_records.clear();
}

std::vector<LaunchRecord> stop_recording() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_recording = false;
  return std::move(g_records);
}

}  // namespace fk_emu
