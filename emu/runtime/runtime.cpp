// The emulator's scheduler: fibers, barriers, warp operations, launches and their record.
// Built without the kernels' instrumentation (never -fsanitize=thread), with ASan when the
// kernels have it (fiber switches are then announced to ASan).
#if !defined(__x86_64__)
#error "the CUDA emulator (a test tool) is x86-64 only: its fibers switch stacks in x86-64 assembly"
#endif
#include "emu/runtime/runtime.h"

#include <c10/util/Exception.h>
#include <sys/mman.h>
#include <xmmintrin.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "emu/runtime/control.h"
#include "emu/runtime/shared_memory.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define FK_EMU_ASAN 1
#endif

#if !defined(__x86_64__)
#error "the CUDA emulator's fiber switch is written for x86-64"
#endif

// The context switch: save the callee-saved registers, MXCSR and the x87 control word on the
// current stack, store its pointer in *save, load the other stack, restore, return into it.
extern "C" void fk_emu_switch(void** save, void* load);
// First frame of a new fiber: call r13(r12) (set up by make_fiber); the entry never returns.
extern "C" void fk_emu_fiber_start();
asm(R"(
  .text
  .globl fk_emu_switch
  .hidden fk_emu_switch
  .type fk_emu_switch,@function
fk_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size fk_emu_switch, .-fk_emu_switch
  .globl fk_emu_fiber_start
  .hidden fk_emu_fiber_start
  .type fk_emu_fiber_start,@function
fk_emu_fiber_start:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size fk_emu_fiber_start, .-fk_emu_fiber_start
)");

