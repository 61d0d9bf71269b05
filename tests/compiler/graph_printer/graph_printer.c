/* A compiler plugin in plain C that walks a graph through the graph ABI (Note [Graph ABI]) and
 * prints it in the text of ExportedProgram::graph_string() (Note [Graph text]). It is built out of
 * tree against the installed SDK (tools/ci/10_out_of_tree.sh) and in the test suite; the test
 * compares its text with graph_string(). Its extension "test.graph_print" writes the text into a
 * buffer like snprintf and returns its length. As a compiler it takes no node (every group -1), so
 * compile, run and release are never called; a compiler plugin must offer its table all the same,
 * or it fails to load. */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/plugin_abi.h"

static const tessera_host_api_t* g_host;

typedef struct {
  char* data;
  size_t len, cap;
} text_t;

static void put(text_t* t, const char* fmt, ...) {
  va_list ap;
  char small[256];
  int n;
  va_start(ap, fmt);
  n = vsnprintf(small, sizeof(small), fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (t->len + (size_t)n + 1 > t->cap) {
    size_t cap = (t->cap ? t->cap * 2 : 1024) + (size_t)n;
    char* grown = (char*)realloc(t->data, cap);
    if (!grown) return;
    t->data = grown;
    t->cap = cap;
  }
  if ((size_t)n < sizeof(small)) {
    memcpy(t->data + t->len, small, (size_t)n + 1);
  } else {
    va_start(ap, fmt);
    vsnprintf(t->data + t->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
  }
  t->len += (size_t)n;
}

static const char* const kDtypes[] = {"bool", "u8", "i8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64"};

static const char* dtype_name(int64_t d) { return d >= 0 && d < TESSERA_DTYPE_COUNT_ ? kDtypes[d] : "?"; }

static void put_value(text_t* t, const tessera_graph_api_t* api, const tessera_graph_t* g, int32_t v) {
  const char* name = api->value_name(g, v);
  if (name && name[0]) put(t, "%%%s", name);
  else put(t, "%%%d", (int)v);
}

static void put_type(text_t* t, const tessera_graph_api_t* api, const tessera_graph_t* g, int32_t v) {
  int32_t rank = api->value_rank(g, v), d;
  put(t, "%s[", dtype_name(api->value_dtype(g, v)));
  for (d = 0; d < rank; ++d) {
    tessera_graph_size_t size;
    memset(&size, 0, sizeof(size));
    size.struct_size = sizeof(size);
    if (api->value_size(g, v, d, &size) == NULL) put(t, "%s%s", d ? ", " : "", size.expr);
  }
  put(t, "] %s", api->value_device(g, v));
}

static void put_double(text_t* t, double v) {
  char buf[40];
  int prec;
  if (isnan(v)) {
    put(t, "nan");
    return;
  }
  if (isinf(v)) {
    put(t, v > 0 ? "inf" : "-inf");
    return;
  }
  for (prec = 1; prec <= 17; ++prec) {
    snprintf(buf, sizeof(buf), "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  put(t, "%s%s", buf, strpbrk(buf, ".eE") ? "" : ".0");
}

static void put_string(text_t* t, const char* s) {
  put(t, "\"");
  for (; *s; ++s) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') put(t, "\\%c", c);
    else if (c == '\n') put(t, "\\n");
    else if (c == '\t') put(t, "\\t");
    else if (c == '\r') put(t, "\\r");
    else if (c < 0x20 || c == 0x7f) put(t, "\\u%04x", c);
    else put(t, "%c", c);
  }
  put(t, "\"");
}

static void put_arg(text_t* t, const tessera_graph_api_t* api, const tessera_graph_t* g, int32_t n, int32_t a) {
  int32_t i, count;
  tessera_value_t c;
  switch (api->node_arg_kind(g, n, a)) {
    case TESSERA_ARG_TENSOR: put_value(t, api, g, api->node_arg_value(g, n, a, 0)); return;
    case TESSERA_ARG_TENSOR_LIST:
      count = api->node_arg_num_values(g, n, a);
      put(t, "[");
      for (i = 0; i < count; ++i) {
        if (i) put(t, ", ");
        put_value(t, api, g, api->node_arg_value(g, n, a, i));
      }
      put(t, "]");
      return;
    case TESSERA_ARG_NONE: put(t, "None"); return;
    default: break;
  }
  if (api->node_arg_constant(g, n, a, &c) != NULL) {
    put(t, "?");
    return;
  }
  switch (c.kind) {
    case TESSERA_VALUE_NONE: put(t, "None"); break;
    case TESSERA_VALUE_INT: put(t, "%lld", (long long)c.u.i); break;
    case TESSERA_VALUE_DOUBLE: put_double(t, c.u.d); break;
    case TESSERA_VALUE_BOOL: put(t, c.u.b ? "true" : "false"); break;
    case TESSERA_VALUE_INT_LIST:
      put(t, "[");
      for (i = 0; i < c.count; ++i) put(t, "%s%lld", i ? ", " : "", (long long)c.u.ints[i]);
      put(t, "]");
      break;
    case TESSERA_VALUE_STRING: put_string(t, c.u.s); break;
    case TESSERA_VALUE_DTYPE: put(t, "%s", dtype_name(c.u.i)); break;
    default: put(t, "?"); break;
  }
}

static size_t graph_print(void* self, const tessera_graph_t* g, char* buffer, size_t capacity) {
  const tessera_graph_api_t* api = g_host->graph;
  text_t t = {NULL, 0, 0};
  int32_t i, n, a;
  size_t len;
  static const char* const kInputKinds[] = {"", " parameter", " constant"};
  (void)self;
  put(&t, "graph(");
  for (i = 0; i < api->input_count(g); ++i) {
    int32_t kind = 0, value = -1;
    api->input(g, i, &kind, NULL, &value);
    if (i) put(&t, ", ");
    put_value(&t, api, g, value);
    put(&t, ": ");
    put_type(&t, api, g, value);
    put(&t, "%s", kind >= 0 && kind <= 2 ? kInputKinds[kind] : "");
  }
  put(&t, "):\n");
  for (n = 0; n < api->node_count(g); ++n) {
    int32_t kind = api->node_kind(g, n);
    if (kind == TESSERA_NODE_PLACEHOLDER) continue;
    if (kind == TESSERA_NODE_OUTPUT) {
      put(&t, "  return (");
      for (a = 0; a < api->node_num_args(g, n); ++a) {
        if (a) put(&t, ", ");
        put_arg(&t, api, g, n, a);
      }
      put(&t, ")\n");
      continue;
    }
    put(&t, "  ");
    for (i = 0; i < api->node_num_outputs(g, n); ++i) {
      int32_t v = api->node_output(g, n, i);
      if (i) put(&t, ", ");
      put_value(&t, api, g, v);
      put(&t, ": ");
      put_type(&t, api, g, v);
    }
    put(&t, " = %s(", api->node_target(g, n));
    for (a = 0; a < api->node_num_args(g, n); ++a) {
      if (a) put(&t, ", ");
      put_arg(&t, api, g, n, a);
    }
    put(&t, ")\n");
  }
  if (api->symbol_count(g) > 0) {
    put(&t, "ranges:");
    for (i = 0; i < api->symbol_count(g); ++i) {
      const char* name = NULL;
      int64_t lo = 0, hi = 0;
      api->symbol(g, i, &name, &lo, &hi);
      put(&t, "%s%s in [%lld, %lld]", i ? ", " : " ", name, (long long)lo, (long long)hi);
    }
    put(&t, "\n");
  }
  len = t.len;
  if (capacity > 0 && buffer) {
    size_t n_copy = len < capacity - 1 ? len : capacity - 1;
    if (t.data) memcpy(buffer, t.data, n_copy);
    buffer[n_copy] = '\0';
  }
  free(t.data);
  return len;
}

typedef size_t (*graph_print_fn_t)(void* self, const tessera_graph_t* g, char* buffer, size_t capacity);

static tessera_status_t get_capability(void* self, const tessera_graph_t* g, const char* device, int32_t* out_group) {
  int32_t i, n = g_host->graph->node_count(g);
  (void)self;
  (void)device;
  for (i = 0; i < n; ++i) out_group[i] = -1;
  return NULL;
}

static tessera_status_t compile(void* self, const tessera_graph_t* g, const char* device, void** out_executable) {
  (void)self;
  (void)g;
  (void)device;
  *out_executable = NULL;
  return g_host->status_make(TESSERA_STATUS_UNIMPLEMENTED, "graph_printer: takes no node, compiles nothing");
}

static tessera_status_t run(void* self, void* executable, const tessera_tensor_t* const* inputs, int32_t num_inputs,
                            const tessera_tensor_t* const* outputs, int32_t num_outputs, void* stream) {
  (void)self;
  (void)executable;
  (void)inputs;
  (void)num_inputs;
  (void)outputs;
  (void)num_outputs;
  (void)stream;
  return g_host->status_make(TESSERA_STATUS_UNIMPLEMENTED, "graph_printer: has no executables");
}

static void release(void* self, void* executable) {
  (void)self;
  (void)executable;
}

static const tessera_compiler_interface_t kCompiler = {
    .struct_size = sizeof(tessera_compiler_interface_t),
    .reserved_ = 0,
    .self = NULL,
    .get_capability = get_capability,
    .compile = compile,
    .run = run,
    .release = release,
};

static const tessera_compiler_interface_t* compiler_table(void) { return &kCompiler; }

static tessera_proc_t get_proc_address(void* self, const char* name) {
  (void)self;
  if (strcmp(name, "test.graph_print") == 0) return (tessera_proc_t)(graph_print_fn_t)graph_print;
  if (strcmp(name, TESSERA_EXT_COMPILER) == 0) return (tessera_proc_t)(tessera_ext_compiler_fn_t)compiler_table;
  return NULL;
}

static const tessera_plugin_t kPlugin = {
    .struct_size = sizeof(tessera_plugin_t),
    .abi_major = TESSERA_ABI_MAJOR,
    .abi_minor = TESSERA_ABI_MINOR,
    .reserved_ = 0,
    .name = "graph_printer",
    .version = "0.1.0",
    .features = 0,
    .self = NULL,
    .device = NULL,
    .shutdown = NULL,
    .get_proc_address = get_proc_address,
};

TESSERA_PLUGIN_EXPORT tessera_status_t tessera_plugin_init(uint32_t host_abi_major, uint32_t host_abi_minor,
                                                           const tessera_host_api_t* host,
                                                           const tessera_plugin_t** out_plugin) {
  (void)host_abi_minor;
  if (host_abi_major != TESSERA_ABI_MAJOR)
    return host->status_make(TESSERA_STATUS_ABI_MISMATCH, "graph_printer: built for ABI major 1");
  if (!TESSERA_ABI_HAS_FIELD(host, tessera_host_api_t, graph) || !host->graph)
    return host->status_make(TESSERA_STATUS_ABI_MISMATCH,
                             "graph_printer: the runtime has no graph ABI (needs plugin ABI 1.2 or later)");
  g_host = host;
  *out_plugin = &kPlugin;
  return NULL;
}
