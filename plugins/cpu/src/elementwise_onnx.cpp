// Pointwise kernels of the ops added for ONNX models: activations with parameters, rounding,
// inverse trigonometric and hyperbolic functions, predicates, bitwise and shift ops, and the
// integer-division family, with PyTorch's formulas (docs/pointwise-ops.md). Floating results of
// f32/f16/bf16 compute in float, f64 in double, integers in int64 (stored back with wrap-around). A
// contiguous run is a plain loop over typed pointers, which the compiler vectorises for the
// branch-free functions (leaky_relu, hardtanh, floor, ...); elu's family takes a branch-free float
// expm1 (expm1_of); the other transcendental ones call the C library per element. mish,
// hardsigmoid, hardswish and softsign have no parameters and run through the per-ISA unary tables
// instead (elementwise.cpp, vec_kernels_isa.cpp). The shape rules are in
// dispatcher/src/meta_pointwise.cpp.
#include <algorithm>
#include <cmath>

#include "kernels.h"
#include "tessera/int_division.h"
#include "tessera/vecmath/vecmath.h"

namespace tessera::cpu {
namespace {

// The type a floating op computes in for output dtype `od` (PyTorch's opmath).
int32_t compute_dtype_for(int32_t od) {
  if (od == TESSERA_DTYPE_FLOAT64) return od;
  return dtype_is_floating(od) ? TESSERA_DTYPE_FLOAT32 : od;
}

// ------------------------------------------------------------------ loops

// out = f(x) over (output, input 0 converted to `in_dtype`, broadcast to the output).
StridedLoop unary_loop_as(const KernelCall& c, int32_t in_dtype, TempList& temps) {
  const TensorView out = c.output(0);
  const tessera_tensor_t* x = cast_if_needed(c.raw()->inputs[0], in_dtype, temps);
  const int nd = out.ndim();
  int64_t sx[kMaxDims];
  broadcast_strides(x, nd, out.sizes(), sx);
  const int64_t esz[2] = {int64_t(out.itemsize()), int64_t(sdk::dtype_size(in_dtype))};
  char* ptrs[2] = {out.host_ptr<char>(), static_cast<char*>(x->data) + x->byte_offset};
  const int64_t* strides[2] = {out.strides(), sx};
  StridedLoop loop;
  loop.setup(nd, out.sizes(), 2, ptrs, strides, esz);
  return loop;
}

// out = f(a, b) over (output, a and b as given (already of the compute dtype), broadcast).
StridedLoop binary_loop(const KernelCall& c, const tessera_tensor_t* a, const tessera_tensor_t* b) {
  const TensorView out = c.output(0);
  const int nd = out.ndim();
  int64_t sa[kMaxDims], sb[kMaxDims];
  broadcast_strides(a, nd, out.sizes(), sa);
  broadcast_strides(b, nd, out.sizes(), sb);
  const int64_t esz[3] = {int64_t(out.itemsize()), int64_t(sdk::dtype_size(a->dtype)),
                          int64_t(sdk::dtype_size(b->dtype))};
  char* ptrs[3] = {out.host_ptr<char>(), static_cast<char*>(a->data) + a->byte_offset,
                   static_cast<char*>(b->data) + b->byte_offset};
  const int64_t* strides[3] = {out.strides(), sa, sb};
  StridedLoop loop;
  loop.setup(nd, out.sizes(), 3, ptrs, strides, esz);
  return loop;
}

// Runs out[i] = f(load(x[i])) with x of element type I and out of element type O.
template <typename O, typename I, typename F>
void map1(const StridedLoop& loop, OpKind kind, F f) {
  for_each(loop, kind, [&](char** p, const int64_t* st, int64_t n) {
    // A local copy: parameters read through a reference could alias the output and keep the loop
    // from vectorising.
    const F fn = f;
    if (st[0] == int64_t(sizeof(O)) && st[1] == int64_t(sizeof(I))) {  // contiguous: vectorisable
      O* o = reinterpret_cast<O*>(p[0]);
      const I* x = reinterpret_cast<const I*>(p[1]);
      for (int64_t i = 0; i < n; ++i) Elem<O>::store(o + i, acc_t<O>(fn(Elem<I>::load(x + i))));
      return;
    }
    for (int64_t i = 0; i < n; ++i)
      Elem<O>::store(reinterpret_cast<O*>(p[0] + i * st[0]),
                     acc_t<O>(fn(Elem<I>::load(reinterpret_cast<const I*>(p[1] + i * st[1])))));
  });
}

// Runs out[i] = f(load(a[i]), load(b[i])), operands of element type I, out of element type O.
template <typename O, typename I, typename F>
void map2(const StridedLoop& loop, F f) {
  for_each(loop, OpKind::Elementwise, [&](char** p, const int64_t* st, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
      Elem<O>::store(reinterpret_cast<O*>(p[0] + i * st[0]),
                     acc_t<O>(f(Elem<I>::load(reinterpret_cast<const I*>(p[1] + i * st[1])),
                                Elem<I>::load(reinterpret_cast<const I*>(p[2] + i * st[2])))));
  });
}

// The frame of a one-input kernel: self converted to the output's dtype (or kept in its own with
// `own_dtype`), the loop, and body(c, loop, T{}) under the visit of that dtype; nothing for no elements.
template <typename Body>
tessera_status_t unary_frame(const tessera_kernel_call_t* call, bool own_dtype, Body body) {
  return guarded(call, [&](const KernelCall& c) {
    const int32_t d = own_dtype ? c.raw()->inputs[0]->dtype : c.output(0).dtype();
    TempList temps;
    const StridedLoop loop = unary_loop_as(c, d, temps);
    if (loop.numel == 0) return;
    visit(d, [&](auto tag) { body(c, loop, tag); });
  });
}

// ------------------------------------------------------------------ floating unary functions

enum class FloatFn : int {
  LeakyRelu,
  Elu,
  Softplus,
  Reciprocal,
  Tan,
  Asin,
  Acos,
  Atan,
  Sinh,
  Cosh,
  Asinh,
  Acosh,
  Atanh,
  Log1p,
  Expm1,
};

// The parameters of the activations, read from the call's attributes.
struct FloatParams {
  double a = 0, b = 0, c = 0;
};

FloatParams params_of(const KernelCall& c, FloatFn fn, const char* op_name) {
  FloatParams p;
  const std::string op = op_name;
  if (fn == FloatFn::LeakyRelu) {
    p.a = c.attr_double(op::leaky_relu::attr::negative_slope);
  } else if (fn == FloatFn::Elu) {
    if (op == op::selu::name) {
      // PyTorch's selu constants.
      p.a = 1.6732632423543772848170429916717 * 1.0507009873554804934193349852946;  // alpha * scale
      p.b = 1.0507009873554804934193349852946;                                      // scale
      p.c = 1;                                                                      // input_scale
    } else if (op == op::celu::name) {
      const double alpha = c.attr_double(op::celu::attr::alpha);
      p.a = alpha, p.b = 1, p.c = 1 / alpha;
    } else {
      using A = op::elu::attr;
      p.b = c.attr_double(A::scale);
      p.a = c.attr_double(A::alpha) * p.b;
      p.c = c.attr_double(A::input_scale);
    }
  } else if (fn == FloatFn::Softplus) {
    p.a = c.attr_double(op::softplus::attr::beta);
    p.b = c.attr_double(op::softplus::attr::threshold);
  }
  return p;
}

// e^x - 1 for elu, selu and celu. float: branch-free, so that their loops vectorise: a degree-8
// Taylor polynomial for |x| < ln2/2, where e^x - 1 would cancel (truncation below 3e-10 relative),
// else the shared vector math's exp_f(x) - 1 (a few ulp). double: the C library.
template <typename A>
inline A expm1_of(A x) {
  if constexpr (std::is_same_v<A, float>) {
    const float p =
        x * (1.0f + x * (0.5f + x * (1.0f / 6 +
                                     x * (1.0f / 24 +
                                          x * (1.0f / 120 +
                                               x * (1.0f / 720 + x * (1.0f / 5040 + x * (1.0f / 40320))))))));
    const float e = vecmath::exp_f(x) - 1.0f;
    return __builtin_fabsf(x) < 0.34657359f ? p : e;
  } else {
    return std::expm1(x);
  }
}

// Calls g(f) with the function `fn` on values of type A (float or double), PyTorch's formula.
template <typename A, typename G>
void with_float_fn(FloatFn fn, const FloatParams& q, G&& g) {
  const A pa = A(q.a), pb = A(q.b), pc = A(q.c);
  switch (fn) {
    // This file is compiled with -fno-trapping-math so that such selects vectorise (CMakeLists.txt).
    case FloatFn::LeakyRelu:
      return g([pa](A x) { return x > A(0) ? x : x * pa; });
    case FloatFn::Elu:  // pa = alpha * scale, pb = scale, pc = input_scale
      return g([pa, pb, pc](A x) { return x <= A(0) ? expm1_of(x * pc) * pa : x * pb; });
    case FloatFn::Softplus:  // pa = beta, pb = threshold
      return g([pa, pb](A x) { return x * pa > pb ? x : std::log1p(std::exp(x * pa)) / pa; });
    case FloatFn::Reciprocal:
      return g([](A x) { return A(1) / x; });
    case FloatFn::Tan:
      return g([](A x) { return std::tan(x); });
    case FloatFn::Asin:
      return g([](A x) { return std::asin(x); });
    case FloatFn::Acos:
      return g([](A x) { return std::acos(x); });
    case FloatFn::Atan:
      return g([](A x) { return std::atan(x); });
    case FloatFn::Sinh:
      return g([](A x) { return std::sinh(x); });
    case FloatFn::Cosh:
      return g([](A x) { return std::cosh(x); });
    case FloatFn::Asinh:
      return g([](A x) { return std::asinh(x); });
    case FloatFn::Acosh:
      return g([](A x) { return std::acosh(x); });
    case FloatFn::Atanh:
      return g([](A x) { return std::atanh(x); });
    case FloatFn::Log1p:
      return g([](A x) { return std::log1p(x); });
    case FloatFn::Expm1:
      return g([](A x) { return std::expm1(x); });
  }
}

// Floating-only unary ops: the shape rule converted self to the (floating) output dtype.
tessera_status_t float_unary_kernel(void* user_data, const tessera_kernel_call_t* call) {
  const FloatFn fn = FloatFn(reinterpret_cast<intptr_t>(user_data));
  return unary_frame(call, false, [&](const KernelCall& c, const StridedLoop& loop, auto tag) {
    using T = decltype(tag);
    if constexpr (is_float_v<T>) {
      const FloatParams q = params_of(c, fn, c.op_name());
      with_float_fn<acc_t<T>>(fn, q, [&](auto f) { map1<T, T>(loop, OpKind::Transcendental, f); });
    } else {  // the shape rules give these ops floating outputs only
      throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT,
                       std::string("expected a floating output, got ") + dtype_name(c.output(0).dtype()));
    }
  });
}

// ------------------------------------------------------------------ dtype-keeping unary ops

enum class KeepFn : int { Floor, Ceil, Round, Trunc, Sign, BitwiseNot };

// floor, ceil, round, trunc (integers unchanged), sign (bool unchanged), bitwise_not.
tessera_status_t keep_unary_kernel(void* user_data, const tessera_kernel_call_t* call) {
  const KeepFn fn = KeepFn(reinterpret_cast<intptr_t>(user_data));
  return unary_frame(call, false, [&](const KernelCall& c, const StridedLoop& loop, auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    if constexpr (std::is_same_v<T, bool>) {
      TESSERA_SDK_CHECK(fn == KeepFn::Sign || fn == KeepFn::BitwiseNot,
                        "not implemented for bool tensors; convert with .to(kInt64)");
      if (fn == KeepFn::Sign)
        map1<T, T>(loop, OpKind::Elementwise, [](A x) { return x; });
      else
        map1<T, T>(loop, OpKind::Elementwise, [](A x) { return A(x == 0); });
    } else if constexpr (is_float_v<T>) {
      switch (fn) {
        case KeepFn::Floor:
          map1<T, T>(loop, OpKind::Elementwise, [](A x) { return std::floor(x); });
          break;
        case KeepFn::Ceil:
          map1<T, T>(loop, OpKind::Elementwise, [](A x) { return std::ceil(x); });
          break;
        // nearbyint rounds halves to even in the default rounding mode (FE_TONEAREST).
        case KeepFn::Round:
          map1<T, T>(loop, OpKind::Elementwise, [](A x) { return std::nearbyint(x); });
          break;
        case KeepFn::Trunc:
          map1<T, T>(loop, OpKind::Elementwise, [](A x) { return std::trunc(x); });
          break;
        // PyTorch: (0 < x) - (x < 0), so NaN gives 0 and -0.0 gives +0.
        case KeepFn::Sign:
          map1<T, T>(loop, OpKind::Elementwise, [](A x) { return A(int(A(0) < x) - int(x < A(0))); });
          break;
        case KeepFn::BitwiseNot:
          throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT, std::string("not implemented for ") +
                                                                dtype_name(c.output(0).dtype()) +
                                                                " tensors; convert with .to(kInt64)");
      }
    } else {
      switch (fn) {
        case KeepFn::Sign:
          map1<T, T>(loop, OpKind::Elementwise, [](A x) { return A(int(A(0) < x) - int(x < A(0))); });
          break;
        case KeepFn::BitwiseNot:
          map1<T, T>(loop, OpKind::Elementwise, [](A x) { return ~x; });
          break;
        default:
          map1<T, T>(loop, OpKind::Elementwise, [](A x) { return x; });
          break;  // integers are integral already
      }
    }
  });
}

