// Plugin discovery and loading. See plugin_loader.h, docs/plugins.md and Note [Lazy loading].
//
// Note [Plugin registry locking]
// One recursive mutex guards the registry: discovery, loading and shutdown run under it, so
// concurrent first uses of a device type load its plugin once (the second caller waits and finds it
// loaded). It is recursive because a plugin's init may parse a device name, which can call back into
// discovery. The loaded device types are mirrored in an atomic bit mask so that ensure_backend_loaded
// on an already loaded type takes no lock.
#include "tessera/plugin_loader.h"

#include <dlfcn.h>
#include <fnmatch.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/dll/shared_library.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "host_api.h"
#include "manifest.h"
#include "stream_state.h"
#include "tessera/allocator.h"
#include "tessera/dispatcher.h"
#include "tessera/env.h"
#include "tessera/error.h"
#include "tessera/log.h"
#include "tessera/profiler.h"

#ifndef TESSERA_PLUGIN_SUBDIR
#define TESSERA_PLUGIN_SUBDIR "tessera/plugins"
#endif

namespace fs = std::filesystem;

namespace tessera {
namespace {

using loader::HostContext;
using loader::Manifest;

constexpr const char* kLog = "plugins";

void plog(LogLevel level, const std::string& message) { log_message(level, kLog, message); }
bool plog_on() { return log_enabled(kLog); }

// ------------------------------------------------------------------ CPU features

// Normalised spelling: lower case without '_', '-' and '.' ("avx512_bf16" == "avx512bf16").
std::string normalise_feature(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (c == '_' || c == '-' || c == '.') continue;
    out += char(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  }
  return out;
}

struct CpuFeatures {
  std::set<std::string> present;
  CpuFeatures() {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    auto add = [&](bool on, const char* n) {
      if (on) present.insert(n);
    };
    const unsigned c1 = c, d1 = d;
    bool osxsave = c1 & (1u << 27);
    uint64_t xcr0 = 0;
    if (osxsave) {
      unsigned lo = 0, hi = 0;
      __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
      xcr0 = (uint64_t(hi) << 32) | lo;
    }
    const bool os_avx = (xcr0 & 0x6) == 0x6;
    const bool os_avx512 = (xcr0 & 0xE6) == 0xE6;
    const bool os_amx = (xcr0 & (3u << 17)) == (3u << 17);
    add(d1 & (1u << 25), "sse");
    add(d1 & (1u << 26), "sse2");
    add(c1 & (1u << 0), "sse3");
    add(c1 & (1u << 9), "ssse3");
    add(c1 & (1u << 19), "sse41");
    add(c1 & (1u << 20), "sse42");
    add(c1 & (1u << 23), "popcnt");
    add(os_avx && (c1 & (1u << 12)), "fma");
    add(os_avx && (c1 & (1u << 28)), "avx");
    add(os_avx && (c1 & (1u << 29)), "f16c");
    unsigned max_leaf = __get_cpuid_max(0, nullptr);
    if (max_leaf >= 7) {
      __cpuid_count(7, 0, a, b, c, d);
      add(b & (1u << 3), "bmi");
      add(b & (1u << 3), "bmi1");
      add(b & (1u << 8), "bmi2");
      add(os_avx && (b & (1u << 5)), "avx2");
      add(os_avx512 && (b & (1u << 16)), "avx512f");
      add(os_avx512 && (b & (1u << 17)), "avx512dq");
      add(os_avx512 && (b & (1u << 21)), "avx512ifma");
      add(os_avx512 && (b & (1u << 28)), "avx512cd");
      add(os_avx512 && (b & (1u << 30)), "avx512bw");
      add(os_avx512 && (b & (1u << 31)), "avx512vl");
      add(os_avx512 && (c & (1u << 1)), "avx512vbmi");
      add(os_avx512 && (c & (1u << 6)), "avx512vbmi2");
      add(c & (1u << 8), "gfni");
      add(os_avx512 && (c & (1u << 11)), "avx512vnni");
      add(os_avx512 && (c & (1u << 12)), "avx512bitalg");
      add(os_avx512 && (c & (1u << 14)), "avx512vpopcntdq");
      add(os_avx512 && (d & (1u << 8)), "avx512vp2intersect");
      add(os_amx && (d & (1u << 22)), "amxbf16");
      add(os_amx && (d & (1u << 24)), "amxtile");
      add(os_amx && (d & (1u << 25)), "amxint8");
      __cpuid_count(7, 1, a, b, c, d);
      add(os_avx && (a & (1u << 4)), "avxvnni");
      add(os_avx512 && (a & (1u << 5)), "avx512bf16");
    }
#endif
  }
};

bool cpu_feature_supported(const std::string& name) {
  static const CpuFeatures features;
  return features.present.count(normalise_feature(name)) != 0;
}

// ------------------------------------------------------------------ allocator over a plugin

// Note [Plugin allocators outlive their plugin]
// A DataPtr's deleter context points into its allocator, so an allocator object is never deleted;
// after its plugin shuts down it is retired and frees nothing (the plugin freed its memory in its
// shutdown). Each load makes a new allocator, whose `alive_` flag is the DataPtrs' liveness flag
// (Note [Plugin generations] in allocator.h): a tensor that outlives its plugin is unusable, with
// a clear error, instead of reaching memory that a reloaded plugin handed to another tensor.
class PluginAllocator final : public Allocator {
 public:
  static constexpr int kMaxDevices = 64;

