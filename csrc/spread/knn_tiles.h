// Host-only: the fused AVX-512 tile path of the CPU knn_classes (knn_tiles_avx512.cpp).
#pragma once

#include <cstdint>

#include "spread/knn_candidates.h"

namespace fedkernels {
namespace spread_cpu {

// True when this CPU runs the fused path (AVX-512F and VL) and FEDKERNELS_KNN_BLAS is not set (the
// variable forces the portable BLAS tile path, e.g. to test it on an AVX-512 machine).
bool fused_tiles_available();

// Floats of scratch that pack_tile_rows needs for n rows of dimension d.
int64_t packed_tile_floats(int64_t n, int64_t d);

// Rows [r0, r0 + n) of the row-major float matrix w [*, d] into the fused kernel's layout.
void pack_tile_rows(const float* w, int64_t r0, int64_t n, int64_t d, float* dst);

// Offers the keys of rows [row0, row0 + na) (row-major, `rows` pointing at row0) x columns
// [col0, col0 + nb) (packed by pack_tile_rows) to the candidate lists of both the rows and the columns.
// The blocks are either disjoint or the same block (row0 == col0, na == nb: only the pairs with
// column > row are computed, each once). Keys are computed in registers from float32 dot products
// and never stored.
void fused_tile_pair(const float* rows, int64_t row0, int64_t na, const float* packed_cols, int64_t col0, int64_t nb,
                     int64_t d, Candidates<float>& cand);

// The final pass's float64 distances of row `row` of float32 w to its `size` candidates `ids`,
// bit-identical to spread::exact_distance, sixteen candidates per panel (knn_exact_avx512.cpp; only
// called where fused_tiles_available()). unit: for cosine, the float64 unit rows w_j / |w_j| of all
// classes (unit_rows), or nullptr to divide in the loop. xa: scratch of d doubles.
void exact_candidate_distances(const float* w, int64_t row, int64_t d, int metric, const double* norms,
                               const double* unit, const int64_t* ids, int64_t size, double* xa, double* exact);

// sq[i] = spread::row_sq_norm(w + i * d, d) for rows [r0, r1), bit for bit (sixteen rows per panel).
void row_sq_norms(const float* w, int64_t r0, int64_t r1, int64_t d, double* sq);

// unit[i * d + q] = double(w[i * d + q]) / norms[i] for rows [r0, r1) whose norm exceeds
// spread::kCosineEps (the operands spread::distance_term divides), 0 for the other rows.
void unit_rows(const float* w, int64_t r0, int64_t r1, int64_t d, const double* norms, double* unit);

}  // namespace spread_cpu
}  // namespace fedkernels
