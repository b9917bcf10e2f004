// The fast path of prox_tv1d: Condat's direct algorithm (L. Condat, "A direct algorithm for 1D total
// variation denoising", IEEE SPL 2013), written here from the paper's description, with the anchored
// right end added and a work budget so the row stays linear time in the worst case (the caller then
// falls back to the funnel in prox.h). Shared by the CPU and CUDA launchers.
//
// Dual view: p_k = sum_{i<=k} (z_i - u_i) must stay in [-lam, lam], equal +lam after a step down and
// -lam after a step up. The current segment starts at k0; [vmin, vmax] is the range of its value that
// keeps p within the box from k0 to k, umin / umax are p_k at vmin / vmax, and kmn / kmx the last
// positions where p touches +lam at vmin / -lam at vmax (where a step would go).
//
// No scratch memory; each sample is read once plus once per rescan after a step. Rescans are counted
// and the solve gives up past `budget` of them, which only adversarial rows reach.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/macros.h"

#if !defined(__CUDA_ARCH__) && (defined(__x86_64__) || defined(_M_X64))
#include <emmintrin.h>
#endif

namespace fedkernels {

enum class TvStatus : int { kOk = 0, kNonFinite = 1, kBudget = 2 };

// True when x is NaN or +-inf (a bit test: cheap, branch-free, and immune to fast-math rewrites).
FK_HOST_DEVICE FK_INLINE bool tv_nonfinite(double x) {
  uint64_t b;
  memcpy(&b, &x, sizeof b);
  return ((b >> 52) & 0x7ff) == 0x7ff;
}

// u[a..b) = v. Runs are short and of random length, so a loop exit per sample mispredicts: write
// four at a time instead, spilling up to three past b when the row has room. The spill is harmless
// because runs are written left to right and every later sample is written again by a later run.
// z[i] as a double. On x86 hosts a plain float -> double conversion (cvtss2sd) merges into its
// destination register, a false dependency that chains loop iterations (measured: float rows 1.5x
// slower than double ones at large lam); convert packed from a zeroed register instead. Same value.
FK_HOST_DEVICE FK_INLINE double tv_load(const double* z, int64_t i) { return z[i]; }
FK_HOST_DEVICE FK_INLINE double tv_load(const float* z, int64_t i) {
#if !defined(__CUDA_ARCH__) && (defined(__x86_64__) || defined(_M_X64))
  return _mm_cvtsd_f64(_mm_cvtps_pd(_mm_load_ss(z + i)));
#else
  return static_cast<double>(z[i]);
#endif
}

template <typename T>
FK_HOST_DEVICE FK_INLINE void tv_fill(T* u, int64_t a, int64_t b, int64_t n, double v) {
  const T t = static_cast<T>(v);
  if (b + 3 <= n) {
    for (int64_t i = a; i < b; i += 4) {
      u[i] = t;
      u[i + 1] = t;
      u[i + 2] = t;
      u[i + 3] = t;
    }
  } else {
    for (int64_t i = a; i < b; ++i) u[i] = t;
  }
}

// Solves row z[0..n) into u (lam > 0). kNonFinite: z holds NaN/inf or an intermediate overflowed;
// kBudget: more than `budget` rescans were needed (u partially written; solve again another way).
//
// Taut-string form (S_k = z_1 + .. + z_k): the string leaves the apex (x0, A) with a slope in
// [vmin, vmax], where vmin = nm / dm is the slope to the highest lower-wall point (S_j - lam) seen
// since the apex and vmax = nM / dM the slope to the lowest upper-wall point (S_j + lam). Slopes are
// compared by cross multiplication, so the loop carries no division (only emitted values divide).
template <typename T>
FK_HOST_DEVICE TvStatus tv1d_direct_row(const T* z, T* u, int64_t n, double lam, bool anchored, int64_t budget) {
  if (n == 0) return TvStatus::kOk;
  int64_t x0 = 0, k = 0, xm = 0, xM = 0;  // apex, current point, the two slope-defining points
  double A = 0.0, S = 0.0;                // apex height, S_k
  double nm = 0.0, dm = 0.0, Sm = 0.0;    // vmin = nm / dm (dm = 0: no point yet), S at xm
  double nM = 0.0, dM = 0.0, SM = 0.0;    // vmax = nM / dM, S at xM
  double dx = 0.0;                        // k - x0
  bool bad = false;
  int64_t rescans = 0;
  // The string bends at (xm, S_xm - lam) (a step down after sample xm) or at (xM, S_xM + lam) (a
  // step up): samples x0+1 .. x emit the slope, the bend is the new apex, and the scan resumes there
  // with the next point already taken in (both slopes point at its walls; x < n always holds here).
  auto bend = [&](int64_t x, double num, double den, double Sx, double h) {
    const double v = num / den;
    bad |= tv_nonfinite(v);
    tv_fill(u, x0, x, n, v);
    rescans += k - x;
    x0 = x;
    k = xm = xM = x + 1;
    A = h;
    S = Sm = SM = Sx + tv_load(z, x);
    nm = S - lam - A;
    nM = S + lam - A;
    dm = dM = dx = 1.0;
  };
  for (;;) {
    while (k < n) {
      const double zk = tv_load(z, k);
      bad |= tv_nonfinite(zk);
      ++k;
      S += zk;
      dx += 1.0;
      const double lo = S - lam - A, hi = S + lam - A;  // the walls at k, relative to the apex
      const double min_at = nm * dx, max_at = nM * dx;  // the two lines at k, times dm resp. dM
      if (hi * dm < min_at) {
        bend(xm, nm, dm, Sm, A + nm);  // the upper wall passes under the vmin line: step down
      } else if (lo * dM > max_at) {
        bend(xM, nM, dM, SM, A + nM);  // the lower wall passes over the vmax line: step up
      } else {
        // A wall point inside the funnel narrows it (selects, not branches: these are coin flips).
        const bool lo_in = lo * dm >= min_at, hi_in = hi * dM <= max_at;
        nm = lo_in ? lo : nm;
        dm = lo_in ? dx : dm;
        xm = lo_in ? k : xm;
        Sm = lo_in ? S : Sm;
        nM = hi_in ? hi : nM;
        dM = hi_in ? dx : dM;
        xM = hi_in ? k : xM;
        SM = hi_in ? S : SM;
      }
      if (rescans > budget) return TvStatus::kBudget;
    }
    // k == n: the string ends at (n, A + e): e = S_n - A when free; anchored, the end is free in the
    // tube [S_n - lam, S_n + lam] and the string then stays flat, so e is the clamp of 0 into it.
    double e = S - A;
    if (anchored) {
      const double elo = S - lam - A, ehi = S + lam - A;
      e = elo > 0.0 ? elo : (ehi < 0.0 ? ehi : 0.0);
    }
    if (e * dm < nm * dx) {
      bend(xm, nm, dm, Sm, A + nm);
    } else if (e * dM > nM * dx) {
      bend(xM, nM, dM, SM, A + nM);
    } else {
      const double v = e / dx;
      bad |= tv_nonfinite(v) || tv_nonfinite(S);
      tv_fill(u, x0, n, n, v);
      return bad ? TvStatus::kNonFinite : TvStatus::kOk;
    }
    if (rescans > budget) return TvStatus::kBudget;
  }
}

}  // namespace fedkernels
