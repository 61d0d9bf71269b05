// A 128-bit content hash as 32 hex digits: two 64-bit FNV-1a lanes with different offsets and a
// final mix each. The key of the disk caches of compiled code (the C++ backend's Note [Compile
// cache], the CUDA compiler plugin's kernel cache); not a cryptographic hash: an entry is trusted
// because its folder belongs to the user (both caches check that), not because of this hash.
// Header-only C++ for plugins and the core.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace tessera {

inline std::string content_hash_hex(std::string_view bytes) {
  uint64_t a = 0xcbf29ce484222325ull, b = 0x84222325cbf29ce4ull;
  for (unsigned char c : bytes) {
    a = (a ^ c) * 0x100000001b3ull;
    b = (b ^ c) * 0x100000001b3ull;
    b ^= b >> 29;
  }
  auto mix = [](uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
  };
  char out[33];
  std::snprintf(out, sizeof out, "%016llx%016llx", (unsigned long long)mix(a), (unsigned long long)mix(b));
  return out;
}

}  // namespace tessera
