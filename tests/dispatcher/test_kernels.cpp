#include "test_kernels.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "tessera/allocator.h"
#include "tessera/random.h"

namespace tessera::testing {

namespace {
size_t dsize(int32_t dt) {
  static const size_t s[] = {1, 1, 1, 2, 4, 8, 2, 2, 4, 8};
  return s[dt];
}
char* elem(const tessera_tensor_t* t, int64_t off) {
  return static_cast<char*>(t->data) + t->byte_offset + off * int64_t(dsize(t->dtype));
}
// Offset of the `linear`-th element in row-major order of t's own shape.
int64_t own_offset(const tessera_tensor_t* t, int64_t linear) {
  return bcast_offset(t, t->sizes, t->ndim, linear);
}
tessera_status_t fail(tessera_status_code_t code, const std::string& m) {
  return kernel_status_make(code, m.c_str());
}
double attr_num(const tessera_value_t& v) {
  return v.kind == TESSERA_VALUE_DOUBLE ? v.u.d : (v.kind == TESSERA_VALUE_BOOL ? v.u.b : double(v.u.i));
}
}  // namespace

double load(const tessera_tensor_t* t, int64_t off) {
  const char* p = elem(t, off);
  switch (t->dtype) {
    case TESSERA_DTYPE_BOOL:
      return *reinterpret_cast<const uint8_t*>(p) ? 1 : 0;
    case TESSERA_DTYPE_UINT8:
      return *reinterpret_cast<const uint8_t*>(p);
    case TESSERA_DTYPE_INT8:
      return *reinterpret_cast<const int8_t*>(p);
    case TESSERA_DTYPE_INT16:
      return *reinterpret_cast<const int16_t*>(p);
    case TESSERA_DTYPE_INT32:
      return *reinterpret_cast<const int32_t*>(p);
    case TESSERA_DTYPE_INT64:
      return double(*reinterpret_cast<const int64_t*>(p));
    case TESSERA_DTYPE_FLOAT32:
      return *reinterpret_cast<const float*>(p);
    case TESSERA_DTYPE_FLOAT64:
      return *reinterpret_cast<const double*>(p);
    default:
      std::abort();
  }
}

void store(const tessera_tensor_t* t, int64_t off, double v) {
  char* p = elem(t, off);
  switch (t->dtype) {
    case TESSERA_DTYPE_BOOL:
      *reinterpret_cast<uint8_t*>(p) = v != 0;
      break;
    case TESSERA_DTYPE_UINT8:
      *reinterpret_cast<uint8_t*>(p) = uint8_t(v);
      break;
    case TESSERA_DTYPE_INT8:
      *reinterpret_cast<int8_t*>(p) = int8_t(v);
      break;
    case TESSERA_DTYPE_INT16:
      *reinterpret_cast<int16_t*>(p) = int16_t(v);
      break;
    case TESSERA_DTYPE_INT32:
      *reinterpret_cast<int32_t*>(p) = int32_t(v);
      break;
    case TESSERA_DTYPE_INT64:
      *reinterpret_cast<int64_t*>(p) = int64_t(v);
      break;
    case TESSERA_DTYPE_FLOAT32:
      *reinterpret_cast<float*>(p) = float(v);
      break;
    case TESSERA_DTYPE_FLOAT64:
      *reinterpret_cast<double*>(p) = v;
      break;
    default:
      std::abort();
  }
}

int64_t bcast_offset(const tessera_tensor_t* t, const int64_t* sizes, int ndim, int64_t linear) {
  int64_t off = 0;
  for (int d = ndim - 1; d >= 0; --d) {
    int64_t i = linear % sizes[d];
    linear /= sizes[d];
    int td = d - (ndim - t->ndim);
    if (td >= 0 && t->sizes[td] != 1) off += i * t->strides[td];
  }
  return off;
}

namespace {
template <typename F>
tessera_status_t elementwise(const tessera_kernel_call_t* c, F f) {
  const tessera_tensor_t* out = c->outputs[0];
  for (int64_t i = 0; i < out->numel; ++i) {
    double a = load(c->inputs[0], bcast_offset(c->inputs[0], out->sizes, out->ndim, i));
    double b =
        c->num_inputs > 1 ? load(c->inputs[1], bcast_offset(c->inputs[1], out->sizes, out->ndim, i)) : 0;
    store(out, own_offset(out, i), f(a, b));
  }
  return nullptr;
}
}  // namespace

tessera_status_t k_fill(void*, const tessera_kernel_call_t* c) {
  const tessera_tensor_t* out = c->outputs[0];
  double v = attr_num(c->attrs[0]);
  for (int64_t i = 0; i < out->numel; ++i) store(out, own_offset(out, i), v);
  return nullptr;
}
tessera_status_t k_copy(void*, const tessera_kernel_call_t* c) {
  const tessera_tensor_t* out = c->outputs[0];
  const tessera_tensor_t* src = c->inputs[1];
  // Read everything first: src may overlap dst.
  std::vector<double> values(size_t(out->numel));
  for (int64_t i = 0; i < out->numel; ++i)
    values[size_t(i)] = load(src, bcast_offset(src, out->sizes, out->ndim, i));
  for (int64_t i = 0; i < out->numel; ++i) store(out, own_offset(out, i), values[size_t(i)]);
  return nullptr;
}
tessera_status_t k_add(void* ud, const tessera_kernel_call_t* c) {
  double alpha = attr_num(c->attrs[0]) * (ud ? -1 : 1);
  return elementwise(c, [&](double a, double b) { return a + alpha * b; });
}
tessera_status_t k_mul(void*, const tessera_kernel_call_t* c) {
  return elementwise(c, [](double a, double b) { return a * b; });
}
tessera_status_t k_div(void*, const tessera_kernel_call_t* c) {
  return elementwise(c, [](double a, double b) { return a / b; });
}
tessera_status_t k_eq(void*, const tessera_kernel_call_t* c) {
  return elementwise(c, [](double a, double b) { return a == b ? 1.0 : 0.0; });
}
tessera_status_t k_neg(void*, const tessera_kernel_call_t* c) {
  return elementwise(c, [](double a, double) { return -a; });
}
tessera_status_t k_relu(void*, const tessera_kernel_call_t* c) {
  return elementwise(c, [](double a, double) { return a > 0 ? a : 0; });
}
tessera_status_t k_exp(void*, const tessera_kernel_call_t* c) {
  return elementwise(c, [](double a, double) { return std::exp(a); });
}

tessera_status_t k_sum(void*, const tessera_kernel_call_t* c) {
  const tessera_tensor_t* x = c->inputs[0];
  const tessera_tensor_t* out = c->outputs[0];
  uint64_t mask = 0;
  if (c->attrs[0].kind != TESSERA_VALUE_INT_LIST || c->attrs[0].count == 0) {
    mask = ~uint64_t(0);
  } else {
    for (int i = 0; i < c->attrs[0].count; ++i) {
      int64_t d = c->attrs[0].u.ints[i];
      mask |= uint64_t(1) << (d < 0 ? d + x->ndim : d);
    }
  }
  std::vector<double> acc(size_t(out->numel), 0.0);
  std::vector<int64_t> idx(size_t(x->ndim), 0);
  for (int64_t i = 0; i < x->numel; ++i) {
    int64_t rem = i;
    for (int d = x->ndim - 1; d >= 0; --d) {
      idx[size_t(d)] = rem % x->sizes[d];
      rem /= x->sizes[d];
    }
    int64_t o = 0;
    for (int d = 0; d < x->ndim; ++d)
      if (!(mask >> d & 1)) o = o * x->sizes[d] + idx[size_t(d)];
    acc[size_t(o)] += load(x, own_offset(x, i));
  }
  for (int64_t i = 0; i < out->numel; ++i) store(out, own_offset(out, i), acc[size_t(i)]);
  return nullptr;
}

tessera_status_t k_matmul(void*, const tessera_kernel_call_t* c) {
  const tessera_tensor_t *a = c->inputs[0], *b = c->inputs[1], *out = c->outputs[0];
  if (a->ndim != 2 || b->ndim != 2) return fail(TESSERA_STATUS_UNIMPLEMENTED, "test matmul: 2-D only");
  int64_t n = a->sizes[0], k = a->sizes[1], m = b->sizes[1];
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p)
        s += load(a, i * a->strides[0] + p * a->strides[1]) * load(b, p * b->strides[0] + j * b->strides[1]);
      store(out, i * out->strides[0] + j * out->strides[1], s);
    }
  return nullptr;
}

