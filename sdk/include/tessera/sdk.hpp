// Header-only C++ over the plugin C ABI (as dnnl.hpp is over dnnl.h). Everything here is compiled
// into the plugin itself, so no C++ type crosses the boundary and a plugin built against SDK 1.0
// keeps loading in every 1.x runtime.
//
//   #include <tessera/sdk.hpp>
//   class MyDevice final : public tessera::sdk::DeviceBase { ... };  // count, memory, copies
//   MyDevice g_device;
//   void my_add(const tessera::sdk::KernelCall& call) { ... }  // throws tessera::sdk::Error
//   tessera_plugin_t g_plugin = {.struct_size = sizeof(tessera_plugin_t), .abi_major = TESSERA_ABI_MAJOR,
//                                .abi_minor = TESSERA_ABI_MINOR, .name = "my_plugin", .version = "0.1.0"};
//   TESSERA_PLUGIN_ENTRY(&g_plugin) {
//     g_plugin.self = g_device.self();
//     g_plugin.device = g_device.interface();
//     host.register_kernel("add.Tensor", TESSERA_DTYPE_MASK_FLOATING, TESSERA_SDK_KERNEL(my_add));
//   }
//
// Compiler and quantizer plugins: GraphView, CompilerBase and QuantizerBase in sdk_graph.hpp
// (included at the end of this file).
#pragma once
#include <cstdint>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include "tessera/plugin_abi.h"

namespace tessera::sdk {

// The host API table this plugin was initialised with (set by the entry macro).
inline const tessera_host_api_t*& host_api() {
  static const tessera_host_api_t* api = nullptr;
  return api;
}

// Thrown inside a plugin and turned into a tessera_status_t at the kernel boundary.
class Error : public std::runtime_error {
 public:
  Error(tessera_status_code_t code, const std::string& msg) : std::runtime_error(msg), code_(code) {}
  tessera_status_code_t code() const { return code_; }

 private:
  tessera_status_code_t code_;
};

inline tessera_status_t make_status(tessera_status_code_t code, const std::string& message) {
  return host_api()->status_make(code, message.c_str());
}
inline tessera_status_t ok() { return nullptr; }
inline tessera_status_t unimplemented(const std::string& message) {
  return make_status(TESSERA_STATUS_UNIMPLEMENTED, message);
}

inline void log(tessera_log_level_t level, const char* component, const std::string& message) {
  const tessera_host_api_t* api = host_api();
  if (TESSERA_ABI_HAS_FIELD(api, tessera_host_api_t, log) && api->log) api->log(level, component, message.c_str());
}

// Throws a status the host returned as sdk::Error (freeing it); does nothing for NULL.
inline void throw_if_error(tessera_status_t status) {
  if (!status) return;
  const tessera_host_api_t* api = host_api();
  Error e(api->status_code(status), api->status_message(status));
  api->status_free(status);
  throw e;
}

// Runs `f` and returns its failure as a status object: the boundary of every C entry the SDK fills
// (device interface, compiler table, quantizer extension), so no exception crosses the C ABI.
template <typename F>
tessera_status_t status_of(F&& f) noexcept {
  try {
    f();
    return nullptr;
  } catch (const Error& e) {
    return make_status(e.code(), e.what());
  } catch (const std::bad_alloc&) {
    return make_status(TESSERA_STATUS_OUT_OF_MEMORY, "out of host memory");
  } catch (const std::exception& e) {
    return make_status(TESSERA_STATUS_INTERNAL, e.what());
  }
}

#define TESSERA_SDK_CHECK(cond, msg)                                                   \
  do {                                                                                 \
    if (!(cond)) throw ::tessera::sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT, (msg));  \
  } while (0)

inline size_t dtype_size(int32_t dtype) {
  static const size_t sizes[] = {1, 1, 1, 2, 4, 8, 2, 2, 4, 8, 1, 1, 4};
  return sizes[dtype];
}

