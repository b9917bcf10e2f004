// CUDA launcher of knn_classes (the torch side): checks, the tile GEMMs (aten::mm.out), allocation,
// dispatch; the kernels and the method (candidate lists, exactness) are in spread_cuda.cu. Compiled by
// the host compiler, only in CUDA builds (and the emulator's).
#include <cstdlib>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "common/stable/calls.h"
#include "common/stable/check.h"
#include "common/stable/cuda.h"
#include "common/stable/dispatch.h"
#include "common/stable/spread_extra.h"
#include "common/stable/tensor.h"
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
// backend that runs it (cuBLAS on a GPU; the CPU's, mkldnn, under the emulator). The stable ABI has
// no call that reads that setting (ATen's at::globalContext().float32Precision), so the launcher asks
// the op fedkernels::_matmul_fp32_precision, which src/fedkernels/ops/spread.py implements from
// torch.backends' public settings: 0 IEEE, 1 TF32, 2 bf16. A setting that cannot be read (that op
// missing: the library loaded without the Python package; or an unknown answer) is taken as the
// widest.
double gemm_unit_roundoff(const Tensor& W, bool is_double) {
  if (is_double) return 0x1p-53;
  int64_t p = -1;
  try {
    auto stack = call_aten<1>("fedkernels::_matmul_fp32_precision", "", W);
    p = torch::stable::detail::to<int64_t>(stack[0]);
  } catch (const std::exception&) {
    return 0x1p-8;
  }
  if (p == 0) return 0x1p-24;
  if (p == 1) return 0x1p-11;
  return 0x1p-8;
}

// Tile sizes: kRowTile x kColTile, or FEDKERNELS_KNN_CUDA_TILES="rows,cols" (tests use small tiles
// to cross tile edges at small C).
std::pair<int64_t, int64_t> knn_tiles(int64_t acc_bytes) {
  int64_t rows = kRowTile, cols = kColTile * 4 / acc_bytes;
  if (const char* env = std::getenv("FEDKERNELS_KNN_CUDA_TILES")) {
    const std::string s(env);
    const auto comma = s.find(',');
    FK_CHECK_VALUE(comma != std::string::npos, "FEDKERNELS_KNN_CUDA_TILES must be \"rows,cols\", got \"", s, "\"");
    rows = std::stoll(s.substr(0, comma));
    cols = std::stoll(s.substr(comma + 1));
    FK_CHECK_VALUE(rows > 0 && cols > 0, "FEDKERNELS_KNN_CUDA_TILES must be two positive integers, got \"", s, "\"");
  }
  return {rows, cols};
}

std::tuple<Tensor, Tensor> knn_classes_cuda(const Tensor& W_in, int64_t k, std::string metric_name) {
  check_knn_args(W_in, k, metric_name);
  const int metric = parse_metric(metric_name);
  const CudaDeviceGuard guard(W_in);
  // No gradient flows through this op; its GEMM must not meet a parameter's requires_grad (mm_out refuses).
  const NoGradGuard no_grad;
  const Tensor W = contiguous_or_self(W_in);
  const int64_t c = W.size(0), d = W.size(1);
  const ScalarType acc_type = W.scalar_type() == ScalarType::Double ? ScalarType::Double : ScalarType::Float;
  Tensor dist = empty_on(W, {c, k}, acc_type);
  Tensor idx = empty_on(W, {c, k}, ScalarType::Long);
  if (k == 0 || c == 0) return {dist, idx};
  const int64_t cap = std::min<int64_t>(spread::candidate_capacity(k), c - 1);
  const Tensor norms = spread_cuda::row_norms(W);
  // The GEMM runs on float32 (float64 for float64 W); half inputs get a float32 copy.
  Tensor Wacc = W.scalar_type() == acc_type ? W : torch::stable::to(W, acc_type);
  // Column terms of the keys, as the CPU's: l2 |w_j|^2, cosine -1 / max(|w_j|, eps), rounded to acc.
  const Tensor col_term_f64 =
      metric == spread::kL2
          ? mul(norms, norms)
          : neg_reciprocal(clamp_min(norms, scalar_like(norms, spread::kCosineEps, ScalarType::Double)));
  const Tensor col_term = torch::stable::to(col_term_f64, acc_type);
  Tensor cand_keys = empty_on(W, {c, cap}, acc_type);
  Tensor cand_ids = empty_on(W, {c, cap}, ScalarType::Long);
  Tensor cand_sizes = zeros_on(W, {c}, ScalarType::Long);
  Tensor exact = empty_on(W, {c, cap}, ScalarType::Double);
  Tensor overflow = zeros_on(W, {c}, ScalarType::Bool);
  const double max_norm = item_double(max(norms));
  const bool is_double = acc_type == ScalarType::Double;
  const double unit_roundoff = gemm_unit_roundoff(W, is_double);
  const auto [row_tile, col_tile] = knn_tiles(is_double ? 8 : 4);
  const int64_t tr = std::min(row_tile, c), tc = std::min(col_tile, c);
  Tensor g_buf = empty_on(W, {tr * tc}, acc_type);
  const cudaStream_t stream = current_cuda_stream(W);
  FK_DISPATCH_FLOATING(acc_type, "knn_classes_cuda_merge", [&] {
    using acc_t = scalar_t;
    for (int64_t r0 = 0; r0 < c; r0 += tr) {
      const int64_t nr = std::min(tr, c - r0);
      const Tensor rows = torch::stable::narrow(Wacc, 0, r0, nr);
      for (int64_t c0 = 0; c0 < c; c0 += tc) {
        const int64_t nc = std::min(tc, c - c0);
        Tensor g = torch::stable::view(torch::stable::narrow(g_buf, 0, 0, nr * nc), {nr, nc});
        mm_out(g, rows, torch::stable::transpose(torch::stable::narrow(Wacc, 0, c0, nc), 0, 1));
        spread_cuda::launch_knn_tile_merge<acc_t>(
            g.const_data_ptr<acc_t>(), r0, nr, c0, nc, col_term.const_data_ptr<acc_t>(), norms.const_data_ptr<double>(),
            d, metric, unit_roundoff, max_norm, k, cap, cand_keys.mutable_data_ptr<acc_t>(),
            cand_ids.mutable_data_ptr<int64_t>(), cand_sizes.mutable_data_ptr<int64_t>(),
            overflow.mutable_data_ptr<bool>(), stream);
        FK_CUDA_KERNEL_LAUNCH_CHECK();
      }
    }
  });
  FK_DISPATCH_FLOAT_HALF_BF16(W.scalar_type(), "knn_classes_cuda", [&] {
    using acc_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    spread_cuda::launch_knn_finalize<scalar_t, acc_t>(
        W.const_data_ptr<scalar_t>(), norms.const_data_ptr<double>(), c, d, metric, cap,
        cand_ids.mutable_data_ptr<int64_t>(), cand_sizes.const_data_ptr<int64_t>(), overflow.const_data_ptr<bool>(),
        exact.mutable_data_ptr<double>(), k, dist.mutable_data_ptr<acc_t>(), idx.mutable_data_ptr<int64_t>(), stream);
    FK_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {dist, idx};
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) { m.impl("knn_classes", TORCH_BOX(&knn_classes_cuda)); }

}  // namespace fedkernels
