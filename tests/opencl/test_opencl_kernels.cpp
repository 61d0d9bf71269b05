// The OpenCL plugin through its C ABI alone: the test loads libtessera_opencl.so with dlopen, hands
// it a minimal host API that records kernel registrations, and calls the kernels with hand-built
// tessera_tensor_t / tessera_kernel_call_t on memory from the plugin's device interface. Every
// result is compared with a naive double reference on fresh random inputs. (test_opencl runs the
// same backend through the public API and the real runtime.)
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tessera/plugin_abi.h"

namespace {

// ---------------------------------------------------------------- a minimal host

struct Status {
  tessera_status_code_t code;
  std::string message;
};
struct Registered {
  tessera_kernel_fn_t fn;
  void* user_data;
  uint64_t mask;
};
std::map<std::string, Registered>& registry() {
  static std::map<std::string, Registered> r;
  return r;
}

tessera_status_t status_make(tessera_status_code_t code, const char* message) {
  return reinterpret_cast<tessera_status_t>(new Status{code, message ? message : ""});
}
void status_free(tessera_status_t s) { delete reinterpret_cast<Status*>(s); }
tessera_status_code_t status_code(tessera_status_t s) { return s ? reinterpret_cast<Status*>(s)->code : TESSERA_STATUS_OK; }
const char* status_message(tessera_status_t s) { return s ? reinterpret_cast<Status*>(s)->message.c_str() : ""; }
void host_log(tessera_log_level_t, const char*, const char*) {}
const char* host_getenv(const char* name) { return std::getenv(name); }
tessera_status_t op_define(void*, const char*, const char*) { return nullptr; }
tessera_status_t kernel_register(void*, const char* op, int32_t, uint64_t mask, tessera_kernel_fn_t fn, void* ud,
                                 uint32_t) {
  registry()[op] = Registered{fn, ud, mask};
  return nullptr;
}
tessera_status_t fallback_register(void*, int32_t, tessera_kernel_fn_t, void*) { return nullptr; }
tessera_status_t forbid(void*, const char*) { return nullptr; }

tessera_host_api_t make_host() {
  tessera_host_api_t h{};
  h.struct_size = sizeof h;
  h.abi_major = TESSERA_ABI_MAJOR;
  h.abi_minor = TESSERA_ABI_MINOR;
  h.status_make = status_make;
  h.status_free = status_free;
  h.status_code = status_code;
  h.status_message = status_message;
  h.log = host_log;
  h.getenv = host_getenv;
  h.op_define = op_define;
  h.kernel_register = kernel_register;
  h.fallback_register = fallback_register;
  h.op_forbid_fallback = forbid;
  return h;
}

struct Plugin {
  void* lib = nullptr;
  const tessera_plugin_t* plugin = nullptr;
  const tessera_device_interface_t* dev = nullptr;
  tessera_host_api_t host = make_host();
  int32_t count = 0;
  bool fp64 = false;
  Plugin() {
    lib = dlopen(TESSERA_OPENCL_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    auto init = reinterpret_cast<tessera_plugin_init_fn_t>(dlsym(lib, TESSERA_PLUGIN_ENTRY_NAME));
    if (!init) return;
    tessera_status_t s = init(TESSERA_ABI_MAJOR, TESSERA_ABI_MINOR, &host, &plugin);
    if (s) {
      ADD_FAILURE() << status_message(s);
      status_free(s);
      return;
    }
    dev = plugin->device;
    char reason[512];
    count = dev->device_count(plugin->self, reason, sizeof reason);
    if (count > 0) {
      std::vector<char> buf(dev->device_properties(plugin->self, 0, nullptr, 0) + 1);
      dev->device_properties(plugin->self, 0, buf.data(), buf.size());
      fp64 = std::string(buf.data()).find("\"fp64\": true") != std::string::npos;
    }
  }
};
Plugin& plugin() {
  static Plugin p;
  return p;
}

void check(tessera_status_t s) {
  if (s) {
    std::string m = status_message(s);
    status_free(s);
    FAIL() << m;
  }
}

// ---------------------------------------------------------------- device tensors

size_t itemsize(int32_t d) {
  static const size_t sizes[] = {1, 1, 1, 2, 4, 8, 2, 2, 4, 8};
  return sizes[d];
}
uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
float from_bf16(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
void store(unsigned char* p, int32_t d, double v) {
  switch (d) {
    case TESSERA_DTYPE_BOOL: *p = v != 0; break;
    case TESSERA_DTYPE_UINT8: *p = uint8_t(v); break;
    case TESSERA_DTYPE_INT8: *reinterpret_cast<int8_t*>(p) = int8_t(v); break;
    case TESSERA_DTYPE_INT16: { int16_t x = int16_t(v); std::memcpy(p, &x, 2); break; }
    case TESSERA_DTYPE_INT32: { int32_t x = int32_t(v); std::memcpy(p, &x, 4); break; }
    case TESSERA_DTYPE_INT64: { int64_t x = int64_t(v); std::memcpy(p, &x, 8); break; }
    case TESSERA_DTYPE_FLOAT16: { _Float16 x = _Float16(float(v)); std::memcpy(p, &x, 2); break; }
    case TESSERA_DTYPE_BFLOAT16: { uint16_t x = to_bf16(float(v)); std::memcpy(p, &x, 2); break; }
    case TESSERA_DTYPE_FLOAT32: { float x = float(v); std::memcpy(p, &x, 4); break; }
    default: std::memcpy(p, &v, 8);
  }
}
double load(const unsigned char* p, int32_t d) {
  switch (d) {
    case TESSERA_DTYPE_BOOL: case TESSERA_DTYPE_UINT8: return *p;
    case TESSERA_DTYPE_INT8: return *reinterpret_cast<const int8_t*>(p);
    case TESSERA_DTYPE_INT16: { int16_t x; std::memcpy(&x, p, 2); return x; }
    case TESSERA_DTYPE_INT32: { int32_t x; std::memcpy(&x, p, 4); return x; }
    case TESSERA_DTYPE_INT64: { int64_t x; std::memcpy(&x, p, 8); return double(x); }
    case TESSERA_DTYPE_FLOAT16: { _Float16 x; std::memcpy(&x, p, 2); return double(float(x)); }
    case TESSERA_DTYPE_BFLOAT16: { uint16_t x; std::memcpy(&x, p, 2); return from_bf16(x); }
    case TESSERA_DTYPE_FLOAT32: { float x; std::memcpy(&x, p, 4); return x; }
    default: { double x; std::memcpy(&x, p, 8); return x; }
  }
}
// Value after a round trip through dtype d (what the device sees).
double rounded(double v, int32_t d) {
  unsigned char b[8];
  store(b, d, v);
  return load(b, d);
}

enum class Layout { Contiguous, Transposed, Offset };

// A tensor in device memory with a chosen layout. Values are given in logical row-major order.
struct DTensor {
  std::vector<int64_t> sizes, strides;
  int32_t dtype = TESSERA_DTYPE_FLOAT32;
  void* mem = nullptr;
  int64_t byte_offset = 0;
  int64_t storage_elems = 0;
  tessera_tensor_t raw{};

  DTensor() = default;
  DTensor(std::vector<int64_t> s, int32_t d, Layout layout = Layout::Contiguous) : sizes(std::move(s)), dtype(d) {
    const size_t n = sizes.size();
    strides.assign(n, 0);
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = layout == Layout::Transposed ? i : n - 1 - i;  // innermost first
    int64_t st = 1;
    for (size_t k = 0; k < n; ++k) {
      strides[order[k]] = st;
      st *= std::max<int64_t>(sizes[order[k]], 1);
    }
    const int64_t pad = layout == Layout::Offset ? 3 : 0;
    byte_offset = pad * int64_t(itemsize(d));
    storage_elems = st + pad;
    auto& p = plugin();
    check(p.dev->memory_allocate(p.plugin->self, 0, uint64_t(storage_elems) * itemsize(d), &mem));
  }
  ~DTensor() {
    if (mem) plugin().dev->memory_free(plugin().plugin->self, 0, mem);
  }
  DTensor(const DTensor&) = delete;
  DTensor& operator=(const DTensor&) = delete;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
  }
  int64_t offset_of(int64_t linear) const {
    int64_t off = 0;
    for (int d = int(sizes.size()) - 1; d >= 0; --d) {
      off += (linear % sizes[size_t(d)]) * strides[size_t(d)];
      linear /= sizes[size_t(d)];
    }
    return off;
  }
  void upload(const std::vector<double>& values) {
    std::vector<unsigned char> bytes(size_t(storage_elems) * itemsize(dtype), 0);
    for (int64_t i = 0; i < numel(); ++i)
      store(bytes.data() + byte_offset + offset_of(i) * int64_t(itemsize(dtype)), dtype, values[size_t(i)]);
    check(plugin().dev->memory_copy_from_host(plugin().plugin->self, 0, mem, 0, bytes.data(), bytes.size(), nullptr));
  }
  std::vector<double> download() const {
    std::vector<unsigned char> bytes(size_t(storage_elems) * itemsize(dtype));
    check(plugin().dev->memory_copy_to_host(plugin().plugin->self, 0, bytes.data(), mem, 0, bytes.size(), nullptr));
    std::vector<double> v(static_cast<size_t>(numel()));
    for (int64_t i = 0; i < numel(); ++i)
      v[size_t(i)] = load(bytes.data() + byte_offset + offset_of(i) * int64_t(itemsize(dtype)), dtype);
    return v;
  }
  const tessera_tensor_t* t() {
    raw.struct_size = sizeof raw;
    raw.dtype = dtype;
    raw.device_type = TESSERA_DEVICE_OPENCL;
    raw.device_index = 0;
    raw.ndim = int32_t(sizes.size());
    raw.sizes = sizes.data();
    raw.strides = strides.data();
    raw.numel = numel();
    raw.data = mem;
    raw.byte_offset = byte_offset;
    return &raw;
  }
};

std::mt19937& rng() {
  static std::mt19937 g(std::random_device{}());
  return g;
}
std::vector<double> random_values(int64_t n, double lo, double hi, int32_t dtype) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) {
    x = dist(rng());
    if (dtype < TESSERA_DTYPE_FLOAT16) x = std::round(x);
    x = rounded(x, dtype);
  }
  return v;
}

