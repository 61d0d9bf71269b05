// AVX2 + FMA kernels: no expand instruction, so each 8 positions (two groups, 4 values) are
// rebuilt with a permute whose indices and zero lanes come from a 256-entry table indexed by the
// 8 mask bits. Note [CPU 2:4 layout].
#include <immintrin.h>

#include <array>
#include <cstring>

#include "cpu_kernels_isa.h"

namespace tessera::sparse_cpu::isa_avx2 {
namespace {

struct ExpandTable {
  alignas(32) int32_t index[256][8];
  alignas(32) int32_t keep[256][8];
  ExpandTable() {
    for (int m = 0; m < 256; ++m) {
      int next = 0;
      for (int i = 0; i < 8; ++i) {
        const bool set = (m >> i) & 1;
        index[m][i] = set ? (next & 3) : 0;
        keep[m][i] = set ? -1 : 0;
        next += set;
      }
    }
  }
};
// Built on first use: this file is compiled for AVX2, and a static initializer would run (and could
// use AVX2 instructions) on every CPU the plugin loads on.
const ExpandTable& expand_table() {
  static const ExpandTable table;
  return table;
}

inline __m256 expand8(const ExpandTable& t, const float* v4, unsigned m8) {
  const __m256 v = _mm256_castps128_ps256(_mm_loadu_ps(v4));
  const __m256i idx = _mm256_load_si256(reinterpret_cast<const __m256i*>(t.index[m8]));
  const __m256 keep = _mm256_castsi256_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(t.keep[m8])));
  return _mm256_and_ps(_mm256_permutevar8x32_ps(v, idx), keep);
}

inline __m256 widen_bf16(__m128i h) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); }

inline __m256 expand8(const ExpandTable& t, const uint16_t* v4, unsigned m8) {
  const __m256 v = _mm256_castsi256_ps(_mm256_slli_epi32(
      _mm256_cvtepu16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(v4))), 16));
  const __m256i idx = _mm256_load_si256(reinterpret_cast<const __m256i*>(t.index[m8]));
  const __m256 keep = _mm256_castsi256_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(t.keep[m8])));
  return _mm256_and_ps(_mm256_permutevar8x32_ps(v, idx), keep);
}

inline __m256 load8(const float* x) { return _mm256_loadu_ps(x); }
inline __m256 load8(const uint16_t* x) { return widen_bf16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x))); }

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Note [Sparse CPU register tile], with 16 registers: 2 rows x 4 batch rows.
constexpr int kRows = 2;
constexpr int kBatchTile = 4;

template <int R, int B, typename T>
void tile(const T* x, int64_t ldx, const CpuLayout& w, int64_t r0, float* out) {
  __m256 acc[R][B];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < B; ++b) acc[r][b] = _mm256_setzero_ps();
  const uint8_t* vals = w.block_values(r0);
  const uint8_t* masks = reinterpret_cast<const uint8_t*>(w.block_mask(r0));
  const int64_t ri = r0 % CpuLayout::kBlockRows;
  const ExpandTable& table = expand_table();
  auto weights = [&](int64_t c, int r) {
    const int64_t byte = c * 4 * int64_t(sizeof(T));
    const T* v = reinterpret_cast<const T*>(
        vals + ((byte / CpuLayout::kSliceBytes) * CpuLayout::kBlockRows + ri + r) * CpuLayout::kSliceBytes +
        byte % CpuLayout::kSliceBytes);
    return expand8(table, v, masks[((c / 8) * CpuLayout::kBlockRows + ri + r) * 8 + c % 8]);
  };
  const int64_t full = w.k / 8;
  for (int64_t c = 0; c < full; ++c) {
    __m256 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = weights(c, r);
    for (int b = 0; b < B; ++b) {
      const __m256 xv = load8(x + b * ldx + 8 * c);
      for (int r = 0; r < R; ++r) acc[r][b] = _mm256_fmadd_ps(wv[r], xv, acc[r][b]);
    }
  }
  if (const int64_t tail = w.k - 8 * full; tail > 0) {
    __m256 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = weights(full, r);
    for (int b = 0; b < B; ++b) {
      T buf[8] = {};
      std::memcpy(buf, x + b * ldx + 8 * full, size_t(tail) * sizeof(T));
      const __m256 xv = load8(buf);
      for (int r = 0; r < R; ++r) acc[r][b] = _mm256_fmadd_ps(wv[r], xv, acc[r][b]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < B; ++b) out[r * B + b] = hsum(acc[r][b]);
}

// Rows [r0, r1) (a multiple of the 4-row layout blocks) in pairs, every batch tile per pair.
template <typename T, typename Store>
void rows(const T* x, int64_t batch, const CpuLayout& w, int64_t r0, int64_t r1, Store&& store) {
  float out[kRows * kBatchTile];
  for (int64_t r = r0; r < r1; r += kRows)
    for (int64_t b0 = 0; b0 < batch; b0 += kBatchTile) {
      const int64_t bt = batch - b0 < kBatchTile ? batch - b0 : kBatchTile;
      const T* xb = x + b0 * w.k;
      switch (bt) {
        case 1: tile<kRows, 1>(xb, w.k, w, r, out); break;
        case 2: tile<kRows, 2>(xb, w.k, w, r, out); break;
        case 3: tile<kRows, 3>(xb, w.k, w, r, out); break;
        default: tile<kRows, 4>(xb, w.k, w, r, out); break;
      }
      for (int64_t rr = 0; rr < kRows && r + rr < w.n; ++rr)
        for (int64_t b = 0; b < bt; ++b) store(b0 + b, r + rr, out[rr * bt + b]);
    }
}

}  // namespace

void linear_f32(const float* x, int64_t batch, const CpuLayout& w, const float* bias, float* y) {
  for_row_blocks(w, batch, [&](int64_t r0, int64_t r1) {
    rows(x, batch, w, r0, r1, [&](int64_t b, int64_t r, float v) { y[b * w.n + r] = v + (bias ? bias[r] : 0.f); });
  });
}

void linear_bf16(const uint16_t* x, int64_t batch, const CpuLayout& w, const uint16_t* bias, uint16_t* y) {
  for_row_blocks(w, batch, [&](int64_t r0, int64_t r1) {
    rows(x, batch, w, r0, r1, [&](int64_t b, int64_t r, float v) {
      y[b * w.n + r] = float_to_bf16(v + (bias ? bf16_to_float(bias[r]) : 0.f));
    });
  });
}

}  // namespace tessera::sparse_cpu::isa_avx2
