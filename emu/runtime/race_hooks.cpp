// The race-check build compiles the emulated kernels with GCC's ThreadSanitizer instrumentation
// (-fsanitize=thread at compile time only) and links these hooks instead of the TSan runtime:
// every load and store of the kernels reaches fk_emu::shared_access, which keeps the shadow of
// __shared__ memory (shared_memory.cpp); atomics are performed as written. Not instrumented itself.
#include <cstddef>
#include <cstdint>

#include "emu/runtime/shared_memory.h"

#define FK_HIDDEN extern "C" __attribute__((visibility("hidden")))

FK_HIDDEN void __tsan_init() {}
FK_HIDDEN void __tsan_func_entry(void*) {}
FK_HIDDEN void __tsan_func_exit() {}
FK_HIDDEN void __tsan_vptr_update(void**, void*) {}
FK_HIDDEN void __tsan_vptr_read(void**) {}
FK_HIDDEN void __tsan_read_range(void* p, size_t n) { fk_emu::shared_access(p, n, false); }
FK_HIDDEN void __tsan_write_range(void* p, size_t n) { fk_emu::shared_access(p, n, true); }

static inline void access(void* p, size_t n, bool write) {
  if (fk_emu::in_shared_arena(p)) fk_emu::shared_access(p, n, write);
}

#define FK_ACCESS_HOOKS(N)                                                  \
  FK_HIDDEN void __tsan_read##N(void* p) { access(p, N, false); }           \
  FK_HIDDEN void __tsan_write##N(void* p) { access(p, N, true); }           \
  FK_HIDDEN void __tsan_unaligned_read##N(void* p) { access(p, N, false); } \
  FK_HIDDEN void __tsan_unaligned_write##N(void* p) { access(p, N, true); } \
  FK_HIDDEN void __tsan_volatile_read##N(void* p) { access(p, N, false); }  \
  FK_HIDDEN void __tsan_volatile_write##N(void* p) { access(p, N, true); }
FK_ACCESS_HOOKS(1)
FK_ACCESS_HOOKS(2)
FK_ACCESS_HOOKS(4)
FK_ACCESS_HOOKS(8)
FK_ACCESS_HOOKS(16)

// Atomics (torch's reference counts in inline header code): done with the compiler's builtins,
// sequentially consistent whatever order was asked (stronger is always correct).
#define FK_ATOMIC_HOOKS(BITS, T)                                                                                    \
  FK_HIDDEN T __tsan_atomic##BITS##_load(const volatile T* a, int) { return __atomic_load_n(a, __ATOMIC_SEQ_CST); } \
  FK_HIDDEN void __tsan_atomic##BITS##_store(volatile T* a, T v, int) { __atomic_store_n(a, v, __ATOMIC_SEQ_CST); } \
  FK_HIDDEN T __tsan_atomic##BITS##_exchange(volatile T* a, T v, int) {                                             \
    return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                                             \
  }                                                                                                                 \
  FK_HIDDEN T __tsan_atomic##BITS##_fetch_add(volatile T* a, T v, int) {                                            \
    return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);                                                              \
  }                                                                                                                 \
  FK_HIDDEN T __tsan_atomic##BITS##_fetch_sub(volatile T* a, T v, int) {                                            \
    return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);                                                              \
  }                                                                                                                 \
  FK_HIDDEN T __tsan_atomic##BITS##_fetch_and(volatile T* a, T v, int) {                                            \
    return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST);                                                              \
  }                                                                                                                 \
  FK_HIDDEN T __tsan_atomic##BITS##_fetch_or(volatile T* a, T v, int) {                                             \
    return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST);                                                               \
  }                                                                                                                 \
  FK_HIDDEN T __tsan_atomic##BITS##_fetch_xor(volatile T* a, T v, int) {                                            \
    return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST);                                                              \
  }                                                                                                                 \
  FK_HIDDEN T __tsan_atomic##BITS##_fetch_nand(volatile T* a, T v, int) {                                           \
    return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST);                                                             \
  }                                                                                                                 \
  FK_HIDDEN int __tsan_atomic##BITS##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) {                 \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                         \
  }                                                                                                                 \
  FK_HIDDEN int __tsan_atomic##BITS##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) {                   \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                         \
  }                                                                                                                 \
  FK_HIDDEN T __tsan_atomic##BITS##_compare_exchange_val(volatile T* a, T c, T v, int, int) {                       \
    __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                               \
    return c;                                                                                                       \
  }
FK_ATOMIC_HOOKS(8, uint8_t)
FK_ATOMIC_HOOKS(16, uint16_t)
FK_ATOMIC_HOOKS(32, uint32_t)
FK_ATOMIC_HOOKS(64, uint64_t)

FK_HIDDEN void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
FK_HIDDEN void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