  PluginAllocator(DeviceType type, const tessera_device_interface_t* iface, void* self, std::string plugin)
      : type_(type), iface_(iface), self_(self), plugin_(std::move(plugin)) {
    for (int i = 0; i < kMaxDevices; ++i) slots_[i] = Slot{this, i};
  }

  DataPtr allocate(size_t nbytes, int device_index) override {
    PluginCallGuard in_flight;  // Note [In-flight plugin calls]
    TESSERA_CHECK_CODE(alive_.load(std::memory_order_acquire), ErrorCode::Unavailable, "cannot allocate on '",
                       device_type_name(type_), "': its plugin '", plugin_, "' was shut down");
    int index = device_index;
    if (index < 0) {
      index = 0;
      int32_t current = 0;
      if (iface_->device_get_current) {
        tessera_status_t st = iface_->device_get_current(self_, &current);
        if (!st) index = current;
        status_free(st);
      }
    }
    TESSERA_CHECK(index >= 0 && index < kMaxDevices, "device index ", index, " of '", device_type_name(type_),
                  "' is out of range (0..", kMaxDevices - 1, ")");
    Device device(type_, index);
    if (nbytes == 0) return DataPtr(nullptr, nullptr, nullptr, device);
    void* handle = nullptr;
    tessera_status_t st = iface_->memory_allocate(self_, index, nbytes, &handle);
    if (st) {
      tessera_status_code_t code = st->code;
      std::string message = st->message;
      status_free(st);
      detail::throw_error(
          code == TESSERA_STATUS_OUT_OF_MEMORY ? ErrorCode::OutOfMemory : error_code_of(code),
          detail::str_cat(code == TESSERA_STATUS_OUT_OF_MEMORY ? "out of memory: " : "", "cannot allocate ", nbytes,
                          " bytes on device '", device.str(), "' (plugin '", plugin_, "': ", message,
                          "); free tensors on that device or allocate less"));
    }
    // Note [Stream-ordered allocation] (docs/plugins.md): memory made while a stream is current is
    // used on that stream, so its later free waits for the stream's work, as after record_stream.
    if (void* stream = current_stream_handle(type_, index);
        stream && TESSERA_ABI_HAS_FIELD(iface_, tessera_device_interface_t, memory_record_stream) &&
        iface_->memory_record_stream) {
      DataPtr data(handle, &slots_[index], &PluginAllocator::free_handle, device, &alive_);
      if (tessera_status_t rs = iface_->memory_record_stream(self_, index, handle, stream)) {
        const tessera_status_code_t code = rs->code;
        const std::string message = status_message_of(rs);
        status_free(rs);
        detail::throw_error(error_code_of(code), detail::str_cat("allocating ", nbytes, " bytes on '", device.str(),
                                                                 "': record_stream failed (plugin '", plugin_,
                                                                 "': ", message, ")"));
      }
      return data;
    }
    return DataPtr(handle, &slots_[index], &PluginAllocator::free_handle, device, &alive_);
  }

