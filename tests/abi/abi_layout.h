/* The field lists of the plugin ABI structs, in declaration order, as X-macros (plain C). The same
 * list is expanded under the frozen 1.0 header and under the live header (layout_1_0.c,
 * layout_live.c); test_abi_layout.cpp compares both tables with a literal snapshot. */
#ifndef TESSERA_TESTS_ABI_ABI_LAYOUT_H_
#define TESSERA_TESTS_ABI_ABI_LAYOUT_H_

#include <stddef.h>

typedef struct abi_field_layout_t {
  const char* type;
  const char* field;
  size_t offset;
  size_t size;
} abi_field_layout_t;

typedef struct abi_struct_layout_t {
  const char* type;
  size_t size;
} abi_struct_layout_t;

typedef struct abi_constant_t {
  const char* name;
  long long value;
} abi_constant_t;

/* Every struct of ABI 1.0. */
#define ABI_STRUCTS_1_0(S)                                                                           \
  S(tessera_tensor_t) S(tessera_value_t) S(tessera_kernel_call_t) S(tessera_host_api_t)              \
  S(tessera_device_interface_t) S(tessera_plugin_t)

/* Every field of every struct of ABI 1.0. */
#define ABI_FIELDS_1_0(F)                                                                            \
  F(tessera_tensor_t, struct_size) F(tessera_tensor_t, dtype) F(tessera_tensor_t, device_type)       \
  F(tessera_tensor_t, device_index) F(tessera_tensor_t, ndim) F(tessera_tensor_t, reserved_)         \
  F(tessera_tensor_t, sizes) F(tessera_tensor_t, strides) F(tessera_tensor_t, numel)                \
  F(tessera_tensor_t, data) F(tessera_tensor_t, byte_offset)                                         \
  F(tessera_value_t, kind) F(tessera_value_t, count) F(tessera_value_t, u) F(tessera_value_t, u.i)   \
  F(tessera_value_t, u.d) F(tessera_value_t, u.b) F(tessera_value_t, u.ints) F(tessera_value_t, u.s) \
  F(tessera_kernel_call_t, struct_size) F(tessera_kernel_call_t, num_inputs)                         \
  F(tessera_kernel_call_t, num_outputs) F(tessera_kernel_call_t, num_attrs)                          \
  F(tessera_kernel_call_t, inputs) F(tessera_kernel_call_t, outputs) F(tessera_kernel_call_t, attrs) \
  F(tessera_kernel_call_t, op_name) F(tessera_kernel_call_t, stream)                                 \
  F(tessera_kernel_call_t, device_index) F(tessera_kernel_call_t, reserved_)                         \
  F(tessera_host_api_t, struct_size) F(tessera_host_api_t, abi_major) F(tessera_host_api_t, abi_minor) \
  F(tessera_host_api_t, reserved_) F(tessera_host_api_t, host_ctx) F(tessera_host_api_t, status_make) \
  F(tessera_host_api_t, status_free) F(tessera_host_api_t, status_code)                              \
  F(tessera_host_api_t, status_message) F(tessera_host_api_t, log) F(tessera_host_api_t, getenv)     \
  F(tessera_host_api_t, op_define) F(tessera_host_api_t, kernel_register)                            \
  F(tessera_host_api_t, fallback_register) F(tessera_host_api_t, op_forbid_fallback)                 \
  F(tessera_device_interface_t, struct_size) F(tessera_device_interface_t, reserved_)                \
  F(tessera_device_interface_t, device_count) F(tessera_device_interface_t, device_get_current)      \
  F(tessera_device_interface_t, device_set_current) F(tessera_device_interface_t, memory_allocate)   \
  F(tessera_device_interface_t, memory_free) F(tessera_device_interface_t, memory_copy_from_host)    \
  F(tessera_device_interface_t, memory_copy_to_host) F(tessera_device_interface_t, memory_copy_device) \
  F(tessera_device_interface_t, stream_create) F(tessera_device_interface_t, stream_destroy)         \
  F(tessera_device_interface_t, stream_synchronize) F(tessera_device_interface_t, event_create)      \
  F(tessera_device_interface_t, event_destroy) F(tessera_device_interface_t, event_record)           \
  F(tessera_device_interface_t, event_wait) F(tessera_device_interface_t, event_synchronize)         \
  F(tessera_device_interface_t, device_synchronize) F(tessera_device_interface_t, device_properties) \
  F(tessera_plugin_t, struct_size) F(tessera_plugin_t, abi_major) F(tessera_plugin_t, abi_minor)     \
  F(tessera_plugin_t, reserved_) F(tessera_plugin_t, name) F(tessera_plugin_t, version)              \
  F(tessera_plugin_t, features) F(tessera_plugin_t, self) F(tessera_plugin_t, device)                \
  F(tessera_plugin_t, shutdown)