// A read-only view of a tessera_tensor_t.
class TensorView {
 public:
  TensorView() = default;
  explicit TensorView(const tessera_tensor_t* t) : t_(t) {}
  bool defined() const { return t_ != nullptr; }
  const tessera_tensor_t* raw() const { return t_; }
  int32_t dtype() const { return t_->dtype; }
  int32_t ndim() const { return t_->ndim; }
  int64_t size(int i) const { return t_->sizes[i < 0 ? i + t_->ndim : i]; }
  int64_t stride(int i) const { return t_->strides[i < 0 ? i + t_->ndim : i]; }
  const int64_t* sizes() const { return t_->sizes; }
  const int64_t* strides() const { return t_->strides; }
  int64_t numel() const { return t_->numel; }
  size_t itemsize() const { return dtype_size(t_->dtype); }
  int32_t device_type() const { return t_->device_type; }
  int32_t device_index() const { return t_->device_index; }
  void* handle() const { return t_->data; }
  int64_t byte_offset() const { return t_->byte_offset; }
  // Dense in C order (size-1 dims may have any stride; a tensor with no elements always is, as in
  // PyTorch).
  bool is_contiguous() const {
    for (int i = 0; i < t_->ndim; ++i)
      if (t_->sizes[i] == 0) return true;
    int64_t expected = 1;
    for (int i = t_->ndim - 1; i >= 0; --i) {
      if (t_->sizes[i] != 1 && t_->strides[i] != expected) return false;
      expected *= t_->sizes[i];
    }
    return true;
  }
  // Host pointer of element (0,...,0): only meaningful for host-addressable memory (the CPU).
  template <typename T = void>
  T* host_ptr() const {
    return reinterpret_cast<T*>(static_cast<char*>(t_->data) + t_->byte_offset);
  }

 private:
  const tessera_tensor_t* t_ = nullptr;
};

// A view of a kernel call with typed access to inputs, outputs and attributes.
class KernelCall {
 public:
  explicit KernelCall(const tessera_kernel_call_t* c) : c_(c) {}
  const tessera_kernel_call_t* raw() const { return c_; }
  int num_inputs() const { return c_->num_inputs; }
  int num_outputs() const { return c_->num_outputs; }
  int num_attrs() const { return c_->num_attrs; }
  TensorView input(int i) const { return TensorView(c_->inputs[i]); }
  TensorView output(int i) const { return TensorView(c_->outputs[i]); }
  const char* op_name() const { return c_->op_name; }
  void* stream() const { return c_->stream; }
  int32_t device_index() const { return c_->device_index; }

  const tessera_value_t& attr(int i) const {
    if (i >= c_->num_attrs) throw Error(TESSERA_STATUS_INVALID_ARGUMENT, "missing attribute");
    return c_->attrs[i];
  }
  bool attr_is_none(int i) const { return attr(i).kind == TESSERA_VALUE_NONE; }
  int64_t attr_int(int i) const {
    const auto& v = attr(i);
    return v.kind == TESSERA_VALUE_DOUBLE ? int64_t(v.u.d) : (v.kind == TESSERA_VALUE_BOOL ? v.u.b : v.u.i);
  }
  double attr_double(int i) const {
    const auto& v = attr(i);
    return v.kind == TESSERA_VALUE_DOUBLE ? v.u.d : double(v.kind == TESSERA_VALUE_BOOL ? v.u.b : v.u.i);
  }
  bool attr_bool(int i) const { return attr_int(i) != 0; }
  bool attr_is_floating(int i) const { return attr(i).kind == TESSERA_VALUE_DOUBLE; }
  const int64_t* attr_ints(int i, int* count) const {
    const auto& v = attr(i);
    *count = v.count;
    return v.u.ints;
  }
  std::string attr_string(int i) const {
    const auto& v = attr(i);
    return v.kind == TESSERA_VALUE_STRING && v.u.s ? std::string(v.u.s) : std::string();
  }

