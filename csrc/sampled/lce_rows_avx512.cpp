// The row kernels of the CPU linear_cross_entropy at the avx512 level: lce_rows_body_x86.h over
// simd::avx512 (common/simd_levels_x86.h).
#include "common/cpu_isa.h"

#if FK_X86_LEVELS
#define FK_LEVEL avx512
#include "sampled/lce_rows_body_x86.h"
#endif
