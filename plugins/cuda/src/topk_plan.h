// topk on the GPU (Note [topk on the GPU], ops.cpp): the order keys and the bitonic sorting network,
// written once for the kernels (select.cu) and their host tests (tests/cuda/test_launch_planning.cpp,
// TopkPlanning.*), which replay the same steps on the host.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "host_device.h"

namespace tessera::cuda {

// An unsigned key per value, ordered as topk orders values: by value, NaN larger than every number,
// -0.0 equal to +0.0 (every NaN and both zeros get one key each).
TESSERA_CUDA_HD uint64_t topk_key_f32(float v) {
  if (v != v) return ~uint64_t(0);
  if (v == 0.0f) v = 0.0f;
  uint32_t b;
  memcpy(&b, &v, sizeof(b));
  b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return b;  // below 2^32: under the NaN key
}
TESSERA_CUDA_HD uint64_t topk_key_f64(double v) {
  if (v != v) return ~uint64_t(0);
  if (v == 0.0) v = 0.0;
  uint64_t b;
  memcpy(&b, &v, sizeof(b));
  const uint64_t sign = uint64_t(1) << 63;
  return (b & sign) ? ~b : (b | sign);  // +inf maps to 0xfff0..., under the NaN key
}
TESSERA_CUDA_HD uint64_t topk_key_signed(int64_t v) { return uint64_t(v) ^ (uint64_t(1) << 63); }
TESSERA_CUDA_HD uint64_t topk_key_unsigned(uint64_t v) { return v; }

// The sort key: ascending sort keys put the wanted elements first (largest: the key reversed).
TESSERA_CUDA_HD uint64_t topk_sort_key(uint64_t key, bool largest) { return largest ? ~key : key; }

// The total order of the sort: by key, equal keys by ascending index (indices are distinct), so the
// result is the CPU's (a partial sort by value, ties by index) bit for bit.
TESSERA_CUDA_HD bool topk_after(uint64_t ka, int64_t ia, uint64_t kb, int64_t ib) {
  return ka > kb || (ka == kb && ia > ib);
}

// Padding past the row's end: after every element, NaN included (index >= n).
constexpr uint64_t kTopkPadKey = ~uint64_t(0);

// One compare-exchange of the bitonic network on (keys, idx): positions i < l, ascending or not.
TESSERA_CUDA_HD void bitonic_exchange(uint64_t* keys, int64_t* idx, int64_t i, int64_t l, bool ascending) {
  const uint64_t ki = keys[i], kl = keys[l];
  const int64_t ii = idx[i], il = idx[l];
  if (topk_after(ki, ii, kl, il) == ascending) {
    keys[i] = kl, keys[l] = ki;
    idx[i] = il, idx[l] = ii;
  }
}

// Pair p of a step with stride j: the lower position (counted from the start of the sorted run) and
// its partner lower + j.
TESSERA_CUDA_HD int64_t bitonic_lower(int64_t p, int64_t j) { return (p / j) * 2 * j + p % j; }

// Rows are padded to a power of two (padded >= n, at least 1); 0 when that overflows 2^62.
inline int64_t topk_padded(int64_t n) {
  int64_t p = 1;
  while (p < n) {
    if (p > (int64_t(1) << 61)) return 0;
    p <<= 1;
  }
  return p;
}

// Elements a block sorts in shared memory (16 bytes each: 32 KiB), two per thread.
constexpr int64_t kBitonicTile = 2048;
inline int64_t bitonic_tile(int64_t padded) { return padded < kBitonicTile ? padded : kBitonicTile; }

// The launches that sort rows of `padded` elements (a power of two), in order:
// - TileSort: each tile of bitonic_tile(padded) elements sorted in shared memory (sizes 2 .. tile),
//   each stage's direction from the position within the row;
// - Global(size, stride): one compare-exchange per pair, across tiles (stride >= tile);
// - TileMerge(size): the strides tile / 2 .. 1 of stage `size` in shared memory.
struct BitonicStep {
  enum Kind { TileSort, Global, TileMerge } kind;
  int64_t size = 0, stride = 0;
};
inline std::vector<BitonicStep> plan_bitonic(int64_t padded) {
  std::vector<BitonicStep> steps;
  const int64_t tile = bitonic_tile(padded);
  if (padded < 2) return steps;
  steps.push_back({BitonicStep::TileSort, tile, 0});
  for (int64_t size = tile * 2; size <= padded; size *= 2) {
    for (int64_t stride = size / 2; stride >= tile; stride /= 2)
      steps.push_back({BitonicStep::Global, size, stride});
    steps.push_back({BitonicStep::TileMerge, size, 0});
  }
  return steps;
}

// The work of one step on the pairs of one tile (TileSort, TileMerge) or of one row (Global),
// given the row's keys: what each kernel thread does for pair p, in the order the threads of a block
// go through it (barriers between strides). `base` is the first position of the tile in the row.
TESSERA_CUDA_HD void bitonic_tile_stage(uint64_t* keys, int64_t* idx, int64_t base, int64_t tile,
                                        int64_t size, int64_t stride, int64_t p) {
  const int64_t lo = bitonic_lower(p, stride);
  if (lo + stride < tile) bitonic_exchange(keys, idx, lo, lo + stride, ((base + lo) & size) == 0);
}

// The host replay of plan_bitonic on `rows` rows of `padded` keys (tests; the kernels do the same).
inline void bitonic_sort_on_host(uint64_t* keys, int64_t* idx, int64_t rows, int64_t padded) {
  const int64_t tile = bitonic_tile(padded);
  for (const BitonicStep& s : plan_bitonic(padded))
    for (int64_t r = 0; r < rows; ++r) {
      uint64_t* k = keys + r * padded;
      int64_t* x = idx + r * padded;
      if (s.kind == BitonicStep::Global) {
        for (int64_t p = 0; p < padded / 2; ++p) {
          const int64_t lo = bitonic_lower(p, s.stride);
          bitonic_exchange(k, x, lo, lo + s.stride, (lo & s.size) == 0);
        }
        continue;
      }
      for (int64_t base = 0; base < padded; base += tile) {
        const int64_t first = s.kind == BitonicStep::TileSort ? 2 : s.size;
        for (int64_t size = first; size <= (s.kind == BitonicStep::TileSort ? tile : s.size); size *= 2)
          for (int64_t stride = (s.kind == BitonicStep::TileSort ? size : tile) / 2; stride >= 1; stride /= 2)
            for (int64_t p = 0; p < tile / 2; ++p)
              bitonic_tile_stage(k + base, x + base, base, tile, size, stride, p);
      }
    }
}

}  // namespace tessera::cuda
