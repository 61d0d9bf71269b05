/* The layout of every struct as the frozen 1.2 header declares it (1.0, 1.1 and 1.2 fields). */
#include "tessera/abi/1.2/plugin_abi.h"

#include "abi_layout.h"

#if TESSERA_ABI_MAJOR != 1 || TESSERA_ABI_MINOR != 2
#error "tessera/abi/1.2/plugin_abi.h must declare ABI 1.2"
#endif

const abi_field_layout_t abi_fields_frozen_1_2[] = {ABI_FIELDS_1_0(ABI_FIELD_ROW) ABI_FIELDS_1_1(ABI_FIELD_ROW)
                                                        ABI_FIELDS_1_2(ABI_FIELD_ROW)};
const size_t abi_num_fields_frozen_1_2 = sizeof(abi_fields_frozen_1_2) / sizeof(abi_fields_frozen_1_2[0]);
const abi_struct_layout_t abi_structs_frozen_1_2[] = {ABI_STRUCTS_1_0(ABI_STRUCT_ROW) ABI_STRUCTS_1_1(ABI_STRUCT_ROW)
                                                          ABI_STRUCTS_1_2(ABI_STRUCT_ROW)};
const size_t abi_num_structs_frozen_1_2 = sizeof(abi_structs_frozen_1_2) / sizeof(abi_structs_frozen_1_2[0]);