tessera_status_t k_uniform(void*, const tessera_kernel_call_t* c) {
  const tessera_tensor_t* out = c->outputs[0];
  double from = attr_num(c->attrs[0]), to = attr_num(c->attrs[1]);
  uint64_t seed = uint64_t(c->attrs[2].u.i), offset = uint64_t(c->attrs[3].u.i);
  for (int64_t i = 0; i < out->numel; ++i)
    store(out, own_offset(out, i), from + (to - from) * double(philox::uniform(seed, offset + uint64_t(i))));
  return nullptr;
}

tessera_status_t k_arange(void*, const tessera_kernel_call_t* c) {
  const tessera_tensor_t* out = c->outputs[0];
  double start = attr_num(c->attrs[0]), step = attr_num(c->attrs[2]);
  for (int64_t i = 0; i < out->numel; ++i) store(out, own_offset(out, i), start + double(i) * step);
  return nullptr;
}

SeenCall& last_seen() {
  static SeenCall s;
  return s;
}

tessera_status_t k_noop(void*, const tessera_kernel_call_t* c) {
  SeenCall& s = last_seen();
  s = SeenCall{};
  s.op = c->op_name;
  for (int i = 0; i < c->num_inputs; ++i) {
    s.input_dtypes.push_back(c->inputs[i] ? c->inputs[i]->dtype : -1);
    s.input_devices.push_back(c->inputs[i] ? c->inputs[i]->device_type : -1);
  }
  for (int i = 0; i < c->num_attrs; ++i) s.attr_kinds.push_back(c->attrs[i].kind);
  s.num_outputs = c->num_outputs;
  return nullptr;
}

