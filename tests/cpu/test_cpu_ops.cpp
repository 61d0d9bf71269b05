// The CPU backend's op suite through the public API (the real plugin is loaded from the build
// tree's plugin folder). Every op against a naive double reference on fresh random inputs, with
// broadcasting, strided/transposed/expanded inputs and every dtype it supports. ctest runs this
// binary once per ISA level (TESSERA_CPU_CAPABILITY=default, avx2, avx512).
#include <limits>
#include <cstdlib>
#include <functional>
#include <map>

#include "cpu_test_util.h"
#include "isa.h"

namespace tessera::cpu_test {
namespace {

// ctest runs this binary with TESSERA_CPU_CAPABILITY set to each level; on a CPU without that
// level the plugin (rightly) refuses to load, which test_cpu_capability covers: skip here.
class CapabilityEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* want = std::getenv("TESSERA_CPU_CAPABILITY");
    if (!want) return;
    const auto best = cpu::max_capability(cpu::detect_cpu_features());
    const std::string w(want);
    const int level = w == "avx512" ? 2 : (w == "avx2" ? 1 : 0);
    if (level > int(best))
      GTEST_SKIP() << "TESSERA_CPU_CAPABILITY=" << w << " but this CPU supports at most "
                   << cpu::capability_name(best);
  }
};
const auto* const kCapabilityEnvironment = ::testing::AddGlobalTestEnvironment(new CapabilityEnvironment);

const DType kFloatTypes[] = {kFloat32, kFloat64, kBFloat16, kFloat16};

enum class Layout { Contiguous, Transposed, Strided, Expanded };
const char* layout_name(Layout l) {
  switch (l) {
    case Layout::Contiguous: return "contiguous";
    case Layout::Transposed: return "transposed";
    case Layout::Strided: return "strided";
    default: return "expanded";
  }
}

// A tensor of logical shape `sizes` laid out as `layout` (falls back to contiguous where the
// layout does not apply to the shape).
Tensor make_input(std::vector<int64_t> sizes, DType dtype, Layout layout, double lo = -2, double hi = 2) {
  const size_t nd = sizes.size();
  if (layout == Layout::Transposed && nd >= 2) {
    std::swap(sizes[nd - 1], sizes[nd - 2]);
    return random_tensor(sizes, dtype, lo, hi).transpose(int64_t(nd) - 2, int64_t(nd) - 1);
  }
  if (layout == Layout::Strided && nd >= 1) {
    const int64_t last = sizes[nd - 1];
    sizes[nd - 1] = 2 * last;
    return random_tensor(sizes, dtype, lo, hi).slice(int64_t(nd) - 1, 0, std::nullopt, 2);
  }
  if (layout == Layout::Expanded && nd >= 1 && sizes[0] > 1) {
    std::vector<int64_t> one = sizes;
    one[0] = 1;
    return random_tensor(one, dtype, lo, hi).expand(sizes);
  }
  return random_tensor(sizes, dtype, lo, hi);
}

std::vector<int64_t> sizes_of(const Tensor& t) { return {t.sizes().begin(), t.sizes().end()}; }

// ------------------------------------------------------------------------ device

TEST(CpuDevice, PropertiesReportCapability) {
  bool found = false;
  for (const DeviceInfo& d : devices()) {
    if (!d.device.is_cpu()) continue;
    found = true;
    EXPECT_NE(d.properties.find("\"capability\""), std::string::npos) << d.properties;
    EXPECT_NE(d.properties.find("\"cores\""), std::string::npos) << d.properties;
    EXPECT_NE(d.properties.find("\"memory\""), std::string::npos) << d.properties;
    if (const char* want = std::getenv("TESSERA_CPU_CAPABILITY")) {
      EXPECT_NE(d.properties.find(std::string("\"capability\": \"") + want + "\""), std::string::npos)
          << d.properties;
    }
  }
  EXPECT_TRUE(found) << "no cpu device listed";
  EXPECT_EQ(device_count(DeviceType::CPU), 1);
}

// ------------------------------------------------------------------------ binary

struct BinaryCase {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> run;
  std::function<double(double, double)> ref;
  double lo_a = -2, hi_a = 2, lo_b = -2, hi_b = 2;
};

std::vector<BinaryCase> float_binaries() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, [](double x, double y) { return x + y; },
       -2, 2, -2, 2},
      {"add_alpha", [](const Tensor& a, const Tensor& b) { return add(a, b, 0.5); },
       [](double x, double y) { return x + 0.5 * y; }, -2, 2, -2, 2},
      {"sub_alpha", [](const Tensor& a, const Tensor& b) { return sub(a, b, 2); },
       [](double x, double y) { return x - 2 * y; }, -2, 2, -2, 2},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, [](double x, double y) { return x * y; },
       -2, 2, -2, 2},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, [](double x, double y) { return x / y; },
       -2, 2, 0.5, 2},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); },
       [](double x, double y) { return std::pow(x, y); }, 0.5, 2, -2, 2},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); },
       [](double x, double y) { return std::max(x, y); }, -2, 2, -2, 2},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); },
       [](double x, double y) { return std::min(x, y); }, -2, 2, -2, 2},
  };
}

struct ShapeCase {
  std::vector<int64_t> a, b;
};
const ShapeCase kShapes[] = {
    {{33, 17}, {33, 17}}, {{4, 1, 5}, {3, 1}}, {{2, 3, 40}, {}}, {{5000}, {5000}}, {{3, 70, 130}, {70, 1}},
    {{}, {6, 7}},
};
const std::pair<Layout, Layout> kLayoutPairs[] = {
    {Layout::Contiguous, Layout::Contiguous}, {Layout::Transposed, Layout::Strided},
    {Layout::Expanded, Layout::Transposed}, {Layout::Strided, Layout::Expanded}};

