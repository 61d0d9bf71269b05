// The accelerator's compiler plugin (CompilerBase of sdk_graph.hpp): chains of elementwise float32 ops
// on the device, each run as ONE launch through its driver (fused.h, Note [Shared driver library]).
#include <my_hardware_device/fused.h>
#include <tessera/op_names.h>
#include <tessera/sdk.hpp>

#include <cstring>
#include <string>

#define MHD_DEVICE "my_hardware_device"
#define MHD_COMPILER "my_hardware_device_compiler"

namespace {
using tessera::sdk::GraphView, tessera::sdk::TensorSpan;

int fused_op(const char* target) {  // mhd_fused_op_t (the order of kOps), -1: none
  namespace op = tessera::op;
  static const char* const kOps[] = {op::add_Tensor::name, op::sub_Tensor::name, op::mul_Tensor::name,
                                     op::div_Tensor::name, op::relu::name,       op::neg::name,
                                     op::exp::name,        op::tanh::name,       op::sigmoid::name};
  for (int i = 0; i < MHD_FUSED_NUM_OPS; ++i)
    if (std::strcmp(target, kOps[i]) == 0) return i;
  return -1;
}
int operands(int op) { return op <= MHD_FUSED_DIV ? 2 : 1; }

// A compiled partition: steps and outputs over GraphView::value_registers().
struct Chain { int device = 0; std::vector<mhd_fused_step_t> steps; std::vector<int32_t> output_regs; };

// For MHD_DEVICE only; artifacts carry "mhd-compiler 1.4 mhd-isa1" (Note [Versioned compatibility
// strings]). Test hook: MHD_COMPILER_COMPATIBILITY replaces that string (read at each call), so a
// test can make artifacts "from another compiler version" with the real plugin.
class Compiler final : public tessera::sdk::CompilerBase<Chain> {
 public:
  Compiler() : CompilerBase(MHD_DEVICE, {{"mhd-compiler", 1, 4, "mhd-isa1"}}, "MHD_COMPILER_COMPATIBILITY") {}
  bool takes(const GraphView& g, int32_t node, const char*) override {
    const int op = fused_op(g.target(node));
    return op >= 0 && g.is_elementwise(node, operands(op)) && g.dtype(g.output(node)) == TESSERA_DTYPE_FLOAT32;
  }

  std::unique_ptr<Chain> compile(const GraphView& g, const char* device) override {
    auto chain = std::make_unique<Chain>(Chain{tessera::sdk::device_index_of(device, MHD_DEVICE), {}, {}});
    const std::vector<int32_t> reg = g.value_registers();
    for (int32_t node = 0; node < g.node_count(); ++node) {
      if (!g.is_call(node)) continue;
      TESSERA_SDK_CHECK(takes(g, node, nullptr), MHD_COMPILER ": cannot fuse " + std::string(g.target(node)));
      mhd_fused_step_t s{.op = fused_op(g.target(node)), .a = -1, .b = -1, .scalar_a = 0, .scalar_b = 0, .alpha = 1};
      for (int32_t k = 0; k < operands(s.op); ++k) {
        const std::optional<double> number = g.arg_number(node, k);  // a constant operand, else a tensor
        (k ? s.b : s.a) = number ? -1 : reg.at(size_t(g.arg_value(node, k)));
        (k ? s.scalar_b : s.scalar_a) = float(number.value_or(0));
      }
      if (s.op <= MHD_FUSED_SUB && g.num_args(node) > 2) s.alpha = float(*g.arg_number(node, 2));
      chain->steps.push_back(s);
    }
    for (int32_t value : g.output_values()) chain->output_regs.push_back(reg.at(size_t(value)));
    return chain;
  }

  void run(Chain& c, TensorSpan inputs, TensorSpan outputs, void* stream) override {
    tessera::sdk::ScopedSpan span("fused partition", "partition", c.device);  // Note [Plugin spans]
    TESSERA_SDK_CHECK(outputs.size() == int32_t(c.output_regs.size()), MHD_COMPILER ": output count");
    const int64_t numel = outputs.size() > 0 ? outputs[0].numel() : 0;
    inputs.require_dense(MHD_COMPILER ": input", TESSERA_DTYPE_FLOAT32, numel, c.device);
    outputs.require_dense(MHD_COMPILER ": output", TESSERA_DTYPE_FLOAT32, numel, c.device);
    std::vector<mhd_fused_buffer_t> in, out;
    for (int32_t i = 0; i < inputs.size(); ++i) in.push_back({inputs[i].handle(), uint64_t(inputs[i].byte_offset())});
    for (int32_t i = 0; i < outputs.size(); ++i) out.push_back({outputs[i].handle(), uint64_t(outputs[i].byte_offset())});
    const mhd_fused_program_t program{.struct_size = sizeof(mhd_fused_program_t), .num_inputs = inputs.size(),
                                      .num_steps = int32_t(c.steps.size()), .num_outputs = outputs.size(),
                                      .steps = c.steps.data(), .output_regs = c.output_regs.data()};
    char error[512] = "";
    TESSERA_SDK_CHECK(mhd_fused_launch(c.device, stream, &program, in.data(), out.data(), numel, error, sizeof error) == 0,
                      MHD_COMPILER ": " + std::string(error));
  }
} g_compiler;
}  // namespace

TESSERA_SDK_COMPILER_PLUGIN(g_compiler, MHD_COMPILER, "0.1.0")
