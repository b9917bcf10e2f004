// The CPU dispatch level (see cpu_isa.h): cpuid once, FK_CPU_ISA once, a test limit as an atomic.
#include "common/cpu_isa.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace fedkernels {

namespace {

constexpr const char* kNames[] = {"generic", "avx2", "avx512"};

CpuIsa detect_host() {
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
  // __builtin_cpu_supports also checks that the OS saves the ymm / zmm state (XCR0).
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
  return avx512 ? CpuIsa::avx512 : avx2 ? CpuIsa::avx2 : CpuIsa::generic;
#else
  return CpuIsa::generic;
#endif
}

struct Setting {
  CpuIsa host = CpuIsa::generic;
  CpuIsa base = CpuIsa::generic;  // min(host, cap)
  std::string cap;                // FK_CPU_ISA as given ("" when unset)
  std::string error;              // why FK_CPU_ISA was refused ("" when it was not)
};

const Setting& setting() {
  static const Setting s = [] {
    Setting r;
    r.host = detect_host();
    r.base = r.host;
    const char* env = std::getenv("FK_CPU_ISA");
    r.cap = env != nullptr ? env : "";
    std::string v = r.cap;
    v.erase(std::remove_if(v.begin(), v.end(), [](unsigned char ch) { return std::isspace(ch); }), v.end());
    std::transform(v.begin(), v.end(), v.begin(), [](unsigned char ch) { return std::tolower(ch); });
    if (v.empty()) return r;
    for (int i = 0; i < 3; ++i) {
      if (v == kNames[i]) {
        r.base = static_cast<CpuIsa>(std::min(i, static_cast<int>(r.host)));
        return r;
      }
    }
    r.error = "FK_CPU_ISA='" + r.cap +
              "' is not a CPU level: use avx512, avx2 or generic (case-insensitive), or unset it for the "
              "best level this CPU supports";
    return r;
  }();
  return s;
}

std::atomic<int> g_limit{static_cast<int>(CpuIsa::avx512)};

}  // namespace

CpuIsa cpu_isa() {
  const Setting& s = setting();
  if (!s.error.empty()) throw std::invalid_argument(s.error);  // ValueError in Python
  return static_cast<CpuIsa>(std::min(static_cast<int>(s.base), g_limit.load(std::memory_order_relaxed)));
}

CpuIsa cpu_isa_host() { return setting().host; }

const char* cpu_isa_name(CpuIsa level) { return kNames[static_cast<int>(level)]; }

const char* cpu_isa_cap_text() { return setting().cap.c_str(); }

void cpu_isa_init() {
  const Setting& s = setting();
  if (!s.error.empty()) throw std::invalid_argument(s.error);
}

CpuIsa set_cpu_isa_limit(CpuIsa limit) {
  g_limit.store(static_cast<int>(limit), std::memory_order_relaxed);
  return cpu_isa();
}

}  // namespace fedkernels