// hardtanh(self, min_val, max_val) in self's dtype: PyTorch's hardtanh_out, an integral self takes the
// bounds truncated to integers; a NaN element stays NaN.
tessera_status_t hardtanh_kernel(void*, const tessera_kernel_call_t* call) {
  return unary_frame(call, false, [&](const KernelCall& c, const StridedLoop& loop, auto tag) {
    using Attr = op::hardtanh::attr;
    using T = decltype(tag);
    using A = acc_t<T>;
    if constexpr (std::is_same_v<T, bool>) {
      throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT, "bool inputs are not supported");
    } else {
      A lo, hi;
      if constexpr (is_float_v<T>) {  // the bounds as the dtype holds them
        T lt, ht;
        Elem<T>::store(&lt, A(c.attr_double(Attr::min_val)));
        Elem<T>::store(&ht, A(c.attr_double(Attr::max_val)));
        lo = Elem<T>::load(&lt), hi = Elem<T>::load(&ht);
      } else {
        lo = c.attr_int(Attr::min_val), hi = c.attr_int(Attr::max_val);
      }
      map1<T, T>(loop, OpKind::Elementwise, [lo, hi](A x) {
        A v = x < lo ? lo : x;  // max(x, lo): NaN stays
        return hi < v ? hi : v;
      });
    }
  });
}

