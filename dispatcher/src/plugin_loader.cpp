// Plugin loading and unloading, and the loader's public entry points. See plugin_loader.h,
// docs/plugins.md, Note [Lazy loading] and, for the parts, plugin_registry.h.
#include "tessera/plugin_loader.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <sstream>

#include "plugin_allocator.h"
#include "plugin_registry.h"
#include "tessera/dispatcher.h"
#include "tessera/error.h"
#include "tessera/profiler.h"

namespace tessera {
namespace loader {


static void unload_library(PluginRecord& r) { r.library.unload(); }

// Note [Kernels plugins]
// A plugin of kind "kernels" adds kernels for a device type another plugin provides (2:4 sparse
// matmul for the CPU and CUDA) without a device of its own: its manifest's "device" names that
// type, its header has no device interface, and it is loaded on demand by what needs its kernels
// (load_plugins_of_kind(PluginKind::Kernels) from the sparse layer), not by the first use of the
// device. Why a kind of its own rather than a second backend for the type: one device type has
// exactly one backend (its allocator, copies and streams), while kernel libraries for it may be
// many, come from other vendors, and load or fail independently: a broken kernels plugin leaves
// the device working with its own kernels. Its kernels go through the same contract checks as a
// backend's (an op nobody defined refuses the whole plugin at load).

// Loads one available plugin. Returns false (and marks it failed) when anything goes wrong.
bool load_locked(Registry& reg, PluginRecord& r) {
  if (r.info.status == PluginStatus::Loaded) return true;
  if (r.info.status != PluginStatus::Available) return false;
  auto t0 = std::chrono::steady_clock::now();
  const std::string& lib = r.info.library;
  std::string ww = untrusted_file_reason(lib, "library");
  if (!ww.empty()) {
    set_failed(r, ww);
    return false;
  }

  boost::dll::fs::error_code ec;
  dlerror();
  r.library.load(boost::dll::fs::path(lib), boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local, ec);
  if (ec || !r.library.is_loaded()) {
    const char* err = dlerror();
    set_failed(r, "cannot load library '" + lib + "': " + (err ? std::string(err) : ec.message()) +
                      "; check that it is a shared library built for this platform and that its dependencies are "
                      "found (ldd '" + lib + "')");
    return false;
  }
  if (!r.library.has(TESSERA_PLUGIN_ENTRY_NAME)) {
    unload_library(r);
    set_failed(r, std::string("no entry point '") + TESSERA_PLUGIN_ENTRY_NAME + "' in '" + lib +
                      "'; export it with TESSERA_PLUGIN_ENTRY (sdk.hpp) or TESSERA_PLUGIN_EXPORT (plugin_abi.h)");
    return false;
  }
  using InitFn = tessera_status_t(uint32_t, uint32_t, const tessera_host_api_t*, const tessera_plugin_t**);
  InitFn& init = r.library.get<InitFn>(TESSERA_PLUGIN_ENTRY_NAME);

  const bool is_backend = plugin_kind_traits(r.info.kind).provides_device;
  DeviceType backend = r.info.has_device ? r.info.device_type : DeviceType::CPU;
  r.host = std::make_unique<HostContext>(r.info.name, backend);
  const tessera_plugin_t* hdr = nullptr;
  tessera_status_t st = nullptr;
  try {
    st = init(TESSERA_ABI_MAJOR, TESSERA_ABI_MINOR, r.host->api(), &hdr);
  } catch (const std::exception& e) {
    st = status_make(TESSERA_STATUS_INTERNAL, std::string("an exception escaped tessera_plugin_init: ") + e.what());
  } catch (...) {
    st = status_make(TESSERA_STATUS_INTERNAL, "an exception escaped tessera_plugin_init");
  }
  auto abandon = [&](const std::string& reason, bool call_shutdown) {
    r.host->discard();
    if (call_shutdown && hdr && TESSERA_ABI_HAS_FIELD(hdr, tessera_plugin_t, shutdown) && hdr->shutdown)
      hdr->shutdown(hdr->self);
    r.host.reset();
    unload_library(r);
    set_failed(r, reason);
    return false;
  };
  if (st) {
    std::string message = st->message;
    status_free(st);
    return abandon("tessera_plugin_init failed: " + message, false);
  }
  if (!hdr) return abandon("tessera_plugin_init returned no plugin header (out_plugin left NULL)", false);
  constexpr size_t kMinHeader = offsetof(tessera_plugin_t, name) + sizeof(const char*);
  if (hdr->struct_size < kMinHeader)
    return abandon("plugin header too small (struct_size " + std::to_string(hdr->struct_size) + ", at least " +
                       std::to_string(kMinHeader) + " expected); rebuild the plugin against the Tessera SDK",
                   false);
  if (hdr->abi_major != TESSERA_ABI_MAJOR)
    return abandon("incompatible ABI major version (plugin: " + std::to_string(hdr->abi_major) +
                       ", runtime: " + std::to_string(TESSERA_ABI_MAJOR) + "); rebuild the plugin against Tessera SDK " +
                       std::to_string(TESSERA_ABI_MAJOR) + ".x",
                   false);
  if (hdr->abi_minor > uint32_t(r.manifest.abi_minor))
    return abandon("the library was built against plugin ABI " + std::to_string(hdr->abi_major) + "." +
                       std::to_string(hdr->abi_minor) + " but its manifest says " + std::to_string(r.manifest.abi_major) +
                       "." + std::to_string(r.manifest.abi_minor) +
                       " (abi.minor): the manifest and the library come from different builds; reinstall the plugin "
                       "or correct abi.minor (Note [ABI range])",
                   true);
  // Note [ABI versioning]: read only the common prefix; fields the plugin does not have stay zero.
  r.header = tessera_plugin_t{};
  std::memcpy(&r.header, hdr, std::min<size_t>(hdr->struct_size, sizeof(tessera_plugin_t)));
  r.header.struct_size = hdr->struct_size;
  if (r.header.name && r.info.name != r.header.name && plog_on())
    plog(LogLevel::Warning, "plugin '" + r.info.name + "' calls itself '" + r.header.name + "' in its header");

  // NOLINTNEXTLINE(bugprone-sizeof-expression): TESSERA_ABI_HAS_FIELD measures a pointer field on purpose.
  const tessera_device_interface_t* dev = TESSERA_ABI_HAS_FIELD(hdr, tessera_plugin_t, device) ? hdr->device : nullptr;
  if (is_backend) {
    if (!dev) return abandon("backend plugin returned no device interface (tessera_plugin_t::device is NULL)", true);
    constexpr size_t kMinDevice = offsetof(tessera_device_interface_t, device_count) + sizeof(void*);
    if (dev->struct_size < kMinDevice || !dev->device_count)
      return abandon("device interface lacks device_count (struct_size " + std::to_string(dev->struct_size) + ")", true);
    r.device = tessera_device_interface_t{};
    std::memcpy(&r.device, dev, std::min<size_t>(dev->struct_size, sizeof(tessera_device_interface_t)));
    r.device.struct_size = dev->struct_size;
    if (backend != DeviceType::CPU) {
      std::string missing;
      if (!r.device.memory_allocate) missing += " memory_allocate";
      if (!r.device.memory_free) missing += " memory_free";
      if (!r.device.memory_copy_from_host) missing += " memory_copy_from_host";
      if (!r.device.memory_copy_to_host) missing += " memory_copy_to_host";
      if (!missing.empty()) return abandon("device interface lacks required functions:" + missing, true);
    }
    const BackendDevice* other = backend_device_if_loaded(backend);
    if (other && !other->plugin.empty() && other->plugin != r.info.name)
      return abandon("device type '" + device_type_name(backend) + "' is already provided by plugin '" +
                         other->plugin + "'",
                     true);
  }

  // A compiler or quantizer plugin is its extension: one that does not offer it fails here, so
  // `tessera plugins --load` and `tessera doctor` say so instead of "loaded" (Note [Plugin kinds]).
  if (const PluginKindTraits& traits = plugin_kind_traits(r.info.kind); traits.extension) {
    const bool has_lookup = TESSERA_ABI_HAS_FIELD(hdr, tessera_plugin_t, get_proc_address) && r.header.get_proc_address;
    if (!has_lookup || !r.header.get_proc_address(r.header.self, traits.extension))
      return abandon(std::string(traits.word) + " plugin offers no extension '" + traits.extension + "' (" +
                         (has_lookup ? "get_proc_address returns NULL for it" : "its header has no get_proc_address") +
                         "); a " + traits.word + " plugin returns it from get_proc_address (Note [Plugin kinds])",
                     true);
  }
  if (r.privateuse_slot > 0) {  // Note [Manifest claims on privateuse slots]: the claim becomes a name
    try {
      rename_privateuse_backend(r.privateuse_slot, r.info.device_name);
    } catch (const std::exception&) {
      std::string why = replaced_claim_reason(r);
      return abandon(why.empty() ? "cannot name its privateuse slot" : why, true);
    }
  }
  try {
    r.host->commit();
  } catch (const std::exception& e) {
    return abandon(std::string("registering its kernels failed: ") + e.what(), true);
  }
  if (is_backend) {
    try {
      register_backend_device(backend, BackendDevice{&r.device, r.header.self, r.info.name});
      r.device_registered = true;
      if (backend != DeviceType::CPU) {
        reg.allocators.push_back(std::make_unique<PluginAllocator>(backend, &r.device, r.header.self, r.info.name));
        r.allocator = reg.allocators.back().get();
        set_allocator(backend, r.allocator);
      }
    } catch (const std::exception& e) {
      r.host->deregister_all();
      if (r.device_registered) unregister_backend_device(backend);
      r.device_registered = false;
      if (r.allocator) r.allocator->retire();
      r.allocator = nullptr;
      return abandon(std::string("registering its device failed: ") + e.what(), true);
    }
    reg.loaded_types.fetch_or(1u << int(backend), std::memory_order_release);
  }
  r.info.status = PluginStatus::Loaded;
  r.info.reason.clear();
  reg.load_order.push_back(&r);
  if (plog_on()) {
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::ostringstream os;
    os << "loaded '" << r.info.name << "' " << r.info.version << " from " << lib << " in " << ms << " ms ("
       << r.host->num_kernels_registered() << " kernel(s)";
    if (is_backend) os << ", device type '" << device_type_name(backend) << "'";
    os << ")";
    plog(LogLevel::Info, os.str());
  }
  return true;
}

static void unload_locked(Registry& reg, PluginRecord& r) {
  if (r.info.status != PluginStatus::Loaded) return;
  if (r.host) r.host->deregister_all();
  if (r.device_registered) {
    DeviceType t = r.info.device_type;
    unregister_backend_device(t);
    if (r.allocator) {
      r.allocator->retire();
      set_allocator(t, nullptr);
      r.allocator = nullptr;
    }
    r.device_registered = false;
    reg.loaded_types.fetch_and(~(1u << int(t)), std::memory_order_release);
  }
  if (TESSERA_ABI_HAS_FIELD(&r.header, tessera_plugin_t, shutdown) && r.header.shutdown) r.header.shutdown(r.header.self);
  unload_library(r);
  r.host.reset();
  r.header = tessera_plugin_t{};
  r.device = tessera_device_interface_t{};
  r.info.status = PluginStatus::Available;
  r.info.reason.clear();
  if (plog_on()) plog(LogLevel::Info, "unloaded '" + r.info.name + "'");
}

void shutdown_locked(Registry& reg) {
  for (auto it = reg.load_order.rbegin(); it != reg.load_order.rend(); ++it) unload_locked(reg, **it);
  reg.load_order.clear();
}

static bool ensure_backend_locked(Registry& reg, DeviceType type, std::string* why_not) {
  discover_locked(reg);
  for (auto& rec : reg.records)
    if (rec->info.status == PluginStatus::Loaded && rec->info.kind == PluginKind::Backend && rec->info.device_type == type)
      return true;
  std::vector<PluginRecord*> candidates;
  for (auto& rec : reg.records)
    if (rec->info.status == PluginStatus::Available && rec->info.kind == PluginKind::Backend && rec->info.has_device &&
        rec->info.device_type == type)
      candidates.push_back(rec.get());
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const PluginRecord* a, const PluginRecord* b) { return a->info.priority > b->info.priority; });
  for (PluginRecord* c : candidates)
    if (load_locked(reg, *c)) return true;
  if (why_not) {
    std::string name = device_type_name(type);
    std::string msg = "no plugin provides device type '" + name + "'";
    std::string failures;
    for (auto& rec : reg.records)
      if (rec->info.has_device && rec->info.device_type == type && rec->info.kind == PluginKind::Backend &&
          rec->info.status != PluginStatus::Available && rec->info.status != PluginStatus::Loaded)
        failures += "; plugin '" + rec->info.name + "' is " + plugin_status_name(rec->info.status) + ": " +
                    rec->info.reason;
    msg += failures;
    msg += failures.empty() ? "; install its plugin or add the folder of its manifest to TESSERA_PLUGIN_PATH "
                              "(`tessera plugins` lists what was found)"
                            : "";
    *why_not = msg;
  }
  return false;
}

}  // namespace loader

