/* An out-of-tree quantizer plugin in plain C (docs/quantization.md, "Writing a quantizer"): the
 * first and the last linear layers of a program stay in float32, the linear layers between them are
 * quantized as the x86 quantizer does (uint8 per-tensor affine activations with min-max observers,
 * int8 per-channel symmetric weights, a following relu fused: only its output is quantized). It
 * reads the graph through host->graph and records its decisions through the annotation table. */
#include <string.h>

#include "tessera/plugin_abi.h"

static const tessera_host_api_t* g_host;

static int is_linear(const tessera_graph_api_t* g, const tessera_graph_t* graph, int32_t node) {
  const char* target = g->node_target(graph, node);
  return g->node_kind(graph, node) == TESSERA_NODE_CALL && target && strncmp(target, "linear", 6) == 0 &&
         (target[6] == '\0' || target[6] == '.');
}

/* The one call that reads `value`, or -1 when none or several do (or it is returned). */
static int32_t sole_reader(const tessera_graph_api_t* g, const tessera_graph_t* graph, int32_t value) {
  int32_t reader = -1, n, a, k, count = 0, nodes = g->node_count(graph);
  for (n = 0; n < nodes; ++n)
    for (a = 0; a < g->node_num_args(graph, n); ++a)
      for (k = 0; k < g->node_arg_num_values(graph, n, a); ++k)
        if (g->node_arg_value(graph, n, a, k) == value) {
          ++count;
          reader = n;
        }
  return count == 1 && g->node_kind(graph, reader) == TESSERA_NODE_CALL ? reader : -1;
}

static tessera_status_t annotate(void* self, const tessera_graph_t* graph, const tessera_annotation_api_t* api,
                                 tessera_annotations_t* annotations) {
  const tessera_graph_api_t* g = g_host->graph;
  const tessera_quant_spec_t activation = {sizeof(tessera_quant_spec_t), TESSERA_DTYPE_QUINT8,
                                           TESSERA_QSCHEME_PER_TENSOR_AFFINE, TESSERA_OBSERVER_MIN_MAX, 0};
  const tessera_quant_spec_t weight = {sizeof(tessera_quant_spec_t), TESSERA_DTYPE_QINT8,
                                       TESSERA_QSCHEME_PER_CHANNEL_SYMMETRIC, TESSERA_OBSERVER_PER_CHANNEL_MIN_MAX, 0};
  int32_t first = -1, last = -1, n, nodes = g->node_count(graph);
  tessera_status_t s;
  (void)self;
  for (n = 0; n < nodes; ++n)
    if (is_linear(g, graph, n)) {
      if (first < 0) first = n;
      last = n;
    }
  for (n = 0; n < nodes; ++n) {
    int32_t out, reader, target_node;
    if (!is_linear(g, graph, n) || api->is_annotated(annotations, n)) continue;
    if (n == first || n == last) {
      if ((s = api->keep_float(annotations, n)) != NULL) return s;
      continue;
    }
    if ((s = api->input_spec(annotations, n, g->node_arg_value(graph, n, 0, 0), &activation)) != NULL) return s;
    if ((s = api->input_spec(annotations, n, g->node_arg_value(graph, n, 1, 0), &weight)) != NULL) return s;
    out = g->node_output(graph, n, 0);
    reader = sole_reader(g, graph, out);
    target_node = n;
    if (reader >= 0 && strcmp(g->node_target(graph, reader), "relu") == 0 && !api->is_annotated(annotations, reader))
      target_node = reader;
    if ((s = api->output_spec(annotations, target_node, &activation)) != NULL) return s;
  }
  return NULL;
}

static tessera_proc_t get_proc_address(void* self, const char* name) {
  (void)self;
  if (strcmp(name, TESSERA_EXT_QUANTIZER_ANNOTATE) == 0)
    return (tessera_proc_t)(tessera_ext_quantizer_annotate_fn_t)annotate;
  return NULL;
}

static const tessera_plugin_t kPlugin = {
    /* .struct_size = */ sizeof(tessera_plugin_t),
    /* .abi_major = */ TESSERA_ABI_MAJOR,
    /* .abi_minor = */ TESSERA_ABI_MINOR,
    /* .reserved_ = */ 0,
    /* .name = */ "keep_ends_quantizer",
    /* .version = */ "0.1.0",
    /* .features = */ 0,
    /* .self = */ NULL,
    /* .device = */ NULL,
    /* .shutdown = */ NULL,
    /* .get_proc_address = */ get_proc_address,
};

TESSERA_PLUGIN_EXPORT tessera_status_t tessera_plugin_init(uint32_t host_abi_major, uint32_t host_abi_minor,
                                                           const tessera_host_api_t* host,
                                                           const tessera_plugin_t** out_plugin) {
  (void)host_abi_minor;
  if (host_abi_major != TESSERA_ABI_MAJOR)
    return host->status_make(TESSERA_STATUS_ABI_MISMATCH, "keep_ends_quantizer: built for ABI major 1");
  if (!TESSERA_ABI_HAS_FIELD(host, tessera_host_api_t, graph) || !host->graph)
    return host->status_make(TESSERA_STATUS_ABI_MISMATCH,
                             "keep_ends_quantizer: the runtime has no graph ABI (needs plugin ABI 1.2 or later)");
  g_host = host;
  *out_plugin = &kPlugin;
  return NULL;
}
