// The dispatch of the linear_cross_entropy row kernels (lce_rows.h) on the CPU level, and the
// generic level's scalar math.
#include "sampled/lce_rows.h"

namespace fedkernels {

LseState<float> lce_rows_finish_lse(CpuIsa isa, float* z, const float* bias, float scale, int64_t cols) {
#if FK_X86_LEVELS
  if (isa == CpuIsa::avx512) return lce_avx512::finish_lse(z, bias, scale, cols);
  if (isa == CpuIsa::avx2) return lce_avx2::finish_lse(z, bias, scale, cols);
#endif
  lce_finish_logits(z, bias, scale, cols, 0, 1);
  return lse_of_chunk(z, cols, 0, 1);
}

void lce_rows_finish_dlogits(CpuIsa isa, float* z, const float* bias, float scale, int64_t cols, float lse,
                             float g_loss, float g_lse, int64_t target_col) {
#if FK_X86_LEVELS
  if (isa == CpuIsa::avx512) return lce_avx512::finish_dlogits(z, bias, scale, cols, lse, g_loss, g_lse, target_col);
  if (isa == CpuIsa::avx2) return lce_avx2::finish_dlogits(z, bias, scale, cols, lse, g_loss, g_lse, target_col);
#endif
  lce_finish_logits(z, bias, scale, cols, 0, 1);
  lce_dlogits(z, cols, lse, g_loss, g_lse, target_col, 0, 1);
}

void lce_rows_add(CpuIsa isa, float* acc, const float* x, int64_t cols) {
#if FK_X86_LEVELS
  if (isa == CpuIsa::avx512) return lce_avx512::add_row(acc, x, cols);
  if (isa == CpuIsa::avx2) return lce_avx2::add_row(acc, x, cols);
#endif
  for (int64_t j = 0; j < cols; ++j) acc[j] += x[j];
}

}  // namespace fedkernels
