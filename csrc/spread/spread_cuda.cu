// CUDA launcher of knn_classes, shaped for a real GPU (launch table: bench/ops/spread.py).
//
//  1. row_norms_kernel: float64 row norms (spread_cuda_utils.cuh).
//  2. For each tile of up to kRowTile rows x kColTile columns: at::mm (cuBLAS on a GPU; IEEE float32
//     by default, see gemm_unit_roundoff) writes the dot products G [rows, cols] into one reused
//     buffer, and knn_tile_merge_kernel, a warp per row, turns a row of G into keys (l2: |w_j|^2 - 2 g, cosine:
//     -g / |w_j|), tests 128 of them per step against the row's gate with one warp vote, and lane 0
//     offers the few that pass, in ascending column order, to the row's candidate list (global
//     scratch [C, k + 8], the CPU's candidate_offer). Peak extra memory: the G tile (320 MiB in
//     float32) plus O(C (k + 8)); never [C, C].
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
#include <ATen/TensorOperators.h>
#include <ATen/Context.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <torch/version.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/zeros.h>

#include <cstdlib>
#include <limits>
#include <string>
#include <utility>

#include "spread/spread.h"
#include "spread/spread_checks.h"
#include "spread/spread_cuda_utils.cuh"

namespace fedkernels {

namespace {

using spread_cuda::kFullMask;
using spread_cuda::lane_id;
using spread_cuda::warp_item;

// G tile: kRowTile x kColTile products (320 MiB float32; float64 halves the columns). At C = 100000
// that is 10 x 13 tiles. A merge launch is 10240 warps: the merge kernel takes 45 registers on sm_90,
// so an H100 SM holds 5 of its 8-warp blocks (40 warps) and a launch is 1.94 waves of 132 x 40 warps
// (8192 rows would be 1.55 waves, the last one half empty).
constexpr int64_t kRowTile = 10240;
constexpr int64_t kColTile = 8192;
constexpr int kMergeUnroll = 4;  // 4 x 32 keys per lane step, one warp vote

// Unit roundoff of the GEMM that fills the key tiles (key_band's u). float64: 2^-53. float32: 2^-24,
// unless torch lets the matmul round its inputs (fp32_precision "tf32": 2^-11, "bf16": 2^-8) on the
// backend that runs it (cuBLAS on a GPU; the CPU's under the emulator). A setting that cannot be read
// is taken as the widest.
// torch 2.13 added Float32Precision::DEFAULT ("inherit the generic setting"); older torch (gpu-check may
// meet one on a GPU machine) has only NONE for that.
bool is_default_precision(at::Float32Precision p) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 13)
  return p == at::Float32Precision::DEFAULT;
#else
  return false;
#endif
}

double gemm_unit_roundoff(const at::Tensor& W, bool is_double) {
  if (is_double) return 0x1p-53;
  const auto& ctx = at::globalContext();
  at::Float32Precision p = at::Float32Precision::NONE;
  try {
    p = ctx.float32Precision(W.is_cuda() ? at::Float32Backend::CUDA : at::Float32Backend::MKLDNN,
                             at::Float32Op::MATMUL);
    if (p == at::Float32Precision::NONE || is_default_precision(p))
      p = ctx.float32Precision(at::Float32Backend::GENERIC, at::Float32Op::ALL);
  } catch (const c10::Error&) {
    return 0x1p-8;
  }
  if (p == at::Float32Precision::TF32) return 0x1p-11;
  if (p == at::Float32Precision::BF16) return 0x1p-8;
  return 0x1p-24;  // IEEE, or unset (IEEE is the default)
}

// Tile sizes: kRowTile x kColTile, or FEDKERNELS_KNN_CUDA_TILES="rows,cols" (tests use small tiles
// to cross tile edges at small C).
std::pair<int64_t, int64_t> knn_tiles(int64_t acc_bytes) {
  int64_t rows = kRowTile, cols = kColTile * 4 / acc_bytes;
  if (const char* env = std::getenv("FEDKERNELS_KNN_CUDA_TILES")) {
    const std::string s(env);
    const auto comma = s.find(',');
    TORCH_CHECK_VALUE(comma != std::string::npos, "FEDKERNELS_KNN_CUDA_TILES must be \"rows,cols\", got \"", s, "\"");
    rows = std::stoll(s.substr(0, comma));
    cols = std::stoll(s.substr(comma + 1));
    TORCH_CHECK_VALUE(rows > 0 && cols > 0, "FEDKERNELS_KNN_CUDA_TILES must be two positive integers, got \"", s, "\"");
  }
  return {rows, cols};
}

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

