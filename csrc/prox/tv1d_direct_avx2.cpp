// The direct scan of the CPU prox_tv1d at the avx2 level (the avx512 level runs it too):
// tv1d_direct_body_x86.h built for simd::avx2 (common/simd_levels_x86.h).
#include "common/cpu_isa.h"

#if FK_X86_LEVELS
#define FK_LEVEL avx2
#include "prox/tv1d_direct_body_x86.h"
#endif
