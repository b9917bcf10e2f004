// The table pass of the CPU count sketch at the avx512 level (64-byte float adds): count_sketch_lanes_body_x86.h
// over simd::avx512 (common/simd_levels_x86.h).
#include "common/cpu_isa.h"

#if FK_X86_LEVELS
#define FK_LEVEL avx512
#include "sketch/count_sketch_lanes_body_x86.h"
#endif