  void retire() { alive_.store(false, std::memory_order_release); }

 private:
  struct Slot {
    PluginAllocator* owner;
    int32_t index;
  };
  static void free_handle(void* ctx, void* handle) {
    auto* slot = static_cast<Slot*>(ctx);
    PluginAllocator* a = slot->owner;
    // During a shutdown the plugin releases all its memory itself: this handle is left to it.
    PluginCallGuard in_flight(std::nothrow);
    if (in_flight.entered() && a->alive_.load(std::memory_order_acquire) && a->iface_->memory_free) a->iface_->memory_free(a->self_, slot->index, handle);
  }

  DeviceType type_;
  const tessera_device_interface_t* iface_;
  void* self_;
  std::string plugin_;
  std::atomic<bool> alive_{true};
  std::array<Slot, kMaxDevices> slots_{};
};

// ------------------------------------------------------------------ the registry

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

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: plugins may still run during static destruction
  return *r;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(sep, start);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(start, end - start);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.erase(0, 1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.pop_back();
    if (!item.empty()) out.push_back(item);
    start = end + 1;
  }
  return out;
}

std::string default_plugin_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&plugin_status_name), &info) == 0 || !info.dli_fname) return {};
  std::error_code ec;
  fs::path lib = fs::weakly_canonical(fs::path(info.dli_fname), ec);
  if (ec) lib = fs::path(info.dli_fname);
  return (lib.parent_path() / TESSERA_PLUGIN_SUBDIR).string();
}

// Appends the manifests named by `entry` (a folder: its *.json files in name order; a file: itself).
void collect_manifests(const fs::path& entry, const char* origin, std::vector<std::string>* out,
                       std::set<std::string>* seen) {
  std::error_code ec;
  auto add = [&](const fs::path& p) {
    std::error_code ec2;
    fs::path canon = fs::weakly_canonical(fs::absolute(p, ec2), ec2);
    std::string key = canon.string();
    if (seen->insert(key).second) out->push_back(key);
  };
  if (fs::is_directory(entry, ec)) {
    // The folder is made canonical once; its files are only appended (one syscall per folder, not
    // several per manifest: discovery cost matters at start-up).
    fs::path dir = fs::weakly_canonical(fs::absolute(entry, ec), ec);
    std::vector<std::string> files;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->path().extension() == ".json" && it->is_regular_file(ec)) files.push_back(it->path().string());
    }
    std::sort(files.begin(), files.end());
    for (auto& f : files)
      if (seen->insert(f).second) out->push_back(std::move(f));
  } else if (fs::is_regular_file(entry, ec)) {
    add(entry);
  } else if (plog_on()) {
    plog(LogLevel::Info, std::string(origin) + " entry '" + entry.string() + "' does not exist; skipped");
  }
}

// Note [Trusted plugin files]
// A manifest, a plugin library and each of its `requires.libraries` is checked where it really
// lives: symlinks are resolved first (a link in a safe folder to a file in a world-writable one
// is refused), then the file and every folder above it up to "/" must be owned by root or by the
// current user and not be writable by others. A world-writable folder with the sticky bit (like
// /tmp) is accepted, as ld.so and the Vulkan loader do: others may add files there but not
// replace or rename ours, and a file they add is refused as not ours.
// Returns the reason `file` is not trusted, or "".
std::string untrusted_file_reason(const fs::path& file, const char* what) {
  std::error_code ec;
  fs::path real = fs::canonical(file, ec);
  if (ec) return {};  // a missing file is reported by the caller with its own hint
  const std::string shown =
      real == fs::path(file) ? "'" + real.string() + "'" : "'" + file.string() + "' (resolves to '" + real.string() + "')";
  const uid_t me = ::geteuid();
  struct stat st{};
  if (::stat(real.c_str(), &st) != 0) return {};
  if (st.st_uid != 0 && st.st_uid != me)
    return std::string("refused: the ") + what + " " + shown + " is owned by uid " + std::to_string(st.st_uid) +
           ", neither root nor the current user (uid " + std::to_string(me) + "); install it as root or as yourself";
  if (st.st_mode & S_IWOTH)
    return std::string("refused: the ") + what + " " + shown + " is world-writable (anyone could replace it); run chmod o-w '" +
           real.string() + "'";
  for (fs::path dir = real.parent_path();; dir = dir.parent_path()) {
    if (::stat(dir.c_str(), &st) != 0) break;
    if (st.st_uid != 0 && st.st_uid != me)
      return std::string("refused: the folder '") + dir.string() + "' above the " + what + " " + shown +
             " is owned by uid " + std::to_string(st.st_uid) + ", neither root nor the current user (uid " +
             std::to_string(me) + "); move the plugin to a folder you or root own";
    if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX))
      return std::string("refused: the folder '") + dir.string() + "' above the " + what + " " + shown +
             " is world-writable (anyone could plant or replace a plugin there); run chmod o-w '" + dir.string() + "'";
    if (dir == dir.root_path() || dir.empty()) break;
  }
  return {};
}

