// Hot contiguous kernels, compiled once per ISA level (Note [CPU ISA selection] in isa.h).
// TESSERA_CPU_ISA names the namespace (isa_default, isa_avx2, isa_avx512); the compiler flags of
// each copy are set in CMakeLists.txt. Loops are written so that the compiler vectorises them
// (`#pragma omp simd`, branch-free bodies); the math functions come from the shared vector math
// (tessera/vecmath/vecmath.h, Note [One vector math]: our own polynomial and rational
// approximations, which the C++ code generator's loops call too), not from libmvec.
//
// Note [No shared inline code in ISA copies]
// An inline function with external linkage (a std:: wrapper, a helper from a shared header) that
// is emitted out of line in this file is compiled with this copy's -march flags, and the linker
// may keep that copy for every caller, including baseline code. So this file defines everything
// in an anonymous namespace and calls only compiler builtins, intrinsics (which are never emitted
// out of line), the SDK's `static inline` float16 conversion and the SDK's vector math, whose
// functions are all `static inline` (internal linkage: one copy per file).
#include <cmath>
#include <cstdint>

#include "tessera/float16.h"
#include "tessera/vecmath/vecmath.h"
#include "vec_kernels.h"

#if defined(__F16C__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#ifndef TESSERA_CPU_ISA
#error "TESSERA_CPU_ISA must name the namespace of this copy"
#endif

namespace tessera::cpu::TESSERA_CPU_ISA {
namespace {

// The math itself (exp_f, tanh_f, gelu_v, ...) is the shared vector math (Note [One vector math]).
using namespace tessera::vecmath;

// The SDK's conversion (tessera/float16.h): internal linkage, so this copy keeps its own.
inline float half_to_float_s(uint16_t h) { return fp16::half_bits_to_float(h); }
inline uint16_t float_to_half_s(float f) { return fp16::float_to_half_bits(f); }
inline float sqrt_s(float x) { return __builtin_sqrtf(x); }
inline double sqrt_s(double x) { return __builtin_sqrt(x); }
inline float pow_s(float a, float b) { return __builtin_powf(a, b); }
inline double pow_s(double a, double b) { return __builtin_pow(a, b); }
// mish(x) = x tanh(log1p(e^x)) = x n / (n + 2) with n = e^x (e^x + 2): one exp, no cancellation
// (x n underflows gracefully to x e^x in the negative tail); above 20, tanh(softplus(x)) rounds to
// 1. mish(-inf) is NaN (-inf * 0), as PyTorch's formula gives.
inline float mish_s(float x) {
  const float e = exp_f(x);
  const float n = e * (e + 2.0f);
  const float r = x * n / (n + 2.0f);
  return x > 20.0f ? x : r;
}
// min(max(x + 3, 0), 6) with std::min/std::max's NaN behaviour (a NaN stays).
inline float hard_six_s(float x) {
  const float t = x + 3.0f;
  return t < 0.0f ? 0.0f : (t > 6.0f ? 6.0f : t);
}


// Note [Streaming stores]
// A large contiguous float output (kStreamMinBytes and more in one call, i.e. beyond the caches)
// is written with non-temporal stores at the AVX2 and AVX-512 levels, as memcpy does for large
// copies: the output lines are not read for ownership first, which saves a third of the memory
// traffic of a unary op and a quarter of a binary one. The kernel body computes blocks of
// kStreamBlock floats into an L1-resident buffer that is then streamed to the (vector-aligned)
// output; the unaligned head and the tail are written directly. The sfence at the end orders the
// streaming stores before whatever the calling thread does next (the parallel loop's barrier).
// Smaller outputs keep regular stores: they are likely read again soon, from the cache. So do
// in-place calls (the output is one of the inputs): its lines are read anyway, so streaming saves
// no traffic and only evicts the lines the loads just brought in. The explicit vector kernels
// (unary_vec) stream straight from their registers instead of through the staging buffer.
constexpr int64_t kStreamMinBytes = int64_t(1) << 20;
constexpr int64_t kStreamBlock = 1024;

// Calls body(i, m, dst) to write out[i, i + m) to dst, for all of [0, n). `in_place`: out is one
// of the inputs.
template <typename F>
inline void write_out(float* out, int64_t n, bool in_place, F body) {
#if defined(__AVX2__)
  if (!in_place && n * int64_t(sizeof(float)) >= kStreamMinBytes) {
#if defined(__AVX512F__)
    constexpr uintptr_t kVecBytes = 64;
#else
    constexpr uintptr_t kVecBytes = 32;
#endif
    const int64_t head = int64_t(((kVecBytes - (reinterpret_cast<uintptr_t>(out) & (kVecBytes - 1))) &
                                  (kVecBytes - 1)) / sizeof(float));
    if ((reinterpret_cast<uintptr_t>(out) & (sizeof(float) - 1)) == 0 && head < n) {
      body(0, head, out);
      alignas(64) float buf[kStreamBlock];
      int64_t i = head;
      for (; i + kStreamBlock <= n; i += kStreamBlock) {
        body(i, kStreamBlock, buf);
        float* dst = out + i;
#if defined(__AVX512F__)
        for (int64_t j = 0; j < kStreamBlock; j += 16) _mm512_stream_ps(dst + j, _mm512_load_ps(buf + j));
#else
        for (int64_t j = 0; j < kStreamBlock; j += 8) _mm256_stream_ps(dst + j, _mm256_load_ps(buf + j));
#endif
      }
      if (i < n) body(i, n - i, out + i);
      _mm_sfence();
      return;
    }
  }
#endif
  body(0, n, out);
}

template <typename T, typename F>
inline void binary_loop_plain(const T* a, int64_t sa, const T* b, int64_t sb, T* out, int64_t n, F f) {
  if (sa == 1 && sb == 1) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
  } else if (sa == 1) {
    const T bv = b[0];
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], bv);
  } else if (sb == 1) {
    const T av = a[0];
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = f(av, b[i]);
  } else {
    const T v = f(a[0], b[0]);
    for (int64_t i = 0; i < n; ++i) out[i] = v;
  }
}

