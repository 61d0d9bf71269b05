// Binary, comparison, logical, where and unary kernels with broadcasting, type promotion and
// arbitrary strides. Floating outputs of f32/f16/bf16 compute in float through the per-ISA tables
// (vec_kernels.h); f64 computes in double; integers in int64.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "kernels.h"
#include "vec_kernels.h"

namespace tessera::cpu {
namespace {

constexpr int64_t kChunk = 256;        // elements per float staging buffer

// --------------------------------------------------------------------------- float staging

// Loads n elements of T (byte stride st; st == 0 loads one element) as float into buf; returns a
// pointer to the floats (possibly the source itself) and the element stride (0 or 1) to use.
template <typename T>
inline const float* load_f32(const char* p, int64_t st, int64_t n, float* buf, int64_t* es,
                             const VecKernels& vk) {
  if (st == 0) {
    buf[0] = Elem<T>::load(reinterpret_cast<const T*>(p));
    *es = 0;
    return buf;
  }
  *es = 1;
  if constexpr (std::is_same_v<T, float>) {
    if (st == 4) return reinterpret_cast<const float*>(p);
  }
  if (st == int64_t(sizeof(T))) {
    if constexpr (std::is_same_v<T, bf16_t>) {
      vk.bf16_to_f32(reinterpret_cast<const uint16_t*>(p), buf, n);
      return buf;
    } else if constexpr (std::is_same_v<T, f16_t>) {
      vk.f16_to_f32(reinterpret_cast<const uint16_t*>(p), buf, n);
      return buf;
    }
  }
  for (int64_t i = 0; i < n; ++i) buf[i] = float(Elem<T>::load(reinterpret_cast<const T*>(p + i * st)));
  return buf;
}

template <typename T>
inline void store_f32(char* p, int64_t st, int64_t n, const float* buf, const VecKernels& vk) {
  if constexpr (std::is_same_v<T, float>) {
    if (st == 4) {
      if (reinterpret_cast<const float*>(p) != buf) std::memcpy(p, buf, size_t(n) * 4);
      return;
    }
  }
  if (st == int64_t(sizeof(T))) {
    if constexpr (std::is_same_v<T, bf16_t>) {
      vk.f32_to_bf16(buf, reinterpret_cast<uint16_t*>(p), n);
      return;
    } else if constexpr (std::is_same_v<T, f16_t>) {
      vk.f32_to_f16(buf, reinterpret_cast<uint16_t*>(p), n);
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i) Elem<T>::store(reinterpret_cast<T*>(p + i * st), buf[i]);
}

// --------------------------------------------------------------------------- binary arithmetic

template <typename A>
inline A binary_scalar(BinaryOp op, A x, A y, A alpha) {
  if constexpr (std::is_integral_v<A>) {
    // Integers wrap as in PyTorch: compute modulo 2^64 (no signed overflow), convert back at the end.
    using U = std::make_unsigned_t<A>;
    switch (op) {
      case BinaryOp::Add: return A(U(x) + U(alpha) * U(y));
      case BinaryOp::Sub: return A(U(x) - U(alpha) * U(y));
      case BinaryOp::Mul: return A(U(x) * U(y));
      default: break;
    }
  }
  switch (op) {
    case BinaryOp::Add: return x + alpha * y;
    case BinaryOp::Sub: return x - alpha * y;
    case BinaryOp::Mul: return x * y;
    case BinaryOp::Div:
      if constexpr (std::is_integral_v<A>) {
        TESSERA_SDK_CHECK(y != 0, "integer division by zero; divide floating tensors instead");
        return x / y;
      } else {
        return x / y;
      }
    case BinaryOp::Maximum: return (x != x || x > y) ? x : y;
    case BinaryOp::Minimum: return (x != x || x < y) ? x : y;
    case BinaryOp::Pow:
      if constexpr (std::is_integral_v<A>) {
        // A negative exponent of a tensor (PyTorch's pow.Tensor_Tensor): 1 for base 1, +-1 for base -1,
        // 0 otherwise (0 ** -1 included). A negative *number* as exponent was refused by the shape rule.
        if (y < 0) return x == 1 ? A(1) : (x == -1 ? ((y % 2 == 0) ? A(1) : A(-1)) : A(0));
        std::make_unsigned_t<A> r = 1, b = std::make_unsigned_t<A>(x);  // wraps as PyTorch, no signed overflow
        for (A e = y; e > 0; e >>= 1) {
          if (e & 1) r *= b;
          b *= b;
        }
        return A(r);
      } else {
        return std::pow(x, y);
      }
    default: return x;
  }
}

// The type a binary op computes in for output dtype `od` (PyTorch's opmath): float32 for the
// 16/32-bit floats, float64 for float64, int64 for integers and bool.
int32_t compute_dtype_of(int32_t od) {
  if (od == TESSERA_DTYPE_FLOAT64) return od;
  return dtype_is_floating(od) ? TESSERA_DTYPE_FLOAT32 : TESSERA_DTYPE_INT64;
}

// Loads element `p` of an operand that is either of the output's type T (native) or already of
// T's compute type (a converted operand, e.g. a wrapped number).
template <typename T>
inline const float* load_operand_f32(bool native, const char* p, int64_t st, int64_t n, float* buf, int64_t* es,
                                     const VecKernels& vk) {
  return native ? load_f32<T>(p, st, n, buf, es, vk) : load_f32<float>(p, st, n, buf, es, vk);
}
template <typename T>
inline int64_t load_operand_int(bool native, const char* p) {
  return native ? int64_t(Elem<T>::load(reinterpret_cast<const T*>(p))) : *reinterpret_cast<const int64_t*>(p);
}

// Note [Wrapped numbers reach kernels as they are] (dispatcher): an operand whose dtype differs
// from the output's (a wrapped int64/float64/bool number, or any caller's mixed operand) is
// converted straight into the compute type, never through the output's storage dtype, so
// float16 * 1e5 stays finite and uint8 ** -1 sees the exponent -1.
// Note [Small dense binary fast path]: a float32 op on operands of the output's shape, all three
// contiguous, that the grain rule runs on one thread anyway calls the vector kernel once, without
// the broadcast strides, the strided-loop set-up and the dtype visit. It is the same kernel call
// the general path's direct case makes for such operands, so results are identical; it only
// shortens the per-op latency of small tensors (docs/performance.md, Dispatch).
bool same_dense_shape(const tessera_tensor_t* t, const TensorView& out) {
  if (t->ndim != out.ndim()) return false;
  int64_t expected = 1;
  for (int i = t->ndim - 1; i >= 0; --i) {
    const int64_t size = out.size(i);
    if (t->sizes[i] != size) return false;
    if (size != 1 && (t->strides[i] != expected || out.stride(i) != expected)) return false;
    expected *= size;
  }
  return true;
}

void binary_run(const KernelCall& c, BinaryOp op, const tessera_tensor_t* a_in, const tessera_tensor_t* b_in,
                double alpha_d, int64_t alpha_i) {
  const TensorView out = c.output(0);
  const int32_t od = out.dtype();
  if (od == TESSERA_DTYPE_FLOAT32 && a_in->dtype == od && b_in->dtype == od && out.numel() > 0 &&
      threads_for(OpKind::Elementwise, out.numel()) == 1 && same_dense_shape(a_in, out) && same_dense_shape(b_in, out)) {
    kernels().binary_f32[int(op)](reinterpret_cast<const float*>(static_cast<const char*>(a_in->data) + a_in->byte_offset), 1,
                                  reinterpret_cast<const float*>(static_cast<const char*>(b_in->data) + b_in->byte_offset), 1,
                                  out.host_ptr<float>(), out.numel(), float(alpha_d));
    return;
  }
  const int32_t cd = compute_dtype_of(od);
  TempList temps;
  const bool native_a = a_in->dtype == od, native_b = b_in->dtype == od;
  const tessera_tensor_t* a = native_a ? a_in : cast_if_needed(a_in, cd, temps);
  const tessera_tensor_t* b = native_b ? b_in : cast_if_needed(b_in, cd, temps);
  const int nd = out.ndim();
  int64_t sa[kMaxDims], sb[kMaxDims];
  broadcast_strides(a, nd, out.sizes(), sa);
  broadcast_strides(b, nd, out.sizes(), sb);
  const int64_t es = int64_t(out.itemsize());
  const int64_t esz[3] = {es, int64_t(sdk::dtype_size(a->dtype)), int64_t(sdk::dtype_size(b->dtype))};
  char* ptrs[3] = {out.host_ptr<char>(), static_cast<char*>(a->data) + a->byte_offset,
                   static_cast<char*>(b->data) + b->byte_offset};
  const int64_t* strides[3] = {out.strides(), sa, sb};
  StridedLoop loop;
  loop.setup(nd, out.sizes(), 3, ptrs, strides, esz);
  if (loop.numel == 0) return;
  const VecKernels& vk = kernels();
  visit(od, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, bf16_t> || std::is_same_v<T, f16_t>) {
      const BinaryF32 fn = vk.binary_f32[int(op)];
      const float alpha = float(alpha_d);
      for_each(loop, OpKind::Elementwise, [&](char** p, const int64_t* st, int64_t n) {
        const bool direct = std::is_same_v<T, float> && st[0] == 4 && (st[1] == 0 || st[1] == 4) &&
                            (st[2] == 0 || st[2] == 4);
        if (direct) {
          fn(reinterpret_cast<const float*>(p[1]), st[1] / 4, reinterpret_cast<const float*>(p[2]), st[2] / 4,
             reinterpret_cast<float*>(p[0]), n, alpha);
          return;
        }
        alignas(64) float ba[kChunk], bb[kChunk], bo[kChunk];
        for (int64_t i = 0; i < n; i += kChunk) {
          const int64_t m = std::min(kChunk, n - i);
          int64_t ea, eb;
          const float* xa = load_operand_f32<T>(native_a, p[1] + i * st[1], st[1], m, ba, &ea, vk);
          const float* xb = load_operand_f32<T>(native_b, p[2] + i * st[2], st[2], m, bb, &eb, vk);
          fn(xa, ea, xb, eb, bo, m, alpha);
          store_f32<T>(p[0] + i * st[0], st[0], m, bo, vk);
        }
      });
    } else if constexpr (std::is_same_v<T, double>) {
      const BinaryF64 fn = vk.binary_f64[int(op)];
      for_each(loop, OpKind::Elementwise, [&](char** p, const int64_t* st, int64_t n) {
        if (st[0] == 8 && (st[1] == 0 || st[1] == 8) && (st[2] == 0 || st[2] == 8)) {
          fn(reinterpret_cast<const double*>(p[1]), st[1] / 8, reinterpret_cast<const double*>(p[2]), st[2] / 8,
             reinterpret_cast<double*>(p[0]), n, alpha_d);
          return;
        }
        for (int64_t i = 0; i < n; ++i)
          *reinterpret_cast<double*>(p[0] + i * st[0]) =
              binary_scalar(op, *reinterpret_cast<const double*>(p[1] + i * st[1]),
                            *reinterpret_cast<const double*>(p[2] + i * st[2]), alpha_d);
      });
    } else {
      // integers and bool: compute in int64
      for_each(loop, OpKind::Elementwise, [&](char** p, const int64_t* st, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          const int64_t x = load_operand_int<T>(native_a, p[1] + i * st[1]);
          const int64_t y = load_operand_int<T>(native_b, p[2] + i * st[2]);
          int64_t r;
          if (op == BinaryOp::Div) {
            TESSERA_SDK_CHECK(y != 0, "integer division by zero; divide floating tensors instead");
            r = x / y;
          } else {
            r = binary_scalar<int64_t>(op, x, y, alpha_i);
          }
          Elem<T>::store(reinterpret_cast<T*>(p[0] + i * st[0]), r);
        }
      });
    }
  });
}

