// A quantizer plugin with a mistake: it gives the activation edge of every linear two different
// specs. The host refuses the second (Note [Quantizer plugin ABI]) instead of letting it replace the
// first; test_quant_plugin.cpp checks the message.
#include <string>
#include <tessera/sdk.hpp>

namespace {
using tessera::sdk::GraphView;

class TwoSpecs final : public tessera::sdk::QuantizerBase {
 public:
  void annotate(const GraphView& g, tessera::sdk::Annotations& annotations) override {
    constexpr tessera_quant_spec_t u8 =
        tessera::sdk::quant_spec(TESSERA_DTYPE_QUINT8, TESSERA_QSCHEME_PER_TENSOR_AFFINE, TESSERA_OBSERVER_MIN_MAX);
    constexpr tessera_quant_spec_t s8 =
        tessera::sdk::quant_spec(TESSERA_DTYPE_QINT8, TESSERA_QSCHEME_PER_TENSOR_SYMMETRIC, TESSERA_OBSERVER_MIN_MAX);
    for (int32_t n = 0; n < g.node_count(); ++n) {
      if (!g.is_call(n) || std::string(g.target(n)).rfind("linear", 0) != 0) continue;
      annotations.input_spec(n, g.arg_value(n, 0), u8);
      annotations.input_spec(n, g.arg_value(n, 0), u8);  // the same again: harmless
      annotations.input_spec(n, g.arg_value(n, 0), s8);  // a different one: refused
    }
  }
} g_quantizer;
}  // namespace

TESSERA_SDK_QUANTIZER_PLUGIN(g_quantizer, "two_specs_quantizer", "0.1.0")
