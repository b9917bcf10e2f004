// Host-only: the fused tile path of the CPU knn_classes, one version per CPU level
// (knn_tiles_avx512.cpp + knn_exact_avx512.cpp, knn_tiles_avx2.cpp + knn_exact_avx2.cpp: each the
// level's instance of knn_tiles_body_x86.h / knn_exact_body_x86.h). The generic level has none: it
// takes the BLAS tile path and the scalar final pass (spread_cpu.cpp).
#pragma once

#include <cstdint>

#include "common/cpu_isa.h"
#include "spread/knn_candidates.h"

namespace fedkernels {
namespace spread_cpu {

// What a level provides (each function as described on the avx512 declarations below).
struct KnnLevel {
  const char* name;
  int64_t (*packed_tile_floats)(int64_t n, int64_t d);
  void (*pack_tile_rows)(const float* w, int64_t r0, int64_t n, int64_t d, float* dst);
  void (*fused_tile_pair)(const float* rows, int64_t row0, int64_t na, const float* packed_cols, int64_t col0,
                          int64_t nb, int64_t d, Candidates<float>& cand);
  void (*exact_candidate_distances)(const float* w, int64_t row, int64_t d, int metric, const double* norms,
                                    const double* unit, const int64_t* ids, int64_t size, double* xa, double* exact);
  void (*row_sq_norms)(const float* w, int64_t r0, int64_t r1, int64_t d, double* sq);
  void (*unit_rows)(const float* w, int64_t r0, int64_t r1, int64_t d, const double* norms, double* unit);
};

// The fused path of CPU level isa (cpu_isa(), read once per call), or nullptr at the generic level.
const KnnLevel* knn_level(CpuIsa isa);

#if FK_X86_LEVELS
namespace avx512 {

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
// bit-identical to spread::exact_distance, sixteen candidates per pass. unit: for cosine, the
// float64 unit rows w_j / |w_j| of all classes (unit_rows), or nullptr to divide in the loop.
// xa: scratch of d doubles.
void exact_candidate_distances(const float* w, int64_t row, int64_t d, int metric, const double* norms,
                               const double* unit, const int64_t* ids, int64_t size, double* xa, double* exact);

// sq[i] = spread::row_sq_norm(w + i * d, d) for rows [r0, r1), bit for bit (sixteen rows per pass).
void row_sq_norms(const float* w, int64_t r0, int64_t r1, int64_t d, double* sq);

// unit[i * d + q] = double(w[i * d + q]) / norms[i] for rows [r0, r1) whose norm exceeds
// spread::kCosineEps (the operands spread::distance_term divides), 0 for the other rows.
void unit_rows(const float* w, int64_t r0, int64_t r1, int64_t d, const double* norms, double* unit);

}  // namespace avx512

namespace avx2 {  // the same contracts, with 256-bit vectors (and the same final-pass bits)
int64_t packed_tile_floats(int64_t n, int64_t d);
void pack_tile_rows(const float* w, int64_t r0, int64_t n, int64_t d, float* dst);
void fused_tile_pair(const float* rows, int64_t row0, int64_t na, const float* packed_cols, int64_t col0, int64_t nb,
                     int64_t d, Candidates<float>& cand);
void exact_candidate_distances(const float* w, int64_t row, int64_t d, int metric, const double* norms,
                               const double* unit, const int64_t* ids, int64_t size, double* xa, double* exact);
void row_sq_norms(const float* w, int64_t r0, int64_t r1, int64_t d, double* sq);
void unit_rows(const float* w, int64_t r0, int64_t r1, int64_t d, const double* norms, double* unit);
}  // namespace avx2
#endif

}  // namespace spread_cpu
}  // namespace fedkernels
