// _fused_adam_ and _fused_sgd_ (Note [Fused optimizer step] in tessera/nn.h): one Adam / AdamW or
// SGD-with-momentum step of one parameter in a single pass (one read of the parameter, its gradient
// and its state, one write of the parameter and its state), where the composite makes about a
// dozen (Adam) or five (SGD) passes over memory. _multi_tensor_adam_ / _multi_tensor_sgd_ do the
// same for a whole list of parameters in one parallel loop over their elements laid end to end,
// so a model of many small parameters pays for one call and one thread-team start, not one each.
// A per-parameter op's inputs are its list op's with one parameter (p, state..., grad), so both
// run the same loop.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels.h"
#include "parallel.h"

namespace tessera::cpu {
namespace {

// Parameters and their state are contiguous in practice; any other layout answers UNIMPLEMENTED,
// and the runtime runs the op's composite.
void require_contiguous(const KernelCall& c) {
  for (int i = 0; i < c.num_inputs(); ++i)
    if (!c.input(i).is_contiguous())
      throw sdk::Error(TESSERA_STATUS_UNIMPLEMENTED, "a non-contiguous argument; the composite handles it");
}

// The elements of n tensors laid end to end: offsets[i] is where tensor i starts, offsets[n] the total.
std::vector<int64_t> end_to_end(const KernelCall& c, int64_t n) {
  std::vector<int64_t> offsets(size_t(n) + 1, 0);
  for (int64_t i = 0; i < n; ++i) offsets[size_t(i) + 1] = offsets[size_t(i)] + c.input(int(i)).numel();
  return offsets;
}

// Calls f(i, begin, end) for the parts of [b, e) (of the end-to-end range) inside tensor i.
template <typename F>
void for_each_part(const std::vector<int64_t>& offsets, int64_t b, int64_t e, F&& f) {
  size_t i = size_t(std::upper_bound(offsets.begin(), offsets.end(), b) - offsets.begin()) - 1;
  for (; b < e; ++i) {
    const int64_t stop = std::min(e, offsets[i + 1]);
    if (stop > b) f(i, b - offsets[i], stop - offsets[i]);
    b = std::max(b, stop);
  }
}

// The list of call c: n parameters, then each state block, then the gradients, all of element type
// T. Runs range(pointers of block 0, 1, ... at the part's start, part length) over every part of
// the parameters' elements laid end to end, in one parallel loop. `Blocks` is the list's number of
// blocks (4: Adam, 3: SGD).
template <typename T, int Blocks, typename Range>
void over_list(const KernelCall& c, Range range) {
  const int64_t n = c.num_inputs() / Blocks;
  auto ptr = [&](int64_t block, size_t i, int64_t lo) {
    return c.input(int(block * n + int64_t(i))).host_ptr<T>() + lo;
  };
  auto part = [&](size_t i, int64_t lo, int64_t hi) {
    if constexpr (Blocks == 4) range(ptr(0, i, lo), ptr(1, i, lo), ptr(2, i, lo), ptr(3, i, lo), hi - lo);
    else range(ptr(0, i, lo), ptr(1, i, lo), ptr(2, i, lo), hi - lo);
  };
  if (n == 1) {  // a per-parameter op: no offsets to build or search
    const int64_t numel = c.input(0).numel();
    parallel_for_dynamic(0, numel, grain_for(OpKind::Elementwise, numel), [&](int64_t b, int64_t e) { part(0, b, e); });
    return;
  }
  const std::vector<int64_t> offsets = end_to_end(c, n);
  parallel_for_dynamic(0, offsets.back(), grain_for(OpKind::Elementwise, offsets.back()),
                       [&](int64_t b, int64_t e) { for_each_part(offsets, b, e, part); });
}

struct AdamStep {
  double lr, beta1, beta2, weight_decay, eps, bc1, bc2;
  bool decoupled;
};

// The step's attributes; A is the op's attribute positions (_fused_adam_ or _multi_tensor_adam_).
template <typename A>
AdamStep adam_step_of(const KernelCall& c) {
  return {c.attr_double(A::lr),           c.attr_double(A::beta1), c.attr_double(A::beta2),
          c.attr_double(A::weight_decay), c.attr_double(A::eps),   c.attr_double(A::bias_correction1),
          c.attr_double(A::bias_correction2), c.attr_bool(A::decoupled_weight_decay)};
}

enum class Decay { None, Coupled, Decoupled };

// The update in T (float32 or float64), in the order of the composite: weight decay, the moments,
// then p -= lr / bc1 * m / (sqrt(v / bc2) + eps). The decay mode is a template argument so that
// the loop has no branch and vectorises.
template <typename T, Decay D>
void adam_range(T* __restrict p, T* __restrict m, T* __restrict v, const T* __restrict g, int64_t n,
                const AdamStep& s) {
  const T b1 = T(s.beta1), b2 = T(s.beta2), one_b1 = T(1 - s.beta1), one_b2 = T(1 - s.beta2);
  const T bc2 = T(s.bc2), eps = T(s.eps), step = T(s.lr / s.bc1);
  const T decay = T(1 - s.lr * s.weight_decay), wd = T(s.weight_decay);
  for (int64_t i = 0; i < n; ++i) {
    T pv = p[i], gv = g[i];
    if constexpr (D == Decay::Decoupled) pv *= decay;
    if constexpr (D == Decay::Coupled) gv += pv * wd;
    const T mv = m[i] * b1 + gv * one_b1;
    const T vv = v[i] * b2 + gv * gv * one_b2;
    p[i] = pv - step * (mv / (std::sqrt(vv / bc2) + eps));
    m[i] = mv;
    v[i] = vv;
  }
}

template <typename T>
void adam_list(const KernelCall& c, const AdamStep& s) {
  auto run = [&]<Decay D>() {
    over_list<T, 4>(c, [&](T* p, T* m, T* v, T* g, int64_t n) { adam_range<T, D>(p, m, v, g, n, s); });
  };
  if (s.weight_decay == 0) run.template operator()<Decay::None>();
  else if (s.decoupled) run.template operator()<Decay::Decoupled>();
  else run.template operator()<Decay::Coupled>();
}

// The kernel of _fused_adam_ (a list of one parameter) and of _multi_tensor_adam_ (A: its attributes).
template <typename A>
tessera_status_t adam_kernel(void*, const tessera_kernel_call_t* call) {
  return guarded(call, [&](const KernelCall& c) {
    require_contiguous(c);
    const AdamStep s = adam_step_of<A>(c);
    if (c.input(0).dtype() == TESSERA_DTYPE_FLOAT64) adam_list<double>(c, s);
    else adam_list<float>(c, s);
  });
}

struct SgdStep {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, first_step;
};

template <typename A>
SgdStep sgd_step_of(const KernelCall& c) {
  return {c.attr_double(A::lr),           c.attr_double(A::momentum), c.attr_double(A::dampening),
          c.attr_double(A::weight_decay), c.attr_bool(A::nesterov),   c.attr_bool(A::first_step)};
}

// PyTorch's SGD with momentum in T, in the composite's order: d = g + wd p; buf = d on the first
// step, else momentum buf + (1 - dampening) d; p -= lr (Nesterov: d + momentum buf, else buf).
template <typename T, bool Decay, bool First, bool Nesterov>
void sgd_range(T* __restrict p, T* __restrict buf, const T* __restrict g, int64_t n, const SgdStep& s) {
  const T lr = T(s.lr), mom = T(s.momentum), keep = T(1 - s.dampening), wd = T(s.weight_decay);
  for (int64_t i = 0; i < n; ++i) {
    T d = g[i];
    if constexpr (Decay) d += p[i] * wd;
    const T b = First ? d : buf[i] * mom + d * keep;
    buf[i] = b;
    p[i] -= lr * (Nesterov ? d + b * mom : b);
  }
}

template <typename T>
void sgd_list(const KernelCall& c, const SgdStep& s) {
  auto run = [&]<bool Decay, bool First, bool Nesterov>() {
    over_list<T, 3>(c, [&](T* p, T* buf, T* g, int64_t n) { sgd_range<T, Decay, First, Nesterov>(p, buf, g, n, s); });
  };
  // The eight loops, so that none of them branches per element.
  const int mode = (s.weight_decay != 0 ? 4 : 0) | (s.first_step ? 2 : 0) | (s.nesterov ? 1 : 0);
  switch (mode) {
    case 0: return run.template operator()<false, false, false>();
    case 1: return run.template operator()<false, false, true>();
    case 2: return run.template operator()<false, true, false>();
    case 3: return run.template operator()<false, true, true>();
    case 4: return run.template operator()<true, false, false>();
    case 5: return run.template operator()<true, false, true>();
    case 6: return run.template operator()<true, true, false>();
    default: return run.template operator()<true, true, true>();
  }
}

// The kernel of _fused_sgd_ and of _multi_tensor_sgd_ likewise.
template <typename A>
tessera_status_t sgd_kernel(void*, const tessera_kernel_call_t* call) {
  return guarded(call, [&](const KernelCall& c) {
    require_contiguous(c);
    const SgdStep s = sgd_step_of<A>(c);
    if (c.input(0).dtype() == TESSERA_DTYPE_FLOAT64) sgd_list<double>(c, s);
    else sgd_list<float>(c, s);
  });
}

}  // namespace

void register_optimizer_kernels(Registrar& r) {
  r.add(op::_fused_adam_::name, (uint64_t(1) << TESSERA_DTYPE_FLOAT32) | (uint64_t(1) << TESSERA_DTYPE_FLOAT64),
        &adam_kernel<op::_fused_adam_::attr>);
  r.add(op::_fused_sgd_::name, (uint64_t(1) << TESSERA_DTYPE_FLOAT32) | (uint64_t(1) << TESSERA_DTYPE_FLOAT64),
        &sgd_kernel<op::_fused_sgd_::attr>);
  r.add(op::_multi_tensor_adam_::name,
        (uint64_t(1) << TESSERA_DTYPE_FLOAT32) | (uint64_t(1) << TESSERA_DTYPE_FLOAT64), &adam_kernel<op::_multi_tensor_adam_::attr>);
  r.add(op::_multi_tensor_sgd_::name, (uint64_t(1) << TESSERA_DTYPE_FLOAT32) | (uint64_t(1) << TESSERA_DTYPE_FLOAT64),
        &sgd_kernel<op::_multi_tensor_sgd_::attr>);
}

}  // namespace tessera::cpu