namespace fk_emu {

namespace {

constexpr int kMaxThreads = 1024;
#if defined(FK_EMU_ASAN)
constexpr size_t kStackBytes = 512 * 1024;  // ASan frames carry redzones
#else
constexpr size_t kStackBytes = 256 * 1024;
#endif
constexpr size_t kGuardBytes = 4096;

enum class State { kRunnable, kAtBlockBarrier, kAtWarpOp, kExited };

struct Fiber {
  void* sp = nullptr;
  char* stack_lo = nullptr;  // usable stack: [stack_lo, stack_lo + kStackBytes)
  ThreadCtx ctx;
  State state = State::kExited;
  const char* file = nullptr;  // the barrier it waits at
  int line = 0;
  WarpOpKind op = WarpOpKind::kSync;
  unsigned mask = 0;
  uint64_t value = 0, result = 0;
  int arg = 0, width = 32;
  void* asan_fake_stack = nullptr;
};

// One launch's block being run on this OS thread.
struct BlockRun {
  BlockCtx block;
  void (*body)(void*) = nullptr;
  void* body_ctx = nullptr;
  std::vector<Fiber>* fibers = nullptr;
  int n = 0;
  Fiber* running = nullptr;
  void* scheduler_sp = nullptr;
  void* scheduler_fake_stack = nullptr;
  const void* scheduler_stack_lo = nullptr;
  size_t scheduler_stack_size = 0;
  std::string error;  // first error raised by a thread (kernel exception, bad warp op)
  uint32_t mxcsr = 0x1F80;
  uint16_t fpcw = 0x037F;
};

thread_local BlockRun* t_run = nullptr;
thread_local ThreadCtx* t_thread = nullptr;

// Fiber stacks: mapped once per OS thread, each below a guard page, reused by every block.
struct StackPool {
  char* base = nullptr;
  ~StackPool() {
    if (base) munmap(base, static_cast<size_t>(kMaxThreads) * (kStackBytes + kGuardBytes));
  }
  char* stack(int i) {
    if (!base) {
      const size_t total = static_cast<size_t>(kMaxThreads) * (kStackBytes + kGuardBytes);
      void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      TORCH_CHECK(p != MAP_FAILED, "CUDA emulator: cannot map fiber stacks");
      base = static_cast<char*>(p);
      for (int k = 0; k < kMaxThreads; ++k) mprotect(base + k * (kStackBytes + kGuardBytes), kGuardBytes, PROT_NONE);
    }
    return base + static_cast<size_t>(i) * (kStackBytes + kGuardBytes) + kGuardBytes;
  }
};
thread_local StackPool t_stacks;
thread_local std::vector<Fiber> t_fibers(kMaxThreads);

void switch_to_scheduler(Fiber* f, bool exiting) {
  BlockRun* run = t_run;
#if defined(FK_EMU_ASAN)
  __sanitizer_start_switch_fiber(exiting ? nullptr : &f->asan_fake_stack, run->scheduler_stack_lo,
                                 run->scheduler_stack_size);
#endif
  fk_emu_switch(&f->sp, run->scheduler_sp);
#if defined(FK_EMU_ASAN)
  __sanitizer_finish_switch_fiber(f->asan_fake_stack, nullptr, nullptr);
#endif
  t_thread = &f->ctx;
}

[[gnu::noinline]] void run_thread_body(BlockRun* run) {
  try {
    run->body(run->body_ctx);
  } catch (const std::exception& e) {
    if (run->error.empty()) run->error = std::string("a kernel thread raised: ") + e.what();
  } catch (...) {
    if (run->error.empty()) run->error = "a kernel thread raised an unknown exception";
  }
}

void fiber_main(void* arg) {
  Fiber* f = static_cast<Fiber*>(arg);
  BlockRun* run = t_run;
#if defined(FK_EMU_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, &run->scheduler_stack_lo, &run->scheduler_stack_size);
#endif
  t_thread = &f->ctx;
  run_thread_body(run);
  f->state = State::kExited;
  switch_to_scheduler(f, /*exiting=*/true);
  __builtin_unreachable();
}

void make_fiber(Fiber* f, char* lo, uint32_t mxcsr, uint16_t fpcw) {
  f->stack_lo = lo;
  uintptr_t top = reinterpret_cast<uintptr_t>(lo + kStackBytes) & ~uintptr_t(15);
  uint64_t* s = reinterpret_cast<uint64_t*>(top - 16);  // S: 16-aligned after the final ret
  s[-1] = reinterpret_cast<uint64_t>(&fk_emu_fiber_start);
  s[-2] = 0;                                        // rbp: ends frame-pointer walks
  s[-3] = 0;                                        // rbx
  s[-4] = reinterpret_cast<uint64_t>(f);            // r12: the entry's argument
  s[-5] = reinterpret_cast<uint64_t>(&fiber_main);  // r13: the entry
  s[-6] = 0;                                        // r14
  s[-7] = 0;                                        // r15
  s[-8] = static_cast<uint64_t>(mxcsr) | (static_cast<uint64_t>(fpcw) << 32);
  f->sp = &s[-8];
  f->asan_fake_stack = nullptr;
}

void resume(BlockRun* run, Fiber* f) {
  run->running = f;
#if defined(FK_EMU_ASAN)
  __sanitizer_start_switch_fiber(&run->scheduler_fake_stack, f->stack_lo, kStackBytes);
#endif
  fk_emu_switch(&run->scheduler_sp, f->sp);
#if defined(FK_EMU_ASAN)
  __sanitizer_finish_switch_fiber(run->scheduler_fake_stack, nullptr, nullptr);
#endif
  run->running = nullptr;
  t_thread = nullptr;
}

std::string where(const Fiber& f) {
  std::ostringstream o;
  o << "thread (" << f.ctx.idx.x << "," << f.ctx.idx.y << "," << f.ctx.idx.z << ")";
  if (f.file) o << " at " << f.file << ":" << f.line;
  return o.str();
}

const char* op_name(WarpOpKind k) {
  switch (k) {
    case WarpOpKind::kSync:
      return "__syncwarp";
    case WarpOpKind::kShflIdx:
      return "__shfl_sync";
    case WarpOpKind::kShflUp:
      return "__shfl_up_sync";
    case WarpOpKind::kShflDown:
      return "__shfl_down_sync";
    case WarpOpKind::kShflXor:
      return "__shfl_xor_sync";
    case WarpOpKind::kBallot:
      return "__ballot_sync";
    case WarpOpKind::kAny:
      return "__any_sync";
    case WarpOpKind::kAll:
      return "__all_sync";
  }
  return "?";
}

// The lane a shuffle reads, or -1 when the lane keeps its own value (CUDA's rules per kind).
int shuffle_source(WarpOpKind k, int lane, int arg, int width) {
  const int base = (lane / width) * width;
  int src = lane;
  switch (k) {
    case WarpOpKind::kShflIdx:
      src = base + ((arg % width) + width) % width;
      break;
    case WarpOpKind::kShflUp:
      src = lane - arg;
      if (src < base) return -1;
      break;
    case WarpOpKind::kShflDown:
      src = lane + arg;
      if (src >= base + width) return -1;
      break;
    case WarpOpKind::kShflXor:
      src = lane ^ arg;
      if (src >= base + width) return -1;
      break;
    default:
      return -1;
  }
  return src == lane ? -1 : src;
}

// Complete every warp operation whose lanes have all arrived. Returns how many lanes it released;
// sets run->error on a misuse (a mask naming an exited lane, a mismatched operation).
int resolve_warp_ops(BlockRun* run) {
  std::vector<Fiber>& fs = *run->fibers;
  int released = 0;
  const int num_warps = (run->n + 31) / 32;
  for (int w = 0; w < num_warps && run->error.empty(); ++w) {
    Fiber* lanes[32] = {};
    for (int l = 0; l < 32; ++l) {
      const int t = w * 32 + l;
      lanes[l] = t < run->n ? &fs[t] : nullptr;
    }
    for (int l = 0; l < 32 && run->error.empty(); ++l) {
      Fiber* f = lanes[l];
      if (!f || f->state != State::kAtWarpOp) continue;
      const unsigned mask = f->mask;
      if (!(mask & (1u << l))) {
        run->error = std::string(op_name(f->op)) + " by " + where(*f) + ": the calling lane is not in its mask";
        break;
      }
      if (f->width < 1 || f->width > 32 || (f->width & (f->width - 1)) != 0) {
        run->error = std::string(op_name(f->op)) + " by " + where(*f) + ": width must be a power of 2 <= 32";
        break;
      }
      bool complete = true;
      for (int m = 0; m < 32; ++m) {
        if (!(mask & (1u << m))) continue;
        Fiber* g = lanes[m];
        if (!g || g->state == State::kExited) {
          run->error = std::string(op_name(f->op)) + " by " + where(*f) + " names lane " + std::to_string(m) +
                       ", which has exited (or does not exist)";
          break;
        }
        if (g->state != State::kAtWarpOp) {
          complete = false;
          continue;
        }
        if (g->mask != mask || g->op != f->op ||
            (f->op != WarpOpKind::kSync && (g->file != f->file || g->line != f->line))) {
          run->error = std::string("divergent warp operation: ") + op_name(f->op) + " by " + where(*f) + " vs " +
                       op_name(g->op) + " by " + where(*g) + " (masks " + std::to_string(mask) + " / " +
                       std::to_string(g->mask) + ")";
          break;
        }
      }
      if (!run->error.empty() || !complete) continue;
      uint64_t vote = 0;
      for (int m = 0; m < 32; ++m)
        if ((mask & (1u << m)) && lanes[m]->value != 0) vote |= 1u << m;
      for (int m = 0; m < 32; ++m) {
        if (!(mask & (1u << m))) continue;
        Fiber* g = lanes[m];
        switch (g->op) {
          case WarpOpKind::kSync:
            g->result = 0;
            break;
          case WarpOpKind::kBallot:
            g->result = vote;
            break;
          case WarpOpKind::kAny:
            g->result = vote != 0;
            break;
          case WarpOpKind::kAll:
            g->result = vote == mask;
            break;
          default: {
            const int src = shuffle_source(g->op, m, g->arg, g->width);
            if (src < 0) {
              g->result = g->value;
            } else if (!(mask & (1u << src))) {
              run->error = std::string(op_name(g->op)) + " by " + where(*g) + " reads lane " + std::to_string(src) +
                           ", which is not in the mask";
            } else {
              g->result = lanes[src]->value;
            }
          }
        }
      }
      if (!run->error.empty()) break;
      for (int m = 0; m < 32; ++m) {
        if (!(mask & (1u << m))) continue;
        lanes[m]->state = State::kRunnable;
        ++released;
      }
      warp_synced(w);
    }
  }
  return released;
}

// Release __syncthreads when every live thread waits there (at one call site).
int resolve_block_barrier(BlockRun* run) {
  std::vector<Fiber>& fs = *run->fibers;
  const Fiber* first = nullptr;
  int waiting = 0;
  for (int t = 0; t < run->n; ++t) {
    const Fiber& f = fs[t];
    if (f.state == State::kExited) continue;
    if (f.state != State::kAtBlockBarrier) return 0;
    if (!first) {
      first = &f;
    } else if (f.file != first->file || f.line != first->line) {
      run->error = "divergent __syncthreads: " + where(*first) + " vs " + where(f);
      return 0;
    }
    ++waiting;
  }
  if (waiting == 0) return 0;
  for (int t = 0; t < run->n; ++t)
    if (fs[t].state == State::kAtBlockBarrier) fs[t].state = State::kRunnable;
  block_synced();
  return waiting;
}

std::string deadlock_report(BlockRun* run) {
  std::ostringstream o;
  o << "deadlock in block (" << run->block.idx.x << "," << run->block.idx.y << "," << run->block.idx.z
    << "): no thread can run.";
  int shown = 0;
  for (int t = 0; t < run->n && shown < 6; ++t) {
    const Fiber& f = (*run->fibers)[t];
    if (f.state == State::kAtBlockBarrier) {
      o << " " << where(f) << " waits in __syncthreads;";
      ++shown;
    } else if (f.state == State::kAtWarpOp) {
      o << " " << where(f) << " waits in " << op_name(f.op) << " (mask " << f.mask << ");";
      ++shown;
    }
  }
  return o.str();
}

// Runs one block to completion; returns an error message ("" when it ran cleanly).
std::string run_block(BlockRun* run, const std::vector<int>& order) {
  std::vector<Fiber>& fs = *run->fibers;
  for (int t = 0; t < run->n; ++t) {
    Fiber& f = fs[t];
    const unsigned bx = run->block.dim.x, by = run->block.dim.y;
    f.ctx.idx = uint3{static_cast<unsigned>(t % bx), static_cast<unsigned>((t / bx) % by),
                      static_cast<unsigned>(t / (bx * by))};
    f.ctx.tid = t;
    f.ctx.warp = t / 32;
    f.ctx.lane = t % 32;
    f.state = State::kRunnable;
    f.file = nullptr;
    f.line = 0;
    make_fiber(&f, t_stacks.stack(t), run->mxcsr, run->fpcw);
  }
  int live = run->n;
  while (true) {
    for (int t : order) {
      Fiber& f = fs[t];
      if (f.state != State::kRunnable) continue;
      resume(run, &f);
      if (f.state == State::kExited) --live;
      if (!run->error.empty()) break;
    }
    if (!run->error.empty() || live == 0) break;
    const int released = resolve_warp_ops(run) + (run->error.empty() ? resolve_block_barrier(run) : 0);
    if (!run->error.empty()) break;
    if (released == 0) {
      run->error = deadlock_report(run);
      break;
    }
  }
  if (!run->error.empty()) {
#if defined(FK_EMU_ASAN)
    // Abandoned fibers leave poisoned frames on stacks that the next block reuses.
    for (int t = 0; t < run->n; ++t) __asan_unpoison_memory_region(fs[t].stack_lo, kStackBytes);
#endif
  }
  return run->error;
}

std::mutex g_launch_mutex;  // one kernel at a time: __shared__ storage is global

}  // namespace

ThreadCtx* current_thread() { return t_thread; }
const BlockCtx* current_block() { return &t_run->block; }

void syncthreads(const char* file, int line) {
  BlockRun* run = t_run;
  Fiber* f = run->running;
  f->state = State::kAtBlockBarrier;
  f->file = file;
  f->line = line;
  switch_to_scheduler(f, false);
}

uint64_t warp_op(WarpOpKind kind, unsigned mask, uint64_t value, int arg, int width, const char* file, int line) {
  BlockRun* run = t_run;
  Fiber* f = run->running;
  f->state = State::kAtWarpOp;
  f->op = kind;
  f->mask = mask;
  f->value = value;
  f->arg = arg;
  f->width = width;
  f->file = file;
  f->line = line;
  switch_to_scheduler(f, false);
  return f->result;
}

void run_grid(const char* name, const Config& cfg, void (*body)(void*), void* ctx) {
  const dim3 g = cfg.grid, b = cfg.block;
  const uint64_t threads = static_cast<uint64_t>(b.x) * b.y * b.z;
  std::ostringstream bad;
  if (g.x == 0 || g.y == 0 || g.z == 0 || g.x > 2147483647u || g.y > 65535 || g.z > 65535)
    bad << "grid (" << g.x << "," << g.y << "," << g.z << ") is outside CUDA's limits";
  else if (threads == 0 || threads > kMaxThreads || b.z > 64)
    bad << "block (" << b.x << "," << b.y << "," << b.z << ") is outside CUDA's limits";
  else if (cfg.shared_bytes != 0)
    bad << "dynamic shared memory (" << cfg.shared_bytes << " bytes) is not modelled by the emulator";
  TORCH_CHECK(bad.str().empty(), "CUDA emulator: invalid configuration argument launching ", name, ": ", bad.str());
  record_launch(name, g, b);
  if (!execute_enabled()) return;

  std::lock_guard<std::mutex> lock(g_launch_mutex);
  BlockRun run;
  run.block.dim = b;
  run.block.grid = g;
  run.body = body;
  run.body_ctx = ctx;
  run.fibers = &t_fibers;
  run.n = static_cast<int>(threads);
  run.mxcsr = _mm_getcsr();
  asm volatile("fnstcw %0" : "=m"(run.fpcw));
  const std::vector<int> thread_order = make_order(run.n);
  const uint64_t num_blocks = static_cast<uint64_t>(g.x) * g.y * g.z;
  const std::vector<uint64_t> block_order = make_block_order(num_blocks);
  BlockRun* outer = t_run;
  t_run = &run;
  std::string error;
  for (uint64_t i = 0; i < num_blocks && error.empty(); ++i) {
    const uint64_t blk = block_order.empty() ? i : block_order[i];
    run.block.idx = uint3{static_cast<unsigned>(blk % g.x), static_cast<unsigned>((blk / g.x) % g.y),
                          static_cast<unsigned>(blk / (static_cast<uint64_t>(g.x) * g.y))};
    begin_block();
    error = run_block(&run, thread_order);
    if (error.empty()) error = end_block();
  }
  t_run = outer;
  TORCH_CHECK(error.empty(), "CUDA emulator: kernel ", name, ": ", error);
}

void check_last_launch(const char*, int) {}  // launch errors are raised by the launch itself

}  // namespace fk_emu
