// Plugin discovery and loading. See docs/plugins.md for the manifest, the search order and the
// environment variables. Note [Lazy loading]: manifests are read once, on first need (cheap);
// a plugin's library is loaded only when a device type or kind it provides is first used, and
// stays loaded until shutdown_plugins().
#pragma once
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/device.h"
#include "tessera/export.h"
#include "tessera/plugin_abi.h"
#include "tessera/plugin_kind.h"

namespace tessera {

enum class PluginStatus { Available, Loaded, Failed, Disabled, Shadowed };
TESSERA_API const char* plugin_status_name(PluginStatus s);

struct PluginInfo {
  std::string name;
  PluginKind kind = PluginKind::Backend;  // Note [Plugin kinds] (plugin_kind.h)
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
  // The manifest's "autocast" entries, (op, policy word): Note [Autocast policies from the manifest].
  std::vector<std::pair<std::string, std::string>> autocast;
};

// Every manifest found (discovers on first call). Thread-safe.
TESSERA_API std::vector<PluginInfo> plugins();
// Loads the backend plugin providing `type` if not loaded. Returns false with `why_not` filled when
// none provides it or loading failed. Thread-safe; concurrent callers load once.
TESSERA_API bool ensure_backend_loaded(DeviceType type, std::string* why_not = nullptr);
// Loads the plugin called `name` (the winner among manifests of that name) if it is available.
// Returns false with `why_not` filled when it is not available or fails to load (`tessera doctor`).
TESSERA_API bool load_plugin(const std::string& name, std::string* why_not = nullptr);
// Loads every plugin of `kind` that is available (PluginKind::Backend for `tessera devices`: one
// plugin per device type, the best that loads).
TESSERA_API void load_plugins_of_kind(PluginKind kind);
// The same for a manifest word ("backend"); throws naming the word and the valid ones when it is
// not a kind.
TESSERA_API void load_plugins_of_kind(std::string_view kind_word);
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

// How a caller names itself and the plugin in extension_of_kind's errors: "<who>: unknown <role>
// 'x'; expected <alternatives>a compiler plugin (found: a, b)".
struct ExtensionRequest {
  std::string_view who;                // "compile", "plugin_quantizer"
  std::string_view role = "plugin";    // what the caller calls the name: "backend", "plugin"
  std::string_view alternatives = "";  // other accepted names, ending in " or " ("cpp, eager or ")
};
// The one lookup of the extension a kind is for (PluginKindTraits::extension): finds the plugin
// called `name`, checks that it is of `kind`, loads it and returns the extension. Every failure
// throws tessera::Error with one line naming the plugin and the fix: no such plugin (listing the
// plugins of `kind`), a plugin of another kind, a plugin that does not load (with its reason), a
// plugin without the extension.
TESSERA_API tessera_proc_t extension_of_kind(PluginKind kind, const std::string& name, const ExtensionRequest& request);
template <typename Fn>
Fn extension_of_kind(PluginKind kind, const std::string& name, const ExtensionRequest& request) {
  static_assert(std::is_pointer_v<Fn> && std::is_function_v<std::remove_pointer_t<Fn>>,
                "extension_of_kind takes a tessera_ext_*_fn_t function pointer type");
  return reinterpret_cast<Fn>(extension_of_kind(kind, name, request));
}

// Note [Plugin status to error]
// The one mapping of a status object a plugin returned to a tessera::Error: NULL returns; otherwise
// the status is freed and the error thrown has the code mapped from the status code
// (OUT_OF_MEMORY -> OutOfMemory, UNIMPLEMENTED -> Unimplemented, ...) and the message
// "<context>: <the plugin's message>". With `unimplemented` set, an UNIMPLEMENTED status sets it
// and returns instead (a kernel that declines). The loader, the dispatcher, the compiler partitioner
// and the quantizer adapter all go through it.
TESSERA_API void throw_status(tessera_status_t status, const std::string& context, bool* unimplemented = nullptr);

}  // namespace tessera
