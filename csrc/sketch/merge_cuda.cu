// CUDA launchers of bucket_merge (one thread per (row, class)) and bucket_merge_topk (one thread
// per row, its heap in the output row), over the same sketch.h math as the CPU.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "common/dispatch.h"
#include "sketch/sketch.h"
#include "sketch/sketch_prepare.h"
#include "sketch/sketch_cuda_launch.cuh"

namespace fedkernels {

template <typename scalar_t>
__global__ void bucket_merge_kernel(const scalar_t* logp, const int32_t* table, int64_t n_rows, int64_t nb,
                                    int64_t p, int64_t r, int64_t reduce, scalar_t* out) {
  using acc_t = at::opmath_type<scalar_t>;
  FK_GRID_STRIDE(item, n_rows * p) {
    const int64_t n = item / p, l = item % p;
    out[item] = static_cast<scalar_t>(merge_score<scalar_t, acc_t>(logp + n * nb, n_rows * nb, table + l * r, nullptr, r, reduce));
  }
}

template <typename scalar_t>
__global__ void bucket_merge_topk_kernel(const scalar_t* logp, const int32_t* table, int64_t n_rows, int64_t nb,
                                         int64_t p, int64_t r, int64_t reduce, int64_t k,
                                         at::opmath_type<scalar_t>* maxima, scalar_t* vals, int64_t* ids) {
  using acc_t = at::opmath_type<scalar_t>;
  FK_GRID_STRIDE(n, n_rows) {
    const scalar_t* src = logp + n * nb;
    acc_t* row_max = maxima + n * r;
    const bool prune = reduce == kReduceMean && row_maxima<scalar_t, acc_t>(src, n_rows * nb, r, nb, row_max);
    int64_t size = 0;
    merge_topk_range<scalar_t, acc_t>(src, n_rows * nb, table, r, reduce, 0, p, prune ? row_max : nullptr, k,
                                      vals + n * k, ids + n * k, size);
    heap_to_sorted(vals + n * k, ids + n * k, k);
  }
}

static at::Tensor bucket_merge_cuda(const at::Tensor& logp, const at::Tensor& table, c10::string_view reduce_name) {
  const c10::cuda::CUDAGuard guard(logp.device());
  const MergeArgs a = prepare_merge(logp, table, reduce_name);
  const auto &lp = a.logp, &tb = a.table;
  const int64_t r = a.r, n_rows = a.n_rows, nb = a.nb, p = a.p, reduce = a.reduce;
  auto out = at::empty({n_rows, p}, lp.options());
  if (out.numel() == 0) return out;
  FK_DISPATCH_FLOAT_HALF_BF16(lp.scalar_type(), "bucket_merge", [&] {
    bucket_merge_kernel<scalar_t><<<sketch_blocks(out.numel()), kSketchThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
        lp.const_data_ptr<scalar_t>(), tb.const_data_ptr<int32_t>(), n_rows, nb, p, r, reduce, out.data_ptr<scalar_t>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

static std::tuple<at::Tensor, at::Tensor> bucket_merge_topk_cuda(const at::Tensor& logp, const at::Tensor& table,
                                                                 int64_t k, c10::string_view reduce_name) {
  const c10::cuda::CUDAGuard guard(logp.device());
  const MergeArgs a = prepare_merge(logp, table, reduce_name);
  auto out = alloc_topk(a, k);
  at::Tensor& values = std::get<0>(out);
  at::Tensor& indices = std::get<1>(out);
  if (values.numel() == 0) return out;
  FK_DISPATCH_FLOAT_HALF_BF16(a.logp.scalar_type(), "bucket_merge_topk", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    // per-row table maxima for the pruning bound: O(N R)
    auto maxima = at::empty({a.n_rows, a.r}, a.logp.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
    bucket_merge_topk_kernel<scalar_t><<<sketch_blocks(a.n_rows), kSketchThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
        a.logp.const_data_ptr<scalar_t>(), a.table.const_data_ptr<int32_t>(), a.n_rows, a.nb, a.p, a.r, a.reduce, k,
        maxima.data_ptr<acc_t>(), values.data_ptr<scalar_t>(), indices.data_ptr<int64_t>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

TORCH_LIBRARY_IMPL(fedkernels, CUDA, m) {
  m.impl("bucket_merge", &bucket_merge_cuda);
  m.impl("bucket_merge_topk", &bucket_merge_topk_cuda);
}

}  // namespace fedkernels