template <typename T, typename F>
inline void binary_loop(const T* a, int64_t sa, const T* b, int64_t sb, T* out, int64_t n, F f) {
  if constexpr (sizeof(T) == sizeof(float)) {
    const bool in_place = static_cast<const void*>(out) == a || static_cast<const void*>(out) == b;
    write_out(out, n, in_place, [&](int64_t i, int64_t m, float* dst) {
      binary_loop_plain(a + i * sa, sa, b + i * sb, sb, dst, m, f);
    });
  } else {
    binary_loop_plain(a, sa, b, sb, out, n, f);
  }
}

template <typename T>
void binary_add(const T* a, int64_t sa, const T* b, int64_t sb, T* out, int64_t n, T alpha) {
  if (alpha == T(1))
    binary_loop(a, sa, b, sb, out, n, [](T x, T y) { return x + y; });
  else
    binary_loop(a, sa, b, sb, out, n, [alpha](T x, T y) { return x + alpha * y; });
}
template <typename T>
void binary_sub(const T* a, int64_t sa, const T* b, int64_t sb, T* out, int64_t n, T alpha) {
  if (alpha == T(1))
    binary_loop(a, sa, b, sb, out, n, [](T x, T y) { return x - y; });
  else
    binary_loop(a, sa, b, sb, out, n, [alpha](T x, T y) { return x - alpha * y; });
}
template <typename T>
void binary_mul(const T* a, int64_t sa, const T* b, int64_t sb, T* out, int64_t n, T) {
  binary_loop(a, sa, b, sb, out, n, [](T x, T y) { return x * y; });
}
template <typename T>
void binary_div(const T* a, int64_t sa, const T* b, int64_t sb, T* out, int64_t n, T) {
  binary_loop(a, sa, b, sb, out, n, [](T x, T y) { return x / y; });
}
template <typename T>
void binary_max(const T* a, int64_t sa, const T* b, int64_t sb, T* out, int64_t n, T) {
  binary_loop(a, sa, b, sb, out, n, [](T x, T y) { return (x != x || x > y) ? x : y; });
}
template <typename T>
void binary_min(const T* a, int64_t sa, const T* b, int64_t sb, T* out, int64_t n, T) {
  binary_loop(a, sa, b, sb, out, n, [](T x, T y) { return (x != x || x < y) ? x : y; });
}
template <typename T>
void binary_pow(const T* a, int64_t sa, const T* b, int64_t sb, T* out, int64_t n, T) {
  for (int64_t i = 0; i < n; ++i) out[i] = pow_s(a[i * sa], b[i * sb]);
}

