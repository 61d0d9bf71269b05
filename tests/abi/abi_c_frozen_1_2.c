/* The frozen 1.2 plugin ABI header compiles as strict C11 (see abi_c_body.h). */
#include "tessera/abi/1.2/plugin_abi.h"

#include "abi_c_body.h"