 private:
  const tessera_kernel_call_t* c_;
};

// Adapts `void fn(const KernelCall&)` (throwing sdk::Error or std::exception) to tessera_kernel_fn_t.
template <void (*Fn)(const KernelCall&)>
tessera_status_t kernel_adaptor(void* /*user_data*/, const tessera_kernel_call_t* call) noexcept {
  try {
    Fn(KernelCall(call));
    return nullptr;
  } catch (const Error& e) {
    return make_status(e.code(), e.what());
  } catch (const std::bad_alloc&) {
    return make_status(TESSERA_STATUS_OUT_OF_MEMORY, std::string(call->op_name) + ": out of host memory");
  } catch (const std::exception& e) {
    return make_status(TESSERA_STATUS_INTERNAL, std::string(call->op_name) + ": " + e.what());
  }
}
#define TESSERA_SDK_KERNEL(fn) (&::tessera::sdk::kernel_adaptor<fn>)

// Registration helpers over the host API.
class Host {
 public:
  explicit Host(const tessera_host_api_t* api) : api_(api) {}
  const tessera_host_api_t* api() const { return api_; }
  // Throws sdk::Error when the host refuses.
  void register_kernel(const char* op, uint64_t dtype_mask, tessera_kernel_fn_t fn, void* user_data = nullptr,
                       uint32_t flags = TESSERA_KERNEL_FLAG_NONE,
                       int32_t functionality = TESSERA_FUNCTIONALITY_DENSE) const {
    check(api_->kernel_register(api_->host_ctx, op, functionality, dtype_mask, fn, user_data, flags));
  }
  // A kernels plugin's registration (Note [Kernels plugins]): `fn` for `op` under the dispatch
  // functionality `functionality` (TESSERA_FUNCTIONALITY_SPARSE, ...) of the device type its
  // manifest names.
  void register_kernel_under(int32_t functionality, const char* op, uint64_t dtype_mask,
                             tessera_kernel_fn_t fn) const {
    register_kernel(op, dtype_mask, fn, nullptr, TESSERA_KERNEL_FLAG_NONE, functionality);
  }
  void define_op(const char* schema, const char* meta_like) const {
    check(api_->op_define(api_->host_ctx, schema, meta_like));
  }
  void register_fallback(tessera_kernel_fn_t fn, void* user_data = nullptr,
                         int32_t functionality = TESSERA_FUNCTIONALITY_DENSE) const {
    check(api_->fallback_register(api_->host_ctx, functionality, fn, user_data));
  }
  void forbid_fallback(const char* op) const { check(api_->op_forbid_fallback(api_->host_ctx, op)); }
  // Note [ABI versioning]: a slot the host's table does not hold reads as absent.
  const char* getenv(const char* name) const {
    return TESSERA_ABI_HAS_FIELD(api_, tessera_host_api_t, getenv) && api_->getenv ? api_->getenv(name) : nullptr;
  }

 private:
  void check(tessera_status_t s) const {
    if (!s) return;
    std::string msg = api_->status_message(s);
    tessera_status_code_t code = api_->status_code(s);
    api_->status_free(s);
    throw Error(code, msg);
  }
  const tessera_host_api_t* api_;
};

// A C++ base for a backend's device interface. Override what the device supports; interface()
// is the C table for tessera_plugin_t::device (with tessera_plugin_t::self = this object). Every
// entry of the table catches exceptions and returns them as status objects; device_count never
// fails (an exception becomes zero devices with its message as the reason).
//
//   class MyDevice final : public tessera::sdk::DeviceBase { ... };
//   static MyDevice device;
//   plugin.device = device.interface(); plugin.self = device.self();
class DeviceBase {
 public:
  virtual ~DeviceBase() = default;
  DeviceBase(const DeviceBase&) = delete;
  DeviceBase& operator=(const DeviceBase&) = delete;