// ------------------------------------------------------------------ predicates (bool results)

enum class PredFn : int { IsNan, IsInf, LogicalNot };

tessera_status_t predicate_kernel(void* user_data, const tessera_kernel_call_t* call) {
  const PredFn fn = PredFn(reinterpret_cast<intptr_t>(user_data));
  return unary_frame(call, true, [&](const KernelCall&, const StridedLoop& loop, auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    switch (fn) {
      case PredFn::IsNan:
        map1<bool, T>(loop, OpKind::Elementwise, [](A x) { return x != x; });
        break;
      case PredFn::IsInf:
        map1<bool, T>(loop, OpKind::Elementwise, [](A x) {
          if constexpr (std::is_floating_point_v<A>)
            return std::isinf(x);
          else
            return false;
        });
        break;
      case PredFn::LogicalNot:
        map1<bool, T>(loop, OpKind::Elementwise, [](A x) { return x == A(0); });
        break;
    }
  });
}

// ------------------------------------------------------------------ binary ops

enum class BinFn : int {
  Remainder,
  Fmod,
  FloorDivide,
  BitAnd,
  BitOr,
  BitXor,
  LeftShift,
  RightShift,
  Atan2,
  Prelu,
};

// PyTorch's floor division of floats (div_floor_floating): exact for representable quotients,
// division by zero gives a / b (inf or NaN).
template <typename A>
A floor_divide_float(A a, A b) {
  if (b == A(0)) return a / b;
  const A mod = std::fmod(a, b);
  A div = (a - mod) / b;
  if (mod != A(0) && (b < A(0)) != (mod < A(0))) div -= A(1);
  if (div == A(0)) return std::copysign(A(0), a / b);
  A floordiv = std::floor(div);
  if (div - floordiv > A(0.5)) floordiv += A(1);
  return floordiv;
}

