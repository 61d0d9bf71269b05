// The ABI promise as data: every field of every struct of the frozen 1.0 header at the offset and
// with the size written down here (a snapshot: a changed 1.0 field fails it), and the live header's
// 1.0 prefix laid out exactly like the frozen header. What 1.1 and 1.2 appended sits after the 1.0 end,
// the frozen 1.2 header is the live header's 1.2 prefix, and what 1.3 appended sits after the 1.2 end.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <utility>

#include "abi_layout.h"

extern "C" {
extern const abi_field_layout_t abi_fields_frozen_1_0[];
extern const size_t abi_num_fields_frozen_1_0;
extern const abi_struct_layout_t abi_structs_frozen_1_0[];
extern const size_t abi_num_structs_frozen_1_0;
extern const abi_constant_t abi_constants_frozen_1_0[];
extern const size_t abi_num_constants_frozen_1_0;
extern const char abi_entry_name_frozen_1_0[];

extern const abi_field_layout_t abi_fields_live_1_0[];
extern const size_t abi_num_fields_live_1_0;
extern const abi_field_layout_t abi_fields_live_1_1[];
extern const size_t abi_num_fields_live_1_1;
extern const abi_field_layout_t abi_fields_live_1_2[];
extern const size_t abi_num_fields_live_1_2;
extern const abi_field_layout_t abi_fields_live_1_3_spans[];
extern const size_t abi_num_fields_live_1_3_spans;
extern const abi_field_layout_t abi_fields_live_1_3[];
extern const size_t abi_num_fields_live_1_3;
extern const abi_field_layout_t abi_fields_frozen_1_2[];
extern const size_t abi_num_fields_frozen_1_2;
extern const abi_struct_layout_t abi_structs_frozen_1_2[];
extern const size_t abi_num_structs_frozen_1_2;
extern const abi_constant_t abi_constants_live_1_2[];
extern const size_t abi_num_constants_live_1_2;
extern const abi_struct_layout_t abi_structs_live[];
extern const size_t abi_num_structs_live;
extern const abi_constant_t abi_constants_live_1_0[];
extern const size_t abi_num_constants_live_1_0;
extern const unsigned abi_live_major, abi_live_minor;
extern const char abi_entry_name_live[];
}

