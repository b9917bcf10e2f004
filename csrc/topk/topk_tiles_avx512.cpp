// The register tiles of the CPU linear_topk at the avx512 level: topk_tiles_body_x86.h over
// simd::avx512 (6 rows x 32 classes, two kCols panels, in twelve 16-float accumulators; 32 registers
// leave room for the two W loads and the broadcast).
#include "common/cpu_isa.h"
#include "topk/topk_cpu_tiles.h"

#if FK_X86_LEVELS
#define FK_LEVEL avx512
#include "topk/topk_tiles_body_x86.h"  // scan_tile_avx512
#endif

namespace fedkernels {
namespace topk_cpu {

#if !FK_X86_LEVELS  // not x86-64 with GCC/Clang: select_isa() never picks AVX-512

void scan_tile_avx512(const TileJob& job, RowTopk& top) { scan_tile_portable(job, top); }

#endif

}  // namespace topk_cpu
}  // namespace fedkernels