[[noreturn]] void integer_division_by_zero() {
  throw sdk::Error(
      TESSERA_STATUS_INVALID_ARGUMENT,
      "ZeroDivisionError: integer division by zero (PyTorch raises the same); use floating tensors "
      "to get inf or NaN instead");
}

// remainder, fmod and floor_divide in int64: tessera/int_division.h (shared with the CUDA plugin).
namespace idiv = tessera::int_division;

template <typename T>
void run_integer_binary(BinFn fn, const StridedLoop& loop) {
  using A = int64_t;
  constexpr A kWidth = A(sizeof(T) * 8);
  constexpr bool kSigned = std::is_signed_v<T>;
  switch (fn) {
    case BinFn::Remainder:
      return map2<T, T>(loop, [](A a, A b) {
        if (b == 0) integer_division_by_zero();
        return idiv::remainder(a, b);
      });
    case BinFn::Fmod:
      return map2<T, T>(loop, [](A a, A b) {
        if (b == 0) integer_division_by_zero();
        return idiv::fmod(a, b);
      });
    case BinFn::FloorDivide:
      return map2<T, T>(loop, [](A a, A b) {
        if (b == 0) integer_division_by_zero();
        return idiv::floor_divide(a, b);
      });
    case BinFn::BitAnd:
      return map2<T, T>(loop, [](A a, A b) { return a & b; });
    case BinFn::BitOr:
      return map2<T, T>(loop, [](A a, A b) { return a | b; });
    case BinFn::BitXor:
      return map2<T, T>(loop, [](A a, A b) { return a ^ b; });
    // PyTorch's lshift/rshift kernels: a shift below 0 or at least the width gives 0 (left) or the
    // sign fill (right: a >> (width - 1) for signed types, 0 for unsigned ones).
    case BinFn::LeftShift:
      return map2<T, T>(loop, [](A a, A b) { return (b < 0 || b >= kWidth) ? A(0) : A(uint64_t(a) << b); });
    case BinFn::RightShift:
      return map2<T, T>(loop, [](A a, A b) {
        constexpr A max_shift = kWidth - (kSigned ? 1 : 0);
        return (b < 0 || b >= max_shift) ? A(a >> max_shift) : A(a >> b);
      });
    default:
      throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT, std::string("not implemented for integer tensors"));
  }
}