std::tuple<at::Tensor, at::Tensor> knn_classes_cuda(const at::Tensor& W_in, int64_t k, std::string metric_name) {
  check_knn_args(W_in, k, metric_name);
  const int metric = parse_metric(metric_name);
  const c10::cuda::CUDAGuard guard(W_in.device());
  // No gradient flows through this op; its GEMM must not meet a parameter's requires_grad (mm_out refuses).
  const at::NoGradGuard no_grad;
  const at::Tensor W = W_in.contiguous();
  const int64_t c = W.size(0), d = W.size(1);
  const auto acc_type = W.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor dist = at::empty({c, k}, W.options().dtype(acc_type));
  at::Tensor idx = at::empty({c, k}, W.options().dtype(at::kLong));
  if (k == 0 || c == 0) return {dist, idx};
  const int64_t cap = std::min<int64_t>(spread::candidate_capacity(k), c - 1);
  const at::Tensor norms = spread_cuda::row_norms(W);
  // The GEMM runs on float32 (float64 for float64 W); half inputs get a float32 copy.
  const at::Tensor Wacc = W.scalar_type() == acc_type ? W : W.to(acc_type);
  // Column terms of the keys, as the CPU's: l2 |w_j|^2, cosine -1 / max(|w_j|, eps), rounded to acc.
  const at::Tensor col_term =
      (metric == spread::kL2 ? norms * norms : -1.0 / norms.clamp_min(spread::kCosineEps)).to(acc_type);
  at::Tensor cand_keys = at::empty({c, cap}, W.options().dtype(acc_type));
  at::Tensor cand_ids = at::empty({c, cap}, W.options().dtype(at::kLong));
  at::Tensor cand_sizes = at::zeros({c}, W.options().dtype(at::kLong));
  at::Tensor exact = at::empty({c, cap}, W.options().dtype(at::kDouble));
  at::Tensor overflow = at::zeros({c}, W.options().dtype(at::kBool));
  const double max_norm = norms.max().item<double>();
  const bool is_double = acc_type == at::kDouble;
  const double unit_roundoff = gemm_unit_roundoff(W, is_double);
  const auto [row_tile, col_tile] = knn_tiles(is_double ? 8 : 4);
  const int64_t tr = std::min(row_tile, c), tc = std::min(col_tile, c);
  at::Tensor g_buf = at::empty({tr * tc}, W.options().dtype(acc_type));
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(acc_type, "knn_classes_cuda_merge", [&] {
    using acc_t = scalar_t;
    for (int64_t r0 = 0; r0 < c; r0 += tr) {
      const int64_t nr = std::min(tr, c - r0);
      const at::Tensor rows = Wacc.narrow(0, r0, nr);
      for (int64_t c0 = 0; c0 < c; c0 += tc) {
        const int64_t nc = std::min(tc, c - c0);
        at::Tensor g = g_buf.narrow(0, 0, nr * nc).view({nr, nc});
        at::mm_out(g, rows, Wacc.narrow(0, c0, nc).t());
        knn_tile_merge_kernel<acc_t><<<spread_cuda::warp_blocks_for(nr), spread_cuda::kWarpThreads, 0, stream>>>(
            g.data_ptr<acc_t>(), r0, nr, c0, nc, col_term.data_ptr<acc_t>(), norms.data_ptr<double>(), d, metric,
            unit_roundoff, max_norm, k, cap, cand_keys.data_ptr<acc_t>(), cand_ids.data_ptr<int64_t>(),
            cand_sizes.data_ptr<int64_t>(), overflow.data_ptr<bool>());
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      }
    }
  });
  FK_DISPATCH_FLOAT_HALF_BF16(W.scalar_type(), "knn_classes_cuda", [&] {
    using acc_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    knn_finalize_kernel<scalar_t, acc_t><<<spread_cuda::warp_blocks_for(c), spread_cuda::kWarpThreads, 0, stream>>>(
        W.data_ptr<scalar_t>(), norms.data_ptr<double>(), c, d, metric, cap, cand_ids.data_ptr<int64_t>(),
        cand_sizes.data_ptr<int64_t>(), overflow.data_ptr<bool>(), exact.data_ptr<double>(), k, dist.data_ptr<acc_t>(),
        idx.data_ptr<int64_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {dist, idx};
}

}  // namespace

TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) { m.impl("knn_classes", &knn_classes_cuda); }

}  // namespace fedkernels
