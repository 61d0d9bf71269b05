// AVX2 + FMA kernels: no expand instruction, so each 8 positions (two groups, 4 values) are
// rebuilt with a permute whose indices and zero lanes come from a 256-entry table indexed by the
// 8 mask bits (int8: a pshufb per 16 positions, then vpmaddwd). Note [CPU 2:4 layout].
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

// int8: a pshufb control per mask byte (8 positions, 4 values): the value's byte index for a set
// bit, 0x80 (a zero) for a clear one; `high` adds 4, for the second 8 positions of 16.
struct ExpandTableI8 {
  alignas(16) uint8_t low[256][8];
  alignas(16) uint8_t high[256][8];
  ExpandTableI8() {
    for (int m = 0; m < 256; ++m) {
      int next = 0;
      for (int i = 0; i < 8; ++i) {
        const bool set = (m >> i) & 1;
        low[m][i] = set ? uint8_t(next & 3) : 0x80;
        high[m][i] = set ? uint8_t(4 + (next & 3)) : 0x80;
        next += set;
      }
    }
  }
};
const ExpandTableI8& expand_table_i8() {
  static const ExpandTableI8 table;
  return table;
}

// 16 positions of int8 weights from their 8 values and 16 mask bits, widened to int16.
inline __m256i expand16_i8(const ExpandTableI8& t, const int8_t* v8, unsigned m_low, unsigned m_high) {
  const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(v8));
  const __m128i control = _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(t.low[m_low])),
                                             _mm_loadl_epi64(reinterpret_cast<const __m128i*>(t.high[m_high])));
  return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(v, control));
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

// int8, exact modulo 2^32: per 16 positions the weights and x widened to int16, multiplied and
// summed in pairs by vpmaddwd (each pair sum fits int32), accumulated with wrapping adds.
template <int R, int B>
void tile_i8(const int8_t* x, int64_t ldx, const CpuLayout& w, int64_t r0, uint32_t* out) {
  __m256i acc[R][B];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < B; ++b) acc[r][b] = _mm256_setzero_si256();
  const uint8_t* vals = w.block_values(r0);
  const uint8_t* masks = reinterpret_cast<const uint8_t*>(w.block_mask(r0));
  const int64_t ri = r0 % CpuLayout::kBlockRows;
  const ExpandTableI8& table = expand_table_i8();
  auto weights = [&](int64_t c, int r) {  // positions 16c .. 16c + 15
    const int64_t byte = c * 8;
    const auto* v = reinterpret_cast<const int8_t*>(
        vals + ((byte / CpuLayout::kSliceBytes) * CpuLayout::kBlockRows + ri + r) * CpuLayout::kSliceBytes +
        byte % CpuLayout::kSliceBytes);
    const uint8_t* m = masks + ((2 * c / 8) * CpuLayout::kBlockRows + ri + r) * 8 + (2 * c) % 8;
    return expand16_i8(table, v, m[0], m[1]);
  };
  auto step = [&](int64_t c, const int8_t* xs, int64_t ld) {
    __m256i wv[R];
    for (int r = 0; r < R; ++r) wv[r] = weights(c, r);
    for (int b = 0; b < B; ++b) {
      const __m256i xv = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xs + b * ld)));
      for (int r = 0; r < R; ++r) acc[r][b] = _mm256_add_epi32(acc[r][b], _mm256_madd_epi16(wv[r], xv));
    }
  };
  const int64_t full = w.k / 16;
  for (int64_t c = 0; c < full; ++c) step(c, x + 16 * c, ldx);
  if (const int64_t tail = w.k - 16 * full; tail > 0) {
    int8_t buf[kBatchTile][16] = {};
    for (int b = 0; b < B; ++b) std::memcpy(buf[b], x + b * ldx + 16 * full, size_t(tail));
    step(full, buf[0], 16);
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < B; ++b) {
      __m128i s = _mm_add_epi32(_mm256_castsi256_si128(acc[r][b]), _mm256_extracti128_si256(acc[r][b], 1));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
      out[r * B + b] = uint32_t(_mm_cvtsi128_si32(s));
    }
}

}  // namespace

void linear_i8(const int8_t* x, int64_t batch, const CpuLayout& w, const int8_t* bias, int8_t* y) {
  for_row_blocks(w, batch, [&](int64_t r0, int64_t r1) {
    uint32_t out[kRows * kBatchTile];
    for (int64_t r = r0; r < r1; r += kRows)
      for (int64_t b0 = 0; b0 < batch; b0 += kBatchTile) {
        const int64_t bt = batch - b0 < kBatchTile ? batch - b0 : kBatchTile;
        const int8_t* xb = x + b0 * w.k;
        switch (bt) {
          case 1: tile_i8<kRows, 1>(xb, w.k, w, r, out); break;
          case 2: tile_i8<kRows, 2>(xb, w.k, w, r, out); break;
          case 3: tile_i8<kRows, 3>(xb, w.k, w, r, out); break;
          default: tile_i8<kRows, 4>(xb, w.k, w, r, out); break;
        }
        for (int64_t rr = 0; rr < kRows && r + rr < w.n; ++rr)
          for (int64_t b = 0; b < bt; ++b)
            y[(b0 + b) * w.n + r + rr] =
                int8_t(uint8_t(out[rr * bt + b] + (bias ? uint32_t(int32_t(bias[r + rr])) : 0u)));
      }
  });
}

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
