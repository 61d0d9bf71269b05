/* The layout of every struct as the live header declares it: the 1.0 fields, then what 1.1, 1.2 and 1.3 added. */
#include "tessera/plugin_abi.h"

#include "abi_layout.h"

const abi_field_layout_t abi_fields_live_1_0[] = {ABI_FIELDS_1_0(ABI_FIELD_ROW)};
const size_t abi_num_fields_live_1_0 = sizeof(abi_fields_live_1_0) / sizeof(abi_fields_live_1_0[0]);
const abi_field_layout_t abi_fields_live_1_1[] = {ABI_FIELDS_1_1(ABI_FIELD_ROW)};
const size_t abi_num_fields_live_1_1 = sizeof(abi_fields_live_1_1) / sizeof(abi_fields_live_1_1[0]);
const abi_field_layout_t abi_fields_live_1_2[] = {ABI_FIELDS_1_2(ABI_FIELD_ROW)};
const size_t abi_num_fields_live_1_2 = sizeof(abi_fields_live_1_2) / sizeof(abi_fields_live_1_2[0]);
const abi_field_layout_t abi_fields_live_1_3[] = {ABI_FIELDS_1_3(ABI_FIELD_ROW)};
const size_t abi_num_fields_live_1_3 = sizeof(abi_fields_live_1_3) / sizeof(abi_fields_live_1_3[0]);
const abi_constant_t abi_constants_live_1_2[] = {ABI_CONSTANTS_1_2(ABI_CONSTANT_ROW)};
const size_t abi_num_constants_live_1_2 = sizeof(abi_constants_live_1_2) / sizeof(abi_constants_live_1_2[0]);
const abi_field_layout_t abi_fields_live_1_3_spans[] = {ABI_FIELDS_1_3_SPANS(ABI_FIELD_ROW)};
const size_t abi_num_fields_live_1_3_spans = sizeof(abi_fields_live_1_3_spans) / sizeof(abi_fields_live_1_3_spans[0]);
const abi_struct_layout_t abi_structs_live[] = {ABI_STRUCTS_1_0(ABI_STRUCT_ROW) ABI_STRUCTS_1_1(ABI_STRUCT_ROW)
                                                    ABI_STRUCTS_1_2(ABI_STRUCT_ROW)
                                                        ABI_STRUCTS_1_3_SPANS(ABI_STRUCT_ROW)};
const size_t abi_num_structs_live = sizeof(abi_structs_live) / sizeof(abi_structs_live[0]);
const abi_constant_t abi_constants_live_1_0[] = {ABI_CONSTANTS_1_0(ABI_CONSTANT_ROW)};
const size_t abi_num_constants_live_1_0 = sizeof(abi_constants_live_1_0) / sizeof(abi_constants_live_1_0[0]);
const unsigned abi_live_major = TESSERA_ABI_MAJOR, abi_live_minor = TESSERA_ABI_MINOR;
const char abi_entry_name_live[] = TESSERA_PLUGIN_ENTRY_NAME;
