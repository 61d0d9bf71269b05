// fuse_linear_epilogues: linear or matmul -> bias add -> relu / gelu -> residual add chains become
// one call of the CPU backend's _linear_epilogue, conv2d -> relu / gelu one _conv2d_epilogue
// (Note [Linear epilogues] in plugins/cpu/nn/onednn_ops.cpp).
#include "tessera/compiler/codegen.h"

#include <map>
#include <optional>
#include <string>
#include <utility>

#include "tessera/dispatcher.h"
#include "tessera/env.h"
#include "tessera/log.h"
#include "tessera/op_names.h"
#include "tessera/plugin_loader.h"

namespace tessera::compiler::codegen {
namespace {

// Ops the CPU backend provides (declared in ops.json with "provider": "cpu"); other backends may
// register kernels for them (the CUDA plugin's _linear_epilogue, Note [Linear epilogues on CUDA]).
constexpr const char* kEpilogueOp = op::_linear_epilogue::name;
constexpr const char* kConvEpilogueOp = op::_conv2d_epilogue::name;

// Whether the backend of `device` has a kernel of `name` for `dtype`. On the CPU the generated code
// calls the oneDNN kernels, which take float32 and bfloat16; elsewhere the interpreter dispatches
// the fused node to whatever the backend registered.
bool epilogue_op_available(DType dtype, const Device& device, const char* name = kEpilogueOp) {
  if (device.is_cpu() && dtype != DType::Float32 && dtype != DType::BFloat16) return false;
  if (!ensure_backend_loaded(device.type())) return false;
  Dispatcher& d = Dispatcher::instance();
  OperatorEntry* op = d.find_op(name);
  return op && d.resolution(*op, device.type(), dtype) == Resolution::Kernel;
}

bool is_one(const Argument& a) {
  if (a.kind != Argument::Kind::Constant) return false;
  if (auto* i = std::get_if<int64_t>(&a.constant)) return *i == 1;
  if (auto* d = std::get_if<double>(&a.constant)) return *d == 1.0;
  return false;
}

class EpilogueFuser {
 public:
  explicit EpilogueFuser(ExportedProgram& p) : g_(p.graph) {}

  bool run() {
    for (const Node& n : g_.nodes)
      for (const Argument& a : n.args)
        for (ValueId v : a.values) ++reads_[v];
    std::vector<bool> removed(g_.nodes.size(), false);
    std::map<size_t, std::vector<Node>> fused_at;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const Node& n = g_.nodes[i];
      if (!removed[i] && n.kind == NodeKind::Call && n.target == op::conv2d::name) {
        fuse_conv(i, removed, fused_at);
        continue;
      }
      const bool is_linear = n.target == op::linear::name, is_matmul = n.target == op::matmul::name;
      if (removed[i] || n.kind != NodeKind::Call || !(is_linear || is_matmul) || n.outputs.size() != 1 ||
          n.args.size() < 2 || n.args[0].kind != Argument::Kind::Tensor || n.args[1].kind != Argument::Kind::Tensor)
        continue;
      const TensorType out = g_.type(n.outputs[0]);
      const TensorType w = g_.type(n.args[1].values[0]);
      const TensorType& x = g_.type(n.args[0].values[0]);
      if (w.sizes.size() != 2) continue;
      // in_features: linear's weight is [N, K], matmul's right operand [K, N] (x [..., M, K]).
      const SymSize& k = is_linear ? w.sizes[1] : w.sizes[0];
      if (x.dtype != out.dtype || w.dtype != out.dtype || !k.maybe_constant() || *k.maybe_constant() <= 0 ||
          (is_matmul && (x.sizes.size() < 2 || n.args.size() != 2)))
        continue;
      Argument bias = Argument::none();
      if (n.args.size() > 2 && n.args[2].kind == Argument::Kind::Tensor) bias = n.args[2];
      else if (n.args.size() > 2 && n.args[2].kind != Argument::Kind::None &&
               !(n.args[2].kind == Argument::Kind::Constant && std::holds_alternative<std::monostate>(n.args[2].constant)))
        continue;
      ValueId v = n.outputs[0];
      size_t last = i;
      std::vector<size_t> absorbed;
      auto absorb = [&](int u) {
        absorbed.push_back(size_t(u));
        last = size_t(u);
        v = g_.nodes[size_t(u)].outputs[0];
        return sole_reader(v, removed);
      };
      int u = sole_reader(v, removed);
      // A bias the product did not take: + b with b [N] along the last dim.
      if (u >= 0 && bias.kind == Argument::Kind::None && out.sizes.size() >= 2) {
        if (auto b = added_to(g_.nodes[size_t(u)], v)) {
          const TensorType& bt = g_.type(*b);
          if (bt.dtype == out.dtype && bt.device == out.device && bt.sizes.size() == 1 &&
              bt.sizes[0].same_as(out.sizes.back())) {
            bias = Argument::tensor(*b);
            u = absorb(u);
          }
        }
      }
      std::string activation = "none";
      if (u >= 0)
        if (auto act = activation_of(g_.nodes[size_t(u)])) {
          activation = *act;
          u = absorb(u);
        }
      Argument residual = Argument::none();
      if (u >= 0)
        if (auto r = added_to(g_.nodes[size_t(u)], v); r && g_.type(*r).same_as(g_.type(v))) {
          residual = Argument::tensor(*r);
          u = absorb(u);
        }
      if (absorbed.empty() || !epilogue_op_available(out.dtype, out.device)) continue;
      removed[i] = true;
      for (size_t a : absorbed) removed[a] = true;
      std::vector<Node>& nodes = fused_at[last];
      Argument weight = n.args[1];
      if (is_matmul) {  // linear reads its weight [N, K] through strides: the transposed view, no copy
        TensorType wt = w;
        std::swap(wt.sizes[0], wt.sizes[1]);
        const ValueId t = g_.add_value(wt);
        nodes.push_back(Node{NodeKind::Call, "permute",
                             {n.args[1], Argument::constant_value(std::vector<int64_t>{1, 0})}, {t}});
        weight = Argument::tensor(t);
      }
      nodes.push_back(Node{NodeKind::Call, kEpilogueOp,
                           {n.args[0], weight, bias, residual, Argument::constant_value(activation)}, {v}});
    }
    if (fused_at.empty()) return false;
    std::vector<Node> old = std::move(g_.nodes);
    g_.nodes.clear();
    for (size_t i = 0; i < old.size(); ++i) {
      if (auto it = fused_at.find(i); it != fused_at.end())
        for (Node& f : it->second) g_.nodes.push_back(std::move(f));
      else if (!removed[i])
        g_.nodes.push_back(std::move(old[i]));
    }
    if (log_enabled("compile"))
      log_message(LogLevel::Info, "compile",
                  "fused " + std::to_string(fused_at.size()) + " linear/matmul/conv2d epilogue(s) into " +
                      kEpilogueOp + " / " + kConvEpilogueOp);
    return true;
  }

