/* Tessera plugin ABI — plain C, the only thing that crosses between the runtime and a plugin.
 *
 * Note [ABI versioning]
 * ---------------------
 * - TESSERA_ABI_MAJOR changes only when an existing field or function changes meaning. The runtime
 *   refuses a plugin of another major, naming both versions.
 * - TESSERA_ABI_MINOR grows when a field or function is appended at the END of a struct. Every
 *   struct starts with `struct_size`; a reader uses a field only when
 *   `offsetof(field) + sizeof(field) <= struct_size` (TESSERA_ABI_HAS_FIELD). So a plugin built
 *   against 1.0 keeps loading in every 1.x runtime, and a 1.x plugin in a 1.0 runtime.
 * - What a minor may do: append fields or functions at the end of a struct that starts with
 *   `struct_size`; add enum values, flags, feature bits and extension names. What it may not do:
 *   move, resize, remove, retype or re-mean a field; grow tessera_value_t (it is an array element,
 *   its size is fixed for the whole major). The 1.0 header is kept verbatim in
 *   tessera/abi/1.0/plugin_abi.h and tests check that this header's 1.0 prefix lays out the same; the
 *   1.2 header is kept the same way in tessera/abi/1.2/plugin_abi.h, and tests load plugins across
 *   that boundary in both directions (tests/abi).
 * - Every slot appended in a minor is optional: a plugin built against an older minor leaves it out,
 *   so the host supplies a default for it (written next to the slot as "(optional) host default: ...").
 * - No C++ type, exception or allocator crosses: errors are tessera_status_t objects made by the
 *   host (host->status_make) and freed by whoever receives them (host->status_free).
 *
 * Note [Device memory]
 * --------------------
 * Device memory is an opaque handle plus a byte offset (an OpenCL cl_mem is not a pointer). The
 * runtime never dereferences a handle of a device other than the CPU; it moves bytes only through
 * the device interface's copy functions. For the CPU, the handle is the host pointer.
 */
#ifndef TESSERA_PLUGIN_ABI_H_
#define TESSERA_PLUGIN_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TESSERA_ABI_MAJOR 1
#define TESSERA_ABI_MINOR 3

/* The one symbol every plugin exports (see tessera_plugin_init_fn_t). */
#define TESSERA_PLUGIN_ENTRY_NAME "tessera_plugin_init"

#if defined(_WIN32)
#define TESSERA_PLUGIN_EXPORT __declspec(dllexport)
#else
#define TESSERA_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* True when a struct of the reader's type, whose writer reported `struct_size`, holds FIELD. */
#define TESSERA_ABI_HAS_FIELD(ptr, type, field) \
  ((ptr) != NULL && (ptr)->struct_size >= offsetof(type, field) + sizeof(((type*)0)->field))

/* ---------------------------------------------------------------- status */

typedef enum tessera_status_code_t {
  TESSERA_STATUS_OK = 0,
  TESSERA_STATUS_INVALID_ARGUMENT = 1,
  TESSERA_STATUS_OUT_OF_MEMORY = 2,
  TESSERA_STATUS_UNIMPLEMENTED = 3, /* op/dtype not supported: the runtime may fall back */
  TESSERA_STATUS_UNAVAILABLE = 4,   /* device or driver missing */
  TESSERA_STATUS_INTERNAL = 5,
  TESSERA_STATUS_ABI_MISMATCH = 6
} tessera_status_code_t;

/* NULL means success. A non-NULL status is owned by whoever receives it. */
typedef struct tessera_status_s* tessera_status_t;

/* ---------------------------------------------------------------- enums shared with the core */

/* Values equal tessera::DType (checked by static_assert in the runtime). */
typedef enum tessera_dtype_t {
  TESSERA_DTYPE_BOOL = 0,
  TESSERA_DTYPE_UINT8 = 1,
  TESSERA_DTYPE_INT8 = 2,
  TESSERA_DTYPE_INT16 = 3,
  TESSERA_DTYPE_INT32 = 4,
  TESSERA_DTYPE_INT64 = 5,
  TESSERA_DTYPE_FLOAT16 = 6,
  TESSERA_DTYPE_BFLOAT16 = 7,
  TESSERA_DTYPE_FLOAT32 = 8,
  TESSERA_DTYPE_FLOAT64 = 9,
  TESSERA_DTYPE_COUNT_ = 10, /* the dtypes of ABI 1.0; TESSERA_DTYPE_MASK_ALL covers exactly these */
  /* Appended after 1.0: quantized dtypes, the integer representation of a quantized tensor (itemsize
   * 1, 1, 4). Their scale and zero point stay in the runtime; a kernel registered with a mask that
   * lacks these bits never receives them (docs/quantization.md). */
  TESSERA_DTYPE_QINT8 = 10,
  TESSERA_DTYPE_QUINT8 = 11,
  TESSERA_DTYPE_QINT32 = 12
} tessera_dtype_t;

#define TESSERA_DTYPE_BIT(d) (UINT64_C(1) << (d))
#define TESSERA_DTYPE_MASK_FLOATING                                                   \
  (TESSERA_DTYPE_BIT(TESSERA_DTYPE_FLOAT16) | TESSERA_DTYPE_BIT(TESSERA_DTYPE_BFLOAT16) | \
   TESSERA_DTYPE_BIT(TESSERA_DTYPE_FLOAT32) | TESSERA_DTYPE_BIT(TESSERA_DTYPE_FLOAT64))
#define TESSERA_DTYPE_MASK_INTEGRAL                                                    \
  (TESSERA_DTYPE_BIT(TESSERA_DTYPE_UINT8) | TESSERA_DTYPE_BIT(TESSERA_DTYPE_INT8) |       \
   TESSERA_DTYPE_BIT(TESSERA_DTYPE_INT16) | TESSERA_DTYPE_BIT(TESSERA_DTYPE_INT32) |      \
   TESSERA_DTYPE_BIT(TESSERA_DTYPE_INT64))