tessera_status_t k_unimplemented(void*, const tessera_kernel_call_t* c) {
  return fail(TESSERA_STATUS_UNIMPLEMENTED, std::string(c->op_name) + ": not in this test kernel");
}

ScopedKernel::ScopedKernel(const char* op, DeviceType backend, tessera_kernel_fn_t fn, void* user_data,
                           uint64_t dtype_mask, uint32_t flags, Functionality f) {
  Dispatcher& d = Dispatcher::instance();
  handle_ = d.register_kernel(d.op(op), backend, f, KernelEntry{fn, user_data, dtype_mask, flags, "test"});
}
ScopedKernel::~ScopedKernel() { Dispatcher::instance().deregister(handle_); }

// ---- the fake device

FakeDeviceStats& fake_stats() {
  static FakeDeviceStats s;
  return s;
}

namespace {

class FakeAllocator : public Allocator {
 public:
  DataPtr allocate(size_t nbytes, int index) override {
    void* p = std::malloc(nbytes ? nbytes : 1);
    return DataPtr(
        p, nullptr, [](void*, void* h) { std::free(h); },
        Device(DeviceType::PrivateUse1, index < 0 ? 0 : index));
  }
};

int32_t fake_count(void*, char*, size_t) { return 2; }
tessera_status_t fake_get_current(void*, int32_t* out) {
  *out = 0;
  return nullptr;
}
tessera_status_t fake_set_current(void*, int32_t) { return nullptr; }
tessera_status_t fake_from_host(void*, int32_t, void* dst, uint64_t off, const void* src, uint64_t n, void*) {
  fake_stats().from_host++;
  if (fake_stats().fail_next_from_host.load() > 0) {
    fake_stats().fail_next_from_host--;
    std::memcpy(static_cast<char*>(dst) + off, src, n / 2);
    return kernel_status_make(TESSERA_STATUS_INTERNAL, "injected transfer failure");
  }
  std::memcpy(static_cast<char*>(dst) + off, src, n);
  return nullptr;
}
tessera_status_t fake_to_host(void*, int32_t, void* dst, const void* src, uint64_t off, uint64_t n, void*) {
  fake_stats().to_host++;
  std::memcpy(dst, static_cast<const char*>(src) + off, n);
  return nullptr;
}
tessera_status_t fake_device_copy(void*, int32_t, void* dst, uint64_t doff, int32_t, const void* src,
                                  uint64_t soff, uint64_t n, void*) {
  fake_stats().device_to_device++;
  std::memcpy(static_cast<char*>(dst) + doff, static_cast<const char*>(src) + soff, n);
  return nullptr;
}
tessera_status_t fake_sync(void*, int32_t) { return nullptr; }
size_t fake_props(void*, int32_t d, char* buf, size_t cap) {
  std::string s = "{\"name\": \"fake " + std::to_string(d) + "\"}";
  if (buf && cap) {
    size_t n = std::min(s.size(), cap - 1);
    std::memcpy(buf, s.data(), n);
    buf[n] = 0;
  }
  return s.size();
}

}  // namespace

