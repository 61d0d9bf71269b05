// The Export IR: the graph an exported program holds, and the program itself.
//
// Note [Export IR]
// A Graph is a list of nodes in execution order over typed values. Every value is produced once:
// by a Placeholder (a program input: user input, weight or constant) or by a Call of a dispatcher
// op (named with its overload, "add.Tensor", so the op contract's schema says what each argument
// is). Arguments of a Call are in schema order; each is a tensor value, a list of tensor values
// (Tensor[]), None (an absent optional tensor) or a constant (int, float, bool, int list, string,
// dtype). The one Output node lists the returned values. A value's type is its dtype, device and
// sizes, each size a SymSize (Note [Symbolic sizes]). Value ids index Graph::values and never
// change when passes erase nodes; a pass that removes a value's producer leaves the value unused
// (the verifier checks that nothing uses it).
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tessera/compiler/export_macros.h"
#include "tessera/compiler/sym.h"
#include "tessera/device.h"
#include "tessera/dtype.h"
#include "tessera/tensor.h"

namespace tessera::compiler {

using ValueId = int32_t;

struct TensorType {
  DType dtype = DType::Float32;
  Device device;
  std::vector<SymSize> sizes;

  // "f32[batch, 512] cpu:0"
  std::string str() const;
  bool same_as(const TensorType& o) const;
};

// A non-tensor argument. Mirrors the dispatcher's Value without the tensor alternatives.
using Constant = std::variant<std::monostate /* None */, int64_t, double, bool, std::vector<int64_t>,
                              std::string, DType>;

struct Argument {
  enum class Kind : uint8_t { Tensor, TensorList, None, Constant };
  Kind kind = Kind::None;
  std::vector<ValueId> values;  // Tensor: exactly one; TensorList: any number
  compiler::Constant constant;  // Constant

  static Argument tensor(ValueId v) { return {Kind::Tensor, {v}, {}}; }
  static Argument tensor_list(std::vector<ValueId> vs) { return {Kind::TensorList, std::move(vs), {}}; }
  static Argument none() { return {Kind::None, {}, {}}; }
  static Argument constant_value(compiler::Constant c) { return {Kind::Constant, {}, std::move(c)}; }
};

enum class NodeKind : uint8_t { Placeholder, Call, Output };

// The targets of the core view nodes (Note [Captured views]): views of the graph, not ops of the op
// contract. Every other Call target is an op of tessera/op_info.h.
inline constexpr const char kViewTarget[] = "view";
inline constexpr const char kPermuteTarget[] = "permute";
inline bool is_view_target(const std::string& target) { return target == kViewTarget || target == kPermuteTarget; }

struct Node {
  NodeKind kind = NodeKind::Call;
  std::string target;               // Call: "add.Tensor"; Placeholder: the input's name; Output: ""
  std::vector<Argument> args;       // Call: schema order; Output: the returned values (Tensor kind)
  std::vector<ValueId> outputs;     // Placeholder: one; Call: one per schema return; Output: none
};

struct ValueInfo {
  TensorType type;
  std::string name;  // printed as %name; empty = printed as %<id>
};

struct TESSERA_COMPILER_API Graph {
  std::vector<ValueInfo> values;
  std::vector<Node> nodes;

  ValueId add_value(TensorType type, std::string name = {});
  // The printed name of a value: "%x" or "%7".
  std::string value_name(ValueId v) const;
  const TensorType& type(ValueId v) const;
};

enum class InputKind : uint8_t { UserInput, Parameter, Constant };
TESSERA_COMPILER_API const char* input_kind_name(InputKind k);  // "user_input", "parameter", "constant"

struct InputSpec {
  InputKind kind = InputKind::UserInput;
  std::string name;  // user input name, or the weight's key in ExportedProgram::weights
  ValueId value = -1;
};

struct OutputSpec {
  std::string name;
  ValueId value = -1;
};

// Inputs in placeholder order (user inputs first, in the order fn takes them, then weights and
// constants); outputs in the order fn returns them.
struct Signature {
  std::vector<InputSpec> inputs;
  std::vector<OutputSpec> outputs;
};

// A decision capture took from the example inputs that the declared ranges do not imply (Note
// [Symbolic shape rules]): the program holds only for inputs where the relation holds. run()
// checks every guard on the bound symbols.
struct TESSERA_COMPILER_API Guard {
  enum class Relation : uint8_t { Equal, NotEqual, LessEqual, Greater };
  SymSize lhs, rhs;
  Relation relation = Relation::NotEqual;
  std::string op;      // the op whose shape rule asked ("add.Tensor"); empty when loaded from a file
  std::string source;  // the example values that decided it ("batch = 4, seq = 6"); empty when loaded