// The folders the dynamic loader searches, in its order: LD_LIBRARY_PATH (ignored in setuid
// processes, as ld.so does), the folders of /etc/ld.so.conf and the files it includes, then the
// default system folders.
std::vector<std::string> library_search_path() {
  std::vector<std::string> dirs;
  if (const char* env = secure_env("LD_LIBRARY_PATH"))
    for (const auto& d : split(env, ':')) dirs.push_back(d);
  std::vector<std::string> conf_files = {"/etc/ld.so.conf"};
  for (size_t i = 0; i < conf_files.size() && i < 64; ++i) {
    std::ifstream in(conf_files[i]);
    std::string line;
    while (std::getline(in, line)) {
      line = line.substr(0, line.find('#'));
      std::vector<std::string> words = split(line, ' ');
      if (words.empty()) continue;
      if (words[0] == "include" && words.size() >= 2) {
        std::error_code ec;
        fs::path pattern = fs::path(conf_files[i]).parent_path() / words[1];
        std::vector<std::string> matches;
        for (fs::directory_iterator it(pattern.parent_path(), ec), end; !ec && it != end; it.increment(ec))
          if (fnmatch(pattern.filename().c_str(), it->path().filename().c_str(), 0) == 0)
            matches.push_back(it->path().string());
        std::sort(matches.begin(), matches.end());
        conf_files.insert(conf_files.end(), matches.begin(), matches.end());
      } else {
        dirs.push_back(words[0]);
      }
    }
  }
  for (const char* d : {"/lib64", "/usr/lib64", "/lib", "/usr/lib"}) dirs.emplace_back(d);
  return dirs;
}

// Where the dynamic loader would find `name` (a path when it holds a '/'), without loading it:
// loading would run its constructors during plain discovery. "" when not found.
std::string find_shared_library(const std::string& name) {
  std::error_code ec;
  if (name.find('/') != std::string::npos) return fs::is_regular_file(name, ec) ? name : std::string();
  const std::vector<std::string> dirs = library_search_path();
  for (const auto& d : dirs) {
    fs::path candidate = fs::path(d) / name;
    if (fs::is_regular_file(candidate, ec)) return candidate.string();
  }
  return {};
}

// The first glob of `patterns` that matches `name`, or "".
std::string matching_glob(const std::vector<std::string>& patterns, const std::string& name) {
  for (const auto& p : patterns)
    if (fnmatch(p.c_str(), name.c_str(), 0) == 0) return p;
  return {};
}

void set_failed(PluginRecord& r, const std::string& reason) {
  r.info.status = PluginStatus::Failed;
  r.info.reason = reason;
  if (plog_on()) plog(LogLevel::Warning, "rejected '" + r.info.name + "' (" + r.info.manifest + "): " + reason);
}

