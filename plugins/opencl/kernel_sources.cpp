#include "kernel_sources.h"

#include "tessera/plugin_abi.h"

namespace tessera::opencl {

namespace {

const char* storage_type(int32_t d) {
  switch (d) {
    case TESSERA_DTYPE_BOOL: return "uchar";
    case TESSERA_DTYPE_UINT8: return "uchar";
    case TESSERA_DTYPE_INT8: return "char";
    case TESSERA_DTYPE_INT16: return "short";
    case TESSERA_DTYPE_INT32: return "int";
    case TESSERA_DTYPE_INT64: return "long";
    case TESSERA_DTYPE_FLOAT16: return "half";
    case TESSERA_DTYPE_BFLOAT16: return "ushort";
    case TESSERA_DTYPE_FLOAT32: return "float";
    default: return "double";
  }
}

// Storage type, LOAD and STORE macros of a role (Note [Dtypes in OpenCL C]).
std::string role(const std::string& r, int32_t d) {
  std::string s = "typedef " + std::string(storage_type(d)) + " " + r + "_t;\n";
  switch (d) {
    case TESSERA_DTYPE_BOOL:
      s += "#define LOAD_" + r + "(p, i) ((int)((p)[i] != 0))\n";
      s += "#define STORE_" + r + "(p, i, v) ((p)[i] = (uchar)((v) != 0))\n";
      break;
    case TESSERA_DTYPE_FLOAT16:
      s += "#define LOAD_" + r + "(p, i) vload_half((i), (p))\n";
      s += "#define STORE_" + r + "(p, i, v) vstore_half_rte((float)(v), (i), (p))\n";
      break;
    case TESSERA_DTYPE_BFLOAT16:
      s += "#define LOAD_" + r + "(p, i) as_float(((uint)(p)[i]) << 16)\n";
      s += "#define STORE_" + r + "(p, i, v) ((p)[i] = tessera_f2bf((float)(v)))\n";
      break;
    case TESSERA_DTYPE_UINT8:
    case TESSERA_DTYPE_INT8:
    case TESSERA_DTYPE_INT16:
    case TESSERA_DTYPE_INT32:
    case TESSERA_DTYPE_INT64:
      s += "#define LOAD_" + r + "(p, i) ((p)[i])\n";
      s += "#define STORE_" + r + "(p, i, v) ((p)[i] = (" + r + "_t)" +
           (d == TESSERA_DTYPE_INT64 ? "tessera_to_long" : "tessera_to_int") + "(v))\n";
      break;
    default:
      s += "#define LOAD_" + r + "(p, i) ((p)[i])\n";
      s += "#define STORE_" + r + "(p, i, v) ((p)[i] = (" + r + "_t)(v))\n";
  }
  return s;
}

// CT, its float-ness and the K() literal macro.
std::string compute(int32_t ct) {
  const bool fp = dtype_is_floating(ct);
  std::string s = "#define CT " + std::string(compute_type(ct)) + "\n";
  s += std::string("#define CT_FLOAT ") + (fp ? "1" : "0") + "\n";
  s += ct == TESSERA_DTYPE_FLOAT64 ? "#define K(x) ((CT)(x))\n" : "#define K(x) ((CT)(x##f))\n";
  return s;
}

// Note [Floating to integral conversion]
// OpenCL C (like C++) leaves the conversion of NaN, infinities and out-of-range values to an integer
// undefined. Integer stores convert as PyTorch does on x86-64: to int64, anything outside the int64
// range (and NaN) becomes LONG_MIN; to int32 and narrower types, the value goes through int32, where
// anything outside the int32 range becomes INT_MIN, and then wraps. The emulated accelerator
// (samples/my_hardware_device) and the host side of this plugin convert the same way.
std::string prelude(std::initializer_list<int32_t> dtypes) {
  std::string s;
  bool fp64 = false;
  for (int32_t d : dtypes) fp64 = fp64 || d == TESSERA_DTYPE_FLOAT64;
  if (fp64) s += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
  s += R"CL(
#define OVL __attribute__((overloadable))
inline long OVL tessera_to_long(long x) { return x; }
inline long OVL tessera_to_long(int x) { return x; }
inline long OVL tessera_to_long(float x) { return x >= -0x1p63f && x < 0x1p63f ? (long)x : LONG_MIN; }
inline int OVL tessera_to_int(long x) { return (int)x; }
inline int OVL tessera_to_int(int x) { return x; }
inline int OVL tessera_to_int(float x) { return x > -0x1.000002p31f && x < 0x1p31f ? (int)x : INT_MIN; }
)CL";
  if (fp64)
    s += R"CL(
inline long OVL tessera_to_long(double x) { return x >= -0x1p63 && x < 0x1p63 ? (long)x : LONG_MIN; }
inline int OVL tessera_to_int(double x) { return x > -2147483649.0 && x < 0x1p31 ? (int)x : INT_MIN; }
)CL";
  s += R"CL(
#define MAXD 8
#define RWG 128
typedef struct { long n; long ndim; long size[MAXD]; long st[4][MAXD]; long off[4]; } Geo;
typedef struct { long n_out; long n_in; long ndo; long ndi; long osize[MAXD]; long ost_a[MAXD]; long ost_o[MAXD];
                 long isize[MAXD]; long ist_a[MAXD]; long ist_o[MAXD]; long ist_w[MAXD]; long ist_b[MAXD];
                 long off_a; long off_o; long off_w; long off_b; } RGeo;
typedef struct { long M; long N; long K; long nb; long nbd; long bsize[MAXD]; long bst_a[MAXD]; long bst_b[MAXD];
                 long bst_o[MAXD]; long sam; long sak; long sbk; long sbn; long som; long son;
                 long off_a; long off_b; long off_o; } MGeo;

inline ushort tessera_f2bf(float f) {
  uint u = as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (ushort)(u >> 16);
}
#define MAXV(x, y) (((x) != (x) || (x) > (y)) ? (x) : (y))
#define MINV(x, y) (((x) != (x) || (x) < (y)) ? (x) : (y))

// Element offsets of linear index i in up to three tensors of an elementwise geometry.
#define GEO_OFFSETS(g, i, o0, o1, o2)                                       \
  {                                                                         \
    long rem_ = (i);                                                        \
    o0 = g.off[0]; o1 = g.off[1]; o2 = g.off[2];                            \
    for (int d_ = (int)g.ndim - 1; d_ >= 0; --d_) {                         \
      long c_ = rem_ % g.size[d_];                                          \
      rem_ /= g.size[d_];                                                   \
      o0 += c_ * g.st[0][d_]; o1 += c_ * g.st[1][d_]; o2 += c_ * g.st[2][d_]; \
    }                                                                       \
  }
// Offsets (in A and O) of outer row r of a row geometry.
#define ROW_OFFSETS(g, r, oa, oo)                      \
  {                                                    \
    long rem_ = (r);                                   \
    oa = g.off_a; oo = g.off_o;                        \
    for (int d_ = (int)g.ndo - 1; d_ >= 0; --d_) {     \
      long c_ = rem_ % g.osize[d_];                    \
      rem_ /= g.osize[d_];                             \
      oa += c_ * g.ost_a[d_]; oo += c_ * g.ost_o[d_];  \
    }                                                  \
  }
inline long inner_offset(long j, long ndi, const long* size, const long* st) {
  long off = 0;
  for (int d = (int)ndi - 1; d >= 0; --d) {
    long c = j % size[d];
    j /= size[d];
    off += c * st[d];
  }
  return off;
}
)CL";
  return s;
}

