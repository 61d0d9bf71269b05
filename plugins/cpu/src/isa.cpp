#include "isa.h"

#include <atomic>
#include <cpuid.h>

#include "vec_kernels.h"

namespace tessera::cpu {
namespace {

uint64_t read_xcr0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (uint64_t(edx) << 32) | eax;
}

std::atomic<int> g_capability{-1};

}  // namespace

CpuFeatures detect_cpu_features() {
  CpuFeatures f;
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  f.sse4_2 = (ecx >> 20) & 1;
  f.fma = (ecx >> 12) & 1;
  const bool osxsave = (ecx >> 27) & 1;
  const bool avx = (ecx >> 28) & 1;
  if (osxsave) {
    const uint64_t xcr0 = read_xcr0();
    f.os_ymm = avx && (xcr0 & 0x6) == 0x6;
    f.os_zmm = f.os_ymm && (xcr0 & 0xe0) == 0xe0;
  }
  if (__get_cpuid_max(0, nullptr) >= 7) {
    __cpuid_count(7, 0, eax, ebx, ecx, edx);
    f.avx2 = (ebx >> 5) & 1;
    f.avx512f = (ebx >> 16) & 1;
    f.avx512dq = (ebx >> 17) & 1;
    f.avx512bw = (ebx >> 30) & 1;
    f.avx512vl = (ebx >> 31) & 1;
    __cpuid_count(7, 1, eax, ebx, ecx, edx);
    f.avx512bf16 = (eax >> 5) & 1;
  }
  return f;
}

Capability max_capability(const CpuFeatures& f) {
  if (f.os_zmm && f.avx2 && f.fma && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq)
    return Capability::AVX512;
  if (f.os_ymm && f.avx2 && f.fma) return Capability::AVX2;
  return Capability::Default;
}

const char* capability_name(Capability c) {
  switch (c) {
    case Capability::AVX512: return "avx512";
    case Capability::AVX2: return "avx2";
    default: return "default";
  }
}

bool select_capability(const CpuFeatures& f, const std::string& requested, Capability* out,
                       std::string* error) {
  const Capability best = max_capability(f);
  if (requested.empty()) {
    *out = best;
    return true;
  }
  Capability want;
  if (requested == "default") {
    want = Capability::Default;
  } else if (requested == "avx2") {
    want = Capability::AVX2;
  } else if (requested == "avx512") {
    want = Capability::AVX512;
  } else {
    *error = "TESSERA_CPU_CAPABILITY='" + requested +
             "' is not a capability level; expected one of default, avx2, avx512 (or unset for the best)";
    return false;
  }
  if (int(want) > int(best)) {
    std::string missing;
    if (!f.os_ymm) missing += " os-ymm-state";
    if (!f.avx2) missing += " avx2";
    if (!f.fma) missing += " fma";
    if (want == Capability::AVX512) {
      if (!f.os_zmm) missing += " os-zmm-state";
      if (!f.avx512f) missing += " avx512f";
      if (!f.avx512bw) missing += " avx512bw";
      if (!f.avx512vl) missing += " avx512vl";
      if (!f.avx512dq) missing += " avx512dq";
    }
    *error = std::string("TESSERA_CPU_CAPABILITY=") + requested + " asks for more than this CPU supports (best: " +
             capability_name(best) + "; missing:" + missing + "); unset it or set it to " + capability_name(best);
    return false;
  }
  *out = want;
  return true;
}

void set_capability(Capability c) { g_capability.store(int(c), std::memory_order_release); }

Capability capability() {
  int c = g_capability.load(std::memory_order_acquire);
  if (c < 0) {
    c = int(max_capability(detect_cpu_features()));
    g_capability.store(c, std::memory_order_release);
  }
  return Capability(c);
}

const VecKernels* kernels_for(Capability c) {
  switch (c) {
    case Capability::AVX512: return isa_avx512::table();
    case Capability::AVX2: return isa_avx2::table();
    default: return isa_default::table();
  }
}

const VecKernels& kernels() { return *kernels_for(capability()); }

}  // namespace tessera::cpu
