// export_model: an ExportedProgram written as an ONNX model (opset kExportOpset). Each Call node
// becomes one or a few ONNX nodes by the table below; weights become initializers; a symbolic dim
// becomes a dim_param (its canonical text). A node without an ONNX equivalent is refused by name.
#include <cstring>
#include <fstream>

#include "convert.h"
#include "tessera/dispatch_key.h"
#include "tessera/onnx/onnx.h"

namespace tessera::onnx {

using namespace detail;
using compiler::Argument;
using compiler::ExportedProgram;
using compiler::Node;
using compiler::NodeKind;
using compiler::ValueId;

namespace {

class Writer {
 public:
  Writer(const ExportedProgram& ep, ::onnx::GraphProto& g) : ep_(ep), g_(g) {}

  std::string name(ValueId v) const {
    std::string s = std::to_string(v);
    s.insert(s.begin(), 'v');
    return s;
  }

  std::string fresh(const std::string& hint) {
    std::string s = hint;
    s += '_';
    s += std::to_string(next_++);
    return s;
  }

  void tensor_proto(::onnx::TensorProto* p, const std::string& n, const Tensor& t0) {
    ExcludeDispatchKeyGuard plain(DispatchKeySet::functionality(Functionality::Export));
    Tensor t = t0.cpu().contiguous();
    p->set_name(n);
    const int32_t dt = onnx_of_dtype(t.dtype());
    TESSERA_CHECK(dt != ::onnx::TensorProto::UNDEFINED, "onnx export: weight '", n, "' has dtype ",
                  compiler::dtype_short_name(t.dtype()), ", which ONNX has no type for");
    p->set_data_type(dt);
    for (int64_t s : t.sizes()) p->add_dims(s);
    p->set_raw_data(std::string(static_cast<const char*>(t.raw_const_data_ptr()), size_t(t.numel()) * itemsize(t.dtype())));
  }

  std::string initializer(const Tensor& t, const std::string& hint) {
    std::string n = fresh(hint);
    tensor_proto(g_.add_initializer(), n, t);
    return n;
  }
  std::string ints(const std::vector<int64_t>& v) {
    return initializer(host_tensor(v, {int64_t(v.size())}, kInt64), "ints");
  }
  std::string scalar(double v, DType dt) { return initializer(host_scalar(v, dt), "c"); }