tessera_value_t v_double(double d) {
  tessera_value_t v{};
  v.kind = TESSERA_VALUE_DOUBLE;
  v.u.d = d;
  return v;
}
tessera_value_t v_int(int64_t i) {
  tessera_value_t v{};
  v.kind = TESSERA_VALUE_INT;
  v.u.i = i;
  return v;
}
tessera_value_t v_ints(const std::vector<int64_t>& ints) {
  tessera_value_t v{};
  v.kind = TESSERA_VALUE_INT_LIST;
  v.count = int32_t(ints.size());
  v.u.ints = ints.data();
  return v;
}
tessera_value_t v_bool(bool b) {
  tessera_value_t v{};
  v.kind = TESSERA_VALUE_BOOL;
  v.u.b = b;
  return v;
}
tessera_value_t v_string(const char* s) {
  tessera_value_t v{};
  v.kind = TESSERA_VALUE_STRING;
  v.u.s = s;
  return v;
}

tessera_status_t call_raw(const std::string& op, std::vector<const tessera_tensor_t*> in,
                          std::vector<const tessera_tensor_t*> out, std::vector<tessera_value_t> attrs) {
  auto it = registry().find(op);
  if (it == registry().end()) return status_make(TESSERA_STATUS_UNIMPLEMENTED, ("not registered: " + op).c_str());
  tessera_kernel_call_t c{};
  c.struct_size = sizeof c;
  c.num_inputs = int32_t(in.size());
  c.num_outputs = int32_t(out.size());
  c.num_attrs = int32_t(attrs.size());
  c.inputs = in.data();
  c.outputs = out.data();
  c.attrs = attrs.data();
  c.op_name = op.c_str();
  c.device_index = 0;
  return it->second.fn(it->second.user_data, &c);
}
void call(const std::string& op, std::vector<const tessera_tensor_t*> in, std::vector<const tessera_tensor_t*> out,
          std::vector<tessera_value_t> attrs = {}) {
  check(call_raw(op, std::move(in), std::move(out), std::move(attrs)));
}