/* Every enum value and constant of ABI 1.0 (macros that are integers). */
#define ABI_CONSTANTS_1_0(C)                                                                         \
  C(TESSERA_ABI_MAJOR) C(TESSERA_STATUS_OK) C(TESSERA_STATUS_INVALID_ARGUMENT)                       \
  C(TESSERA_STATUS_OUT_OF_MEMORY) C(TESSERA_STATUS_UNIMPLEMENTED) C(TESSERA_STATUS_UNAVAILABLE)      \
  C(TESSERA_STATUS_INTERNAL) C(TESSERA_STATUS_ABI_MISMATCH) C(TESSERA_DTYPE_BOOL)                    \
  C(TESSERA_DTYPE_UINT8) C(TESSERA_DTYPE_INT8) C(TESSERA_DTYPE_INT16) C(TESSERA_DTYPE_INT32)         \
  C(TESSERA_DTYPE_INT64) C(TESSERA_DTYPE_FLOAT16) C(TESSERA_DTYPE_BFLOAT16) C(TESSERA_DTYPE_FLOAT32) \
  C(TESSERA_DTYPE_FLOAT64) C(TESSERA_DTYPE_COUNT_) C(TESSERA_DTYPE_MASK_FLOATING)                    \
  C(TESSERA_DTYPE_MASK_INTEGRAL) C(TESSERA_DTYPE_MASK_ALL) C(TESSERA_DEVICE_CPU) C(TESSERA_DEVICE_CUDA) \
  C(TESSERA_DEVICE_OPENCL) C(TESSERA_DEVICE_META) C(TESSERA_DEVICE_PRIVATEUSE1)                      \
  C(TESSERA_DEVICE_PRIVATEUSE2) C(TESSERA_DEVICE_PRIVATEUSE3) C(TESSERA_FUNCTIONALITY_DENSE)         \
  C(TESSERA_FUNCTIONALITY_QUANTIZED) C(TESSERA_FUNCTIONALITY_SPARSE) C(TESSERA_LOG_DEBUG)            \
  C(TESSERA_LOG_INFO) C(TESSERA_LOG_WARNING) C(TESSERA_LOG_ERROR) C(TESSERA_VALUE_NONE)              \
  C(TESSERA_VALUE_INT) C(TESSERA_VALUE_DOUBLE) C(TESSERA_VALUE_BOOL) C(TESSERA_VALUE_INT_LIST)       \
  C(TESSERA_VALUE_STRING) C(TESSERA_VALUE_DTYPE) C(TESSERA_KERNEL_FLAG_NONE)                         \
  C(TESSERA_KERNEL_FLAG_NO_FALLBACK) C(TESSERA_PLUGIN_FEATURE_STREAMS)                               \
  C(TESSERA_PLUGIN_FEATURE_EVENTS) C(TESSERA_PLUGIN_FEATURE_ASYNC)

/* What ABI 1.1 appended (live header only). */
#define ABI_STRUCTS_1_1(S) S(tessera_memory_stats_t)
#define ABI_FIELDS_1_1(F)                                                                            \
  F(tessera_device_interface_t, memory_stats) F(tessera_plugin_t, get_proc_address)                  \
  F(tessera_memory_stats_t, struct_size) F(tessera_memory_stats_t, reserved_)                        \
  F(tessera_memory_stats_t, allocated_bytes) F(tessera_memory_stats_t, reserved_bytes)               \
  F(tessera_memory_stats_t, peak_allocated_bytes) F(tessera_memory_stats_t, num_allocations)

/* What ABI 1.2 appended (live header only): a tensor's storage version, event times and
 * record_stream for streams, the graph ABI. */
