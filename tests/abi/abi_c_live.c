/* The live plugin ABI header compiles as strict C11 (see abi_c_body.h). */
#include "tessera/plugin_abi.h"

#include "abi_c_body.h"
