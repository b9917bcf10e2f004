// Portable register tiles of the CPU linear_topk (topk_cpu_tiles.h): plain loops with std::fma, so
// every score rounds exactly as on the vector levels (one fused multiply-add per step, in q order).
#include <cmath>

#include "common/cpu_isa.h"
#include "topk/topk_cpu_tiles.h"

namespace fedkernels {
namespace topk_cpu {

Isa select_isa() {
  // The library's one dispatch level (FK_CPU_ISA cap, tests' limit); its avx2 level includes FMA.
  if (fk::cpu_isa_at_least(fk::CpuIsa::avx512)) return Isa::kAvx512;
  return fk::cpu_isa_at_least(fk::CpuIsa::avx2) ? Isa::kAvx2 : Isa::kPortable;
}

const char* isa_name(Isa isa) { return isa == Isa::kAvx512 ? "avx512" : isa == Isa::kAvx2 ? "avx2" : "portable"; }

void scan_tile_portable(const TileJob& job, RowTopk& top) {
  const int64_t d = job.d, panels = (job.cols + kCols - 1) / kCols;
  for (int64_t b = job.block0; b < job.block1; ++b) {
    const float* hp = job.hpack + b * kRows * d;
    const int64_t n0 = b * kRows, rows = job.n - n0 < kRows ? job.n - n0 : kRows;
    for (int64_t t = 0; t < panels; ++t) {
      const float* wp = job.wpack + t * kCols * d;
      float acc[kRows][kCols] = {};
      for (int64_t q = 0; q < d; ++q)
        for (int64_t r = 0; r < kRows; ++r)
          for (int64_t c = 0; c < kCols; ++c) acc[r][c] = std::fma(hp[q * kRows + r], wp[q * kCols + c], acc[r][c]);
      const int64_t c0 = t * kCols, ncol = job.cols - c0 < kCols ? job.cols - c0 : kCols;
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t n = n0 + r;
        for (int64_t c = 0; c < ncol; ++c) {
          const float s = topk::finish_score(acc[r][c], job.scale, job.bias, c0 + c);
          if (!(s < top.thr[n])) top.offer(n, s, job.col0 + c0 + c);  // NaN passes, then the exact test
        }
      }
    }
  }
}

}  // namespace topk_cpu
}  // namespace fedkernels
