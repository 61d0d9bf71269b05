// tessera/vecmath/vecmath.h: the float math of the CPU plugin's eager kernels and of the code
// the C++ code generator emits (Note [One vector math]). Header-only, self-contained (standard and
// intrinsic headers only), C++20, GCC or Clang.
//
// Note [One vector math]
// One set of float transcendental functions serves both ways a CPU tensor is computed: the CPU
// plugin's per-ISA kernel tables (plugins/cpu/src/vec_kernels_isa.cpp, Note [CPU ISA selection])
// and the fused loops of tessera::compile's C++ backend (docs/compile.md). Compiled and eager
// therefore give the same numbers, and the accuracy tests of the plugin's tables
// (tests/cpu/test_cpu_vec_accuracy.cpp: every level, the whole float range, a seeded slice of
// every float for gelu) cover the functions the generated code calls.
// The level is chosen by the macros of the translation unit's target flags, never assumed:
//   TESSERA_VECMATH_LEVEL 2  AVX-512 (F, DQ, BW, VL) with FMA: 16 lanes
//                         1  AVX2 with FMA: 8 lanes
//                         0  scalar: the *_f functions only, `vf` is a float
// A program that runs on unknown CPUs compiles one copy per level and picks one at run time
// from cpuid (the plugin's tables; the code generator compiles for the level the host reports).
// What each level gives:
//   - scalar *_f functions (every level): exp, log, tanh, sigmoid, m sigmoid, erf, gelu,
//     gelu_tanh, branch-free so that `#pragma omp simd` loops over them vectorise;
//   - vector *_v functions (levels 1, 2): exp, tanh, sigmoid, silu, gelu, gelu_tanh in intrinsics
//     (Note [Explicit exp at the vector levels], Note [Explicit gelu at the vector levels]);
//   - the `vf` lane interface (every level) that generated loops are written in: vf_load/vf_store
//     (and _n forms for a tail of m < kVfLanes elements, _bf16 forms for bfloat16 memory),
//     arithmetic, and one function per pointwise op (vf_exp, vf_gelu, vf_tanh, ...). An op without
//     an explicit vector form (erf, log, sin, cos, pow) applies its *_f function to the lanes in a
//     `#pragma omp simd` loop, which the compiler vectorises as it does the eager kernel's loop.
// Every function has internal linkage (static) and the types live in a namespace named after the
// level: a translation unit compiled with AVX-512 flags never hands an out-of-line copy of a
// function to code compiled for a lesser CPU (Note [No shared inline code in ISA copies] in
// plugins/cpu/src/vec_kernels_isa.cpp). The C++ code generator pastes this file verbatim into
// every generated source (so it needs no include path at run time, in a build tree or after
// installation, and the compile cache key covers it); keep it free of Tessera includes.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__FMA__)
#define TESSERA_VECMATH_LEVEL 2
#define TESSERA_VECMATH_AVX512 1
#elif defined(__AVX2__) && defined(__FMA__)
#define TESSERA_VECMATH_LEVEL 1
#define TESSERA_VECMATH_AVX512 0
#else
#define TESSERA_VECMATH_LEVEL 0
#define TESSERA_VECMATH_AVX512 0
#endif
#if TESSERA_VECMATH_LEVEL >= 1
#include <immintrin.h>
#endif

#define TESSERA_VM_INLINE static inline

