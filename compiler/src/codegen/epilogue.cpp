// fuse_linear_epilogues: linear -> relu / gelu -> add(residual) chains become one call of the CPU
// backend's _linear_epilogue (Note [Linear epilogues] in plugins/cpu/nn/onednn_ops.cpp).
#include "epilogue.h"

#include <map>
#include <string>

#include "tessera/dispatcher.h"
#include "tessera/env.h"
#include "tessera/log.h"
#include "tessera/plugin_loader.h"

namespace tessera::compiler::codegen {
namespace {

constexpr const char* kEpilogueOp = "_linear_epilogue";

bool epilogue_op_available(DType dtype) {
  if (!ensure_backend_loaded(DeviceType::CPU)) return false;
  Dispatcher& d = Dispatcher::instance();
  OperatorEntry* op = d.find_op(kEpilogueOp);
  return op && d.resolution(*op, DeviceType::CPU, dtype) == Resolution::Kernel;
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

  void run() {
    for (const Node& n : g_.nodes)
      for (const Argument& a : n.args)
        for (ValueId v : a.values) ++reads_[v];
    std::vector<bool> removed(g_.nodes.size(), false);
    std::map<size_t, Node> fused_at;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const Node& n = g_.nodes[i];
      if (removed[i] || n.kind != NodeKind::Call || n.target != "linear" || n.outputs.size() != 1 ||
          n.args.size() < 2 || n.args[0].kind != Argument::Kind::Tensor || n.args[1].kind != Argument::Kind::Tensor)
        continue;
      const TensorType& out = g_.type(n.outputs[0]);
      const TensorType& w = g_.type(n.args[1].values[0]);
      if ((out.dtype != DType::Float32 && out.dtype != DType::BFloat16) || !out.device.is_cpu() ||
          w.sizes.size() != 2 || !w.sizes[1].maybe_constant() || *w.sizes[1].maybe_constant() <= 0)
        continue;
      Argument bias = Argument::none();
      if (n.args.size() > 2 && n.args[2].kind == Argument::Kind::Tensor) bias = n.args[2];
      else if (n.args.size() > 2 && n.args[2].kind != Argument::Kind::None &&
               !(n.args[2].kind == Argument::Kind::Constant && std::holds_alternative<std::monostate>(n.args[2].constant)))
        continue;
      ValueId v = n.outputs[0];
      size_t last = i;
      std::vector<size_t> absorbed;
      std::string activation = "none";
      int u = sole_reader(v, removed);
      if (u >= 0) {
        if (auto act = activation_of(g_.nodes[size_t(u)])) {
          activation = *act;
          absorbed.push_back(size_t(u));
          last = size_t(u);
          v = g_.nodes[size_t(u)].outputs[0];
          u = sole_reader(v, removed);
        }
      }
      Argument residual = Argument::none();
      if (u >= 0) {
        const Node& add = g_.nodes[size_t(u)];
        if (add.target == "add.Tensor" && add.outputs.size() == 1 && add.args.size() >= 2 &&
            (add.args.size() < 3 || is_one(add.args[2])) && add.args[0].kind == Argument::Kind::Tensor &&
            add.args[1].kind == Argument::Kind::Tensor) {
          const ValueId a = add.args[0].values[0], b = add.args[1].values[0];
          const ValueId r = a == v ? b : a;
          if (a != b && g_.type(r).same_as(g_.type(v)) && g_.type(add.outputs[0]).same_as(g_.type(v))) {
            residual = Argument::tensor(r);
            absorbed.push_back(size_t(u));
            last = size_t(u);
            v = add.outputs[0];
          }
        }
      }
      if (absorbed.empty() || !epilogue_op_available(out.dtype)) continue;
      removed[i] = true;
      for (size_t k : absorbed) removed[k] = true;
      fused_at[last] = Node{NodeKind::Call, kEpilogueOp,
                            {n.args[0], n.args[1], bias, residual, Argument::constant_value(activation)},
                            {v}};
    }
    if (fused_at.empty()) return;
    std::vector<Node> old = std::move(g_.nodes);
    g_.nodes.clear();
    for (size_t i = 0; i < old.size(); ++i) {
      if (auto it = fused_at.find(i); it != fused_at.end()) g_.nodes.push_back(std::move(it->second));
      else if (!removed[i]) g_.nodes.push_back(std::move(old[i]));
    }
    if (log_enabled("compile"))
      log_message(LogLevel::Info, "compile",
                  "fused " + std::to_string(fused_at.size()) + " linear epilogue(s) into " + kEpilogueOp);
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

  // "relu", "gelu" or "gelu_tanh" when `n` applies that activation to its one tensor argument.
  static std::optional<std::string> activation_of(const Node& n) {
    if (n.kind != NodeKind::Call || n.outputs.size() != 1 || n.args.empty() || n.args[0].kind != Argument::Kind::Tensor)
      return std::nullopt;
    if (n.target == "relu" && n.args.size() == 1) return std::string("relu");
    if (n.target != "gelu" || n.args.size() > 2) return std::nullopt;
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

ExportedProgram fuse_linear_epilogues(const ExportedProgram& program) {
  ExportedProgram p = program;
  const char* flag = env_value("TESSERA_COMPILE_EPILOGUES");
  if (flag && !parse_env_bool("TESSERA_COMPILE_EPILOGUES", flag)) return p;
  EpilogueFuser(p).run();
  return p;
}

}  // namespace tessera::compiler::codegen