namespace {

using namespace loader;

void unknown_device_name_hook() {
  try {
    Registry& reg = registry();
    std::lock_guard lock(reg.mutex);
    discover_locked(reg);
  } catch (const std::exception& e) {
    plog(LogLevel::Error, std::string("plugin discovery failed: ") + e.what());
  }
}

// Why `name` is not a device: the plugins that would have provided it and why they are not usable.
std::string device_name_reason_hook(std::string_view name) {
  try {
    Registry& reg = registry();
    std::lock_guard lock(reg.mutex);
    discover_locked(reg);
    std::string out;
    for (const auto& rec : reg.records) {
      const PluginInfo& p = rec->info;
      if (!p.has_device || p.device_name != name || p.status == PluginStatus::Available ||
          p.status == PluginStatus::Loaded)
        continue;
      out += (out.empty() ? "" : "; ") + std::string("plugin '") + p.name + "' (" + p.manifest + ") provides it but is " +
             plugin_status_name(p.status) + ": " + p.reason;
    }
    return out;
  } catch (const std::exception& e) {
    return std::string("plugin discovery failed: ") + e.what();
  }
}

// The core calls this when a device type has no allocator or backend yet. A failure is reported
// by throwing, so the caller sees why the plugin did not load.
void backend_loader_hook(DeviceType type) {
  PluginCallGuard in_flight;  // Note [In-flight plugin calls]: no load races a shutdown
  std::string why;
  if (!ensure_backend_loaded(type, &why)) {
    plog(LogLevel::Info, why);
    detail::throw_error(ErrorCode::Unavailable, why);
  }
}

// Installs the core hooks when libtessera is loaded.
struct HookInstaller {
  HookInstaller() {
    set_unknown_device_name_hook(&unknown_device_name_hook);
    set_device_name_reason_hook(&device_name_reason_hook);
    set_backend_loader_hook(&backend_loader_hook);
  }
} g_hook_installer;

}  // namespace