// Checks everything that can be checked without loading the library.
void check_requirements(PluginRecord& r) {
  const Manifest& m = r.manifest;
  if (m.abi_major != TESSERA_ABI_MAJOR) {
    set_failed(r, "incompatible ABI major version (plugin: " + std::to_string(m.abi_major) +
                      ", runtime: " + std::to_string(TESSERA_ABI_MAJOR) + "); rebuild the plugin against Tessera SDK " +
                      std::to_string(TESSERA_ABI_MAJOR) + ".x");
    return;
  }
  std::error_code ec;
  if (!fs::exists(m.library, ec)) {
    set_failed(r, "library file '" + m.library + "' not found (\"library\" in the manifest is resolved against the "
                  "manifest's folder); build or install the plugin, or fix the path");
    return;
  }
  std::string ww = untrusted_file_reason(m.library, "library");
  if (!ww.empty()) {
    set_failed(r, ww);
    return;
  }
  std::vector<std::string> missing_features;
  for (const auto& f : m.cpu_features)
    if (!cpu_feature_supported(f)) missing_features.push_back(f);
  std::vector<std::string> missing_libs;
  for (const auto& lib : m.libraries) {
    std::string found = find_shared_library(lib);
    if (found.empty()) {
      missing_libs.push_back(lib);
      continue;
    }
    std::string untrusted = untrusted_file_reason(found, "required library");
    if (!untrusted.empty()) {
      set_failed(r, untrusted);
      return;
    }
  }
  if (missing_features.empty() && missing_libs.empty()) return;
  std::string reason = "unmet requirements:";
  if (!missing_features.empty()) {
    reason += " cpu_features not supported by this CPU: ";
    for (size_t i = 0; i < missing_features.size(); ++i) reason += (i ? ", " : "") + missing_features[i];
    if (!missing_libs.empty()) reason += ";";
  }
  if (!missing_libs.empty()) {
    reason += " libraries not found by the dynamic loader: ";
    for (size_t i = 0; i < missing_libs.size(); ++i) reason += (i ? ", " : "") + missing_libs[i];
    reason += " (install them or add their folder to LD_LIBRARY_PATH)";
  }
  set_failed(r, reason);
}

// Note [Manifest claims on privateuse slots]
// A manifest's "device": {"slot", "name"} is a claim (claim_privateuse_backend): among manifests
// claiming one slot the highest priority wins, whatever the discovery order (ties: found first). An
// explicit rename by the application replaces a claim until its plugin loads (Note [PrivateUse
// renaming]); load_locked settles the claim with a rename, and every entry point (through
// discover_locked) lists a plugin whose claim was replaced as failed, naming both names.

// Why the claim of `r` no longer holds, or "" while it does.
std::string replaced_claim_reason(const PluginRecord& r) {
  const std::string slot = "privateuse" + std::to_string(r.privateuse_slot);
  const std::string now = privateuse_backend_name(r.privateuse_slot);
  if (now == r.info.device_name) return {};
  std::string holder;
  for (int s = 1; s <= 3; ++s)
    if (s != r.privateuse_slot && privateuse_backend_name(s) == r.info.device_name)
      holder = "; the application gave '" + r.info.device_name + "' to privateuse" + std::to_string(s);
  return "its manifest names " + slot + " '" + r.info.device_name + "', but the application renamed it" +
         (now == slot ? std::string(" before the plugin loaded") + holder
                      : " to '" + now + "' before the plugin loaded") +
         "; drop the application's rename_privateuse_backend() call, or choose a free slot in the manifest";
}

void drop_replaced_claims_locked(Registry& reg) {
  for (auto& rec : reg.records) {
    if (rec->info.status != PluginStatus::Available || rec->privateuse_slot <= 0) continue;
    std::string why = replaced_claim_reason(*rec);
    if (!why.empty()) set_failed(*rec, why);
  }
}

