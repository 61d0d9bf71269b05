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

namespace tessera::cpu {

enum class Capability { Default, AVX2, AVX512 };

// The level the plugin runs at (fixed at plugin init; the detected level before that).
// Thread-safe; cheap (a load).
Capability capability();
// "default", "avx2" or "avx512".
const char* capability_name(Capability c);

// CPU features relevant to the selection, as read from CPUID/XGETBV.
struct CpuFeatures {
  bool sse4_2 = false;
  bool avx2 = false;
  bool fma = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512bf16 = false;
  bool os_ymm = false;  // XCR0 bits 1,2: the OS saves SSE and AVX state
  bool os_zmm = false;  // XCR0 bits 5,6,7: the OS saves opmask and ZMM state
};

CpuFeatures detect_cpu_features();
// Highest level the feature set supports.
Capability max_capability(const CpuFeatures& f);

// Pure selection: given features and the (possibly empty) TESSERA_CPU_CAPABILITY value, return the
// level to use, or false with *error set (unknown value, or a level the CPU lacks).
bool select_capability(const CpuFeatures& f, const std::string& requested, Capability* out,
                       std::string* error);

// Fixes the level used by capability(); called once by plugin init.
void set_capability(Capability c);

}  // namespace tessera::cpu