void check_binary(const BinaryCase& op, const Tensor& a, const Tensor& b, DType out_dtype, const std::string& what) {
  const Tensor out = op.run(a, b);
  ASSERT_EQ(out.dtype(), out_dtype) << what;
  const Ref ra = read(a), rb = read(b);
  const auto shape = broadcast_shape(ra.sizes, rb.sizes);
  ASSERT_EQ(sizes_of(out), shape) << what;
  Ref r{shape, {}};
  std::vector<double> want(size_t(r.numel()));
  for (int64_t i = 0; i < r.numel(); ++i) {
    const auto idx = unravel(i, shape);
    want[size_t(i)] = round_to(op.ref(ra.at(idx), rb.at(idx)), out_dtype);
  }
  EXPECT_TRUE(close(out, want, tol(out_dtype), what));
}

TEST(CpuBinary, FloatDtypesBroadcastingAndLayouts) {
  SCOPED_TRACE(seed_trace());
  for (const BinaryCase& op : float_binaries())
    for (DType dt : kFloatTypes)
      for (const ShapeCase& sc : kShapes)
        for (auto [la, lb] : kLayoutPairs) {
          const Tensor a = make_input(sc.a, dt, la, op.lo_a, op.hi_a);
          const Tensor b = make_input(sc.b, dt, lb, op.lo_b, op.hi_b);
          check_binary(op, a, b, dt,
                       std::string(op.name) + " " + std::string(dtype_name(dt)) + " " + layout_name(la) + "/" +
                           layout_name(lb) + " rank " + std::to_string(sc.a.size()) + "x" +
                           std::to_string(sc.b.size()));
        }
}

TEST(CpuBinary, IntegerAndBool) {
  SCOPED_TRACE(seed_trace());
  const std::vector<BinaryCase> ops = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b, 3); }, [](double x, double y) { return x + 3 * y; },
       -50, 50, -50, 50},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, [](double x, double y) { return x - y; },
       -50, 50, -50, 50},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, [](double x, double y) { return x * y; },
       -50, 50, -50, 50},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); },
       [](double x, double y) { return std::max(x, y); }, -50, 50, -50, 50},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); },
       [](double x, double y) { return std::min(x, y); }, -50, 50, -50, 50},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); },
       [](double x, double y) { return std::pow(x, y); }, -5, 5, 0, 4},
  };
  for (const BinaryCase& op : ops)
    for (DType dt : {kInt32, kInt64, kInt16})
      for (auto [la, lb] : kLayoutPairs) {
        const Tensor a = make_input({7, 9}, dt, la, op.lo_a, op.hi_a);
        const Tensor b = make_input({9}, dt, lb, op.lo_b, op.hi_b);
        check_binary(op, a, b, dt, std::string(op.name) + " " + std::string(dtype_name(dt)));
      }
  const std::vector<BinaryCase> logical = {
      {"logical_and", [](const Tensor& a, const Tensor& b) { return logical_and(a, b); },
       [](double x, double y) { return double(x != 0 && y != 0); }, -2, 2, -2, 2},
      {"logical_or", [](const Tensor& a, const Tensor& b) { return logical_or(a, b); },
       [](double x, double y) { return double(x != 0 || y != 0); }, -2, 2, -2, 2},
  };
  for (const BinaryCase& op : logical)
    for (DType dt : {kBool, kInt32, kFloat32}) {
      const Tensor a = make_input({5, 8}, dt, Layout::Transposed, -1, 1);
      const Tensor b = make_input({5, 1}, dt, Layout::Contiguous, -1, 1);
      check_binary(op, a, b, kBool, std::string(op.name) + " " + std::string(dtype_name(dt)));
    }
}

TEST(CpuBinary, TypePromotion) {
  SCOPED_TRACE(seed_trace());
  const BinaryCase addc = float_binaries()[0], mulc = float_binaries()[3], divc = float_binaries()[4];
  struct P { DType a, b, out; };
  for (P p : {P{kInt32, kFloat32, kFloat32}, P{kFloat16, kFloat32, kFloat32}, P{kBFloat16, kFloat16, kFloat32},
              P{kInt64, kFloat64, kFloat64}, P{kUInt8, kInt8, kInt16}, P{kBool, kInt32, kInt32},
              P{kInt32, kBFloat16, kBFloat16}, P{kFloat32, kFloat64, kFloat64}}) {
    const Tensor a = make_input({6, 5}, p.a, Layout::Transposed, 1, 9);
    const Tensor b = make_input({5}, p.b, Layout::Contiguous, 1, 9);
    const std::string what = std::string(dtype_name(p.a)) + " with " + std::string(dtype_name(p.b));
    check_binary(addc, a, b, p.out, "add " + what);
    check_binary(mulc, a, b, p.out, "mul " + what);
  }
  // true division of integers gives the default float dtype
  const Tensor ia = make_input({4, 4}, kInt32, Layout::Contiguous, 1, 9);
  const Tensor ib = make_input({4, 4}, kInt64, Layout::Contiguous, 1, 9);
  check_binary(divc, ia, ib, kFloat32, "div int32/int64");
}

// Large enough for the multi-threaded path: chunks start in the middle of rows.
TEST(CpuBinary, LargeMultiThreadedStrided) {
  SCOPED_TRACE(seed_trace());
  for (DType dt : {kFloat32, kBFloat16, kFloat64, kInt32}) {
    const Tensor a = make_input({301, 517}, dt, Layout::Transposed);
    const Tensor b = make_input({517}, dt, Layout::Strided);
    check_binary(float_binaries()[3], a, b, dt, std::string("large mul ") + std::string(dtype_name(dt)));
    const Tensor c = make_input({301, 517}, dt, Layout::Contiguous);
    check_binary(float_binaries()[0], c, make_input({301, 517}, dt, Layout::Contiguous), dt,
                 std::string("large add ") + std::string(dtype_name(dt)));
  }
  const Tensor x = make_input({257, 611}, kFloat32, Layout::Strided, -5, 5);
  const Tensor y = gelu(x);
  const Ref rx = read(x);
  std::vector<double> want;
  for (double v : rx.v) want.push_back(double(float(0.5 * v * std::erfc(-v / std::sqrt(2.0)))));
  EXPECT_TRUE(close(y, want, {1e-5, 2e-6}, "large strided gelu"));
}

