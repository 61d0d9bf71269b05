// The accelerator's compiler plugin (CompilerBase of sdk_graph.hpp): chains of elementwise float32 ops
// on the device, each run as ONE launch through its driver (fused.h, Note [Shared driver library]).
#include <my_hardware_device/fused.h>
#include <tessera/sdk.hpp>

#include <cstdio>
#include <string>

#define MHD_DEVICE "my_hardware_device"
#define MHD_COMPILER "my_hardware_device_compiler"

namespace {
using tessera::sdk::GraphView, tessera::sdk::TensorSpan;

int fused_op(const std::string& target) {  // mhd_fused_op_t, -1: none (add.Scalar: add of a constant)
  static const std::string kOps[] = {"add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor", "relu",
                                     "neg",        "exp",        "tanh",       "sigmoid"};
  for (int op = 0; op < MHD_FUSED_NUM_OPS; ++op)
    if (target == kOps[op] || (op <= MHD_FUSED_DIV && target == kOps[op].substr(0, 4) + "Scalar")) return op;
  return -1;
}
int operands(int op) { return op <= MHD_FUSED_DIV ? 2 : 1; }

struct Chain {
  int device = 0;
  std::vector<mhd_fused_step_t> steps;  // over GraphView::value_registers()
  std::vector<int32_t> output_regs;
};

// Note [Accelerator compatibility string]
// "mhd-compiler <major>.<minor> <isa>": what the artifacts this compiler makes depend on. Verdict on
// a stored string: another name, ISA or major, or a newer minor -> UNSUPPORTED; an older minor of
// the same major -> PREFER_RECOMPILE (still runs; the newer compiler fuses better); equal -> OPTIMAL.
// Test hook: MHD_COMPILER_COMPATIBILITY replaces the string this compiler reports (read at each
// call), so a test can make artifacts "from another compiler version" with real dlopen.
constexpr const char* kCompatibility = "mhd-compiler 1.4 mhd-isa1";

struct CompatibilityParts {
  std::string name, isa;
  int major = -1, minor = -1;
};
CompatibilityParts parse_compatibility(const std::string& text) {
  CompatibilityParts p;
  char name[64] = "", isa[64] = "";
  if (std::sscanf(text.c_str(), "%63s %d.%d %63s", name, &p.major, &p.minor, isa) == 4) {
    p.name = name;
    p.isa = isa;
  }
  return p;
}

class Compiler final : public tessera::sdk::CompilerBase<Chain> {
  std::string compatibility_info(const char* device) override {
    if (tessera::sdk::device_index_of(device, MHD_DEVICE) < 0) return {};
    const tessera_host_api_t* host = tessera::sdk::host_api();
    const char* hook = host ? host->getenv("MHD_COMPILER_COMPATIBILITY") : nullptr;
    return hook && *hook ? hook : kCompatibility;
  }

  tessera_compatibility_t validate_compatibility(const char* device, const char* info) override {
    const CompatibilityParts now = parse_compatibility(compatibility_info(device));
    const CompatibilityParts then = parse_compatibility(info);
    if (then.name.empty() || then.name != now.name || then.isa != now.isa || then.major != now.major ||
        then.minor > now.minor)
      return TESSERA_COMPATIBILITY_UNSUPPORTED;
    return then.minor < now.minor ? TESSERA_COMPATIBILITY_PREFER_RECOMPILE : TESSERA_COMPATIBILITY_OPTIMAL;
  }

  bool takes(const GraphView& g, int32_t node, const char* device) override {
    const int op = fused_op(g.target(node));
    return op >= 0 && g.is_elementwise(node, operands(op)) &&
           g.dtype(g.output(node)) == TESSERA_DTYPE_FLOAT32 &&
           tessera::sdk::device_index_of(device, MHD_DEVICE) >= 0;
  }

  std::unique_ptr<Chain> compile(const GraphView& g, const char* device) override {
    auto chain = std::make_unique<Chain>(Chain{tessera::sdk::device_index_of(device, MHD_DEVICE), {}, {}});
    TESSERA_SDK_CHECK(chain->device >= 0, MHD_COMPILER ": compiles for " MHD_DEVICE " only");
    const std::vector<int32_t> reg = g.value_registers();
    for (int32_t node = 0; node < g.node_count(); ++node) {
      if (!g.is_call(node)) continue;
      TESSERA_SDK_CHECK(takes(g, node, device), MHD_COMPILER ": cannot fuse " + std::string(g.target(node)));
      mhd_fused_step_t s{
          .op = fused_op(g.target(node)), .a = -1, .b = -1, .scalar_a = 0, .scalar_b = 0, .alpha = 1};
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
    std::vector<mhd_fused_buffer_t> buffers[2];
    for (TensorSpan side : {inputs, outputs})
      for (int32_t i = 0; i < side.size(); ++i)
        buffers[side.data() == outputs.data()].push_back({side[i].handle(), uint64_t(side[i].byte_offset())});
    const mhd_fused_program_t program{.struct_size = sizeof(mhd_fused_program_t),
                                      .num_inputs = inputs.size(),
                                      .num_steps = int32_t(c.steps.size()),
                                      .num_outputs = outputs.size(),
                                      .steps = c.steps.data(),
                                      .output_regs = c.output_regs.data()};
    char error[512] = "";
    TESSERA_SDK_CHECK(mhd_fused_launch(c.device, stream, &program, buffers[0].data(), buffers[1].data(),
                                       numel, error, sizeof error) == 0,
                      MHD_COMPILER ": " + std::string(error));
  }
} g_compiler;
}  // namespace

TESSERA_SDK_COMPILER_PLUGIN(g_compiler, MHD_COMPILER, "0.1.0")
