/* The layout of every ABI 1.0 struct as the frozen 1.0 header declares it. */
#include "tessera/abi/1.0/plugin_abi.h"

#include "abi_layout.h"

#if TESSERA_ABI_MAJOR != 1 || TESSERA_ABI_MINOR != 0
#error "tessera/abi/1.0/plugin_abi.h must declare ABI 1.0"
#endif

const abi_field_layout_t abi_fields_frozen_1_0[] = {ABI_FIELDS_1_0(ABI_FIELD_ROW)};
const size_t abi_num_fields_frozen_1_0 = sizeof(abi_fields_frozen_1_0) / sizeof(abi_fields_frozen_1_0[0]);
const abi_struct_layout_t abi_structs_frozen_1_0[] = {ABI_STRUCTS_1_0(ABI_STRUCT_ROW)};
const size_t abi_num_structs_frozen_1_0 = sizeof(abi_structs_frozen_1_0) / sizeof(abi_structs_frozen_1_0[0]);
const abi_constant_t abi_constants_frozen_1_0[] = {ABI_CONSTANTS_1_0(ABI_CONSTANT_ROW)};
const size_t abi_num_constants_frozen_1_0 = sizeof(abi_constants_frozen_1_0) / sizeof(abi_constants_frozen_1_0[0]);
const char abi_entry_name_frozen_1_0[] = TESSERA_PLUGIN_ENTRY_NAME;