// The invocation lines of `table` whose kernel name (the first macro argument) is `op`.
std::string only(const std::string& op, std::initializer_list<const char*> table) {
  std::string s;
  for (const char* line : table) {
    std::string l = line;
    const size_t open = l.find('('), comma = l.find_first_of(",)", open);
    if (l.substr(open + 1, comma - open - 1) == op) s += l + "\n";
  }
  return s;
}

}  // namespace

std::string dtype_tag(int32_t d) {
  static const char* const tags[] = {"b8", "u8", "i8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64"};
  return d >= 0 && d < TESSERA_DTYPE_COUNT_ ? tags[d] : "unknown";
}

bool dtype_is_floating(int32_t d) { return d >= TESSERA_DTYPE_FLOAT16 && d <= TESSERA_DTYPE_FLOAT64; }

const char* compute_type(int32_t d) {
  if (d == TESSERA_DTYPE_FLOAT64) return "double";
  if (dtype_is_floating(d)) return "float";
  if (d == TESSERA_DTYPE_INT64) return "long";
  return "int";
}

int32_t compare_compute_dtype(int32_t a, int32_t b) {
  if (a == TESSERA_DTYPE_FLOAT64 || b == TESSERA_DTYPE_FLOAT64) return TESSERA_DTYPE_FLOAT64;
  if (dtype_is_floating(a) || dtype_is_floating(b)) return TESSERA_DTYPE_FLOAT32;
  if (a == TESSERA_DTYPE_INT64 || b == TESSERA_DTYPE_INT64) return TESSERA_DTYPE_INT64;
  return TESSERA_DTYPE_INT32;
}