double tolerance(int32_t d) {
  switch (d) {
    case TESSERA_DTYPE_FLOAT16: return 2e-3;
    case TESSERA_DTYPE_BFLOAT16: return 1.6e-2;
    case TESSERA_DTYPE_FLOAT32: return 2e-5;
    case TESSERA_DTYPE_FLOAT64: return 1e-12;
    default: return 0;
  }
}
void expect_close(const std::vector<double>& got, const std::vector<double>& want, int32_t dtype, double scale = 1,
                  const std::string& what = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double tol = tolerance(dtype) * scale;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << " at " << i;
      continue;
    }
    ASSERT_NEAR(got[i], want[i], tol * std::max(1.0, std::fabs(want[i])) + tol) << what << " at " << i;
  }
}

// Broadcast index: the element of `sizes_in` (right-aligned) read for output linear index i.
int64_t bcast_index(int64_t i, const std::vector<int64_t>& out, const std::vector<int64_t>& in) {
  int64_t idx = 0, mul = 1;
  for (int d = int(out.size()) - 1, k = int(in.size()) - 1; d >= 0; --d, --k) {
    const int64_t c = i % out[size_t(d)];
    i /= out[size_t(d)];
    if (k >= 0) {
      if (in[size_t(k)] != 1) idx += c * mul;
      mul *= in[size_t(k)];
    }
  }
  return idx;
}

class OpenCLKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!plugin().lib) FAIL() << "cannot load " << TESSERA_OPENCL_PLUGIN_PATH << ": " << dlerror();
    if (plugin().count == 0) GTEST_SKIP() << "no OpenCL device on this machine";
  }
};

TEST_F(OpenCLKernels, RegistersTheCoreOps) {
  for (const char* op : {"add.Tensor", "mul.Tensor", "copy_", "fill_", "exp", "sum", "softmax",
                         "layer_norm", "matmul"})
    EXPECT_TRUE(registry().count(op)) << op;
  EXPECT_TRUE(registry()["exp"].mask & TESSERA_DTYPE_BIT(TESSERA_DTYPE_FLOAT16));
  EXPECT_FALSE(registry()["exp"].mask & TESSERA_DTYPE_BIT(TESSERA_DTYPE_INT32));
  EXPECT_EQ(bool(registry()["exp"].mask & TESSERA_DTYPE_BIT(TESSERA_DTYPE_FLOAT64)), plugin().fp64);
}

struct BinaryCase {
  const char* op;
  std::function<double(double, double)> ref;
  bool compare;
};

TEST_F(OpenCLKernels, BinaryOpsBroadcastStridedAllDtypes) {
  const double alpha = 0.5;
  const std::vector<BinaryCase> cases = {
      {"add.Tensor", [&](double x, double y) { return x + alpha * y; }, false},
      {"sub.Tensor", [&](double x, double y) { return x - alpha * y; }, false},
      {"mul.Tensor", [](double x, double y) { return x * y; }, false},
      {"div.Tensor", [](double x, double y) { return x / y; }, false},
      {"maximum", [](double x, double y) { return std::max(x, y); }, false},
      {"minimum", [](double x, double y) { return std::min(x, y); }, false},
      {"eq.Tensor", [](double x, double y) { return double(x == y); }, true},
      {"ne.Tensor", [](double x, double y) { return double(x != y); }, true},
      {"lt.Tensor", [](double x, double y) { return double(x < y); }, true},
      {"le.Tensor", [](double x, double y) { return double(x <= y); }, true},
      {"gt.Tensor", [](double x, double y) { return double(x > y); }, true},
      {"ge.Tensor", [](double x, double y) { return double(x >= y); }, true},
  };
  std::vector<int32_t> dtypes = {TESSERA_DTYPE_FLOAT32, TESSERA_DTYPE_FLOAT16, TESSERA_DTYPE_BFLOAT16,
                                 TESSERA_DTYPE_INT32, TESSERA_DTYPE_INT64};
  if (plugin().fp64) dtypes.push_back(TESSERA_DTYPE_FLOAT64);
  const std::vector<int64_t> out_sizes = {4, 5, 6}, a_sizes = {4, 5, 6}, b_sizes = {5, 1};
  for (int32_t dt : dtypes) {
    for (const auto& c : cases) {
      const std::string name = c.op;
      // Every op in f32; a representative subset in the other dtypes (each dtype combination is one
      // more program to compile on a cold cache).
      if (dt != TESSERA_DTYPE_FLOAT32 && name != "add.Tensor" && name != "maximum" && name != "lt.Tensor") continue;
      const bool integral = dt < TESSERA_DTYPE_FLOAT16;
      if (integral && std::string(c.op) == "div.Tensor") continue;  // true division has a floating output
      const double a_alpha = integral ? 1.0 : alpha;
      DTensor a(a_sizes, dt, Layout::Transposed), b(b_sizes, dt, Layout::Offset);
      DTensor out(out_sizes, c.compare ? TESSERA_DTYPE_BOOL : dt);
      auto av = random_values(a.numel(), -4, 4, dt), bv = random_values(b.numel(), 0.5, 3, dt);
      if (c.compare) bv[0] = av[0];  // some equal elements
      a.upload(av);
      b.upload(bv);
      std::vector<tessera_value_t> attrs;
      const std::string op = c.op;
      if (op == "add.Tensor" || op == "sub.Tensor") attrs.push_back(integral ? v_int(1) : v_double(alpha));
      call(op, {a.t(), b.t()}, {out.t()}, attrs);
      std::vector<double> want(static_cast<size_t>(out.numel()));
      for (int64_t i = 0; i < out.numel(); ++i) {
        const double x = av[size_t(bcast_index(i, out_sizes, a_sizes))];
        const double y = bv[size_t(bcast_index(i, out_sizes, b_sizes))];
        double r = op == "add.Tensor" ? x + a_alpha * y : op == "sub.Tensor" ? x - a_alpha * y : c.ref(x, y);
        want[size_t(i)] = c.compare ? r : rounded(r, dt);
      }
      expect_close(out.download(), want, c.compare ? TESSERA_DTYPE_BOOL : dt, 2,
                   std::string(c.op) + " dtype " + std::to_string(dt));
    }
  }
}

