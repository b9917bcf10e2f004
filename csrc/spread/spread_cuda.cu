// CUDA kernels of knn_classes, shaped for a real GPU (launch table: bench/ops/spread.py).
//
//  1. row_norms_kernel: float64 row norms (spread_cuda_utils.cuh).
//  2. For each tile of up to kRowTile rows x kColTile columns (both in spread_cuda.cpp): at::mm (cuBLAS
//     on a GPU; IEEE float32 by default, see gemm_unit_roundoff there) writes the dot products
//     G [rows, cols] into one reused buffer, and knn_tile_merge_kernel, a warp per row, turns a row of
//     G into keys (l2: |w_j|^2 - 2 g, cosine: -g / |w_j|), tests 128 of them per step against the
//     row's gate with one warp vote, and lane 0 offers the few that pass, in ascending column order,
//     to the row's candidate list (global scratch [C, k + 8], the CPU's candidate_offer). Peak extra
//     memory: the G tile (320 MiB in float32) plus O(C (k + 8)); never [C, C].
//  3. knn_finalize_kernel, a warp per row: the lanes recompute the kept candidates' distances in
//     float64 (spread::exact_distance, the CPU's per-pair arithmetic), lane 0 orders them by
//     (distance, id), the lanes write the first k. A row flagged with more near-ties than the slack
//     is rescanned exactly by its warp (lanes over all columns, lane 0 keeping the k smallest).
//
// Exactness (spread.h): a key errs from its true value by at most band / 2 whatever the GEMM's
// summation order or blocking (the dot-product bound gamma_d |a| |b| holds for any order), as long as
// the unit roundoff in key_band is the one the GEMM really runs at: gemm_unit_roundoff reads the
// float32 matmul precision (TF32 or bf16 tensor cores widen the band; the result stays exact, but
// more rows take the exact rescan). Each row's list receives every key of every tile and keeps the
// cap smallest by (key, id) whatever the order; a drop within band of the k-th key flags the row.
// The finalize then depends on the kept ids only, so the output is bit-identical to the CPU op.
//
// No torch header here: spread_cuda.cpp runs the GEMMs, allocates and calls the launch_* below.
#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#include <cstdint>
#include <limits>

#include "spread/spread.h"
#include "spread/spread_cuda_kernels.h"
#include "spread/spread_cuda_utils.cuh"

