// __shared__ memory of the emulated kernels: one arena holding every declared variable (each behind
// a redzone), poisoned per block before first use, and (in the race-check build) a shadow of every
// access between barriers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace fk_emu {

void set_poison(bool on);
size_t shared_size();  // bytes of variables allocated so far (redzones excluded)

void begin_block();          // a new block: every variable is poisoned again at its first use
std::string end_block();     // the race / uninitialised-read reports of this block ("" if none)
void block_synced();         // a __syncthreads released: accesses before it are ordered
void warp_synced(int warp);  // a warp operation completed: that warp's earlier accesses are ordered
// One access by the running kernel thread (called by the race-check build's instrumentation).
void shared_access(const void* p, size_t n, bool write);

// [arena, arena + arena_used): where __shared__ variables live; the race hooks test this first,
// so the loads and stores that are not to shared memory (nearly all) cost one compare.
extern char* g_shared_arena;
extern size_t g_shared_used;
inline bool in_shared_arena(const void* p) {
  return static_cast<size_t>(static_cast<const char*>(p) - g_shared_arena) < g_shared_used;
}

}  // namespace fk_emu
