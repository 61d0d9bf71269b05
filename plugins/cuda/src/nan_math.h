// NaN-propagating max / min and the online softmax row statistic, shared by the kernels (compiled
// by nvcc) and by their host tests (compiled by the C++ compiler, tests/cuda/test_nan_math.cpp).
// Pure arithmetic: no CUDA headers, no state.
//
// Note [NaN in CUDA row maxima]
// fmaxf(m, NaN) is m: the IEEE maxNum rule returns the operand that is a number. A row maximum
// built from fmaxf therefore forgets a NaN, and softmax then gives that row finite values where
// PyTorch gives NaN for the whole row (the same flaw the CPU row kernels had: Note [NaN in row
// maxima] in plugins/cpu/nn/nn_isa_kernels.inc). Every maximum or minimum that feeds a reduction,
// a softmax statistic or an attention row here is nan_max / nan_min instead: NaN when either
// operand is NaN, so a NaN anywhere in a row (first, last, in any thread's share, in any order of
// the warp / block merges) makes the row's maximum NaN, its sum of exponentials NaN, and every
// output of the row NaN, as in PyTorch. The elementwise maximum / minimum ops follow the same rule.
// Infinities follow the arithmetic, as in PyTorch: softmax([inf, 1]) = [nan, nan] (inf - inf),
// softmax([-inf, -inf]) = [nan, nan] (0 / 0), softmax([-inf, 0]) = [0, 1].
#pragma once

#include <cmath>

#include "host_device.h"

namespace tessera::cuda {

// max(a, b), or the NaN operand when either is NaN (a, when both are). Exact for integers too.
template <typename T>
TESSERA_CUDA_HD T nan_max(T a, T b) {
  return (a != a || a > b) ? a : b;
}
template <typename T>
TESSERA_CUDA_HD T nan_min(T a, T b) {
  return (a != a || a < b) ? a : b;
}

TESSERA_CUDA_HD float acc_exp(float x) { return expf(x); }
TESSERA_CUDA_HD double acc_exp(double x) { return exp(x); }
TESSERA_CUDA_HD float acc_log(float x) { return logf(x); }
TESSERA_CUDA_HD double acc_log(double x) { return log(x); }

// The running statistic of an online softmax over a row: m = max so far (NaN once a NaN was
// seen), s = sum of exp(x - m). Rows split between threads merge their statistics in any order.
// Acc is float for float16, bfloat16 and float32 rows, double for float64 ones.
template <typename Acc>
struct BasicSoftmaxStat {
  Acc m = Acc(-INFINITY);
  Acc s = Acc(0);

  TESSERA_CUDA_HD void add(Acc x) {
    const Acc m_new = nan_max(m, x);
    if (m_new == Acc(-INFINITY)) return;  // only -inf so far: exp(-inf - -inf) would be NaN
    s = s * acc_exp(m - m_new) + acc_exp(x - m_new);
    m = m_new;
  }
  TESSERA_CUDA_HD void merge(Acc m2, Acc s2) {
    const Acc m_new = nan_max(m, m2);
    if (m_new == Acc(-INFINITY)) return;  // both empty or all -inf
    s = s * acc_exp(m - m_new) + s2 * acc_exp(m2 - m_new);
    m = m_new;
  }
  // softmax: exp(x - m) / s; log_softmax: (x - m) - log(s), never x - (m + log(s)), which rounds
  // at m's ulp. A NaN m or s makes both NaN.
  TESSERA_CUDA_HD Acc value(bool log, Acc x) const { return log ? (x - m) - acc_log(s) : acc_exp(x - m) / s; }
};
using SoftmaxStat = BasicSoftmaxStat<float>;

}  // namespace tessera::cuda
