// An out-of-tree quantizer plugin (docs/quantization.md, "Writing a quantizer"; QuantizerBase of
// tessera/sdk_graph.hpp): the first and the last linear layers of a program stay in float32, the
// linear layers between them are quantized as the x86 quantizer does (uint8 per-tensor affine
// activations with min-max observers, int8 per-channel symmetric weights, a following relu fused:
// only its output is quantized). It reads the graph through GraphView and records its decisions
// through the annotation table.
#include <string>
#include <tessera/sdk.hpp>

namespace {
using tessera::sdk::GraphView;

bool is_linear(const GraphView& g, int32_t node) {
  const std::string target = g.is_call(node) ? g.target(node) : "";
  return target == "linear" || target.rfind("linear.", 0) == 0;
}

class KeepEnds final : public tessera::sdk::QuantizerBase {
 public:
  void annotate(const GraphView& g, tessera::sdk::Annotations& annotations) override {
    constexpr tessera_quant_spec_t activation = tessera::sdk::quant_spec(
        TESSERA_DTYPE_QUINT8, TESSERA_QSCHEME_PER_TENSOR_AFFINE, TESSERA_OBSERVER_MIN_MAX);
    constexpr tessera_quant_spec_t weight = tessera::sdk::quant_spec(
        TESSERA_DTYPE_QINT8, TESSERA_QSCHEME_PER_CHANNEL_SYMMETRIC, TESSERA_OBSERVER_PER_CHANNEL_MIN_MAX);
    int32_t first = -1, last = -1;
    for (int32_t n = 0; n < g.node_count(); ++n)
      if (is_linear(g, n)) {
        if (first < 0) first = n;
        last = n;
      }
    for (int32_t n = 0; n < g.node_count(); ++n) {
      if (!is_linear(g, n) || annotations.is_annotated(n)) continue;
      if (n == first || n == last) {
        annotations.keep_float(n);
        continue;
      }
      annotations.input_spec(n, g.arg_value(n, 0), activation);
      annotations.input_spec(n, g.arg_value(n, 1), weight);
      // A relu that alone reads the output is fused: only its output is quantized.
      const std::vector<int32_t> readers = g.readers(g.output(n));
      const bool relu = readers.size() == 1 && g.is_call(readers[0]) &&
                        std::string(g.target(readers[0])) == "relu" && !annotations.is_annotated(readers[0]);
      annotations.output_spec(relu ? readers[0] : n, activation);
    }
  }
} g_quantizer;
}  // namespace

TESSERA_SDK_QUANTIZER_PLUGIN(g_quantizer, "keep_ends_quantizer", "0.1.0")