// The explicit vector kernels (Note [Explicit gelu at the vector levels] and Note [Explicit exp at
// the vector levels] in tessera/vecmath/vecmath.h) and the loops that stream their results.
#if TESSERA_VECMATH_LEVEL >= 1
// GCC 12 flags the _mm512_undefined_ps() pass-through operand inside its own AVX-512 intrinsic
// headers as maybe-uninitialized (a false positive).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// dst[i] = f(src[i]) for i in [0, m), 0 < m < kLanes, touching no memory at or past src + m, dst + m.
template <typename F>
inline void unary_vec_tail(const float* src, float* dst, int64_t m, F f) {
#if TESSERA_VECMATH_AVX512
  const __mmask16 k = __mmask16((1u << unsigned(m)) - 1u);
  _mm512_mask_storeu_ps(dst, k, f(_mm512_maskz_loadu_ps(k, src)));
#else
  alignas(32) float tmp[kLanes] = {};
  for (int64_t j = 0; j < m && j < kLanes; ++j) tmp[j] = src[j];
  _mm256_store_ps(tmp, f(_mm256_load_ps(tmp)));
  for (int64_t j = 0; j < m && j < kLanes; ++j) dst[j] = tmp[j];
#endif
}

// dst[i] = f(src[i]) for i in [0, m); Stream: dst is vector-aligned and m a multiple of kLanes.
// Several independent vectors per iteration: each evaluation is one long dependency chain.
template <bool Stream, typename F>
inline void unary_vec_range(const float* src, float* dst, int64_t m, F f) {
  int64_t i = 0;
  for (; i + 4 * kLanes <= m; i += 4 * kLanes) {
    const vfloat a = f(loadu_v(src + i)), b = f(loadu_v(src + i + kLanes));
    const vfloat c = f(loadu_v(src + i + 2 * kLanes)), d = f(loadu_v(src + i + 3 * kLanes));
    store_v<Stream>(dst + i, a);
    store_v<Stream>(dst + i + kLanes, b);
    store_v<Stream>(dst + i + 2 * kLanes, c);
    store_v<Stream>(dst + i + 3 * kLanes, d);
  }
  for (; i + kLanes <= m; i += kLanes) store_v<Stream>(dst + i, f(loadu_v(src + i)));
  if (i < m) unary_vec_tail(src + i, dst + i, m - i, f);
}

// out[i] = f(in[i]) for i in [0, n). A large output that is not the input is written with
// streaming stores (Note [Streaming stores]) straight from the registers, without write_out's
// staging buffer: the kernels below are compute-bound enough that the extra copy shows.
template <typename F>
inline void unary_vec(const float* in, float* out, int64_t n, F f) {
  constexpr uintptr_t kVecBytes = kLanes * sizeof(float);
  const uintptr_t addr = reinterpret_cast<uintptr_t>(out);
  if (out == in || n * int64_t(sizeof(float)) < kStreamMinBytes || (addr & (sizeof(float) - 1)) != 0) {
    unary_vec_range<false>(in, out, n, f);
    return;
  }
  const int64_t head = int64_t(((kVecBytes - (addr & (kVecBytes - 1))) & (kVecBytes - 1)) / sizeof(float));
  const int64_t body = (n - head) / kLanes * kLanes;
  unary_vec_range<false>(in, out, head, f);
  unary_vec_range<true>(in + head, out + head, body, f);
  unary_vec_range<false>(in + head + body, out + head + body, n - head - body, f);
  _mm_sfence();
}

void u_gelu(const float* in, float* out, int64_t n) {
  unary_vec(in, out, n, [](vfloat x) { return gelu_v(x); });
}
void u_exp(const float* in, float* out, int64_t n) {
  unary_vec(in, out, n, [](vfloat x) { return exp_v(x); });
}
void u_sigmoid(const float* in, float* out, int64_t n) {
  unary_vec(in, out, n, [](vfloat x) { return sigmoid_v(x); });
}
void u_gelu_tanh(const float* in, float* out, int64_t n) {
  unary_vec(in, out, n, [](vfloat x) { return gelu_tanh_v(x); });
}
void u_silu(const float* in, float* out, int64_t n) {
  unary_vec(in, out, n, [](vfloat x) { return silu_v(x); });
}
void u_tanh(const float* in, float* out, int64_t n) {
  unary_vec(in, out, n, [](vfloat x) { return tanh_v(x); });
}
#define TESSERA_CPU_HAS_VECTOR_TRANSCENDENTALS 1
#pragma GCC diagnostic pop
#endif  // TESSERA_VECMATH_LEVEL >= 1

#define TESSERA_CPU_UNARY(NAME, EXPR)                                      \
  void NAME(const float* in, float* out, int64_t n) {                      \
    write_out(out, n, out == in, [in](int64_t i0, int64_t m, float* dst) { \
      const float* src = in + i0;                                          \
      _Pragma("omp simd") for (int64_t i = 0; i < m; ++i) {                \
        const float x = src[i];                                            \
        dst[i] = (EXPR);                                                   \
      }                                                                    \
    });                                                                    \
  }