#define TESSERA_DTYPE_MASK_ALL (TESSERA_DTYPE_MASK_FLOATING | TESSERA_DTYPE_MASK_INTEGRAL | \
                                TESSERA_DTYPE_BIT(TESSERA_DTYPE_BOOL))
#define TESSERA_DTYPE_MASK_QUANTIZED                                                  \
  (TESSERA_DTYPE_BIT(TESSERA_DTYPE_QINT8) | TESSERA_DTYPE_BIT(TESSERA_DTYPE_QUINT8) | \
   TESSERA_DTYPE_BIT(TESSERA_DTYPE_QINT32))

/* Values equal tessera::DeviceType (checked by static_assert in the runtime). */
typedef enum tessera_device_type_t {
  TESSERA_DEVICE_CPU = 0,
  TESSERA_DEVICE_CUDA = 1,
  TESSERA_DEVICE_OPENCL = 2,
  TESSERA_DEVICE_META = 3,
  TESSERA_DEVICE_PRIVATEUSE1 = 4,
  TESSERA_DEVICE_PRIVATEUSE2 = 5,
  TESSERA_DEVICE_PRIVATEUSE3 = 6
} tessera_device_type_t;

/* Functionality half of a dispatch key; the backend half is the plugin's own device type. */
typedef enum tessera_functionality_t {
  TESSERA_FUNCTIONALITY_DENSE = 0,
  TESSERA_FUNCTIONALITY_QUANTIZED = 1,
  TESSERA_FUNCTIONALITY_SPARSE = 2
} tessera_functionality_t;

typedef enum tessera_log_level_t {
  TESSERA_LOG_DEBUG = 0,
  TESSERA_LOG_INFO = 1,
  TESSERA_LOG_WARNING = 2,
  TESSERA_LOG_ERROR = 3
} tessera_log_level_t;

/* ---------------------------------------------------------------- tensors and values */

/* A tensor as a kernel sees it. Owned by the runtime; valid for the duration of the call. */
typedef struct tessera_tensor_t {
  uint32_t struct_size;
  int32_t dtype;        /* tessera_dtype_t */
  int32_t device_type;  /* tessera_device_type_t */
  int32_t device_index;
  int32_t ndim;
  int32_t reserved_;
  const int64_t* sizes;   /* ndim entries */
  const int64_t* strides; /* ndim entries, in elements */
  int64_t numel;
  void* data;           /* device memory handle of the storage (CPU: host pointer) */
  int64_t byte_offset;  /* storage offset in bytes: element (0,..,0) is at data + byte_offset */
  /* (ABI 1.2) The storage's version (Note [Storage version] in tessera/tensor.h): it changes on every
   * write the runtime sees (in-place and out= ops, host data_ptr access) and no two storages share
   * one, so a kernel may keep data derived from the tensor (a prepacked weight) under it. 0: unknown
   * (a temporary, or a 1.1 runtime: check TESSERA_ABI_HAS_FIELD), never cache. */
  uint64_t version;
} tessera_tensor_t;

typedef enum tessera_value_kind_t {
  TESSERA_VALUE_NONE = 0,
  TESSERA_VALUE_INT = 1,      /* also Scalar holding an integer, SymInt */
  TESSERA_VALUE_DOUBLE = 2,   /* also Scalar holding a floating value */
  TESSERA_VALUE_BOOL = 3,
  TESSERA_VALUE_INT_LIST = 4, /* int[] ; `count` entries in `ints` */
  TESSERA_VALUE_STRING = 5,
  TESSERA_VALUE_DTYPE = 6     /* ScalarType: value in `i` */
} tessera_value_kind_t;

/* A non-tensor argument. */
typedef struct tessera_value_t {
  int32_t kind; /* tessera_value_kind_t */
  int32_t count;
  union {
    int64_t i;
    double d;
    int32_t b;
    const int64_t* ints;
    const char* s;
  } u;
} tessera_value_t;

/* One kernel invocation.
 * - inputs: every Tensor / Tensor? argument in schema order (NULL for an absent Tensor?); a Tensor[]
 *   argument contributes all its elements in place (a schema has at most one Tensor[]).
 *   An in-place op (`fill_`, `copy_`) sees `self` both as inputs[0] and outputs[0].
 * - outputs: allocated by the runtime on the target device with the shape and dtype of the op's
 *   shape rule; the kernel writes them.
 * - attrs: every non-tensor argument in schema order, defaults filled in.
 */
typedef struct tessera_kernel_call_t {
  uint32_t struct_size;
  int32_t num_inputs;
  int32_t num_outputs;
  int32_t num_attrs;
  const tessera_tensor_t* const* inputs;
  const tessera_tensor_t* const* outputs;
  const tessera_value_t* attrs;
  const char* op_name; /* "add.Tensor" */
  void* stream;        /* the calling thread's current stream of the target device (tessera::Stream,
                        * StreamGuard): a handle from stream_create, or NULL for the device's default
                        * stream. A device without streams always gets NULL. */
  int32_t device_index;
  int32_t reserved_;
} tessera_kernel_call_t;

/* A kernel. Returns NULL on success. TESSERA_STATUS_UNIMPLEMENTED lets the runtime fall back. */
typedef tessera_status_t (*tessera_kernel_fn_t)(void* user_data, const tessera_kernel_call_t* call);

/* Kernel registration flags. */
#define TESSERA_KERNEL_FLAG_NONE 0u
/* The op must never run through the CPU fallback on this plugin's device. */
#define TESSERA_KERNEL_FLAG_NO_FALLBACK 1u
/* Replace the kernel this plugin already registered for the op and functionality. Without it a
 * second registration for the same op is an error (ABI 1.1; a 1.0 runtime ignores the bit and
 * replaces). */
#define TESSERA_KERNEL_FLAG_REPLACE 2u