TEST(CpuBinary, InPlaceScalarsAndEmpty) {
  SCOPED_TRACE(seed_trace());
  Tensor a = make_input({5, 6}, kFloat32, Layout::Contiguous);
  const Tensor b = make_input({6}, kFloat32, Layout::Contiguous);
  const Ref ra = read(a), rb = read(b);
  a.add_(b, 2);
  std::vector<double> want;
  for (int64_t i = 0; i < 30; ++i) want.push_back(double(float(ra.v[size_t(i)] + 2 * rb.v[size_t(i % 6)])));
  EXPECT_TRUE(close(a, want, tol(kFloat32), "add_"));
  const Ref ra2 = read(a);
  a.mul_(b);
  want.clear();
  for (int64_t i = 0; i < 30; ++i) want.push_back(double(float(ra2.v[size_t(i)] * rb.v[size_t(i % 6)])));
  EXPECT_TRUE(close(a, want, tol(kFloat32), "mul_"));
  // wrapped numbers keep the tensor's dtype
  const Tensor h = make_input({4, 4}, kBFloat16, Layout::Transposed);
  const Tensor h2 = h * 2.5 + 1;
  EXPECT_EQ(h2.dtype(), kBFloat16);
  want.clear();
  for (double v : read(h).v) want.push_back(round_bf16(round_bf16(v * 2.5) + 1));
  EXPECT_TRUE(close(h2, want, tol(kBFloat16), "bf16 * 2.5 + 1"));
  const Tensor p = pow(make_input({7}, kFloat32, Layout::Contiguous, 0.5, 2), 3.0);
  EXPECT_EQ(p.dtype(), kFloat32);
  EXPECT_THROW(add(make_input({3}, kInt32, Layout::Contiguous), make_input({3}, kInt32, Layout::Contiguous), 0.5),
               Error);
  // empty tensors
  const Tensor e = add(zeros({0, 5}), zeros({5}));
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ(sizes_of(e), (std::vector<int64_t>{0, 5}));
  EXPECT_EQ(sum(zeros({0, 3}), {0}).numel(), 3);
  EXPECT_TRUE(close(sum(zeros({0, 3}), {0}), {0, 0, 0}, {0, 0}, "sum over empty"));
}

TEST(CpuCompare, AllComparisons) {
  SCOPED_TRACE(seed_trace());
  const std::vector<BinaryCase> ops = {
      {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }, [](double x, double y) { return double(x == y); }},
      {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }, [](double x, double y) { return double(x != y); }},
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }, [](double x, double y) { return double(x < y); }},
      {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); }, [](double x, double y) { return double(x <= y); }},
      {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }, [](double x, double y) { return double(x > y); }},
      {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }, [](double x, double y) { return double(x >= y); }},
  };
  struct P { DType a, b; };
  for (const BinaryCase& op : ops)
    for (P p : {P{kFloat32, kFloat32}, P{kBFloat16, kBFloat16}, P{kInt32, kInt32}, P{kInt64, kFloat32},
                P{kFloat16, kFloat64}, P{kBool, kBool}, P{kUInt8, kInt8}})
      for (auto [la, lb] : kLayoutPairs) {
        // small integer ranges make equal values common
        const Tensor a = make_input({6, 11}, p.a, la, -3, 3);
        const Tensor b = make_input({11}, p.b, lb, -3, 3);
        check_binary(op, a, b, kBool, std::string(op.name) + " " + std::string(dtype_name(p.a)) + "/" +
                                          std::string(dtype_name(p.b)));
      }
}

TEST(CpuWhere, BroadcastAndPromotion) {
  SCOPED_TRACE(seed_trace());
  for (DType dt : {kFloat32, kFloat64, kBFloat16, kFloat16, kInt64, kInt8, kBool}) {
    const Tensor cond = make_input({4, 1, 6}, kBool, Layout::Contiguous, -1, 1);
    const Tensor a = make_input({3, 6}, dt, Layout::Transposed);
    const Tensor b = make_input({4, 3, 1}, dt, Layout::Expanded);
    const Tensor out = where(cond, a, b);
    ASSERT_EQ(out.dtype(), dt);
    const Ref rc = read(cond), ra = read(a), rb = read(b);
    const std::vector<int64_t> shape = {4, 3, 6};
    ASSERT_EQ(sizes_of(out), shape);
    std::vector<double> want;
    for (int64_t i = 0; i < 72; ++i) {
      const auto idx = unravel(i, shape);
      want.push_back(rc.at(idx) != 0 ? ra.at(idx) : rb.at(idx));
    }
    EXPECT_TRUE(close(out, want, {0, 0}, std::string("where ") + std::string(dtype_name(dt))));
  }
  const Tensor cond = make_input({5}, kBool, Layout::Contiguous, -1, 1);
  const Tensor a = make_input({5}, kInt32, Layout::Contiguous);
  const Tensor b = make_input({5}, kFloat32, Layout::Contiguous);
  EXPECT_EQ(where(cond, a, b).dtype(), kFloat32);
}

// ------------------------------------------------------------------------ unary

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> run;
  std::function<double(double)> ref;
  double lo, hi;
  bool integer_ok;  // defined with an integer output for integer inputs
};

double gelu_ref(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
// 0.5 x (1 + tanh(u)) written as x / (1 + exp(-2u)) so that the reference does not cancel.
double gelu_tanh_ref(double x) {
  return x / (1 + std::exp(-2 * std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

std::vector<UnaryCase> unaries() {
  return {
      {"neg", [](const Tensor& x) { return neg(x); }, [](double x) { return -x; }, -5, 5, true},
      {"abs", [](const Tensor& x) { return abs(x); }, [](double x) { return std::fabs(x); }, -5, 5, true},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double x) { return x > 0 ? x : 0; }, -5, 5, true},
      {"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, -20, 20, false},
      {"log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, 0.01, 50, false},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, 0, 50, false},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); }, 0.01, 50, false},
      {"sin", [](const Tensor& x) { return sin(x); }, [](double x) { return std::sin(x); }, -6, 6, false},
      {"cos", [](const Tensor& x) { return cos(x); }, [](double x) { return std::cos(x); }, -6, 6, false},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, -6, 6, false},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, [](double x) { return 1 / (1 + std::exp(-x)); }, -12,
       12, false},
      {"silu", [](const Tensor& x) { return silu(x); }, [](double x) { return x / (1 + std::exp(-x)); }, -12, 12,
       false},
      {"gelu", [](const Tensor& x) { return gelu(x); }, gelu_ref, -6, 6, false},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); }, gelu_tanh_ref, -6, 6, false},
      {"erf", [](const Tensor& x) { return erf(x); }, [](double x) { return std::erf(x); }, -4, 4, false},
  };
}

