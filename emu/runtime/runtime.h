// The CUDA execution emulator: runs the project's unmodified __global__ kernels on the host.
//
// Blocks run one after another (in forward, reverse or a seeded random order); each thread of a
// block is a user-space fiber, scheduled round-robin (in the same three orders). __syncthreads,
// __syncwarp and the warp shuffles/votes are barriers of that scheduler: a thread runs until it
// reaches one, and the barrier releases when every thread it names has arrived. Exited threads
// leave __syncthreads; a deadlock, a divergent barrier, or a warp operation naming an exited lane
// is an error (raised on the host after the block), never a hang. __shared__ variables live in
// the emulator's shared-memory arena (each variable behind a redzone), poisoned with 0xFF bytes in
// every block before its first use so a read before a write shows. Every launch is recorded (kernel name, grid, block)
// for the coverage check and for bench/ops/gpu_model.py; a record-only mode skips the kernel bodies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

// ---- CUDA's vector types and stream handle -------------------------------------------------
struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};
typedef struct CUstream_st* cudaStream_t;

namespace fk_emu {

enum class WarpOpKind : int { kSync = 0, kShflIdx, kShflUp, kShflDown, kShflXor, kBallot, kAny, kAll };

// What one emulated GPU thread is: its indices and the state its fiber shares with the scheduler.
struct ThreadCtx {
  uint3 idx;
  int tid = 0, warp = 0, lane = 0;
};
struct BlockCtx {
  uint3 idx;
  dim3 dim, grid;
};

ThreadCtx* current_thread();
const BlockCtx* current_block();

// Barriers (called from kernel code; file/line identify the call site).
void syncthreads(const char* file, int line);
// A warp operation: a barrier of the lanes in mask that also exchanges one 64-bit value per lane.
uint64_t warp_op(WarpOpKind kind, unsigned mask, uint64_t value, int arg, int width, const char* file, int line);

// A kernel launch: the host-side entry of the rewritten `kernel<<<cfg>>>(args)`.
struct Config {
  dim3 grid, block;
  size_t shared_bytes;
  Config(dim3 g, dim3 b, size_t s = 0, cudaStream_t = nullptr) : grid(g), block(b), shared_bytes(s) {}
};
void run_grid(const char* name, const Config& cfg, void (*body)(void*), void* ctx);

template <typename... P, typename... A>
void launch(const char* name, void (*kernel)(P...), const Config& cfg, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
  // Arguments are converted to the parameter types at the launch, as CUDA copies them then.
  std::tuple<std::decay_t<P>...> params(std::forward<A>(args)...);
  auto body = [&] { std::apply(kernel, params); };
  run_grid(name, cfg, [](void* c) { (*static_cast<decltype(body)*>(c))(); }, &body);
}

// One __shared__ variable (per declaration and template instantiation): a fixed place in the
// emulated shared memory, poisoned when the first thread of a block reaches its declaration.
size_t shared_allocate(size_t bytes, size_t align, const char* name);
void* shared_enter(size_t offset, size_t bytes, uint64_t* poisoned_in_block);
class SharedSlot {
 public:
  SharedSlot(size_t bytes, size_t align, const char* name)
      : offset_(shared_allocate(bytes, align, name)), bytes_(bytes) {}
  void* get() { return shared_enter(offset_, bytes_, &block_); }

 private:
  size_t offset_, bytes_;
  uint64_t block_ = 0;
};

// cudaGetLastError's analogue: the first launch error since the last check, thrown as c10::Error.
void check_last_launch(const char* file, int line);

template <typename T>
uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "warp shuffles move at most 8 bytes");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <typename T>
T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

}  // namespace fk_emu

// ---- CUDA's language, as the kernels see it -------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
// __shared__ declarations are rewritten by emu/rewrite.py into references into the block's
// emulated shared memory (fk_emu::SharedSlot); one left unrewritten fails to compile here.
#define __shared__ FK_EMU_SHARED_DECLARATION_NOT_REWRITTEN

#define threadIdx (::fk_emu::current_thread()->idx)
#define blockIdx (::fk_emu::current_block()->idx)
#define blockDim (::fk_emu::current_block()->dim)
#define gridDim (::fk_emu::current_block()->grid)
#define warpSize 32

#define __syncthreads() ::fk_emu::syncthreads(__FILE__, __LINE__)
#define __syncwarp(...) ::fk_emu::syncwarp_at(__FILE__, __LINE__ __VA_OPT__(, ) __VA_ARGS__)
#define __shfl_sync(...) ::fk_emu::shfl_at<::fk_emu::WarpOpKind::kShflIdx>(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_up_sync(...) ::fk_emu::shfl_at<::fk_emu::WarpOpKind::kShflUp>(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_down_sync(...) ::fk_emu::shfl_at<::fk_emu::WarpOpKind::kShflDown>(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_xor_sync(...) ::fk_emu::shfl_at<::fk_emu::WarpOpKind::kShflXor>(__FILE__, __LINE__, __VA_ARGS__)
#define __ballot_sync(mask, pred) \
  static_cast<unsigned>(          \
      ::fk_emu::warp_op(::fk_emu::WarpOpKind::kBallot, (mask), (pred) ? 1 : 0, 0, 32, __FILE__, __LINE__))
#define __any_sync(mask, pred) \
  static_cast<int>(::fk_emu::warp_op(::fk_emu::WarpOpKind::kAny, (mask), (pred) ? 1 : 0, 0, 32, __FILE__, __LINE__))
#define __all_sync(mask, pred) \
  static_cast<int>(::fk_emu::warp_op(::fk_emu::WarpOpKind::kAll, (mask), (pred) ? 1 : 0, 0, 32, __FILE__, __LINE__))

namespace fk_emu {

inline void syncwarp_at(const char* file, int line, unsigned mask = 0xffffffffu) {
  warp_op(WarpOpKind::kSync, mask, 0, 0, 32, file, line);
}

template <WarpOpKind K, typename T>
T shfl_at(const char* file, int line, unsigned mask, T var, int arg, int width = 32) {
  return from_bits<T>(warp_op(K, mask, to_bits(var), arg, width, file, line));
}

}  // namespace fk_emu

// ---- device intrinsics the FK_HOST_DEVICE headers use --------------------------------------
inline unsigned long long __umul64hi(unsigned long long x, unsigned long long y) {
  return static_cast<unsigned long long>((static_cast<unsigned __int128>(x) * y) >> 64);
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
template <typename T>
inline T __ldg(const T* p) {
  return *p;
}
