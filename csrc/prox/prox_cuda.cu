// CUDA kernels of prox_tv1d and its backward: one thread per item (row or block), running the same
// sequential FK_HOST_DEVICE solver as the CPU. No torch header: prox_cuda.cpp allocates and launches.
#include "prox/prox_cuda_kernels.h"

namespace fedkernels {

namespace {

constexpr int kThreads = 128;

template <typename T>
__global__ void tv1d_kernel(const T* z, T* u, const double* lam_rows, TvPoint* scratch, uint8_t* bad, TvLayout l,
                            bool anchored) {
  const int64_t it = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (it >= l.items()) return;
  const int64_t off = (it / l.nblocks) * l.d + (it % l.nblocks) * l.block, n = l.item_len(it);
  const double lam = lam_rows[it / l.nblocks];
  bool ok = true;
  if (lam == 0.0) {
    for (int64_t i = off; i < off + n; ++i) {
      u[i] = z[i];
      ok = ok && (z[i] - z[i] == T(0));
    }
  } else {
    TvPoint* lo = scratch + it * 2 * (l.block + 1);
    ok = tv1d_solve_row(z + off, u + off, n, lam, anchored, lo, lo + (l.block + 1));
  }
  bad[it] = ok ? 0 : 1;
}

template <typename T>
__global__ void tv1d_backward_kernel(const T* g, const T* u, T* gz, const double* lam_rows, double* glam, TvLayout l,
                                     bool anchored) {
  const int64_t it = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (it >= l.items()) return;
  const int64_t off = (it / l.nblocks) * l.d + (it % l.nblocks) * l.block;
  glam[it] = tv1d_backward_row(g + off, u + off, gz + off, l.item_len(it), lam_rows[it / l.nblocks] == 0.0, anchored);
}

unsigned grid_for(int64_t items) { return static_cast<unsigned>((items + kThreads - 1) / kThreads); }

}  // namespace

template <typename T>
void launch_tv1d(const T* z, T* u, const double* lam_rows, TvPoint* scratch, uint8_t* bad, TvLayout l, bool anchored,
                 cudaStream_t stream) {
  tv1d_kernel<T><<<grid_for(l.items()), kThreads, 0, stream>>>(z, u, lam_rows, scratch, bad, l, anchored);
}

template <typename T>
void launch_tv1d_backward(const T* g, const T* u, T* gz, const double* lam_rows, double* glam, TvLayout l,
                          bool anchored, cudaStream_t stream) {
  tv1d_backward_kernel<T><<<grid_for(l.items()), kThreads, 0, stream>>>(g, u, gz, lam_rows, glam, l, anchored);
}

template void launch_tv1d<float>(const float*, float*, const double*, TvPoint*, uint8_t*, TvLayout, bool, cudaStream_t);
template void launch_tv1d<double>(const double*, double*, const double*, TvPoint*, uint8_t*, TvLayout, bool,
                                  cudaStream_t);
template void launch_tv1d_backward<float>(const float*, const float*, float*, const double*, double*, TvLayout, bool,
                                          cudaStream_t);
template void launch_tv1d_backward<double>(const double*, const double*, double*, const double*, double*, TvLayout,
                                           bool, cudaStream_t);

}  // namespace fedkernels