  // conv2d -> relu / gelu: one _conv2d_epilogue with conv2d's arguments (defaults written out).
  void fuse_conv(size_t i, std::vector<bool>& removed, std::map<size_t, std::vector<Node>>& fused_at) {
    const Node& n = g_.nodes[i];
    if (n.outputs.size() != 1 || n.args.size() < 2 || n.args.size() > 7 || n.args[0].kind != Argument::Kind::Tensor ||
        n.args[1].kind != Argument::Kind::Tensor)
      return;
    const TensorType& out = g_.type(n.outputs[0]);
    if (g_.type(n.args[0].values[0]).dtype != out.dtype || g_.type(n.args[1].values[0]).dtype != out.dtype)
      return;
    if (n.args.size() > 4 && n.args[4].kind == Argument::Kind::Constant &&
        std::holds_alternative<std::string>(n.args[4].constant))
      return;  // padding="same" / "valid": the CPU kernel takes integers only
    const int u = sole_reader(n.outputs[0], removed);
    if (u < 0) return;
    const auto act = activation_of(g_.nodes[size_t(u)]);
    if (!act || !epilogue_op_available(out.dtype, out.device, kConvEpilogueOp)) return;
    std::vector<Argument> args = n.args;
    const Argument defaults[] = {Argument::none(), Argument::none(),
                                 Argument::none(), Argument::constant_value(std::vector<int64_t>{1, 1}),
                                 Argument::constant_value(std::vector<int64_t>{0, 0}),
                                 Argument::constant_value(std::vector<int64_t>{1, 1}),
                                 Argument::constant_value(int64_t(1))};
    while (args.size() < 7) args.push_back(defaults[args.size()]);
    args.push_back(Argument::constant_value(*act));
    removed[i] = removed[size_t(u)] = true;
    fused_at[size_t(u)].push_back(Node{NodeKind::Call, kConvEpilogueOp, std::move(args), {g_.nodes[size_t(u)].outputs[0]}});
  }

 private:
  // The index of the only node that reads `v`, when it reads it once and is a call; else -1.
  int sole_reader(ValueId v, const std::vector<bool>& removed) const {
    auto it = reads_.find(v);
    if (it == reads_.end() || it->second != 1) return -1;
    for (size_t i = 0; i < g_.nodes.size(); ++i)
      for (const Argument& a : g_.nodes[i].args)
        for (ValueId x : a.values)
          if (x == v) return g_.nodes[i].kind == NodeKind::Call && !removed[i] ? int(i) : -1;
    return -1;
  }

  // The other operand when `n` is add.Tensor(v, other) or add.Tensor(other, v) with alpha 1 and the
  // type of v.
  std::optional<ValueId> added_to(const Node& n, ValueId v) const {
    if (n.target != op::add_Tensor::name || n.outputs.size() != 1 || n.args.size() < 2 ||
        (n.args.size() > 2 && !is_one(n.args[2])) || n.args[0].kind != Argument::Kind::Tensor ||
        n.args[1].kind != Argument::Kind::Tensor || !g_.type(n.outputs[0]).same_as(g_.type(v)))
      return std::nullopt;
    const ValueId a = n.args[0].values[0], b = n.args[1].values[0];
    if (a == b) return std::nullopt;
    return a == v ? b : a;
  }

  // "relu", "gelu" or "gelu_tanh" when `n` applies that activation to its one tensor argument.
  static std::optional<std::string> activation_of(const Node& n) {
    if (n.kind != NodeKind::Call || n.outputs.size() != 1 || n.args.empty() || n.args[0].kind != Argument::Kind::Tensor)
      return std::nullopt;
    if (n.target == op::relu::name && n.args.size() == 1) return std::string("relu");
    if (n.target != op::gelu::name || n.args.size() > 2) return std::nullopt;
    if (n.args.size() == 1 || n.args[1].kind == Argument::Kind::None) return std::string("gelu");
    auto* s = std::get_if<std::string>(&n.args[1].constant);
    if (!s) return std::nullopt;
    if (*s == "none") return std::string("gelu");
    if (*s == "tanh") return std::string("gelu_tanh");
    return std::nullopt;
  }

  Graph& g_;
  std::map<ValueId, int> reads_;
};

}  // namespace

bool fuse_linear_epilogues(ExportedProgram& program) {
  const char* flag = env_value("TESSERA_COMPILE_EPILOGUES");
  if (flag && !parse_env_bool("TESSERA_COMPILE_EPILOGUES", flag)) return false;
  return EpilogueFuser(program).run();
}

}  // namespace tessera::compiler::codegen