template <typename T>
void run_float_binary(BinFn fn, const StridedLoop& loop) {
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;  // operands' compute type
  switch (fn) {
    case BinFn::Remainder:
      return map2<T, C>(loop, [](C a, C b) {
        C mod = std::fmod(a, b);
        if (mod != C(0) && (b < C(0)) != (mod < C(0))) mod += b;
        return mod;
      });
    case BinFn::Fmod:
      return map2<T, C>(loop, [](C a, C b) { return std::fmod(a, b); });
    case BinFn::FloorDivide:
      return map2<T, C>(loop, [](C a, C b) { return floor_divide_float(a, b); });
    case BinFn::Atan2:
      return map2<T, C>(loop, [](C a, C b) { return std::atan2(a, b); });
    case BinFn::Prelu:
      return map2<T, C>(loop, [](C a, C w) { return a > C(0) ? a : w * a; });
    default:
      throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT, std::string("not implemented for floating tensors"));
  }
}

void binary_run(const KernelCall& c, BinFn fn, const tessera_tensor_t* a_in, const tessera_tensor_t* b_in) {
  const int32_t od = c.output(0).dtype();
  const int32_t cd = compute_dtype_for(od);
  TempList temps;
  const tessera_tensor_t* a = cast_if_needed(a_in, cd, temps);
  const tessera_tensor_t* b = cast_if_needed(b_in, cd, temps);
  const StridedLoop loop = binary_loop(c, a, b);
  if (loop.numel == 0) return;
  visit(od, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_float_v<T>) {
      run_float_binary<T>(fn, loop);
    } else if constexpr (std::is_same_v<T, bool>) {
      using A = int64_t;
      switch (fn) {
        case BinFn::BitAnd:
          return map2<bool, bool>(loop, [](A x, A y) { return x & y; });
        case BinFn::BitOr:
          return map2<bool, bool>(loop, [](A x, A y) { return x | y; });
        case BinFn::BitXor:
          return map2<bool, bool>(loop, [](A x, A y) { return x ^ y; });
        default:
          throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT, "not implemented for bool tensors");
      }
    } else {
      run_integer_binary<T>(fn, loop);
    }
  });
}