void unary_run(const KernelCall& c, UnaryOp op);

// The Scalar argument of an op at attribute index `i`, as a 0-dim tensor of the output dtype.
tessera_status_t binary_kernel(void* user_data, const tessera_kernel_call_t* call) {
  return guarded(call, [&](const KernelCall& c) {
    const BinaryOp op = BinaryOp(reinterpret_cast<intptr_t>(user_data));
    const int32_t od = c.output(0).dtype();
    // add/sub carry alpha as the last attribute; a .Scalar overload carries `other` first.
    int next_attr = 0;
    TempList temps;
    const tessera_tensor_t* a = c.raw()->inputs[0];
    const tessera_tensor_t* b;
    if (c.num_inputs() >= 2) {
      b = c.raw()->inputs[1];
    } else {
      // PyTorch computes x ** 0.5 and x ** -0.5 as sqrt and rsqrt (pow(-inf, 0.5) is NaN, not inf;
      // pow(-0.0, -0.5) is -inf) for float32, float64 and bfloat16; float16 calls pow.
      if (op == BinaryOp::Pow && dtype_is_floating(od) && od != TESSERA_DTYPE_FLOAT16 &&
          c.attr(op::pow_Tensor_Scalar::attr::exponent).kind == TESSERA_VALUE_DOUBLE &&
          std::abs(c.attr_double(op::pow_Tensor_Scalar::attr::exponent)) == 0.5) {
        unary_run(c, c.attr_double(op::pow_Tensor_Scalar::attr::exponent) == 0.5 ? UnaryOp::Sqrt : UnaryOp::Rsqrt);
        return;
      }
      temps.push_back(scalar_tensor(c, next_attr++, compute_dtype_of(od)));
      b = temps.back().raw();
    }
    double alpha_d = 1;
    int64_t alpha_i = 1;
    if ((op == BinaryOp::Add || op == BinaryOp::Sub) && c.num_attrs() > next_attr) {
      alpha_d = c.attr_double(next_attr);
      alpha_i = c.attr_int(next_attr);
      TESSERA_SDK_CHECK(dtype_is_floating(od) || !c.attr_is_floating(next_attr),
                        std::string("alpha ") + std::to_string(alpha_d) + " is floating but the result dtype is " +
                            dtype_name(od) + "; pass an integral alpha or use floating tensors");
      // A bool result takes alpha as a bool first, as PyTorch's kernel does (alpha converted to
      // the result dtype): add(true, true, alpha=-1) is true, not 1 + -1 = 0.
      if (od == TESSERA_DTYPE_BOOL) alpha_i = alpha_i != 0;
    }
    binary_run(c, op, a, b, alpha_d, alpha_i);
  });
}

