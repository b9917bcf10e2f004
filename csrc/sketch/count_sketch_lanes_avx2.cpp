// The table pass of the CPU count sketch at the avx2 level (256-bit float adds): count_sketch_lanes_body_x86.h
// over simd::avx2 (common/simd_levels_x86.h).
#include "common/cpu_isa.h"

#if FK_X86_LEVELS
#define FK_LEVEL avx2
#include "sketch/count_sketch_lanes_body_x86.h"
#endif