void check_unary(const UnaryCase& op, const Tensor& x, DType out_dtype, const std::string& what) {
  const Tensor out = op.run(x);
  ASSERT_EQ(out.dtype(), out_dtype) << what;
  const Ref rx = read(x);
  ASSERT_EQ(sizes_of(out), rx.sizes) << what;
  std::vector<double> want(rx.v.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = round_to(op.ref(rx.v[i]), out_dtype);
  Tol t = tol(out_dtype);
  // sin/cos of a rounded argument: the reference is exact for the rounded input, so only output
  // rounding matters; transcendental approximations get a little more absolute slack in f32.
  if (out_dtype == kFloat32) t.atol = 2e-6;
  EXPECT_TRUE(close(out, want, t, what));
}

TEST(CpuUnary, FloatDtypesAndLayouts) {
  SCOPED_TRACE(seed_trace());
  for (const UnaryCase& op : unaries())
    for (DType dt : kFloatTypes)
      for (Layout l : {Layout::Contiguous, Layout::Transposed, Layout::Strided, Layout::Expanded})
        for (const std::vector<int64_t>& shape : {std::vector<int64_t>{37, 29}, std::vector<int64_t>{3, 50, 70}})
          check_unary(op, make_input(shape, dt, l, op.lo, op.hi), dt,
                      std::string(op.name) + " " + std::string(dtype_name(dt)) + " " + layout_name(l));
}

TEST(CpuUnary, IntegerInputs) {
  SCOPED_TRACE(seed_trace());
  for (const UnaryCase& op : unaries())
    for (DType dt : {kInt32, kInt64}) {
      const double lo = std::max(op.lo, -5.0), hi = std::min(op.hi, 5.0);
      const Tensor x = make_input({6, 7}, dt, Layout::Transposed, lo < 0.5 && op.lo > 0 ? 1 : lo, hi);
      // PyTorch implements silu and gelu for floating tensors only (its kernels refuse integers).
      const std::string name = op.name;
      if (name == "silu" || name == "gelu" || name == "gelu_tanh") {
        EXPECT_THROW(op.run(x), Error) << name;
        continue;
      }
      check_unary(op, x, op.integer_ok ? dt : kFloat32, std::string(op.name) + " " + std::string(dtype_name(dt)));
    }
}

// neg and abs of the most negative integer wrap to itself, as PyTorch's (two's complement), where
// the C++ negation would be undefined; the neighbouring values are the plain results.
TEST(CpuUnary, NegAndAbsOfTheMostNegativeIntegerWrap) {
  const int64_t mn = std::numeric_limits<int64_t>::min();
  Tensor x = empty({3}, TensorOptions().dtype(kInt64));
  x.data_ptr<int64_t>()[0] = mn;
  x.data_ptr<int64_t>()[1] = mn + 1;
  x.data_ptr<int64_t>()[2] = std::numeric_limits<int64_t>::max();
  const Tensor n = neg(x), a = abs(x);
  EXPECT_EQ(n.data_ptr<int64_t>()[0], mn);
  EXPECT_EQ(n.data_ptr<int64_t>()[1], std::numeric_limits<int64_t>::max());
  EXPECT_EQ(n.data_ptr<int64_t>()[2], mn + 1);
  EXPECT_EQ(a.data_ptr<int64_t>()[0], mn);
  EXPECT_EQ(a.data_ptr<int64_t>()[1], std::numeric_limits<int64_t>::max());
  EXPECT_EQ(a.data_ptr<int64_t>()[2], std::numeric_limits<int64_t>::max());
}

// Max relative error of the f32 approximations against double on many points (not a speed test).
TEST(CpuUnary, Float32AccuracyWideRange) {
  SCOPED_TRACE(seed_trace());
  struct A { UnaryCase op; double rel, abs; };
  const auto u = unaries();
  auto find = [&](const char* n) {
    for (const auto& c : u)
      if (std::string(c.name) == n) return c;
    return u[0];
  };
  std::vector<A> cases = {{find("exp"), 2e-6, 0},         {find("tanh"), 2e-6, 0}, {find("sigmoid"), 2e-6, 0},
                          {find("silu"), 2e-6, 1e-30},    {find("erf"), 2e-6, 0},  {find("gelu"), 2e-6, 1e-7},
                          {find("gelu_tanh"), 2e-6, 1e-7}, {find("log"), 2e-6, 0}};
  cases[0].op.lo = -87;
  cases[0].op.hi = 88;
  for (int k = 1; k < 7; ++k) {
    cases[size_t(k)].op.lo = -30;
    cases[size_t(k)].op.hi = 30;
  }
  for (const A& c : cases) {
    Tensor x;
    if (std::string(c.op.name) == "log") {
      x = cast(exp(make_input({100000}, kFloat64, Layout::Contiguous, -80, 80)), kFloat32);
    } else {
      x = make_input({100000}, kFloat32, Layout::Contiguous, c.op.lo, c.op.hi);
    }
    const Tensor y = c.op.run(x);
    const Ref rx = read(x), ry = read(y);
    double worst = 0, at = 0;
    for (size_t i = 0; i < rx.v.size(); ++i) {
      const double want = c.op.ref(rx.v[i]);
      const double err = std::fabs(ry.v[i] - want);
      if (err <= c.abs) continue;
      const double rel = err / std::max(std::fabs(want), 1e-300);
      if (rel > worst) {
        worst = rel;
        at = rx.v[i];
      }
    }
    EXPECT_LE(worst, c.rel) << c.op.name << ": worst relative error at x = " << at;
  }
  // special values
  const Tensor s = tensor(std::vector<float>{0.f, -0.f, INFINITY, -INFINITY, NAN, 100.f, -200.f});
  const Ref e = read(exp(s));
  EXPECT_EQ(e.v[0], 1);
  EXPECT_EQ(e.v[2], INFINITY);
  EXPECT_EQ(e.v[3], 0);
  EXPECT_TRUE(std::isnan(e.v[4]));
  EXPECT_EQ(e.v[5], INFINITY);
  EXPECT_EQ(e.v[6], 0);
  const Ref l = read(log(s));
  EXPECT_EQ(l.v[0], -INFINITY);
  EXPECT_EQ(l.v[2], INFINITY);
  EXPECT_TRUE(std::isnan(l.v[3]));
  EXPECT_TRUE(std::isnan(l.v[6]));
  const Ref t = read(tanh(s));
  EXPECT_EQ(t.v[2], 1);
  EXPECT_EQ(t.v[3], -1);
  EXPECT_TRUE(std::isnan(t.v[4]));
  EXPECT_EQ(t.v[5], 1);
}

// The tails of the sigmoid family and of exp through the public API (every ISA level through ctest):
// results in the subnormal range are right to one subnormal step (sigmoid and silu were 0 below
// x = -88.7, gelu below -12.73), and the infinities give the limits, or NaN where PyTorch gives NaN
// (silu and gelu-tanh at -inf: -inf * 0).
TEST(CpuUnary, Float32TailsAndInfinities) {
  const std::vector<float> xs = {-100.f, -103.f, -13.5f, -10.f, INFINITY, -INFINITY, NAN};
  const Tensor s = tensor(xs);
  const Ref sg = read(sigmoid(s)), si = read(silu(s)), ge = read(gelu(s)), gt = read(gelu(s, "tanh")),
            ex = read(exp(s));
  const double step = std::ldexp(1.0, -149);  // the smallest subnormal
  auto sigmoid_d = [](double x) { return std::exp(x) / (1 + std::exp(x)); };
  for (size_t i = 0; i < 4; ++i) {
    const double x = xs[i];
    SCOPED_TRACE("x = " + std::to_string(x));
    EXPECT_NEAR(sg.v[i], sigmoid_d(x), std::max(step, 4e-7 * sigmoid_d(x)));
    EXPECT_NEAR(si.v[i], x * sigmoid_d(x), std::max(step, 4e-7 * std::fabs(x * sigmoid_d(x))));
    EXPECT_NEAR(ge.v[i], 0.5 * x * std::erfc(-x / std::sqrt(2.0)),
                std::max(step, 1e-6 * std::fabs(0.5 * x * std::erfc(-x / std::sqrt(2.0)))));
    EXPECT_NEAR(ex.v[i], std::exp(x), std::max(step, 2e-7 * std::exp(x)));
  }
  EXPECT_GT(sg.v[0], 0);  // 3.7e-44, not 0
  EXPECT_LT(ge.v[2], 0);  // gelu(-13.5) = -9.4e-41, not -0
  EXPECT_EQ(sg.v[4], 1);
  EXPECT_EQ(sg.v[5], 0);
  EXPECT_TRUE(std::isnan(sg.v[6]));
  EXPECT_EQ(si.v[4], INFINITY);
  EXPECT_TRUE(std::isnan(si.v[5]));
  EXPECT_EQ(ge.v[4], INFINITY);
  EXPECT_EQ(ge.v[5], 0);
  EXPECT_TRUE(std::signbit(ge.v[5]));
  EXPECT_EQ(gt.v[4], INFINITY);
  EXPECT_TRUE(std::isnan(gt.v[5]));
  for (const Ref* r : {&sg, &si, &ge, &gt, &ex}) EXPECT_TRUE(std::isnan(r->v[6]));
}

// ------------------------------------------------------------------------ reductions

struct ReduceCase {
  const char* name;
  std::function<Tensor(const Tensor&, std::vector<int64_t>, bool)> run;
  std::function<double(const std::vector<double>&)> ref;
  double lo, hi;
};

std::vector<ReduceCase> reductions() {
  auto var_ref = [](const std::vector<double>& v, int corr) {
    double m = 0;
    for (double x : v) m += x;
    m /= double(v.size());
    double s = 0;
    for (double x : v) s += (x - m) * (x - m);
    return s / (double(v.size()) - corr);
  };
  return {
      {"sum", [](const Tensor& x, std::vector<int64_t> d, bool k) { return sum(x, d, k); },
       [](const std::vector<double>& v) { double s = 0; for (double x : v) s += x; return s; }, 0.5, 2},
      {"mean", [](const Tensor& x, std::vector<int64_t> d, bool k) { return mean(x, d, k); },
       [](const std::vector<double>& v) { double s = 0; for (double x : v) s += x; return s / double(v.size()); }, -1, 2},
      {"amax", [](const Tensor& x, std::vector<int64_t> d, bool k) { return amax(x, d, k); },
       [](const std::vector<double>& v) { double s = -INFINITY; for (double x : v) s = std::max(s, x); return s; }, -3, 3},
      {"amin", [](const Tensor& x, std::vector<int64_t> d, bool k) { return amin(x, d, k); },
       [](const std::vector<double>& v) { double s = INFINITY; for (double x : v) s = std::min(s, x); return s; }, -3, 3},
      {"prod", [](const Tensor& x, std::vector<int64_t> d, bool k) { return prod(x, d, k); },
       [](const std::vector<double>& v) { double s = 1; for (double x : v) s *= x; return s; }, 0.9, 1.1},
      {"var", [](const Tensor& x, std::vector<int64_t> d, bool k) { return var(x, d, 1, k); },
       [=](const std::vector<double>& v) { return var_ref(v, 1); }, -2, 2},
      {"var_c0", [](const Tensor& x, std::vector<int64_t> d, bool k) { return var(x, d, 0, k); },
       [=](const std::vector<double>& v) { return var_ref(v, 0); }, -2, 2},
  };
}

// Reference reduction of `x` over `dims` (empty = all), output in row-major order.
std::vector<double> reduce_ref(const Ref& x, std::vector<int64_t> dims,
                               const std::function<double(const std::vector<double>&)>& f) {
  const int64_t nd = int64_t(x.sizes.size());
  std::vector<bool> red(size_t(nd), dims.empty());
  for (int64_t d : dims) red[size_t(d < 0 ? d + nd : d)] = true;
  std::vector<int64_t> out_sizes;
  for (int64_t d = 0; d < nd; ++d) out_sizes.push_back(red[size_t(d)] ? 1 : x.sizes[size_t(d)]);
  int64_t nout = 1;
  for (auto s : out_sizes) nout *= s;
  std::vector<std::vector<double>> groups(static_cast<size_t>(nout));
  for (int64_t i = 0; i < x.numel(); ++i) {
    auto idx = unravel(i, x.sizes);
    int64_t o = 0;
    for (int64_t d = 0; d < nd; ++d) o = o * out_sizes[size_t(d)] + (red[size_t(d)] ? 0 : idx[size_t(d)]);
    groups[size_t(o)].push_back(x.v[size_t(i)]);
  }
  std::vector<double> out;
  for (auto& g : groups) out.push_back(f(g));
  return out;
}

TEST(CpuReduce, AllOpsDimsKeepdimLayouts) {
  SCOPED_TRACE(seed_trace());
  const std::vector<std::vector<int64_t>> dim_sets = {{}, {0}, {1}, {2}, {0, 2}, {-1}, {1, 2}};
  for (const ReduceCase& op : reductions())
    for (DType dt : kFloatTypes)
      for (Layout l : {Layout::Contiguous, Layout::Transposed, Layout::Strided})
        for (const auto& dims : dim_sets)
          for (bool keep : {false, true}) {
            const Tensor x = make_input({6, 7, 9}, dt, l, op.lo, op.hi);
            const Tensor out = op.run(x, dims, keep);
            std::string what = std::string(op.name) + " " + std::string(dtype_name(dt)) + " " + layout_name(l) +
                               " dims " + std::to_string(dims.size()) + (dims.empty() ? "" : "@" + std::to_string(dims[0])) +
                               (keep ? " keepdim" : "");
            ASSERT_EQ(out.dtype(), dt) << what;
            const Ref rx = read(x);
            // expected shape
            std::vector<int64_t> shape;
            for (int64_t d = 0; d < 3; ++d) {
              bool r = dims.empty();
              for (int64_t k : dims) r = r || (k < 0 ? k + 3 : k) == d;
              if (!r) shape.push_back(rx.sizes[size_t(d)]);
              else if (keep) shape.push_back(1);
            }
            ASSERT_EQ(sizes_of(out), shape) << what;
            auto want = reduce_ref(rx, dims, op.ref);
            for (auto& w : want) w = round_to(w, dt);
            Tol t = tol(dt);
            if (dt == kFloat32) t.rtol = 2e-5;
            EXPECT_TRUE(close(out, want, t, what));
          }
}

TEST(CpuReduce, LargeContiguousFastPaths) {
  SCOPED_TRACE(seed_trace());
  const Tensor x = make_input({300, 1000}, kFloat32, Layout::Contiguous, 0, 1);
  const Ref rx = read(x);
  const auto s = reductions()[0];
  for (const std::vector<int64_t>& dims : {std::vector<int64_t>{}, {0}, {1}}) {
    auto want = reduce_ref(rx, dims, s.ref);
    for (auto& w : want) w = round_to(w, kFloat32);
    EXPECT_TRUE(close(sum(x, dims), want, {1e-5, 1e-6}, "sum large"));
  }
  const auto mx = reductions()[2];
  EXPECT_TRUE(close(amax(x, {1}), reduce_ref(rx, {1}, mx.ref), {0, 0}, "amax rows"));
}

TEST(CpuReduce, IntegerAndBoolSums) {
  SCOPED_TRACE(seed_trace());
  for (DType dt : {kInt32, kInt64, kInt8, kBool}) {
    const Tensor x = make_input({5, 8}, dt, Layout::Transposed, -9, 9);
    const Ref rx = read(x);
    const Tensor s = sum(x, {1});
    EXPECT_EQ(s.dtype(), kInt64) << dtype_name(dt);
    EXPECT_TRUE(close(s, reduce_ref(rx, {1}, reductions()[0].ref), {0, 0}, "int sum"));
    if (dt != kBool) {
      EXPECT_TRUE(close(amax(x, {0}), reduce_ref(rx, {0}, reductions()[2].ref), {0, 0}, "int amax"));
      EXPECT_TRUE(close(amin(x, {}), reduce_ref(rx, {}, reductions()[3].ref), {0, 0}, "int amin"));
    }
  }
}

TEST(CpuReduce, Argmax) {
  SCOPED_TRACE(seed_trace());
  for (DType dt : {kFloat32, kFloat64, kBFloat16, kInt32}) {
    const Tensor x = make_input({7, 13}, dt, Layout::Transposed, -100, 100);
    const Ref rx = read(x);
    auto argmax_ref = [](const std::vector<double>& v) {
      size_t b = 0;
      for (size_t i = 1; i < v.size(); ++i)
        if (v[i] > v[b]) b = i;
      return double(b);
    };
    const Tensor all = argmax(x);
    EXPECT_EQ(all.dtype(), kInt64);
    EXPECT_EQ(all.dim(), 0);
    EXPECT_TRUE(close(all, {argmax_ref(rx.v)}, {0, 0}, "argmax all"));
    for (int64_t d : {0, 1, -1})
      for (bool keep : {false, true}) {
        const Tensor a = argmax(x, d, keep);
        EXPECT_EQ(a.dim(), keep ? 2 : 1);
        EXPECT_TRUE(close(a, reduce_ref(rx, {d}, argmax_ref), {0, 0}, "argmax dim " + std::to_string(d)));
      }
  }
  // first occurrence of ties
  const Tensor t = tensor(std::vector<int64_t>{1, 3, 3, 2, 7, 7}, {2, 3});
  EXPECT_TRUE(close(argmax(t, 1), {1, 1}, {0, 0}, "argmax ties"));
  EXPECT_TRUE(close(argmax(t), {4}, {0, 0}, "argmax ties flat"));
}

// ------------------------------------------------------------------------ copy, fill, creation

TEST(CpuCopy, AnyDtypeToAnyDtypeStrided) {
  SCOPED_TRACE(seed_trace());
  const DType all[] = {kBool, kUInt8, kInt8, kInt16, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64};
  for (DType src_t : all)
    for (DType dst_t : all) {
      const Tensor src = make_input({9, 11}, src_t, Layout::Transposed, 0, 100);
      Tensor dst_base = zeros({11, 18}, TensorOptions().dtype(dst_t));
      Tensor dst = dst_base.slice(1, 0, std::nullopt, 2).t();  // [9, 11], strided and transposed
      dst.copy_(src);
      const Ref rs = read(src);
      std::vector<double> want;
      for (double v : rs.v)
        want.push_back(dst_t == kBool ? double(v != 0) : (is_floating(dst_t) ? round_to(v, dst_t) : std::trunc(v)));
      // integers truncate; [0, 100) integral inputs convert exactly except to 16-bit floats
      Tol t = tol(dst_t);
      if (!is_floating(dst_t)) t = {0, 0};
      if (dst_t == kInt8 || dst_t == kUInt8) t = {0, 0};
      EXPECT_TRUE(close(dst, want, t, std::string("copy ") + std::string(dtype_name(src_t)) + " -> " +
                                          std::string(dtype_name(dst_t))));
      // the odd columns stay zero
      const Ref rb = read(dst_base.slice(1, 1, std::nullopt, 2));
      for (double v : rb.v) ASSERT_EQ(v, 0);
    }
}

TEST(CpuCopy, ToContiguousClone) {
  SCOPED_TRACE(seed_trace());
  const Tensor x = make_input({4, 5, 6}, kFloat32, Layout::Transposed);
  const Tensor c = x.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_TRUE(close(c, read(x).v, {0, 0}, "contiguous"));
  const Tensor k = x.clone();
  EXPECT_TRUE(close(k, read(x).v, {0, 0}, "clone"));
  const Tensor h = x.to(kBFloat16);
  std::vector<double> want;
  for (double v : read(x).v) want.push_back(round_to(v, kBFloat16));
  EXPECT_TRUE(close(h, want, {0, 0}, "to bf16"));
}

TEST(CpuFill, ScalarIntoStridedView) {
  for (DType dt : {kFloat32, kFloat64, kBFloat16, kFloat16, kInt32, kInt64, kBool, kUInt8}) {
    Tensor base = zeros({6, 8}, TensorOptions().dtype(dt));
    Tensor v = base.slice(1, 1, std::nullopt, 3);
    v.fill_(dt == kBool ? Scalar(true) : Scalar(3));
    const Ref r = read(base);
    for (int64_t i = 0; i < 48; ++i) {
      const double want = (i % 8) % 3 == 1 ? (dt == kBool ? 1 : 3) : 0;
      ASSERT_EQ(r.v[size_t(i)], want) << dtype_name(dt) << " element " << i;
    }
  }
  const Tensor f = full({3, 3}, 0.1, TensorOptions().dtype(kFloat32));
  EXPECT_TRUE(close(f, std::vector<double>(9, double(0.1f)), {0, 0}, "full"));
}

TEST(CpuCreation, Arange) {
  const Tensor a = arange(10);
  EXPECT_EQ(a.dtype(), kInt64);
  std::vector<double> want;
  for (int i = 0; i < 10; ++i) want.push_back(i);
  EXPECT_TRUE(close(a, want, {0, 0}, "arange(10)"));
  const Tensor b = arange(0.5, 3.0, 0.25, TensorOptions().dtype(kFloat32));
  want.clear();
  for (int i = 0; i < 10; ++i) want.push_back(0.5 + 0.25 * i);
  EXPECT_TRUE(close(b, want, {0, 0}, "arange(0.5, 3, 0.25)"));
  const Tensor c = arange(5, -5, -3);
  EXPECT_TRUE(close(c, {5, 2, -1, -4}, {0, 0}, "arange(5, -5, -3)"));
}

TEST(CpuCreation, RandomUniformNormal) {
  manual_seed(1234);
  const Tensor u1 = rand({20000});
  manual_seed(1234);
  const Tensor u2 = rand({20000});
  EXPECT_TRUE(equal(u1, u2));
  const Ref r = read(u1);
  double m = 0, lo = 1, hi = 0;
  for (double v : r.v) {
    m += v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  m /= double(r.v.size());
  EXPECT_GE(lo, 0);
  EXPECT_LT(hi, 1);
  EXPECT_NEAR(m, 0.5, 0.02);
  const Tensor u3 = rand({20000});
  EXPECT_FALSE(equal(u1, u3));  // the offset advances
  const Ref n = read(randn({20000}, TensorOptions().dtype(kFloat64)));
  double nm = 0, nv = 0;
  for (double v : n.v) nm += v;
  nm /= double(n.v.size());
  for (double v : n.v) nv += (v - nm) * (v - nm);
  nv /= double(n.v.size());
  EXPECT_NEAR(nm, 0, 0.05);
  EXPECT_NEAR(nv, 1, 0.05);
  for (DType dt : {kBFloat16, kFloat16}) {
    const Ref h = read(rand({1000}, TensorOptions().dtype(dt)));
    for (double v : h.v) {
      ASSERT_GE(v, 0);
      ASSERT_LE(v, 1);
    }
  }
}

// ------------------------------------------------------------------------ indexing

TEST(CpuIndex, CatAndStack) {
  SCOPED_TRACE(seed_trace());
  for (DType dt : {kFloat32, kBFloat16, kInt64}) {
    const Tensor a = make_input({3, 4}, dt, Layout::Transposed), b = make_input({3, 2}, dt, Layout::Strided),
                 c = make_input({3, 5}, dt, Layout::Contiguous);
    const Tensor out = cat({a, b, c}, 1);
    ASSERT_EQ(sizes_of(out), (std::vector<int64_t>{3, 11}));
    const Ref ra = read(a), rb = read(b), rc = read(c);
    std::vector<double> want;
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t j = 0; j < 4; ++j) want.push_back(ra.v[size_t(i * 4 + j)]);
      for (int64_t j = 0; j < 2; ++j) want.push_back(rb.v[size_t(i * 2 + j)]);
      for (int64_t j = 0; j < 5; ++j) want.push_back(rc.v[size_t(i * 5 + j)]);
    }
    EXPECT_TRUE(close(out, want, {0, 0}, "cat dim 1"));
    const Tensor out0 = cat({a.t(), b.t()}, 0);
    ASSERT_EQ(sizes_of(out0), (std::vector<int64_t>{6, 3}));
    const Tensor s = stack({a, a, c.slice(1, 0, 4)}, 1);
    ASSERT_EQ(sizes_of(s), (std::vector<int64_t>{3, 3, 4}));
    want.clear();
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t k = 0; k < 3; ++k)
        for (int64_t j = 0; j < 4; ++j) want.push_back(k < 2 ? ra.v[size_t(i * 4 + j)] : rc.v[size_t(i * 5 + j)]);
    EXPECT_TRUE(close(s, want, {0, 0}, "stack dim 1"));
  }
}

