// CUDA launcher of knn_classes: one thread per row. A block of 128 rows streams column tiles of
// 32 classes x 32 dims through shared memory, accumulates the 32 dot products in registers, and
// feeds the GEMM keys into the row's candidate list (global scratch [C, k + 8]); a second kernel
// recomputes the kept candidates in float64 and writes the k nearest (the shared knn_finalize_row),
// or, for rows flagged with more near-ties than the slack, rescans them exactly (knn_exact_row).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "spread/spread.h"
#include "spread/spread_checks.h"
#include "spread/spread_cuda_utils.cuh"

namespace fedkernels {

namespace {

constexpr int kTileCols = 32;
constexpr int kTileDims = 32;

template <typename T, typename ACC>
__global__ void knn_scan_kernel(const T* w, const double* norms, int64_t c, int64_t d, int metric, int64_t k,
                                int64_t cap, double unit_roundoff, double max_norm, ACC* cand_keys, int64_t* cand_ids,
                                int64_t* cand_sizes, bool* overflow) {
  __shared__ ACC tile[kTileCols][kTileDims + 1];
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool active = i < c;
  ACC* kr = cand_keys + (active ? i : 0) * cap;
  int64_t* ir = cand_ids + (active ? i : 0) * cap;
  int64_t size = 0;
  bool of = false;
  const ACC band =
      active ? static_cast<ACC>(spread::key_band(metric, d, unit_roundoff, norms[i], max_norm)) : ACC(0);
  for (int64_t c0 = 0; c0 < c; c0 += kTileCols) {
    ACC acc[kTileCols];
#pragma unroll
    for (int cc = 0; cc < kTileCols; ++cc) acc[cc] = ACC(0);
    for (int64_t d0 = 0; d0 < d; d0 += kTileDims) {
      for (int e = threadIdx.x; e < kTileCols * kTileDims; e += blockDim.x) {
        const int cc = e / kTileDims, dd = e % kTileDims;
        const int64_t j = c0 + cc, di = d0 + dd;
        tile[cc][dd] = (j < c && di < d) ? static_cast<ACC>(spread::as_double(w[j * d + di])) : ACC(0);
      }
      __syncthreads();
      if (active) {
        const int64_t dn = d - d0 < kTileDims ? d - d0 : kTileDims;
        for (int64_t dd = 0; dd < dn; ++dd) {
          const ACC a = static_cast<ACC>(spread::as_double(w[i * d + d0 + dd]));
#pragma unroll
          for (int cc = 0; cc < kTileCols; ++cc) acc[cc] += a * tile[cc][dd];
        }
      }
      __syncthreads();
    }
    if (!active) continue;
    for (int cc = 0; cc < kTileCols; ++cc) {
      const int64_t j = c0 + cc;
      if (j >= c || j == i) continue;
      const double nj = norms[j];
      const ACC key = metric == spread::kL2
                          ? static_cast<ACC>(nj * nj) - ACC(2) * acc[cc]
                          : -acc[cc] / static_cast<ACC>(nj > spread::kCosineEps ? nj : spread::kCosineEps);
      if (size == cap && key > kr[cap - 1]) {
        if (key <= kr[k - 1] + band) of = true;
        continue;
      }
      spread::candidate_offer(kr, ir, size, cap, k, band, key, j, of);
    }
  }
  if (active) {
    cand_sizes[i] = size;
    overflow[i] = of;
  }
}

template <typename T, typename OUT>
__global__ void knn_finalize_kernel(const T* w, const double* norms, int64_t c, int64_t d, int metric, int64_t cap,
                                    int64_t* cand_ids, const int64_t* cand_sizes, const bool* overflow,
                                    double* exact, int64_t k, OUT* out_dist, int64_t* out_idx) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= c) return;
  if (overflow[i]) {  // more near-ties than the slack: exact scan (rare)
    spread::knn_exact_row(w, i, c, d, metric, norms, exact + i * cap, cand_ids + i * cap, k, out_dist, out_idx);
    return;
  }
  spread::knn_finalize_row(w, i, d, metric, norms, cand_ids + i * cap, cand_sizes[i], exact + i * cap, k, out_dist,
                           out_idx);
}

std::tuple<at::Tensor, at::Tensor> knn_classes_cuda(const at::Tensor& W_in, int64_t k, std::string metric_name) {
  check_knn_args(W_in, k, metric_name);
  const int metric = parse_metric(metric_name);
  const c10::cuda::CUDAGuard guard(W_in.device());
  const at::Tensor W = W_in.contiguous();
  const int64_t c = W.size(0), d = W.size(1);
  const auto acc_type = W.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor dist = at::empty({c, k}, W.options().dtype(acc_type));
  at::Tensor idx = at::empty({c, k}, W.options().dtype(at::kLong));
  if (k == 0 || c == 0) return {dist, idx};
  const int64_t cap = std::min<int64_t>(spread::candidate_capacity(k), c - 1);
  const at::Tensor norms = spread_cuda::row_norms(W);
  at::Tensor cand_keys = at::empty({c, cap}, W.options().dtype(acc_type));
  at::Tensor cand_ids = at::empty({c, cap}, W.options().dtype(at::kLong));
  at::Tensor cand_sizes = at::empty({c}, W.options().dtype(at::kLong));
  at::Tensor exact = at::empty({c, cap}, W.options().dtype(at::kDouble));
  at::Tensor overflow = at::empty({c}, W.options().dtype(at::kBool));
  const double max_norm = norms.max().item<double>();
  const auto stream = at::cuda::getCurrentCUDAStream();
  const unsigned blocks = spread_cuda::blocks_for(c);
  FK_DISPATCH_FLOAT_HALF_BF16(W.scalar_type(), "knn_classes_cuda", [&] {
    using acc_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    const double unit_roundoff = std::is_same_v<acc_t, double> ? 0x1p-53 : 0x1p-24;
    knn_scan_kernel<scalar_t, acc_t><<<blocks, spread_cuda::kThreads, 0, stream>>>(
        W.data_ptr<scalar_t>(), norms.data_ptr<double>(), c, d, metric, k, cap, unit_roundoff, max_norm,
        cand_keys.data_ptr<acc_t>(), cand_ids.data_ptr<int64_t>(), cand_sizes.data_ptr<int64_t>(),
        overflow.data_ptr<bool>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    knn_finalize_kernel<scalar_t, acc_t><<<blocks, spread_cuda::kThreads, 0, stream>>>(
        W.data_ptr<scalar_t>(), norms.data_ptr<double>(), c, d, metric, cap, cand_ids.data_ptr<int64_t>(),
        cand_sizes.data_ptr<int64_t>(), overflow.data_ptr<bool>(), exact.data_ptr<double>(), k, dist.data_ptr<acc_t>(), idx.data_ptr<int64_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {dist, idx};
}

}  // namespace

TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) { m.impl("knn_classes", &knn_classes_cuda); }

}  // namespace fedkernels