/* ---------------------------------------------------------------- graphs (ABI 1.2)
 *
 * Note [Graph ABI]
 * ----------------
 * Compiler and quantizer plugins see an exported program's graph only through these functions
 * (host->graph), never through C++ types; ONNX Runtime's OrtGraph accessors and PJRT's C API are
 * the model. A graph is a list of nodes in execution order (placeholder, call, output) over values
 * identified by int32 ids; every value has a dtype, a device ("cpu:0") and sizes, each a constant
 * or a symbolic expression over named dimensions whose ranges the graph lists. A call node's
 * arguments follow its op's schema: a tensor value, a list of values, None, or a constant given as
 * a tessera_value_t. Printing these in order gives exactly the text of the runtime's
 * ExportedProgram::graph_string() (Note [Graph text]).
 * - Lifetime: strings and arrays returned by an accessor stay valid until the graph changes or the
 *   call that handed the graph to the plugin returns.
 * - Errors: accessors that return an int32 return -1 for an index out of range; those that return
 *   a pointer return NULL; status-returning ones return an INVALID_ARGUMENT status naming the index.
 * - Builders work only on a graph handed to the plugin as writable (a pass); on a read-only graph
 *   they return INVALID_ARGUMENT. Value ids never change; erasing a node leaves its values unused.
 */
typedef struct tessera_graph_s tessera_graph_t;

typedef enum tessera_node_kind_t {
  TESSERA_NODE_PLACEHOLDER = 0,
  TESSERA_NODE_CALL = 1,
  TESSERA_NODE_OUTPUT = 2
} tessera_node_kind_t;

typedef enum tessera_arg_kind_t {
  TESSERA_ARG_TENSOR = 0,      /* one value */
  TESSERA_ARG_TENSOR_LIST = 1, /* any number of values */
  TESSERA_ARG_NONE = 2,        /* an absent optional tensor */
  TESSERA_ARG_CONSTANT = 3     /* a tessera_value_t (TESSERA_VALUE_NONE for a None constant) */
} tessera_arg_kind_t;

typedef enum tessera_input_kind_t {
  TESSERA_INPUT_USER = 0,
  TESSERA_INPUT_PARAMETER = 1,
  TESSERA_INPUT_CONSTANT = 2
} tessera_input_kind_t;

/* One size of a value. */
typedef struct tessera_graph_size_t {
  uint32_t struct_size;
  int32_t is_symbolic;
  int64_t value;    /* the size when not symbolic */
  const char* expr; /* canonical text: "512", "batch", "2*batch*seq + 1" */
  int64_t min;      /* its range: the constant itself, a symbol's range, or [0, INT64_MAX] for an */
  int64_t max;      /* expression the host does not bound */
} tessera_graph_size_t;

/* An argument of a node a builder adds. */
typedef struct tessera_graph_arg_t {
  int32_t kind; /* tessera_arg_kind_t */
  int32_t num_values;
  const int32_t* values;    /* TENSOR: one id; TENSOR_LIST: num_values ids */
  tessera_value_t constant; /* CONSTANT */
} tessera_graph_arg_t;

/* The type of a value a builder adds. */
typedef struct tessera_graph_type_t {
  int32_t dtype; /* tessera_dtype_t */
  int32_t rank;
  const char* device;       /* "cpu:0" */
  const char* const* sizes; /* rank expressions in the syntax of tessera_graph_size_t::expr */
} tessera_graph_type_t;

typedef struct tessera_graph_api_t {
  uint32_t struct_size;
  uint32_t reserved_;

  /* Nodes, in execution order. */
  int32_t (*node_count)(const tessera_graph_t* graph);
  int32_t (*node_kind)(const tessera_graph_t* graph, int32_t node); /* tessera_node_kind_t */
  /* Call: the op with its overload ("add.Tensor"); placeholder: the input's name; output: "". */
  const char* (*node_target)(const tessera_graph_t* graph, int32_t node);
  int32_t (*node_num_args)(const tessera_graph_t* graph, int32_t node);
  int32_t (*node_arg_kind)(const tessera_graph_t* graph, int32_t node, int32_t arg); /* tessera_arg_kind_t */
  int32_t (*node_arg_num_values)(const tessera_graph_t* graph, int32_t node, int32_t arg);
  int32_t (*node_arg_value)(const tessera_graph_t* graph, int32_t node, int32_t arg, int32_t index);
  tessera_status_t (*node_arg_constant)(const tessera_graph_t* graph, int32_t node, int32_t arg,
                                        tessera_value_t* out_value);
  int32_t (*node_num_outputs)(const tessera_graph_t* graph, int32_t node);
  int32_t (*node_output)(const tessera_graph_t* graph, int32_t node, int32_t index);

  /* Values. */
  int32_t (*value_count)(const tessera_graph_t* graph);
  /* The value's name ("" when unnamed: the graph text prints it as %<id>). */
  const char* (*value_name)(const tessera_graph_t* graph, int32_t value);
  int32_t (*value_dtype)(const tessera_graph_t* graph, int32_t value); /* tessera_dtype_t */
  const char* (*value_device)(const tessera_graph_t* graph, int32_t value);
  int32_t (*value_rank)(const tessera_graph_t* graph, int32_t value);
  /* The caller sets out_size->struct_size; the host fills the fields that fit. */
  tessera_status_t (*value_size)(const tessera_graph_t* graph, int32_t value, int32_t dim,
                                 tessera_graph_size_t* out_size);

  /* The signature: inputs in placeholder order, outputs in return order. */
  int32_t (*input_count)(const tessera_graph_t* graph);
  tessera_status_t (*input)(const tessera_graph_t* graph, int32_t index, int32_t* out_kind, const char** out_name,
                            int32_t* out_value);
  int32_t (*output_count)(const tessera_graph_t* graph);
  tessera_status_t (*output)(const tessera_graph_t* graph, int32_t index, const char** out_name, int32_t* out_value);

  /* The symbols of the graph's ranges (every symbol its sizes mention), sorted by name, each with
   * its closed range. */
  int32_t (*symbol_count)(const tessera_graph_t* graph);
  tessera_status_t (*symbol)(const tessera_graph_t* graph, int32_t index, const char** out_name, int64_t* out_min,
                             int64_t* out_max);

  /* Builders (writable graphs only). add_call inserts a call of `target` before node `before_node`
   * (node_count: at the end, before the output node) with new values of `output_types` and writes
   * their ids to out_values (num_outputs entries); the op must exist and every argument value must
   * be defined before that position. */
  tessera_status_t (*add_call)(tessera_graph_t* graph, int32_t before_node, const char* target,
                               const tessera_graph_arg_t* args, int32_t num_args,
                               const tessera_graph_type_t* output_types, int32_t num_outputs, int32_t* out_values);
  /* Every use of `old_value` (arguments, returned values) becomes a use of `new_value`. */
  tessera_status_t (*replace_uses)(tessera_graph_t* graph, int32_t old_value, int32_t new_value);
  /* Removes a call node whose outputs are unused. */
  tessera_status_t (*erase_node)(tessera_graph_t* graph, int32_t node);
} tessera_graph_api_t;

