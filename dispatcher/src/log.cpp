#include "tessera/log.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "tessera/env.h"

namespace tessera {
namespace {

struct LogSettings {
  std::shared_mutex mutex;
  bool loaded = false;
  bool all = false;
  std::vector<std::string> components;
};

LogSettings& settings() {
  static LogSettings s;
  return s;
}

bool valid_log_item(std::string_view item) {
  if (item == "1") return true;
  if (item.empty() || item[0] < 'a' || item[0] > 'z') return false;
  for (char c : item)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

// A malformed TESSERA_LOG must not make logging throw (it runs inside error paths): it is reported
// once on stderr, the way every variable reports it (Note [Environment variables]), and ignored.
void load_locked(LogSettings& s) {
  s.components.clear();
  s.all = false;
  s.loaded = true;
  const char* env = secure_env("TESSERA_LOG");
  if (!env) return;
  std::vector<std::string> items;
  try {
    items = parse_env_list("TESSERA_LOG", env, ',', valid_log_item,
                           "component names (lower-case letters, digits and '_', e.g. plugins, dispatch, fallback) "
                           "or all");
  } catch (const std::exception& e) {
    std::string line = std::string("[tessera:log] warning: ") + e.what() + "; logging stays off\n";
    std::fwrite(line.data(), 1, line.size(), stderr);
    return;
  }
  for (auto& item : items) {
    if (item == "all" || item == "1") s.all = true;
    else s.components.push_back(std::move(item));
  }
}

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::Debug: return "debug";
    case LogLevel::Info: return "info";
    case LogLevel::Warning: return "warning";
    case LogLevel::Error: return "error";
  }
  return "info";
}

}  // namespace

const char* secure_env(const char* name) { return env_value(name); }

bool log_enabled(std::string_view component) {
  LogSettings& s = settings();
  {
    std::shared_lock lock(s.mutex);
    if (s.loaded) {
      if (s.all) return true;
      for (const auto& c : s.components)
        if (c == component) return true;
      return false;
    }
  }
  {
    std::unique_lock lock(s.mutex);
    if (!s.loaded) load_locked(s);
  }
  return log_enabled(component);
}

void log_message(LogLevel level, std::string_view component, std::string_view message) {
  if (!log_enabled(component)) return;
  std::string line = "[tessera:" + std::string(component) + "] " + level_name(level) + ": " +
                     std::string(message) + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}

void reload_log_settings() {
  LogSettings& s = settings();
  std::unique_lock lock(s.mutex);
  load_locked(s);
}

}  // namespace tessera