void discover_locked(Registry& reg) {
  if (reg.discovered) {
    drop_replaced_claims_locked(reg);
    return;
  }
  // The variables are parsed before anything changes: a malformed one throws (Note [Environment
  // variables]) and leaves the registry undiscovered, so that fixing it and asking again works.
  std::vector<std::string> path_entries, select, disable;
  const char* path_env = secure_env("TESSERA_PLUGIN_PATH");
  const char* select_env = secure_env("TESSERA_PLUGINS_SELECT");
  const char* disable_env = secure_env("TESSERA_PLUGINS_DISABLE");
  if (path_env)
    path_entries = parse_env_list("TESSERA_PLUGIN_PATH", path_env, ':', nullptr, "folders or manifest files");
  if (select_env) select = parse_env_globs("TESSERA_PLUGINS_SELECT", select_env);
  if (disable_env) disable = parse_env_globs("TESSERA_PLUGINS_DISABLE", disable_env);
  reg.discovered = true;
  auto t0 = std::chrono::steady_clock::now();

  std::vector<std::string> paths;
  std::set<std::string> seen;
  for (const auto& entry : path_entries) collect_manifests(entry, "TESSERA_PLUGIN_PATH", &paths, &seen);
  std::string dir = default_plugin_dir();
  if (!dir.empty()) collect_manifests(dir, "plugin folder", &paths, &seen);

  for (const auto& path : paths) {
    auto rec = std::make_unique<PluginRecord>();
    PluginRecord& r = *rec;
    r.order = reg.records.size();
    r.info.manifest = path;
    r.info.name = fs::path(path).stem().string();
    reg.records.push_back(std::move(rec));

    std::string failure = untrusted_file_reason(path, "manifest");
    if (failure.empty()) {
      std::string text;
      if (loader::read_manifest_file(path, &text, &failure)) {
        std::string name_hint;
        r.manifest_ok = loader::parse_manifest(path, text, &r.manifest, &failure, &name_hint);
        if (!name_hint.empty()) r.info.name = name_hint;
      }
    }
    if (r.manifest_ok) {
      const Manifest& m = r.manifest;
      r.info.name = m.name;
      r.info.kind = m.kind;
      r.info.version = m.version;
      r.info.library = m.library;
      r.info.description = m.description;
      r.info.priority = m.priority;
      r.info.has_device = m.has_device;
      r.info.device_type = m.device_type;
      r.info.device_name = m.device_name;
      r.privateuse_slot = m.privateuse_slot;
      if (!m.unknown_fields.empty() && plog_on())
        for (const auto& f : m.unknown_fields)
          plog(LogLevel::Info, std::string(path).append(": ignoring unknown field '").append(f).append("'"));
    }

    // Selection first: a plugin the user switched off is "disabled" whatever else is wrong with it.
    if (!select.empty() && matching_glob(select, r.info.name).empty()) {
      r.info.status = PluginStatus::Disabled;
      r.info.reason = "not selected: TESSERA_PLUGINS_SELECT=" + std::string(select_env) + " does not match '" +
                      r.info.name + "'";
      if (plog_on()) plog(LogLevel::Info, "disabled '" + r.info.name + "' (" + path + "): " + r.info.reason);
      continue;
    }
    std::string glob = matching_glob(disable, r.info.name);
    if (!glob.empty()) {
      r.info.status = PluginStatus::Disabled;
      r.info.reason = "disabled by TESSERA_PLUGINS_DISABLE (pattern '" + glob + "')";
      if (plog_on()) plog(LogLevel::Info, "disabled '" + r.info.name + "' (" + path + "): " + r.info.reason);
      continue;
    }
    if (!r.manifest_ok) {
      set_failed(r, failure);
      continue;
    }
    check_requirements(r);
  }

  // Shadowing: among available plugins of one name the highest priority wins (ties: found first).
  std::vector<PluginRecord*> winners;
  for (auto& rec : reg.records) {
    PluginRecord& r = *rec;
    if (r.info.status != PluginStatus::Available) continue;
    PluginRecord* best = &r;
    for (auto& other : reg.records) {
      if (other->info.status != PluginStatus::Available || other->info.name != r.info.name) continue;
      if (other->info.priority > best->info.priority ||
          (other->info.priority == best->info.priority && other->order < best->order))
        best = other.get();
    }
    if (best != &r) {
      r.info.status = PluginStatus::Shadowed;
      r.info.reason = "shadowed by '" + best->info.name + "' " + best->info.version + " from " + best->info.manifest +
                      " (priority " + std::to_string(best->info.priority) + " over " +
                      std::to_string(r.info.priority) + ")";
      if (plog_on()) plog(LogLevel::Info, "shadowed " + r.info.manifest + ": " + r.info.reason);
    } else {
      winners.push_back(&r);
    }
  }

  // Privateuse slots are claimed now, so that Device("npu") parses before any library is loaded;
  // see Note [Manifest claims on privateuse slots].
  std::stable_sort(winners.begin(), winners.end(), [](const PluginRecord* a, const PluginRecord* b) {
    return a->info.priority > b->info.priority;
  });
  std::array<const PluginRecord*, 4> slot_owner{};
  for (PluginRecord* r : winners) {
    if (r->privateuse_slot > 0) {
      try {
        claim_privateuse_backend(r->privateuse_slot, r->info.device_name);
      } catch (const std::exception& e) {
        std::string reason = std::string("cannot name slot privateuse") + std::to_string(r->privateuse_slot) + " '" +
                             r->info.device_name + "': " + e.what();
        if (const PluginRecord* owner = slot_owner[size_t(r->privateuse_slot)])
          reason += " (claimed by plugin '" + owner->info.name + "' from " + owner->info.manifest + ", priority " +
                    std::to_string(owner->info.priority) + " over " + std::to_string(r->info.priority) + ")";
        set_failed(*r, reason);
        continue;
      }
      if (!slot_owner[size_t(r->privateuse_slot)]) slot_owner[size_t(r->privateuse_slot)] = r;
    }
    if (plog_on())
      plog(LogLevel::Info, "accepted '" + r->info.name + "' " + r->info.version + " (" + r->info.kind +
                               (r->info.has_device ? ", device '" + r->info.device_name + "'" : std::string()) +
                               ", priority " + std::to_string(r->info.priority) + ") from " + r->info.manifest);
  }
  if (plog_on()) {
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::ostringstream os;
    os << "discovery: " << reg.records.size() << " manifest(s) in " << ms << " ms (search order: "
       << (secure_env("TESSERA_PLUGIN_PATH") ? "TESSERA_PLUGIN_PATH, " : "") << dir << ")";
    plog(LogLevel::Info, os.str());
  }
}