/* ---------------------------------------------------------------- profiler spans (ABI 1.3)
 *
 * Note [Plugin spans]
 * -------------------
 * A plugin puts its own work (kernel launches, copies, compiled partition runs) in the runtime's
 * profile (TESSERA_PROFILE, tessera::profiler_enable) through four host slots: profiler_enabled,
 * profiler_clock_ns, profiler_correlation_id and profiler_record_span. The runtime gives every host
 * op it profiles a correlation id and makes it current on the calling thread for the length of the
 * call, so a kernel reads the id of the op that launched it; a span carries the id to where the
 * work really ran (a queue thread), and the trace links the two (args.correlation on both, and a
 * flow arrow from the host op to the span, as PyTorch's Kineto does).
 * Times are the profiler clock in nanoseconds (profiler_clock_ns; CLOCK_MONOTONIC on Linux). A
 * device with a clock of its own converts: read the device clock d0 and profiler_clock_ns() h0
 * together once (an anchor; re-anchor now and then when the clocks drift), then
 *   host_ns = h0 + (d - d0) * 1e9 / device_ticks_per_second.
 * Spans appear in the trace on a track per (plugin, device, stream), named like
 * "my_hardware_device:0 stream 0 [my_hardware_device]", and through tessera::profiler_plugin_spans()
 * and the summary. A plugin built against 1.2 never calls these slots; a 1.3 plugin on a 1.2
 * runtime finds them absent (TESSERA_ABI_HAS_FIELD) and records nothing. */
/* One span measured by a plugin (ABI 1.3; Note [Plugin spans]). The caller sets struct_size to
 * sizeof(tessera_profiler_span_t); the host reads only the fields that fit in it. */
typedef struct tessera_profiler_span_t {
  uint32_t struct_size;
  int32_t device;          /* index of the plugin's device the work ran on; -1: no device */
  const char* name;        /* required: "matmul", "copy host to device", ... (untrusted: escaped) */
  const char* category;    /* (optional) "kernel", "copy", "partition", ...; NULL: "device" */
  uint64_t stream;         /* a number naming the queue within the device: spans of one (device,
                            * stream) share a track; 0: the default stream */
  int64_t start_ns;        /* profiler clock (profiler_clock_ns) */
  int64_t end_ns;          /* >= start_ns */
  uint64_t correlation_id; /* profiler_correlation_id() read when the work was issued; 0: none */
  const char* args_json;   /* (optional) a JSON object of extra fields ({"bytes": 4096}); NULL: none */
} tessera_profiler_span_t;

/* ---------------------------------------------------------------- host API (runtime -> plugin) */

typedef struct tessera_host_api_t {
  uint32_t struct_size;
  uint32_t abi_major;
  uint32_t abi_minor;
  uint32_t reserved_;
  void* host_ctx; /* pass back as the first argument of the registration calls */

  /* Status objects. status_make copies `message`; status_free accepts NULL. */
  tessera_status_t (*status_make)(tessera_status_code_t code, const char* message);
  void (*status_free)(tessera_status_t status);
  tessera_status_code_t (*status_code)(tessera_status_t status);
  const char* (*status_message)(tessera_status_t status);

  /* Logging through TESSERA_LOG (component such as "plugins", "dispatch", "cpu"). */
  void (*log)(tessera_log_level_t level, const char* component, const char* message);
  /* Environment lookup that honours the setuid rule (secure_getenv). NULL when unset. */
  const char* (*getenv)(const char* name);

  /* Registration, valid during tessera_plugin_init and afterwards. Registrations made during a
   * failed init are discarded as a whole. */
  /* Define a new operator from a schema string; the shape rule is taken from `meta_like` (an
   * existing op whose rule fits, e.g. "relu") or NULL for an op whose outputs are its inputs. */
  tessera_status_t (*op_define)(void* host_ctx, const char* schema, const char* meta_like);
  /* Register `fn` for op `op_name` ("add.Tensor" or "add" for the default overload) on this
   * plugin's backend with the given functionality, for the dtypes in `dtype_mask`. */
  tessera_status_t (*kernel_register)(void* host_ctx, const char* op_name, int32_t functionality,
                                      uint64_t dtype_mask, tessera_kernel_fn_t fn, void* user_data,
                                      uint32_t flags);
  /* A boxed fallback for every op on this plugin's backend that has no kernel. */
  tessera_status_t (*fallback_register)(void* host_ctx, int32_t functionality,
                                        tessera_kernel_fn_t fn, void* user_data);
  /* Mark an op as never falling back to the CPU on this plugin's device. */
  tessera_status_t (*op_forbid_fallback)(void* host_ctx, const char* op_name);

  /* ---- ABI 1.2 */
  /* The graph accessors and builders (Note [Graph ABI]). Never NULL in a 1.2 runtime; its
   * struct_size is 0 until the runtime's compiler library is loaded, which is always the case
   * when a plugin is handed a graph. A 1.1 runtime has no such field (TESSERA_ABI_HAS_FIELD). */
  const struct tessera_graph_api_t* graph;

  /* ---- ABI 1.3 */
  /* Device spans in the profiler (Note [Plugin spans]). Each slot is absent on a 1.2 runtime: read
   * them only through TESSERA_ABI_HAS_FIELD (the SDK's ScopedSpan does). Callable from any thread. */
  /* Nonzero while the runtime records a profile: one relaxed load, so a plugin checks it before it
   * builds a span and pays nothing while profiling is off. */
  int32_t (*profiler_enabled)(void);
  /* The profiler clock in nanoseconds (CLOCK_MONOTONIC on Linux): the clock of every span's start
   * and end. A span timed on a device clock is converted by the plugin (Note [Plugin spans]). */
  int64_t (*profiler_clock_ns)(void);
  /* The correlation id of the innermost host op (or runtime range: a cross-device copy, a compiled
   * partition run) being profiled on the calling thread; 0 when none or when profiling is off.
   * Read it where work is issued (in the kernel) and carry it to where the span is recorded. */
  uint64_t (*profiler_correlation_id)(void);
  /* Records one finished span. The host copies every string before returning. Refused with
   * TESSERA_STATUS_INVALID_ARGUMENT (nothing recorded): span or host_ctx NULL, struct_size below the
   * 1.3 struct, name NULL or empty, name or category over 1024 bytes, end_ns < start_ns, device < -1,
   * args_json not a JSON object or over 64 KiB. While profiling is off a valid span is dropped and
   * NULL (success) returned. */
  tessera_status_t (*profiler_record_span)(void* host_ctx, const struct tessera_profiler_span_t* span);
  /* Reserves `count` consecutive Philox counter values from the default generator of this plugin's
   * device `device_index` (tessera::Generator, Note [Generators] in tessera/generator.h) and writes
   * that generator's seed and the first reserved offset: element i of the plugin's draw is
   * tessera::philox(seed, offset + i) (tessera/random.h), so a random op the plugin defines itself
   * follows tessera::manual_seed and is reproducible like rand/randn. Thread-safe. Returns an
   * INVALID_ARGUMENT status for a device index out of range. A 1.2 runtime has no such field
   * (TESSERA_ABI_HAS_FIELD): a plugin that declares "min_host_minor": 2 then draws from its own seed. */
  tessera_status_t (*generator_reserve)(void* host_ctx, int32_t device_index, uint64_t count, uint64_t* out_seed,
                                        uint64_t* out_offset);
} tessera_host_api_t;

