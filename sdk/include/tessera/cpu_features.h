// Header-only: what this CPU offers (CPUID + XGETBV) and the one parser of TESSERA_CPU_CAPABILITY.
// Used by the loader (a manifest's "requires": {"cpu_features": [...]}), by the C++ code
// generator's toolchain (the ISA it compiles for) and by the CPU plugin (the kernels it runs), so
// all three see the same features and accept the same words. No dependency beyond the standard
// library; safe to include in a plugin.
//
// Note [CPU feature probe]
// A feature flag is the CPUID bit alone; whether the OS saves the register state it needs is a
// separate flag (os_ymm: XCR0 bits 1-2, os_zmm: bits 5-7 as well, os_amx: bits 17-18). has() and
// max_capability() combine the two, so a CPU with AVX-512 under an OS that does not save ZMM
// state reports neither "avx512f" nor the avx512 level. On other architectures every flag is false.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace tessera::sdk {

struct CpuFeatures {
  bool sse = false, sse2 = false, sse3 = false, ssse3 = false, sse4_1 = false, sse4_2 = false, popcnt = false;
  bool avx = false, fma = false, f16c = false, bmi1 = false, bmi2 = false, avx2 = false, avx_vnni = false;
  bool avx512f = false, avx512dq = false, avx512ifma = false, avx512cd = false, avx512bw = false,
       avx512vl = false, avx512vbmi = false, avx512vbmi2 = false, avx512vnni = false, avx512bitalg = false,
       avx512vpopcntdq = false, avx512vp2intersect = false, avx512bf16 = false;
  bool gfni = false, amx_tile = false, amx_bf16 = false, amx_int8 = false;
  bool os_ymm = false;  // XCR0 bits 1,2: the OS saves SSE and AVX state
  bool os_zmm = false;  // XCR0 bits 5,6,7 as well: the OS saves opmask and ZMM state
  bool os_amx = false;  // XCR0 bits 17,18: the OS saves AMX tile state

  // Reads CPUID and XGETBV once per call (cheap, but callers cache it).
  static CpuFeatures detect() {
    CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    auto bit = [](unsigned reg, int n) { return ((reg >> n) & 1u) != 0; };
    f.sse = bit(d, 25), f.sse2 = bit(d, 26), f.sse3 = bit(c, 0), f.ssse3 = bit(c, 9);
    f.sse4_1 = bit(c, 19), f.sse4_2 = bit(c, 20), f.popcnt = bit(c, 23);
    f.fma = bit(c, 12), f.avx = bit(c, 28), f.f16c = bit(c, 29);
    if (bit(c, 27)) {  // OSXSAVE: XGETBV may be executed
      unsigned lo = 0, hi = 0;
      __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
      const uint64_t xcr0 = (uint64_t(hi) << 32) | lo;
      f.os_ymm = (xcr0 & 0x6) == 0x6;
      f.os_zmm = (xcr0 & 0xE6) == 0xE6;
      f.os_amx = (xcr0 & (3u << 17)) == (3u << 17);
    }
    if (__get_cpuid_max(0, nullptr) >= 7) {
      __cpuid_count(7, 0, a, b, c, d);
      f.bmi1 = bit(b, 3), f.avx2 = bit(b, 5), f.bmi2 = bit(b, 8);
      f.avx512f = bit(b, 16), f.avx512dq = bit(b, 17), f.avx512ifma = bit(b, 21), f.avx512cd = bit(b, 28);
      f.avx512bw = bit(b, 30), f.avx512vl = bit(b, 31);
      f.avx512vbmi = bit(c, 1), f.avx512vbmi2 = bit(c, 6), f.gfni = bit(c, 8), f.avx512vnni = bit(c, 11);
      f.avx512bitalg = bit(c, 12), f.avx512vpopcntdq = bit(c, 14);
      f.avx512vp2intersect = bit(d, 8), f.amx_bf16 = bit(d, 22), f.amx_tile = bit(d, 24),
      f.amx_int8 = bit(d, 25);
      __cpuid_count(7, 1, a, b, c, d);
      f.avx_vnni = bit(a, 4), f.avx512bf16 = bit(a, 5);
    }
#endif
    return f;
  }