TEST(CpuIndex, IndexSelectGatherEmbedding) {
  SCOPED_TRACE(seed_trace());
  std::uniform_int_distribution<int64_t> pick(0, 5);
  for (DType dt : {kFloat32, kFloat16, kInt32}) {
    const Tensor x = make_input({6, 7}, dt, Layout::Transposed);
    const Ref rx = read(x);
    std::vector<int64_t> idx;
    for (int i = 0; i < 9; ++i) idx.push_back(pick(rng()));
    const Tensor it = tensor(idx);
    // index_select dim 0 and 1
    const Tensor s0 = index_select(x, 0, it);
    std::vector<double> want;
    for (int64_t i : idx)
      for (int64_t j = 0; j < 7; ++j) want.push_back(rx.v[size_t(i * 7 + j)]);
    EXPECT_TRUE(close(s0, want, {0, 0}, "index_select 0"));
    const Tensor s1 = index_select(x, 1, cast(it, kInt32));
    want.clear();
    for (int64_t r = 0; r < 6; ++r)
      for (int64_t i : idx) want.push_back(rx.v[size_t(r * 7 + i)]);
    EXPECT_TRUE(close(s1, want, {0, 0}, "index_select 1 (int32 index)"));
    // gather dim 1 with a [6, 4] index
    std::vector<int64_t> g;
    for (int i = 0; i < 24; ++i) g.push_back(pick(rng()));
    const Tensor gt = tensor(g, {6, 4});
    const Tensor go = gather(x, 1, gt);
    want.clear();
    for (int64_t r = 0; r < 6; ++r)
      for (int64_t c = 0; c < 4; ++c) want.push_back(rx.v[size_t(r * 7 + g[size_t(r * 4 + c)])]);
    EXPECT_TRUE(close(go, want, {0, 0}, "gather 1"));
    const Tensor g0 = gather(x, 0, tensor(std::vector<int64_t>(g.begin(), g.begin() + 14), {2, 7}));
    want.clear();
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t c = 0; c < 7; ++c) want.push_back(rx.v[size_t(g[size_t(r * 7 + c)] * 7 + c)]);
    EXPECT_TRUE(close(g0, want, {0, 0}, "gather 0"));
    // embedding: weight [6, 7], indices [3, 3]
    const Tensor e = embedding(x, tensor(idx, {3, 3}));
    ASSERT_EQ(sizes_of(e), (std::vector<int64_t>{3, 3, 7}));
    want.clear();
    for (int64_t i : idx)
      for (int64_t j = 0; j < 7; ++j) want.push_back(rx.v[size_t(i * 7 + j)]);
    EXPECT_TRUE(close(e, want, {0, 0}, "embedding"));
  }
  EXPECT_THROW(index_select(make_input({3, 3}, kFloat32, Layout::Contiguous), 0, tensor(std::vector<int64_t>{3})),
               Error);
}

}  // namespace
}  // namespace tessera::cpu_test

