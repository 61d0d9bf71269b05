// ISA levels of the CPU plugin and their selection at init.
//
// Note [CPU ISA selection]
// Hot kernels (binary elementwise, unary transcendentals, reductions) are compiled from one source
// file three times: baseline x86-64, AVX2+FMA+F16C and AVX-512 (F/BW/VL/DQ/CD, 512-bit vectors).
// Each compilation lives in its own namespace and fills one function table (vec_kernels.h).
// At plugin init, capability() reads CPUID and XGETBV (the OS must save YMM / ZMM state, XCR0 bits
// 1-2 and 5-7) and picks the highest level; TESSERA_CPU_CAPABILITY=default|avx2|avx512 lowers it,
// and asking for more than the CPU has makes plugin init fail with a message.
#pragma once

#include <cstdint>
#include <string>

#include "tessera/cpu_features.h"

namespace tessera::cpu {

// The levels and the feature probe are the SDK's (tessera/cpu_features.h), shared with the loader
// and the code generator: one probe, one parser of TESSERA_CPU_CAPABILITY.
using Capability = sdk::CpuCapability;
using CpuFeatures = sdk::CpuFeatures;

// The level the plugin runs at (fixed at plugin init; the detected level before that).
// Thread-safe; cheap (a load).
Capability capability();
// "default", "avx2" or "avx512".
inline const char* capability_name(Capability c) { return sdk::cpu_capability_name(c); }

inline CpuFeatures detect_cpu_features() { return CpuFeatures::detect(); }
// Highest level the feature set supports.
inline Capability max_capability(const CpuFeatures& f) { return sdk::max_cpu_capability(f); }

// Pure selection: given features and the (possibly empty) TESSERA_CPU_CAPABILITY value, return the
// level to use, or false with *error set (unknown value, or a level the CPU lacks).
inline bool select_capability(const CpuFeatures& f, const std::string& requested, Capability* out,
                              std::string* error) {
  return sdk::select_cpu_capability(f, requested, out, error);
}

// Fixes the level used by capability(); called once by plugin init.
void set_capability(Capability c);

}  // namespace tessera::cpu
