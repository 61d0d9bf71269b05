// What the loader checks before it loads a plugin's library: the ABI major version, that the
// library and its required libraries are trusted files (Note [Trusted plugin files]), the CPU
// features and the libraries the manifest requires.
#include <fnmatch.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "plugin_registry.h"
#include "tessera/cpu_features.h"
#include "tessera/env.h"

namespace fs = std::filesystem;

namespace tessera::loader {
namespace {

// The folders the dynamic loader searches, in its order: LD_LIBRARY_PATH (ignored in setuid
// processes, as ld.so does), the folders of /etc/ld.so.conf and the files it includes, then the
// default system folders.
std::vector<std::string> library_search_path() {
  std::vector<std::string> dirs;
  if (const char* env = secure_env("LD_LIBRARY_PATH"))
    for (const auto& d : split_list(env, ':')) dirs.push_back(d);
  std::vector<std::string> conf_files = {"/etc/ld.so.conf"};
  for (size_t i = 0; i < conf_files.size() && i < 64; ++i) {
    std::ifstream in(conf_files[i]);
    std::string line;
    while (std::getline(in, line)) {
      line = line.substr(0, line.find('#'));
      std::vector<std::string> words = split_list(line, ' ');
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

}  // namespace

std::vector<std::string> split_list(const std::string& text, char sep) {
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


// Note [Trusted plugin files]
// A manifest, a plugin library and each of its `requires.libraries` is checked where it really
// lives: symlinks are resolved first (a link in a safe folder to a file in a world-writable one
// is refused), then the file and every folder above it up to "/" must be owned by root or by the
// current user and not be writable by others. A world-writable folder with the sticky bit (like
// /tmp) is accepted, as ld.so and the Vulkan loader do: others may add files there but not
// replace or rename ours, and a file they add is refused as not ours.
// Returns the reason `file` is not trusted, or "".
std::string untrusted_file_reason(const std::string& file_name, const char* what) {
  const fs::path file(file_name);
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


// Checks everything that can be checked without loading the library.
void check_requirements(PluginRecord& r) {
  const Manifest& m = r.manifest;
  if (m.abi_major != TESSERA_ABI_MAJOR) {
    set_failed(r, "incompatible ABI major version (plugin: " + std::to_string(m.abi_major) +
                      ", runtime: " + std::to_string(TESSERA_ABI_MAJOR) + "); rebuild the plugin against Tessera SDK " +
                      std::to_string(TESSERA_ABI_MAJOR) + ".x");
    return;
  }
  // Note [ABI range]
  // A plugin built against ABI 1.m works with runtimes of 1.m and newer (every newer minor only
  // appends). It may declare in its manifest that it also works with older ones, down to
  // abi.min_host_minor: it then reads host_abi_minor in tessera_plugin_init and uses a slot newer than
  // the runtime's only when the runtime has it (TESSERA_ABI_HAS_FIELD). Outside that range the
  // plugin is refused before its library is opened, with the side to upgrade; after init, a library
  // whose header says a newer minor than its manifest is refused too (the manifest would understate
  // what the library needs: they come from different builds).
  const int oldest = m.min_host_minor >= 0 ? m.min_host_minor : m.abi_minor;
  if (oldest > TESSERA_ABI_MINOR) {
    set_failed(r, "needs a runtime of plugin ABI " + std::to_string(TESSERA_ABI_MAJOR) + "." + std::to_string(oldest) +
                      " or newer (built against " + std::to_string(m.abi_major) + "." + std::to_string(m.abi_minor) +
                      "), this runtime has " + std::to_string(TESSERA_ABI_MAJOR) + "." + std::to_string(TESSERA_ABI_MINOR) +
                      ": upgrade Tessera, or use a build of the plugin that declares \"min_host_minor\": " +
                      std::to_string(TESSERA_ABI_MINOR) + " in its manifest's abi (Note [ABI range])");
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
  static const sdk::CpuFeatures cpu = sdk::CpuFeatures::detect();  // Note [CPU feature probe]
  for (const auto& f : m.cpu_features)
    if (!cpu.has(f)) missing_features.push_back(f);
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

}  // namespace tessera::loader