int32_t copy_compute_dtype(int32_t src, int32_t dst) { return compare_compute_dtype(src, dst); }

std::string binary_source(int32_t a, int32_t b, int32_t o, const std::string& op) {
  std::string s = prelude({a, b, o}) + role("A", a) + role("B", b) + role("O", o) + compute(o);
  s += R"CL(
#define BIN(NAME, EXPR)                                                                            \
__kernel void NAME##_c(Geo g, __global O_t* o, __global const A_t* a, __global const B_t* b, CT alpha) { \
  long i = get_global_id(0);                                                                       \
  if (i >= g.n) return;                                                                            \
  CT x = (CT)LOAD_A(a, g.off[1] + i); CT y = (CT)LOAD_B(b, g.off[2] + i);                          \
  STORE_O(o, g.off[0] + i, (EXPR));                                                                \
}                                                                                                  \
__kernel void NAME##_s(Geo g, __global O_t* o, __global const A_t* a, __global const B_t* b, CT alpha) { \
  long i = get_global_id(0);                                                                       \
  if (i >= g.n) return;                                                                            \
  long oo, oa, ob; GEO_OFFSETS(g, i, oo, oa, ob);                                                  \
  CT x = (CT)LOAD_A(a, oa); CT y = (CT)LOAD_B(b, ob);                                              \
  STORE_O(o, oo, (EXPR));                                                                          \
}
)CL";
  return s + only(op, {"BIN(add, x + alpha * y)", "BIN(sub, x - alpha * y)", "BIN(mul, x * y)", "BIN(div, x / y)",
                       "BIN(maximum, MAXV(x, y))", "BIN(minimum, MINV(x, y))"});
}

std::string compare_source(int32_t a, int32_t b, int32_t o, const std::string& op) {
  std::string s = prelude({a, b, o}) + role("A", a) + role("B", b) + role("O", o) + compute(compare_compute_dtype(a, b));
  s += R"CL(
#define CMP(NAME, EXPR)                                                                           \
__kernel void NAME##_c(Geo g, __global O_t* o, __global const A_t* a, __global const B_t* b) {    \
  long i = get_global_id(0);                                                                      \
  if (i >= g.n) return;                                                                           \
  CT x = (CT)LOAD_A(a, g.off[1] + i); CT y = (CT)LOAD_B(b, g.off[2] + i);                         \
  STORE_O(o, g.off[0] + i, (EXPR) ? 1 : 0);                                                       \
}                                                                                                 \
__kernel void NAME##_s(Geo g, __global O_t* o, __global const A_t* a, __global const B_t* b) {    \
  long i = get_global_id(0);                                                                      \
  if (i >= g.n) return;                                                                           \
  long oo, oa, ob; GEO_OFFSETS(g, i, oo, oa, ob);                                                 \
  CT x = (CT)LOAD_A(a, oa); CT y = (CT)LOAD_B(b, ob);                                             \
  STORE_O(o, oo, (EXPR) ? 1 : 0);                                                                 \
}
)CL";
  return s + only(op, {"CMP(eq, x == y)", "CMP(ne, x != y)", "CMP(lt, x < y)", "CMP(le, x <= y)", "CMP(gt, x > y)",
                       "CMP(ge, x >= y)", "CMP(logical_and, x != 0 && y != 0)",
                       "CMP(logical_or, x != 0 || y != 0)"});
}