TEST_F(OpenCLKernels, MixedDtypeAddAndIntegerTrueDivision) {
  DTensor a({7, 3}, TESSERA_DTYPE_INT32), b({3}, TESSERA_DTYPE_FLOAT32), out({7, 3}, TESSERA_DTYPE_FLOAT32);
  auto av = random_values(21, -50, 50, TESSERA_DTYPE_INT32), bv = random_values(3, 1, 2, TESSERA_DTYPE_FLOAT32);
  a.upload(av);
  b.upload(bv);
  call("div.Tensor", {a.t(), b.t()}, {out.t()});
  std::vector<double> want(21);
  for (int i = 0; i < 21; ++i) want[size_t(i)] = av[size_t(i)] / bv[size_t(i % 3)];
  expect_close(out.download(), want, TESSERA_DTYPE_FLOAT32, 2);
}

TEST_F(OpenCLKernels, UnaryOps) {
  struct U {
    const char* op;
    std::function<double(double)> ref;
    double lo, hi;
  };
  const std::vector<U> cases = {
      {"neg", [](double x) { return -x; }, -3, 3},
      {"abs", [](double x) { return std::fabs(x); }, -3, 3},
      {"relu", [](double x) { return x < 0 ? 0 : x; }, -3, 3},
      {"exp", [](double x) { return std::exp(x); }, -3, 3},
      {"log", [](double x) { return std::log(x); }, 0.1, 5},
      {"sqrt", [](double x) { return std::sqrt(x); }, 0.1, 5},
      {"rsqrt", [](double x) { return 1 / std::sqrt(x); }, 0.1, 5},
      {"sin", [](double x) { return std::sin(x); }, -3, 3},
      {"cos", [](double x) { return std::cos(x); }, -3, 3},
      {"tanh", [](double x) { return std::tanh(x); }, -3, 3},
      {"sigmoid", [](double x) { return 1 / (1 + std::exp(-x)); }, -5, 5},
      {"gelu", [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, -3, 3},
      {"silu", [](double x) { return x / (1 + std::exp(-x)); }, -5, 5},
      {"erf", [](double x) { return std::erf(x); }, -2, 2},
  };
  std::vector<int32_t> dtypes = {TESSERA_DTYPE_FLOAT32, TESSERA_DTYPE_FLOAT16, TESSERA_DTYPE_BFLOAT16};
  if (plugin().fp64) dtypes.push_back(TESSERA_DTYPE_FLOAT64);
  for (int32_t dt : dtypes) {
    for (const auto& c : cases) {
      const std::string name = c.op;
      if (dt != TESSERA_DTYPE_FLOAT32 && name != "exp" && name != "gelu" && name != "neg") continue;
      DTensor a({6, 7}, dt, Layout::Transposed), out({6, 7}, dt);
      auto av = random_values(42, c.lo, c.hi, dt);
      a.upload(av);
      call(c.op, {a.t()}, {out.t()});
      std::vector<double> want(42);
      for (size_t i = 0; i < 42; ++i) want[i] = rounded(c.ref(av[i]), dt);
      expect_close(out.download(), want, dt, dt == TESSERA_DTYPE_FLOAT32 ? 10 : 2,
                   std::string(c.op) + " dtype " + std::to_string(dt));
    }
  }
  // gelu(approximate="tanh") and integer abs / neg / relu.
  DTensor a({100}, TESSERA_DTYPE_FLOAT32), out({100}, TESSERA_DTYPE_FLOAT32);
  auto av = random_values(100, -3, 3, TESSERA_DTYPE_FLOAT32);
  a.upload(av);
  call("gelu", {a.t()}, {out.t()}, {v_string("tanh")});
  std::vector<double> want(100);
  for (size_t i = 0; i < 100; ++i) {
    const double x = av[i];
    want[i] = 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  }
  expect_close(out.download(), want, TESSERA_DTYPE_FLOAT32, 10, "gelu tanh");
  DTensor ia({5, 4}, TESSERA_DTYPE_INT64, Layout::Transposed), iout({5, 4}, TESSERA_DTYPE_INT64);
  auto iv = random_values(20, -100, 100, TESSERA_DTYPE_INT64);
  ia.upload(iv);
  call("abs", {ia.t()}, {iout.t()});
  for (size_t i = 0; i < 20; ++i) want[i] = std::fabs(iv[i]);
  expect_close(iout.download(), std::vector<double>(want.begin(), want.begin() + 20), TESSERA_DTYPE_INT64);
}

TEST_F(OpenCLKernels, FillAndCopyWithConversionAndStrides) {
  DTensor t({3, 4}, TESSERA_DTYPE_FLOAT32, Layout::Transposed);
  call("fill_", {t.t()}, {t.t()}, {v_double(2.25)});
  expect_close(t.download(), std::vector<double>(12, 2.25), TESSERA_DTYPE_FLOAT32);
  DTensor i({5}, TESSERA_DTYPE_INT64);
  call("fill_", {i.t()}, {i.t()}, {v_int(int64_t(1) << 40)});
  expect_close(i.download(), std::vector<double>(5, double(int64_t(1) << 40)), TESSERA_DTYPE_INT64);

  const std::vector<int32_t> dtypes = {TESSERA_DTYPE_FLOAT32, TESSERA_DTYPE_FLOAT16, TESSERA_DTYPE_BFLOAT16,
                                       TESSERA_DTYPE_INT32, TESSERA_DTYPE_UINT8, TESSERA_DTYPE_BOOL};
  for (int32_t from : dtypes) {
    for (int32_t to : dtypes) {
      // Every pair from and to f32, plus same-dtype (strided) copies and bool/u8 to f16/bf16.
      if (from != TESSERA_DTYPE_FLOAT32 && to != TESSERA_DTYPE_FLOAT32 && from != to &&
          !(from <= TESSERA_DTYPE_UINT8 && to >= TESSERA_DTYPE_FLOAT16))
        continue;
      DTensor src({4, 6}, from, Layout::Transposed), dst({4, 6}, to, Layout::Offset);
      auto sv = random_values(24, 0, 5, from);
      src.upload(sv);
      call("copy_", {dst.t(), src.t()}, {dst.t()}, {v_bool(false)});
      std::vector<double> want(24);
      for (size_t k = 0; k < 24; ++k) want[k] = rounded(sv[k], to);
      expect_close(dst.download(), want, to, 1, "copy " + std::to_string(from) + " -> " + std::to_string(to));
    }
  }
  // Broadcast copy: [3] into [2, 3].
  DTensor src({3}, TESSERA_DTYPE_FLOAT32), dst({2, 3}, TESSERA_DTYPE_FLOAT32);
  auto sv = random_values(3, -1, 1, TESSERA_DTYPE_FLOAT32);
  src.upload(sv);
  call("copy_", {dst.t(), src.t()}, {dst.t()});
  expect_close(dst.download(), {sv[0], sv[1], sv[2], sv[0], sv[1], sv[2]}, TESSERA_DTYPE_FLOAT32);
}

// Naive reduction reference over `dims` of a row-major [d0, d1, d2] tensor.
std::vector<double> reduce_ref(const std::vector<double>& x, const std::vector<int64_t>& sizes,
                               const std::vector<int64_t>& dims, const std::string& op) {
  std::vector<bool> red(sizes.size(), dims.empty());
  for (int64_t d : dims) red[size_t(d < 0 ? d + int64_t(sizes.size()) : d)] = true;
  std::vector<int64_t> out_sizes;
  for (size_t d = 0; d < sizes.size(); ++d)
    if (!red[d]) out_sizes.push_back(sizes[d]);
  int64_t n_out = 1;
  for (int64_t s : out_sizes) n_out *= s;
  std::vector<double> acc(static_cast<size_t>(n_out), op == "amax" ? -INFINITY : op == "amin" ? INFINITY : 0);
  std::vector<int64_t> count(static_cast<size_t>(n_out), 0);
  const int64_t n = int64_t(x.size());
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, oi = 0, mul = 1;
    for (int d = int(sizes.size()) - 1; d >= 0; --d) {
      const int64_t c = rem % sizes[size_t(d)];
      rem /= sizes[size_t(d)];
      if (!red[size_t(d)]) {
        oi += c * mul;
        mul *= sizes[size_t(d)];
      }
    }
    double& a = acc[size_t(oi)];
    a = op == "amax" ? std::max(a, x[size_t(i)]) : op == "amin" ? std::min(a, x[size_t(i)]) : a + x[size_t(i)];
    ++count[size_t(oi)];
  }
  if (op == "mean")
    for (size_t k = 0; k < acc.size(); ++k) acc[k] /= double(count[k]);
  return acc;
}