  // "batch != seq", "seq <= 2*batch"
  std::string str() const;
  // Reads str()'s syntax, each side with SymSize::parse; throws tessera::Error naming the text.
  static Guard parse(std::string_view text);
  // Evaluates both sides; throws naming a symbol missing from `bindings`.
  bool holds(const std::map<std::string, int64_t>& bindings) const;
};

// What a compiler plugin compiled a program into, kept with the program (Note [Compiled artifact
// compatibility] in plugin_abi.h; CompiledProgram in tessera/compiler/compiled_program.h).
struct CompiledArtifact {
  std::string backend;                 // the compiler plugin's name
  std::string device;                  // the device it compiled for ("my_hardware_device:0")
  std::string compatibility;           // the plugin's compatibility_info then; empty: none reported
  std::vector<int32_t> group_of_node;  // its get_capability answer, one entry per graph node
};

// Note [Program state]
// A captured function may write tensors it closes over that outlive it: a training step updates the
// parameters and the optimizer's state in place and sets the parameters' .grad. The graph stays
// functional: the new value of each such tensor is an extra graph output after fn's own outputs
// (signature names "updated_<weight>" and "grad_<weight>"), and `state` says, per extra output in
// order, which live tensor receives it: Write copies the value into the tensor (skipped when the
// program wrote the tensor's own memory), Grad makes it the leaf's .grad. run() and the compiled
// artifacts apply the updates after the graph ran and return fn's outputs only, so a compiled step
// leaves the model and the optimizer as the eager step would. A tensor counts as state when the
// capture wrote it and something outside the capture still holds it when fn returns (a temporary
// that fn allocated and filled is a constant of the program instead). The targets are live tensors,
// not data: a program with state is not saved to a file.
struct StateUpdate {
  enum class Kind : uint8_t { Write, Grad };
  Kind kind = Kind::Write;
  Tensor target;
};

class TESSERA_COMPILER_API ExportedProgram {
 public:
  Graph graph;
  Signature signature;
  std::vector<StateUpdate> state;  // one per graph output past fn's (Note [Program state])
  // Weights read where they live, whose values change between runs (a program with state: the
  // parameters, the optimizer's tensors); constant folding treats them as inputs.
  std::set<std::string> live_weights;
  std::map<std::string, SymbolRange> ranges;  // every symbol the graph mentions
  std::vector<Guard> guards;                  // in the order capture took the decisions
  std::map<std::string, Tensor> weights;      // parameters and constants, by name (host memory)
  std::string op_contract_version;            // of the runtime that exported it
  std::optional<CompiledArtifact> compiled;   // set by CompiledProgram (program file "compiled")

  // One node per line, shapes included (Note [Graph text]):
  //   graph(%x: f32[batch, 512] cpu:0, %w: f32[512, 512] cpu:0 parameter):
  //     %2: f32[batch, 512] cpu:0 = linear.default(%x, %w, None)
  //     return (%2)
  //   ranges: batch in [1, 512]
  //   guards: batch != seq          (only when there are guards)
  std::string graph_string() const;

  // Runs the graph on `inputs` (the user inputs in signature order) through the dispatcher on their
  // device (Note [Running a program] in run.cpp): binds each symbol from the inputs' sizes, checks
  // ranks, dtypes, static sizes, ranges and guards (one-line errors naming the input, the dim and the
  // range, or the guard and its op), moves the weights to that device once and caches them per device. Returns the outputs in
  // signature order. Thread-safe: concurrent runs share the weight cache.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const;

  // Applies `state` to the trailing outputs of a run of the graph (all of its outputs, as a backend
  // returns them) and drops them: `outputs` keeps fn's outputs. Note [Program state].
  static void apply_state(const std::vector<StateUpdate>& state, std::vector<Tensor>& outputs);

 private:
  struct WeightCache;
  mutable std::shared_ptr<WeightCache> weight_cache_;
};

// The short dtype names of the graph text and the program file ("f32", "bf16", "bool"), and back.
TESSERA_COMPILER_API const char* dtype_short_name(DType t);
TESSERA_COMPILER_API std::optional<DType> dtype_from_short_name(std::string_view name);

// The text of one constant as graph_string() prints it: None, 3, 0.5, true, [1, 2], "text", f32.
TESSERA_COMPILER_API std::string constant_str(const Constant& c);

}  // namespace tessera::compiler
