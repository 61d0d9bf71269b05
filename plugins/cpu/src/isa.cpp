#include "isa.h"

#include <atomic>

#include "vec_kernels.h"

namespace tessera::cpu {
namespace {

std::atomic<int> g_capability{-1};

}  // namespace

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