/* ---------------------------------------------------------------- device interface (plugin -> runtime) */

/* Memory statistics of one device (ABI 1.1). The caller sets struct_size to the size it knows; the
 * plugin writes only the fields that fit in it (TESSERA_ABI_HAS_FIELD) and leaves struct_size. */
typedef struct tessera_memory_stats_t {
  uint32_t struct_size;
  uint32_t reserved_;
  uint64_t allocated_bytes;      /* bytes in live allocations */
  uint64_t reserved_bytes;       /* bytes held from the device: live allocations plus caches */
  uint64_t peak_allocated_bytes; /* highest allocated_bytes so far */
  uint64_t num_allocations;      /* live allocations */
} tessera_memory_stats_t;

/* What a backend plugin implements. `self` is tessera_plugin_t::self. Every function may be called
 * from any thread; a plugin serialises internally where its device needs it. Copies to and from
 * host memory have completed with respect to the host buffer when they return (not memory_copy_from_pinned).
 * Required: device_count; for a device other than the CPU also memory_allocate, memory_free,
 * memory_copy_from_host and memory_copy_to_host. Every other slot is (optional) and may be NULL; the
 * host default is written next to it. */
typedef struct tessera_device_interface_t {
  uint32_t struct_size;
  uint32_t reserved_;

  /* Never fails: returns 0 and writes a one-line reason with a fix-it hint when no device is
   * usable (no driver, no ICD, no hardware). `reason` may be NULL. */
  int32_t (*device_count)(void* self, char* reason, size_t reason_capacity);
  /* (optional) host default: device 0 is current. */
  tessera_status_t (*device_get_current)(void* self, int32_t* out_index);
  /* (optional) host default: the host never changes the plugin's current device. */
  tessera_status_t (*device_set_current)(void* self, int32_t index);

  tessera_status_t (*memory_allocate)(void* self, int32_t device, uint64_t nbytes, void** out_handle);
  void (*memory_free)(void* self, int32_t device, void* handle);
  tessera_status_t (*memory_copy_from_host)(void* self, int32_t device, void* dst, uint64_t dst_offset,
                                            const void* src_host, uint64_t nbytes, void* stream);
  tessera_status_t (*memory_copy_to_host)(void* self, int32_t device, void* dst_host, const void* src,
                                          uint64_t src_offset, uint64_t nbytes, void* stream);
  /* Between two devices of this plugin (possibly the same one).
   * (optional) host default: copy to host memory, then from host memory. */
  tessera_status_t (*memory_copy_device)(void* self, int32_t dst_device, void* dst, uint64_t dst_offset,
                                         int32_t src_device, const void* src, uint64_t src_offset,
                                         uint64_t nbytes, void* stream);

  /* (optional, all stream and event slots) host default: every call runs on the device's default
   * stream (stream NULL) and no event is recorded. */
  tessera_status_t (*stream_create)(void* self, int32_t device, void** out_stream);
  void (*stream_destroy)(void* self, int32_t device, void* stream);
  tessera_status_t (*stream_synchronize)(void* self, int32_t device, void* stream);
  tessera_status_t (*event_create)(void* self, int32_t device, void** out_event);
  void (*event_destroy)(void* self, int32_t device, void* event);
  tessera_status_t (*event_record)(void* self, int32_t device, void* event, void* stream);
  /* Make `stream` wait until `event` has completed (does not block the host). */
  tessera_status_t (*event_wait)(void* self, int32_t device, void* event, void* stream);
  tessera_status_t (*event_synchronize)(void* self, int32_t device, void* event);
  /* (optional) host default: nothing to wait for (a synchronous device). */
  tessera_status_t (*device_synchronize)(void* self, int32_t device);

  /* Writes a JSON object of properties ({"name": ..., "memory": ..., "capability": ...}) into
   * `buffer` (NUL-terminated, truncated at capacity) and returns its length WITHOUT the NUL, like
   * snprintf: a return value >= capacity means it was truncated; call again with return + 1.
   * (optional) host default: "{}". */
  size_t (*device_properties)(void* self, int32_t device, char* buffer, size_t capacity);

  /* ---- ABI 1.1 */
  /* (optional) Fills `out` (see tessera_memory_stats_t) for `device`. Host default, also when it
   * returns TESSERA_STATUS_UNIMPLEMENTED: the statistics are "not reported". */
  tessera_status_t (*memory_stats)(void* self, int32_t device, tessera_memory_stats_t* out);

  /* ---- ABI 1.2 */
  /* (optional) Writes to `out_ms` the milliseconds of device time between the completions of two
   * events of `device` (`start` recorded before `end`; negative when it completed later), like
   * cudaEventElapsedTime. The host synchronises both events before the call. Host default, also when
   * it returns TESSERA_STATUS_UNIMPLEMENTED: the device reports no event times (Event::elapsed_time
   * throws naming the device; the profiler shows host times only). */
  tessera_status_t (*event_elapsed_time)(void* self, int32_t device, void* start, void* end, double* out_ms);
  /* (optional) Tensor::record_stream: the memory `handle` of `device` is also used by work queued on
   * `stream`. When the handle is freed later, the plugin hands its bytes out again only after the
   * work queued on `stream` up to that free has completed (PyTorch's record_stream), so the host
   * frees without synchronising. Host default: nothing is recorded; memory_free must then be safe on
   * its own (a synchronous device, or one whose pending work keeps the memory alive). */
  tessera_status_t (*memory_record_stream)(void* self, int32_t device, void* handle, void* stream);

  /* ---- ABI 1.3 (docs/plugins.md, "Memory info and pinned host memory") */
  /* (optional) Writes the bytes of `device`'s memory that are free now and its total, like
   * cudaMemGetInfo (free counts what the plugin could still hand out, its own caches excluded).
   * Host default, also when it returns TESSERA_STATUS_UNIMPLEMENTED: memory info is not reported
   * (tessera::memory_info throws naming the device). */
  tessera_status_t (*memory_info)(void* self, int32_t device, uint64_t* out_free, uint64_t* out_total);
  /* (optional) Host memory, page-locked or otherwise prepared for fast transfers to this plugin's
   * devices (cudaHostAlloc): a host pointer the runtime reads and writes directly, 64-byte aligned,
   * never NULL on success (also for 0 bytes). Host default: ordinary host memory
   * (tessera::Tensor::is_pinned() is false for it). Only used together with pinned_free. */
  tessera_status_t (*pinned_allocate)(void* self, uint64_t nbytes, void** out_host_ptr);
  /* (optional, required with pinned_allocate) Releases a block of pinned_allocate. Copies queued
   * from the block by memory_copy_from_pinned may still be pending: the plugin hands the block out
   * again (or frees it) only after they have completed, so the runtime frees without synchronising.
   * Never called after shutdown; blocks the runtime still holds then stay valid host memory. */
  void (*pinned_free)(void* self, void* host_ptr);
  /* (optional) Like memory_copy_from_host, but `src_host` lies inside a block of pinned_allocate and
   * the copy is asynchronous: it is ordered on `stream` like a kernel and may read the host bytes
   * after this returns, when the stream reaches it (the caller must not write them before the
   * stream has passed the copy: Stream::synchronize, or an Event recorded after it). Host default:
   * memory_copy_from_host (the copy has read the host buffer when it returns). */
  tessera_status_t (*memory_copy_from_pinned)(void* self, int32_t device, void* dst, uint64_t dst_offset,
                                              const void* src_host, uint64_t nbytes, void* stream);
} tessera_device_interface_t;

