// CUDA launcher of knn_classes (ATen side): checks, the tile GEMMs (at::mm), allocation, dispatch; the
// kernels and the method (candidate lists, exactness) are in spread_cuda.cu. Compiled by the host
// compiler, only in CUDA builds (and the emulator's).
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
#include <string>
#include <type_traits>
#include <utility>

#include "spread/spread.h"
#include "spread/spread_checks.h"
#include "spread/spread_cuda_kernels.h"
#include "spread/spread_cuda_tensor.h"

namespace fedkernels {

namespace {

// G tile: kRowTile x kColTile products (320 MiB float32; float64 halves the columns). At C = 100000
// that is 10 x 13 tiles. A merge launch is 10240 warps: the merge kernel takes 45 registers on sm_90,
// so an H100 SM holds 5 of its 8-warp blocks (40 warps) and a launch is 1.94 waves of 132 x 40 warps
// (8192 rows would be 1.55 waves, the last one half empty).
constexpr int64_t kRowTile = 10240;
constexpr int64_t kColTile = 8192;

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
        spread_cuda::launch_knn_tile_merge<acc_t>(g.data_ptr<acc_t>(), r0, nr, c0, nc, col_term.data_ptr<acc_t>(),
                                                  norms.data_ptr<double>(), d, metric, unit_roundoff, max_norm, k, cap,
                                                  cand_keys.data_ptr<acc_t>(), cand_ids.data_ptr<int64_t>(),
                                                  cand_sizes.data_ptr<int64_t>(), overflow.data_ptr<bool>(), stream);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      }
    }
  });
  FK_DISPATCH_FLOAT_HALF_BF16(W.scalar_type(), "knn_classes_cuda", [&] {
    using acc_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    spread_cuda::launch_knn_finalize<scalar_t, acc_t>(W.data_ptr<scalar_t>(), norms.data_ptr<double>(), c, d, metric,
                                                      cap, cand_ids.data_ptr<int64_t>(), cand_sizes.data_ptr<int64_t>(),
                                                      overflow.data_ptr<bool>(), exact.data_ptr<double>(), k,
                                                      dist.data_ptr<acc_t>(), idx.data_ptr<int64_t>(), stream);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {dist, idx};
}

}  // namespace

TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) { m.impl("knn_classes", &knn_classes_cuda); }

}  // namespace fedkernels
