/* tessera/semi_structured.h compiles as strict C11 and keeps the layout the runtime and the sparse
 * plugin agree on (Note [2:4 canonical form]): 64-bit fields at fixed offsets, a header that fits
 * the 128 bytes the runtime reserves. */
#include <stddef.h>

#include "tessera/semi_structured.h"

_Static_assert(offsetof(tessera_semi_structured_header_t, rows) == 16, "rows at 16");
_Static_assert(offsetof(tessera_semi_structured_header_t, values_offset) == 40, "values_offset at 40");
_Static_assert(offsetof(tessera_semi_structured_header_t, layouts) == 64, "layouts at 64");
_Static_assert(sizeof(tessera_semi_structured_header_t) <= 128, "the header fits 128 bytes");

int main(void) {
  tessera_semi_structured_header_t h = {0};
  h.magic = TESSERA_SEMI_STRUCTURED_MAGIC;
  h.version = TESSERA_SEMI_STRUCTURED_VERSION;
  return h.layouts[TESSERA_SEMI_STRUCTURED_MAX_LAYOUTS - 1] == NULL ? 0 : 1;
}