tessera_status_t binary_fn_kernel(void* user_data, const tessera_kernel_call_t* call) {
  return guarded(call, [&](const KernelCall& c) {
    binary_run(c, BinFn(reinterpret_cast<intptr_t>(user_data)), c.raw()->inputs[0], c.raw()->inputs[1]);
  });
}

// prelu(self, weight): one weight, or one per channel (dim 1 of self): the weight is viewed as
// [C, 1, ..., 1] over self's trailing dims and broadcast (the shape rule checked the sizes).
tessera_status_t prelu_kernel(void*, const tessera_kernel_call_t* call) {
  return guarded(call, [&](const KernelCall& c) {
    const tessera_tensor_t* x = c.raw()->inputs[0];
    const tessera_tensor_t* w = c.raw()->inputs[1];
    if (w->numel == 1 || x->ndim < 2) {
      tessera_tensor_t scalar = *w;  // one value, broadcast
      scalar.ndim = 0;
      binary_run(c, BinFn::Prelu, x, &scalar);
      return;
    }
    check_rank(x->ndim, "prelu");
    int64_t sizes[kMaxDims], strides[kMaxDims];
    const int nd = x->ndim - 1;
    for (int d = 0; d < nd; ++d) sizes[d] = 1, strides[d] = 0;
    sizes[0] = w->numel;
    strides[0] = w->ndim == 1 ? w->strides[0] : 0;
    tessera_tensor_t view = *w;
    view.ndim = nd;
    view.sizes = sizes;
    view.strides = strides;
    binary_run(c, BinFn::Prelu, x, &view);
  });
}

constexpr uint64_t kMaskIntegralBool = TESSERA_DTYPE_MASK_INTEGRAL | TESSERA_DTYPE_BIT(TESSERA_DTYPE_BOOL);

