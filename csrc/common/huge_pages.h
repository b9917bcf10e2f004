// Host-only: ask Linux to back a large, freshly allocated output with 2 MiB pages. A big CPU
// tensor comes straight from mmap, so filling it costs one page fault per 4 KiB page (for a large
// output that costs more than the fill itself); with transparent huge pages in "madvise" mode the
// same fill takes one fault per 2 MiB. A hint only: pages already touched keep
// their size, and the call does nothing where THP is off or unsupported.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace fedkernels {

inline void advise_huge_pages(void* data, size_t nbytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t(2) << 20;
  if (nbytes < 4 * kHuge) return;  // small outputs come from the malloc heap, already resident
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + nbytes) & ~(kHuge - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);  // failure is harmless
#else
  (void)data;
  (void)nbytes;
#endif
}

}  // namespace fedkernels