// Note [Transcendentals without cancellation]
// gelu is x * Phi(x) = 0.5 * x * erfc(-x / sqrt(2)): 1 + erf(x / sqrt(2)) loses every digit for
// x below about -4. gelu(approximate="tanh") is 0.5 * x * (1 + tanh(u)) = x * sigmoid(2u) =
// x / (1 + exp(-2u)): 1 + tanh(u) cancels for negative u (-10 gave -2.98e-7 instead of -0, -1e10 gave
// -298), while exp(-2u) only overflows to inf, where the quotient is the correct -0.
std::string unary_source(int32_t a, int32_t o, const std::string& op) {
  std::string s = prelude({a, o}) + role("A", a) + role("O", o) + compute(o);
  s += R"CL(
#define UN(NAME, EXPR)                                                              \
__kernel void NAME##_c(Geo g, __global O_t* o, __global const A_t* a) {            \
  long i = get_global_id(0);                                                        \
  if (i >= g.n) return;                                                             \
  CT x = (CT)LOAD_A(a, g.off[1] + i);                                               \
  STORE_O(o, g.off[0] + i, (EXPR));                                                 \
}                                                                                   \
__kernel void NAME##_s(Geo g, __global O_t* o, __global const A_t* a) {            \
  long i = get_global_id(0);                                                        \
  if (i >= g.n) return;                                                             \
  long oo, oa, unused_; GEO_OFFSETS(g, i, oo, oa, unused_);                         \
  CT x = (CT)LOAD_A(a, oa);                                                         \
  STORE_O(o, oo, (EXPR));                                                           \
}
)CL";
  s += only(op, {"UN(neg, -x)", "UN(abs, (x < 0 ? -x : x))", "UN(relu, (x < 0 ? (CT)0 : x))"});
  if (dtype_is_floating(o))
    s += only(op, {"UN(exp, exp(x))", "UN(log, log(x))", "UN(sqrt, sqrt(x))", "UN(rsqrt, rsqrt(x))", "UN(sin, sin(x))",
                   "UN(cos, cos(x))", "UN(tanh, tanh(x))", "UN(sigmoid, K(1.0) / (K(1.0) + exp(-x)))",
                   "UN(gelu, K(0.5) * x * erfc(x * K(-0.70710678118654752440)))",
                   "UN(gelu_tanh, x / (K(1.0) + exp(K(-1.59576912160573071176) * (x + K(0.044715) * x * x * x))))",
                   "UN(silu, x / (K(1.0) + exp(-x)))", "UN(erf, erf(x))"});
  // The parameterless pointwise ops for ONNX models, PyTorch's formulas as the CPU kernels
  // (plugins/cpu/src/elementwise_onnx.cpp). HSIX is min(max(x + 3, 0), 6) with std::min/std::max's
  // NaN behaviour (a NaN stays): OpenCL's fmin/fmax would drop it.
  if (dtype_is_floating(o) && (op == "hardsigmoid" || op == "hardswish"))
    s += "#define HSIX(x) ((x) + K(3.0) < K(0.0) ? K(0.0) : ((x) + K(3.0) > K(6.0) ? K(6.0) : (x) + K(3.0)))\n";
  if (dtype_is_floating(o))
    s += only(op, {"UN(tan, tan(x))", "UN(asin, asin(x))", "UN(acos, acos(x))", "UN(atan, atan(x))", "UN(sinh, sinh(x))",
                   "UN(cosh, cosh(x))", "UN(asinh, asinh(x))", "UN(acosh, acosh(x))", "UN(atanh, atanh(x))",
                   "UN(log1p, log1p(x))", "UN(expm1, expm1(x))", "UN(reciprocal, K(1.0) / x)",
                   "UN(floor, floor(x))", "UN(ceil, ceil(x))", "UN(trunc, trunc(x))", "UN(round, rint(x))",
                   "UN(sign, (CT)((x > K(0.0)) - (x < K(0.0))))", "UN(softsign, x / (K(1.0) + fabs(x)))",
                   "UN(hardsigmoid, HSIX(x) / K(6.0))", "UN(hardswish, x * HSIX(x) / K(6.0))",
                   "UN(mish, x * tanh(log1p(exp(x))))"});
  return s;
}