using namespace loader;

const char* plugin_status_name(PluginStatus s) {
  switch (s) {
    case PluginStatus::Available: return "available";
    case PluginStatus::Loaded: return "loaded";
    case PluginStatus::Failed: return "failed";
    case PluginStatus::Disabled: return "disabled";
    case PluginStatus::Shadowed: return "shadowed";
  }
  return "unknown";
}

std::vector<PluginInfo> plugins() {
  Registry& reg = registry();
  std::lock_guard lock(reg.mutex);
  discover_locked(reg);
  std::vector<PluginInfo> out;
  out.reserve(reg.records.size());
  for (const auto& r : reg.records) out.push_back(r->info);
  return out;
}

bool ensure_backend_loaded(DeviceType type, std::string* why_not) {
  Registry& reg = registry();
  if (reg.loaded_types.load(std::memory_order_acquire) & (1u << int(type))) return true;
  std::lock_guard lock(reg.mutex);
  return ensure_backend_locked(reg, type, why_not);
}

bool load_plugin(const std::string& name, std::string* why_not) {
  Registry& reg = registry();
  std::lock_guard lock(reg.mutex);
  discover_locked(reg);
  PluginRecord* found = nullptr;
  for (auto& rec : reg.records) {
    if (rec->info.name != name) continue;
    if (rec->info.status == PluginStatus::Loaded) return true;
    if (rec->info.status == PluginStatus::Available) found = rec.get();
    else if (!found && why_not) *why_not = "plugin '" + name + "' is " + plugin_status_name(rec->info.status) + ": " + rec->info.reason;
  }
  if (!found) {
    if (why_not && why_not->empty()) *why_not = "no plugin named '" + name + "' was found";
    return false;
  }
  if (load_locked(reg, *found)) return true;
  if (why_not) *why_not = "plugin '" + name + "' failed: " + found->info.reason;
  return false;
}

