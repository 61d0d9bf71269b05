/* lt_no_entry: a shared library that exports everything but the entry point. */
#include "tessera/plugin_abi.h"

TESSERA_PLUGIN_EXPORT int lt_no_entry_answer(void) { return 42; }
