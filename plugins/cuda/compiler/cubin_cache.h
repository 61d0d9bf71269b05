// The CUDA compiler plugin's disk cache of compiled kernels, by the rules of the C++ backend's
// (Note [Compile cache] in compiler/src/backends/cpp/toolchain.cpp): an entry is <key>.cubin plus
// <key>.meta ("tessera-cuda-cache 1", the key, the image's size and hash); a reader trusts an entry
// only when the meta names the same key and the image has exactly that size and hash, so a
// truncated, corrupt or half-written entry is compiled again; a writer holds flock on <key>.lock,
// writes under private names and renames the image, then the meta (the commit point), into place.
// The folder is $TESSERA_CACHE_DIR/cuda, else $XDG_CACHE_HOME/tessera/cuda, else
// ~/.cache/tessera/cuda, and must belong to the user and not be writable by others (it holds
// machine code this process loads).
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace tessera::cuda_fuser {

// tessera::content_hash_hex (tessera/content_hash.h), the C++ backend's key function too.
std::string hash_hex(const std::string& bytes);

// The cache folder (created owner-only when missing), or nullopt with *error saying why it cannot
// be used and how to fix it.
std::optional<std::string> cache_directory(std::string* error);

struct CacheLookup {
  std::string image;
  bool hit = false;
  std::string error;  // empty on success
};

// The image cached under `key` in `dir`, or the one `make` produces (then stored). `make` returns
// the image, or an empty string with its error in *error.
CacheLookup cached_image(const std::string& dir, const std::string& key,
                         const std::function<std::string(std::string* error)>& make);

}  // namespace tessera::cuda_fuser