TEST_F(OpenCLKernels, ReductionsOverDimsWithKeepdim) {
  const std::vector<int64_t> sizes = {6, 5, 70};
  struct R {
    std::vector<int64_t> dims;
    bool keepdim;
  };
  const std::vector<R> reductions = {{{}, false}, {{2}, false}, {{0}, true}, {{0, 2}, false}, {{-2}, true}, {{1, 0}, true}};
  std::vector<int32_t> dtypes = {TESSERA_DTYPE_FLOAT32, TESSERA_DTYPE_FLOAT16, TESSERA_DTYPE_INT32};
  if (plugin().fp64) dtypes.push_back(TESSERA_DTYPE_FLOAT64);
  for (int32_t dt : dtypes) {
    for (const char* op : {"sum", "mean", "amax", "amin"}) {
      if (dt == TESSERA_DTYPE_INT32 && std::string(op) == "mean") continue;
      if (dt != TESSERA_DTYPE_FLOAT32 && std::string(op) == "amin") continue;
      for (const auto& r : reductions) {
        DTensor a(sizes, dt, Layout::Transposed);
        auto av = random_values(a.numel(), -2, 2, dt);
        a.upload(av);
        std::vector<int64_t> out_sizes;
        for (size_t d = 0; d < sizes.size(); ++d) {
          bool red = r.dims.empty();
          for (int64_t k : r.dims) red |= size_t(k < 0 ? k + 3 : k) == d;
          if (!red) out_sizes.push_back(sizes[d]);
          else if (r.keepdim) out_sizes.push_back(1);
        }
        const int32_t out_dt = std::string(op) == "sum" && dt == TESSERA_DTYPE_INT32 ? TESSERA_DTYPE_INT64 : dt;
        DTensor out(out_sizes, out_dt);
        const std::string name = op;
        call(name, {a.t()}, {out.t()}, {v_ints(r.dims), v_bool(r.keepdim)});
        auto want = reduce_ref(av, sizes, r.dims, op);
        for (auto& w : want) w = rounded(w, out_dt);
        expect_close(out.download(), want, out_dt, 20, std::string(op) + " dtype " + std::to_string(dt));
      }
    }
  }
  // A large full reduction takes the work-group path.
  DTensor big({100000}, TESSERA_DTYPE_FLOAT32), s({}, TESSERA_DTYPE_FLOAT32);
  auto bv = random_values(100000, 0, 1, TESSERA_DTYPE_FLOAT32);
  big.upload(bv);
  call("sum", {big.t()}, {s.t()}, {v_ints({}), v_bool(false)});
  double want = 0;
  for (double v : bv) want += v;
  EXPECT_NEAR(s.download()[0], want, 1e-4 * want);
}