#define ABI_STRUCTS_1_2(S) S(tessera_graph_size_t) S(tessera_graph_arg_t) S(tessera_graph_type_t) S(tessera_graph_api_t)
#define ABI_FIELDS_1_2(F) \
  F(tessera_tensor_t, version) F(tessera_device_interface_t, event_elapsed_time) \
  F(tessera_device_interface_t, memory_record_stream) \
  F(tessera_host_api_t, graph) F(tessera_graph_size_t, struct_size) \
  F(tessera_graph_size_t, is_symbolic) F(tessera_graph_size_t, value) F(tessera_graph_size_t, expr) \
  F(tessera_graph_size_t, min) F(tessera_graph_size_t, max) F(tessera_graph_arg_t, kind) \
  F(tessera_graph_arg_t, num_values) F(tessera_graph_arg_t, values) \
  F(tessera_graph_arg_t, constant) F(tessera_graph_type_t, dtype) F(tessera_graph_type_t, rank) \
  F(tessera_graph_type_t, device) F(tessera_graph_type_t, sizes) \
  F(tessera_graph_api_t, struct_size) F(tessera_graph_api_t, reserved_) \
  F(tessera_graph_api_t, node_count) F(tessera_graph_api_t, node_kind) \
  F(tessera_graph_api_t, node_target) F(tessera_graph_api_t, node_num_args) \
  F(tessera_graph_api_t, node_arg_kind) F(tessera_graph_api_t, node_arg_num_values) \
  F(tessera_graph_api_t, node_arg_value) F(tessera_graph_api_t, node_arg_constant) \
  F(tessera_graph_api_t, node_num_outputs) F(tessera_graph_api_t, node_output) \
  F(tessera_graph_api_t, value_count) F(tessera_graph_api_t, value_name) \
  F(tessera_graph_api_t, value_dtype) F(tessera_graph_api_t, value_device) \
  F(tessera_graph_api_t, value_rank) F(tessera_graph_api_t, value_size) \
  F(tessera_graph_api_t, input_count) F(tessera_graph_api_t, input) \
  F(tessera_graph_api_t, output_count) F(tessera_graph_api_t, output) \
  F(tessera_graph_api_t, symbol_count) F(tessera_graph_api_t, symbol) \
  F(tessera_graph_api_t, add_call) F(tessera_graph_api_t, replace_uses) \
  F(tessera_graph_api_t, erase_node)
#define ABI_CONSTANTS_1_2(C) \
  C(TESSERA_NODE_PLACEHOLDER) C(TESSERA_NODE_CALL) C(TESSERA_NODE_OUTPUT) C(TESSERA_ARG_TENSOR) \
  C(TESSERA_ARG_TENSOR_LIST) C(TESSERA_ARG_NONE) C(TESSERA_ARG_CONSTANT) C(TESSERA_INPUT_USER) \
  C(TESSERA_INPUT_PARAMETER) C(TESSERA_INPUT_CONSTANT) C(TESSERA_DTYPE_QINT8) C(TESSERA_DTYPE_QUINT8) \
  C(TESSERA_DTYPE_QINT32)

/* What ABI 1.3 appended for device spans in the profiler (Note [Plugin spans]). */
#define ABI_STRUCTS_1_3_SPANS(S) S(tessera_profiler_span_t)
#define ABI_FIELDS_1_3_SPANS(F) \
  F(tessera_host_api_t, profiler_enabled) F(tessera_host_api_t, profiler_clock_ns) \
  F(tessera_host_api_t, profiler_correlation_id) F(tessera_host_api_t, profiler_record_span) \
  F(tessera_profiler_span_t, struct_size) F(tessera_profiler_span_t, device) F(tessera_profiler_span_t, name) \
  F(tessera_profiler_span_t, category) F(tessera_profiler_span_t, stream) F(tessera_profiler_span_t, start_ns) \
  F(tessera_profiler_span_t, end_ns) F(tessera_profiler_span_t, correlation_id) F(tessera_profiler_span_t, args_json)


/* What ABI 1.3 appended (live header only): memory info and pinned host memory in the device
 * interface, the generator in the host table. */
#define ABI_FIELDS_1_3(F)                                                                              \
  F(tessera_host_api_t, generator_reserve) F(tessera_device_interface_t, memory_info)                  \
  F(tessera_device_interface_t, pinned_allocate) F(tessera_device_interface_t, pinned_free)            \
  F(tessera_device_interface_t, memory_copy_from_pinned)

#define ABI_FIELD_ROW(T, f) {#T, #f, offsetof(T, f), sizeof(((T*)0)->f)},
#define ABI_STRUCT_ROW(T) {#T, sizeof(T)},
#define ABI_CONSTANT_ROW(c) {#c, (long long)(c)},

#endif /* TESSERA_TESTS_ABI_ABI_LAYOUT_H_ */