std::string where_source(int32_t c, int32_t a, int32_t b, int32_t o) {
  std::string s = prelude({c, a, b, o}) + role("C", c) + role("A", a) + role("B", b) + role("O", o) + compute(o);
  s += R"CL(
__kernel void where_s(Geo g, __global O_t* o, __global const C_t* c, __global const A_t* a, __global const B_t* b) {
  long i = get_global_id(0);
  if (i >= g.n) return;
  long rem = i, oo = g.off[0], oc = g.off[1], oa = g.off[2], ob = g.off[3];
  for (int d = (int)g.ndim - 1; d >= 0; --d) {
    long k = rem % g.size[d];
    rem /= g.size[d];
    oo += k * g.st[0][d]; oc += k * g.st[1][d]; oa += k * g.st[2][d]; ob += k * g.st[3][d];
  }
  STORE_O(o, oo, LOAD_C(c, oc) != 0 ? (CT)LOAD_A(a, oa) : (CT)LOAD_B(b, ob));
}
)CL";
  return s;
}

std::string copy_source(int32_t src, int32_t dst) {
  std::string s = prelude({src, dst}) + role("A", src) + role("O", dst) + compute(copy_compute_dtype(src, dst));
  s += R"CL(
__kernel void copy_c(Geo g, __global O_t* o, __global const A_t* a) {
  long i = get_global_id(0);
  if (i >= g.n) return;
  STORE_O(o, g.off[0] + i, (CT)LOAD_A(a, g.off[1] + i));
}
__kernel void copy_s(Geo g, __global O_t* o, __global const A_t* a) {
  long i = get_global_id(0);
  if (i >= g.n) return;
  long oo, oa, unused_; GEO_OFFSETS(g, i, oo, oa, unused_);
  STORE_O(o, oo, (CT)LOAD_A(a, oa));
}
)CL";
  return s;
}

std::string fill_source(int32_t dst) {
  std::string s = prelude({dst}) + role("O", dst) + compute(dst);
  s += R"CL(
__kernel void fill_c(Geo g, __global O_t* o, CT value) {
  long i = get_global_id(0);
  if (i >= g.n) return;
  STORE_O(o, g.off[0] + i, value);
}
__kernel void fill_s(Geo g, __global O_t* o, CT value) {
  long i = get_global_id(0);
  if (i >= g.n) return;
  long oo, u1_, u2_; GEO_OFFSETS(g, i, oo, u1_, u2_);
  STORE_O(o, oo, value);
}
)CL";
  return s;
}

// uniform_ / normal_: element i (row-major) is philox4x32-10(counter offset + i, key seed), turned
// into a number exactly as tessera/random.h does (Note [Reproducible random numbers]): the uniform
// values equal the CPU's bit for bit; the normal ones up to the device's log/cos rounding.
std::string random_source(int32_t dst) {
  std::string s = prelude({dst}) + role("O", dst) + compute(dst);
  s += R"CL(
uint4 philox4x32_10(ulong counter, ulong key) {
  uint c0 = (uint)counter, c1 = (uint)(counter >> 32), c2 = 0, c3 = 0;
  uint k0 = (uint)key, k1 = (uint)(key >> 32);
  for (int r = 0; r < 10; ++r) {
    uint hi0 = mul_hi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    uint hi1 = mul_hi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    uint n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c1 = lo1; c3 = lo0; c0 = n0; c2 = n2;
    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
  }
  return (uint4)(c0, c1, c2, c3);
}
CT random_value(ulong n, ulong seed, CT a, CT b, int normal) {
  uint4 r = philox4x32_10(n, seed);
  if (normal) {
    float u1 = ((float)(r.x >> 8) + 1.0f) * (1.0f / 16777217.0f);
    float u2 = (float)(r.y >> 8) * (1.0f / 16777216.0f);
    return a + b * (CT)(sqrt(-2.0f * log(u1)) * cos(6.283185307179586f * u2));
  }
  return a + (b - a) * (CT)((float)(r.x >> 8) * (1.0f / 16777216.0f));
}
__kernel void random_c(Geo g, __global O_t* o, ulong seed, ulong offset, CT a, CT b, int normal) {
  long i = get_global_id(0);
  if (i >= g.n) return;
  STORE_O(o, g.off[0] + i, random_value(offset + (ulong)i, seed, a, b, normal));
}
__kernel void random_s(Geo g, __global O_t* o, ulong seed, ulong offset, CT a, CT b, int normal) {
  long i = get_global_id(0);
  if (i >= g.n) return;
  long oo, row_major, u_; GEO_OFFSETS(g, i, oo, row_major, u_);
  STORE_O(o, oo, random_value(offset + (ulong)row_major, seed, a, b, normal));
}
)CL";
  return s;
}