TEST_F(OpenCLKernels, SoftmaxAndLogSoftmax) {
  std::vector<int32_t> dtypes = {TESSERA_DTYPE_FLOAT32, TESSERA_DTYPE_FLOAT16};
  if (plugin().fp64) dtypes.push_back(TESSERA_DTYPE_FLOAT64);
  const std::vector<int64_t> sizes = {3, 300, 4};
  for (int32_t dt : dtypes) {
    for (int64_t dim : {1, -1, 0}) {
      for (const char* op : {"softmax", "log_softmax"}) {
        DTensor a(sizes, dt, Layout::Transposed), out(sizes, dt);
        auto av = random_values(a.numel(), -5, 5, dt);
        a.upload(av);
        call(op, {a.t()}, {out.t()}, {v_int(dim)});
        const int64_t d = dim < 0 ? dim + 3 : dim;
        std::vector<double> want(av.size());
        const int64_t inner = d == 2 ? 1 : (d == 1 ? 4 : 1200), len = sizes[size_t(d)];
        for (int64_t i = 0; i < a.numel(); ++i) {
          const int64_t pos = (i / inner) % len, base = i - pos * inner;
          double m = -INFINITY, s = 0;
          for (int64_t j = 0; j < len; ++j) m = std::max(m, av[size_t(base + j * inner)]);
          for (int64_t j = 0; j < len; ++j) s += std::exp(av[size_t(base + j * inner)] - m);
          const double x = av[size_t(i)] - m;
          want[size_t(i)] = rounded(std::string(op) == "softmax" ? std::exp(x) / s : x - std::log(s), dt);
        }
        expect_close(out.download(), want, dt, 10, std::string(op) + " dim " + std::to_string(dim));
      }
    }
  }
}

TEST_F(OpenCLKernels, LayerNormWithAndWithoutAffine) {
  std::vector<int32_t> dtypes = {TESSERA_DTYPE_FLOAT32, TESSERA_DTYPE_BFLOAT16};
  if (plugin().fp64) dtypes.push_back(TESSERA_DTYPE_FLOAT64);
  for (int32_t dt : dtypes) {
    for (bool affine : {true, false}) {
      const std::vector<int64_t> sizes = {4, 3, 50};
      const std::vector<int64_t> norm = {3, 50};
      DTensor x(sizes, dt, Layout::Transposed), out(sizes, dt), w(norm, dt), b(norm, dt, Layout::Transposed);
      auto xv = random_values(x.numel(), -3, 3, dt), wv = random_values(150, 0.5, 1.5, dt),
           bv = random_values(150, -1, 1, dt);
      x.upload(xv);
      w.upload(wv);
      b.upload(bv);
      const double eps = 1e-5;
      call("layer_norm", {x.t(), affine ? w.t() : nullptr, affine ? b.t() : nullptr}, {out.t()},
           {v_ints(norm), v_double(eps), v_bool(true)});
      std::vector<double> want(xv.size());
      for (int64_t r = 0; r < 4; ++r) {
        double mean = 0, var = 0;
        for (int64_t j = 0; j < 150; ++j) mean += xv[size_t(r * 150 + j)];
        mean /= 150;
        for (int64_t j = 0; j < 150; ++j) var += std::pow(xv[size_t(r * 150 + j)] - mean, 2);
        var /= 150;
        for (int64_t j = 0; j < 150; ++j) {
          double y = (xv[size_t(r * 150 + j)] - mean) / std::sqrt(var + eps);
          if (affine) y = y * wv[size_t(j)] + bv[size_t(j)];
          want[size_t(r * 150 + j)] = rounded(y, dt);
        }
      }
      expect_close(out.download(), want, dt, 20, "layer_norm dtype " + std::to_string(dt));
    }
  }
}

void matmul_case(int32_t dt, std::vector<int64_t> as, std::vector<int64_t> bs, std::vector<int64_t> os, Layout la,
                 Layout lb) {
  DTensor a(as, dt, la), b(bs, dt, lb), out(os, dt);
  auto av = random_values(a.numel(), -1, 1, dt), bv = random_values(b.numel(), -1, 1, dt);
  a.upload(av);
  b.upload(bv);
  call("matmul", {a.t(), b.t()}, {out.t()});
  // Reference: treat as [batch..., M, K] x [batch..., K, N] with broadcasting of batch dims.
  const bool a1 = as.size() == 1, b1 = bs.size() == 1;
  const int64_t M = a1 ? 1 : as[as.size() - 2], K = as.back(), N = b1 ? 1 : bs.back();
  const int64_t nb = out.numel() / (M * N);
  std::vector<int64_t> batch(os.begin(), os.end() - (a1 ? 0 : 1) - (b1 ? 0 : 1));
  std::vector<int64_t> abatch(as.begin(), as.end() - (a1 ? 1 : 2)), bbatch(bs.begin(), bs.end() - (b1 ? 1 : 2));
  std::vector<double> want(static_cast<size_t>(out.numel()));
  for (int64_t bi = 0; bi < nb; ++bi) {
    const int64_t ab = abatch.empty() ? 0 : bcast_index(bi, batch, abatch);
    const int64_t bb = bbatch.empty() ? 0 : bcast_index(bi, batch, bbatch);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += av[size_t(ab * M * K + m * K + k)] * bv[size_t(bb * K * N + k * N + n)];
        want[size_t(bi * M * N + m * N + n)] = rounded(s, dt);
      }
  }
  expect_close(out.download(), want, dt, dt == TESSERA_DTYPE_FLOAT32 ? 20 : 4, "matmul dtype " + std::to_string(dt));
}