void load_plugins_of_kind(PluginKind kind) {
  Registry& reg = registry();
  std::lock_guard lock(reg.mutex);
  discover_locked(reg);
  if (plugin_kind_traits(kind).provides_device) {
    // One plugin per device type: the best one that loads.
    std::vector<DeviceType> types;
    for (auto& rec : reg.records)
      if (rec->info.status == PluginStatus::Available && rec->info.kind == kind && rec->info.has_device &&
          std::find(types.begin(), types.end(), rec->info.device_type) == types.end())
        types.push_back(rec->info.device_type);
    for (DeviceType t : types) ensure_backend_locked(reg, t, nullptr);
    return;
  }
  for (auto& rec : reg.records)
    if (rec->info.status == PluginStatus::Available && rec->info.kind == kind) load_locked(reg, *rec);
}

void load_plugins_of_kind(std::string_view kind_word) {
  const std::optional<PluginKind> kind = plugin_kind_from_word(kind_word);
  TESSERA_CHECK(kind, "load_plugins_of_kind: '", kind_word, "' is not a plugin kind; expected ", plugin_kind_words());
  load_plugins_of_kind(*kind);
}

void shutdown_plugins() {
  try {
    profiler_flush();  // Note [Profiler]: the trace is complete before plugins go away
  } catch (const Error& e) {
    log_message(LogLevel::Warning, "profiler", e.what());
  }
  drain_and([](Registry& reg) { shutdown_locked(reg); });
}