  const tessera_device_interface_t* interface() const { return &table_; }
  void* self() { return this; }

  // Number of usable devices; 0 with `reason` set (a one-line fix-it hint) when there is none.
  virtual int32_t device_count(std::string* reason) = 0;
  virtual int32_t current_device() { return current_; }
  virtual void set_current_device(int32_t index) {
    std::string reason;
    TESSERA_SDK_CHECK(index >= 0 && index < device_count(&reason),
                      "device index " + std::to_string(index) + " out of range");
    current_ = index;
  }
  // Throws Error(TESSERA_STATUS_OUT_OF_MEMORY, ...) when the device is full.
  virtual void* allocate(int32_t device, uint64_t nbytes) = 0;
  virtual void free(int32_t device, void* handle) noexcept = 0;
  virtual void copy_from_host(int32_t device, void* dst, uint64_t dst_offset, const void* src_host, uint64_t nbytes,
                              void* stream) = 0;
  virtual void copy_to_host(int32_t device, void* dst_host, const void* src, uint64_t src_offset, uint64_t nbytes,
                            void* stream) = 0;
  virtual void copy_device(int32_t /*dst_device*/, void* /*dst*/, uint64_t /*dst_offset*/, int32_t /*src_device*/,
                           const void* /*src*/, uint64_t /*src_offset*/, uint64_t /*nbytes*/, void* /*stream*/) {
    throw Error(TESSERA_STATUS_UNIMPLEMENTED, "device-to-device copy is not implemented");
  }
  // Streams and events are optional: the defaults are one in-order queue per device.
  virtual void* stream_create(int32_t /*device*/) { return nullptr; }
  virtual void stream_destroy(int32_t /*device*/, void* /*stream*/) noexcept {}
  virtual void stream_synchronize(int32_t device, void* /*stream*/) { synchronize(device); }
  virtual void* event_create(int32_t /*device*/) { return nullptr; }
  virtual void event_destroy(int32_t /*device*/, void* /*event*/) noexcept {}
  virtual void event_record(int32_t /*device*/, void* /*event*/, void* /*stream*/) {}
  virtual void event_wait(int32_t /*device*/, void* /*event*/, void* /*stream*/) {}
  virtual void event_synchronize(int32_t device, void* /*event*/) { synchronize(device); }
  virtual void synchronize(int32_t /*device*/) {}
  // A JSON object: {"name": ..., "memory": ..., "capability": ...}.
  virtual std::string properties(int32_t /*device*/) { return "{}"; }

