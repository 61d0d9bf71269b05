// Quantizers in plugins: the host side of TESSERA_EXT_QUANTIZER_ANNOTATE (plugin_abi.h). The plugin
// records its decisions through tessera_annotation_api_t into a pending table; when annotate returns
// they are committed through Annotations::set, so composition rules and prepare's validation apply
// to them as to built-in quantizers.
#include <algorithm>

#include "tessera/compiler/graph_abi.h"
#include "tessera/compiler/quantize.h"
#include "tessera/dispatcher.h"
#include "tessera/error.h"
#include "tessera/plugin_loader.h"

struct tessera_annotations_s {
  const tessera::compiler::ExportedProgram* program;
  const tessera::quantization::Annotations* earlier;
  std::map<int32_t, tessera::quantization::NodeAnnotation> pending;
  std::string plugin;
};

namespace tessera::quantization {

namespace {

using compiler::Argument;
using compiler::NodeKind;

tessera_status_t invalid(const tessera_annotations_t* a, const std::string& message) {
  return kernel_status_make(TESSERA_STATUS_INVALID_ARGUMENT, (a->plugin + ": " + message).c_str());
}

// NULL when `node` is a call of the graph; else the status saying why not.
tessera_status_t check_node(const tessera_annotations_t* a, int32_t node) {
  const auto& nodes = a->program->graph.nodes;
  if (node < 0 || size_t(node) >= nodes.size() || nodes[size_t(node)].kind != NodeKind::Call)
    return invalid(a, "node " + std::to_string(node) + " is not a call of the graph (" + std::to_string(nodes.size()) +
                          " nodes)");
  return nullptr;
}

tessera_status_t check_input(const tessera_annotations_t* a, int32_t node, int32_t value) {
  if (tessera_status_t s = check_node(a, node)) return s;
  for (const Argument& arg : a->program->graph.nodes[size_t(node)].args)
    if (std::find(arg.values.begin(), arg.values.end(), value) != arg.values.end()) return nullptr;
  return invalid(a, "value " + std::to_string(value) + " is not an input of node " + std::to_string(node) + " ('" +
                        a->program->graph.nodes[size_t(node)].target + "')");
}

tessera_status_t to_spec(const tessera_annotations_t* a, const tessera_quant_spec_t* in, QuantizationSpec* out) {
  if (!in || in->struct_size < sizeof(tessera_quant_spec_t)) return invalid(a, "a null or short tessera_quant_spec_t");
  if (in->dtype != TESSERA_DTYPE_QINT8 && in->dtype != TESSERA_DTYPE_QUINT8)
    return invalid(a, "spec dtype " + std::to_string(in->dtype) + " is not TESSERA_DTYPE_QINT8 or TESSERA_DTYPE_QUINT8");
  if (in->qscheme < TESSERA_QSCHEME_PER_TENSOR_AFFINE || in->qscheme > TESSERA_QSCHEME_PER_CHANNEL_SYMMETRIC)
    return invalid(a, "spec qscheme " + std::to_string(in->qscheme) + " is not a tessera_qscheme_t");
  if (in->observer < TESSERA_OBSERVER_MIN_MAX || in->observer > TESSERA_OBSERVER_HISTOGRAM)
    return invalid(a, "spec observer " + std::to_string(in->observer) + " is not a tessera_observer_kind_t");
  *out = {DType(in->dtype), Scheme(in->qscheme), ObserverKind(in->observer), in->ch_axis};
  return nullptr;
}

static_assert(int(Scheme::PerTensorAffine) == TESSERA_QSCHEME_PER_TENSOR_AFFINE &&
              int(Scheme::PerTensorSymmetric) == TESSERA_QSCHEME_PER_TENSOR_SYMMETRIC &&
              int(Scheme::PerChannelAffine) == TESSERA_QSCHEME_PER_CHANNEL_AFFINE &&
              int(Scheme::PerChannelSymmetric) == TESSERA_QSCHEME_PER_CHANNEL_SYMMETRIC);
static_assert(int(ObserverKind::MinMax) == TESSERA_OBSERVER_MIN_MAX &&
              int(ObserverKind::MovingAverageMinMax) == TESSERA_OBSERVER_MOVING_AVERAGE_MIN_MAX &&
              int(ObserverKind::PerChannelMinMax) == TESSERA_OBSERVER_PER_CHANNEL_MIN_MAX &&
              int(ObserverKind::Histogram) == TESSERA_OBSERVER_HISTOGRAM);
static_assert(int(DType::QInt8) == TESSERA_DTYPE_QINT8 && int(DType::QUInt8) == TESSERA_DTYPE_QUINT8);

int32_t is_annotated(const tessera_annotations_t* a, int32_t node) {
  return a && (a->earlier->annotated(node) || a->pending.count(node)) ? 1 : 0;
}

tessera_status_t keep_float(tessera_annotations_t* a, int32_t node) {
  if (tessera_status_t s = check_node(a, node)) return s;
  a->pending[node];
  return nullptr;
}

std::string spec_str(const SpecOrShared& s) {
  if (const auto* q = std::get_if<QuantizationSpec>(&s)) return q->str();
  const QuantPoint& w = std::get<SharedSpec>(s).with;
  return "shared with value " + std::to_string(w.value) +
         (w.consumer < 0 ? std::string() : " at node " + std::to_string(w.consumer));
}

// Sets one edge's spec. An edge takes one spec: giving it the same one again is harmless, a
// different one is the plugin's mistake (it would silently replace the first), so it is refused.
tessera_status_t set_edge(tessera_annotations_t* a, std::optional<SpecOrShared>& slot, SpecOrShared spec,
                          const std::string& edge) {
  if (slot && !(*slot == spec))
    return invalid(a, edge + " already has the spec " + spec_str(*slot) + "; a second, different spec (" +
                          spec_str(spec) + ") is refused: give each edge one spec");
  slot = std::move(spec);
  return nullptr;
}

tessera_status_t set_input(tessera_annotations_t* a, int32_t node, int32_t value, SpecOrShared spec) {
  std::map<ValueId, SpecOrShared>& inputs = a->pending[node].inputs;
  std::optional<SpecOrShared> slot;
  if (auto it = inputs.find(value); it != inputs.end()) slot = it->second;
  if (tessera_status_t s = set_edge(a, slot, std::move(spec),
                                    "the input edge of value " + std::to_string(value) + " into node " + std::to_string(node)))
    return s;
  inputs.insert_or_assign(value, std::move(*slot));
  return nullptr;
}

tessera_status_t input_spec(tessera_annotations_t* a, int32_t node, int32_t value, const tessera_quant_spec_t* spec) {
  if (tessera_status_t s = check_input(a, node, value)) return s;
  QuantizationSpec q;
  if (tessera_status_t s = to_spec(a, spec, &q)) return s;
  return set_input(a, node, value, q);
}

tessera_status_t input_shared(tessera_annotations_t* a, int32_t node, int32_t value, int32_t with_value,
                              int32_t with_consumer) {
  if (tessera_status_t s = check_input(a, node, value)) return s;
  return set_input(a, node, value, SharedSpec{{with_value, with_consumer < 0 ? -1 : with_consumer}});
}

tessera_status_t output_spec(tessera_annotations_t* a, int32_t node, const tessera_quant_spec_t* spec) {
  if (tessera_status_t s = check_node(a, node)) return s;
  QuantizationSpec q;
  if (tessera_status_t s = to_spec(a, spec, &q)) return s;
  return set_edge(a, a->pending[node].output, q, "the output of node " + std::to_string(node));
}

tessera_status_t output_shared(tessera_annotations_t* a, int32_t node, int32_t with_value, int32_t with_consumer) {
  if (tessera_status_t s = check_node(a, node)) return s;
  return set_edge(a, a->pending[node].output, SharedSpec{{with_value, with_consumer < 0 ? -1 : with_consumer}},
                  "the output of node " + std::to_string(node));
}

const tessera_annotation_api_t kAnnotationApi = {
    .struct_size = sizeof(tessera_annotation_api_t),
    .is_annotated = is_annotated,
    .keep_float = keep_float,
    .input_spec = input_spec,
    .input_shared = input_shared,
    .output_spec = output_spec,
    .output_shared = output_shared,
};

class PluginQuantizer : public Quantizer {
 public:
  PluginQuantizer(std::string plugin, tessera_ext_quantizer_annotate_fn_t fn, void* self)
      : plugin_(std::move(plugin)), fn_(fn), self_(self) {}
  std::string name() const override { return plugin_; }

  void annotate(const ExportedProgram& ep, Annotations& annotations) const override {
    ExportedProgram view = ep;  // the handle takes a mutable program; the plugin sees it read-only
    compiler::GraphHandle handle(view, false);
    tessera_annotations_t table{&ep, &annotations, {}, plugin_};
    // Note [Plugin status to error] (plugin_loader.h).
    throw_status(fn_(self_, handle.get(), &kAnnotationApi, &table), "quantizer plugin '" + plugin_ + "' failed to annotate");
    for (auto& [node, a] : table.pending) annotations.set(ep, node, std::move(a), plugin_);
  }

 private:
  std::string plugin_;
  tessera_ext_quantizer_annotate_fn_t fn_;
  void* self_;
};

}  // namespace

std::unique_ptr<Quantizer> plugin_quantizer(const std::string& plugin) {
  auto fn = extension_of_kind<tessera_ext_quantizer_annotate_fn_t>(PluginKind::Quantizer, plugin,
                                                                     {.who = "plugin_quantizer"});
  return std::make_unique<PluginQuantizer>(plugin, fn, nullptr);
}

}  // namespace tessera::quantization
