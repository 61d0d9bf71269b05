// A quantizer plugin whose annotations the int8 kernels cannot take: every linear gets int8
// per-tensor symmetric activations (the kernels take uint8 activations), so convert quantizes its
// weight and lower_to_int8 leaves it as it is. `tessera check --quantizer` must fail it, naming the
// nodes left over (tests/cts/check_cli_test.py, scenario quantizers).
#include <string>
#include <tessera/sdk.hpp>

namespace {
using tessera::sdk::GraphView;

class Unlowerable final : public tessera::sdk::QuantizerBase {
 public:
  void annotate(const GraphView& g, tessera::sdk::Annotations& annotations) override {
    constexpr tessera_quant_spec_t activation =
        tessera::sdk::quant_spec(TESSERA_DTYPE_QINT8, TESSERA_QSCHEME_PER_TENSOR_SYMMETRIC, TESSERA_OBSERVER_MIN_MAX);
    constexpr tessera_quant_spec_t weight = tessera::sdk::quant_spec(
        TESSERA_DTYPE_QINT8, TESSERA_QSCHEME_PER_CHANNEL_SYMMETRIC, TESSERA_OBSERVER_PER_CHANNEL_MIN_MAX);
    for (int32_t n = 0; n < g.node_count(); ++n) {
      if (!g.is_call(n) || std::string(g.target(n)).rfind("linear", 0) != 0 || annotations.is_annotated(n)) continue;
      annotations.input_spec(n, g.arg_value(n, 0), activation);
      annotations.input_spec(n, g.arg_value(n, 1), weight);
      annotations.output_spec(n, activation);
    }
  }
} g_quantizer;
}  // namespace

TESSERA_SDK_QUANTIZER_PLUGIN(g_quantizer, "unlowerable_quantizer", "0.1.0")
