// The row loop of the CPU scatter_rows_mean at the avx2 level (the avx512 level runs it too):
// scatter_rows_mean_body_x86.h built for simd::avx2 (common/simd_levels_x86.h).
#include "common/cpu_isa.h"

#if FK_X86_LEVELS
#define FK_LEVEL avx2
#include "sampled/scatter_rows_mean_body_x86.h"
#endif
