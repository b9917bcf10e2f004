// Host-only: the fused AVX-512 tile path of the CPU knn_classes (knn_tiles_avx512.cpp).
#pragma once

#include <cstdint>

#include "spread/knn_candidates.h"

namespace fedkernels {
namespace spread_cpu {

// True when this CPU runs the fused path (AVX-512F) and FEDKERNELS_KNN_BLAS is not set (the
// variable forces the portable BLAS tile path, e.g. to test it on an AVX-512 machine).
bool fused_tiles_available();

// Floats of scratch that pack_tile_rows needs for n rows of dimension d.
int64_t packed_tile_floats(int64_t n, int64_t d);

// Rows [r0, r0 + n) of the row-major float matrix w [*, d] into the fused kernel's layout.
void pack_tile_rows(const float* w, int64_t r0, int64_t n, int64_t d, float* dst);

// Offers the keys of rows [row0, row0 + na) (row-major, `rows` pointing at row0) x columns
// [col0, col0 + nb) (packed by pack_tile_rows) to the candidate lists of the rows and, when
// both_sides, of the columns too (the blocks must then be disjoint). Keys are computed in registers
// from float32 dot products and never stored.
void fused_tile_pair(const float* rows, int64_t row0, int64_t na, const float* packed_cols, int64_t col0, int64_t nb,
                     int64_t d, bool both_sides, Candidates<float>& cand);

// The final pass's float64 distances of row `row` of float32 w to its `size` candidates `ids`,
// bit-identical to spread::exact_distance, eight candidates per AVX-512 vector (knn_exact_avx512.cpp;
// only called where fused_tiles_available()). ua: scratch of d doubles.
void exact_candidate_distances(const float* w, int64_t row, int64_t d, int metric, const double* norms,
                               const int64_t* ids, int64_t size, double* ua, double* exact);

}  // namespace spread_cpu
}  // namespace fedkernels
