#include "tessera/log.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

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

void load_locked(LogSettings& s) {
  s.components.clear();
  s.all = false;
  const char* env = secure_env("TESSERA_LOG");
  std::string text = env ? env : "";
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(start, comma - start);
    if (item == "all" || item == "1") s.all = true;
    else if (!item.empty()) s.components.push_back(item);
    start = comma + 1;
  }
  s.loaded = true;
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

const char* secure_env(const char* name) { return secure_getenv(name); }

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