// --------------------------------------------------------------------------- comparisons, logical

enum class CompareOp : int { Eq, Ne, Lt, Le, Gt, Ge, And, Or, Xor };

template <typename A>
inline bool compare(CompareOp op, A x, A y) {
  switch (op) {
    case CompareOp::Eq: return x == y;
    case CompareOp::Ne: return x != y;
    case CompareOp::Lt: return x < y;
    case CompareOp::Le: return x <= y;
    case CompareOp::Gt: return x > y;
    case CompareOp::Ge: return x >= y;
    case CompareOp::And: return x != 0 && y != 0;
    case CompareOp::Or: return x != 0 || y != 0;
    case CompareOp::Xor: return (x != 0) != (y != 0);
  }
  return false;
}

tessera_status_t compare_kernel(void* user_data, const tessera_kernel_call_t* call) {
  return guarded(call, [&](const KernelCall& c) {
    const CompareOp op = CompareOp(reinterpret_cast<intptr_t>(user_data));
    const TensorView out = c.output(0);
    TempList temps;
    const tessera_tensor_t* a = c.raw()->inputs[0];
    const tessera_tensor_t* b;
    int32_t cd;
    if (c.num_inputs() >= 2) {
      b = c.raw()->inputs[1];
      // A 0-dim operand (a wrapped number) next to a dimensioned one only raises the category; else
      // it converts to the other's dtype, as PyTorch compares uint8 [44] == 300 as 44 == 44.
      auto category = [](int32_t d) { return d == TESSERA_DTYPE_BOOL ? 0 : (dtype_is_floating(d) ? 2 : 1); };
      if (a->ndim == 0 && b->ndim > 0 && category(a->dtype) <= category(b->dtype))
        cd = b->dtype;
      else if (b->ndim == 0 && a->ndim > 0 && category(b->dtype) <= category(a->dtype))
        cd = a->dtype;
      else
        cd = promote_types(a->dtype, b->dtype);
    } else {
      // a wrapped number only raises the category
      const bool fl = c.attr_is_floating(0);
      cd = (fl && !dtype_is_floating(a->dtype)) ? TESSERA_DTYPE_FLOAT64 : a->dtype;
      if (!fl && a->dtype == TESSERA_DTYPE_BOOL && c.attr(0).kind == TESSERA_VALUE_INT) cd = TESSERA_DTYPE_INT64;
      temps.push_back(scalar_tensor(c, 0, cd));
      b = temps.back().raw();
    }
    if (op == CompareOp::And || op == CompareOp::Or || op == CompareOp::Xor) cd = TESSERA_DTYPE_BOOL;
    a = cast_if_needed(a, cd, temps);
    b = cast_if_needed(b, cd, temps);
    const int nd = out.ndim();
    int64_t sa[kMaxDims], sb[kMaxDims];
    broadcast_strides(a, nd, out.sizes(), sa);
    broadcast_strides(b, nd, out.sizes(), sb);
    const int64_t es = int64_t(sdk::dtype_size(cd));
    const int64_t esz[3] = {int64_t(out.itemsize()), es, es};
    char* ptrs[3] = {out.host_ptr<char>(), static_cast<char*>(a->data) + a->byte_offset,
                     static_cast<char*>(b->data) + b->byte_offset};
    const int64_t* strides[3] = {out.strides(), sa, sb};
    StridedLoop loop;
    loop.setup(nd, out.sizes(), 3, ptrs, strides, esz);
    if (loop.numel == 0) return;
    const int32_t outd = out.dtype();
    visit(cd, [&](auto tag) {
      using T = decltype(tag);
      using A = acc_t<T>;
      for_each(loop, OpKind::Elementwise, [&](char** p, const int64_t* st, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          const A x = Elem<T>::load(reinterpret_cast<const T*>(p[1] + i * st[1]));
          const A y = Elem<T>::load(reinterpret_cast<const T*>(p[2] + i * st[2]));
          const bool r = compare<A>(op, x, y);
          if (outd == TESSERA_DTYPE_BOOL || outd == TESSERA_DTYPE_UINT8 || outd == TESSERA_DTYPE_INT8)
            *reinterpret_cast<uint8_t*>(p[0] + i * st[0]) = r;
          else
            visit(outd, [&](auto o) {
              using O = decltype(o);
              Elem<O>::store(reinterpret_cast<O*>(p[0] + i * st[0]), acc_t<O>(r));
            });
        }
      });
    });
  });
}

