// Counter-based random numbers (Philox 4x32-10). Note [Reproducible random numbers]
// Element i of a random tensor is a pure function of (seed, offset + i): the same seed gives the
// same values on every device, for any number of threads and any blocking. Header-only and free of
// other Tessera headers, so that plugins can use it too; a CUDA plugin calls the same functions in
// its kernels (compiled by nvcc they are __host__ __device__), so a tensor filled on the GPU holds
// the CPU's numbers.
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define TESSERA_PHILOX_HD __host__ __device__ inline
#else
#define TESSERA_PHILOX_HD inline
#endif

namespace tessera::philox {

struct Block {
  uint32_t v[4];
};

TESSERA_PHILOX_HD Block philox4x32_10(uint64_t counter, uint64_t key) {
  uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = uint64_t(0xD2511F53u) * c0, p1 = uint64_t(0xCD9E8D57u) * c2;
    uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0, n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c1 = uint32_t(p1);
    c3 = uint32_t(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Block{{c0, c1, c2, c3}};
}

// Uniform in [0, 1) from element index `i` (24 random bits: exact in float).
TESSERA_PHILOX_HD float uniform(uint64_t seed, uint64_t i) {
  Block b = philox4x32_10(i, seed);
  return float(b.v[0] >> 8) * (1.0f / 16777216.0f);
}

// Standard normal from element index `i` (Box-Muller on two 32-bit draws).
TESSERA_PHILOX_HD float normal(uint64_t seed, uint64_t i) {
  Block b = philox4x32_10(i, seed);
  float u1 = (float(b.v[0] >> 8) + 1.0f) * (1.0f / 16777217.0f);  // (0, 1]
  float u2 = float(b.v[1] >> 8) * (1.0f / 16777216.0f);
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.283185307179586f * u2);
}

}  // namespace tessera::philox
