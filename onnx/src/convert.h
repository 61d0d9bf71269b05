// The converter table and what a converter sees (private to onnx/src). Note [ONNX import] in
// tessera/onnx/onnx.h; Note [Known integers] below.
#pragma once
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "onnx.pb.h"
#include "tessera/compiler/export.h"
#include "tessera/compiler/sym.h"
#include "tessera/dispatcher.h"
#include "tessera/ops.h"
#include "tessera/tensor.h"

namespace tessera::onnx::detail {

using compiler::SymSize;
using Sizes = std::vector<SymSize>;

// Note [Known integers]
// An integer tensor of rank 0 or 1 whose elements the importer knows (a constant, the Shape of a
// tensor, or what Gather/Concat/Slice/Squeeze/Unsqueeze/Cast/arithmetic make of them) carries them
// as `ints`, each a SymSize (a constant or an expression over the model's symbols). Converters read
// sizes, axes and pads from `ints`, so a shape computation costs nothing at run time. Such a value
// is materialised as a tensor only when a real op consumes it, which needs every element constant.
struct Val {
  Tensor t;                  // a tracing tensor or a host constant; undefined for a known-ints-only value
  std::optional<Sizes> ints;  // Note [Known integers]
  bool scalar = false;       // rank 0 (for `ints`)
  DType int_dtype = kInt64;  // the dtype of `ints`
  bool constant = false;     // t is a host constant (an initializer or a Constant's value)
};

// Per symbol, a user input and the dim whose size it is: the importer makes tensors of symbolic size
// from it (symbolic_ones).
using Witnesses = std::map<std::string, std::pair<Tensor, int64_t>>;

class NodeCtx {
 public:
  NodeCtx(const ::onnx::NodeProto& node, int64_t opset, std::map<std::string, Val>& env,
          const std::map<std::string, int64_t>& example, const Witnesses* witnesses = nullptr)
      : node_(node), opset_(opset), env_(env), example_(example), witnesses_(witnesses) {}
  const Witnesses* witnesses() const { return witnesses_; }

  const ::onnx::NodeProto& node() const { return node_; }
  int64_t opset() const { return opset_; }
  // Inputs: an empty name counts as absent.
  int num_inputs() const { return node_.input_size(); }
  bool has(int i) const;
  const Val& val(int i) const;
  // The input as a tensor (known ints materialised; throws when one is symbolic).
  Tensor in(int i) const;
  std::optional<Tensor> opt(int i) const;
  // The known ints of input i (throws naming the input when they are not known at import).
  Sizes ints(int i) const;
  bool has_ints(int i) const { return has(i) && val(i).ints.has_value(); }
  // The known ints of input i, each a constant (throws naming a symbolic one).
  std::vector<int64_t> const_ints(int i) const;
  // A constant host tensor input's value as doubles (throws when not a constant).
  std::vector<double> const_doubles(int i) const;
  // The one element of a constant input (throws when it has another count).
  double const_scalar(int i) const;
  // Fails unless `count` elements (of a constant or an index list the importer makes) stay within
  // kMaxImportElements: a model file is untrusted, and sizes it gives must not exhaust memory.
  void check_elements(int64_t count, const char* what) const;

  // Attributes. Every attribute a converter reads (or names in ignore_attrs) counts as handled; the
  // importer refuses a node with an attribute its converter did not handle (a newer opset's
  // attribute must not be ignored silently).
  bool has_attr(const char* name) const;
  // Attributes that do not change an inference result here (Dropout's seed, stash_type, ...).
  void ignore_attrs(std::initializer_list<const char*> names) const;
  // The first attribute of the node that no read handled; empty when all were.
  std::string unhandled_attr() const;
  int64_t attr_int(const char* name, int64_t dflt) const;
  double attr_float(const char* name, double dflt) const;
  std::string attr_string(const char* name, const std::string& dflt) const;
  std::vector<int64_t> attr_ints(const char* name, const std::vector<int64_t>& dflt) const;
  std::vector<double> attr_floats(const char* name) const;
  const ::onnx::TensorProto* attr_tensor(const char* name) const;
  // Axes read from input `i` when present (newer opsets) else from the attribute `name`.
  std::optional<std::vector<int64_t>> axes(int i, const char* name) const;

  int num_outputs() const { return node_.output_size(); }
  bool output_used(int i) const { return i < node_.output_size() && !node_.output(i).empty(); }
  void out(int i, Val v);
  void out(int i, Tensor t) { out(i, Val{std::move(t), std::nullopt, false, kInt64, false}); }
  void out_ints(int i, Sizes ints, bool scalar, DType dtype = kInt64);

