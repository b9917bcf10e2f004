// Host-only: the one place the CPU kernels learn which instruction-set level to run. Every
// hand-vectorised CPU path has a version per level it was written for (files named *_avx512.cpp,
// *_avx2.cpp, built with per-function target attributes) and a portable one; a dispatch site asks
// cpu_isa() and calls the highest version at or below it. The level is the lower of what this CPU
// supports and the FK_CPU_ISA cap, read once when the module is imported.
#pragma once

// FK_X86_LEVELS: this build has the avx2 and avx512 versions (x86-64, GCC or Clang, host code).
// FK_TARGET_AVX2 / FK_TARGET_AVX512 build one function for the CpuIsa level of that name: they
// enable exactly the features cpu_isa_host() checks for it (FK_ISA_FEATURES_*), no fewer (a
// function must not miss an instruction its level has) and no more (nor use one it lacks). They
// are the only target attributes in csrc/ (python_tests/ops/test_cpu_isa.py); only a dispatch on
// cpu_isa() may call such a function. The build uses -ffp-contract=off, so enabling FMA here never
// contracts a * b + c behind the code's back: only explicit FMA intrinsics fuse.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define FK_X86_LEVELS 1
#define FK_ISA_FEATURES_AVX2 "avx2,fma,f16c"
#define FK_ISA_FEATURES_AVX512 FK_ISA_FEATURES_AVX2 ",avx512f,avx512vl"
#define FK_TARGET_AVX2 __attribute__((target(FK_ISA_FEATURES_AVX2)))
#define FK_TARGET_AVX512 __attribute__((target(FK_ISA_FEATURES_AVX512)))
#else
#define FK_X86_LEVELS 0
#endif

namespace fedkernels {

// Ordered: a level includes everything below it.
//   generic: portable C++ (the compiler's baseline for the target: SSE2 on x86-64, NEON on aarch64)
//   avx2:    AVX2 + FMA + F16C (x86-64 since Haswell / Zen)
//   avx512:  the avx2 level plus AVX-512 F and VL
enum class CpuIsa : int { generic = 0, avx2 = 1, avx512 = 2 };

// The level in use: min(host level, FK_CPU_ISA cap, test limit). Throws ValueError (c10) when
// FK_CPU_ISA holds an unknown value, so an op never runs at a level nobody asked for.
CpuIsa cpu_isa();

// What this CPU (and its OS) supports, from cpuid; generic on non-x86 targets.
CpuIsa cpu_isa_host();

// "generic", "avx2" or "avx512".
const char* cpu_isa_name(CpuIsa level);

// The FK_CPU_ISA value as read at import ("" when unset or empty).
const char* cpu_isa_cap_text();

// Reads FK_CPU_ISA (once) and throws std::invalid_argument naming it if its value is unknown. The
// module's import calls it, so a bad value fails `import fedkernels` with that message.
void cpu_isa_init();

// Tests only (fedkernels._C._set_cpu_isa_limit): lower the level below the import-time one to run
// two levels in one process. Never raises it above min(host, cap). Returns the level now in use.
CpuIsa set_cpu_isa_limit(CpuIsa limit);

// At least `level` in use: the test a dispatch site makes.
inline bool cpu_isa_at_least(CpuIsa level) { return static_cast<int>(cpu_isa()) >= static_cast<int>(level); }

}  // namespace fedkernels

namespace fk = fedkernels;  // fk::cpu_isa(): the short name the docs use
