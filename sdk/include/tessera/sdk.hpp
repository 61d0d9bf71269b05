// Header-only C++ over the plugin C ABI (as dnnl.hpp is over dnnl.h). Everything here is compiled
// into the plugin itself, so no C++ type crosses the boundary and a plugin built against SDK 1.0
// keeps loading in every 1.x runtime.
//
//   #include <tessera/sdk.hpp>
//   static tessera::sdk::Status my_add(const tessera::sdk::KernelCall& call) { ... }
//   TESSERA_PLUGIN_BEGIN("my_plugin", "0.1.0", &my_device_interface, my_self) {
//     host.register_kernel("add.Tensor", TESSERA_DTYPE_MASK_FLOATING, TESSERA_SDK_KERNEL(my_add));
//   } TESSERA_PLUGIN_END
#pragma once
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "tessera/half.h"
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
  if (host_api() && host_api()->log) host_api()->log(level, component, message.c_str());
}

#define TESSERA_SDK_CHECK(cond, msg)                                                   \
  do {                                                                                 \
    if (!(cond)) throw ::tessera::sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT, (msg));  \
  } while (0)

inline size_t dtype_size(int32_t dtype) {
  static const size_t sizes[] = {1, 1, 1, 2, 4, 8, 2, 2, 4, 8};
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
  bool is_contiguous() const {
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
  void define_op(const char* schema, const char* meta_like) const {
    check(api_->op_define(api_->host_ctx, schema, meta_like));
  }
  void register_fallback(tessera_kernel_fn_t fn, void* user_data = nullptr,
                         int32_t functionality = TESSERA_FUNCTIONALITY_DENSE) const {
    check(api_->fallback_register(api_->host_ctx, functionality, fn, user_data));
  }
  void forbid_fallback(const char* op) const { check(api_->op_forbid_fallback(api_->host_ctx, op)); }
  const char* getenv(const char* name) const { return api_->getenv ? api_->getenv(name) : nullptr; }

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