tessera_proc_t plugin_proc_address(const std::string& plugin, const char* name) {
  TESSERA_CHECK(name && *name, "plugin_proc_address('", plugin, "'): the extension name is empty; pass a TESSERA_EXT_* name");
  Registry& reg = registry();
  std::lock_guard lock(reg.mutex);
  for (const auto& rec : reg.records) {
    if (rec->info.name != plugin || rec->info.status != PluginStatus::Loaded) continue;
    const tessera_plugin_t& h = rec->header;  // the common prefix: a 1.0 header leaves the slot zero
    if (!TESSERA_ABI_HAS_FIELD(&h, tessera_plugin_t, get_proc_address) || !h.get_proc_address) return nullptr;
    return h.get_proc_address(h.self, name);
  }
  return nullptr;
}

tessera_proc_t extension_of_kind(PluginKind kind, const std::string& name, const ExtensionRequest& request) {
  const PluginKindTraits& traits = plugin_kind_traits(kind);
  TESSERA_INTERNAL_ASSERT(traits.extension, "plugins of kind ", traits.word, " offer no extension to look up");
  std::string of_kind;
  const PluginInfo* found = nullptr;
  const std::vector<PluginInfo> all = plugins();
  for (const PluginInfo& p : all) {
    if (p.kind == kind) of_kind += (of_kind.empty() ? "" : ", ") + p.name;
    if (p.name == name && (!found || p.kind == kind)) found = &p;
  }
  const std::string listed = of_kind.empty() ? std::string("none is installed") : "found: " + of_kind;
  TESSERA_CHECK(found, request.who, ": unknown ", request.role, " '", name, "'; expected ", request.alternatives, "a ",
                traits.word, " plugin (", listed, "; add the folder of its manifest to TESSERA_PLUGIN_PATH)");
  // A manifest that failed to read has no trustworthy kind: its reason is the news (a misspelled kind,
  // broken JSON), not "is a backend plugin".
  TESSERA_CHECK(found->kind == kind || found->status != PluginStatus::Failed, request.who, ": ", request.role, " '",
                name, "' cannot be used: ", found->reason);
  TESSERA_CHECK(found->kind == kind, request.who, ": ", request.role, " '", name, "' is a ", plugin_kind_name(found->kind),
                " plugin, not a ", traits.word, "; expected ", request.alternatives, "a ", traits.word, " plugin (",
                listed, ")");
  std::string why;
  TESSERA_CHECK(load_plugin(name, &why), request.who, ": ", traits.word, " plugin '", name, "' does not load: ", why);
  tessera_proc_t fn = plugin_proc_address(name, traits.extension);
  TESSERA_CHECK(fn, request.who, ": ", traits.word, " plugin '", name, "' does not offer the extension '",
                traits.extension, "'; a ", traits.word, " plugin returns it from get_proc_address (Note [Plugin kinds])");
  return fn;
}

void rediscover_plugins_for_testing() {
  drain_and([](Registry& reg) {
    shutdown_locked(reg);
    reg.records.clear();
    reg.discovered = false;
    discover_locked(reg);
  });
}

}  // namespace tessera
