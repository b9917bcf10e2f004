// The emulated shared memory: an arena of __shared__ variables with redzones, their poisoning, and
// the race / initialisation shadow of the race-check build.
#include "emu/runtime/shared_memory.h"

#include <c10/util/Exception.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <sstream>
#include <vector>

#include "emu/runtime/runtime.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

namespace fk_emu {

namespace {

constexpr size_t kArenaBytes = size_t(16) << 20;  // address space only; pages come on first touch
constexpr size_t kRedzone = 64;                   // before every variable (ASan-poisoned in ASan builds)

size_t g_var_bytes = 0;
std::mutex g_alloc_mutex;
bool g_poison = true;
uint64_t g_block = 1;  // serial number of the block being run (0: none yet)

// Shadow of one shared byte: who wrote and read it since the last barrier that orders them.
struct Cell {
  uint64_t block = 0;  // the block these fields belong to
  uint32_t epoch = 0;  // the __syncthreads epoch the access fields belong to
  int16_t writer = -1, reader = -1;
  uint16_t writer_gen = 0, reader_gen = 0;  // the accessing warp's warp-sync generation then
  uint8_t many_readers = 0, written = 0;
};

struct Var {
  size_t offset, bytes;
  const char* name;
};
std::vector<Var> g_vars;  // every __shared__ variable placed so far, by offset

std::vector<Cell> g_shadow;
uint32_t g_epoch = 0;
uint16_t g_warp_gen[32];
std::vector<std::string> g_reports;

bool ordered(int other, uint16_t other_gen, int tid) {
  if (other == tid) return true;
  return other / 32 == tid / 32 && other_gen != g_warp_gen[tid / 32];
}

void report(const char* what, size_t offset, int a, int b) {
  if (g_reports.size() >= 4) return;
  std::ostringstream o;
  o << what << " at";
  const Var* var = nullptr;
  for (const Var& v : g_vars)
    if (offset >= v.offset && offset < v.offset + v.bytes) var = &v;
  if (var)
    o << " byte " << offset - var->offset << " of __shared__ " << var->name;
  else
    o << " __shared__ arena byte " << offset;
  if (a >= 0)
    o << " between thread " << a << " and thread " << b << " (no barrier orders them)";
  else
    o << " by thread " << b;
  g_reports.push_back(o.str());
}

}  // namespace

char* g_shared_arena = nullptr;
size_t g_shared_used = 0;  // the end of the last variable (0 until the first is placed)

size_t shared_allocate(size_t bytes, size_t align, const char* name) {
  std::lock_guard<std::mutex> lock(g_alloc_mutex);
  if (!g_shared_arena) {
    void* p = mmap(nullptr, kArenaBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    TORCH_CHECK(p != MAP_FAILED, "CUDA emulator: cannot map the shared-memory arena");
    g_shared_arena = static_cast<char*>(p);
#if defined(__SANITIZE_ADDRESS__)
    __asan_poison_memory_region(g_shared_arena, kArenaBytes);  // all redzone until a variable is placed
#endif
  }
  align = align < 16 ? 16 : align;
  const size_t off = (std::max(g_shared_used, kRedzone) + align - 1) / align * align;
  TORCH_CHECK(off + bytes + kRedzone <= kArenaBytes, "CUDA emulator: __shared__ ", name, " does not fit the arena");
  g_shared_used = off + bytes + kRedzone;
  g_var_bytes += bytes;
  g_vars.push_back(Var{off, bytes, name});
#if defined(__SANITIZE_ADDRESS__)
  __asan_unpoison_memory_region(g_shared_arena + off, bytes);
#endif
  return off;
}

void* shared_enter(size_t offset, size_t bytes, uint64_t* poisoned_in_block) {
  char* p = g_shared_arena + offset;
  if (*poisoned_in_block != g_block) {  // the first thread of this block to reach the declaration
    *poisoned_in_block = g_block;
    if (g_poison) std::memset(p, 0xFF, bytes);
  }
  return p;
}

void set_poison(bool on) { g_poison = on; }
size_t shared_size() { return g_var_bytes; }

void begin_block() {
  ++g_block;
  ++g_epoch;
  std::memset(g_warp_gen, 0, sizeof(g_warp_gen));
}

std::string end_block() {
  if (g_reports.empty()) return {};
  std::string out = "shared-memory check: ";
  for (size_t i = 0; i < g_reports.size(); ++i) out += (i ? "; " : "") + g_reports[i];
  g_reports.clear();
  return out;
}

void block_synced() { ++g_epoch; }
void warp_synced(int warp) { ++g_warp_gen[warp]; }

void shared_access(const void* p, size_t n, bool write) {
  if (!in_shared_arena(p)) return;
  const ThreadCtx* t = current_thread();
  if (!t) return;  // host code of the launcher
  const size_t off = static_cast<size_t>(static_cast<const char*>(p) - g_shared_arena);
  if (g_shadow.size() < g_shared_used)
    g_shadow.resize(kArenaBytes < 2 * g_shared_used ? kArenaBytes : 2 * g_shared_used);
  const int tid = t->tid;
  const uint16_t gen = g_warp_gen[tid / 32];
  const size_t reported = g_reports.size();
  for (size_t i = off; i < off + n && i < g_shared_used && g_reports.size() == reported;
       ++i) {  // one report per access
    Cell& c = g_shadow[i];
    if (c.block != g_block) {
      c = Cell{};
      c.block = g_block;
      c.epoch = g_epoch;
    }
    if (c.epoch != g_epoch) {
      c.epoch = g_epoch;
      c.writer = c.reader = -1;
      c.many_readers = 0;
    }
    if (write) {
      if (c.writer >= 0 && !ordered(c.writer, c.writer_gen, tid)) report("write/write race", i, c.writer, tid);
      if ((c.reader >= 0 && !ordered(c.reader, c.reader_gen, tid)) || c.many_readers)
        report("read/write race", i, c.reader, tid);
      c.writer = static_cast<int16_t>(tid);
      c.writer_gen = gen;
      c.reader = -1;
      c.many_readers = 0;
      c.written = 1;
    } else {
      if (!c.written) report("read of uninitialised __shared__ memory", i, -1, tid);
      if (c.writer >= 0 && !ordered(c.writer, c.writer_gen, tid)) report("write/read race", i, c.writer, tid);
      if (c.reader < 0 || ordered(c.reader, c.reader_gen, tid)) {
        c.reader = static_cast<int16_t>(tid);
        c.reader_gen = gen;
      } else {
        c.many_readers = 1;
      }
    }
  }
}

}  // namespace fk_emu