void setup_test_backends() {
  static std::once_flag once;
  std::call_once(once, [] {
    rename_privateuse1_backend(kFakeDeviceName);
    static FakeAllocator alloc;
    set_allocator(DeviceType::PrivateUse1, &alloc);
    static tessera_device_interface_t iface{};
    iface.struct_size = sizeof(iface);
    iface.device_count = fake_count;
    iface.device_get_current = fake_get_current;
    iface.device_set_current = fake_set_current;
    iface.memory_copy_from_host = fake_from_host;
    iface.memory_copy_to_host = fake_to_host;
    iface.memory_copy_device = fake_device_copy;
    iface.device_synchronize = fake_sync;
    iface.device_properties = fake_props;
    register_backend_device(DeviceType::PrivateUse1, BackendDevice{&iface, nullptr, "fake"});

    Dispatcher& d = Dispatcher::instance();
    static int sub_flag = 1;
    struct K {
      const char* op;
      tessera_kernel_fn_t fn;
      void* ud;
      bool on_fake;
    };
    const K kernels[] = {
        {"fill_", k_fill, nullptr, true},       {"copy_", k_copy, nullptr, true},
        {"add.Tensor", k_add, nullptr, true},   {"sub.Tensor", k_add, &sub_flag, false},
        {"mul.Tensor", k_mul, nullptr, true},   {"div.Tensor", k_div, nullptr, false},
        {"eq.Tensor", k_eq, nullptr, false},    {"neg", k_neg, nullptr, true},
        {"relu", k_relu, nullptr, false},       {"exp", k_exp, nullptr, false},
        {"sum", k_sum, nullptr, false},         {"matmul", k_matmul, nullptr, false},
        {"uniform_", k_uniform, nullptr, true}, {"arange", k_arange, nullptr, false},
        {"add_.Tensor", k_add, nullptr, false}, {"mul_.Tensor", k_mul, nullptr, false},
    };
    for (const K& k : kernels) {
      d.register_kernel(d.op(k.op), DeviceType::CPU, Functionality::Dense,
                        KernelEntry{k.fn, k.ud, TESSERA_DTYPE_MASK_ALL, 0, "test"});
      if (k.on_fake)
        d.register_kernel(d.op(k.op), DeviceType::PrivateUse1, Functionality::Dense,
                          KernelEntry{k.fn, k.ud, TESSERA_DTYPE_MASK_ALL, 0, "test"});
    }
  });
}

}  // namespace tessera::testing
