// The host side of the plugin C ABI (private to libtessera): status objects and the per-plugin
// tessera_host_api_t table. Note [Recorded registrations]: registrations a plugin makes during
// tessera_plugin_init are recorded, not applied; the loader commits them to the Dispatcher only
// when init succeeds (and the plugin header checks out), so a failed init leaves nothing behind.
// Registrations made after init are applied at once. Every committed registration is undone at
// shutdown.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/device.h"
#include "tessera/dispatcher.h"
#include "tessera/error.h"
#include "tessera/plugin_abi.h"

// The status object behind tessera_status_t (opaque to plugins).
struct tessera_status_s {
  tessera_status_code_t code;
  std::string message;
};

namespace tessera {

// Status helpers for the runtime side (the dispatcher reads kernel results with these).
tessera_status_t status_make(tessera_status_code_t code, std::string_view message);
void status_free(tessera_status_t status);
// The message of `status` prefixed with nothing; "" for NULL. Does not free.
std::string status_message_of(tessera_status_t status);
// Maps an ABI status code to the C++ error code.
ErrorCode error_code_of(tessera_status_code_t code);

// Note [In-flight plugin calls]
// Every path that may run plugin code (an operator call, a cross-device copy, an allocation, a
// free, a device query) holds a PluginCallGuard. shutdown_plugins() raises g_plugin_shutdown,
// waits -- without holding the registry mutex, so in-flight calls may still load a plugin or take
// any lock they need -- until no call is in flight, and only then unloads. A call that starts while
// the flag is up fails with ErrorCode::Unavailable instead of entering code about to be unmapped.
//
// The hot path takes no locked instruction (Note [Asymmetric fence]): each thread owns a slot in
// a list that shutdown scans; only the outermost guard of a thread touches it (nested guards cost
// a thread-local increment). Entering stores 1 in the slot and then reads the flag; shutdown
// raises the flag and then reads every slot. That store-then-load pairing on both sides (Dekker)
// needs a full barrier on both sides; the caller's is only a compiler barrier, and shutdown makes
// up for it with membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), which runs a full barrier on every
// CPU that runs a thread of the process. So either shutdown sees the slot at 1 and waits, or the
// caller sees the flag and backs out. Where membarrier is unavailable (an old kernel, a seccomp
// profile) or under ThreadSanitizer (which does not model it), callers use a seq_cst fence.
struct PluginCallSlot {
  std::atomic<uint32_t> depth{0};   // 1 while the owning thread is inside a call
  std::atomic<bool> in_use{false};  // owned by a live thread
  PluginCallSlot* next = nullptr;   // the list only grows; slots are reused, never freed
};
inline std::atomic<bool> g_plugin_shutdown{false};
// Set once membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) is registered for the process.
inline std::atomic<bool> g_heavy_fence_ready{false};
__attribute__((tls_model("initial-exec"))) inline thread_local int t_plugin_call_depth = 0;  // Note [Hot thread-locals]
__attribute__((tls_model("initial-exec"))) inline thread_local PluginCallSlot* t_plugin_call_slot = nullptr;

[[noreturn]] void throw_plugin_shutdown_in_progress();
// Gives the calling thread its slot (a free one, or a new one); released at thread exit.
PluginCallSlot* claim_plugin_call_slot();

class PluginCallGuard {
 public:
  PluginCallGuard() {
    if (t_plugin_call_depth++ == 0 && !enter()) {
      t_plugin_call_depth = 0;
      throw_plugin_shutdown_in_progress();
    }
  }
  // A guard that does not throw: check entered() (used where no exception may escape).
  explicit PluginCallGuard(std::nothrow_t) {
    if (t_plugin_call_depth++ == 0 && !enter()) {
      t_plugin_call_depth = 0;
      entered_ = false;
    }
  }
  ~PluginCallGuard() {
    if (entered_ && --t_plugin_call_depth == 0) t_plugin_call_slot->depth.store(0, std::memory_order_release);
  }
  PluginCallGuard(const PluginCallGuard&) = delete;
  PluginCallGuard& operator=(const PluginCallGuard&) = delete;
  bool entered() const { return entered_; }

