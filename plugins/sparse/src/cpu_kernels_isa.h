// Per-ISA kernel entry points behind cpu_layout.h (Note [CPU 2:4 layout]). Internal to the sparse
// plugin.
#pragma once

#include "cpu_layout.h"

namespace tessera::sparse_cpu {

#define TESSERA_SPARSE_DECLARE_ISA(ns)                                                                \
  namespace ns {                                                                                     \
  void linear_f32(const float* x, int64_t batch, const CpuLayout& w, const float* bias, float* y);    \
  void linear_bf16(const uint16_t* x, int64_t batch, const CpuLayout& w, const uint16_t* bias,       \
                   uint16_t* y);                                                                     \
  void linear_i8(const int8_t* x, int64_t batch, const CpuLayout& w, const int8_t* bias, int8_t* y);   \
  }
TESSERA_SPARSE_DECLARE_ISA(isa_scalar)
TESSERA_SPARSE_DECLARE_ISA(isa_avx2)
TESSERA_SPARSE_DECLARE_ISA(isa_avx512)
#undef TESSERA_SPARSE_DECLARE_ISA

inline float bf16_to_float(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// Runs rows(r0, r1) over blocks of 16 rows (4 layout blocks) of the padded rows on OpenMP threads;
// the kernels store only rows < w.n.
template <typename Rows>
void for_row_blocks(const CpuLayout& w, int64_t batch, Rows&& rows) {
  const int64_t blocks = (w.np + 15) / 16;
  const double work = double(w.np) * double(w.kp) * double(batch > 0 ? batch : 1);
#pragma omp parallel for schedule(static) if (work > 1 << 16)
  for (int64_t i = 0; i < blocks; ++i) rows(i * 16, i * 16 + 16 < w.np ? i * 16 + 16 : w.np);
}

}  // namespace tessera::sparse_cpu
