// Fuzz target: device-name parsing and privateuse renaming. Property: never crashes; fails only
// with tessera::Error; a name that parses prints back to a name that parses to the same device.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "tessera/device.h"
#include "tessera/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  int slot = 1 + data[0] % 3;
  std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    tessera::Device d(text);
    tessera::Device again(d.str());
    if (again != d) std::abort();
  } catch (const tessera::Error&) {
  }
  try {
    tessera::rename_privateuse_backend(slot, text);
    tessera::Device d(text);  // a successful rename makes the name parse
    if (int(d.type()) != int(tessera::DeviceType::PrivateUse1) + slot - 1) std::abort();
  } catch (const tessera::Error&) {
  }
  tessera::reset_privateuse_names_for_testing();
  return 0;
}
