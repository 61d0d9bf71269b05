// The operator catalogue and the dispatcher. Note [Dispatch hot path]
// Each operator is an OperatorEntry with a fixed array of kNumDispatchSlots kernel slots (index from
// DispatchKeySet::slot(), see dispatch_key.h). A call ORs the inputs' key sets, applies the thread's
// include/exclude sets, indexes the table, runs the op's shape rule to allocate outputs on the
// target device and calls the kernel through the C ABI. No lock, map look-up or std::function on
// that path: registration writes the slot under a mutex and publishes it with a release store.
// Resolution when the slot is empty or the dtype is not in the kernel's mask:
//   kernel -> composite decomposition -> the backend's fallback (e.g. the CPU fallback for a
//   third-party device) -> error naming op, device, dtype and the devices that implement it.
// What a kernel receives (inputs on its device, converted to the op's compute dtype; outputs
// allocated; attributes with defaults filled) is spelled out in dispatcher/README.md.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tessera/dispatch_key.h"
#include "tessera/plugin_abi.h"
#include "tessera/schema.h"
#include "tessera/tensor.h"

namespace tessera {

// A boxed value: what a boxed call's stack holds.
using Value = std::variant<std::monostate, Tensor, int64_t, double, bool, std::vector<int64_t>,
                           std::string, std::vector<Tensor>, std::optional<Tensor>, DType>;
using Stack = std::vector<Value>;

struct KernelEntry {
  tessera_kernel_fn_t fn = nullptr;
  void* user_data = nullptr;
  uint64_t dtype_mask = TESSERA_DTYPE_MASK_ALL;
  uint32_t flags = TESSERA_KERNEL_FLAG_NONE;
  std::string provider;  // plugin name, or "test" / "builtin"
};

// A composite kernel: implemented with other ops, runs on any device.
using CompositeFn = std::function<Stack(const Stack& args)>;

class OperatorEntry;  // opaque; see op_registry in dispatcher/src

// Identifies one registration so that it can be undone (a plugin whose init failed).
struct RegistrationHandle {
  uint64_t id = 0;
};

// How a call resolves on a backend for a dtype (docs/architecture.md, "Resolution"): the backend's kernel, the
// op's composite, a fallback (the backend's own or the CPU fallback), or nothing.
enum class Resolution : uint8_t { Kernel, Composite, Fallback, None };
// "kernel", "composite", "fallback", "none" (the words `tessera check` and the profiler print).
TESSERA_API const char* resolution_name(Resolution r);
TESSERA_API std::ostream& operator<<(std::ostream& os, Resolution r);

class TESSERA_API Dispatcher {
 public:
  static Dispatcher& instance();

  // "add.Tensor", or "add" for the overload with an empty name. nullptr when unknown.
  OperatorEntry* find_op(std::string_view name);
  // Throws listing near names when unknown.
  OperatorEntry& op(std::string_view name);
  const FunctionSchema& schema(const OperatorEntry& op) const;
  // The op contract (dispatcher/ops/ops.json, installed as share/tessera/ops.json): tags such as
  // "pointwise" and the doc line; both empty for an op a plugin defined. provider: "builtin" or the
  // defining plugin's name.
  const std::vector<std::string>& tags(const OperatorEntry& op) const;
  const std::string& doc(const OperatorEntry& op) const;
  const std::string& provider(const OperatorEntry& op) const;
  std::vector<std::string> op_names() const;

  // Defines a new op. `meta_like` names an existing op whose shape rule applies; empty = outputs
  // alias the inputs (in-place op). Throws on a parse error or a name already defined differently.
  // Defining an op again with the same schema returns the existing one.
  OperatorEntry& define_op(std::string_view schema, std::string_view meta_like, std::string provider);
  OperatorEntry& define_op(const FunctionSchema& schema, std::string_view meta_like, std::string provider);
  // Throws what define_op(schema, meta_like) would throw now (a name defined differently, a core op
  // redefined, an unknown `meta_like`, a return without alias and without `meta_like`, defaults out
  // of range, two Tensor[] arguments) without defining anything. `meta_like_pending`: `meta_like`
  // names an op that the caller defines before this one (a plugin's recorded definitions), so its
  // existence is not checked.
  void check_define_op(const FunctionSchema& schema, std::string_view meta_like, bool meta_like_pending = false) const;

  RegistrationHandle register_kernel(OperatorEntry& op, DeviceType backend, Functionality f, KernelEntry kernel);
  RegistrationHandle register_fallback(DeviceType backend, Functionality f, KernelEntry kernel);
  RegistrationHandle register_composite(OperatorEntry& op, CompositeFn fn);
  // The op's composite (decomposition), or nullptr; valid while the registration stands.
  const CompositeFn* composite(const OperatorEntry& op) const;
  void forbid_fallback(OperatorEntry& op, DeviceType backend);
  void deregister(RegistrationHandle handle);