std::string reduce_source(int32_t a, int32_t o, const std::string& op) {
  // Accumulate floating inputs in float (double for f64), integral ones in long.
  const int32_t at = dtype_is_floating(a) ? (a == TESSERA_DTYPE_FLOAT64 || o == TESSERA_DTYPE_FLOAT64
                                                 ? TESSERA_DTYPE_FLOAT64 : TESSERA_DTYPE_FLOAT32)
                                          : TESSERA_DTYPE_INT64;
  std::string s = prelude({a, o}) + role("A", a) + role("O", o) + compute(at);
  s += R"CL(
#define SUM_ACC(acc, v) ((acc) + (v))
#define FIRST_ZERO(a, off) ((CT)0)
#define FIRST_ELEM(a, off) ((CT)LOAD_A(a, off))
#define FIN_ID(acc, n) (acc)
#define FIN_MEAN(acc, n) ((acc) / (CT)(n))
// _g: one work-group of RWG items per output element; _s: one work-item per output element.
#define RED(NAME, INIT, ACC, FIN)                                                     \
__kernel __attribute__((reqd_work_group_size(RWG, 1, 1)))                             \
void NAME##_g(RGeo g, __global O_t* o, __global const A_t* a) {                       \
  __local CT buf[RWG];                                                                \
  long r = get_group_id(0);                                                           \
  int l = get_local_id(0);                                                            \
  long oa, oo; ROW_OFFSETS(g, r, oa, oo);                                             \
  CT acc = INIT(a, oa);                                                               \
  for (long j = l; j < g.n_in; j += RWG) {                                            \
    CT v = (CT)LOAD_A(a, oa + inner_offset(j, g.ndi, g.isize, g.ist_a));              \
    acc = ACC(acc, v);                                                                \
  }                                                                                   \
  buf[l] = acc;                                                                       \
  barrier(CLK_LOCAL_MEM_FENCE);                                                       \
  for (int s = RWG / 2; s > 0; s >>= 1) {                                             \
    if (l < s) buf[l] = ACC(buf[l], buf[l + s]);                                      \
    barrier(CLK_LOCAL_MEM_FENCE);                                                     \
  }                                                                                   \
  if (l == 0) STORE_O(o, oo, FIN(buf[0], g.n_in));                                    \
}                                                                                     \
__kernel void NAME##_s(RGeo g, __global O_t* o, __global const A_t* a) {              \
  long r = get_global_id(0);                                                          \
  if (r >= g.n_out) return;                                                           \
  long oa, oo; ROW_OFFSETS(g, r, oa, oo);                                             \
  CT acc = INIT(a, oa);                                                               \
  for (long j = 0; j < g.n_in; ++j) {                                                 \
    CT v = (CT)LOAD_A(a, oa + inner_offset(j, g.ndi, g.isize, g.ist_a));              \
    acc = ACC(acc, v);                                                                \
  }                                                                                   \
  STORE_O(o, oo, FIN(acc, g.n_in));                                                   \
}
)CL";
  s += only(op, {"RED(sum, FIRST_ZERO, SUM_ACC, FIN_ID)", "RED(amax, FIRST_ELEM, MAXV, FIN_ID)",
                 "RED(amin, FIRST_ELEM, MINV, FIN_ID)"});
  if (at != TESSERA_DTYPE_INT64) s += only(op, {"RED(mean, FIRST_ZERO, SUM_ACC, FIN_MEAN)"});
  return s;
}