void* tag(int v) { return reinterpret_cast<void*>(intptr_t(v)); }

}  // namespace

void register_onnx_elementwise_kernels(Registrar& r) {
  struct F {
    const char* name;
    FloatFn fn;
  };
  const F floats[] = {
      {op::leaky_relu::name, FloatFn::LeakyRelu},
      {op::elu::name, FloatFn::Elu},
      {op::selu::name, FloatFn::Elu},
      {op::celu::name, FloatFn::Elu},
      {op::softplus::name, FloatFn::Softplus},
      {op::reciprocal::name, FloatFn::Reciprocal},
      {op::tan::name, FloatFn::Tan},
      {op::asin::name, FloatFn::Asin},
      {op::acos::name, FloatFn::Acos},
      {op::atan::name, FloatFn::Atan},
      {op::sinh::name, FloatFn::Sinh},
      {op::cosh::name, FloatFn::Cosh},
      {op::asinh::name, FloatFn::Asinh},
      {op::acosh::name, FloatFn::Acosh},
      {op::atanh::name, FloatFn::Atanh},
      {op::log1p::name, FloatFn::Log1p},
      {op::expm1::name, FloatFn::Expm1},
  };
  for (const F& f : floats) r.add(f.name, kMaskFloat, &float_unary_kernel, tag(int(f.fn)));
  struct K {
    const char* name;
    uint64_t mask;
    KeepFn fn;
  };
  const K keeps[] = {
      {op::floor::name, kMaskNumeric, KeepFn::Floor},
      {op::ceil::name, kMaskNumeric, KeepFn::Ceil},
      {op::round::name, kMaskNumeric, KeepFn::Round},
      {op::trunc::name, kMaskNumeric, KeepFn::Trunc},
      {op::sign::name, kMaskAll, KeepFn::Sign},
      {op::bitwise_not::name, kMaskIntegralBool, KeepFn::BitwiseNot},
  };
  for (const K& k : keeps) r.add(k.name, k.mask, &keep_unary_kernel, tag(int(k.fn)));
  r.add(op::hardtanh::name, kMaskNumeric, &hardtanh_kernel);
  struct P {
    const char* name;
    PredFn fn;
  };
  const P preds[] = {{op::isnan::name, PredFn::IsNan},
                     {op::isinf::name, PredFn::IsInf},
                     {op::logical_not::name, PredFn::LogicalNot}};
  for (const P& p : preds) r.add(p.name, kMaskAll, &predicate_kernel, tag(int(p.fn)));
  struct B {
    const char* name;
    uint64_t mask;
    BinFn fn;
  };
  const B binaries[] = {
      {op::remainder_Tensor::name, kMaskNumeric, BinFn::Remainder},
      {op::fmod_Tensor::name, kMaskNumeric, BinFn::Fmod},
      {op::floor_divide::name, kMaskNumeric, BinFn::FloorDivide},
      {op::bitwise_and_Tensor::name, kMaskIntegralBool, BinFn::BitAnd},
      {op::bitwise_or_Tensor::name, kMaskIntegralBool, BinFn::BitOr},
      {op::bitwise_xor_Tensor::name, kMaskIntegralBool, BinFn::BitXor},
      {op::bitwise_left_shift_Tensor::name, TESSERA_DTYPE_MASK_INTEGRAL, BinFn::LeftShift},
      {op::bitwise_right_shift_Tensor::name, TESSERA_DTYPE_MASK_INTEGRAL, BinFn::RightShift},
      {op::atan2::name, kMaskFloat, BinFn::Atan2},
      {op::_prelu_kernel::name, kMaskFloat, BinFn::Prelu},
  };
  for (const B& b : binaries) r.add(b.name, b.mask, &binary_fn_kernel, tag(int(b.fn)));
  r.add(op::prelu::name, kMaskFloat, &prelu_kernel);
}

}  // namespace tessera::cpu