 private:
  static bool enter() {
    PluginCallSlot* slot = t_plugin_call_slot;
    if (__builtin_expect(slot == nullptr, 0)) slot = claim_plugin_call_slot();
    slot->depth.store(1, std::memory_order_relaxed);
    if (__builtin_expect(g_heavy_fence_ready.load(std::memory_order_relaxed), 1))
      std::atomic_signal_fence(std::memory_order_seq_cst);  // shutdown's membarrier does the rest
    else
      std::atomic_thread_fence(std::memory_order_seq_cst);
    if (__builtin_expect(!g_plugin_shutdown.load(std::memory_order_acquire), 1)) return true;
    slot->depth.store(0, std::memory_order_release);
    return false;
  }
  bool entered_ = true;
};

namespace loader {

class HostContext {
 public:
  // `backend`: the device type kernels of this plugin are registered for.
  HostContext(std::string plugin_name, DeviceType backend);
  HostContext(const HostContext&) = delete;
  HostContext& operator=(const HostContext&) = delete;

  const tessera_host_api_t* api() const { return &api_; }
  const std::string& plugin_name() const { return plugin_name_; }
  DeviceType backend() const { return backend_; }

  // Applies the recorded registrations. Throws tessera::Error after undoing what it applied, also
  // when a registration during init was refused (Note [Dangling registrations]) even if the plugin
  // ignored the status it got.
  void commit();
  // Drops the recorded registrations (failed init).
  void discard();
  // Undoes every applied registration (shutdown). Operators defined by the plugin stay defined
  // (a schema alone dispatches nowhere); fallback prohibitions stay as well.
  void deregister_all();
  size_t num_kernels_registered() const;

 private:
  struct Registration {
    enum class Kind { DefineOp, Kernel, Fallback, ForbidFallback } kind;
    std::string op;         // op name (Kernel, ForbidFallback) or schema (DefineOp)
    std::string meta_like;  // DefineOp
    int32_t functionality = 0;
    KernelEntry kernel;
    std::shared_ptr<const FunctionSchema> schema = nullptr;  // DefineOp: parsed once, by op_define
  };
  static HostContext* self(void* host_ctx) { return static_cast<HostContext*>(host_ctx); }
  static tessera_status_t op_define(void* ctx, const char* schema, const char* meta_like);
  static tessera_status_t kernel_register(void* ctx, const char* op_name, int32_t functionality, uint64_t dtype_mask,
                                          tessera_kernel_fn_t fn, void* user_data, uint32_t flags);
  static tessera_status_t fallback_register(void* ctx, int32_t functionality, tessera_kernel_fn_t fn, void* user_data);
  static tessera_status_t op_forbid_fallback(void* ctx, const char* op_name);
  static tessera_status_t profiler_record_span(void* ctx, const tessera_profiler_span_t* span);
  static tessera_status_t generator_reserve(void* ctx, int32_t device_index, uint64_t count,
                                            uint64_t* out_seed, uint64_t* out_offset);

  tessera_status_t record(Registration r);
  void apply(const Registration& r);  // throws
  bool op_known(const std::string& name) const;
  // The full name `name` resolves to ("fill_" -> "fill_"), or "" when unknown.
  std::string canonical_op(const std::string& name) const;
  std::string closest_ops(const std::string& name) const;

  std::string plugin_name_;
  DeviceType backend_;
  tessera_host_api_t api_{};
  mutable std::mutex mutex_;
  bool committed_ = false;
  std::vector<Registration> pending_;
  std::vector<std::string> pending_ops_;  // full names of ops defined by pending registrations
  std::vector<std::string> kernel_keys_;  // "<full op name>/<functionality>" of every kernel registered
  std::vector<std::string> refused_;      // registrations refused during init, each a one-line reason
  std::vector<RegistrationHandle> handles_;
  size_t num_kernels_ = 0;
};

}  // namespace loader
}  // namespace tessera