TEST_F(OpenCLKernels, TiledMatmul2DBatchedBroadcastTransposed) {
  std::vector<int32_t> dtypes = {TESSERA_DTYPE_FLOAT32, TESSERA_DTYPE_FLOAT16};
  if (plugin().fp64) dtypes.push_back(TESSERA_DTYPE_FLOAT64);
  for (int32_t dt : dtypes) {
    matmul_case(dt, {37, 45}, {45, 29}, {37, 29}, Layout::Contiguous, Layout::Contiguous);
    matmul_case(dt, {64, 96}, {96, 64}, {64, 64}, Layout::Transposed, Layout::Transposed);
    matmul_case(dt, {3, 17, 33}, {3, 33, 40}, {3, 17, 40}, Layout::Contiguous, Layout::Offset);
    matmul_case(dt, {2, 3, 9, 8}, {8, 5}, {2, 3, 9, 5}, Layout::Contiguous, Layout::Transposed);
    matmul_case(dt, {33}, {33, 7}, {7}, Layout::Contiguous, Layout::Contiguous);
    matmul_case(dt, {4, 6, 33}, {33}, {4, 6}, Layout::Contiguous, Layout::Contiguous);
  }
}

TEST_F(OpenCLKernels, WhereWithBroadcastAndMixedDtypes) {
  DTensor c({4, 1}, TESSERA_DTYPE_BOOL), a({4, 6}, TESSERA_DTYPE_FLOAT32, Layout::Transposed),
      b({6}, TESSERA_DTYPE_FLOAT16), out({4, 6}, TESSERA_DTYPE_FLOAT32);
  const std::vector<double> cv = {1, 0, 0, 1};
  auto av = random_values(24, -1, 1, TESSERA_DTYPE_FLOAT32), bv = random_values(6, -1, 1, TESSERA_DTYPE_FLOAT16);
  c.upload(cv);
  a.upload(av);
  b.upload(bv);
  call("where.self", {c.t(), a.t(), b.t()}, {out.t()});
  std::vector<double> want(24);
  for (size_t i = 0; i < 24; ++i) want[i] = cv[i / 6] != 0 ? av[i] : bv[i % 6];
  expect_close(out.download(), want, TESSERA_DTYPE_FLOAT32, 0, "where");
}

TEST_F(OpenCLKernels, CpuScalarInputIsStaged) {
  // A wrapped number arrives as a 0-dim CPU tensor: the kernel stages it to the device.
  DTensor a({10}, TESSERA_DTYPE_FLOAT32), out({10}, TESSERA_DTYPE_FLOAT32);
  auto av = random_values(10, -1, 1, TESSERA_DTYPE_FLOAT32);
  a.upload(av);
  float scalar = 3.5f;
  tessera_tensor_t s{};
  s.struct_size = sizeof s;
  s.dtype = TESSERA_DTYPE_FLOAT32;
  s.device_type = TESSERA_DEVICE_CPU;
  s.ndim = 0;
  s.numel = 1;
  s.data = &scalar;
  call("mul.Tensor", {a.t(), &s}, {out.t()});
  std::vector<double> want(10);
  for (size_t i = 0; i < 10; ++i) want[i] = rounded(av[i] * 3.5, TESSERA_DTYPE_FLOAT32);
  expect_close(out.download(), want, TESSERA_DTYPE_FLOAT32);
}

// A 0-dim CPU tensor of dtype `dtype` holding `value` (how the runtime passes a C++ number).
template <typename T>
tessera_tensor_t cpu_scalar(int32_t dtype, T* value) {
  tessera_tensor_t s{};
  s.struct_size = sizeof s;
  s.dtype = dtype;
  s.device_type = TESSERA_DEVICE_CPU;
  s.ndim = 0;
  s.numel = 1;
  s.data = value;
  return s;
}

TEST_F(OpenCLKernels, WrappedNumbersConvertStraightIntoTheComputeType) {
  // Note [Wrapped numbers on the device]: float16 * 1e5 (float64) is formed in float32: ~100.06, not inf.
  double big = 1e5;
  tessera_tensor_t sb = cpu_scalar(TESSERA_DTYPE_FLOAT64, &big);
  DTensor h({3}, TESSERA_DTYPE_FLOAT16), hout({3}, TESSERA_DTYPE_FLOAT16);
  h.upload({0.001, -0.0005, 0.75});
  call("mul.Tensor", {h.t(), &sb}, {hout.t()});
  const std::vector<double> got = hout.download();
  EXPECT_EQ(got[0], 100.0625);           // float16(0.001) * 1e5 = 100.04, rounded to float16
  EXPECT_NEAR(got[1], -50.02, 0.04);     // float16 spacing at 50 is 0.03125
  EXPECT_EQ(got[2], INFINITY);           // 75000 is past float16's range: inf only here

  // uint8 [7, 2] with int64 -3: true division in float32, and a product that wraps in uint8.
  int64_t minus3 = -3;
  tessera_tensor_t s3 = cpu_scalar(TESSERA_DTYPE_INT64, &minus3);
  DTensor u({2}, TESSERA_DTYPE_UINT8), q({2}, TESSERA_DTYPE_FLOAT32), p({2}, TESSERA_DTYPE_UINT8);
  u.upload({7, 2});
  call("div.Tensor", {u.t(), &s3}, {q.t()});
  expect_close(q.download(), {rounded(7.0 / -3.0, TESSERA_DTYPE_FLOAT32), rounded(2.0 / -3.0, TESSERA_DTYPE_FLOAT32)},
               TESSERA_DTYPE_FLOAT32, 0, "uint8 / -3");
  call("mul.Tensor", {u.t(), &s3}, {p.t()});
  EXPECT_EQ(p.download(), (std::vector<double>{235, 250}));  // -21 and -6 mod 256

  // int32 [2, 3] < 2.5 (float64): compared in float32, not with 2.5 truncated to 2.
  double two_and_half = 2.5;
  tessera_tensor_t sh = cpu_scalar(TESSERA_DTYPE_FLOAT64, &two_and_half);
  DTensor i({2}, TESSERA_DTYPE_INT32), lt({2}, TESSERA_DTYPE_BOOL);
  i.upload({2, 3});
  call("lt.Tensor", {i.t(), &sh}, {lt.t()});
  EXPECT_EQ(lt.download(), (std::vector<double>{1, 0}));

  // where(cond, float16 x, 1000.7 as float64): the number is rounded only at the float16 store.
  double v1000 = 1000.7;
  tessera_tensor_t sk = cpu_scalar(TESSERA_DTYPE_FLOAT64, &v1000);
  DTensor c({2}, TESSERA_DTYPE_BOOL), x({2}, TESSERA_DTYPE_FLOAT16), w({2}, TESSERA_DTYPE_FLOAT16);
  c.upload({1, 0});
  x.upload({1.5, 2.5});
  call("where.self", {c.t(), x.t(), &sk}, {w.t()});
  EXPECT_EQ(w.download(), (std::vector<double>{1.5, 1000.5}));
}

