// Fuzz target: the operator-schema parser. Property: parsing never crashes, fails only with
// tessera::Error, and a schema that parses round-trips through str().
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "tessera/error.h"
#include "tessera/schema.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  tessera::FunctionSchema schema;
  try {
    schema = tessera::parse_schema(text);
  } catch (const tessera::Error&) {
    return 0;
  }
  std::string canonical = schema.str();
  tessera::FunctionSchema again = tessera::parse_schema(canonical);  // must not throw
  if (again.str() != canonical) std::abort();
  return 0;
}