namespace tessera::cpu_test {
namespace {

// Outputs of 1 MiB or more are written with streaming (non-temporal) stores at the AVX2/AVX-512
// levels, with normal stores for an unaligned head and the tail: check large outputs, aligned and
// at odd element offsets, against double references.
TEST(CpuStreamingStores, LargeOutputsAlignedAndAtOddOffsets) {
  SCOPED_TRACE(seed_trace());
  const int64_t n = (int64_t(1) << 20) + 37;  // 4 MiB + a tail of float32
  std::normal_distribution<float> dist(0.f, 2.f);
  auto random_vector = [&] {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = dist(rng());
    return v;
  };
  const std::vector<float> a = random_vector(), b = random_vector();
  const Tensor ta = tessera::tensor(a, {n}), tb = tessera::tensor(b, {n});

  const Tensor sum = tessera::add(ta, tb, 0.5);
  const Tensor g = tessera::gelu(ta);
  const Tensor e = tessera::exp(tb * 0.25);
  const float *ps = sum.data_ptr<float>(), *pg = g.data_ptr<float>(), *pe = e.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    const double x = a[size_t(i)], y = b[size_t(i)];
    ASSERT_NEAR(ps[i], x + 0.5 * y, 1e-6 * (1 + std::fabs(x + 0.5 * y))) << "add at " << i;
    const double gelu = 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    ASSERT_NEAR(pg[i], gelu, 2e-6 * (1 + std::fabs(gelu))) << "gelu at " << i;
    const double ex = std::exp(double(float(y * 0.25f)));
    ASSERT_NEAR(pe[i], ex, 2e-6 * ex) << "exp at " << i;
  }

  for (int64_t offset : {1, 3, 7, 13}) {
    Tensor storage = tessera::full({n + offset}, -7.0);
    Tensor view = storage.narrow(0, offset, n);
    view.copy_(ta);
    view.add_(tb, 2.0);  // written in place, starting `offset` floats into a 64-byte aligned block
    const float* p = storage.data_ptr<float>();
    for (int64_t i = 0; i < offset; ++i) ASSERT_EQ(p[i], -7.f) << "wrote before the view at offset " << offset;
    for (int64_t i = 0; i < n; ++i) {
      const double want = double(a[size_t(i)]) + 2.0 * b[size_t(i)];
      ASSERT_NEAR(p[offset + i], want, 1e-6 * (1 + std::fabs(want))) << "offset " << offset << " at " << i;
    }
  }
}

}  // namespace
}  // namespace tessera::cpu_test