namespace tessera::vecmath {
#if TESSERA_VECMATH_LEVEL == 2
inline namespace avx512 {
#elif TESSERA_VECMATH_LEVEL == 1
inline namespace avx2 {
#else
inline namespace scalar {
#endif

// ---- Scalar functions (every level) ----

constexpr float kInf = __builtin_inff();
constexpr float kNaN = __builtin_nanf("");

TESSERA_VM_INLINE float as_float(int32_t i) { return __builtin_bit_cast(float, i); }
TESSERA_VM_INLINE int32_t as_int(float f) { return __builtin_bit_cast(int32_t, f); }

// Note [Explicit multiply-adds]
// a * b + c, fused where the target has FMA and not where it has none, whatever the optimisation
// level and instrumentation of the including file. Left to the compiler's contraction, the same
// polynomial was fused in the release plugin and in generated code but not in a sanitizer build's
// plugin, and eager and compiled erf then differed by an ulp. The scalar *_f polynomials that
// generated code and eager kernels both evaluate (through vf_map) are written with it.
TESSERA_VM_INLINE float mul_add_f(float a, float b, float c) {
#if defined(__FMA__)
  return __builtin_fmaf(a, b, c);
#else
  return a * b + c;
#endif
}

// e^r for |r| <= ln2/2 (the reduced argument of exp_f, mul_sigmoid_f and exp_sum_f): Cephes'
// degree-6 polynomial.
TESSERA_VM_INLINE float exp_poly_f(float r) {
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
TESSERA_VM_INLINE float exp_f(float x) {
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
TESSERA_VM_INLINE float log_f(float x) {
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

TESSERA_VM_INLINE float tanh_f(float x) {
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
TESSERA_VM_INLINE float mul_sigmoid_f(float m, float x) {
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
TESSERA_VM_INLINE float sigmoid_f(float x) { return mul_sigmoid_f(1.0f, x); }

// exp(a + b) for a + b in [-150, 2], where a carries the large part exactly and b is small: the
// range reduction subtracts n ln2 from a first (nearly exact, as a and n ln2 are close), so that
// the rounding of a + b does not cost relative accuracy. 2^n is applied in two halves (results
// down to the subnormal range), to m exp(a + b) with the rounding into the subnormals done once.
TESSERA_VM_INLINE float exp_sum_f(float a, float b, float m = 1.0f) {
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
TESSERA_VM_INLINE float erfc_core_f(float z, float hi, float lo) {
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = mul_add_f(p, t, -0.82215223f);
  p = mul_add_f(p, t, 1.48851587f);
  p = mul_add_f(p, t, -1.13520398f);
  p = mul_add_f(p, t, 0.27886807f);
  p = mul_add_f(p, t, -0.18628806f);
  p = mul_add_f(p, t, 0.09678418f);
  p = mul_add_f(p, t, 0.37409196f);
  p = mul_add_f(p, t, 1.00002368f);
  p = mul_add_f(p, t, -1.26551223f);
  return exp_sum_f(-hi, p - lo, t);
}

// x^2 = hi + lo exactly: hi from the top 12 mantissa bits of x, squared.
TESSERA_VM_INLINE void square_split_f(float x, float* hi, float* lo) {
  const float xh = as_float(as_int(x) & int32_t(0xfffff000));
  const float xl = x - xh;
  *hi = xh * xh;                 // exact
  *lo = (xh + xh + xl) * xl;     // x^2 - hi
}

// erfc for 0 <= z <= 10.
TESSERA_VM_INLINE float erfc_pos_f(float z) {
  float hi, lo;
  square_split_f(z, &hi, &lo);
  return erfc_core_f(z, hi, lo);
}

// erf below 0.5: Maclaurin series 2/sqrt(pi) (x - x^3/3 + x^5/10 - ... + x^13/9360).
TESSERA_VM_INLINE float erf_small_f(float x) {
  const float z = x * x;
  float s = 1.0f / 9360.0f;
  s = mul_add_f(s, -z, 1.0f / 1320.0f);
  s = mul_add_f(s, -z, 1.0f / 216.0f);
  s = mul_add_f(s, -z, 1.0f / 42.0f);
  s = mul_add_f(s, -z, 1.0f / 10.0f);
  s = mul_add_f(s, -z, 1.0f / 3.0f);
  s = mul_add_f(s, -z, 1.0f);
  return 1.12837916709551257f * x * s;
}

// erf: the series below 0.5, 1 - erfc above (erfc(10) = 2e-45: 1 in float well before).
TESSERA_VM_INLINE float erf_f(float x) {
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
TESSERA_VM_INLINE float gelu_f(float x) {
  const double xd = x < -kGeluCut ? -double(kGeluCut) : double(x);
  return float(0.5 * xd * std::erfc(xd * -0.70710678118654752440));
}

// 0.5 x (1 + tanh(u)) == x sigmoid(2u): no cancellation for negative x.
TESSERA_VM_INLINE float gelu_tanh_f(float x) {
  return mul_sigmoid_f(x, x * (1.59576912160573071f + 0.0713548162726008f * x * x));
}

// ---- Vector functions (AVX2, AVX-512) ----

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
#if TESSERA_VECMATH_LEVEL >= 1
// GCC 12 flags the _mm512_undefined_ps() pass-through operand inside its own AVX-512 intrinsic
// headers as maybe-uninitialized (a false positive).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#if TESSERA_VECMATH_AVX512
using vfloat = __m512;
constexpr int kLanes = 16;
TESSERA_VM_INLINE vfloat vset(float v) { return _mm512_set1_ps(v); }
#define TESSERA_V(op) _mm512_##op
#else
using vfloat = __m256;
constexpr int kLanes = 8;
TESSERA_VM_INLINE vfloat vset(float v) { return _mm256_set1_ps(v); }
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

// e^x = y 2^n with y in [0.7, 1.42]. AVX-512 keeps n as a float (vscalefps takes it as it is);
// AVX2 keeps the shifter sum t = n + 1.5 * 2^23, whose low bits are n.
#if TESSERA_VECMATH_AVX512
struct ExpParts {
  vfloat y, n;
};
#else
struct ExpParts {
  vfloat y, t;
};
#endif
TESSERA_VM_INLINE ExpParts exp_parts_v(vfloat x) {
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
#if TESSERA_VECMATH_AVX512
  return {TESSERA_V(add_ps)(y, vset(1.0f)), n};
#else
  return {TESSERA_V(add_ps)(y, vset(1.0f)), t};
#endif
}

// Note [Table-driven exp for sigmoid and tanh]
// sigmoid and tanh spend most of their work in e^x, and their bounds (3 and 2 ulp) leave room
// for an exp a little less exact than exp_v's (1 ulp). At AVX-512 they take e^x from a table:
// x = (k/32) ln2 + r with k an integer and |r| <= ln2/64: the 1.5 * 2^18 shifter on x/ln2 rounds to
// a multiple of 1/32, so k/32 is the shifter sum less the shifter, already the float vscalefps
// takes (it floors it), and the low 5 bits of the sum's pattern are k mod 32; r = x - (k/32) ln2
// with ln2 in Cephes' two parts (the first with 9 bits, so that k/32 times it is exact). e^x =
// 2^floor(k/32) T[k mod 32] e^r with T[j] = 2^(j/32) rounded to float (the 32 entries in two
// registers, one vpermt2ps on the low bits of the shifter sum, as gelu's table) and e^r = 1 + r +
// r^2/2 + r^3/6 (truncation below 6e-10), applied as T + T (r (1 + r (1/2 + r/6)) + c[j]) where
// c[j] = (2^(j/32) - T[j]) / T[j] (a second table) puts back the rounding of the entry, so that the
// result is rounded about once. 10 vector instructions (12 with the clamps) against exp_parts_v's
// 14, and no long Horner chain, for sigmoid, silu, gelu_tanh and tanh. AVX2 keeps exp_parts_v
// (its 8-entry permutes would need a longer polynomial).
// Where the time went (BM_GeluChain16M's loop, tanh, gelu and sigmoid per element, L1-resident, one
// thread; docs/performance.md has the figures): the table itself took the chain from 0.77 to 0.68
// ns per element on Zen 5. On an Intel Xeon whose AVX-512 runs about two vector instructions per
// cycle the loop is bound by their count, not by latency or the dividers (a reciprocal estimate and
// a Newton step in place of a division was no faster there), so every instruction counts: the k/32
// shifter (no product by 1/32), no clamps where the caller bounds the argument (tanh's
// min(|x|, 44), sigmoid's -|x| <= 0), tanh's 2|x| folded into the constants (kScale), -|x| as one
// OR, tanh's sign as one vpternlogd, no fix-up of sigmoid's far tail (it rounds to +0 by itself)
// and no NaN blend in tanh (NaN flows through) took it from 1.39 to 1.19 ns per element there. Each
// of these gives the same float as before for every non-NaN input (checked over all 2^32 inputs
// for sigmoid, tanh, silu, gelu_tanh and gelu against the previous code; a NaN input still gives a
// NaN, with another payload).
#if TESSERA_VECMATH_AVX512
// 2^(j/32) rounded to float for j = the low 5 bits of `t`'s bit pattern (a shifter sum): the 32
// entries in two registers, one vpermt2ps (gelu's exponential and exp_parts_table_v).
TESSERA_VM_INLINE vfloat exp2_32nds_v(vfloat t) {
  return _mm512_permutex2var_ps(
      _mm512_setr_ps(1.000000000e+00f, 1.021897197e+00f, 1.044273734e+00f, 1.067140460e+00f,
                     1.090507746e+00f, 1.114386797e+00f, 1.138788581e+00f, 1.163724899e+00f,
                     1.189207077e+00f, 1.215247393e+00f, 1.241857767e+00f, 1.269050956e+00f,
                     1.296839595e+00f, 1.325236678e+00f, 1.354255557e+00f, 1.383909941e+00f),
      _mm512_castps_si512(t),
      _mm512_setr_ps(1.414213538e+00f, 1.445180774e+00f, 1.476826191e+00f, 1.509164453e+00f,
                     1.542210817e+00f, 1.575980902e+00f, 1.610490322e+00f, 1.645755529e+00f,
                     1.681792855e+00f, 1.718619347e+00f, 1.756252170e+00f, 1.794709086e+00f,
                     1.834008098e+00f, 1.874167681e+00f, 1.915206552e+00f, 1.957144141e+00f));
}
#endif

// The table-driven e^(s x) for s a power of two and x in [-110/s, 89/s] or NaN: the callers bound
// their arguments (no clamps here), and tanh folds its 2|x| into the constants. With s = 2^j every
// constant below is the s = 1 one scaled by a power of two (k is the same, r comes out as r/s
// exactly, and 1/6 s^3, s^2/2, s are float(1/6), 1/2, 1 scaled), so the result is the same float
// as for s = 1 and the argument s x.
template <int kScale = 1>
TESSERA_VM_INLINE ExpParts exp_parts_table_v(vfloat xc) {
#if TESSERA_VECMATH_AVX512
  static_assert(kScale == 1 || kScale == 2, "a power of two the constants below are exact for");
  constexpr float s = float(kScale);
  // The shifter 1.5 * 2^18 rounds x 1/ln2 to a multiple of 1/32: k/32 comes out as a float, for
  // vscalefps as it is, and the low 5 bits of t's pattern are k mod 32.
  const vfloat t = _mm512_fmadd_ps(xc, vset(1.44269504088896341f * s), vset(393216.0f));
  const vfloat k32 = _mm512_sub_ps(t, vset(393216.0f));
  vfloat r = _mm512_fnmadd_ps(k32, vset(0.693359375f / s), xc);
  r = _mm512_fnmadd_ps(k32, vset(-2.12194440e-4f / s), r);
  const vfloat tab = exp2_32nds_v(t);
  // (2^(j/32) - T[j]) / T[j]: the rounding of each entry, added back in the sum below.
  const vfloat corr = _mm512_permutex2var_ps(
      _mm512_setr_ps(0.000000000e+00f, -4.708457624e-08f, 4.628547146e-08f, -5.560422522e-08f,
                     -1.199215749e-08f, -4.877606230e-08f, 4.729782432e-08f, -3.481442690e-08f,
                     3.193418152e-08f, -2.688666534e-08f, 3.621057232e-08f, 1.118421022e-09f,
                     -3.099071932e-08f, -2.638300955e-08f, -7.475213337e-09f, -4.245635665e-08f),
      _mm512_castps_si512(t),
      _mm512_setr_ps(1.711427089e-08f, 2.300196655e-08f, -3.047683350e-08f, -1.653853765e-08f,
                     5.233334210e-09f, -3.592064601e-08f, 6.107591766e-09f, -3.114054437e-08f,
                     -1.471960509e-08f, -2.821810163e-08f, -5.258795177e-09f, -6.360387328e-09f,
                     -6.128259677e-09f, -2.488040884e-08f, 5.140609272e-09f, -8.697266907e-09f));
  vfloat q = _mm512_fmadd_ps(r, vset(0.1666666716f * s * s * s), vset(0.5f * s * s));
  q = _mm512_fmadd_ps(q, r, vset(s));
  return {_mm512_fmadd_ps(tab, _mm512_fmadd_ps(r, q, corr), tab), k32};
#else
  return exp_parts_v(kScale == 1 ? xc : TESSERA_V(mul_ps)(vset(float(kScale)), xc));
#endif
}

// m 2^n for the n of `e`, rounded once, also into the subnormals (at AVX2 as long as m 2^(n/2) is a
// normal float, which holds for every caller: m is not tiny where n is very negative).
TESSERA_VM_INLINE vfloat ldexp_v(vfloat m, const ExpParts& e) {
#if TESSERA_VECMATH_AVX512
  return _mm512_scalef_ps(m, e.n);
#else
  const __m256i ni = _mm256_sub_epi32(_mm256_castps_si256(e.t), _mm256_castps_si256(vset(12582912.0f)));
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const vfloat s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
  const vfloat s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
  return _mm256_mul_ps(_mm256_mul_ps(m, s1), s2);
#endif
}

TESSERA_VM_INLINE vfloat exp_v(vfloat x) {
  const ExpParts e = exp_parts_v(x);
  return ldexp_v(e.y, e);
}

TESSERA_VM_INLINE vfloat abs_v(vfloat x) {
#if TESSERA_VECMATH_AVX512
  return _mm512_abs_ps(x);
#else
  return _mm256_andnot_ps(vset(-0.0f), x);
#endif
}

// 1/d for d in [1, 2] (sigmoid's 1 + e^-|x|): the reciprocal estimate and one Newton
// step in the residual form t + t (1 - d t), which rounds once at the end (about 0.5 ulp over the
// estimate's 2^-14 or 2^-12 squared); AVX2's 12-bit estimate leaves 2^-24 before rounding, so it
// divides instead.
TESSERA_VM_INLINE vfloat recip_v(vfloat d) {
#if TESSERA_VECMATH_AVX512
  const vfloat t = _mm512_rcp14_ps(d);
  return _mm512_fmadd_ps(t, _mm512_fnmadd_ps(d, t, vset(1.0f)), t);
#else
  return _mm256_div_ps(vset(1.0f), d);
#endif
}

TESSERA_VM_INLINE vfloat gelu_v(vfloat x) {
#if TESSERA_VECMATH_AVX512
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
#if TESSERA_VECMATH_AVX512
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
#if TESSERA_VECMATH_AVX512
  const vfloat tab = exp2_32nds_v(sh);
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
// -|x| in one instruction (the sign bit set); NaN stays NaN.
TESSERA_VM_INLINE vfloat neg_abs_v(vfloat x) { return TESSERA_V(or_ps)(x, vset(-0.0f)); }

// kUnitM: m is 1 (sigmoid), so the tail below x = -110 needs no fix-up: e^-110 2^n rounds to +0
// there by itself, which is what m 0 gives.
template <bool kUnitM>
TESSERA_VM_INLINE vfloat mul_sigmoid_impl_v(vfloat m, vfloat x) {
  // -|x| <= 0 (or NaN), so only the lower clamp applies; max returns its second operand, a NaN.
  const ExpParts e = exp_parts_table_v(TESSERA_V(max_ps)(vset(-110.0f), neg_abs_v(x)));
  const vfloat r = recip_v(TESSERA_V(add_ps)(vset(1.0f), ldexp_v(e.y, e)));
  const vfloat q = kUnitM ? r : TESSERA_V(mul_ps)(m, r);
  const vfloat neg = ldexp_v(TESSERA_V(mul_ps)(q, e.y), e);
#if TESSERA_VECMATH_AVX512
  const vfloat res = _mm512_mask_mov_ps(q, _mm512_cmp_ps_mask(x, vset(0.0f), _CMP_NGT_UQ), neg);
#else
  const vfloat res = _mm256_blendv_ps(q, neg, _mm256_cmp_ps(x, vset(0.0f), _CMP_NGT_UQ));
#endif
  if constexpr (kUnitM) return res;
  // Below x = -110 |m sigmoid(x)| < 2^-150 for |m| < e^6: m 0 (NaN for an infinite m, as m e^x gives).
#if TESSERA_VECMATH_AVX512
  return _mm512_mask_mul_ps(res, _mm512_cmp_ps_mask(x, vset(-110.0f), _CMP_LT_OQ), m, vset(0.0f));
#else
  return _mm256_blendv_ps(res, _mm256_mul_ps(m, vset(0.0f)), _mm256_cmp_ps(x, vset(-110.0f), _CMP_LT_OQ));
#endif
}

TESSERA_VM_INLINE vfloat mul_sigmoid_v(vfloat m, vfloat x) { return mul_sigmoid_impl_v<false>(m, x); }
TESSERA_VM_INLINE vfloat sigmoid_v(vfloat x) { return mul_sigmoid_impl_v<true>(vset(1.0f), x); }
TESSERA_VM_INLINE vfloat silu_v(vfloat x) { return mul_sigmoid_v(x, x); }

// tanh as tanh_f, with the table-driven exp: an odd polynomial in x below |x| = 0.625,
// 1 - 2/(e^2|x| + 1) with the sign of x above (|x| clamped to 44, where the result is 1). A NaN
// flows through the second form (min returns its second operand, a NaN) and comes out a NaN.
TESSERA_VM_INLINE vfloat tanh_v(vfloat x) {
  const vfloat ax = abs_v(x);
  const vfloat z = TESSERA_V(mul_ps)(x, x);
  vfloat p = TESSERA_V(fmadd_ps)(vset(-5.70498872745e-3f), z, vset(2.06390887954e-2f));
  p = TESSERA_V(fmadd_ps)(p, z, vset(-5.37397155531e-2f));
  p = TESSERA_V(fmadd_ps)(p, z, vset(1.33314422036e-1f));
  p = TESSERA_V(fmadd_ps)(p, z, vset(-3.33332819422e-1f));
  const vfloat small = TESSERA_V(fmadd_ps)(TESSERA_V(mul_ps)(p, z), x, x);
  // e^(2 min(|x|, 44)): in range for the table without its clamps, the 2 folded into its constants.
  const ExpParts ep = exp_parts_table_v<2>(TESSERA_V(min_ps)(vset(44.0f), ax));
  const vfloat e = ldexp_v(ep.y, ep);
  const vfloat big = TESSERA_V(sub_ps)(vset(1.0f), TESSERA_V(div_ps)(vset(2.0f), TESSERA_V(add_ps)(e, vset(1.0f))));
#if TESSERA_VECMATH_AVX512
  // big >= 0 takes the sign of x: big | (x & -0), one vpternlogd.
  const vfloat sbig = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(
      _mm512_castps_si512(big), _mm512_castps_si512(x), _mm512_castps_si512(vset(-0.0f)), 0xF8));
  // |x| < 0.625 (false for NaN): the polynomial.
  return _mm512_mask_mov_ps(sbig, _mm512_cmp_ps_mask(ax, vset(0.625f), _CMP_LT_OQ), small);
#else
  const vfloat sbig = _mm256_or_ps(big, _mm256_and_ps(x, vset(-0.0f)));
  return _mm256_blendv_ps(sbig, small, _mm256_cmp_ps(ax, vset(0.625f), _CMP_LT_OQ));
#endif
}

// 0.5 x (1 + tanh(u)) == x sigmoid(2u), 2u = x (2 sqrt(2/pi) + 2 sqrt(2/pi) 0.044715 x^2): no
// cancellation for negative x.
TESSERA_VM_INLINE vfloat gelu_tanh_v(vfloat x) {
  const vfloat x2 = TESSERA_V(mul_ps)(x, x);
  return mul_sigmoid_v(x, TESSERA_V(mul_ps)(x, TESSERA_V(fmadd_ps)(x2, vset(0.0713548162726008f),
                                                                   vset(1.59576912160573071f))));
}

template <bool Stream>
TESSERA_VM_INLINE void store_v(float* p, vfloat v) {
#if TESSERA_VECMATH_AVX512
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

TESSERA_VM_INLINE vfloat loadu_v(const float* p) {
#if TESSERA_VECMATH_AVX512
  return _mm512_loadu_ps(p);
#else
  return _mm256_loadu_ps(p);
#endif
}

// ---- The lane interface of generated loops (every level) ----

using vf = vfloat;
constexpr int kVfLanes = kLanes;
TESSERA_VM_INLINE vf vf_set(float v) { return vset(v); }
TESSERA_VM_INLINE vf vf_load(const float* p) { return loadu_v(p); }
TESSERA_VM_INLINE void vf_store(float* p, vf v) { store_v<false>(p, v); }
TESSERA_VM_INLINE vf vf_add(vf a, vf b) { return TESSERA_V(add_ps)(a, b); }
TESSERA_VM_INLINE vf vf_sub(vf a, vf b) { return TESSERA_V(sub_ps)(a, b); }
TESSERA_VM_INLINE vf vf_mul(vf a, vf b) { return TESSERA_V(mul_ps)(a, b); }
TESSERA_VM_INLINE vf vf_div(vf a, vf b) { return TESSERA_V(div_ps)(a, b); }
TESSERA_VM_INLINE vf vf_neg(vf a) { return TESSERA_V(xor_ps)(a, vset(-0.0f)); }
TESSERA_VM_INLINE vf vf_abs(vf a) { return abs_v(a); }
TESSERA_VM_INLINE vf vf_sqrt(vf a) { return TESSERA_V(sqrt_ps)(a); }
TESSERA_VM_INLINE vf vf_exp(vf a) { return exp_v(a); }
TESSERA_VM_INLINE vf vf_sigmoid(vf a) { return sigmoid_v(a); }
TESSERA_VM_INLINE vf vf_silu(vf a) { return silu_v(a); }
TESSERA_VM_INLINE vf vf_gelu(vf a) { return gelu_v(a); }
TESSERA_VM_INLINE vf vf_gelu_tanh(vf a) { return gelu_tanh_v(a); }
TESSERA_VM_INLINE vf vf_tanh(vf a) { return tanh_v(a); }
// (a `Cmp` b || a is NaN) ? a : b: vf_max with _CMP_GT_OQ, vf_min with _CMP_LT_OQ; NaN from either
// side propagates.
template <int Cmp>
TESSERA_VM_INLINE vf vf_pick(vf a, vf b) {
#if TESSERA_VECMATH_AVX512
  const __mmask16 k = _mm512_cmp_ps_mask(a, b, Cmp) | _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
  return _mm512_mask_blend_ps(k, b, a);
#else
  const vf k = _mm256_or_ps(_mm256_cmp_ps(a, b, Cmp), _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  return _mm256_blendv_ps(b, a, k);
#endif
}
TESSERA_VM_INLINE vf vf_max(vf a, vf b) { return vf_pick<_CMP_GT_OQ>(a, b); }
TESSERA_VM_INLINE vf vf_min(vf a, vf b) { return vf_pick<_CMP_LT_OQ>(a, b); }
// (x is NaN || x > 0) ? x : 0, as the eager kernel.
TESSERA_VM_INLINE vf vf_relu(vf x) {
#if TESSERA_VECMATH_AVX512
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, vset(0.0f), _CMP_NLE_UQ), x);
#else
  return _mm256_and_ps(x, _mm256_cmp_ps(x, vset(0.0f), _CMP_NLE_UQ));
#endif
}
// f applied to each lane by a loop the compiler vectorises, as it does the eager kernel's loop.
template <typename F>
TESSERA_VM_INLINE vf vf_map(vf x, F f) {
  alignas(64) float t[kVfLanes];
  vf_store(t, x);
#pragma omp simd
  for (int i = 0; i < kVfLanes; ++i) t[i] = f(t[i]);
  return vf_load(t);
}
template <typename F>
TESSERA_VM_INLINE vf vf_map2(vf a, vf b, F f) {
  alignas(64) float s[kVfLanes], t[kVfLanes];
  vf_store(s, a);
  vf_store(t, b);
  for (int i = 0; i < kVfLanes; ++i) s[i] = f(s[i], t[i]);
  return vf_load(s);
}
// Lanes [m, kVfLanes) are `fill`.
TESSERA_VM_INLINE vf vf_first_n(vf x, int64_t m, float fill) {
  alignas(64) float t[kVfLanes];
  vf_store(t, x);
  for (int64_t i = m; i < kVfLanes; ++i) t[i] = fill;
  return vf_load(t);
}
TESSERA_VM_INLINE float vf_lane0(vf x) { return TESSERA_V(cvtss_f32)(x); }
// Non-temporal stores (Note [Streaming stores] in plugins/cpu/src/vec_kernels_isa.cpp): p must be
// vf-aligned (vf_aligned); each thread calls vf_stream_fence() after its last vf_stream.
TESSERA_VM_INLINE void vf_stream(float* p, vf v) { store_v<true>(p, v); }
TESSERA_VM_INLINE void vf_stream_fence() { _mm_sfence(); }
// Horizontal reductions (sum in a tree of lanes; max/min propagate NaN).
TESSERA_VM_INLINE float vf_hsum(vf x) {
  alignas(64) float t[kVfLanes];
  vf_store(t, x);
  for (int w = kVfLanes / 2; w > 0; w /= 2)
    for (int i = 0; i < w; ++i) t[i] += t[i + w];
  return t[0];
}
TESSERA_VM_INLINE float vf_hmax(vf x) {
  alignas(64) float t[kVfLanes];
  vf_store(t, x);
  float m = t[0];
  for (int i = 1; i < kVfLanes; ++i) m = (m > t[i] || m != m) ? m : t[i];
  return m;
}
TESSERA_VM_INLINE float vf_hmin(vf x) {
  alignas(64) float t[kVfLanes];
  vf_store(t, x);
  float m = t[0];
  for (int i = 1; i < kVfLanes; ++i) m = (m < t[i] || m != m) ? m : t[i];
  return m;
}
// bfloat16 memory: widening is exact; narrowing rounds to nearest even, NaN becomes 0x7FC0.
TESSERA_VM_INLINE vf vf_load_bf16(const uint16_t* p) {
#if TESSERA_VECMATH_AVX512
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
#else
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
#endif
}
TESSERA_VM_INLINE void vf_store_bf16(uint16_t* p, vf v) {
#if TESSERA_VECMATH_AVX512
  const __m512i u = _mm512_castps_si512(v);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), odd), 16);
  r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_epi32(0x7FC0));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
#else
  const __m256i u = _mm256_castps_si256(v);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), odd), 16);
  r = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC0)),
                                           _mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xD8);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
#endif
}
#undef TESSERA_V
#pragma GCC diagnostic pop

#else  // TESSERA_VECMATH_LEVEL == 0

using vf = float;
constexpr int kVfLanes = 1;
TESSERA_VM_INLINE vf vf_set(float v) { return v; }
TESSERA_VM_INLINE vf vf_load(const float* p) { return *p; }
TESSERA_VM_INLINE void vf_store(float* p, vf v) { *p = v; }
TESSERA_VM_INLINE vf vf_add(vf a, vf b) { return a + b; }
TESSERA_VM_INLINE vf vf_sub(vf a, vf b) { return a - b; }
TESSERA_VM_INLINE vf vf_mul(vf a, vf b) { return a * b; }
TESSERA_VM_INLINE vf vf_div(vf a, vf b) { return a / b; }
TESSERA_VM_INLINE vf vf_neg(vf a) { return -a; }
TESSERA_VM_INLINE vf vf_abs(vf a) { return __builtin_fabsf(a); }
TESSERA_VM_INLINE vf vf_sqrt(vf a) { return __builtin_sqrtf(a); }
TESSERA_VM_INLINE vf vf_exp(vf a) { return exp_f(a); }
TESSERA_VM_INLINE vf vf_sigmoid(vf a) { return sigmoid_f(a); }
TESSERA_VM_INLINE vf vf_silu(vf a) { return mul_sigmoid_f(a, a); }
TESSERA_VM_INLINE vf vf_gelu(vf a) { return gelu_f(a); }
TESSERA_VM_INLINE vf vf_gelu_tanh(vf a) { return gelu_tanh_f(a); }
TESSERA_VM_INLINE vf vf_tanh(vf a) { return tanh_f(a); }
TESSERA_VM_INLINE vf vf_max(vf a, vf b) { return (a > b || a != a) ? a : b; }
TESSERA_VM_INLINE vf vf_min(vf a, vf b) { return (a < b || a != a) ? a : b; }
TESSERA_VM_INLINE vf vf_relu(vf x) { return (x != x || x > 0.0f) ? x : 0.0f; }
template <typename F>
TESSERA_VM_INLINE vf vf_map(vf x, F f) { return f(x); }
template <typename F>
TESSERA_VM_INLINE vf vf_map2(vf a, vf b, F f) { return f(a, b); }
TESSERA_VM_INLINE vf vf_first_n(vf x, int64_t m, float fill) { return m > 0 ? x : fill; }
TESSERA_VM_INLINE float vf_lane0(vf x) { return x; }
TESSERA_VM_INLINE void vf_stream(float* p, vf v) { *p = v; }
TESSERA_VM_INLINE void vf_stream_fence() {}
TESSERA_VM_INLINE float vf_hsum(vf x) { return x; }
TESSERA_VM_INLINE float vf_hmax(vf x) { return x; }
TESSERA_VM_INLINE float vf_hmin(vf x) { return x; }
TESSERA_VM_INLINE vf vf_load_bf16(const uint16_t* p) { return as_float(int32_t(uint32_t(*p) << 16)); }
TESSERA_VM_INLINE void vf_store_bf16(uint16_t* p, vf v) {
  const uint32_t u = uint32_t(as_int(v));
  const uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  *p = v != v ? uint16_t(0x7FC0) : uint16_t(r);
}

#endif  // TESSERA_VECMATH_LEVEL

// ---- Every level ----
TESSERA_VM_INLINE vf vf_erf(vf a) { return vf_map(a, [](float x) { return erf_f(x); }); }
TESSERA_VM_INLINE vf vf_log(vf a) { return vf_map(a, [](float x) { return log_f(x); }); }
TESSERA_VM_INLINE vf vf_sin(vf a) { return vf_map(a, [](float x) { return __builtin_sinf(x); }); }
TESSERA_VM_INLINE vf vf_cos(vf a) { return vf_map(a, [](float x) { return __builtin_cosf(x); }); }
TESSERA_VM_INLINE vf vf_pow(vf a, vf b) { return vf_map2(a, b, [](float x, float y) { return __builtin_powf(x, y); }); }
TESSERA_VM_INLINE vf vf_rsqrt(vf a) { return vf_div(vf_set(1.0f), vf_sqrt(a)); }
TESSERA_VM_INLINE bool vf_aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % (kVfLanes * sizeof(float)) == 0;
}
// The first m (0 < m <= kVfLanes) elements, through a copy; the other lanes read as 0 and are not
// written.
TESSERA_VM_INLINE vf vf_load_as(const float* p) { return vf_load(p); }
TESSERA_VM_INLINE vf vf_load_as(const uint16_t* p) { return vf_load_bf16(p); }
TESSERA_VM_INLINE void vf_store_as(float* p, vf v) { vf_store(p, v); }
TESSERA_VM_INLINE void vf_store_as(uint16_t* p, vf v) { vf_store_bf16(p, v); }
template <typename T>
TESSERA_VM_INLINE vf vf_load_part(const T* p, int64_t m) {
  alignas(64) T t[kVfLanes] = {};
  for (int64_t i = 0; i < m && i < kVfLanes; ++i) t[i] = p[i];
  return vf_load_as(t);
}
template <typename T>
TESSERA_VM_INLINE void vf_store_part(T* p, vf v, int64_t m) {
  alignas(64) T t[kVfLanes];
  vf_store_as(t, v);
  for (int64_t i = 0; i < m && i < kVfLanes; ++i) p[i] = t[i];
}
TESSERA_VM_INLINE vf vf_load_n(const float* p, int64_t m) { return vf_load_part(p, m); }
TESSERA_VM_INLINE void vf_store_n(float* p, vf v, int64_t m) { vf_store_part(p, v, m); }
TESSERA_VM_INLINE vf vf_load_bf16_n(const uint16_t* p, int64_t m) { return vf_load_part(p, m); }
TESSERA_VM_INLINE void vf_store_bf16_n(uint16_t* p, vf v, int64_t m) { vf_store_part(p, v, m); }

}  // namespace (the level's)
}  // namespace tessera::vecmath
