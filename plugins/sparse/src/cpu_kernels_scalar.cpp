// Portable kernels: the reference walk over the layout (Note [CPU 2:4 layout]), used on CPUs
// without AVX2 and as the shape every vector kernel must agree with.
#include "cpu_kernels_isa.h"

namespace tessera::sparse_cpu::isa_scalar {
namespace {

template <typename Acc, typename T, typename Load, typename Store>
void rows(const T* x, int64_t batch, const CpuLayout& w, int64_t r0, int64_t r1, Load&& load, Store&& store) {
  for (int64_t r = r0; r < r1 && r < w.n; ++r)
    for (int64_t b = 0; b < batch; ++b) {
      const T* xb = x + b * w.k;
      Acc acc = 0;
      int64_t v = 0;
      for (int64_t word = 0; word < w.kp / 64; ++word)
        for (uint64_t m = w.mask_word(r, word); m != 0; m &= m - 1, ++v) {
          const int64_t pos = word * 64 + __builtin_ctzll(m);
          if (pos < w.k) acc += load(*reinterpret_cast<const T*>(w.value_at(r, v))) * load(xb[pos]);
        }
      store(b, r, acc);
    }
}

}  // namespace

void linear_f32(const float* x, int64_t batch, const CpuLayout& w, const float* bias, float* y) {
  for_row_blocks(w, batch, [&](int64_t r0, int64_t r1) {
    rows<float>(x, batch, w, r0, r1, [](float v) { return v; },
         [&](int64_t b, int64_t r, float v) { y[b * w.n + r] = v + (bias ? bias[r] : 0.f); });
  });
}

void linear_bf16(const uint16_t* x, int64_t batch, const CpuLayout& w, const uint16_t* bias, uint16_t* y) {
  for_row_blocks(w, batch, [&](int64_t r0, int64_t r1) {
    rows<float>(x, batch, w, r0, r1, [](uint16_t v) { return bf16_to_float(v); }, [&](int64_t b, int64_t r, float v) {
      y[b * w.n + r] = float_to_bf16(v + (bias ? bf16_to_float(bias[r]) : 0.f));
    });
  });
}

void linear_i8(const int8_t* x, int64_t batch, const CpuLayout& w, const int8_t* bias, int8_t* y) {
  for_row_blocks(w, batch, [&](int64_t r0, int64_t r1) {
    // Modular arithmetic in uint32: no signed overflow, the same result modulo 2^8.
    rows<uint32_t>(x, batch, w, r0, r1, [](int8_t v) { return uint32_t(int32_t(v)); },
                   [&](int64_t b, int64_t r, uint32_t v) {
                     y[b * w.n + r] = int8_t(uint8_t(v + (bias ? uint32_t(int32_t(bias[r])) : 0u)));
                   });
  });
}

}  // namespace tessera::sparse_cpu::isa_scalar
