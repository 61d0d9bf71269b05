// What a generated backward formula (dispatcher/ops/derivatives.json, gen_derivatives.py) sees: the
// forward call's arguments by schema index, the output gradients, and where to put input gradients.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "tessera/autograd.h"
#include "tessera/dispatcher.h"
#include "formula_helpers.h"

namespace tessera::autograd::detail {

class FormulaContext {
 public:
  // The gradient of output `i` (undefined when it got none).
  const Tensor& grad(int i) const { return grads_in[size_t(i)]; }
  // Tensor arguments, unpacked from their saved copies (version-checked).
  Tensor tensor(int arg) const;
  std::optional<Tensor> opt_tensor(int arg) const;
  std::vector<Tensor> tensor_list(int arg) const;
  formulas::SavedSizes sizes(int arg) const;
  std::vector<std::vector<int64_t>> list_sizes(int arg) const;
  Tensor result(int i) const;
  // Attributes.
  Scalar scalar(int arg) const;
  std::optional<Scalar> opt_scalar(int arg) const;
  int64_t int_(int arg) const;
  std::optional<int64_t> opt_int(int arg) const;
  std::vector<int64_t> ints(int arg) const;
  double float_(int arg) const;
  std::optional<double> opt_float(int arg) const;
  bool bool_(int arg) const;
  std::string str(int arg) const;
  DType dtype(int arg) const;
  std::optional<DType> opt_dtype(int arg) const;
  // needs_input_grad of the tensor argument (any element of a Tensor[]).
  bool needs(int arg) const;
  void set(int arg, Tensor g);
  void set_list(int arg, std::vector<Tensor> g);
  void set_many(std::initializer_list<int> args, std::vector<Tensor> g);

  // Filled by the node.
  const std::string* node_name = nullptr;
  const Stack* args = nullptr;                      // attributes; tensors replaced by monostate
  const std::vector<SavedTensor>* saved = nullptr;  // per flat tensor input (undefined when not saved)
  const std::vector<std::vector<int64_t>>* input_sizes = nullptr;  // per flat tensor input
  // Per flat tensor input under a capture with dynamic shapes (empty otherwise): the input and which
  // dims are symbolic (Note [Dynamic sizes in backward formulas]).
  const std::vector<std::pair<Tensor, std::vector<bool>>>* input_dynamic = nullptr;
  const std::vector<int>* flat_begin = nullptr;     // per schema argument: first flat index (-1: not a tensor)
  const std::vector<int>* flat_count = nullptr;     // per schema argument: number of flat tensors
  const std::vector<SavedTensor>* results = nullptr;
  const std::vector<bool>* needs_grad = nullptr;    // per flat tensor input
  std::vector<Tensor> grads_in;                     // per output
  std::vector<Tensor> grads_out;                    // per flat tensor input

 private:
  const Value& attr(int arg) const;
};

using FormulaFn = void (*)(FormulaContext& c);

enum class DerivativeKind : uint8_t { Formula, NonDifferentiable, NotImplemented };

// One row of the generated table (autograd_derivatives.inc).
struct DerivativeInfo {
  const char* op;
  DerivativeKind kind;
  FormulaFn fn;
  uint64_t saved_args;    // bit per schema argument whose tensors the formula reads
  bool saves_result;
  uint64_t nondiff_args;  // bit per tensor argument marked non-differentiable
  const char* note;       // why not implemented / non-differentiable
};

// The row of `op` ("add.Tensor"), or null when derivatives.json has none (an op a plugin defined).
const DerivativeInfo* find_derivative(const std::string& op);

}  // namespace tessera::autograd::detail