template <int Bytes> struct Word;
template <> struct Word<1> { using type = uint8_t; };
template <> struct Word<2> { using type = uint16_t; };
template <> struct Word<4> { using type = uint32_t; };
template <> struct Word<8> { using type = uint64_t; };

template <int Bytes>
void where_loop(const StridedLoop& loop) {
  using W = typename Word<Bytes>::type;
  for_each(loop, OpKind::Elementwise, [](char** p, const int64_t* st, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      const bool cnd = *reinterpret_cast<const uint8_t*>(p[1] + i * st[1]) != 0;
      W v;
      std::memcpy(&v, (cnd ? p[2] + i * st[2] : p[3] + i * st[3]), Bytes);
      std::memcpy(p[0] + i * st[0], &v, Bytes);
    }
  });
}

tessera_status_t where_kernel(void*, const tessera_kernel_call_t* call) {
  return guarded(call, [&](const KernelCall& c) {
    const TensorView out = c.output(0);
    const int32_t od = out.dtype();
    TempList temps;
    const tessera_tensor_t* cond = cast_if_needed(c.raw()->inputs[0], TESSERA_DTYPE_BOOL, temps);
    const tessera_tensor_t* ops[2];
    int attr = 0;
    for (int k = 0; k < 2; ++k) {
      if (c.num_inputs() > k + 1 && c.raw()->inputs[k + 1]) {
        ops[k] = cast_if_needed(c.raw()->inputs[k + 1], od, temps);
      } else {
        temps.push_back(scalar_tensor(c, attr++, od));
        ops[k] = temps.back().raw();
      }
    }
    const int nd = out.ndim();
    int64_t s0[kMaxDims], s1[kMaxDims], s2[kMaxDims];
    broadcast_strides(cond, nd, out.sizes(), s0);
    broadcast_strides(ops[0], nd, out.sizes(), s1);
    broadcast_strides(ops[1], nd, out.sizes(), s2);
    const int64_t es = int64_t(out.itemsize());
    const int64_t esz[4] = {es, 1, es, es};
    char* ptrs[4] = {out.host_ptr<char>(), static_cast<char*>(cond->data) + cond->byte_offset,
                     static_cast<char*>(ops[0]->data) + ops[0]->byte_offset,
                     static_cast<char*>(ops[1]->data) + ops[1]->byte_offset};
    const int64_t* strides[4] = {out.strides(), s0, s1, s2};
    StridedLoop loop;
    loop.setup(nd, out.sizes(), 4, ptrs, strides, esz);
    if (loop.numel == 0) return;
    switch (es) {
      case 1: where_loop<1>(loop); break;
      case 2: where_loop<2>(loop); break;
      case 4: where_loop<4>(loop); break;
      default: where_loop<8>(loop); break;
    }
  });
}