TEST_F(OpenCLKernels, FloatingAlphaOnIntegralAddIsInvalid) {
  DTensor a({2}, TESSERA_DTYPE_INT32), b({2}, TESSERA_DTYPE_INT32), out({2}, TESSERA_DTYPE_INT32);
  a.upload({1, 2});
  b.upload({3, 4});
  tessera_value_t alpha{};
  alpha.kind = TESSERA_VALUE_DOUBLE;
  alpha.u.d = 2.5;
  tessera_status_t s = call_raw("add.Tensor", {a.t(), b.t()}, {out.t()}, {alpha});
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(status_code(s), TESSERA_STATUS_INVALID_ARGUMENT) << status_message(s);
  EXPECT_NE(std::string(status_message(s)).find("alpha must not be a floating point number"), std::string::npos)
      << status_message(s);
  status_free(s);
}

TEST_F(OpenCLKernels, UnsupportedCombinationsAreUnimplementedNotWrong) {
  DTensor a({4}, TESSERA_DTYPE_FLOAT32), b({4}, TESSERA_DTYPE_FLOAT16), out({4}, TESSERA_DTYPE_FLOAT32);
  tessera_status_t s = call_raw("matmul", {a.t(), b.t()}, {out.t()}, {});
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(status_code(s), TESSERA_STATUS_UNIMPLEMENTED) << status_message(s);
  status_free(s);
}

TEST_F(OpenCLKernels, AllocatorReusesFreedBlocksBySizeClass) {
  auto& p = plugin();
  auto props = [&] {
    std::vector<char> buf(p.dev->device_properties(p.plugin->self, 0, nullptr, 0) + 1);
    p.dev->device_properties(p.plugin->self, 0, buf.data(), buf.size());
    return std::string(buf.data());
  };
  auto field = [&](const std::string& json, const std::string& name) {
    const auto pos = json.find("\"allocator\"");
    const auto at = json.find("\"" + name + "\": ", pos);
    return std::stoull(json.substr(at + name.size() + 4));
  };
  void* h1 = nullptr;
  check(p.dev->memory_allocate(p.plugin->self, 0, 3000000, &h1));
  const std::string before = props();
  p.dev->memory_free(p.plugin->self, 0, h1);
  const std::string cached = props();
  EXPECT_GE(field(cached, "cached"), 3000000u);
  void* h2 = nullptr;
  check(p.dev->memory_allocate(p.plugin->self, 0, 2900000, &h2));  // same size class
  EXPECT_EQ(h1, h2);
  const std::string after = props();
  EXPECT_EQ(field(after, "hits"), field(before, "hits") + 1);
  EXPECT_EQ(field(after, "misses"), field(before, "misses"));
  p.dev->memory_free(p.plugin->self, 0, h2);
  EXPECT_EQ(dlsym(p.lib, "tessera_opencl_empty_cache"), nullptr) << "no ad-hoc symbol: the typed extension only";
  ASSERT_NE(p.plugin->get_proc_address, nullptr);
  auto empty = reinterpret_cast<tessera_ext_empty_cache_fn_t>(p.plugin->get_proc_address(p.plugin->self, TESSERA_EXT_EMPTY_CACHE));
  ASSERT_NE(empty, nullptr);
  EXPECT_GE(empty(p.plugin->self, -1), 3000000u);
  EXPECT_EQ(field(props(), "cached"), 0u);
}

TEST_F(OpenCLKernels, StreamsEventsAndDeviceCopies) {
  auto& p = plugin();
  void* stream = nullptr;
  void* event = nullptr;
  check(p.dev->stream_create(p.plugin->self, 0, &stream));
  check(p.dev->event_create(p.plugin->self, 0, &event));
  DTensor a({1000}, TESSERA_DTYPE_FLOAT32), b({1000}, TESSERA_DTYPE_FLOAT32);
  auto av = random_values(1000, -1, 1, TESSERA_DTYPE_FLOAT32);
  a.upload(av);
  check(p.dev->memory_copy_device(p.plugin->self, 0, b.mem, 0, 0, a.mem, 0, 4000, stream));
  check(p.dev->event_record(p.plugin->self, 0, event, stream));
  check(p.dev->event_wait(p.plugin->self, 0, event, nullptr));
  check(p.dev->event_synchronize(p.plugin->self, 0, event));
  check(p.dev->stream_synchronize(p.plugin->self, 0, stream));
  check(p.dev->device_synchronize(p.plugin->self, 0));
  expect_close(b.download(), av, TESSERA_DTYPE_FLOAT32, 0);
  p.dev->event_destroy(p.plugin->self, 0, event);
  p.dev->stream_destroy(p.plugin->self, 0, stream);
}

}  // namespace