  // The feature a manifest names ("avx512_bf16", "AVX2", "sse4.1": case, '_', '-' and '.' do not
  // matter), usable with the OS's register-state support (Note [CPU feature probe]). false for a
  // name it does not know.
  bool has(std::string_view name) const {
    std::string n;
    for (char ch : name) {
      if (ch == '_' || ch == '-' || ch == '.') continue;
      n += char(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
    }
    struct Entry {
      const char* name;
      bool CpuFeatures::*flag;
      int state;  // 0: none, 1: os_ymm, 2: os_zmm, 3: os_amx
    };
    static constexpr Entry kTable[] = {
        {"sse", &CpuFeatures::sse, 0},
        {"sse2", &CpuFeatures::sse2, 0},
        {"sse3", &CpuFeatures::sse3, 0},
        {"ssse3", &CpuFeatures::ssse3, 0},
        {"sse41", &CpuFeatures::sse4_1, 0},
        {"sse42", &CpuFeatures::sse4_2, 0},
        {"popcnt", &CpuFeatures::popcnt, 0},
        {"fma", &CpuFeatures::fma, 1},
        {"avx", &CpuFeatures::avx, 1},
        {"f16c", &CpuFeatures::f16c, 1},
        {"bmi", &CpuFeatures::bmi1, 0},
        {"bmi1", &CpuFeatures::bmi1, 0},
        {"bmi2", &CpuFeatures::bmi2, 0},
        {"avx2", &CpuFeatures::avx2, 1},
        {"avxvnni", &CpuFeatures::avx_vnni, 1},
        {"avx512f", &CpuFeatures::avx512f, 2},
        {"avx512dq", &CpuFeatures::avx512dq, 2},
        {"avx512ifma", &CpuFeatures::avx512ifma, 2},
        {"avx512cd", &CpuFeatures::avx512cd, 2},
        {"avx512bw", &CpuFeatures::avx512bw, 2},
        {"avx512vl", &CpuFeatures::avx512vl, 2},
        {"avx512vbmi", &CpuFeatures::avx512vbmi, 2},
        {"avx512vbmi2", &CpuFeatures::avx512vbmi2, 2},
        {"avx512vnni", &CpuFeatures::avx512vnni, 2},
        {"avx512bitalg", &CpuFeatures::avx512bitalg, 2},
        {"avx512vpopcntdq", &CpuFeatures::avx512vpopcntdq, 2},
        {"avx512vp2intersect", &CpuFeatures::avx512vp2intersect, 2},
        {"avx512bf16", &CpuFeatures::avx512bf16, 2},
        {"gfni", &CpuFeatures::gfni, 0},
        {"amxtile", &CpuFeatures::amx_tile, 3},
        {"amxbf16", &CpuFeatures::amx_bf16, 3},
        {"amxint8", &CpuFeatures::amx_int8, 3},
    };
    for (const Entry& e : kTable) {
      if (n != e.name) continue;
      const bool state =
          e.state == 0 || (e.state == 1 && os_ymm) || (e.state == 2 && os_zmm) || (e.state == 3 && os_amx);
      return state && this->*e.flag;
    }
    return false;
  }
};

// The ISA levels of the CPU plugin's kernels and of generated code (Note [CPU ISA selection] in
// plugins/cpu/src/isa.h): baseline x86-64, AVX2+FMA, AVX-512 F/BW/VL/DQ.
enum class CpuCapability { Default, AVX2, AVX512 };

inline const char* cpu_capability_name(CpuCapability c) {
  switch (c) {
    case CpuCapability::AVX512:
      return "avx512";
    case CpuCapability::AVX2:
      return "avx2";
    default:
      return "default";
  }
}

// The highest level the features support.
inline CpuCapability max_cpu_capability(const CpuFeatures& f) {
  if (f.os_zmm && f.avx2 && f.fma && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq)
    return CpuCapability::AVX512;
  if (f.os_ymm && f.avx2 && f.fma) return CpuCapability::AVX2;
  return CpuCapability::Default;
}

// The one parser of TESSERA_CPU_CAPABILITY's value: "default", "avx2" or "avx512". false with
// `*error` naming the variable, the value and the accepted words otherwise.
inline bool parse_cpu_capability(std::string_view word, CpuCapability* out, std::string* error) {
  for (CpuCapability c : {CpuCapability::Default, CpuCapability::AVX2, CpuCapability::AVX512})
    if (word == cpu_capability_name(c)) {
      *out = c;
      return true;
    }
  *error = "TESSERA_CPU_CAPABILITY='" + std::string(word) +
           "' is not a capability level; expected one of default, avx2, avx512 (or unset for the best)";
  return false;
}

// The level to run at given the features and TESSERA_CPU_CAPABILITY's value (empty: unset, the
// best level). false with `*error` set for an unknown word or a level above the best one (naming
// the features that are missing).
inline bool select_cpu_capability(const CpuFeatures& f, std::string_view requested, CpuCapability* out,
                                  std::string* error) {
  const CpuCapability best = max_cpu_capability(f);
  if (requested.empty()) {
    *out = best;
    return true;
  }
  CpuCapability want{};
  if (!parse_cpu_capability(requested, &want, error)) return false;
  if (int(want) > int(best)) {
    std::string missing;
    if (!f.os_ymm) missing += " os-ymm-state";
    if (!f.avx2) missing += " avx2";
    if (!f.fma) missing += " fma";
    if (want == CpuCapability::AVX512) {
      if (!f.os_zmm) missing += " os-zmm-state";
      if (!f.avx512f) missing += " avx512f";
      if (!f.avx512bw) missing += " avx512bw";
      if (!f.avx512vl) missing += " avx512vl";
      if (!f.avx512dq) missing += " avx512dq";
    }
    *error = "TESSERA_CPU_CAPABILITY=" + std::string(requested) +
             " asks for more than this CPU supports (best: " + cpu_capability_name(best) +
             "; missing:" + missing + "); unset it or set it to " + cpu_capability_name(best);
    return false;
  }
  *out = want;
  return true;
}

}  // namespace tessera::sdk
