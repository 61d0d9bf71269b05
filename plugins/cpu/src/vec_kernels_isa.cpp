// Hot contiguous kernels, compiled once per ISA level (Note [CPU ISA selection] in isa.h).
// TESSERA_CPU_ISA names the namespace (isa_default, isa_avx2, isa_avx512); the compiler flags of
// each copy are set in CMakeLists.txt. Loops are written so that the compiler vectorises them
// (`#pragma omp simd`, branch-free bodies); the math functions are our own polynomial
// approximations (Cephes-style range reduction), accurate to about 1e-7 relative for float, and
// are not taken from libmvec.
//
// Note [No shared inline code in ISA copies]
// An inline function with external linkage (a std:: wrapper, a helper from a shared header) that
// is emitted out of line in this file is compiled with this copy's -march flags, and the linker
// may keep that copy for every caller, including baseline code. So this file defines everything
// in an anonymous namespace and calls only compiler builtins, intrinsics (which are never emitted
// out of line) and the SDK's `static inline` float16 conversion (internal linkage: one copy per file).
#include <cmath>
#include <cstdint>

#include "tessera/float16.h"
#include "vec_kernels.h"

#if defined(__F16C__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#ifndef TESSERA_CPU_ISA
#error "TESSERA_CPU_ISA must name the namespace of this copy"
#endif