// --------------------------------------------------------------------------- unary

inline double erf_d(double x) { return std::erf(x); }

double unary_double(UnaryOp op, double x) {
  switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Abs: return std::fabs(x);
    case UnaryOp::Exp: return std::exp(x);
    case UnaryOp::Log: return std::log(x);
    case UnaryOp::Sqrt: return std::sqrt(x);
    case UnaryOp::Rsqrt: return 1.0 / std::sqrt(x);
    case UnaryOp::Sin: return std::sin(x);
    case UnaryOp::Cos: return std::cos(x);
    case UnaryOp::Tanh: return std::tanh(x);
    case UnaryOp::Sigmoid: return 1.0 / (1.0 + std::exp(-x));
    case UnaryOp::Relu: return (x != x || x > 0) ? x : 0.0;
    case UnaryOp::Gelu: return 0.5 * x * std::erfc(-x * M_SQRT1_2);
    case UnaryOp::GeluTanh: {
      const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
      return 0.5 * x * (1.0 + std::tanh(u));
    }
    case UnaryOp::Silu: return x / (1.0 + std::exp(-x));
    case UnaryOp::Erf: return erf_d(x);
    case UnaryOp::Mish: return x * std::tanh(std::log1p(std::exp(x)));
    case UnaryOp::Hardsigmoid: return std::min(std::max(x + 3, 0.0), 6.0) / 6;
    case UnaryOp::Hardswish: return x * std::min(std::max(x + 3, 0.0), 6.0) / 6;
    case UnaryOp::Softsign: return x / (1 + std::fabs(x));
    default: return x;
  }
}

