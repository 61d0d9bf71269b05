// Fuzz target: the plugin-manifest parser and validator. Property: any bytes give either a manifest
// or a one-line error naming the file; never a crash, an exception or a multi-line message.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  const std::string path = "/fuzz/plugins/x.json";
  tessera::loader::Manifest manifest;
  std::string error, hint;
  bool ok = tessera::loader::parse_manifest(path, text, &manifest, &error, &hint);
  if (ok) {
    if (manifest.name.empty() || manifest.library.empty()) std::abort();
  } else {
    if (error.empty() || error.find('\n') != std::string::npos) std::abort();
    if (error.rfind(path, 0) != 0) std::abort();
  }
  return 0;
}
