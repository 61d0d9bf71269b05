// How a softmax row is spread over threads (reduce_norm.cu), shared with the host tests
// (tests/cuda/test_launch_planning.cpp, SoftmaxPlanning.*). Pure arithmetic.
//
// Note [Register-resident softmax rows]
// A row of up to 1024 elements belongs to one warp, up to 8192 to one 512-thread block; each
// thread loads its share once into registers (per_thread values), the row statistic (max and
// rescaled sum, BasicSoftmaxStat) is merged across the warp / block, and the outputs are written
// from the registers: one read of the input instead of two. A warp row whose length is a multiple
// of the 16-byte vector (8 float16 / bfloat16, 4 float32, 2 float64 elements) and whose rows start
// 16-byte aligned loads and stores 16 bytes per lane and step. Longer rows read the input twice
// (a block per row, statistics then outputs); a softmax over an outer dim runs a thread per column.
#pragma once

#include <cstdint>

#include "host_device.h"

namespace tessera::cuda {

enum class SoftmaxKind { WarpRegisters, BlockRegisters, BlockTwoPass, Column };

struct SoftmaxLaunchPlan {
  SoftmaxKind kind = SoftmaxKind::BlockTwoPass;
  int per_thread = 1;  // values per thread (a power of two) in the register kinds
  int vec = 1;         // elements per vector load; 1 = scalar, coalesced across the warp
};

constexpr int kSoftmaxWarpMax = 1024, kSoftmaxBlockThreads = 512, kSoftmaxBlockMax = 8192;

// `aligned16`: the rows' data starts 16-byte aligned.
inline SoftmaxLaunchPlan plan_softmax(int64_t dim, int64_t inner, int itemsize, bool aligned16) {
  SoftmaxLaunchPlan p;
  if (inner != 1) {
    p.kind = SoftmaxKind::Column;
    return p;
  }
  auto pow2_at_least = [](int64_t v) {
    int r = 1;
    while (r < v) r *= 2;
    return r;
  };
  if (dim <= kSoftmaxWarpMax) {
    p.kind = SoftmaxKind::WarpRegisters;
    p.per_thread = pow2_at_least((dim + 31) / 32);
    const int vec = 16 / itemsize;
    if (aligned16 && dim % vec == 0 && p.per_thread >= vec) p.vec = vec;
  } else if (dim <= kSoftmaxBlockMax) {
    p.kind = SoftmaxKind::BlockRegisters;
    p.per_thread = pow2_at_least((dim + kSoftmaxBlockThreads - 1) / kSoftmaxBlockThreads);
  }
  return p;
}

// The row element that value k of thread `lane` (of `width` threads) holds: consecutive threads
// take consecutive elements (scalar) or consecutive vectors of `vec` elements.
TESSERA_CUDA_HD int64_t softmax_element(int k, int lane, int width, int vec) {
  return (int64_t(k / vec) * width + lane) * vec + k % vec;
}

}  // namespace tessera::cuda