// Negation wraps as PyTorch's does (-INT64_MIN is INT64_MIN): through uint64_t, where it is defined.
int64_t wrapping_neg(int64_t x) { return int64_t(0 - uint64_t(x)); }

int64_t unary_int(UnaryOp op, int64_t x) {
  switch (op) {
    case UnaryOp::Neg: return wrapping_neg(x);
    case UnaryOp::Abs: return x < 0 ? wrapping_neg(x) : x;
    case UnaryOp::Relu: return x > 0 ? x : 0;
    default:
      throw sdk::Error(TESSERA_STATUS_UNIMPLEMENTED, "integer output not defined for this op; cast to a floating dtype");
  }
}

// The loop of a one-input op over (output, input 0 converted to the output's dtype and broadcast).
StridedLoop unary_loop(const KernelCall& c, TempList& temps) {
  const TensorView out = c.output(0);
  const tessera_tensor_t* x = cast_if_needed(c.raw()->inputs[0], out.dtype(), temps);
  const int nd = out.ndim();
  int64_t sx[kMaxDims];
  broadcast_strides(x, nd, out.sizes(), sx);
  const int64_t es = int64_t(out.itemsize());
  const int64_t esz[2] = {es, es};
  char* ptrs[2] = {out.host_ptr<char>(), static_cast<char*>(x->data) + x->byte_offset};
  const int64_t* strides[2] = {out.strides(), sx};
  StridedLoop loop;
  loop.setup(nd, out.sizes(), 2, ptrs, strides, esz);
  return loop;
}

void unary_run(const KernelCall& c, UnaryOp op) {
  const int32_t od = c.output(0).dtype();
  TempList temps;
  const StridedLoop loop = unary_loop(c, temps);
  if (loop.numel == 0) return;
  const VecKernels& vk = kernels();
  visit(od, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, bf16_t> || std::is_same_v<T, f16_t>) {
      const UnaryF32 fn = vk.unary_f32[int(op)];
      for_each(loop, OpKind::Transcendental, [&](char** p, const int64_t* st, int64_t n) {
        if (std::is_same_v<T, float> && st[0] == 4 && st[1] == 4) {
          fn(reinterpret_cast<const float*>(p[1]), reinterpret_cast<float*>(p[0]), n);
          return;
        }
        alignas(64) float bx[kChunk], bo[kChunk];
        for (int64_t i = 0; i < n; i += kChunk) {
          const int64_t m = std::min(kChunk, n - i);
          int64_t ex;
          const float* xx = load_f32<T>(p[1] + i * st[1], st[1], m, bx, &ex, vk);
          if (ex == 0) {
            for (int64_t j = 1; j < m; ++j) bx[j] = bx[0];
            xx = bx;
          }
          fn(xx, bo, m);
          store_f32<T>(p[0] + i * st[0], st[0], m, bo, vk);
        }
      });
    } else if constexpr (std::is_same_v<T, double>) {
      for_each(loop, OpKind::Transcendental, [&](char** p, const int64_t* st, int64_t n) {
        for (int64_t i = 0; i < n; ++i)
          *reinterpret_cast<double*>(p[0] + i * st[0]) =
              unary_double(op, *reinterpret_cast<const double*>(p[1] + i * st[1]));
      });
    } else {
      for_each(loop, OpKind::Elementwise, [&](char** p, const int64_t* st, int64_t n) {
        for (int64_t i = 0; i < n; ++i)
          Elem<T>::store(reinterpret_cast<T*>(p[0] + i * st[0]),
                         unary_int(op, Elem<T>::load(reinterpret_cast<const T*>(p[1] + i * st[1]))));
      });
    }
  });
}