std::string softmax_source(int32_t a, int32_t o, const std::string& op) {
  const int32_t ct = (a == TESSERA_DTYPE_FLOAT64 || o == TESSERA_DTYPE_FLOAT64) ? TESSERA_DTYPE_FLOAT64
                                                                                : TESSERA_DTYPE_FLOAT32;
  std::string s = prelude({a, o}) + role("A", a) + role("O", o) + compute(ct);
  s += R"CL(
// One work-group per row; the row is dimension `isize[0]` with strides ist_a[0] / ist_o[0].
#define SOFTMAX(NAME, LOG)                                                            \
__kernel __attribute__((reqd_work_group_size(RWG, 1, 1)))                             \
void NAME(RGeo g, __global O_t* o, __global const A_t* a) {                           \
  __local CT buf[RWG];                                                                \
  long r = get_group_id(0);                                                           \
  int l = get_local_id(0);                                                            \
  long oa, oo; ROW_OFFSETS(g, r, oa, oo);                                             \
  const long n = g.isize[0], sa = g.ist_a[0], so = g.ist_o[0];                        \
  CT m = -INFINITY;                                                                   \
  for (long j = l; j < n; j += RWG) { CT v = (CT)LOAD_A(a, oa + j * sa); m = MAXV(v, m); } \
  buf[l] = m;                                                                         \
  barrier(CLK_LOCAL_MEM_FENCE);                                                       \
  for (int s = RWG / 2; s > 0; s >>= 1) {                                             \
    if (l < s) buf[l] = MAXV(buf[l], buf[l + s]);                                     \
    barrier(CLK_LOCAL_MEM_FENCE);                                                     \
  }                                                                                   \
  m = buf[0];                                                                         \
  barrier(CLK_LOCAL_MEM_FENCE);                                                       \
  CT sum = 0;                                                                         \
  for (long j = l; j < n; j += RWG) sum += exp((CT)LOAD_A(a, oa + j * sa) - m);       \
  buf[l] = sum;                                                                       \
  barrier(CLK_LOCAL_MEM_FENCE);                                                       \
  for (int s = RWG / 2; s > 0; s >>= 1) {                                             \
    if (l < s) buf[l] += buf[l + s];                                                  \
    barrier(CLK_LOCAL_MEM_FENCE);                                                     \
  }                                                                                   \
  sum = buf[0];                                                                       \
  CT lse = log(sum);                                                                  \
  for (long j = l; j < n; j += RWG) {                                                 \
    CT x = (CT)LOAD_A(a, oa + j * sa) - m;                                            \
    STORE_O(o, oo + j * so, LOG ? x - lse : exp(x) / sum);                            \
  }                                                                                   \
}
)CL";
  return s + only(op, {"SOFTMAX(softmax, 0)", "SOFTMAX(log_softmax, 1)"});
}