/* ---------------------------------------------------------------- the plugin */

#define TESSERA_PLUGIN_FEATURE_STREAMS (UINT64_C(1) << 0)
#define TESSERA_PLUGIN_FEATURE_EVENTS (UINT64_C(1) << 1)
#define TESSERA_PLUGIN_FEATURE_ASYNC (UINT64_C(1) << 2)

/* A function of any type, as the extension lookup returns it (ISO C converts between function
 * pointer types, not between function and object pointers). */
typedef void (*tessera_proc_t)(void);

typedef struct tessera_plugin_t {
  uint32_t struct_size;
  uint32_t abi_major; /* TESSERA_ABI_MAJOR the plugin was built with */
  uint32_t abi_minor;
  uint32_t reserved_;
  const char* name;    /* static storage */
  const char* version; /* static storage */
  uint64_t features;   /* TESSERA_PLUGIN_FEATURE_* */
  void* self;          /* passed back to every function below */
  const tessera_device_interface_t* device; /* NULL for plugins that are not backends */
  /* Called once at explicit shutdown: join threads, free device memory. May be NULL. */
  void (*shutdown)(void* self);

  /* ---- ABI 1.1 */
  /* (optional) The one extension lookup: the function named `name` (a TESSERA_EXT_* name; cast the
   * result to the matching tessera_ext_*_fn_t) or NULL when the plugin does not provide it. It is
   * called with `self`; the function it returns stays valid until shutdown.
   * Host default: every extension is absent (NULL). */
  tessera_proc_t (*get_proc_address)(void* self, const char* name);
} tessera_plugin_t;

/* ---------------------------------------------------------------- extensions (ABI 1.1)
 * Each extension is a name and one function type; a name never changes its type. */

/* Releases the cached, unused device memory of `device` (every device when negative) and returns
 * the number of bytes released. */
#define TESSERA_EXT_EMPTY_CACHE "tessera.empty_cache"
typedef uint64_t (*tessera_ext_empty_cache_fn_t)(void* self, int32_t device);