tessera_status_t unary_kernel(void* user_data, const tessera_kernel_call_t* call) {
  return guarded(call, [&](const KernelCall& c) { unary_run(c, UnaryOp(reinterpret_cast<intptr_t>(user_data))); });
}

tessera_status_t gelu_kernel(void*, const tessera_kernel_call_t* call) {
  return guarded(call, [&](const KernelCall& c) {
    std::string approx = c.num_attrs() > op::gelu::attr::approximate ? c.attr_string(op::gelu::attr::approximate)
                                                                     : std::string("none");
    if (approx.empty()) approx = "none";
    TESSERA_SDK_CHECK(approx == "none" || approx == "tanh",
                      "gelu: approximate='" + approx + "' is not supported; expected 'none' or 'tanh'");
    unary_run(c, approx == "tanh" ? UnaryOp::GeluTanh : UnaryOp::Gelu);
  });
}

// --------------------------------------------------------------------------- clamp

// clamp(self, Scalar? min, Scalar? max) in the output dtype (self arrives converted to it, Note
// [Compute dtype]), as PyTorch: min(max(x, lo), hi) with the bounds rounded to the dtype, so a NaN
// element stays NaN and min > max gives max; both bounds given and either NaN gives NaN; a lone NaN
// bound changes nothing.
tessera_status_t clamp_kernel(void*, const tessera_kernel_call_t* call) {
  return guarded(call, [&](const KernelCall& c) {
    using A = op::clamp::attr;
    const int32_t od = c.output(0).dtype();
    bool has_lo = !c.attr_is_none(A::min), has_hi = !c.attr_is_none(A::max);
    TESSERA_SDK_CHECK(has_lo || has_hi, "clamp: at least one of 'min' or 'max' must not be None");
    const double lo_d = has_lo ? c.attr_double(A::min) : 0, hi_d = has_hi ? c.attr_double(A::max) : 0;
    const bool nan_bound = (has_lo && std::isnan(lo_d)) || (has_hi && std::isnan(hi_d));
    const bool all_nan = has_lo && has_hi && nan_bound;
    if (!all_nan && nan_bound) has_lo = has_hi = false;  // the only bound is NaN
    TempList temps;
    const StridedLoop loop = unary_loop(c, temps);
    if (loop.numel == 0) return;
    visit(od, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, bool>) {  // the shape rule refuses bool; the mask excludes it
        throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT, "clamp: not implemented for bool tensors");
      } else {
        // The bounds as the dtype holds them.
        T lo_t, hi_t;
        if constexpr (is_float_v<T>) {
          Elem<T>::store(&lo_t, acc_t<T>(lo_d));
          Elem<T>::store(&hi_t, acc_t<T>(hi_d));
        } else {
          Elem<T>::store(&lo_t, has_lo ? c.attr_int(A::min) : 0);
          Elem<T>::store(&hi_t, has_hi ? c.attr_int(A::max) : 0);
        }
        const acc_t<T> lo = Elem<T>::load(&lo_t), hi = Elem<T>::load(&hi_t);
        for_each(loop, OpKind::Elementwise, [&](char** p, const int64_t* st, int64_t n) {
          for (int64_t i = 0; i < n; ++i) {
            acc_t<T> v = Elem<T>::load(reinterpret_cast<const T*>(p[1] + i * st[1]));
            if constexpr (is_float_v<T>) {
              if (all_nan) v = acc_t<T>(NAN);
            }
            if (has_lo && v < lo) v = lo;  // std::max(v, lo): a NaN v stays
            if (has_hi && hi < v) v = hi;  // std::min(v, hi)
            Elem<T>::store(reinterpret_cast<T*>(p[0] + i * st[0]), v);
          }
        });
      }
    });
  });
}

