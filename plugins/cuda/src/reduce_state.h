// The running states of the CUDA reductions, shared by the kernels (nvcc, reduce_norm.cu) and by
// their host tests (tests/cuda/test_reduce_state.cpp), which replay the kernels' splits and merge
// orders against naive loops. Pure arithmetic: no CUDA headers.
//
// Note [CUDA reduction states]
// A reduction kernel gives every thread a state, adds the elements of its share to it, and merges
// states across a warp (xor shuffles), a block (shared memory, warp order) and the splits of a
// long reduction (a workspace of states, second pass). Merge order is therefore not the element
// order, and every state's merge is commutative and associative up to floating-point rounding:
// - ValueState: sum, prod, amax, amin. Accumulates in reduce_acc_t: float for float16, bfloat16
//   and float32, double for float64, int64 for integers and bool, where sums and products wrap
//   modulo 2^64 as on the CPU (PyTorch's rule); amax / amin keep a NaN (nan_math.h).
// - WelfordState: var, as a count, a mean and a sum of squared deviations (Chan's merge), so one
//   pass over the data suffices; var = m2 / max(0, n - correction), PyTorch's rule (0 / 0 is NaN,
//   a positive m2 over 0 is inf).
// - LogSumExpState: logsumexp as softmax's (max, rescaled sum).
// - ArgState: argmax / argmin as (value, index). The order is total (a NaN beats every number and
//   the first NaN wins; equal values go to the smaller index), so the result is the first index of
//   the extreme value, as on the CPU and in PyTorch, whatever the merge order. The identity has
//   index kNoIndex and loses to every element.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "host_device.h"
#include "launch.h"
#include "nan_math.h"

namespace tessera::cuda {

template <typename T> struct ReduceAcc { using type = int64_t; };  // integers and bool
template <> struct ReduceAcc<float> { using type = float; };
template <> struct ReduceAcc<double> { using type = double; };
template <typename T> using reduce_acc_t = typename ReduceAcc<T>::type;

template <typename Acc>
TESSERA_CUDA_HD Acc acc_lowest() {
  if constexpr (std::is_integral_v<Acc>) return Acc(INT64_MIN);
  else return Acc(-INFINITY);
}
template <typename Acc>
TESSERA_CUDA_HD Acc acc_highest() {
  if constexpr (std::is_integral_v<Acc>) return Acc(INT64_MAX);
  else return Acc(INFINITY);
}

template <typename Acc, ReduceOp kOp>
struct ValueState {
  static_assert(kOp == ReduceOp::Sum || kOp == ReduceOp::Prod || kOp == ReduceOp::Max || kOp == ReduceOp::Min);
  Acc v;

  static TESSERA_CUDA_HD ValueState identity() {
    if constexpr (kOp == ReduceOp::Max) return {acc_lowest<Acc>()};
    else if constexpr (kOp == ReduceOp::Min) return {acc_highest<Acc>()};
    else if constexpr (kOp == ReduceOp::Prod) return {Acc(1)};
    else return {Acc(0)};
  }
  TESSERA_CUDA_HD void add(Acc x, int64_t /*index*/) { v = combine(v, x); }
  TESSERA_CUDA_HD void merge(const ValueState& o) { v = combine(v, o.v); }

  static TESSERA_CUDA_HD Acc combine(Acc a, Acc b) {
    if constexpr (kOp == ReduceOp::Max) {
      return nan_max(a, b);
    } else if constexpr (kOp == ReduceOp::Min) {
      return nan_min(a, b);
    } else if constexpr (std::is_integral_v<Acc>) {
      const uint64_t ua = uint64_t(a), ub = uint64_t(b);  // wraps, as PyTorch's integer sums
      return Acc(kOp == ReduceOp::Prod ? ua * ub : ua + ub);
    } else {
      return kOp == ReduceOp::Prod ? a * b : a + b;
    }
  }
};

template <typename Acc>
struct WelfordState {
  static_assert(!std::is_integral_v<Acc>, "var is computed in a floating type");
  int64_t n;
  Acc mean, m2;

  static TESSERA_CUDA_HD WelfordState identity() { return {0, Acc(0), Acc(0)}; }
  TESSERA_CUDA_HD void add(Acc x, int64_t /*index*/) {
    ++n;
    const Acc d = x - mean;
    mean += d / Acc(n);
    m2 += d * (x - mean);
  }
  TESSERA_CUDA_HD void merge(const WelfordState& o) {
    if (o.n == 0) return;
    if (n == 0) {
      *this = o;
      return;
    }
    const int64_t total = n + o.n;
    const Acc d = o.mean - mean;
    const Acc f = Acc(o.n) / Acc(total);
    mean += d * f;
    m2 += o.m2 + d * d * Acc(n) * f;
    n = total;
  }
  // var with `correction` (Bessel's: 1): m2 / max(0, n - correction).
  TESSERA_CUDA_HD Acc variance(double correction) const {
    const double denom = double(n) - correction;
    return m2 / Acc(denom > 0.0 ? denom : 0.0);
  }
};

constexpr int64_t kNoIndex = INT64_MAX;

template <typename Acc, bool kMin>
struct ArgState {
  Acc v;
  int64_t i;

  static TESSERA_CUDA_HD ArgState identity() { return {kMin ? acc_highest<Acc>() : acc_lowest<Acc>(), kNoIndex}; }
  TESSERA_CUDA_HD void add(Acc x, int64_t index) { merge(ArgState{x, index}); }
  TESSERA_CUDA_HD void merge(const ArgState& o) {
    if (better(o, *this)) *this = o;
  }
  // a before b in the total order above.
  static TESSERA_CUDA_HD bool better(const ArgState& a, const ArgState& b) {
    const bool a_nan = a.v != a.v, b_nan = b.v != b.v;
    if (a_nan || b_nan) return a_nan && (!b_nan || a.i < b.i);
    if (a.v == b.v) return a.i < b.i;
    return kMin ? a.v < b.v : a.v > b.v;
  }
};

// logsumexp: the running (max, rescaled sum) of softmax (nan_math.h); a NaN anywhere gives NaN, and
// an infinite maximum (every element -inf, an empty reduction, or a +inf) is the result itself,
// as the CPU kernel computes it.
template <typename Acc>
struct LogSumExpState {
  static_assert(!std::is_integral_v<Acc>, "logsumexp is computed in a floating type");
  Acc m, s;

  static TESSERA_CUDA_HD LogSumExpState identity() { return {Acc(-INFINITY), Acc(0)}; }
  TESSERA_CUDA_HD void add(Acc x, int64_t /*index*/) {
    BasicSoftmaxStat<Acc> t{m, s};
    t.add(x);
    m = t.m, s = t.s;
  }
  TESSERA_CUDA_HD void merge(const LogSumExpState& o) {
    BasicSoftmaxStat<Acc> t{m, s};
    t.merge(o.m, o.s);
    m = t.m, s = t.s;
  }
  TESSERA_CUDA_HD Acc value() const { return (m == Acc(INFINITY) || m == Acc(-INFINITY)) ? m : m + acc_log(s); }
};

// Bytes per partial state in a split reduction's workspace (the largest state, rounded up).
constexpr size_t kReduceStateBytes = 32;
static_assert(sizeof(WelfordState<double>) <= kReduceStateBytes && sizeof(ArgState<double, false>) <= kReduceStateBytes);

}  // namespace tessera::cuda
