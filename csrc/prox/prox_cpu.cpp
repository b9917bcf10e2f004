// CPU launchers of prox_tv1d and its backward: torch's parallel_for over items (rows or blocks).
#include <atomic>
#include <memory>
#include <tuple>

#include "common/stable/alloc.h"
#include "common/cpu_isa.h"
#include "common/stable/dispatch.h"
#include "prox/prox.h"
#include "prox/prox_checks.h"
#include "prox/tv1d_direct_levels.h"

namespace fedkernels {

// The direct scan per CPU level (common/cpu_isa.h): the x86 levels' build is tv1d_direct_body_x86.h's
// instance (tv1d_direct_levels.h), the generic one is here; flatten inlines the template body into it.
template <typename T>
__attribute__((flatten)) static TvStatus tv_direct_generic(const T* z, T* u, int64_t n, double lam, bool anchored,
                                                           TvResume& resume) {
  return tv1d_direct_row(z, u, n, lam, anchored, tv_direct_budget(n), resume);
}

template <typename T>
static TvStatus tv_direct(CpuIsa isa, const T* z, T* u, int64_t n, double lam, bool anchored, TvResume& resume) {
#if FK_X86_LEVELS
  if (isa >= CpuIsa::avx2) return prox_cpu::avx2::direct_row(z, u, n, lam, anchored, resume);
#endif
  return tv_direct_generic(z, u, n, lam, anchored, resume);
}

static Tensor prox_tv1d_cpu(const Tensor& z_in, const Tensor& lam, bool anchored, int64_t block_size) {
  const Tensor lam_rows = check_prox_tv1d_args(z_in, lam, block_size);
  const Tensor z = contiguous_or_self(z_in);
  Tensor u = empty_on(z, z.sizes());  // z is contiguous: empty_like(z)
  const TvLayout l = tv_layout(z, block_size);
  if (l.items() == 0) return u;
  const double* lr = lam_rows.const_data_ptr<double>();
  std::atomic<bool> bad{false};
  const CpuIsa isa = cpu_isa();
  FK_DISPATCH_FLOATING(z.scalar_type(), "prox_tv1d_cpu", [&] {
    const scalar_t* zp = z.const_data_ptr<scalar_t>();
    scalar_t* up = u.mutable_data_ptr<scalar_t>();
    const int64_t grain = std::max<int64_t>(1, 32768 / l.block);
    torch::stable::parallel_for(0, l.items(), grain, [&](int64_t begin, int64_t end) {
      // Funnel scratch only when a row exhausts the direct algorithm's budget (adversarial rows).
      std::unique_ptr<TvPoint[]> lo, hi;
      for (int64_t it = begin; it < end; ++it) {
        const int64_t off = (it / l.nblocks) * l.d + (it % l.nblocks) * l.block, n = l.item_len(it);
        const double lam_r = lr[it / l.nblocks];
        bool ok = true;
        if (lam_r == 0.0) {
          std::copy(zp + off, zp + off + n, up + off);
          for (int64_t i = off; i < off + n; ++i) ok = ok && (zp[i] - zp[i] == 0);
        } else {
          TvResume r;
          const TvStatus st = tv_direct(isa, zp + off, up + off, n, lam_r, anchored, r);
          ok = st == TvStatus::kOk;
          if (st == TvStatus::kBudget) {
            // Same two solvers in the same order as tv1d_solve_row (the CUDA path), so CPU == CUDA.
            if (!lo) lo.reset(new TvPoint[l.block + 1]), hi.reset(new TvPoint[l.block + 1]);
            ok = tv1d_funnel_row(zp + off + r.x0, up + off + r.x0, n - r.x0, lam_r, anchored, lo.get(), hi.get(), r.y0);
          }
        }
        if (!ok) bad.store(true, std::memory_order_relaxed);
      }
    });
  });
  check_rows_finite(bad.load());
  return u;
}

static std::tuple<Tensor, Tensor> prox_tv1d_backward_cpu(const Tensor& grad_in, const Tensor& u_in, const Tensor& lam,
                                                         bool anchored, int64_t block_size) {
  const Tensor lam_rows = check_prox_tv1d_backward_args(grad_in, u_in, lam, block_size);
  const Tensor g = contiguous_or_self(grad_in);
  const Tensor u = contiguous_or_self(u_in);
  Tensor gz = empty_on(u, u.sizes());  // u is contiguous: empty_like(u)
  const TvLayout l = tv_layout(u, block_size);
  Tensor glam_items = full_cpu(l.items(), 0.0);
  if (l.items() > 0) {
    const double* lr = lam_rows.const_data_ptr<double>();
    double* gi = glam_items.mutable_data_ptr<double>();
    FK_DISPATCH_FLOATING(u.scalar_type(), "prox_tv1d_backward_cpu", [&] {
      const scalar_t* gp = g.const_data_ptr<scalar_t>();
      const scalar_t* up = u.const_data_ptr<scalar_t>();
      scalar_t* gzp = gz.mutable_data_ptr<scalar_t>();
      torch::stable::parallel_for(0, l.items(), std::max<int64_t>(1, 32768 / l.block), [&](int64_t begin, int64_t end) {
        for (int64_t it = begin; it < end; ++it) {
          const int64_t off = (it / l.nblocks) * l.d + (it % l.nblocks) * l.block;
          gi[it] =
              tv1d_backward_row(gp + off, up + off, gzp + off, l.item_len(it), lr[it / l.nblocks] == 0.0, anchored);
        }
      });
    });
  }
  return {gz, reduce_lam_grad(glam_items, l, lam, leading_sizes(u, u.dim() - 1))};
}

STABLE_TORCH_LIBRARY_IMPL(fedkernels, CPU, m) {
  m.impl("prox_tv1d", TORCH_BOX(&prox_tv1d_cpu));
  m.impl("prox_tv1d_backward", TORCH_BOX(&prox_tv1d_backward_cpu));
}

}  // namespace fedkernels
