// The loader's registry of plugins, shared by its parts (private to the dispatcher):
//   plugin_discovery.cpp    finding and reading manifests, selection, shadowing, slot claims
//   plugin_requirements.cpp what can be checked before loading: ABI, trusted files, CPU features,
//                           required libraries
//   plugin_allocator.cpp    the Allocator over a backend plugin's device interface
//   plugin_call_fence.cpp   in-flight plugin calls and the drain before an unload
//   plugin_loader.cpp       load, unload, shutdown and the public entry points
//
// Note [Plugin registry locking]
// One recursive mutex guards the registry: discovery, loading and shutdown run under it, so
// concurrent first uses of a device type load its plugin once (the second caller waits and finds it
// loaded). It is recursive because a plugin's init may parse a device name, which can call back into
// discovery. The loaded device types are mirrored in an atomic bit mask so that ensure_backend_loaded
// on an already loaded type takes no lock.
#pragma once
#include <atomic>
#include <boost/dll/shared_library.hpp>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "host_api.h"
#include "manifest.h"
#include "plugin_allocator.h"
#include "tessera/log.h"
#include "tessera/plugin_loader.h"

namespace tessera::loader {

struct PluginRecord {
  PluginInfo info;
  Manifest manifest;
  bool manifest_ok = false;
  size_t order = 0;
  int privateuse_slot = 0;
  // While loaded:
  boost::dll::shared_library library;
  std::unique_ptr<HostContext> host;
  tessera_plugin_t header{};            // the common prefix of the plugin's header
  tessera_device_interface_t device{};  // the common prefix of its device interface
  bool device_registered = false;
  PluginAllocator* allocator = nullptr;  // see Note [Plugin allocators outlive their plugin]
};

struct Registry {
  std::recursive_mutex mutex;
  bool discovered = false;
  std::vector<std::unique_ptr<PluginRecord>> records;
  std::vector<PluginRecord*> load_order;
  std::atomic<uint32_t> loaded_types{0};  // bit int(DeviceType) set while a backend provides it
  // Every allocator ever made, kept reachable: see Note [Plugin allocators outlive their plugin].
  std::vector<std::unique_ptr<PluginAllocator>> allocators;
};

// The one registry (never destroyed: plugins may still run during static destruction).
Registry& registry();

constexpr const char* kLog = "plugins";
inline void plog(LogLevel level, const std::string& message) { log_message(level, kLog, message); }
inline bool plog_on() { return log_enabled(kLog); }

// Marks `r` failed with `reason` (logged under TESSERA_LOG=plugins).
void set_failed(PluginRecord& r, const std::string& reason);

// ---- discovery (plugin_discovery.cpp); every *_locked function runs under registry().mutex
// Reads the manifests once; on later calls drops privateuse claims the application replaced.
void discover_locked(Registry& reg);
// Why the privateuse claim of `r` no longer holds, or "" while it does (Note [Manifest claims on
// privateuse slots]).
std::string replaced_claim_reason(const PluginRecord& r);

// ---- requirements (plugin_requirements.cpp)
// Checks everything that can be checked without loading the library; marks `r` failed otherwise.
void check_requirements(PluginRecord& r);
// Why `file` is not trusted (Note [Trusted plugin files]), or "". `what` names it ("library").
std::string untrusted_file_reason(const std::string& file, const char* what);
// `text` split at `sep`, each item trimmed of blanks, empty items dropped.
std::vector<std::string> split_list(const std::string& text, char sep);

// ---- load and unload (plugin_loader.cpp)
bool load_locked(Registry& reg, PluginRecord& r);
void shutdown_locked(Registry& reg);

// ---- the call fence (plugin_call_fence.cpp)
// Runs `fn` under the registry mutex once no plugin call is in flight (Note [In-flight plugin
// calls]); calls that start meanwhile fail. Refuses from inside a call (it would wait for itself)
// and after a timeout with calls still running (a kernel that never returns).
void drain_and(void (*fn)(Registry& reg));

}  // namespace tessera::loader