 protected:
  DeviceBase() {
    table_.struct_size = sizeof(tessera_device_interface_t);
    table_.device_count = &c_device_count;
    table_.device_get_current = [](void* s, int32_t* out) noexcept {
      return guard([&] { *out = me(s)->current_device(); });
    };
    table_.device_set_current = [](void* s, int32_t i) noexcept { return guard([&] { me(s)->set_current_device(i); }); };
    table_.memory_allocate = [](void* s, int32_t d, uint64_t n, void** out) noexcept {
      return guard([&] { *out = me(s)->allocate(d, n); });
    };
    table_.memory_free = [](void* s, int32_t d, void* h) noexcept { me(s)->free(d, h); };
    table_.memory_copy_from_host = [](void* s, int32_t d, void* dst, uint64_t off, const void* src, uint64_t n,
                                      void* st) noexcept {
      return guard([&] { me(s)->copy_from_host(d, dst, off, src, n, st); });
    };
    table_.memory_copy_to_host = [](void* s, int32_t d, void* dst, const void* src, uint64_t off, uint64_t n,
                                    void* st) noexcept {
      return guard([&] { me(s)->copy_to_host(d, dst, src, off, n, st); });
    };
    table_.memory_copy_device = [](void* s, int32_t dd, void* dst, uint64_t doff, int32_t sd, const void* src,
                                   uint64_t soff, uint64_t n, void* st) noexcept {
      return guard([&] { me(s)->copy_device(dd, dst, doff, sd, src, soff, n, st); });
    };
    table_.stream_create = [](void* s, int32_t d, void** out) noexcept {
      return guard([&] { *out = me(s)->stream_create(d); });
    };
    table_.stream_destroy = [](void* s, int32_t d, void* st) noexcept { me(s)->stream_destroy(d, st); };
    table_.stream_synchronize = [](void* s, int32_t d, void* st) noexcept {
      return guard([&] { me(s)->stream_synchronize(d, st); });
    };
    table_.event_create = [](void* s, int32_t d, void** out) noexcept {
      return guard([&] { *out = me(s)->event_create(d); });
    };
    table_.event_destroy = [](void* s, int32_t d, void* e) noexcept { me(s)->event_destroy(d, e); };
    table_.event_record = [](void* s, int32_t d, void* e, void* st) noexcept {
      return guard([&] { me(s)->event_record(d, e, st); });
    };
    table_.event_wait = [](void* s, int32_t d, void* e, void* st) noexcept {
      return guard([&] { me(s)->event_wait(d, e, st); });
    };
    table_.event_synchronize = [](void* s, int32_t d, void* e) noexcept {
      return guard([&] { me(s)->event_synchronize(d, e); });
    };
    table_.device_synchronize = [](void* s, int32_t d) noexcept { return guard([&] { me(s)->synchronize(d); }); };
    table_.device_properties = &c_device_properties;
  }

 private:
  static DeviceBase* me(void* self) { return static_cast<DeviceBase*>(self); }
  template <typename F>
  static tessera_status_t guard(F&& f) noexcept {
    return status_of(std::forward<F>(f));
  }
  static int32_t c_device_count(void* self, char* reason, size_t capacity) noexcept {
    std::string why;
    int32_t n = 0;
    try {
      n = me(self)->device_count(&why);
    } catch (const std::exception& e) {
      n = 0;
      why = e.what();
    }
    if (reason && capacity > 0) {
      size_t len = why.size() < capacity - 1 ? why.size() : capacity - 1;
      std::memcpy(reason, why.data(), len);
      reason[len] = '\0';
    }
    return n < 0 ? 0 : n;
  }
  static size_t c_device_properties(void* self, int32_t device, char* buffer, size_t capacity) noexcept {
    std::string text;
    try {
      text = me(self)->properties(device);
    } catch (const std::exception&) {
      text = "{}";
    }
    if (buffer && capacity > 0) {
      size_t len = text.size() < capacity - 1 ? text.size() : capacity - 1;
      std::memcpy(buffer, text.data(), len);
      buffer[len] = '\0';
    }
    return text.size();
  }

  tessera_device_interface_t table_{};
  int32_t current_ = 0;
};

// ---- Device spans in the profiler (ABI 1.3, Note [Plugin spans] in plugin_abi.h). Each of these is
// a no-op on a runtime without the slots (1.2) and while profiling is off.
inline bool profiler_enabled() {
  const tessera_host_api_t* api = host_api();
  return TESSERA_ABI_HAS_FIELD(api, tessera_host_api_t, profiler_record_span) && api->profiler_enabled &&
         api->profiler_enabled() != 0;
}
// The profiler clock in nanoseconds (0 on a runtime without it).
inline int64_t profiler_clock_ns() {
  const tessera_host_api_t* api = host_api();
  return TESSERA_ABI_HAS_FIELD(api, tessera_host_api_t, profiler_clock_ns) && api->profiler_clock_ns
             ? api->profiler_clock_ns()
             : 0;
}
// The correlation id of the host op dispatching on this thread (0: none): read it where work is issued.
inline uint64_t profiler_correlation_id() {
  const tessera_host_api_t* api = host_api();
  return TESSERA_ABI_HAS_FIELD(api, tessera_host_api_t, profiler_correlation_id) && api->profiler_correlation_id
             ? api->profiler_correlation_id()
             : 0;
}
// Records a finished span; a refusal (a bad argument) goes to the log, never throws.
inline void record_span(tessera_profiler_span_t span) {
  const tessera_host_api_t* api = host_api();
  if (!TESSERA_ABI_HAS_FIELD(api, tessera_host_api_t, profiler_record_span) || !api->profiler_record_span) return;
  span.struct_size = sizeof(tessera_profiler_span_t);
  if (tessera_status_t st = api->profiler_record_span(api->host_ctx, &span)) {
    log(TESSERA_LOG_WARNING, "plugins", api->status_message(st));
    api->status_free(st);
  }
}