/* Note [Device graphs]
 * A backend plugin that can record the work queued on one of its streams and replay it later
 * offers TESSERA_EXT_DEVICE_GRAPHS (the CUDA plugin: CUDA Graphs). tessera::compile's mode
 * "reduce-overhead" captures a compiled artifact once and then replays it (docs/compile.md).
 * begin_capture starts recording the work the calling thread queues on `stream` of `device` (a
 * stream the plugin created: the default stream cannot be recorded); nothing queued while
 * recording runs, and memory freed meanwhile stays reserved for the graph. end_capture stops
 * recording and returns the graph in *graph, or fails (an op that synchronised or copied to the
 * host while recording) and discards the recording. replay queues the graph's work on the stream
 * it was recorded on; destroy frees the graph and its reserved memory (in stream order: replays
 * already queued complete first). */
#define TESSERA_EXT_DEVICE_GRAPHS "tessera.device_graphs"
typedef struct tessera_device_graphs_s {
  uint32_t struct_size;
  tessera_status_t (*begin_capture)(int32_t device, void* stream);
  tessera_status_t (*end_capture)(int32_t device, void* stream, void** graph);
  tessera_status_t (*replay)(void* graph, void* stream);
  void (*destroy)(void* graph);
} tessera_device_graphs_t;
typedef const tessera_device_graphs_t* (*tessera_ext_device_graphs_fn_t)(void);

/* Note [Autocast policies in code]
 * A backend plugin may choose in code how autocast treats ops on its device type (its manifest's
 * "autocast" field says it as data): lower precision for convolutions only where the hardware has
 * bf16 units, say. The host calls TESSERA_EXT_AUTOCAST_POLICY once, the first time autocast reads
 * the policies of the plugin's device type after the plugin loaded: with `out` NULL it returns the
 * number of entries; then with an array of that capacity, which the plugin fills (returning the
 * number written). Each entry names an op of the contract ("matmul" for every overload, or one,
 * "add.Tensor"; the string stays valid until shutdown) and a tessera_autocast_policy_t. Entries
 * override the manifest's for the same op, and an application's set_autocast_policy overrides
 * both. An entry naming no op or holding another value is skipped and logged as an error naming
 * the plugin; the rest apply. (Added to 1.3 as an extension name: a runtime that does not know it
 * never asks.) */
typedef enum tessera_autocast_policy_t {
  TESSERA_AUTOCAST_NONE = 0,            /* the op runs on its inputs as they are */
  TESSERA_AUTOCAST_LOWER_PRECISION = 1, /* floating inputs cast to the autocast dtype (bf16, f16) */
  TESSERA_AUTOCAST_FLOAT32 = 2,         /* bf16 / f16 inputs cast to float32 */
  TESSERA_AUTOCAST_PROMOTE = 3          /* inputs cast to the widest floating dtype among them */
} tessera_autocast_policy_t;
typedef struct tessera_autocast_entry_t {
  const char* op;
  int32_t policy; /* tessera_autocast_policy_t */
} tessera_autocast_entry_t;
#define TESSERA_EXT_AUTOCAST_POLICY "tessera.autocast_policy"
typedef int32_t (*tessera_ext_autocast_policy_fn_t)(void* self, tessera_autocast_entry_t* out, int32_t capacity);

/* ---- quantizers (plugin kind "quantizer"; docs/quantization.md, "Writing a quantizer")
 * A quantizer plugin offers TESSERA_EXT_QUANTIZER_ANNOTATE. The host calls it with a read-only
 * graph and an annotation table; the plugin records, for the call nodes it takes, a spec or a shared
 * spec per input edge (node, value) and for the node's output. It never edits the graph. */
typedef enum tessera_qscheme_t {
  TESSERA_QSCHEME_PER_TENSOR_AFFINE = 0,
  TESSERA_QSCHEME_PER_TENSOR_SYMMETRIC = 1,
  TESSERA_QSCHEME_PER_CHANNEL_AFFINE = 2,
  TESSERA_QSCHEME_PER_CHANNEL_SYMMETRIC = 3
} tessera_qscheme_t;

typedef enum tessera_observer_kind_t {
  TESSERA_OBSERVER_MIN_MAX = 0,
  TESSERA_OBSERVER_MOVING_AVERAGE_MIN_MAX = 1,
  TESSERA_OBSERVER_PER_CHANNEL_MIN_MAX = 2,
  TESSERA_OBSERVER_HISTOGRAM = 3
} tessera_observer_kind_t;

typedef struct tessera_quant_spec_t {
  uint32_t struct_size;
  int32_t dtype;    /* TESSERA_DTYPE_QINT8 or TESSERA_DTYPE_QUINT8 */
  int32_t qscheme;  /* tessera_qscheme_t */
  int32_t observer; /* tessera_observer_kind_t; the per-channel schemes take PER_CHANNEL_MIN_MAX */
  int64_t ch_axis;  /* per-channel schemes only */
} tessera_quant_spec_t;

typedef struct tessera_annotations_s tessera_annotations_t;

/* The table a quantizer records its decisions through. Nodes and values are the graph's indices. A
 * quantization point is an input edge (value, consumer node) or an output (consumer -1). Each
 * function returns NULL or a status naming what was wrong (a node that is not a call, a value that is
 * not an input of the node, a spec with an unknown enum value, a point given a second, different
 * spec). A node another quantizer annotated, and prepare's validation of the specs together, are
 * refused when annotate returns and the decisions are committed. */
typedef struct tessera_annotation_api_t {
  uint32_t struct_size;
  /* 1 when an earlier quantizer (or this one) annotated `node`; a quantizer skips those nodes. */
  int32_t (*is_annotated)(const tessera_annotations_t* annotations, int32_t node);
  /* Marks `node` as taken with no specs: it stays float, and later quantizers leave it so. */
  tessera_status_t (*keep_float)(tessera_annotations_t* annotations, int32_t node);
  tessera_status_t (*input_spec)(tessera_annotations_t* annotations, int32_t node, int32_t value,
                                 const tessera_quant_spec_t* spec);
  /* The edge (value, node) takes the parameters of the point (with_value, with_consumer). */
  tessera_status_t (*input_shared)(tessera_annotations_t* annotations, int32_t node, int32_t value,
                                   int32_t with_value, int32_t with_consumer);
  tessera_status_t (*output_spec)(tessera_annotations_t* annotations, int32_t node, const tessera_quant_spec_t* spec);
  tessera_status_t (*output_shared)(tessera_annotations_t* annotations, int32_t node, int32_t with_value,
                                    int32_t with_consumer);
} tessera_annotation_api_t;