namespace tessera::cpu::TESSERA_CPU_ISA {
namespace {

constexpr float kInf = __builtin_inff();
constexpr float kNaN = __builtin_nanf("");

inline float as_float(int32_t i) { return __builtin_bit_cast(float, i); }
inline int32_t as_int(float f) { return __builtin_bit_cast(int32_t, f); }

// The SDK's conversion (tessera/float16.h): internal linkage, so this copy keeps its own.
inline float half_to_float_s(uint16_t h) { return fp16::half_bits_to_float(h); }
inline uint16_t float_to_half_s(float f) { return fp16::float_to_half_bits(f); }
inline float sqrt_s(float x) { return __builtin_sqrtf(x); }
inline double sqrt_s(double x) { return __builtin_sqrt(x); }
inline float pow_s(float a, float b) { return __builtin_powf(a, b); }
inline double pow_s(double a, double b) { return __builtin_pow(a, b); }

// e^r for |r| <= ln2/2 (the reduced argument of exp_f, mul_sigmoid_f and exp_sum_f): Cephes'
// degree-6 polynomial.
inline float exp_poly_f(float r) {
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * r * r + r + 1.0f;
}

// exp: x = n ln2 + r, |r| <= ln2/2; e^r by a degree-6 polynomial; 2^n applied in two halves so
// that results down to the subnormal range stay right.
inline float exp_f(float x) {
  float xc = x < -104.0f ? -104.0f : x;
  xc = xc > 88.8f ? 88.8f : xc;
  const float t = xc * 1.44269504088896341f + 12582912.0f;
  const float n = t - 12582912.0f;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  const float y = exp_poly_f(r);
  const int32_t ni = int32_t(n);
  const int32_t n1 = ni >> 1, n2 = ni - n1;
  float res = y * as_float((n1 + 127) << 23) * as_float((n2 + 127) << 23);
  res = x > 88.72283935546875f ? kInf : res;
  res = x < -103.97f ? 0.0f : res;
  return x != x ? x : res;
}

// log: x = m 2^e with m in [sqrt(1/2), sqrt(2)); log(m) by Cephes' degree-9 polynomial in m-1.
inline float log_f(float x) {
  const float tiny = x < 1.17549435e-38f ? 1.0f : 0.0f;
  const float xs = x * (1.0f + tiny * 33554431.0f);  // 2^25: subnormals become normal
  const int32_t bits = as_int(xs);
  float fe = float(((bits >> 23) & 0xff) - 126) - 25.0f * tiny;
  float m = as_float((bits & 0x807fffff) | 0x3f000000);  // [0.5, 1)
  const float small = m < 0.707106781186547524f ? 1.0f : 0.0f;
  fe -= small;
  m = m + m * small - 1.0f;
  const float z = m * m;
  float y = 7.0376836292e-2f;
  y = y * m - 1.1514610310e-1f;
  y = y * m + 1.1676998740e-1f;
  y = y * m - 1.2420140846e-1f;
  y = y * m + 1.4249322787e-1f;
  y = y * m - 1.6668057665e-1f;
  y = y * m + 2.0000714765e-1f;
  y = y * m - 2.4999993993e-1f;
  y = y * m + 3.3333331174e-1f;
  y = y * m * z;
  y += -2.12194440e-4f * fe;
  y += -0.5f * z;
  float res = m + y;
  res += 0.693359375f * fe;
  res = x == kInf ? kInf : res;
  res = x == 0.0f ? -kInf : res;
  res = x < 0.0f ? kNaN : res;
  return x != x ? x : res;
}

inline float tanh_f(float x) {
  const float ax = x < 0 ? -x : x;
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * x + x;
  const float e = exp_f(2.0f * (ax > 44.0f ? 44.0f : ax));
  float big = 1.0f - 2.0f / (e + 1.0f);
  big = x < 0 ? -big : big;
  const float res = ax < 0.625f ? small : big;
  return x != x ? x : res;
}

// m sigmoid(x) as mul_sigmoid_v (Note [Explicit exp at the vector levels]): m/(1 + e^-|x|) for
// x > 0, m e^-|x|/(1 + e^-|x|) otherwise, with e^-|x| = y 2^n and the 2^n applied last, so that
// the negative tail keeps relative accuracy down to the subnormals.
inline float mul_sigmoid_f(float m, float x) {
  const float ax = x < 0 ? -x : x;
  const float xc = ax > 110.0f ? -110.0f : -ax;
  const float t = xc * 1.44269504088896341f + 12582912.0f;
  const float n = t - 12582912.0f;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  const float y = exp_poly_f(r);
  const int32_t ni = as_int(t) - as_int(12582912.0f);
  const float s1 = as_float(((ni >> 1) + 127) << 23), s2 = as_float((ni - (ni >> 1) + 127) << 23);
  const float q = m / (1.0f + y * s1 * s2);
  float res = x > 0 ? q : q * y * s1 * s2;
  res = x < -110.0f ? m * 0.0f : res;
  return x != x ? x : res;
}
inline float sigmoid_f(float x) { return mul_sigmoid_f(1.0f, x); }

// exp(a + b) for a + b in [-150, 2], where a carries the large part exactly and b is small: the
// range reduction subtracts n ln2 from a first (nearly exact, as a and n ln2 are close), so that
// the rounding of a + b does not cost relative accuracy. 2^n is applied in two halves (results
// down to the subnormal range), to m exp(a + b) with the rounding into the subnormals done once.
inline float exp_sum_f(float a, float b, float m = 1.0f) {
  const float t = (a + b) * 1.44269504088896341f + 12582912.0f;
  const float n = t - 12582912.0f;
  float r = a - n * 0.693359375f;
  r = r + b;
  r = r - n * -2.12194440e-4f;
  const float y = exp_poly_f(r);
  const int32_t ni = as_int(t) - as_int(12582912.0f);
  const int32_t n1 = ni >> 1, n2 = ni - n1;
  return m * y * as_float((n1 + 127) << 23) * as_float((n2 + 127) << 23);
}

// erfc for z >= 0 (Numerical Recipes' erfcc, fractional error < 1.2e-7 for all z >= 0):
// erfc(z) = t exp(-z^2 + P(t)), t = 1/(1 + z/2), with z^2 = hi + lo given split exactly; the
// exponent is evaluated by one exp_sum_f(-hi, P - lo), so that the rounding of z^2 does not cost
// relative accuracy in the tail (Cephes' erfcf splits the same way, with two exp evaluations).
inline float erfc_core_f(float z, float hi, float lo) {
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  return exp_sum_f(-hi, p - lo, t);
}

// x^2 = hi + lo exactly: hi from the top 12 mantissa bits of x, squared.
inline void square_split_f(float x, float* hi, float* lo) {
  const float xh = as_float(as_int(x) & int32_t(0xfffff000));
  const float xl = x - xh;
  *hi = xh * xh;                 // exact
  *lo = (xh + xh + xl) * xl;     // x^2 - hi
}

// erfc for 0 <= z <= 10.
inline float erfc_pos_f(float z) {
  float hi, lo;
  square_split_f(z, &hi, &lo);
  return erfc_core_f(z, hi, lo);
}

// erf below 0.5: Maclaurin series 2/sqrt(pi) (x - x^3/3 + x^5/10 - ... + x^13/9360).
inline float erf_small_f(float x) {
  const float z = x * x;
  float s = 1.0f / 9360.0f;
  s = s * -z + 1.0f / 1320.0f;
  s = s * -z + 1.0f / 216.0f;
  s = s * -z + 1.0f / 42.0f;
  s = s * -z + 1.0f / 10.0f;
  s = s * -z + 1.0f / 3.0f;
  s = s * -z + 1.0f;
  return 1.12837916709551257f * x * s;
}

// erf: the series below 0.5, 1 - erfc above (erfc(10) = 2e-45: 1 in float well before).
inline float erf_f(float x) {
  const float ax = x < 0 ? -x : x;
  float big = 1.0f - erfc_pos_f(ax > 10.0f ? 10.0f : ax);
  big = x < 0 ? -big : big;
  const float res = ax < 0.5f ? erf_small_f(x) : big;
  return x != x ? x : res;
}

// gelu(x) = x Phi(x) = x erfc(-x/sqrt2)/2 at the default level, in double with the C library's
// erfc: within 1 ulp of float everywhere. The float form this replaced (erfc_core_f from an
// exactly split x^2) reached 8.3 ulp at x = -1.3164 (found by CpuVecAccuracy.
// GeluOnASeededSliceOfEveryFloat), over the 8-ulp contract of every level. The default level is
// the fallback for CPUs without AVX2 and FMA, so exactness wins over speed here: about 32 ns of
// CPU per element on one thread (the float form took 19), against 0.4 ns for the AVX-512 kernel
// (Note [Explicit gelu at the vector levels]). Below x = -kGeluCut the result (|gelu| < 2^-150)
// is -0, as at every level; NaN propagates, gelu(inf) = inf.
constexpr float kGeluCut = 14.5f;
inline float gelu_f(float x) {
  const double xd = x < -kGeluCut ? -double(kGeluCut) : double(x);
  return float(0.5 * xd * std::erfc(xd * -0.70710678118654752440));
}

// 0.5 x (1 + tanh(u)) == x sigmoid(2u): no cancellation for negative x.
inline float gelu_tanh_f(float x) {
  return mul_sigmoid_f(x, x * (1.59576912160573071f + 0.0713548162726008f * x * x));
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

// Note [Explicit gelu at the vector levels]
// gelu (erf form) is the one transcendental kernel hot enough to be memory-bound on large
// tensors only if it is cheap, so the AVX2 and AVX-512 copies spell it out with intrinsics
// instead of relying on the vectoriser. gelu(x) = x Phi(x), Phi(-a) = erfc(a/sqrt2)/2. With
// a = min(|x|, kGeluCut):
//   m = -a Phi(-a) = g(a) e^(-a^2/2),  g(a) = -a P(a)/Q(a),
// a minimax rational of type [4/5] in a whose coefficients all have one sign (Horner never
// cancels; relative error 1.5e-8 with the float coefficients), one division. e^(-a^2/2) =
// 2^k e^(rho/2): a^2 = hx + lo exactly (an FMA), k is -a^2/(2 ln2) rounded to a multiple of 2^-B
// by the shifter (B = 5 at AVX-512, 3 at AVX2), rho = -a^2 - k 2L with 2L = float(2 ln2) in one
// fused step (the error of 2L makes the computed e^(-a^2/2) too large by at most 1 + 2.9e-7, a
// smooth factor the fit of g divides out), |rho| <= ln2/2^B. 2^frac(k) comes from a table in
// registers (AVX-512: 32 entries in two registers, one vpermt2ps; AVX2: 8 entries, one vpermd)
// and e^(rho/2) from a degree-2 (AVX-512) or degree-3 (AVX2) minimax polynomial, T + (T rho) c(rho).
// 2^floor(k) is applied to e^(-a^2/2) before the product with g: AVX-512 by vscalefps (exact, or
// one rounding below 2^-126 that the product with |g| < 0.4 shrinks), AVX2 by adding n << 23 to
// a table holding 2^(j/8) 2^64 (its bits pre-biased by -(j << 20), so that bits(sh) << 20, whose
// low bits carry j, adds as is; normal for every n the cut allows), then one product by 2^-64.
// The result is rounded once: gelu(x) = g e + max(-0, x) by one FMA (m for x < 0, x - a Phi(-a)
// for x >= 0; max(-0, x) keeps the -0 of x = -0 and of the underflowing tail, gives +0 for
// x = +0, and returns x itself for inf and NaN). Above kGeluCut, a Phi(-a) is far below half an
// ulp of x; below -kGeluCut the result is -0.
// Checked over all 2^32 inputs: at most 7.39 ulp at AVX-512 and 6.97 at AVX2 (the kernel this
// replaced, an erfc from t = 1/(1 + z/2) and a degree-9 polynomial with a table-driven exp,
// reached 7.93 and 8.22: over its bound at AVX2 at x = -1.3078347, which the sampled test
// missed). 25 vector instructions per 16 floats at AVX-512 (was 35), 29 per 8 at AVX2 (was 45);
// CpuVecAccuracy.GeluOnASeededSliceOfEveryFloat checks a different 1/61 of all floats below 16
// in magnitude on every run. The coefficients come from a minimax fit in double, then a float
// re-fit of each coefficient in turn against the rounding of the ones before (tools/fit_gelu/fit.py
// prints them; docs/performance.md, "gelu (erf) as a rational", has the timings).
#if defined(__AVX2__) && defined(__FMA__)
// GCC 12 flags the _mm512_undefined_ps() pass-through operand inside its own AVX-512 intrinsic
// headers as maybe-uninitialized (a false positive).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#if defined(__AVX512F__)
using vfloat = __m512;
constexpr int kLanes = 16;
inline vfloat vset(float v) { return _mm512_set1_ps(v); }
#define TESSERA_V(op) _mm512_##op
#else
using vfloat = __m256;
constexpr int kLanes = 8;
inline vfloat vset(float v) { return _mm256_set1_ps(v); }
#define TESSERA_V(op) _mm256_##op
#endif

// Note [Explicit exp at the vector levels]
// e^x as in exp_f (Cephes' reduction by ln2 in two parts and degree-6 polynomial, about 1 ulp), with
// n = round(x / ln2) from the 1.5 * 2^23 shifter (one FMA and one subtraction, no rounding
// instruction) and 2^n applied by vscalefps (AVX-512: one rounding, so subnormal results are right)
// or by two exponent insertions of n/2 each (AVX2: y 2^n1 is exact, the second product rounds once).
// x is clamped to [-110, 89] first: e^-104 < 2^-150 rounds to 0 (the clamp sits lower so that
// m e^x, see mul_sigmoid_v, keeps its subnormal results for |m| up to e^6) and e^89 overflows to
// inf; the clamps take x as their second operand, which max/min return when it is NaN, so NaN
// propagates.

// e^x = y 2^n with y in [0.7, 1.42] (n kept as the shifter sum t = n + 1.5 * 2^23).
struct ExpParts {
  vfloat y, t;
};
inline ExpParts exp_parts_v(vfloat x) {
  vfloat xc = TESSERA_V(max_ps)(vset(-110.0f), x);
  xc = TESSERA_V(min_ps)(vset(89.0f), xc);
  const vfloat t = TESSERA_V(fmadd_ps)(xc, vset(1.44269504088896341f), vset(12582912.0f));
  const vfloat n = TESSERA_V(sub_ps)(t, vset(12582912.0f));
  vfloat r = TESSERA_V(fnmadd_ps)(n, vset(0.693359375f), xc);
  r = TESSERA_V(fnmadd_ps)(n, vset(-2.12194440e-4f), r);
  vfloat q = vset(1.9875691500e-4f);
  q = TESSERA_V(fmadd_ps)(q, r, vset(1.3981999507e-3f));
  q = TESSERA_V(fmadd_ps)(q, r, vset(8.3334519073e-3f));
  q = TESSERA_V(fmadd_ps)(q, r, vset(4.1665795894e-2f));
  q = TESSERA_V(fmadd_ps)(q, r, vset(1.6666665459e-1f));
  q = TESSERA_V(fmadd_ps)(q, r, vset(5.0000001201e-1f));
  const vfloat y = TESSERA_V(fmadd_ps)(q, TESSERA_V(mul_ps)(r, r), r);
  return {TESSERA_V(add_ps)(y, vset(1.0f)), t};
}

// m 2^n for the n of `e`, rounded once, also into the subnormals (at AVX2 as long as m 2^(n/2) is a
// normal float, which holds for every caller: m is not tiny where n is very negative).
inline vfloat ldexp_v(vfloat m, const ExpParts& e) {
#if defined(__AVX512F__)
  return _mm512_scalef_ps(m, _mm512_sub_ps(e.t, vset(12582912.0f)));
#else
  const __m256i ni = _mm256_sub_epi32(_mm256_castps_si256(e.t), _mm256_castps_si256(vset(12582912.0f)));
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const vfloat s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
  const vfloat s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
  return _mm256_mul_ps(_mm256_mul_ps(m, s1), s2);
#endif
}

inline vfloat exp_v(vfloat x) {
  const ExpParts e = exp_parts_v(x);
  return ldexp_v(e.y, e);
}

inline vfloat abs_v(vfloat x) {
#if defined(__AVX512F__)
  return _mm512_abs_ps(x);
#else
  return _mm256_andnot_ps(vset(-0.0f), x);
#endif
}

// 1/d for d in [1, 2] (sigmoid's 1 + e^-|x|): the reciprocal estimate and one Newton
// step in the residual form t + t (1 - d t), which rounds once at the end (about 0.5 ulp over the
// estimate's 2^-14 or 2^-12 squared); AVX2's 12-bit estimate leaves 2^-24 before rounding, so it
// divides instead.
inline vfloat recip_v(vfloat d) {
#if defined(__AVX512F__)
  const vfloat t = _mm512_rcp14_ps(d);
  return _mm512_fmadd_ps(t, _mm512_fnmadd_ps(d, t, vset(1.0f)), t);
#else
  return _mm256_div_ps(vset(1.0f), d);
#endif
}

inline vfloat gelu_v(vfloat x) {
#if defined(__AVX512F__)
  // min(|x|, kGeluCut): vrangeps, absolute minimum with the sign cleared (a NaN stays a NaN).
  const vfloat a = _mm512_range_ps(x, vset(kGeluCut), 0x0A);
#else
  const vfloat a = TESSERA_V(min_ps)(vset(kGeluCut), abs_v(x));
#endif
  vfloat p = TESSERA_V(fmadd_ps)(a, vset(-4.135251045e-03f), vset(-4.078765586e-02f));
  p = TESSERA_V(fmadd_ps)(p, a, vset(-1.837376952e-01f));
  p = TESSERA_V(fmadd_ps)(p, a, vset(-4.390516281e-01f));
  p = TESSERA_V(fmadd_ps)(p, a, vset(-0.5f));
  p = TESSERA_V(mul_ps)(p, a);
  vfloat q = TESSERA_V(fmadd_ps)(a, vset(1.036544610e-02f), vset(1.022452116e-01f));
  q = TESSERA_V(fmadd_ps)(q, a, vset(4.707871079e-01f));
  q = TESSERA_V(fmadd_ps)(q, a, vset(1.204716325e+00f));
  q = TESSERA_V(fmadd_ps)(q, a, vset(1.675988078e+00f));
  q = TESSERA_V(fmadd_ps)(q, a, vset(1.0f));
  const vfloat g = TESSERA_V(div_ps)(p, q);
#if defined(__AVX512F__)
  constexpr int kBits = 5;
#else
  constexpr int kBits = 3;
#endif
  constexpr float kShifter = 1.5f * float(1 << (23 - kBits));
  const vfloat hx = TESSERA_V(mul_ps)(a, a);
  const vfloat lo = TESSERA_V(fmsub_ps)(a, a, hx);
  const vfloat sh = TESSERA_V(fmadd_ps)(hx, vset(-0.721347520444481703f), vset(kShifter));
  const vfloat k = TESSERA_V(sub_ps)(sh, vset(kShifter));
  const vfloat rho = TESSERA_V(sub_ps)(TESSERA_V(fnmsub_ps)(k, vset(1.386294365e+00f), hx), lo);
#if defined(__AVX512F__)
  const vfloat tab = _mm512_permutex2var_ps(
      _mm512_setr_ps(1.000000000e+00f, 1.021897197e+00f, 1.044273734e+00f, 1.067140460e+00f,
                     1.090507746e+00f, 1.114386797e+00f, 1.138788581e+00f, 1.163724899e+00f,
                     1.189207077e+00f, 1.215247393e+00f, 1.241857767e+00f, 1.269050956e+00f,
                     1.296839595e+00f, 1.325236678e+00f, 1.354255557e+00f, 1.383909941e+00f),
      _mm512_castps_si512(sh),
      _mm512_setr_ps(1.414213538e+00f, 1.445180774e+00f, 1.476826191e+00f, 1.509164453e+00f,
                     1.542210817e+00f, 1.575980902e+00f, 1.610490322e+00f, 1.645755529e+00f,
                     1.681792855e+00f, 1.718619347e+00f, 1.756252170e+00f, 1.794709086e+00f,
                     1.834008098e+00f, 1.874167681e+00f, 1.915206552e+00f, 1.957144141e+00f));
  const vfloat c = _mm512_fmadd_ps(rho, vset(1.250001341e-01f), vset(5.000073314e-01f));
  const vfloat e = _mm512_scalef_ps(_mm512_fmadd_ps(_mm512_mul_ps(tab, rho), c, tab), k);
#else
  const __m256i tb = _mm256_permutevar8x32_epi32(
      _mm256_setr_epi32(0x5f800000, 0x5f7b95c2, 0x5f7837f0, 0x5f75fed7, 0x5f7504f3, 0x5f75672a,
                        0x5f7744fd, 0x5f7ac0c7),
      _mm256_castps_si256(sh));
  const vfloat tab = _mm256_castsi256_ps(_mm256_add_epi32(tb, _mm256_slli_epi32(_mm256_castps_si256(sh), 20)));
  vfloat c = _mm256_fmadd_ps(rho, vset(2.083035931e-02f), vset(1.250162572e-01f));
  c = _mm256_fmadd_ps(c, rho, vset(0.5f));
  const vfloat e = _mm256_mul_ps(_mm256_fmadd_ps(_mm256_mul_ps(tab, rho), c, tab), vset(0x1p-64f));
#endif
  return TESSERA_V(fmadd_ps)(g, e, TESSERA_V(max_ps)(vset(-0.0f), x));
}

// m sigmoid(x): m/(1 + e^-|x|) for x > 0 and m e^-|x|/(1 + e^-|x|) otherwise. e^-|x| never
// overflows, so the negative tail keeps relative accuracy down to the subnormals (1/(1 + e^-x) is 0
// below x = -88.7), m y/(1 + e^-|x|) is scaled by 2^n with one rounding, and the reciprocal only
// sees [1, 2].
inline vfloat mul_sigmoid_v(vfloat m, vfloat x) {
  const ExpParts e = exp_parts_v(TESSERA_V(sub_ps)(vset(0.0f), abs_v(x)));
  const vfloat q = TESSERA_V(mul_ps)(m, recip_v(TESSERA_V(add_ps)(vset(1.0f), ldexp_v(e.y, e))));
  const vfloat neg = ldexp_v(TESSERA_V(mul_ps)(q, e.y), e);
  // Below x = -110 |m sigmoid(x)| < 2^-150 for |m| < e^6: m 0 (NaN for an infinite m, as m e^x gives).
#if defined(__AVX512F__)
  const vfloat res = _mm512_mask_mov_ps(q, _mm512_cmp_ps_mask(x, vset(0.0f), _CMP_NGT_UQ), neg);
  return _mm512_mask_mul_ps(res, _mm512_cmp_ps_mask(x, vset(-110.0f), _CMP_LT_OQ), m, vset(0.0f));
#else
  const vfloat res = _mm256_blendv_ps(q, neg, _mm256_cmp_ps(x, vset(0.0f), _CMP_NGT_UQ));
  return _mm256_blendv_ps(res, _mm256_mul_ps(m, vset(0.0f)), _mm256_cmp_ps(x, vset(-110.0f), _CMP_LT_OQ));
#endif
}

inline vfloat sigmoid_v(vfloat x) { return mul_sigmoid_v(vset(1.0f), x); }
inline vfloat silu_v(vfloat x) { return mul_sigmoid_v(x, x); }

// 0.5 x (1 + tanh(u)) == x sigmoid(2u), 2u = x (2 sqrt(2/pi) + 2 sqrt(2/pi) 0.044715 x^2): no
// cancellation for negative x.
inline vfloat gelu_tanh_v(vfloat x) {
  const vfloat x2 = TESSERA_V(mul_ps)(x, x);
  return mul_sigmoid_v(x, TESSERA_V(mul_ps)(x, TESSERA_V(fmadd_ps)(x2, vset(0.0713548162726008f),
                                                                   vset(1.59576912160573071f))));
}
#undef TESSERA_V

template <bool Stream>
inline void store_v(float* p, vfloat v) {
#if defined(__AVX512F__)
  if constexpr (Stream)
    _mm512_stream_ps(p, v);
  else
    _mm512_storeu_ps(p, v);
#else
  if constexpr (Stream)
    _mm256_stream_ps(p, v);
  else
    _mm256_storeu_ps(p, v);
#endif
}

inline vfloat loadu_v(const float* p) {
#if defined(__AVX512F__)
  return _mm512_loadu_ps(p);
#else
  return _mm256_loadu_ps(p);
#endif
}

// dst[i] = f(src[i]) for i in [0, m), 0 < m < kLanes, touching no memory at or past src + m, dst + m.
template <typename F>
inline void unary_vec_tail(const float* src, float* dst, int64_t m, F f) {
#if defined(__AVX512F__)
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
#define TESSERA_CPU_HAS_VECTOR_TRANSCENDENTALS 1
#pragma GCC diagnostic pop
#endif  // __AVX2__ && __FMA__

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
TESSERA_CPU_UNARY(u_tanh, tanh_f(x))
TESSERA_CPU_UNARY(u_relu, (x != x || x > 0.0f) ? x : 0.0f)
#ifndef TESSERA_CPU_HAS_VECTOR_TRANSCENDENTALS
TESSERA_CPU_UNARY(u_exp, exp_f(x))
TESSERA_CPU_UNARY(u_sigmoid, sigmoid_f(x))
TESSERA_CPU_UNARY(u_gelu, gelu_f(x))
TESSERA_CPU_UNARY(u_gelu_tanh, gelu_tanh_f(x))
TESSERA_CPU_UNARY(u_silu, mul_sigmoid_f(x, x))
#endif
TESSERA_CPU_UNARY(u_erf, erf_f(x))
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
     u_gelu_tanh, u_silu, u_erf},
    bf16_to_f32, f32_to_bf16, f16_to_f32, f32_to_f16,
    sum_f32, sum_f64, max_f32, min_f32, accumulate_f32, accumulate_f64,
};

}  // namespace

const VecKernels* table() { return &kTable; }

}  // namespace tessera::cpu::TESSERA_CPU_ISA