// Times the work from its construction to its destruction as one span, in one line:
//   { tessera::sdk::ScopedSpan span("matmul", "kernel", device); run_matmul(); }
// The span carries the correlation id of the host op dispatching on this thread; work that runs later
// on a queue thread passes the id read when it was issued instead. `name`, `category` and
// `args_json` must outlive the span (string literals, or strings it ends before).
class ScopedSpan {
 public:
  static constexpr uint64_t kCurrentCorrelation = UINT64_MAX;  // read profiler_correlation_id()
  ScopedSpan(const char* name, const char* category, int32_t device, uint64_t stream = 0,
             uint64_t correlation_id = kCurrentCorrelation, const char* args_json = nullptr)
      : on_(profiler_enabled()) {
    if (!on_) return;
    if (correlation_id == kCurrentCorrelation) correlation_id = profiler_correlation_id();
    span_ = tessera_profiler_span_t{sizeof(tessera_profiler_span_t), device, name, category, stream,
                                    profiler_clock_ns(), 0, correlation_id, args_json};
  }
  ~ScopedSpan() {
    if (!on_) return;
    span_.end_ns = profiler_clock_ns();
    record_span(span_);
  }
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;

 private:
  bool on_;
  tessera_profiler_span_t span_{};
};

}  // namespace tessera::sdk

// The plugin entry point. Inside the braces, `host` is a tessera::sdk::Host; throw to fail init.
// PLUGIN_PTR is a `tessera_plugin_t*` (static storage) that the body may fill further.
#define TESSERA_PLUGIN_ENTRY(PLUGIN_PTR)                                                              \
  static void tessera_plugin_register_(const ::tessera::sdk::Host& host);                            \
  extern "C" TESSERA_PLUGIN_EXPORT tessera_status_t tessera_plugin_init(                             \
      uint32_t host_major, uint32_t host_minor, const tessera_host_api_t* api,                       \
      const tessera_plugin_t** out_plugin) {                                                         \
    if (host_major != TESSERA_ABI_MAJOR) {                                                           \
      std::string m = "incompatible ABI major version (plugin: " + std::to_string(TESSERA_ABI_MAJOR) + \
                      ", runtime: " + std::to_string(host_major) + ")";                             \
      return api->status_make(TESSERA_STATUS_ABI_MISMATCH, m.c_str());                               \
    }                                                                                                \
    (void)host_minor;                                                                                \
    ::tessera::sdk::host_api() = api;                                                                \
    try {                                                                                            \
      tessera_plugin_register_(::tessera::sdk::Host(api));                                           \
    } catch (const ::tessera::sdk::Error& e) {                                                       \
      return api->status_make(e.code(), e.what());                                                   \
    } catch (const std::exception& e) {                                                              \
      return api->status_make(TESSERA_STATUS_INTERNAL, e.what());                                    \
    }                                                                                                \
    *out_plugin = (PLUGIN_PTR);                                                                      \
    return nullptr;                                                                                  \
  }                                                                                                  \
  static void tessera_plugin_register_(const ::tessera::sdk::Host& host)

// Graphs, compiler and quantizer plugins (GraphView, CompilerBase, QuantizerBase; ABI 1.2).
#include "tessera/sdk_graph.hpp"  // IWYU pragma: export
