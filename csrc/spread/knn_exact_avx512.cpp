// The vector final pass of the CPU knn_classes at the avx512 level: knn_exact_body_x86.h over
// simd::avx512 (common/simd_levels_x86.h).
#include "common/cpu_isa.h"

#if FK_X86_LEVELS
#define FK_LEVEL avx512
#include "spread/knn_exact_body_x86.h"
#endif
