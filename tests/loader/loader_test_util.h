// Helpers shared by the loader tests: fresh temporary plugin folders, manifest writing, and the
// environment that isolates a test from the build's own plugins.
#pragma once
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "tessera/device.h"
#include "tessera/plugin_abi.h"
#include "tessera/plugin_loader.h"

namespace lt {

namespace fs = std::filesystem;
using json = nlohmann::json;

// A fresh folder under the temporary directory (mode 0700), removed on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "tessera_loader_XXXXXX").string();
    char* made = mkdtemp(tmpl.data());
    if (made) path_ = made;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) {
      ::chmod(path_.c_str(), 0700);
      fs::remove_all(path_, ec);
    }
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

  std::string write(const std::string& name, const std::string& text) const {
    std::string p = file(name);
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  std::string write_manifest(const std::string& file_stem, const json& manifest) const {
    return write(file_stem + ".json", manifest.dump(2));
  }

 private:
  std::string path_;
};

// A valid backend manifest on a privateuse slot; tests modify what they break.
inline json backend_manifest(const std::string& name, const std::string& library, int slot,
                             const std::string& device_name) {
  return json{{"manifest_version", 1},
              {"name", name},
              {"kind", "backend"},
              {"library", library},
              {"abi", {{"major", TESSERA_ABI_MAJOR}, {"minor", TESSERA_ABI_MINOR}}},
              {"version", "1.0.0"},
              {"device", {{"slot", "privateuse" + std::to_string(slot)}, {"name", device_name}}},
              {"priority", 0},
              {"description", "loader test plugin"}};
}

// A manifest of kind "quantizer" without device (for plugins that are never loaded).
inline json plain_manifest(const std::string& name, const std::string& library) {
  return json{{"manifest_version", 1},
              {"name", name},
              {"kind", "quantizer"},
              {"library", library},
              {"abi", {{"major", TESSERA_ABI_MAJOR}, {"minor", 0}}},
              {"version", "0.1.0"}};
}

inline std::optional<tessera::PluginInfo> find_plugin(const std::string& name_or_manifest) {
  for (auto& p : tessera::plugins())
    if (p.name == name_or_manifest || p.manifest == name_or_manifest) return p;
  return std::nullopt;
}

// True when the shared library at `path` is mapped in this process (does not load it).
inline bool library_is_loaded(const std::string& path) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (!h) return false;
  dlclose(h);
  return true;
}

// The JSON document in the file `path` (a profiler trace); a discarded value when it is missing or
// does not parse.
inline json read_json_file(const std::string& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return json::parse(text, nullptr, false);
}

// Calls `int symbol(void)` exported by a loaded library.
inline int call_plugin_counter(const std::string& library, const char* symbol) {
  void* h = dlopen(library.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (!h) return -1;
  auto fn = reinterpret_cast<int (*)()>(dlsym(h, symbol));
  int v = fn ? fn() : -2;
  dlclose(h);
  return v;
}

}  // namespace lt