namespace fedkernels {

namespace {

using spread_cuda::kFullMask;
using spread_cuda::lane_id;
using spread_cuda::warp_item;

constexpr int kMergeUnroll = 4;  // 4 x 32 keys per lane step, one warp vote

// One warp per row of a G tile (rows row0 .. row0 + nrows, columns col0 .. col0 + ncols, row-major
// with leading dimension ncols): offers the row's keys to its candidate list. Lane 0 owns the list;
// the other lanes only see its gate (spread::candidate_gate), broadcast after each offer.
template <typename ACC>
__global__ void knn_tile_merge_kernel(const ACC* g, int64_t row0, int64_t nrows, int64_t col0, int64_t ncols,
                                      const ACC* col_term, const double* norms, int64_t d, int metric,
                                      double unit_roundoff, double max_norm, int64_t k, int64_t cap, ACC* cand_keys,
                                      int64_t* cand_ids, int64_t* cand_sizes, bool* overflow) {
  const int lane = lane_id();
  const int64_t r = warp_item();
  if (r >= nrows) return;  // the whole warp
  const int64_t i = row0 + r;
  const ACC* gr = g + r * ncols;
  const ACC* ct = col_term + col0;
  const ACC inf = std::numeric_limits<ACC>::infinity();
  ACC* kr = cand_keys + i * cap;
  int64_t* ir = cand_ids + i * cap;
  int64_t size = 0;
  bool of = false;
  ACC band = ACC(0), gate = ACC(0);
  if (lane == 0) {
    size = cand_sizes[i];
    of = overflow[i];
    band = static_cast<ACC>(spread::key_band(metric, d, unit_roundoff, norms[i], max_norm));
    gate = spread::candidate_gate(kr, size, cap, k, band, inf);
  }
  gate = __shfl_sync(kFullMask, gate, 0);
  for (int64_t j0 = 0; j0 < ncols; j0 += 32 * kMergeUnroll) {
    ACC key[kMergeUnroll];
    bool pass[kMergeUnroll];
    bool any = false;
#pragma unroll
    for (int q = 0; q < kMergeUnroll; ++q) {
      const int64_t j = j0 + q * 32 + lane;
      key[q] = inf;
      pass[q] = false;
      if (j < ncols) {
        key[q] = metric == spread::kL2 ? ct[j] - ACC(2) * gr[j] : ct[j] * gr[j];
        pass[q] = key[q] <= gate && col0 + j != i;
      }
      any = any || pass[q];
    }
    if (!__any_sync(kFullMask, any)) continue;
#pragma unroll
    for (int q = 0; q < kMergeUnroll; ++q) {
      unsigned hits = __ballot_sync(kFullMask, pass[q]);
      while (hits != 0u) {  // warp-uniform: ascending lanes, so ascending column ids
        const int src = __ffs(static_cast<int>(hits)) - 1;
        hits &= hits - 1u;
        const ACC kv = __shfl_sync(kFullMask, key[q], src);
        if (lane == 0 && kv <= gate) {  // the gate may have dropped since the vote
          if (size == cap && kv > kr[cap - 1]) {
            of = true;  // a near-tie of the k-th that the list cannot hold
          } else {
            spread::candidate_offer(kr, ir, size, cap, k, band, kv, col0 + j0 + q * 32 + src, of);
          }
          gate = spread::candidate_gate(kr, size, cap, k, band, inf);
        }
        gate = __shfl_sync(kFullMask, gate, 0);
      }
    }
  }
  if (lane == 0) {
    cand_sizes[i] = size;
    overflow[i] = of;
  }
}

// One warp per row: the k nearest of row i from its kept candidates (or by an exact rescan when the
// row overflowed), written to out_dist / out_idx. exact and cand_ids rows are the row's scratch.
template <typename T, typename OUT>
__global__ void knn_finalize_kernel(const T* w, const double* norms, int64_t c, int64_t d, int metric, int64_t cap,
                                    int64_t* cand_ids, const int64_t* cand_sizes, const bool* overflow, double* exact,
                                    int64_t k, OUT* out_dist, int64_t* out_idx) {
  const int lane = lane_id();
  const int64_t i = warp_item();
  if (i >= c) return;  // the whole warp
  const T* a = w + i * d;
  const bool cosine = metric == spread::kCosine;
  const double na = cosine ? norms[i] : 0.0;
  double* ex = exact + i * cap;
  int64_t* ids = cand_ids + i * cap;
  if (overflow[i]) {
    // Exact rescan (rare: more near-ties than the slack): lanes take 32 columns at a time; lane 0
    // keeps the k smallest (distance, id) in ex/ids (spread::knn_exact_row's list, any order).
    int64_t size = 0;
    double gate_e = std::numeric_limits<double>::infinity();
    int64_t gate_id = std::numeric_limits<int64_t>::max();
    for (int64_t j0 = 0; j0 < c; j0 += 32) {
      const int64_t j = j0 + lane;
      double e = 0.0;
      bool pass = false;
      if (j < c && j != i) {
        e = spread::exact_distance(a, w + j * d, d, metric, na, cosine ? norms[j] : 0.0);
        pass = spread::key_less(e, j, gate_e, gate_id);
      }
      unsigned hits = __ballot_sync(kFullMask, pass);
      while (hits != 0u) {
        const int src = __ffs(static_cast<int>(hits)) - 1;
        hits &= hits - 1u;
        const double ev = __shfl_sync(kFullMask, e, src);
        if (lane == 0) {
          const int64_t jv = j0 + src;
          if (size < k || spread::key_less(ev, jv, ex[k - 1], ids[k - 1]))
            spread::candidate_insert(ex, ids, size, k, ev, jv);
          if (size == k) {
            gate_e = ex[k - 1];
            gate_id = ids[k - 1];
          }
        }
        gate_e = __shfl_sync(kFullMask, gate_e, 0);
        gate_id = __shfl_sync(kFullMask, gate_id, 0);
      }
    }
  } else {
    const int64_t size = cand_sizes[i];
    for (int64_t s = lane; s < size; s += 32) {
      const int64_t j = ids[s];
      ex[s] = spread::exact_distance(a, w + j * d, d, metric, na, cosine ? norms[j] : 0.0);
    }
    __syncwarp();
    if (lane == 0) spread::sort_candidates(ex, ids, size);
  }
  __syncwarp();
  for (int64_t s = lane; s < k; s += 32) {
    out_dist[i * k + s] = static_cast<OUT>(ex[s]);
    out_idx[i * k + s] = ids[s];
  }
}

}  // namespace

namespace spread_cuda {

template <typename T>
void launch_row_norms(const T* w, int64_t c, int64_t d, double* norms, cudaStream_t stream) {
  row_norms_kernel<T><<<blocks_for(c, kNormRows), kNormRows, 0, stream>>>(w, c, d, norms);
}

template <typename ACC>
void launch_knn_tile_merge(const ACC* g, int64_t row0, int64_t nrows, int64_t col0, int64_t ncols, const ACC* col_term,
                           const double* norms, int64_t d, int metric, double unit_roundoff, double max_norm, int64_t k,
                           int64_t cap, ACC* cand_keys, int64_t* cand_ids, int64_t* cand_sizes, bool* overflow,
                           cudaStream_t stream) {
  knn_tile_merge_kernel<ACC><<<warp_blocks_for(nrows), kWarpThreads, 0, stream>>>(
      g, row0, nrows, col0, ncols, col_term, norms, d, metric, unit_roundoff, max_norm, k, cap, cand_keys, cand_ids,
      cand_sizes, overflow);
}

template <typename T, typename OUT>
void launch_knn_finalize(const T* w, const double* norms, int64_t c, int64_t d, int metric, int64_t cap,
                         int64_t* cand_ids, const int64_t* cand_sizes, const bool* overflow, double* exact, int64_t k,
                         OUT* out_dist, int64_t* out_idx, cudaStream_t stream) {
  knn_finalize_kernel<T, OUT><<<warp_blocks_for(c), kWarpThreads, 0, stream>>>(
      w, norms, c, d, metric, cap, cand_ids, cand_sizes, overflow, exact, k, out_dist, out_idx);
}

// The dtypes the launchers dispatch: FK_DISPATCH_FLOAT_HALF_BF16 for W, float / double for the GEMM.
template void launch_row_norms<float>(const float*, int64_t, int64_t, double*, cudaStream_t);
template void launch_row_norms<double>(const double*, int64_t, int64_t, double*, cudaStream_t);
template void launch_row_norms<c10::Half>(const c10::Half*, int64_t, int64_t, double*, cudaStream_t);
template void launch_row_norms<c10::BFloat16>(const c10::BFloat16*, int64_t, int64_t, double*, cudaStream_t);

template void launch_knn_tile_merge<float>(const float*, int64_t, int64_t, int64_t, int64_t, const float*,
                                           const double*, int64_t, int, double, double, int64_t, int64_t, float*,
                                           int64_t*, int64_t*, bool*, cudaStream_t);
template void launch_knn_tile_merge<double>(const double*, int64_t, int64_t, int64_t, int64_t, const double*,
                                            const double*, int64_t, int, double, double, int64_t, int64_t, double*,
                                            int64_t*, int64_t*, bool*, cudaStream_t);
template void launch_knn_finalize<float, float>(const float*, const double*, int64_t, int64_t, int, int64_t, int64_t*,
                                                const int64_t*, const bool*, double*, int64_t, float*, int64_t*,
                                                cudaStream_t);
template void launch_knn_finalize<double, double>(const double*, const double*, int64_t, int64_t, int, int64_t,
                                                  int64_t*, const int64_t*, const bool*, double*, int64_t, double*,
                                                  int64_t*, cudaStream_t);
template void launch_knn_finalize<c10::Half, float>(const c10::Half*, const double*, int64_t, int64_t, int, int64_t,
                                                    int64_t*, const int64_t*, const bool*, double*, int64_t, float*,
                                                    int64_t*, cudaStream_t);
template void launch_knn_finalize<c10::BFloat16, float>(const c10::BFloat16*, const double*, int64_t, int64_t, int,
                                                        int64_t, int64_t*, const int64_t*, const bool*, double*,
                                                        int64_t, float*, int64_t*, cudaStream_t);

}  // namespace spread_cuda

}  // namespace fedkernels