namespace {

using Key = std::pair<std::string, std::string>;
using Layout = std::pair<size_t, size_t>;  // offset, size

std::map<Key, Layout> fields_of(const abi_field_layout_t* rows, size_t n) {
  std::map<Key, Layout> m;
  for (size_t i = 0; i < n; ++i) m[{rows[i].type, rows[i].field}] = {rows[i].offset, rows[i].size};
  return m;
}
std::map<std::string, size_t> structs_of(const abi_struct_layout_t* rows, size_t n) {
  std::map<std::string, size_t> m;
  for (size_t i = 0; i < n; ++i) m[rows[i].type] = rows[i].size;
  return m;
}
std::map<std::string, long long> constants_of(const abi_constant_t* rows, size_t n) {
  std::map<std::string, long long> m;
  for (size_t i = 0; i < n; ++i) m[rows[i].name] = rows[i].value;
  return m;
}

// ABI 1.0 on LP64 (x86-64, AArch64), written from the 1.0 header: {struct, field} -> {offset, size}.
const std::map<Key, Layout> kSnapshot_1_0 = {
    {{"tessera_tensor_t", "struct_size"}, {0, 4}},
    {{"tessera_tensor_t", "dtype"}, {4, 4}},
    {{"tessera_tensor_t", "device_type"}, {8, 4}},
    {{"tessera_tensor_t", "device_index"}, {12, 4}},
    {{"tessera_tensor_t", "ndim"}, {16, 4}},
    {{"tessera_tensor_t", "reserved_"}, {20, 4}},
    {{"tessera_tensor_t", "sizes"}, {24, 8}},
    {{"tessera_tensor_t", "strides"}, {32, 8}},
    {{"tessera_tensor_t", "numel"}, {40, 8}},
    {{"tessera_tensor_t", "data"}, {48, 8}},
    {{"tessera_tensor_t", "byte_offset"}, {56, 8}},
    {{"tessera_value_t", "kind"}, {0, 4}},
    {{"tessera_value_t", "count"}, {4, 4}},
    {{"tessera_value_t", "u"}, {8, 8}},
    {{"tessera_value_t", "u.i"}, {8, 8}},
    {{"tessera_value_t", "u.d"}, {8, 8}},
    {{"tessera_value_t", "u.b"}, {8, 4}},
    {{"tessera_value_t", "u.ints"}, {8, 8}},
    {{"tessera_value_t", "u.s"}, {8, 8}},
    {{"tessera_kernel_call_t", "struct_size"}, {0, 4}},
    {{"tessera_kernel_call_t", "num_inputs"}, {4, 4}},
    {{"tessera_kernel_call_t", "num_outputs"}, {8, 4}},
    {{"tessera_kernel_call_t", "num_attrs"}, {12, 4}},
    {{"tessera_kernel_call_t", "inputs"}, {16, 8}},
    {{"tessera_kernel_call_t", "outputs"}, {24, 8}},
    {{"tessera_kernel_call_t", "attrs"}, {32, 8}},
    {{"tessera_kernel_call_t", "op_name"}, {40, 8}},
    {{"tessera_kernel_call_t", "stream"}, {48, 8}},
    {{"tessera_kernel_call_t", "device_index"}, {56, 4}},
    {{"tessera_kernel_call_t", "reserved_"}, {60, 4}},
    {{"tessera_host_api_t", "struct_size"}, {0, 4}},
    {{"tessera_host_api_t", "abi_major"}, {4, 4}},
    {{"tessera_host_api_t", "abi_minor"}, {8, 4}},
    {{"tessera_host_api_t", "reserved_"}, {12, 4}},
    {{"tessera_host_api_t", "host_ctx"}, {16, 8}},
    {{"tessera_host_api_t", "status_make"}, {24, 8}},
    {{"tessera_host_api_t", "status_free"}, {32, 8}},
    {{"tessera_host_api_t", "status_code"}, {40, 8}},
    {{"tessera_host_api_t", "status_message"}, {48, 8}},
    {{"tessera_host_api_t", "log"}, {56, 8}},
    {{"tessera_host_api_t", "getenv"}, {64, 8}},
    {{"tessera_host_api_t", "op_define"}, {72, 8}},
    {{"tessera_host_api_t", "kernel_register"}, {80, 8}},
    {{"tessera_host_api_t", "fallback_register"}, {88, 8}},
    {{"tessera_host_api_t", "op_forbid_fallback"}, {96, 8}},
    {{"tessera_device_interface_t", "struct_size"}, {0, 4}},
    {{"tessera_device_interface_t", "reserved_"}, {4, 4}},
    {{"tessera_device_interface_t", "device_count"}, {8, 8}},
    {{"tessera_device_interface_t", "device_get_current"}, {16, 8}},
    {{"tessera_device_interface_t", "device_set_current"}, {24, 8}},
    {{"tessera_device_interface_t", "memory_allocate"}, {32, 8}},
    {{"tessera_device_interface_t", "memory_free"}, {40, 8}},
    {{"tessera_device_interface_t", "memory_copy_from_host"}, {48, 8}},
    {{"tessera_device_interface_t", "memory_copy_to_host"}, {56, 8}},
    {{"tessera_device_interface_t", "memory_copy_device"}, {64, 8}},
    {{"tessera_device_interface_t", "stream_create"}, {72, 8}},
    {{"tessera_device_interface_t", "stream_destroy"}, {80, 8}},
    {{"tessera_device_interface_t", "stream_synchronize"}, {88, 8}},
    {{"tessera_device_interface_t", "event_create"}, {96, 8}},
    {{"tessera_device_interface_t", "event_destroy"}, {104, 8}},
    {{"tessera_device_interface_t", "event_record"}, {112, 8}},
    {{"tessera_device_interface_t", "event_wait"}, {120, 8}},
    {{"tessera_device_interface_t", "event_synchronize"}, {128, 8}},
    {{"tessera_device_interface_t", "device_synchronize"}, {136, 8}},
    {{"tessera_device_interface_t", "device_properties"}, {144, 8}},
    {{"tessera_plugin_t", "struct_size"}, {0, 4}},
    {{"tessera_plugin_t", "abi_major"}, {4, 4}},
    {{"tessera_plugin_t", "abi_minor"}, {8, 4}},
    {{"tessera_plugin_t", "reserved_"}, {12, 4}},
    {{"tessera_plugin_t", "name"}, {16, 8}},
    {{"tessera_plugin_t", "version"}, {24, 8}},
    {{"tessera_plugin_t", "features"}, {32, 8}},
    {{"tessera_plugin_t", "self"}, {40, 8}},
    {{"tessera_plugin_t", "device"}, {48, 8}},
    {{"tessera_plugin_t", "shutdown"}, {56, 8}},
};

const std::map<std::string, size_t> kStructSnapshot_1_0 = {
    {"tessera_tensor_t", 64},   {"tessera_value_t", 16},             {"tessera_kernel_call_t", 64},
    {"tessera_host_api_t", 104}, {"tessera_device_interface_t", 152}, {"tessera_plugin_t", 64},
};

// What ABI 1.1 appended, and the sizes of the 1.1 structs.
const std::map<Key, Layout> kSnapshot_1_1 = {
    {{"tessera_device_interface_t", "memory_stats"}, {152, 8}},
    {{"tessera_plugin_t", "get_proc_address"}, {64, 8}},
    {{"tessera_memory_stats_t", "struct_size"}, {0, 4}},
    {{"tessera_memory_stats_t", "reserved_"}, {4, 4}},
    {{"tessera_memory_stats_t", "allocated_bytes"}, {8, 8}},
    {{"tessera_memory_stats_t", "reserved_bytes"}, {16, 8}},
    {{"tessera_memory_stats_t", "peak_allocated_bytes"}, {24, 8}},
    {{"tessera_memory_stats_t", "num_allocations"}, {32, 8}},
};
const std::map<std::string, size_t> kStructSnapshot_1_1 = {
    {"tessera_tensor_t", 64},    {"tessera_value_t", 16},             {"tessera_kernel_call_t", 64},
    {"tessera_host_api_t", 104}, {"tessera_device_interface_t", 160}, {"tessera_plugin_t", 72},
    {"tessera_memory_stats_t", 40},
};

// What ABI 1.2 appended (the storage version of a tensor, event times and record_stream for
// streams, the graph ABI of Note [Graph ABI]), and the sizes of the 1.2 structs.
const std::map<Key, Layout> kSnapshot_1_2 = {
    {{"tessera_tensor_t", "version"}, {64, 8}},
    {{"tessera_device_interface_t", "event_elapsed_time"}, {160, 8}},
    {{"tessera_device_interface_t", "memory_record_stream"}, {168, 8}},
    {{"tessera_host_api_t", "graph"}, {104, 8}},
    {{"tessera_graph_size_t", "struct_size"}, {0, 4}},
    {{"tessera_graph_size_t", "is_symbolic"}, {4, 4}},
    {{"tessera_graph_size_t", "value"}, {8, 8}},
    {{"tessera_graph_size_t", "expr"}, {16, 8}},
    {{"tessera_graph_size_t", "min"}, {24, 8}},
    {{"tessera_graph_size_t", "max"}, {32, 8}},
    {{"tessera_graph_arg_t", "kind"}, {0, 4}},
    {{"tessera_graph_arg_t", "num_values"}, {4, 4}},
    {{"tessera_graph_arg_t", "values"}, {8, 8}},
    {{"tessera_graph_arg_t", "constant"}, {16, 16}},
    {{"tessera_graph_type_t", "dtype"}, {0, 4}},
    {{"tessera_graph_type_t", "rank"}, {4, 4}},
    {{"tessera_graph_type_t", "device"}, {8, 8}},
    {{"tessera_graph_type_t", "sizes"}, {16, 8}},
    {{"tessera_graph_api_t", "struct_size"}, {0, 4}},
    {{"tessera_graph_api_t", "reserved_"}, {4, 4}},
    {{"tessera_graph_api_t", "node_count"}, {8, 8}},
    {{"tessera_graph_api_t", "node_kind"}, {16, 8}},
    {{"tessera_graph_api_t", "node_target"}, {24, 8}},
    {{"tessera_graph_api_t", "node_num_args"}, {32, 8}},
    {{"tessera_graph_api_t", "node_arg_kind"}, {40, 8}},
    {{"tessera_graph_api_t", "node_arg_num_values"}, {48, 8}},
    {{"tessera_graph_api_t", "node_arg_value"}, {56, 8}},
    {{"tessera_graph_api_t", "node_arg_constant"}, {64, 8}},
    {{"tessera_graph_api_t", "node_num_outputs"}, {72, 8}},
    {{"tessera_graph_api_t", "node_output"}, {80, 8}},
    {{"tessera_graph_api_t", "value_count"}, {88, 8}},
    {{"tessera_graph_api_t", "value_name"}, {96, 8}},
    {{"tessera_graph_api_t", "value_dtype"}, {104, 8}},
    {{"tessera_graph_api_t", "value_device"}, {112, 8}},
    {{"tessera_graph_api_t", "value_rank"}, {120, 8}},
    {{"tessera_graph_api_t", "value_size"}, {128, 8}},
    {{"tessera_graph_api_t", "input_count"}, {136, 8}},
    {{"tessera_graph_api_t", "input"}, {144, 8}},
    {{"tessera_graph_api_t", "output_count"}, {152, 8}},
    {{"tessera_graph_api_t", "output"}, {160, 8}},
    {{"tessera_graph_api_t", "symbol_count"}, {168, 8}},
    {{"tessera_graph_api_t", "symbol"}, {176, 8}},
    {{"tessera_graph_api_t", "add_call"}, {184, 8}},
    {{"tessera_graph_api_t", "replace_uses"}, {192, 8}},
    {{"tessera_graph_api_t", "erase_node"}, {200, 8}},
};
const std::map<std::string, size_t> kStructSnapshot_1_2 = {
    {"tessera_tensor_t", 72},          {"tessera_value_t", 16},    {"tessera_kernel_call_t", 64},
    {"tessera_host_api_t", 112},       {"tessera_device_interface_t", 176},
    {"tessera_plugin_t", 72},          {"tessera_memory_stats_t", 40},
    {"tessera_graph_size_t", 40},      {"tessera_graph_arg_t", 32},
    {"tessera_graph_type_t", 24},      {"tessera_graph_api_t", 208},
};
// What ABI 1.3 appended for device spans in the profiler (Note [Plugin spans]), and the structs it
// grew or added.
const std::map<Key, Layout> kSnapshot_1_3_spans = {
    {{"tessera_host_api_t", "profiler_enabled"}, {112, 8}},
    {{"tessera_host_api_t", "profiler_clock_ns"}, {120, 8}},
    {{"tessera_host_api_t", "profiler_correlation_id"}, {128, 8}},
    {{"tessera_host_api_t", "profiler_record_span"}, {136, 8}},
    {{"tessera_profiler_span_t", "struct_size"}, {0, 4}},
    {{"tessera_profiler_span_t", "device"}, {4, 4}},
    {{"tessera_profiler_span_t", "name"}, {8, 8}},
    {{"tessera_profiler_span_t", "category"}, {16, 8}},
    {{"tessera_profiler_span_t", "stream"}, {24, 8}},
    {{"tessera_profiler_span_t", "start_ns"}, {32, 8}},
    {{"tessera_profiler_span_t", "end_ns"}, {40, 8}},
    {{"tessera_profiler_span_t", "correlation_id"}, {48, 8}},
    {{"tessera_profiler_span_t", "args_json"}, {56, 8}},
};

// What ABI 1.3 appended (memory info, pinned host memory, the host's generator), and the sizes of
// the 1.3 structs.
const std::map<Key, Layout> kSnapshot_1_3 = {
    {{"tessera_host_api_t", "generator_reserve"}, {144, 8}},  // after the spans' four slots
    {{"tessera_device_interface_t", "memory_info"}, {176, 8}},
    {{"tessera_device_interface_t", "pinned_allocate"}, {184, 8}},
    {{"tessera_device_interface_t", "pinned_free"}, {192, 8}},
    {{"tessera_device_interface_t", "memory_copy_from_pinned"}, {200, 8}},
};
const std::map<std::string, size_t> kStructSnapshot_1_3 = {
    {"tessera_tensor_t", 72},
    {"tessera_value_t", 16},
    {"tessera_kernel_call_t", 64},
    {"tessera_host_api_t", 152},
    {"tessera_device_interface_t", 208},
    {"tessera_plugin_t", 72},
    {"tessera_memory_stats_t", 40},
    {"tessera_graph_size_t", 40},
    {"tessera_graph_arg_t", 32},
    {"tessera_graph_type_t", 24},
    {"tessera_graph_api_t", 208},
    {"tessera_profiler_span_t", 64},
};
const std::map<std::string, long long> kConstantSnapshot_1_2 = {
    {"TESSERA_NODE_PLACEHOLDER", 0},
    {"TESSERA_NODE_CALL", 1},
    {"TESSERA_NODE_OUTPUT", 2},
    {"TESSERA_ARG_TENSOR", 0},
    {"TESSERA_ARG_TENSOR_LIST", 1},
    {"TESSERA_ARG_NONE", 2},
    {"TESSERA_ARG_CONSTANT", 3},
    {"TESSERA_INPUT_USER", 0},
    {"TESSERA_INPUT_PARAMETER", 1},
    {"TESSERA_INPUT_CONSTANT", 2},
    {"TESSERA_DTYPE_QINT8", 10},
    {"TESSERA_DTYPE_QUINT8", 11},
    {"TESSERA_DTYPE_QINT32", 12},
};

const std::map<std::string, long long> kConstantSnapshot_1_0 = {
    {"TESSERA_ABI_MAJOR", 1},
    {"TESSERA_STATUS_OK", 0},
    {"TESSERA_STATUS_INVALID_ARGUMENT", 1},
    {"TESSERA_STATUS_OUT_OF_MEMORY", 2},
    {"TESSERA_STATUS_UNIMPLEMENTED", 3},
    {"TESSERA_STATUS_UNAVAILABLE", 4},
    {"TESSERA_STATUS_INTERNAL", 5},
    {"TESSERA_STATUS_ABI_MISMATCH", 6},
    {"TESSERA_DTYPE_BOOL", 0},
    {"TESSERA_DTYPE_UINT8", 1},
    {"TESSERA_DTYPE_INT8", 2},
    {"TESSERA_DTYPE_INT16", 3},
    {"TESSERA_DTYPE_INT32", 4},
    {"TESSERA_DTYPE_INT64", 5},
    {"TESSERA_DTYPE_FLOAT16", 6},
    {"TESSERA_DTYPE_BFLOAT16", 7},
    {"TESSERA_DTYPE_FLOAT32", 8},
    {"TESSERA_DTYPE_FLOAT64", 9},
    {"TESSERA_DTYPE_COUNT_", 10},
    {"TESSERA_DTYPE_MASK_FLOATING", 0x3c0},
    {"TESSERA_DTYPE_MASK_INTEGRAL", 0x3e},
    {"TESSERA_DTYPE_MASK_ALL", 0x3ff},
    {"TESSERA_DEVICE_CPU", 0},
    {"TESSERA_DEVICE_CUDA", 1},
    {"TESSERA_DEVICE_OPENCL", 2},
    {"TESSERA_DEVICE_META", 3},
    {"TESSERA_DEVICE_PRIVATEUSE1", 4},
    {"TESSERA_DEVICE_PRIVATEUSE2", 5},
    {"TESSERA_DEVICE_PRIVATEUSE3", 6},
    {"TESSERA_FUNCTIONALITY_DENSE", 0},
    {"TESSERA_FUNCTIONALITY_QUANTIZED", 1},
    {"TESSERA_FUNCTIONALITY_SPARSE", 2},
    {"TESSERA_LOG_DEBUG", 0},
    {"TESSERA_LOG_INFO", 1},
    {"TESSERA_LOG_WARNING", 2},
    {"TESSERA_LOG_ERROR", 3},
    {"TESSERA_VALUE_NONE", 0},
    {"TESSERA_VALUE_INT", 1},
    {"TESSERA_VALUE_DOUBLE", 2},
    {"TESSERA_VALUE_BOOL", 3},
    {"TESSERA_VALUE_INT_LIST", 4},
    {"TESSERA_VALUE_STRING", 5},
    {"TESSERA_VALUE_DTYPE", 6},
    {"TESSERA_KERNEL_FLAG_NONE", 0},
    {"TESSERA_KERNEL_FLAG_NO_FALLBACK", 1},
    {"TESSERA_PLUGIN_FEATURE_STREAMS", 1},
    {"TESSERA_PLUGIN_FEATURE_EVENTS", 2},
    {"TESSERA_PLUGIN_FEATURE_ASYNC", 4},
};

#if !defined(__LP64__)
#error "the ABI layout snapshot is written for LP64 targets; add one for this data model"
#endif

TEST(AbiLayout, Frozen_1_0_MatchesTheSnapshot) {
  const auto frozen = fields_of(abi_fields_frozen_1_0, abi_num_fields_frozen_1_0);
  EXPECT_EQ(frozen.size(), kSnapshot_1_0.size()) << "the 1.0 field list and the snapshot differ in length";
  for (const auto& [key, expected] : kSnapshot_1_0) {
    auto it = frozen.find(key);
    ASSERT_NE(it, frozen.end()) << key.first << "::" << key.second << " is not in the frozen 1.0 header";
    EXPECT_EQ(it->second.first, expected.first) << "offsetof(" << key.first << ", " << key.second << ")";
    EXPECT_EQ(it->second.second, expected.second) << "sizeof(" << key.first << "::" << key.second << ")";
  }
  EXPECT_EQ(structs_of(abi_structs_frozen_1_0, abi_num_structs_frozen_1_0), kStructSnapshot_1_0);
  EXPECT_EQ(constants_of(abi_constants_frozen_1_0, abi_num_constants_frozen_1_0), kConstantSnapshot_1_0);
  EXPECT_STREQ(abi_entry_name_frozen_1_0, "tessera_plugin_init");
}

TEST(AbiLayout, LiveHeaderKeepsThe_1_0_Prefix) {
  const auto frozen = fields_of(abi_fields_frozen_1_0, abi_num_fields_frozen_1_0);
  const auto live = fields_of(abi_fields_live_1_0, abi_num_fields_live_1_0);
  ASSERT_EQ(live.size(), frozen.size());
  for (const auto& [key, layout] : frozen) {
    auto it = live.find(key);
    ASSERT_NE(it, live.end()) << key.first << "::" << key.second << " was removed from the live header";
    EXPECT_EQ(it->second, layout) << key.first << "::" << key.second << " moved or changed size since 1.0";
  }
  EXPECT_EQ(constants_of(abi_constants_live_1_0, abi_num_constants_live_1_0),
            constants_of(abi_constants_frozen_1_0, abi_num_constants_frozen_1_0));
  EXPECT_STREQ(abi_entry_name_live, abi_entry_name_frozen_1_0);
}

TEST(AbiLayout, Frozen_1_2_IsThePrefixOfTheLiveHeader) {
  // The frozen 1.2 header against the 1.2 snapshot...
  EXPECT_EQ(structs_of(abi_structs_frozen_1_2, abi_num_structs_frozen_1_2), kStructSnapshot_1_2);
  // ... and every one of its fields where the live header has it.
  const auto frozen = fields_of(abi_fields_frozen_1_2, abi_num_fields_frozen_1_2);
  std::map<Key, Layout> live = fields_of(abi_fields_live_1_0, abi_num_fields_live_1_0);
  live.merge(fields_of(abi_fields_live_1_1, abi_num_fields_live_1_1));
  live.merge(fields_of(abi_fields_live_1_2, abi_num_fields_live_1_2));
  EXPECT_EQ(frozen, live);
}

TEST(AbiLayout, LiveHeaderIs_1_3_AndOnlyAppends) {
  EXPECT_EQ(abi_live_major, 1u);
  EXPECT_EQ(abi_live_minor, 3u);
  const auto live_structs = structs_of(abi_structs_live, abi_num_structs_live);
  EXPECT_EQ(live_structs, kStructSnapshot_1_3);
  const auto added_1_3 = fields_of(abi_fields_live_1_3, abi_num_fields_live_1_3);
  EXPECT_EQ(added_1_3, kSnapshot_1_3);
  const auto spans_1_3 = fields_of(abi_fields_live_1_3_spans, abi_num_fields_live_1_3_spans);
  EXPECT_EQ(spans_1_3, kSnapshot_1_3_spans);
  for (const auto* added : {&added_1_3, &spans_1_3})
    for (const auto& [key, layout] : *added) {
      if (kStructSnapshot_1_2.count(key.first)) {
        EXPECT_GE(layout.first, kStructSnapshot_1_2.at(key.first))
            << key.first << "::" << key.second << " is not appended after the 1.2 end of the struct";
      }
    }
  const auto frozen_structs = structs_of(abi_structs_frozen_1_0, abi_num_structs_frozen_1_0);
  // tessera_value_t is an array element (tessera_kernel_call_t::attrs): it never grows in a major.
  EXPECT_EQ(live_structs.at("tessera_value_t"), frozen_structs.at("tessera_value_t"));
  const auto added_1_1 = fields_of(abi_fields_live_1_1, abi_num_fields_live_1_1);
  EXPECT_EQ(added_1_1, kSnapshot_1_1);
  for (const auto& [key, layout] : added_1_1) {
    auto old = frozen_structs.find(key.first);
    if (old == frozen_structs.end()) continue;  // a struct new in 1.1
    EXPECT_GE(layout.first, old->second) << key.first << "::" << key.second
                                         << " is not appended after the 1.0 end of the struct";
  }
  const auto added_1_2 = fields_of(abi_fields_live_1_2, abi_num_fields_live_1_2);
  EXPECT_EQ(added_1_2, kSnapshot_1_2);
  for (const auto& [key, layout] : added_1_2) {
    auto old = kStructSnapshot_1_1.find(key.first);
    if (old == kStructSnapshot_1_1.end()) continue;  // a struct new in 1.2
    EXPECT_GE(layout.first, old->second) << key.first << "::" << key.second
                                         << " is not appended after the 1.1 end of the struct";
  }
  EXPECT_EQ(constants_of(abi_constants_live_1_2, abi_num_constants_live_1_2), kConstantSnapshot_1_2);
}

TEST(AbiLayout, ProfilerSpanSlotsAreAppendedAfterThe_1_2_End) {
  const auto added = fields_of(abi_fields_live_1_3_spans, abi_num_fields_live_1_3_spans);
  EXPECT_EQ(added, kSnapshot_1_3_spans);
  for (const auto& [key, layout] : added) {
    auto old = kStructSnapshot_1_2.find(key.first);
    if (old == kStructSnapshot_1_2.end()) continue;  // a struct new in 1.3
    EXPECT_GE(layout.first, old->second) << key.first << "::" << key.second
                                         << " is not appended after the 1.2 end of the struct";
  }
}

}  // namespace