TESSERA_CPU_UNARY(u_neg, -x)
TESSERA_CPU_UNARY(u_abs, __builtin_fabsf(x))
TESSERA_CPU_UNARY(u_log, log_f(x))
TESSERA_CPU_UNARY(u_sqrt, sqrt_s(x))
TESSERA_CPU_UNARY(u_rsqrt, 1.0f / sqrt_s(x))
TESSERA_CPU_UNARY(u_relu, (x != x || x > 0.0f) ? x : 0.0f)
#ifndef TESSERA_CPU_HAS_VECTOR_TRANSCENDENTALS
TESSERA_CPU_UNARY(u_exp, exp_f(x))
TESSERA_CPU_UNARY(u_sigmoid, sigmoid_f(x))
TESSERA_CPU_UNARY(u_gelu, gelu_f(x))
TESSERA_CPU_UNARY(u_gelu_tanh, gelu_tanh_f(x))
TESSERA_CPU_UNARY(u_silu, mul_sigmoid_f(x, x))
TESSERA_CPU_UNARY(u_tanh, tanh_f(x))
#endif
TESSERA_CPU_UNARY(u_erf, erf_f(x))
TESSERA_CPU_UNARY(u_mish, mish_s(x))
TESSERA_CPU_UNARY(u_hardsigmoid, hard_six_s(x) / 6.0f)
TESSERA_CPU_UNARY(u_hardswish, x * hard_six_s(x) / 6.0f)
TESSERA_CPU_UNARY(u_softsign, x / (1.0f + __builtin_fabsf(x)))
#undef TESSERA_CPU_UNARY
// sin/cos are not hot: the C library's scalar functions.
void u_sin(const float* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = __builtin_sinf(in[i]);
}
void u_cos(const float* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = __builtin_cosf(in[i]);
}

void bf16_to_f32(const uint16_t* x, float* out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = as_float(int32_t(uint32_t(x[i]) << 16));
}
void f32_to_bf16(const float* x, uint16_t* out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = uint32_t(as_int(x[i]));
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t nan = (u >> 16) | 0x40u;
    out[i] = uint16_t((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
  }
}
void f16_to_f32(const uint16_t* x, float* out, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
#endif
  for (; i < n; ++i) out[i] = half_to_float_s(x[i]);
}
void f32_to_f16(const float* x, uint16_t* out, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
#endif
  for (; i < n; ++i) out[i] = float_to_half_s(x[i]);
}

double sum_f32(const float* x, int64_t n) {
  double acc = 0;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += double(x[i]);
  return acc;
}
double sum_f64(const double* x, int64_t n) {
  double acc = 0;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += x[i];
  return acc;
}
float max_f32(const float* x, int64_t n) {
  float m = -kInf;
  int nan = 0;
#pragma omp simd reduction(max : m) reduction(| : nan)
  for (int64_t i = 0; i < n; ++i) {
    m = x[i] > m ? x[i] : m;
    nan |= x[i] != x[i];
  }
  return nan ? kNaN : m;
}
float min_f32(const float* x, int64_t n) {
  float m = kInf;
  int nan = 0;
#pragma omp simd reduction(min : m) reduction(| : nan)
  for (int64_t i = 0; i < n; ++i) {
    m = x[i] < m ? x[i] : m;
    nan |= x[i] != x[i];
  }
  return nan ? kNaN : m;
}
void accumulate_f32(double* acc, const float* x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) acc[i] += double(x[i]);
}
void accumulate_f64(double* acc, const double* x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
}

#define TESSERA_STR2(x) #x
#define TESSERA_STR(x) TESSERA_STR2(x)

const VecKernels kTable = {
    TESSERA_STR(TESSERA_CPU_ISA),
    {binary_add<float>, binary_sub<float>, binary_mul<float>, binary_div<float>, binary_max<float>,
     binary_min<float>, binary_pow<float>},
    {binary_add<double>, binary_sub<double>, binary_mul<double>, binary_div<double>, binary_max<double>,
     binary_min<double>, binary_pow<double>},
    {u_neg, u_abs, u_exp, u_log, u_sqrt, u_rsqrt, u_sin, u_cos, u_tanh, u_sigmoid, u_relu, u_gelu,
     u_gelu_tanh, u_silu, u_erf, u_mish, u_hardsigmoid, u_hardswish, u_softsign},
    bf16_to_f32, f32_to_bf16, f16_to_f32, f32_to_f16,
    sum_f32, sum_f64, max_f32, min_f32, accumulate_f32, accumulate_f64,
};

}  // namespace

const VecKernels* table() { return &kTable; }

}  // namespace tessera::cpu::TESSERA_CPU_ISA