void unload_library(PluginRecord& r) { r.library.unload(); }

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

  const bool is_backend = r.info.kind == "backend";
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

void unload_locked(Registry& reg, PluginRecord& r) {
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

bool ensure_backend_locked(Registry& reg, DeviceType type, std::string* why_not) {
  discover_locked(reg);
  for (auto& rec : reg.records)
    if (rec->info.status == PluginStatus::Loaded && rec->info.kind == "backend" && rec->info.device_type == type)
      return true;
  std::vector<PluginRecord*> candidates;
  for (auto& rec : reg.records)
    if (rec->info.status == PluginStatus::Available && rec->info.kind == "backend" && rec->info.has_device &&
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
      if (rec->info.has_device && rec->info.device_type == type && rec->info.kind == "backend" &&
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

// Runs `fn` under the registry mutex once no plugin call is in flight (Note [In-flight plugin
// calls]); calls that start meanwhile fail. Refuses from inside a call (it would wait for itself)
// and after kShutdownWait with calls still running (a kernel that never returns).
// Note [Asymmetric fence] (host_api.h): the slots of every thread that ever made a call.
std::atomic<PluginCallSlot*> g_plugin_call_slots{nullptr};

long membarrier(int cmd) { return syscall(__NR_membarrier, cmd, 0, 0); }

#if defined(__SANITIZE_THREAD__)
constexpr bool kUseMembarrier = false;  // ThreadSanitizer does not model membarrier
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kUseMembarrier = false;
#else
constexpr bool kUseMembarrier = true;
#endif
#else
constexpr bool kUseMembarrier = true;
#endif

// Registers the process for expedited membarrier before main (and so before any call) when the
// kernel offers it; callers then pay a compiler barrier instead of a fence.
[[maybe_unused]] const bool g_membarrier_registered = [] {
  if (!kUseMembarrier) return false;
  long cmds = membarrier(MEMBARRIER_CMD_QUERY);
  if (cmds < 0 || !(cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED)) return false;
  if (membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) != 0) return false;
  g_heavy_fence_ready.store(true, std::memory_order_release);
  return true;
}();

// Makes every store a running thread of this process did before its last compiler barrier
// visible to the loads that follow (the heavy half of Note [Asymmetric fence]).
void heavy_fence() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (g_heavy_fence_ready.load(std::memory_order_acquire))
    TESSERA_INTERNAL_ASSERT(membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0,
                            "membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) failed after registering");
}

uint64_t plugin_calls_in_flight() {
  uint64_t n = 0;
  for (PluginCallSlot* s = g_plugin_call_slots.load(std::memory_order_acquire); s; s = s->next)
    n += s->depth.load(std::memory_order_acquire);
  return n;
}

// Runs `fn` under the registry mutex once no plugin call is in flight (Note [In-flight plugin
// calls]); calls that start meanwhile fail. Refuses from inside a call (it would wait for itself)
// and after kShutdownWait with calls still running (a kernel that never returns).
template <typename Fn>
void drain_and(Fn fn) {
  TESSERA_CHECK_CODE(t_plugin_call_depth == 0, ErrorCode::InvalidArgument,
                     "shutdown_plugins() called from inside an operator call or a plugin callback (it would wait "
                     "for itself); call it once the calls have returned");
  static std::mutex one_shutdown_at_a_time;
  std::lock_guard serial(one_shutdown_at_a_time);
  g_plugin_shutdown.store(true, std::memory_order_seq_cst);
  struct ClearFlag {
    ~ClearFlag() { g_plugin_shutdown.store(false, std::memory_order_seq_cst); }
  } clear_flag;
  heavy_fence();
  constexpr auto kShutdownWait = std::chrono::seconds(30);
  const auto deadline = std::chrono::steady_clock::now() + kShutdownWait;
  for (;;) {
    uint64_t in_flight = plugin_calls_in_flight();
    if (in_flight == 0) break;
    TESSERA_CHECK_CODE(std::chrono::steady_clock::now() < deadline, ErrorCode::Unavailable,
                       "shutdown_plugins(): ", in_flight, " operator call(s) still running after ",
                       kShutdownWait.count(), " s; plugins stay loaded; let the calls finish and call it again");
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  Registry& reg = registry();
  std::lock_guard lock(reg.mutex);
  fn(reg);
}

}  // namespace

PluginCallSlot* claim_plugin_call_slot() {
  // Released when the thread exits. A thread that calls again after its release (from another
  // thread_local's destructor) gets a slot of its own that is never released.
  struct Release {
    PluginCallSlot* slot = nullptr;
    ~Release() {
      if (!slot) return;
      t_plugin_call_slot = nullptr;
      slot->in_use.store(false, std::memory_order_release);
    }
  };
  static thread_local bool released_once = false;
  PluginCallSlot* slot = nullptr;
  for (PluginCallSlot* s = g_plugin_call_slots.load(std::memory_order_acquire); s && !slot; s = s->next) {
    bool free = false;
    if (s->in_use.compare_exchange_strong(free, true, std::memory_order_acq_rel)) slot = s;
  }
  if (!slot) {
    slot = new PluginCallSlot;  // never freed: shutdown may scan it at any time
    slot->in_use.store(true, std::memory_order_relaxed);
    PluginCallSlot* head = g_plugin_call_slots.load(std::memory_order_relaxed);
    do slot->next = head;
    while (!g_plugin_call_slots.compare_exchange_weak(head, slot, std::memory_order_release, std::memory_order_relaxed));
  }
  t_plugin_call_slot = slot;
  if (!released_once) {
    static thread_local struct Owner : Release {
      ~Owner() { released_once = true; }
    } owner;
    owner.slot = slot;
  }
  return slot;
}

void throw_plugin_shutdown_in_progress() {
  detail::throw_error(ErrorCode::Unavailable,
                      "plugins are being shut down (shutdown_plugins() is running on another thread); "
                      "start new operator calls after it returns");
}

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

void load_plugins_of_kind(const std::string& kind) {
  Registry& reg = registry();
  std::lock_guard lock(reg.mutex);
  discover_locked(reg);
  if (kind == "backend") {
    // One plugin per device type: the best one that loads.
    std::vector<DeviceType> types;
    for (auto& rec : reg.records)
      if (rec->info.status == PluginStatus::Available && rec->info.kind == "backend" && rec->info.has_device &&
          std::find(types.begin(), types.end(), rec->info.device_type) == types.end())
        types.push_back(rec->info.device_type);
    for (DeviceType t : types) ensure_backend_locked(reg, t, nullptr);
    return;
  }
  for (auto& rec : reg.records)
    if (rec->info.status == PluginStatus::Available && rec->info.kind == kind) load_locked(reg, *rec);
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

void rediscover_plugins_for_testing() {
  drain_and([](Registry& reg) {
    shutdown_locked(reg);
    reg.records.clear();
    reg.discovered = false;
    discover_locked(reg);
  });
}

}  // namespace tessera
