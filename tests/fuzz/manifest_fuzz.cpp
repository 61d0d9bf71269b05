// Fuzz target: the plugin-manifest parser and validator. Property: any bytes give either a manifest
// whose file names hold no NUL byte, or a one-line error naming the file with every control
// character and non-UTF-8 byte escaped; never a crash, an exception or a multi-line message.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "manifest.h"
#include "tessera/text_escape.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  const std::string path = "/fuzz/plugins/x.json";
  tessera::loader::Manifest manifest;
  std::string error, hint;
  bool ok = tessera::loader::parse_manifest(path, text, &manifest, &error, &hint);
  if (ok) {
    if (manifest.name.empty() || manifest.library.empty()) std::abort();
    if (manifest.library.find('\0') != std::string::npos) std::abort();
    for (const auto& lib : manifest.libraries)
      if (lib.find('\0') != std::string::npos) std::abort();
  } else {
    if (error.empty() || error.find('\n') != std::string::npos) std::abort();
    if (error.rfind(path, 0) != 0) std::abort();
    if (tessera::printable_text(error) != error) std::abort();  // reaches terminals and JSON as it is
  }
  return 0;
}
