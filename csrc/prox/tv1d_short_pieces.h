// The one-sample-piece loop of the direct scan (tv1d_direct.h). At small lam almost every piece of
// the solution is a single sample, and on noisy input whether the string then steps down or up is a
// coin flip: as a branch it mispredicts every other sample (most of Condat's time there).
// This loop computes the direction with selects, so its one branch (does the piece end at the next
// sample?) is taken almost always where such pieces dominate, and predicts.
#pragma once

#include <cstdint>

#include "common/macros.h"
#include "prox/tv1d_io.h"

namespace fedkernels {

// Pieces of one sample, from x on. On entry the current piece holds sample x alone, and (l, h) are
// its walls' heights at x + 1 relative to the apex x (the scan's lo, hi, with dx = dm = dM = 1,
// nm = l, nM = h). While sample x + 1 ends that piece and x < end: writes u[x] and restarts at x + 1.
// These are the scan's own operations on the same values, so the same bits: with dx = 2 and
// dm = dM = 1 its tests hi * dm < nm * dx and lo * dM > nM * dx are h + z < l + l (down) and
// l + z > h + h (up); the piece's value nm / dm is l (down) or h (up); the restart puts the wall the
// string bends on at z and the other one 2 lam (tl) away. The two tests exclude each other (h >= l).
// Returns the x it stopped at (its piece holds sample x alone, walls (l, h)); sets bad when a value
// written is NaN or inf, or (kCheckZ: the caller has not checked z ahead) a sample consumed is.
template <typename T, bool kCheckZ>
FK_HOST_DEVICE FK_INLINE int64_t tv_one_sample_pieces(const T* z, T* u, int64_t x, int64_t end, double tl, double& l,
                                                      double& h, bool& bad) {
#if defined(FK_TV_SSE2)
  return tv_one_sample_pieces_sse2<T, kCheckZ>(z, u, x, end, tl, l, h, bad);  // branch-free selects (tv1d_x86.h)
#else
  for (; x < end; ++x) {
    const double zk = tv_load(z, x + 1);
    const bool down = h + zk<l + l, up = l + zk> h + h;
    if (!(down || up)) break;
    const double v = down ? l : h;
    u[x] = tv_cast<T>(v);
    bad |= (kCheckZ && tv_nonfinite(zk)) || tv_nonfinite(v);
    const double lz = zk - tl, hz = zk + tl;
    l = down ? zk : lz;
    h = down ? hz : zk;
  }
  return x;
#endif
}

}  // namespace fedkernels
