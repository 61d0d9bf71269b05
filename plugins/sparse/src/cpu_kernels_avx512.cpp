// AVX-512 kernels (F/BW/VL, BF16, VBMI2): the weight rebuilt per 16 (f32) or 32 (bf16) positions
// with one masked expand-load, reused across a tile of batch rows. Note [CPU 2:4 layout].
#include <immintrin.h>

#include <cstring>
#include <vector>

#include "cpu_kernels_isa.h"

// GCC 12's _mm512_reduce_add_ps reads an undefined vector in its own header.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace tessera::sparse_cpu::isa_avx512 {
namespace {

// Note [Sparse CPU register tile]
// 4 weight rows (a layout block) x B <= 6 batch rows of accumulators (24 of the 32 vector
// registers), the 4 expanded weight vectors held for the B loads of x. x is first packed per batch
// tile as [chunk][batch row][64 bytes] (zero-filled past k), so both the weights and x are read
// as sequential streams. Inside a row block every batch tile is done before the next block, so
// the weights come from memory once and from L1/L2 for the other batch tiles.
// Each weight slice is read with a plain 256-bit load and expanded in registers: the masked
// expand-load from memory was 10-25% slower (f32, one thread, interleaved). Tried and slower:
// 2 weight rows x up to 12 batch rows (half the expands, twice the x traffic from L2), and expanding
// a slice of the block once into an L1 buffer that every batch tile reads back.
constexpr int kRows = 4;
constexpr int kBatchTile = 6;

// int8 tiles hold one batch row less: 4 weight-sum accumulators and a constant join the registers.
template <typename T>
constexpr int64_t batch_tile() {
  return sizeof(T) == 1 ? kBatchTile - 1 : kBatchTile;
}

// Note [Sparse CPU weight prefetch]
// A 4-row block's weights come from memory in its first batch tile and from cache in the others,
// so without help the memory bus idles while the other tiles compute, and the time at batch B is
// the memory time plus the compute time instead of the larger of the two. So every tile of a
// block prefetches its share of the next block's weights (tile t of T takes chunks spread evenly
// over its loop), keeping the weight stream going for the whole of the block's compute.
struct NextBlock {
  const uint8_t* values = nullptr;  // null: no next block
  const uint8_t* mask = nullptr;
  int64_t mask_bytes = 0;           // mask bytes of the 4 rows per chunk
  int64_t begin = 0, count = 0;     // the chunks of it this tile prefetches
  int64_t chunks = 1;               // chunks this tile walks
  int64_t next = 0, frac = 0;
  void step() {
    if (!values) return;
    frac += count;
    if (frac < chunks) return;
    frac -= chunks;
    const int64_t c = begin + next++;
    _mm_prefetch(reinterpret_cast<const char*>(values + c * kRows * CpuLayout::kSliceBytes), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(values + c * kRows * CpuLayout::kSliceBytes + 64), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(mask + c * mask_bytes), _MM_HINT_T0);
  }
};

// The batch rows split into the fewest tiles of at most batch_tile<T>() rows, as even as possible
// (7 rows: 4 + 3, not 6 + 1, whose single accumulator chain per weight row waits on FMA latency).
struct BatchTiles {
  int64_t batch, count;
  int64_t begin(int64_t t) const { return t * batch / count; }
};
template <typename T>
BatchTiles batch_tiles(int64_t batch) {
  return {batch, (batch + batch_tile<T>() - 1) / batch_tile<T>()};
}

// x (batch, k) of T packed per batch tile: tile t (rows b..e) at b * chunks * 64, as
// [chunk][row in tile][64 bytes], zero-filled past k. int8 is stored as x + 128 (XOR 0x80), the
// unsigned operand of vpdpbusd.
template <typename T>
const uint8_t* pack_x(const T* x, int64_t batch, int64_t k, int64_t chunks, std::vector<uint8_t>* buf) {
  constexpr int64_t per = 64 / sizeof(T);
  const BatchTiles tiles = batch_tiles<T>(batch);
  buf->assign(size_t(batch * chunks * 64), 0);
  for (int64_t t = 0; t < tiles.count; ++t) {
    const int64_t b0 = tiles.begin(t), bt = tiles.begin(t + 1) - b0;
    uint8_t* tile = buf->data() + size_t(b0 * chunks * 64);
    for (int64_t c = 0; c < chunks; ++c)
      for (int64_t b = 0; b < bt; ++b) {
        uint8_t* dst = tile + (c * bt + b) * 64;
        std::memcpy(dst, x + (b0 + b) * k + c * per, size_t(std::min(per, k - c * per)) * sizeof(T));
        if constexpr (sizeof(T) == 1)
          _mm512_storeu_si512(dst, _mm512_xor_si512(_mm512_loadu_si512(dst), _mm512_set1_epi8(char(0x80))));
      }
  }
  return buf->data();
}

template <int B>
void f32_tile(const uint8_t* xp, const CpuLayout& w, int64_t r0, int64_t chunks, NextBlock pf, float* out /*[4][B]*/) {
  __m512 acc[kRows][B];
  for (int r = 0; r < kRows; ++r)
    for (int b = 0; b < B; ++b) acc[r][b] = _mm512_setzero_ps();
  const uint8_t* vals = w.block_values(r0);
  const uint16_t* masks = reinterpret_cast<const uint16_t*>(w.block_mask(r0));
  for (int64_t c = 0; c < chunks; ++c) {
    pf.step();
    __m512 wv[kRows];
    for (int r = 0; r < kRows; ++r)
      wv[r] = _mm512_maskz_expand_ps(masks[((c / 4) * kRows + r) * 4 + c % 4],
                                     _mm512_castps256_ps512(_mm256_load_ps(reinterpret_cast<const float*>(
                                         vals + (c * kRows + r) * CpuLayout::kSliceBytes))));
    for (int b = 0; b < B; ++b) {
      const __m512 xv = _mm512_loadu_ps(xp + (c * B + b) * 64);
      for (int r = 0; r < kRows; ++r) acc[r][b] = _mm512_fmadd_ps(wv[r], xv, acc[r][b]);
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int b = 0; b < B; ++b) out[r * B + b] = _mm512_reduce_add_ps(acc[r][b]);
}

template <int B>
void bf16_tile(const uint8_t* xp, const CpuLayout& w, int64_t r0, int64_t chunks, NextBlock pf, float* out) {
  __m512 acc[kRows][B];
  for (int r = 0; r < kRows; ++r)
    for (int b = 0; b < B; ++b) acc[r][b] = _mm512_setzero_ps();
  const uint8_t* vals = w.block_values(r0);
  const uint32_t* masks = reinterpret_cast<const uint32_t*>(w.block_mask(r0));
  for (int64_t c = 0; c < chunks; ++c) {
    pf.step();
    __m512bh wv[kRows];
    for (int r = 0; r < kRows; ++r)
      wv[r] = (__m512bh)_mm512_maskz_expand_epi16(
          masks[((c / 2) * kRows + r) * 2 + c % 2],
          _mm512_castsi256_si512(_mm256_load_si256(
              reinterpret_cast<const __m256i*>(vals + (c * kRows + r) * CpuLayout::kSliceBytes))));
    for (int b = 0; b < B; ++b) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(xp + (c * B + b) * 64);
      for (int r = 0; r < kRows; ++r) acc[r][b] = _mm512_dpbf16_ps(acc[r][b], wv[r], xv);
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int b = 0; b < B; ++b) out[r * B + b] = _mm512_reduce_add_ps(acc[r][b]);
}

// int8 (VNNI): sum (x + 128) w - 128 sum w, in wrapping int32, per 64 positions (32 values).
template <int B>
void i8_tile(const uint8_t* xp, const CpuLayout& w, int64_t r0, int64_t chunks, NextBlock pf, float* out) {
  __m512i acc[kRows][B], wsum[kRows];
  for (int r = 0; r < kRows; ++r) {
    wsum[r] = _mm512_setzero_si512();
    for (int b = 0; b < B; ++b) acc[r][b] = _mm512_setzero_si512();
  }
  const __m512i ones = _mm512_set1_epi8(1);
  const uint8_t* vals = w.block_values(r0);
  const uint64_t* masks = w.block_mask(r0);
  for (int64_t c = 0; c < chunks; ++c) {
    pf.step();
    __m512i wv[kRows];
    for (int r = 0; r < kRows; ++r) {
      wv[r] = _mm512_maskz_expand_epi8(masks[c * kRows + r],
                                       _mm512_castsi256_si512(_mm256_load_si256(reinterpret_cast<const __m256i*>(
                                           vals + (c * kRows + r) * CpuLayout::kSliceBytes))));
      wsum[r] = _mm512_dpbusd_epi32(wsum[r], ones, wv[r]);
    }
    for (int b = 0; b < B; ++b) {
      const __m512i xv = _mm512_loadu_si512(xp + (c * B + b) * 64);
      for (int r = 0; r < kRows; ++r) acc[r][b] = _mm512_dpbusd_epi32(acc[r][b], xv, wv[r]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    const uint32_t correction = uint32_t(_mm512_reduce_add_epi32(wsum[r])) * 128u;
    for (int b = 0; b < B; ++b) {
      const uint32_t v = uint32_t(_mm512_reduce_add_epi32(acc[r][b])) - correction;
      uint32_t bits = v;  // carried through the float slot bit for bit
      std::memcpy(&out[r * B + b], &bits, 4);
    }
  }
}

template <typename T, typename Store>
void run(const T* x, int64_t batch, const CpuLayout& w, Store&& store) {
  const int64_t chunks = (w.k * int64_t(sizeof(T)) + 63) / 64;
  thread_local std::vector<uint8_t> buf;
  const uint8_t* xp = pack_x(x, batch, w.k, chunks, &buf);
  const BatchTiles tiles = batch_tiles<T>(batch);
  for_row_blocks(w, batch, [&](int64_t r0, int64_t r1) {
    float out[kRows * kBatchTile];
    for (int64_t r = r0; r < r1; r += kRows)
      for (int64_t t = 0; t < tiles.count; ++t) {
        const int64_t b0 = tiles.begin(t), bt = tiles.begin(t + 1) - b0;
        const uint8_t* tile = xp + b0 * chunks * 64;
        NextBlock pf;  // Note [Sparse CPU weight prefetch]
        if (r + kRows < w.np) {
          pf.values = w.block_values(r + kRows);
          pf.mask = reinterpret_cast<const uint8_t*>(w.block_mask(r + kRows));
          pf.mask_bytes = kRows * (64 / int64_t(sizeof(T))) / 8;
          pf.begin = t * chunks / tiles.count;
          pf.count = (t + 1) * chunks / tiles.count - pf.begin;
          pf.chunks = chunks;
        }
        auto go = [&]<int B>() {
          if constexpr (sizeof(T) == 4) f32_tile<B>(tile, w, r, chunks, pf, out);
          else if constexpr (sizeof(T) == 2) bf16_tile<B>(tile, w, r, chunks, pf, out);
          else if constexpr (B < kBatchTile) i8_tile<B>(tile, w, r, chunks, pf, out);
        };
        switch (bt) {
          case 1: go.template operator()<1>(); break;
          case 2: go.template operator()<2>(); break;
          case 3: go.template operator()<3>(); break;
          case 4: go.template operator()<4>(); break;
          case 5: go.template operator()<5>(); break;
          default: go.template operator()<6>(); break;
        }
        for (int64_t rr = 0; rr < kRows && r + rr < w.n; ++rr)
          for (int64_t b = 0; b < bt; ++b) store(b0 + b, r + rr, out[rr * bt + b]);
      }
  });
}

}  // namespace

void linear_f32(const float* x, int64_t batch, const CpuLayout& w, const float* bias, float* y) {
  run(x, batch, w, [&](int64_t b, int64_t r, float v) { y[b * w.n + r] = v + (bias ? bias[r] : 0.f); });
}

void linear_bf16(const uint16_t* x, int64_t batch, const CpuLayout& w, const uint16_t* bias, uint16_t* y) {
  run(x, batch, w, [&](int64_t b, int64_t r, float v) {
    y[b * w.n + r] = float_to_bf16(v + (bias ? bf16_to_float(bias[r]) : 0.f));
  });
}

void linear_i8(const int8_t* x, int64_t batch, const CpuLayout& w, const int8_t* bias, int8_t* y) {
  run(x, batch, w, [&](int64_t b, int64_t r, float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    y[b * w.n + r] = int8_t(uint8_t(bits + (bias ? uint32_t(int32_t(bias[r])) : 0u)));
  });
}

}  // namespace tessera::sparse_cpu::isa_avx512