  // Boxed call: arguments in schema order (defaults may be omitted); returns the outputs.
  Stack call_boxed(OperatorEntry& op, Stack args);
  // Which backends have a kernel for `op` (for messages and `tessera check`).
  std::vector<DeviceType> backends_with_kernel(const OperatorEntry& op) const;
  // How a call would resolve on `backend` for `dtype`.
  Resolution resolution(const OperatorEntry& op, DeviceType backend, DType dtype) const;

 private:
  Dispatcher();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Note [Export hook]
// A call whose key set holds the Export functionality (a tracing tensor among its inputs, or the
// key included on the thread) runs no kernel: after the op's shape rule it goes to the export hook,
// which graph capture (compiler/) sets while it traces a program. The hook receives the call boxed
// (arguments in schema order, defaults filled) with the shape rule's concrete outputs, and returns
// one tensor per output (tracing tensors that carry no data). Without a hook the Export key falls
// through like any functionality without a kernel.
struct ExportCall {
  OperatorEntry* op = nullptr;
  const std::string* name = nullptr;  // "add.Tensor"
  Stack args;
  Device device{DeviceType::CPU};
  struct Output {
    std::vector<int64_t> sizes;
    DType dtype = DType::Float32;
    int alias_input = -1;  // >= 0: an in-place op's output is that tensor input
  };
  std::vector<Output> outputs;
};
using ExportHook = std::vector<Tensor> (*)(const ExportCall& call);
// Replaces the hook (nullptr: none) and returns the previous one.
TESSERA_API ExportHook set_export_hook(ExportHook hook);

// Note [Backends and the device registry]
// The plugin loader registers, per device type, the device interface of the plugin that provides it.
// The dispatcher uses it for cross-device copies, synchronisation and the CPU fallback.
struct BackendDevice {
  const tessera_device_interface_t* iface = nullptr;
  void* self = nullptr;
  std::string plugin;
};
TESSERA_API void register_backend_device(DeviceType type, const BackendDevice& backend);
TESSERA_API void unregister_backend_device(DeviceType type);
// Loads the backend lazily (through the backend-loader hook) when needed; throws naming the device
// type and why no plugin provides it.
TESSERA_API const BackendDevice& backend_device(DeviceType type);
TESSERA_API const BackendDevice* backend_device_if_loaded(DeviceType type);

// The graph accessors and builders every plugin's host table points at (Note [Graph ABI] in
// plugin_abi.h). The compiler library sets them once when it loads; not for other callers.
TESSERA_API void set_graph_api(const tessera_graph_api_t& api);

// CPU fallback switch (Note [Fallback report]): TESSERA_FALLBACK=error (or the older
// TESSERA_CPU_FALLBACK=0) turns the fallback into an error for the whole run; TESSERA_FALLBACK=allow
// (the default) runs it, warning once per op and device under TESSERA_LOG=fallback. Another value
// of TESSERA_FALLBACK throws naming the accepted ones.
TESSERA_API bool cpu_fallback_enabled();

// Note [Fallback report]
// Every call that ran on the CPU because its device had no kernel for it (or the kernel answered
// UNIMPLEMENTED) is counted per op, device type and dtype, for the whole process and every thread:
// the silent slowdown of a model that bounces through the host shows up here, and in the profiler
// trace as resolution "fallback". Sorted by calls, most first; then by op, device and dtype.
struct FallbackCount {
  std::string op;      // "erf"
  std::string device;  // the device type: "my_hardware_device"
  DType dtype = kFloat32;
  int64_t calls = 0;
};
TESSERA_API std::vector<FallbackCount> fallback_report();
// "erf on my_hardware_device (float32): 3 calls", one line each; "no CPU fallback ran" when empty.
TESSERA_API std::string fallback_report_string();
TESSERA_API void clear_fallback_report();
// How many calls this thread ran through the CPU fallback so far, whatever led there (no kernel,
// or a kernel that answered UNIMPLEMENTED). The conformance kit reports what actually ran from it.
TESSERA_API uint64_t cpu_fallback_calls_on_this_thread();

// A status object as the host's status_make makes it, for kernels registered in-process (tests,
// built-in kernels) that have no host API table. The dispatcher frees what a kernel returns.
TESSERA_API tessera_status_t kernel_status_make(tessera_status_code_t code, const char* message);
// The message of a status object the host made ("" for NULL), freeing it: for in-process callers
// of C-ABI functions (the graph ABI's tests).
TESSERA_API std::string status_take_message(tessera_status_t status);

}  // namespace tessera