/* Annotates `graph` (read through host->graph) into `annotations` through `api`. Returns NULL or a
 * status (made with host->status_make) whose message the host reports naming the plugin. `self` is
 * reserved: the host passes NULL. */
#define TESSERA_EXT_QUANTIZER_ANNOTATE "tessera.quantizer.annotate"
typedef tessera_status_t (*tessera_ext_quantizer_annotate_fn_t)(void* self, const tessera_graph_t* graph,
                                                                 const tessera_annotation_api_t* api,
                                                                 tessera_annotations_t* annotations);

/* Note [Compiler plugin ABI]
 * A plugin of kind "compiler" offers TESSERA_EXT_COMPILER (ABI 1.2, the shape of ONNX Runtime's
 * plugin execution providers). The function returns the plugin's compiler table, or NULL; it takes
 * no argument because the table carries the `self` its functions take (the host's extension lookup
 * has no plugin `self` to pass). tessera::compile with `backend` naming the plugin:
 * 1. get_capability(self, graph, device, out_group_of_node): the plugin writes one entry per node of
 *    `graph` (node_count entries): a group id >= 0 for a call node it takes, -1 otherwise. `device`
 *    is the inputs' device ("my_hardware_device:0"). The host cuts each group into runs of
 *    consecutive call nodes; each run is one partition.
 * 2. compile(self, subgraph, device, out_executable): `subgraph` is one partition as a program of its
 *    own: its user inputs are the values the partition reads from outside (in order of first use),
 *    its outputs the values it produces that are read later or returned. Symbolic sizes stay
 *    symbolic. The executable belongs to the plugin until release.
 * 3. run(self, executable, inputs, num_inputs, outputs, num_outputs, stream): inputs in the
 *    subgraph's user-input order, outputs allocated by the host on `device` with the subgraph's
 *    output types evaluated for this call (contiguous); the plugin writes them. `stream` is the
 *    calling thread's current stream of the device (NULL: the default stream). The host moves an
 *    input to `device` only when it lives elsewhere. Runs may overlap on several threads.
 * 4. release(self, executable): once, when the compiled function is destroyed.
 * Every node no partition takes runs through the dispatcher, as in eager mode. A status other than
 * NULL fails the call with the plugin's message. */
#define TESSERA_EXT_COMPILER "tessera.compiler"

/* Note [Compiled artifact compatibility]
 * A program compiled ahead of time by a compiler plugin (tessera::compiler::CompiledProgram, saved
 * in a program file) carries the plugin's compatibility_info for its device. Loading it asks the
 * plugin, through validate_compatibility, whether that artifact still runs here, as ONNX Runtime's
 * ValidateCompiledModelCompatibilityInfo does: OPTIMAL runs it as it is; PREFER_RECOMPILE and
 * UNSUPPORTED recompile it (with a warning giving the verdict and both strings), and a loader that
 * may not recompile runs a PREFER_RECOMPILE artifact with a warning and refuses an UNSUPPORTED one,
 * naming the reason. The verdict values (ABI 1.3): */
typedef enum tessera_compatibility_t {
  TESSERA_COMPATIBILITY_OPTIMAL = 0,          /* made for this plugin and device as they are */
  TESSERA_COMPATIBILITY_PREFER_RECOMPILE = 1, /* still runs, but a recompile would be better */
  TESSERA_COMPATIBILITY_UNSUPPORTED = 2       /* cannot run here: recompile or refuse */
} tessera_compatibility_t;
typedef struct tessera_compiler_interface_t {
  uint32_t struct_size;
  uint32_t reserved_;
  void* self; /* passed back to every function below */
  tessera_status_t (*get_capability)(void* self, const tessera_graph_t* graph, const char* device,
                                     int32_t* out_group_of_node);
  tessera_status_t (*compile)(void* self, const tessera_graph_t* subgraph, const char* device,
                              void** out_executable);
  tessera_status_t (*run)(void* self, void* executable, const tessera_tensor_t* const* inputs, int32_t num_inputs,
                          const tessera_tensor_t* const* outputs, int32_t num_outputs, void* stream);
  void (*release)(void* self, void* executable);

  /* ---- ABI 1.3 (Note [Compiled artifact compatibility]) */
  /* (optional) Writes the plugin's compatibility string for artifacts it compiles for `device`
   * ("my_hw-compiler 1.4 sm90": compiler version, target, whatever decides whether its output still
   * runs) into `buffer` (NUL-terminated, truncated at capacity) and returns its length without the
   * NUL, like snprintf. Host default: artifacts carry no compatibility string and are never checked. */
  size_t (*compatibility_info)(void* self, const char* device, char* buffer, size_t capacity);
  /* (optional) Judges an artifact made with compatibility string `info` for `device`: writes a
   * tessera_compatibility_t to `out_verdict`. A status other than NULL counts as UNSUPPORTED with the
   * plugin's message as the reason. Host default: every artifact is OPTIMAL (today's behaviour). */
  tessera_status_t (*validate_compatibility)(void* self, const char* device, const char* info,
                                             int32_t* out_verdict);
} tessera_compiler_interface_t;
typedef const tessera_compiler_interface_t* (*tessera_ext_compiler_fn_t)(void);

/* The entry point, exported as TESSERA_PLUGIN_ENTRY_NAME. The plugin checks `host_abi_major`,
 * registers its kernels through `host`, and returns its header in `out_plugin` (static storage
 * or owned by the plugin until shutdown). `host` stays valid until shutdown. */
typedef tessera_status_t (*tessera_plugin_init_fn_t)(uint32_t host_abi_major, uint32_t host_abi_minor,
                                                     const tessera_host_api_t* host,
                                                     const tessera_plugin_t** out_plugin);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TESSERA_PLUGIN_ABI_H_ */