std::string layer_norm_source(int32_t a, int32_t w, int32_t b, int32_t o) {
  const int32_t ct = a == TESSERA_DTYPE_FLOAT64 ? TESSERA_DTYPE_FLOAT64 : TESSERA_DTYPE_FLOAT32;
  std::string s = prelude({a, w, b, o}) + role("A", a) + role("W", w) + role("B", b) + role("O", o) + compute(ct);
  s += R"CL(
// One work-group per row of n_in normalised elements: mean, then the variance about it (two passes
// for accuracy), then the output.
__kernel __attribute__((reqd_work_group_size(RWG, 1, 1)))
void layer_norm(RGeo g, __global O_t* o, __global const A_t* a, __global const W_t* w, __global const B_t* b,
                CT eps, int has_w, int has_b) {
  __local CT buf[RWG];
  long r = get_group_id(0);
  int l = get_local_id(0);
  long oa, oo; ROW_OFFSETS(g, r, oa, oo);
  const long n = g.n_in;
  CT sum = 0;
  for (long j = l; j < n; j += RWG) sum += (CT)LOAD_A(a, oa + inner_offset(j, g.ndi, g.isize, g.ist_a));
  buf[l] = sum;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = RWG / 2; s > 0; s >>= 1) {
    if (l < s) buf[l] += buf[l + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const CT mean = buf[0] / (CT)n;
  barrier(CLK_LOCAL_MEM_FENCE);
  CT sq = 0;
  for (long j = l; j < n; j += RWG) {
    CT d = (CT)LOAD_A(a, oa + inner_offset(j, g.ndi, g.isize, g.ist_a)) - mean;
    sq += d * d;
  }
  buf[l] = sq;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = RWG / 2; s > 0; s >>= 1) {
    if (l < s) buf[l] += buf[l + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const CT rstd = rsqrt(buf[0] / (CT)n + eps);
  for (long j = l; j < n; j += RWG) {
    CT y = ((CT)LOAD_A(a, oa + inner_offset(j, g.ndi, g.isize, g.ist_a)) - mean) * rstd;
    if (has_w) y *= (CT)LOAD_W(w, g.off_w + inner_offset(j, g.ndi, g.isize, g.ist_w));
    if (has_b) y += (CT)LOAD_B(b, g.off_b + inner_offset(j, g.ndi, g.isize, g.ist_b));
    STORE_O(o, oo + inner_offset(j, g.ndi, g.isize, g.ist_o), y);
  }
}
)CL";
  return s;
}

std::string matmul_source(int32_t a, int32_t b, int32_t o) {
  const int32_t ct = (a == TESSERA_DTYPE_FLOAT64 || b == TESSERA_DTYPE_FLOAT64) ? TESSERA_DTYPE_FLOAT64
                                                                                : TESSERA_DTYPE_FLOAT32;
  std::string s = prelude({a, b, o}) + role("A", a) + role("B", b) + role("O", o) + compute(ct);
  s += "#define TS " + std::to_string(kMatmulTile) + "\n#define RTS " + std::to_string(kMatmulThreads) +
       "\n#define WPT " + std::to_string(kMatmulTile / kMatmulThreads) + "\n";
  s += R"CL(
// C[batch] = A[batch] (M x K) * B[batch] (K x N). A work-group of RTS x RTS items computes a TS x TS
// tile of C, each item WPT x WPT outputs spaced RTS apart; A and B tiles of TS x TS pass through
// local memory.
__kernel __attribute__((reqd_work_group_size(RTS, RTS, 1)))
void matmul(MGeo g, __global O_t* o, __global const A_t* a, __global const B_t* b) {
  __local CT As[TS][TS + 1];
  __local CT Bs[TS][TS + 1];
  const int tc = get_local_id(0), tr = get_local_id(1);
  const long col0 = (long)get_group_id(0) * TS, row0 = (long)get_group_id(1) * TS;
  long rem = get_global_id(2);
  long ao = g.off_a, bo = g.off_b, oo = g.off_o;
  for (int d = (int)g.nbd - 1; d >= 0; --d) {
    long c = rem % g.bsize[d];
    rem /= g.bsize[d];
    ao += c * g.bst_a[d]; bo += c * g.bst_b[d]; oo += c * g.bst_o[d];
  }
  CT acc[WPT][WPT];
  for (int i = 0; i < WPT; ++i)
    for (int j = 0; j < WPT; ++j) acc[i][j] = 0;
  const int tid = tr * RTS + tc;
  for (long k0 = 0; k0 < g.K; k0 += TS) {
    for (int l = 0; l < WPT * WPT; ++l) {
      const int idx = tid + l * RTS * RTS;
      const int r = idx / TS, c = idx % TS;
      const long gr = row0 + r, gk = k0 + c;
      As[r][c] = (gr < g.M && gk < g.K) ? (CT)LOAD_A(a, ao + gr * g.sam + gk * g.sak) : (CT)0;
      const long gk2 = k0 + r, gc = col0 + c;
      Bs[r][c] = (gk2 < g.K && gc < g.N) ? (CT)LOAD_B(b, bo + gk2 * g.sbk + gc * g.sbn) : (CT)0;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = 0; k < TS; ++k) {
      CT bv[WPT];
      for (int j = 0; j < WPT; ++j) bv[j] = Bs[k][tc + j * RTS];
      for (int i = 0; i < WPT; ++i) {
        const CT av = As[tr + i * RTS][k];
        for (int j = 0; j < WPT; ++j) acc[i][j] += av * bv[j];
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (int i = 0; i < WPT; ++i) {
    const long row = row0 + tr + i * RTS;
    if (row >= g.M) continue;
    for (int j = 0; j < WPT; ++j) {
      const long col = col0 + tc + j * RTS;
      if (col < g.N) STORE_O(o, oo + row * g.som + col * g.son, acc[i][j]);
    }
  }
}
)CL";
  return s;
}

}  // namespace tessera::opencl
