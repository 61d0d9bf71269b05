// Plugin discovery: the manifests named by TESSERA_PLUGIN_PATH and the plugin folder, read once
// (Note [Lazy loading] in plugin_loader.h), narrowed by TESSERA_PLUGINS_SELECT / _DISABLE, checked
// (plugin_requirements.cpp), shadowed by name and priority, and their privateuse slots claimed.
#include <dlfcn.h>
#include <fnmatch.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <filesystem>
#include <set>
#include <sstream>

#include "plugin_registry.h"
#include "tessera/env.h"

#ifndef TESSERA_PLUGIN_SUBDIR
#define TESSERA_PLUGIN_SUBDIR "tessera/plugins"
#endif

namespace fs = std::filesystem;

namespace tessera::loader {
namespace {

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

std::string matching_glob(const std::vector<std::string>& patterns, const std::string& name) {
  for (const auto& p : patterns)
    if (fnmatch(p.c_str(), name.c_str(), 0) == 0) return p;
  return {};
}

void drop_replaced_claims_locked(Registry& reg) {
  for (auto& rec : reg.records) {
    if (rec->info.status != PluginStatus::Available || rec->privateuse_slot <= 0) continue;
    std::string why = replaced_claim_reason(*rec);
    if (!why.empty()) set_failed(*rec, why);
  }
}

}  // namespace

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: plugins may still run during static destruction
  return *r;
}

void set_failed(PluginRecord& r, const std::string& reason) {
  r.info.status = PluginStatus::Failed;
  r.info.reason = reason;
  if (plog_on()) plog(LogLevel::Warning, "rejected '" + r.info.name + "' (" + r.info.manifest + "): " + reason);
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
      r.info.autocast = m.autocast;
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
      plog(LogLevel::Info, "accepted '" + r->info.name + "' " + r->info.version + " (" + plugin_kind_name(r->info.kind) +
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

}  // namespace tessera::loader
