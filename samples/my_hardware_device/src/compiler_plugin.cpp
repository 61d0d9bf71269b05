// The reference accelerator's compiler plugin (kind "compiler", Note [Compiler plugin ABI] in
// plugin_abi.h): it takes chains of elementwise float32 ops whose values live on the accelerator
// and runs each chain as ONE launch on the stream it is given, through the accelerator's driver
// interface (include/my_hardware_device/fused.h; Note [Shared driver library] in fused.cpp).
// The device counts the launches ("fused_launches" in its properties).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <my_hardware_device/fused.h>
#include <tessera/sdk.hpp>

#ifndef MHD_DEVICE_NAME
#define MHD_DEVICE_NAME "my_hardware_device"
#endif
#ifndef MHD_COMPILER_NAME
#define MHD_COMPILER_NAME "my_hardware_device_compiler"
#endif
#ifndef MHD_PLUGIN_VERSION
#define MHD_PLUGIN_VERSION "0.1.0"
#endif

namespace mhd_compiler {
namespace {

using tessera::sdk::make_status;

const tessera_graph_api_t& graph_api() { return *tessera::sdk::host_api()->graph; }

struct OpName {
  const char* target;
  mhd_fused_op_t op;
};
constexpr OpName kOps[] = {
    {"add.Tensor", MHD_FUSED_ADD},  {"add.Scalar", MHD_FUSED_ADD}, {"sub.Tensor", MHD_FUSED_SUB},
    {"sub.Scalar", MHD_FUSED_SUB},  {"mul.Tensor", MHD_FUSED_MUL}, {"mul.Scalar", MHD_FUSED_MUL},
    {"div.Tensor", MHD_FUSED_DIV},  {"div.Scalar", MHD_FUSED_DIV}, {"relu", MHD_FUSED_RELU},
    {"neg", MHD_FUSED_NEG},         {"exp", MHD_FUSED_EXP},        {"tanh", MHD_FUSED_TANH},
    {"sigmoid", MHD_FUSED_SIGMOID},
};

// -1 for an op the device does not fuse.
int fused_op(const char* target) {
  for (const OpName& o : kOps)
    if (std::strcmp(target, o.target) == 0) return o.op;
  return -1;
}
bool binary(int op) { return op <= MHD_FUSED_DIV; }

// The device index of "my_hardware_device:<index>", or -1 for another device.
int device_index(const char* device) {
  const size_t n = std::strlen(MHD_DEVICE_NAME);
  if (std::strncmp(device, MHD_DEVICE_NAME, n) != 0) return -1;
  if (device[n] == '\0') return 0;
  if (device[n] != ':') return -1;
  char* end = nullptr;
  const long index = std::strtol(device + n + 1, &end, 10);
  return end && *end == '\0' && index >= 0 && index < 1024 ? int(index) : -1;
}

// The number a constant argument holds (an int or a double).
bool constant_number(const tessera_graph_t* g, int32_t node, int32_t arg, float* out) {
  tessera_value_t v;
  if (tessera_status_t s = graph_api().node_arg_constant(g, node, arg, &v)) {
    tessera::sdk::host_api()->status_free(s);
    return false;
  }
  if (v.kind == TESSERA_VALUE_INT)
    *out = float(v.u.i);
  else if (v.kind == TESSERA_VALUE_DOUBLE)
    *out = float(v.u.d);
  else
    return false;
  return true;
}

// float32 values of one shape (equal size expressions, so symbolic sizes compare too).
bool same_type(const tessera_graph_t* g, int32_t a, int32_t b) {
  const tessera_graph_api_t& api = graph_api();
  if (api.value_dtype(g, a) != TESSERA_DTYPE_FLOAT32 || api.value_dtype(g, b) != TESSERA_DTYPE_FLOAT32)
    return false;
  const int32_t rank = api.value_rank(g, a);
  if (rank != api.value_rank(g, b)) return false;
  for (int32_t d = 0; d < rank; ++d) {
    tessera_graph_size_t x{}, y{};
    x.struct_size = y.struct_size = sizeof(tessera_graph_size_t);
    tessera_status_t s1 = api.value_size(g, a, d, &x), s2 = api.value_size(g, b, d, &y);
    if (s1 || s2) {
      tessera::sdk::host_api()->status_free(s1);
      tessera::sdk::host_api()->status_free(s2);
      return false;
    }
    if (std::strcmp(x.expr, y.expr) != 0) return false;
  }
  return true;
}

// A call node the device fuses: a listed op whose tensor operands have its output's type and whose
// other operands (and alpha) are constant numbers.
bool takes(const tessera_graph_t* g, int32_t node) {
  const tessera_graph_api_t& api = graph_api();
  if (api.node_kind(g, node) != TESSERA_NODE_CALL || api.node_num_outputs(g, node) != 1) return false;
  const int op = fused_op(api.node_target(g, node));
  if (op < 0) return false;
  const int32_t out = api.node_output(g, node, 0), nargs = api.node_num_args(g, node);
  const int operands = binary(op) ? 2 : 1;
  if (nargs < operands || (!binary(op) && nargs != 1)) return false;
  float number = 0;
  for (int32_t a = 0; a < nargs; ++a) {
    const int kind = api.node_arg_kind(g, node, a);
    if (a < operands && kind == TESSERA_ARG_TENSOR) {
      if (!same_type(g, api.node_arg_value(g, node, a, 0), out)) return false;
    } else if (kind != TESSERA_ARG_CONSTANT || !constant_number(g, node, a, &number)) {
      return false;
    }
  }
  return api.value_dtype(g, out) == TESSERA_DTYPE_FLOAT32;
}

// Consecutive nodes it takes form one group; any other call node ends the group.
tessera_status_t get_capability(void*, const tessera_graph_t* g, const char* device, int32_t* out_group) {
  const tessera_graph_api_t& api = graph_api();
  const bool mine = device_index(device) >= 0;
  int32_t group = 0;
  bool in_chain = false;
  for (int32_t i = 0, n = api.node_count(g); i < n; ++i) {
    out_group[i] = -1;
    if (api.node_kind(g, i) != TESSERA_NODE_CALL) continue;
    if (mine && takes(g, i)) {
      out_group[i] = group;
      in_chain = true;
    } else if (in_chain) {
      ++group;
      in_chain = false;
    }
  }
  return nullptr;
}

struct Executable {
  int device = 0;
  int32_t num_inputs = 0;
  std::vector<mhd_fused_step_t> steps;
  std::vector<int32_t> output_regs;
};

tessera_status_t compile(void*, const tessera_graph_t* g, const char* device, void** out_executable) try {
  const tessera_graph_api_t& api = graph_api();
  auto exe = std::make_unique<Executable>();
  exe->device = device_index(device);
  if (exe->device < 0)
    return make_status(TESSERA_STATUS_INVALID_ARGUMENT, std::string(MHD_COMPILER_NAME ": device '") + device +
                                                            "' is not " MHD_DEVICE_NAME
                                                            "; it compiles for " MHD_DEVICE_NAME " only");
  std::vector<int32_t> reg(size_t(std::max(api.value_count(g), 1)), -1);
  exe->num_inputs = api.input_count(g);
  for (int32_t i = 0; i < exe->num_inputs; ++i) {
    int32_t kind = 0, value = 0;
    const char* name = nullptr;
    if (tessera_status_t s = api.input(g, i, &kind, &name, &value)) return s;
    reg.at(size_t(value)) = i;
  }
  int32_t next = exe->num_inputs;
  for (int32_t i = 0, n = api.node_count(g); i < n; ++i) {
    if (api.node_kind(g, i) != TESSERA_NODE_CALL) continue;
    if (!takes(g, i))
      return make_status(TESSERA_STATUS_INVALID_ARGUMENT, std::string(MHD_COMPILER_NAME ": node '") +
                                                              api.node_target(g, i) +
                                                              "' is not a fused elementwise op");
    mhd_fused_step_t st{};
    st.op = fused_op(api.node_target(g, i));
    st.a = st.b = -1;
    st.alpha = 1.0f;
    for (int32_t k = 0; k < (binary(st.op) ? 2 : 1); ++k) {
      int32_t& r = k == 0 ? st.a : st.b;
      float& scalar = k == 0 ? st.scalar_a : st.scalar_b;
      if (api.node_arg_kind(g, i, k) == TESSERA_ARG_TENSOR)
        r = reg.at(size_t(api.node_arg_value(g, i, k, 0)));
      else
        constant_number(g, i, k, &scalar);
    }
    if ((st.op == MHD_FUSED_ADD || st.op == MHD_FUSED_SUB) && api.node_num_args(g, i) > 2)
      constant_number(g, i, 2, &st.alpha);
    exe->steps.push_back(st);
    reg.at(size_t(api.node_output(g, i, 0))) = next++;
  }
  for (int32_t i = 0, n = api.output_count(g); i < n; ++i) {
    const char* name = nullptr;
    int32_t value = 0;
    if (tessera_status_t s = api.output(g, i, &name, &value)) return s;
    exe->output_regs.push_back(reg.at(size_t(value)));
  }
  *out_executable = exe.release();
  return nullptr;
} catch (const std::exception& e) {
  return make_status(TESSERA_STATUS_INTERNAL, std::string(MHD_COMPILER_NAME ": compile: ") + e.what());
}

// The tensors of one call: float32, contiguous, `numel` elements, on the executable's device.
tessera_status_t check_tensors(const Executable& exe, const tessera_tensor_t* const* ts, int32_t n,
                               int64_t numel, const char* what, std::vector<mhd_fused_buffer_t>* out) {
  for (int32_t i = 0; i < n; ++i) {
    const tessera_tensor_t& t = *ts[i];
    if (t.dtype != TESSERA_DTYPE_FLOAT32 || t.numel != numel || t.device_index != exe.device ||
        t.device_type == TESSERA_DEVICE_CPU)
      return make_status(TESSERA_STATUS_INVALID_ARGUMENT,
                         std::string(MHD_COMPILER_NAME ": ") + what + " " + std::to_string(i) +
                             " is not a float32 tensor of " + std::to_string(numel) +
                             " elements on " MHD_DEVICE_NAME ":" + std::to_string(exe.device));
    int64_t expected = 1;
    for (int32_t d = t.ndim - 1; d >= 0; --d) {
      if (t.sizes[d] != 1 && t.strides[d] != expected)
        return make_status(TESSERA_STATUS_INVALID_ARGUMENT, std::string(MHD_COMPILER_NAME ": ") + what + " " +
                                                                std::to_string(i) + " is not contiguous");
      expected *= t.sizes[d];
    }
    out->push_back({t.data, uint64_t(t.byte_offset)});
  }
  return nullptr;
}

tessera_status_t run(void*, void* executable, const tessera_tensor_t* const* inputs, int32_t num_inputs,
                     const tessera_tensor_t* const* outputs, int32_t num_outputs, void* stream) {
  const auto& exe = *static_cast<const Executable*>(executable);
  if (num_inputs != exe.num_inputs || num_outputs != int32_t(exe.output_regs.size()))
    return make_status(TESSERA_STATUS_INVALID_ARGUMENT,
                       std::string(MHD_COMPILER_NAME ": run got ") + std::to_string(num_inputs) +
                           " inputs and " + std::to_string(num_outputs) + " outputs, the executable takes " +
                           std::to_string(exe.num_inputs) + " and " + std::to_string(exe.output_regs.size()));
  const int64_t numel = num_outputs > 0 ? outputs[0]->numel : 0;
  std::vector<mhd_fused_buffer_t> ins, outs;
  if (tessera_status_t s = check_tensors(exe, inputs, num_inputs, numel, "input", &ins)) return s;
  if (tessera_status_t s = check_tensors(exe, outputs, num_outputs, numel, "output", &outs)) return s;
  const mhd_fused_program_t program{
      .struct_size = sizeof(mhd_fused_program_t),
      .num_inputs = exe.num_inputs,
      .num_steps = int32_t(exe.steps.size()),
      .num_outputs = num_outputs,
      .steps = exe.steps.data(),
      .output_regs = exe.output_regs.data(),
  };
  char error[512] = "";
  if (mhd_fused_launch(exe.device, stream, &program, ins.data(), outs.data(), numel, error, sizeof error) !=
      0)
    return make_status(TESSERA_STATUS_INVALID_ARGUMENT, std::string(MHD_COMPILER_NAME ": ") + error);
  return nullptr;
}

void release(void*, void* executable) { delete static_cast<Executable*>(executable); }

const tessera_compiler_interface_t kCompiler = {
    .struct_size = sizeof(tessera_compiler_interface_t),
    .reserved_ = 0,
    .self = nullptr,
    .get_capability = get_capability,
    .compile = compile,
    .run = run,
    .release = release,
};

const tessera_compiler_interface_t* compiler_table() { return &kCompiler; }

tessera_proc_t get_proc_address(void*, const char* name) {
  if (std::strcmp(name, TESSERA_EXT_COMPILER) == 0)
    return reinterpret_cast<tessera_proc_t>(static_cast<tessera_ext_compiler_fn_t>(compiler_table));
  return nullptr;
}

const tessera_plugin_t kPlugin = {
    .struct_size = sizeof(tessera_plugin_t),
    .abi_major = TESSERA_ABI_MAJOR,
    .abi_minor = TESSERA_ABI_MINOR,
    .reserved_ = 0,
    .name = MHD_COMPILER_NAME,
    .version = MHD_PLUGIN_VERSION,
    .features = 0,
    .self = nullptr,
    .device = nullptr,
    .shutdown = nullptr,
    .get_proc_address = get_proc_address,
};

}  // namespace
}  // namespace mhd_compiler

TESSERA_PLUGIN_ENTRY(&mhd_compiler::kPlugin) {
  const tessera_host_api_t* api = tessera::sdk::host_api();
  if (!TESSERA_ABI_HAS_FIELD(api, tessera_host_api_t, graph) || !api->graph)
    throw tessera::sdk::Error(TESSERA_STATUS_ABI_MISMATCH, MHD_COMPILER_NAME
                              ": the runtime has no graph ABI (needs plugin ABI 1.2 or later)");
  (void)host;
}
