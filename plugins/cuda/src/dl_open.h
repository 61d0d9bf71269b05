// dlopen helpers shared by the loaders of the NVIDIA libraries the plugin opens at first use
// (cuBLASLt: Note [Loading cuBLASLt]; cuDNN: Note [Loading cuDNN]).
#pragma once
#include <dlfcn.h>

#include <string>
#include <vector>

namespace tessera::cuda {

// The first of `candidates` that dlopen accepts (its name in *path), or nullptr with every place
// tried and why in *tried.
inline void* dlopen_first(const std::vector<std::string>& candidates, std::string* path, std::string* tried) {
  for (const std::string& c : candidates) {
    if (void* lib = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      *path = c;
      return lib;
    }
    const char* why = dlerror();
    *tried += c + ": " + (why ? why : "not found") + "; ";
  }
  return nullptr;
}

// Looks `name` up in `lib`; a missing symbol is added to *error.
template <typename Fn>
bool resolve_symbol(void* lib, const char* name, Fn* out, std::string* error) {
  *out = reinterpret_cast<Fn>(dlsym(lib, name));
  if (!*out) {
    *error += std::string("symbol ") + name + " missing; ";
    return false;
  }
  return true;
}

}  // namespace tessera::cuda