  ::onnx::NodeProto* node(const char* op, std::vector<std::string> ins, std::vector<std::string> outs) {
    ::onnx::NodeProto* n = g_.add_node();
    n->set_op_type(op);
    n->set_name(fresh(op));
    for (auto& i : ins) n->add_input(i);
    for (auto& o : outs) n->add_output(o);
    return n;
  }
  static void attr(::onnx::NodeProto* n, const char* key, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(key);
    a->set_type(::onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attr(::onnx::NodeProto* n, const char* key, double v) {
    auto* a = n->add_attribute();
    a->set_name(key);
    a->set_type(::onnx::AttributeProto::FLOAT);
    a->set_f(float(v));
  }
  static void attr(::onnx::NodeProto* n, const char* key, const std::string& v) {
    auto* a = n->add_attribute();
    a->set_name(key);
    a->set_type(::onnx::AttributeProto::STRING);
    a->set_s(v);
  }
  static void attr(::onnx::NodeProto* n, const char* key, const std::vector<int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(key);
    a->set_type(::onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }

  // An argument as an ONNX value name: a tensor value, or a wrapped number as a 0-d initializer of
  // the output's dtype.
  std::string in(const Node& n, size_t i) {
    const Argument& a = n.args.at(i);
    if (a.kind == Argument::Kind::Tensor) return name(a.values.at(0));
    const DType dt = ep_.graph.type(n.outputs.at(0)).dtype;
    if (auto* d = std::get_if<double>(&a.constant)) return scalar(*d, dt);
    if (auto* v = std::get_if<int64_t>(&a.constant)) return scalar(double(*v), dt);
    if (auto* b = std::get_if<bool>(&a.constant)) return scalar(*b ? 1 : 0, dt);
    fail(n, "argument " + std::to_string(i) + " is not a tensor or a number");
  }
  bool given(const Node& n, size_t i) const { return i < n.args.size() && n.args[i].kind != Argument::Kind::None; }
  template <typename T>
  std::optional<T> get(const Node& n, size_t i) const {
    if (i >= n.args.size() || n.args[i].kind != Argument::Kind::Constant) return std::nullopt;
    if (auto* v = std::get_if<T>(&n.args[i].constant)) return *v;
    if constexpr (std::is_same_v<T, double>)
      if (auto* v = std::get_if<int64_t>(&n.args[i].constant)) return double(*v);
    if constexpr (std::is_same_v<T, std::vector<int64_t>>)
      if (auto* v = std::get_if<int64_t>(&n.args[i].constant)) return std::vector<int64_t>{*v};
    return std::nullopt;
  }
  int64_t rank(ValueId v) const { return int64_t(ep_.graph.type(v).sizes.size()); }
  int64_t in_rank(const Node& n, size_t i) const { return rank(n.args.at(i).values.at(0)); }

  [[noreturn]] void fail(const Node& n, const std::string& why) const {
    tessera::detail::throw_error(ErrorCode::InvalidArgument, "onnx export: node '" + n.target + "' (" +
                                                                 ep_.graph.value_name(n.outputs.at(0)) + "): " + why);
  }

  // The shape of a view/reshape target: 0 where the dim is the input's at the same position, -1 for
  // one other dynamic dim, the constant otherwise.
  std::string view_shape(const Node& n) {
    const auto& in = ep_.graph.type(n.args[0].values[0]).sizes;
    const auto& out = ep_.graph.type(n.outputs[0]).sizes;
    std::vector<int64_t> shape;
    bool inferred = false;
    for (size_t i = 0; i < out.size(); ++i) {
      if (out[i].is_constant()) {
        shape.push_back(out[i].constant());
        if (out[i].constant() == 0) fail(n, "a view to a zero-size dim");
      } else if (i < in.size() && in[i].same_as(out[i])) {
        shape.push_back(0);
      } else if (!inferred) {
        shape.push_back(-1);
        inferred = true;
      } else {
        fail(n, "a view with more than one new dynamic size");
      }
    }
    return ints(shape);
  }

  void reduce(const Node& n, const char* op, const std::string& out) {
    std::vector<int64_t> dims = get<std::vector<int64_t>>(n, 1).value_or(std::vector<int64_t>{});
    const bool keep = get<bool>(n, 2).value_or(false);
    std::vector<std::string> ins{in(n, 0)};
    if (!dims.empty()) ins.push_back(ints(dims));
    attr(node(op, ins, {out}), "keepdims", int64_t(keep));
  }

  void call(const Node& n) {
    const std::string& t = n.target;
    const std::string op = t.substr(0, t.find('.'));
    const std::string out = name(n.outputs.at(0));
    static const std::map<std::string, const char*> kSame = {
        {"mul", "Mul"}, {"div", "Div"}, {"maximum", "Max"}, {"minimum", "Min"}, {"eq", "Equal"}, {"lt", "Less"},
        {"le", "LessOrEqual"}, {"gt", "Greater"}, {"ge", "GreaterOrEqual"}, {"logical_and", "And"},
        {"logical_or", "Or"}, {"where", "Where"}, {"neg", "Neg"}, {"abs", "Abs"}, {"relu", "Relu"}, {"exp", "Exp"},
        {"log", "Log"}, {"sqrt", "Sqrt"}, {"sin", "Sin"}, {"cos", "Cos"}, {"tanh", "Tanh"}, {"sigmoid", "Sigmoid"},
        {"erf", "Erf"}, {"matmul", "MatMul"}, {"clone", "Identity"}, {"contiguous", "Identity"},
        {"logical_not", "Not"}, {"logical_xor", "Xor"}, {"floor", "Floor"}, {"ceil", "Ceil"}, {"round", "Round"},
        {"sign", "Sign"}, {"reciprocal", "Reciprocal"}, {"tan", "Tan"}, {"asin", "Asin"}, {"acos", "Acos"},
        {"atan", "Atan"}, {"sinh", "Sinh"}, {"cosh", "Cosh"}, {"asinh", "Asinh"}, {"acosh", "Acosh"},
        {"atanh", "Atanh"}, {"isnan", "IsNaN"}, {"isinf", "IsInf"}, {"bitwise_not", "BitwiseNot"},
        {"bitwise_and", "BitwiseAnd"}, {"bitwise_or", "BitwiseOr"}, {"bitwise_xor", "BitwiseXor"},
        {"softsign", "Softsign"}, {"mish", "Mish"}, {"hardswish", "HardSwish"}};
    if (auto it = kSame.find(op); it != kSame.end()) {
      std::vector<std::string> ins;
      for (size_t i = 0; i < n.args.size(); ++i)
        if (n.args[i].kind == Argument::Kind::Tensor || (n.args[i].kind == Argument::Kind::Constant && i < 3 && op != "clone"))
          ins.push_back(in(n, i));
      node(it->second, ins, {out});
    } else if (op == "add" || op == "sub") {
      std::string b = in(n, 1);
      if (auto alpha = get<double>(n, 2); alpha && *alpha != 1.0) {
        const std::string scaled = fresh("alpha");
        node("Mul", {b, scalar(*alpha, ep_.graph.type(n.outputs[0]).dtype)}, {scaled});
        b = scaled;
      }
      node(op == "add" ? "Add" : "Sub", {in(n, 0), b}, {out});
    } else if (op == "pow") {
      std::string e = n.args.at(1).kind == Argument::Kind::Tensor ? in(n, 1) : scalar(*get<double>(n, 1), ep_.graph.type(n.outputs[0]).dtype);
      node("Pow", {in(n, 0), e}, {out});
    } else if (op == "ne") {
      const std::string e = fresh("eq");
      node("Equal", {in(n, 0), in(n, 1)}, {e});
      node("Not", {e}, {out});
    } else if (op == "rsqrt") {
      const std::string s = fresh("sqrt");
      node("Sqrt", {in(n, 0)}, {s});
      node("Reciprocal", {s}, {out});
    } else if (op == "silu") {
      const std::string s = fresh("sig");
      node("Sigmoid", {in(n, 0)}, {s});
      node("Mul", {in(n, 0), s}, {out});
    } else if (op == "gelu") {
      attr(node("Gelu", {in(n, 0)}, {out}), "approximate", get<std::string>(n, 1).value_or("none"));
    } else if (op == "clamp") {
      const DType dt = ep_.graph.type(n.outputs[0]).dtype;
      auto lo = get<double>(n, 1), hi = get<double>(n, 2);
      node("Clip", {in(n, 0), lo ? scalar(*lo, dt) : "", hi ? scalar(*hi, dt) : ""}, {out});
    } else if (op == "sum" || op == "mean" || op == "amax" || op == "amin" || op == "prod") {
      static const std::map<std::string, const char*> kReduce = {
          {"sum", "ReduceSum"}, {"mean", "ReduceMean"}, {"amax", "ReduceMax"}, {"amin", "ReduceMin"}, {"prod", "ReduceProd"}};
      reduce(n, kReduce.at(op), out);
    } else if (op == "argmax" || op == "argmin") {
      auto dim = get<int64_t>(n, 1);
      if (!dim) fail(n, op + " over all elements");
      auto* a = node(op == "argmax" ? "ArgMax" : "ArgMin", {in(n, 0)}, {out});
      attr(a, "axis", *dim);
      attr(a, "keepdims", int64_t(get<bool>(n, 2).value_or(false)));
    } else if (op == "linear") {
      const std::string wt = fresh("wT");
      node("Transpose", {in(n, 1)}, {wt});
      if (!given(n, 2)) {
        node("MatMul", {in(n, 0), wt}, {out});
      } else {
        const std::string mm = fresh("mm");
        node("MatMul", {in(n, 0), wt}, {mm});
        node("Add", {mm, in(n, 2)}, {out});
      }
    } else if (op == "softmax" || op == "log_softmax") {
      attr(node(op == "softmax" ? "Softmax" : "LogSoftmax", {in(n, 0)}, {out}), "axis", *get<int64_t>(n, 1));
    } else if (op == "layer_norm" || op == "rms_norm") {
      const int64_t k = int64_t(get<std::vector<int64_t>>(n, 1).value_or(std::vector<int64_t>{}).size());
      const bool layer = op == "layer_norm";
      std::vector<std::string> ins{in(n, 0)};
      ins.push_back(given(n, 2) ? in(n, 2) : ones_like_norm(n));
      if (layer && given(n, 3)) ins.push_back(in(n, 3));
      auto* a = node(layer ? "LayerNormalization" : "RMSNormalization", ins, {out});
      attr(a, "axis", -k);
      if (auto eps = get<double>(n, layer ? 4 : 3)) attr(a, "epsilon", *eps);
      else if (!layer) attr(a, "epsilon", double(ep_.graph.type(n.outputs[0]).dtype == kFloat64 ? 2.220446049250313e-16 : 1.1920928955078125e-07));
    } else if (op == "conv2d" || op == "max_pool2d" || op == "avg_pool2d") {
      window(n, op, out);
    } else if (op == "embedding") {
      attr(node("Gather", {in(n, 0), in(n, 1)}, {out}), "axis", int64_t(0));
    } else if (op == "index_select") {
      attr(node("Gather", {in(n, 0), in(n, 2)}, {out}), "axis", *get<int64_t>(n, 1));
    } else if (op == "gather") {
      attr(node("GatherElements", {in(n, 0), in(n, 2)}, {out}), "axis", *get<int64_t>(n, 1));
    } else if (op == "cat" || op == "stack") {
      const int64_t dim = get<int64_t>(n, 1).value_or(0);
      std::vector<std::string> ins;
      for (ValueId v : n.args.at(0).values) {
        if (op == "cat") { ins.push_back(name(v)); continue; }
        const std::string u = fresh("unsq");
        node("Unsqueeze", {name(v), ints({dim})}, {u});
        ins.push_back(u);
      }
      attr(node("Concat", ins, {out}), "axis", dim);
    } else if (op == "_to_copy") {
      auto dt = get<DType>(n, 1);
      attr(node("Cast", {in(n, 0)}, {out}), "to", int64_t(onnx_of_dtype(dt.value_or(ep_.graph.type(n.outputs[0]).dtype))));
    } else if (op == "scaled_dot_product_attention") {
      std::vector<std::string> ins{in(n, 0), in(n, 1), in(n, 2)};
      if (given(n, 3)) ins.push_back(in(n, 3));
      auto* a = node("Attention", ins, {out});
      if (get<bool>(n, 4).value_or(false)) attr(a, "is_causal", int64_t(1));
      if (auto s = get<double>(n, 5)) attr(a, "scale", *s);
    } else if (op == "slice_copy") {
      const int64_t dim = get<int64_t>(n, 1).value_or(0), step = get<int64_t>(n, 4).value_or(1);
      const int64_t big = INT64_MAX, start = get<int64_t>(n, 2).value_or(step > 0 ? 0 : big);
      const int64_t end = get<int64_t>(n, 3).value_or(step > 0 ? big : -big);
      node("Slice", {in(n, 0), ints({start}), ints({end}), ints({dim}), ints({step})}, {out});
    } else if (op == "flip") {
      std::vector<int64_t> dims = get<std::vector<int64_t>>(n, 1).value_or(std::vector<int64_t>{});
      std::vector<int64_t> starts(dims.size(), -1), ends(dims.size(), INT64_MIN), steps(dims.size(), -1);
      node("Slice", {in(n, 0), ints(starts), ints(ends), ints(dims), ints(steps)}, {out});
    } else if (op == "expand_copy") {
      node("Expand", {in(n, 0), ints(*get<std::vector<int64_t>>(n, 1))}, {out});
    } else if (op == "repeat") {
      std::vector<int64_t> reps = *get<std::vector<int64_t>>(n, 1);
      if (int64_t(reps.size()) != in_rank(n, 0)) fail(n, "repeat adds dims");
      node("Tile", {in(n, 0), ints(reps)}, {out});
    } else if (op == "tril" || op == "triu") {
      const std::string k = initializer(host_tensor({get<int64_t>(n, 1).value_or(0)}, {}, kInt64), "k");
      attr(node("Trilu", {in(n, 0), k}, {out}), "upper", int64_t(op == "triu"));
    } else if (op == "remainder" || op == "fmod") {
      attr(node("Mod", {in(n, 0), in(n, 1)}, {out}), "fmod", int64_t(op == "fmod"));
    } else if (op == "pad") {
      std::vector<int64_t> list = *get<std::vector<int64_t>>(n, 1);
      const int64_t r = in_rank(n, 0), k = int64_t(list.size()) / 2;
      std::vector<int64_t> pads(size_t(2 * r), 0);
      for (int64_t i = 0; i < k; ++i) {  // [last_lo, last_hi, prev_lo, ...] -> [x1_begin, ..., x1_end, ...]
        pads[size_t(r - 1 - i)] = list[size_t(2 * i)];
        pads[size_t(2 * r - 1 - i)] = list[size_t(2 * i + 1)];
      }
      const std::string mode = get<std::string>(n, 2).value_or("constant");
      std::vector<std::string> ins{in(n, 0), ints(pads)};
      if (mode == "constant") ins.push_back(scalar(get<double>(n, 3).value_or(0.0), ep_.graph.type(n.outputs[0]).dtype));
      attr(node("Pad", ins, {out}), "mode",
           mode == "replicate" ? std::string("edge") : mode == "circular" ? std::string("wrap") : mode);
    } else if (op == "cumsum") {
      node("CumSum", {in(n, 0), initializer(host_tensor({*get<int64_t>(n, 1)}, {}, kInt64), "axis")}, {out});
    } else if (t == compiler::kViewTarget) {
      node("Reshape", {in(n, 0), view_shape(n)}, {out});
    } else if (t == compiler::kPermuteTarget) {
      attr(node("Transpose", {in(n, 0)}, {out}), "perm", *get<std::vector<int64_t>>(n, 1));
    } else {
      fail(n, "has no ONNX equivalent in this exporter");
    }
  }

  // The weight a norm without one implies: ones over the normalised shape.
  std::string ones_like_norm(const Node& n) {
    std::vector<int64_t> shape = get<std::vector<int64_t>>(n, 1).value_or(std::vector<int64_t>{});
    ExcludeDispatchKeyGuard plain(DispatchKeySet::functionality(Functionality::Export));
    return initializer(tessera::ones(shape, tessera::dtype(ep_.graph.type(n.outputs[0]).dtype)), "ones");
  }

  void window(const Node& n, const std::string& op, const std::string& out) {
    auto two = [&](size_t i, int64_t dflt) {
      std::vector<int64_t> v = get<std::vector<int64_t>>(n, i).value_or(std::vector<int64_t>{});
      if (v.empty()) v = {dflt, dflt};
      if (v.size() == 1) v.push_back(v[0]);
      return v;
    };
    ::onnx::NodeProto* a = nullptr;
    std::vector<int64_t> pad, stride, dilation;
    if (op == "conv2d") {
      std::vector<std::string> ins{in(n, 0), in(n, 1)};
      if (given(n, 2)) ins.push_back(in(n, 2));
      a = node("Conv", ins, {out});
      stride = two(3, 1), pad = two(4, 0), dilation = two(5, 1);
      attr(a, "group", get<int64_t>(n, 6).value_or(1));
    } else {
      std::vector<int64_t> kernel = two(1, 1);
      a = node(op == "max_pool2d" ? "MaxPool" : "AveragePool", {in(n, 0)}, {out});
      attr(a, "kernel_shape", kernel);
      stride = get<std::vector<int64_t>>(n, 2).value_or(std::vector<int64_t>{});
      if (stride.empty()) stride = kernel;
      if (stride.size() == 1) stride.push_back(stride[0]);
      pad = two(3, 0);
      if (op == "max_pool2d") dilation = two(4, 1);
      else attr(a, "count_include_pad", int64_t(1));
    }
    if (in_rank(n, 0) != 4) fail(n, "a 3-D (unbatched) input");
    attr(a, "strides", stride);
    attr(a, "pads", std::vector<int64_t>{pad[0], pad[1], pad[0], pad[1]});
    if (!dilation.empty()) attr(a, "dilations", dilation);
  }

  void value_info(::onnx::ValueInfoProto* vi, const std::string& n, ValueId v) {
    const compiler::TensorType& t = ep_.graph.type(v);
    vi->set_name(n);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    const int32_t dt = onnx_of_dtype(t.dtype);
    TESSERA_CHECK(dt != ::onnx::TensorProto::UNDEFINED, "onnx export: value '", n, "' has dtype ",
                  compiler::dtype_short_name(t.dtype), ", which ONNX has no type for");
    tt->set_elem_type(dt);
    auto* shape = tt->mutable_shape();
    for (const compiler::SymSize& s : t.sizes) {
      auto* d = shape->add_dim();
      if (s.is_constant()) d->set_dim_value(s.constant());
      else d->set_dim_param(s.str());
    }
  }

  void run() {
    for (const compiler::InputSpec& in : ep_.signature.inputs) {
      if (in.kind == compiler::InputKind::UserInput) {
        value_info(g_.add_input(), name(in.value), in.value);
      } else {
        auto w = ep_.weights.find(in.name);
        TESSERA_CHECK(w != ep_.weights.end(), "onnx export: weight '", in.name, "' is missing");
        tensor_proto(g_.add_initializer(), name(in.value), w->second);
      }
    }
    for (const Node& n : ep_.graph.nodes)
      if (n.kind == NodeKind::Call) call(n);
    // Graph inputs and outputs keep the program's names (Identity nodes rename).
    std::map<std::string, std::string> renamed;
    for (const compiler::InputSpec& in : ep_.signature.inputs)
      if (in.kind == compiler::InputKind::UserInput) {
        for (auto& node : *g_.mutable_node())
          for (auto& i : *node.mutable_input())
            if (i == name(in.value)) i = in.name;
        for (auto& vi : *g_.mutable_input())
          if (vi.name() == name(in.value)) vi.set_name(in.name);
        renamed[name(in.value)] = in.name;
      }
    for (const compiler::OutputSpec& o : ep_.signature.outputs) {
      auto r = renamed.find(name(o.value));
      const std::string src = r != renamed.end() ? r->second : name(o.value);
      node("Identity", {src}, {o.name});
      value_info(g_.add_output(), o.name, o.value);
    }
  }

 private:
  const ExportedProgram& ep_;
  ::onnx::GraphProto& g_;
  int next_ = 0;
};

}  // namespace

std::string export_model_bytes(const ExportedProgram& program) {
  ::onnx::ModelProto m;
  m.set_ir_version(10);
  m.set_producer_name("tessera");
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(kExportOpset);
  Writer(program, *m.mutable_graph()).run();
  m.mutable_graph()->set_name("tessera_program");
  std::string out;
  TESSERA_CHECK(m.SerializeToString(&out), "onnx export: the model does not serialise (over 2 GB?)");
  return out;
}

void export_model(const ExportedProgram& program, const std::string& path) {
  const std::string bytes = export_model_bytes(program);
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  TESSERA_CHECK(f.good(), "onnx export: cannot write '", path, "'");
}

}  // namespace tessera::onnx
