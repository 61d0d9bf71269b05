// Plugin discovery and loading. See docs/plugins.md for the manifest, the search order and the
// environment variables. Note [Lazy loading]: manifests are read once, on first need (cheap);
// a plugin's library is loaded only when a device type or kind it provides is first used, and
// stays loaded until shutdown_plugins().
#pragma once
#include <string>
#include <type_traits>
#include <vector>

#include "tessera/device.h"
#include "tessera/export.h"
#include "tessera/plugin_abi.h"

namespace tessera {

enum class PluginStatus { Available, Loaded, Failed, Disabled, Shadowed };
TESSERA_API const char* plugin_status_name(PluginStatus s);

struct PluginInfo {
  std::string name;
  std::string kind;         // backend, kernels, compiler, quantizer
  std::string version;
  PluginStatus status = PluginStatus::Available;
  std::string reason;       // non-empty unless Available or Loaded
  std::string manifest;     // absolute path
  std::string library;      // absolute path
  std::string description;
  int priority = 0;
  bool has_device = false;
  DeviceType device_type = DeviceType::CPU;  // when has_device
  std::string device_name;                   // "cpu", "my_hardware_device"
};

// Every manifest found (discovers on first call). Thread-safe.
TESSERA_API std::vector<PluginInfo> plugins();
// Loads the backend plugin providing `type` if not loaded. Returns false with `why_not` filled when
// none provides it or loading failed. Thread-safe; concurrent callers load once.
TESSERA_API bool ensure_backend_loaded(DeviceType type, std::string* why_not = nullptr);
// Loads the plugin called `name` (the winner among manifests of that name) if it is available.
// Returns false with `why_not` filled when it is not available or fails to load (`tessera doctor`).
TESSERA_API bool load_plugin(const std::string& name, std::string* why_not = nullptr);
// Loads every plugin of `kind` that is available (e.g. "backend" for `tessera devices`).
TESSERA_API void load_plugins_of_kind(const std::string& kind);
// Calls each loaded plugin's shutdown, unregisters its kernels and unloads it. Idempotent.
TESSERA_API void shutdown_plugins();
// Forget everything and discover again (tests; the environment may have changed).
TESSERA_API void rediscover_plugins_for_testing();

// Note [Extension lookup]
// The one way to reach a function a plugin offers beyond its tables (ABI 1.1): a TESSERA_EXT_* name
// and its tessera_ext_*_fn_t type from plugin_abi.h, looked up through tessera_plugin_t's
// get_proc_address. nullptr when the plugin is not loaded, was built for ABI 1.0 (the host default)
// or does not offer the extension. The function takes the plugin's `self` first.
TESSERA_API tessera_proc_t plugin_proc_address(const std::string& plugin, const char* name);
// The same, typed: plugin_extension<tessera_ext_empty_cache_fn_t>(plugin, TESSERA_EXT_EMPTY_CACHE).
template <typename Fn>
Fn plugin_extension(const std::string& plugin, const char* name) {
  static_assert(std::is_pointer_v<Fn> && std::is_function_v<std::remove_pointer_t<Fn>>,
                "plugin_extension takes a tessera_ext_*_fn_t function pointer type");
  return reinterpret_cast<Fn>(plugin_proc_address(plugin, name));
}

}  // namespace tessera