  // The symbolic sizes of a tensor (traced_sizes) and their values in the capture's example.
  Sizes sizes(const Tensor& t) const { return traced_sizes(t); }
  int64_t example(const SymSize& s) const { return s.evaluate(example_); }
  std::vector<int64_t> example(const Sizes& s) const;
  // Whether a == b for every binding (same canonical form).
  static bool same(const SymSize& a, const SymSize& b) { return a.same_as(b); }

  // One line naming the node, its op type and the opset.
  [[noreturn]] void fail(const std::string& why) const;
  std::string where() const;

 private:
  const ::onnx::NodeProto& node_;
  int64_t opset_;
  std::map<std::string, Val>& env_;
  const std::map<std::string, int64_t>& example_;
  const Witnesses* witnesses_;
  const ::onnx::AttributeProto* find_attr(const char* name) const;
  mutable std::vector<std::string> handled_;
};

// The most elements the importer materialises for one constant or index list (2^28).
inline constexpr int64_t kMaxImportElements = int64_t(1) << 28;

using Converter = void (*)(NodeCtx&);
using ConverterTable = std::map<std::string, Converter>;

// Each family adds its converters (ops_*.cpp).
void add_elementwise_converters(ConverterTable& t);
void add_nn_converters(ConverterTable& t);
void add_shape_converters(ConverterTable& t);
void add_index_converters(ConverterTable& t);
void add_attention_converters(ConverterTable& t);  // ops_attention.cpp
void add_resize_converters(ConverterTable& t);     // ops_resize.cpp
void add_loss_converters(ConverterTable& t);       // ops_loss.cpp
void add_rnn_converters(ConverterTable& t);        // ops_rnn.cpp
void add_more_nn_converters(ConverterTable& t);    // ops_nn_more.cpp
void add_more_index_converters(ConverterTable& t); // ops_index_more.cpp
const ConverterTable& converter_table();

// Helpers shared by the families.
// Normalises axis `a` for rank `rank` (negative counts from the end); fails naming it.
int64_t norm_axis(const NodeCtx& c, int64_t a, int64_t rank);
// The product of s[begin, end) (symbolic).
SymSize product(const Sizes& s, size_t begin, size_t end);
// The value of a host constant (an initializer, a Constant's value): small integer tensors of rank
// <= 1 are also known integers (Note [Known integers]).
Val constant_val(const Tensor& t);
// A host tensor (CPU, outside the capture) holding `values`.
Tensor host_tensor(const std::vector<int64_t>& values, IntArrayRef sizes, DType dtype);
Tensor host_scalar(double value, DType dtype);
// Reshape through a view of the tracing tensor (the capture recovers symbolic sizes from the
// example, Note [Captured views]); `sizes` are symbolic target sizes.
Tensor reshape_to(const NodeCtx& c, const Tensor& x, const Sizes& sizes);
// A bool tensor of all true of `shape`, whose dims may be symbols: a dim that is a plain symbol is
// taken from the user input that has it (its witness), so the program makes the tensor at run time
// with the right size. Fails naming a dim that is an expression. Broadcasting against it (where(t,
// x, x)) expands x to a symbolic shape.
Tensor symbolic_ones(const NodeCtx& c, const Sizes& shape);
// Calls an op of the contract by name (ops other families or plugins add; none has a C++ wrapper).
Tensor call_op(const NodeCtx& c, const char* name, Stack args);
// The same for an op with several outputs (topk): every output, in schema order.
std::vector<Tensor> call_op_outputs(const NodeCtx& c, const char* name, Stack args);
// The dtype of an ONNX TensorProto data type; fails for types Tessera lacks.
std::optional<DType> dtype_of_onnx(int32_t elem_type);
int32_t onnx_of_dtype(DType t);
// A host tensor from a TensorProto (raw_data, typed fields or external data under `dir`).
Tensor tensor_from_proto(const ::onnx::TensorProto& p, const std::string& external_dir);

// Note [Legacy opsets] (legacy.cpp): a node of an old opset rewritten into the forms the converters
// read, each to convert at its opset; nullopt when the node needs no rewrite. sizes_of gives an
// input's (example) sizes.
struct LegacyNode {
  ::onnx::NodeProto node;
  int64_t opset;
};
std::optional<std::vector<LegacyNode>> upgrade_legacy_node(const ::onnx::NodeProto& node, int64_t opset,
                                                           const std::function<std::vector<int64_t>(const std::string&)>& sizes_of);

// Folds a conv2d's per-channel mul (and add) of constants into its weight and bias (Note [Affine
// into conv] in fold_conv_affine.cpp); returns whether anything changed.
bool fold_affine_into_conv(compiler::ExportedProgram& ep);

}  // namespace tessera::onnx::detail
