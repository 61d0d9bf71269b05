#include "tessera/version.h"

#include "tessera/export.h"

namespace tessera {
TESSERA_API const char* version_string() { return TESSERA_VERSION_STRING; }
}  // namespace tessera