void* tag(int v) { return reinterpret_cast<void*>(intptr_t(v)); }

}  // namespace

OwnedTensor scalar_tensor(const KernelCall& c, int attr, int32_t dtype) {
  OwnedTensor t(nullptr, 0, dtype);
  const tessera_value_t& v = c.attr(attr);
  visit(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = reinterpret_cast<T*>(static_cast<char*>(t.t.data) + t.t.byte_offset);
    if constexpr (is_float_v<T>) {
      Elem<T>::store(p, acc_t<T>(c.attr_double(attr)));
    } else if constexpr (std::is_same_v<T, bool>) {
      *p = v.kind == TESSERA_VALUE_DOUBLE ? v.u.d != 0 : c.attr_int(attr) != 0;  // 1e-30 and NaN are true
    } else {
      Elem<T>::store(p, v.kind == TESSERA_VALUE_DOUBLE ? int64_t(v.u.d) : c.attr_int(attr));
    }
  });
  return t;
}

void register_elementwise_kernels(Registrar& r) {
  struct B { const char* name; BinaryOp op; };
  const B binaries[] = {
      {op::add_Tensor::name, BinaryOp::Add},         {op::sub_Tensor::name, BinaryOp::Sub},
      {op::mul_Tensor::name, BinaryOp::Mul},         {op::div_Tensor::name, BinaryOp::Div},
      {op::pow_Tensor_Tensor::name, BinaryOp::Pow},  {op::pow_Tensor_Scalar::name, BinaryOp::Pow},
      {op::maximum::name, BinaryOp::Maximum},        {op::minimum::name, BinaryOp::Minimum},
      {op::add__Tensor::name, BinaryOp::Add},        {op::mul__Tensor::name, BinaryOp::Mul},
  };
  for (const B& b : binaries) r.add(b.name, kMaskAll, &binary_kernel, tag(int(b.op)));
  struct C { const char* name; CompareOp op; };
  const C compares[] = {
      {op::eq_Tensor::name, CompareOp::Eq}, {op::ne_Tensor::name, CompareOp::Ne},
      {op::lt_Tensor::name, CompareOp::Lt}, {op::le_Tensor::name, CompareOp::Le},
      {op::gt_Tensor::name, CompareOp::Gt}, {op::ge_Tensor::name, CompareOp::Ge},
      {op::logical_and::name, CompareOp::And}, {op::logical_or::name, CompareOp::Or},
      {op::logical_xor::name, CompareOp::Xor},
  };
  for (const C& cc : compares) r.add(cc.name, kMaskAll, &compare_kernel, tag(int(cc.op)));
  r.add(op::where_self::name, kMaskAll, &where_kernel);
  struct U { const char* name; UnaryOp op; };
  const U unaries[] = {
      {op::neg::name, UnaryOp::Neg},         {op::abs::name, UnaryOp::Abs},   {op::exp::name, UnaryOp::Exp},
      {op::log::name, UnaryOp::Log},         {op::sqrt::name, UnaryOp::Sqrt}, {op::rsqrt::name, UnaryOp::Rsqrt},
      {op::sin::name, UnaryOp::Sin},         {op::cos::name, UnaryOp::Cos},   {op::tanh::name, UnaryOp::Tanh},
      {op::sigmoid::name, UnaryOp::Sigmoid}, {op::relu::name, UnaryOp::Relu}, {op::silu::name, UnaryOp::Silu},
      {op::erf::name, UnaryOp::Erf},
      // ONNX pointwise ops without parameters (docs/pointwise-ops.md); the rest: elementwise_onnx.cpp.
      {op::mish::name, UnaryOp::Mish},       {op::hardsigmoid::name, UnaryOp::Hardsigmoid},
      {op::hardswish::name, UnaryOp::Hardswish}, {op::softsign::name, UnaryOp::Softsign},
  };
  for (const U& u : unaries) r.add(u.name, kMaskAll, &unary_kernel, tag(int(u.op)));
  r.add(op::gelu::name, kMaskAll, &gelu_kernel);
  r.add(op::clamp::name, kMaskNumeric, &clamp_kernel);
}

}  // namespace tessera::cpu
