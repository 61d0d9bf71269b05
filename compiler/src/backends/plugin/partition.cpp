// Partitions of a program run by a compiler plugin (Note [Compiler plugin ABI] in plugin_abi.h).
#include "backends/plugin/partition.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "c_tensor.h"
#include "runtime/bind.h"
#include "runtime/interpret.h"
#include "tessera/compiler/graph_abi.h"
#include "tessera/dispatcher.h"
#include "tessera/profiler.h"
#include "tessera/error.h"
#include "tessera/log.h"
#include "tessera/ops.h"
#include "tessera/plugin_loader.h"
#include "tessera/stream.h"

namespace tessera::compiler {

namespace {

// Note [Plugin status to error] (plugin_loader.h), naming the plugin and the call.
void check_status(tessera_status_t status, const std::string& plugin, const char* call) {
  if (status) throw_status(status, "compiler plugin '" + plugin + "': " + call + " failed");
}

}  // namespace

const tessera_compiler_interface_t& compiler_plugin(const std::string& name) {
  auto get = extension_of_kind<tessera_ext_compiler_fn_t>(
      PluginKind::Compiler, name, {.who = "compile", .role = "backend", .alternatives = "cpp, interpreter, eager or "});
  const tessera_compiler_interface_t* table = get ? get() : nullptr;
  // The 1.2 slots must be there; the 1.3 ones are read only where struct_size holds them.
  TESSERA_CHECK(TESSERA_ABI_HAS_FIELD(table, tessera_compiler_interface_t, release) &&
                    table->get_capability && table->compile && table->run && table->release,
                "compile: plugin '", name, "' offers no complete ", TESSERA_EXT_COMPILER,
                " table (Note [Compiler plugin ABI]); it cannot compile graphs");
  return *table;
}

PartitionedProgram::PartitionedProgram(ExportedProgram program, const std::string& plugin, const Device& device,
                                       const std::vector<int32_t>* group_of_node)
    : program_(std::move(program)), plugin_(&compiler_plugin(plugin)), plugin_name_(plugin), device_(device) {
  for (const InputSpec& in : program_.signature.inputs) {
    if (in.kind == InputKind::UserInput) continue;
    auto w = program_.weights.find(in.name);
    TESSERA_CHECK(w != program_.weights.end(), "the program has no weight '", in.name, "'");
    weights_.emplace_back(in.value, w->second.to(device_));
  }
  const Graph& g = program_.graph;
  const int32_t n = int32_t(g.nodes.size());
  std::vector<int32_t>& group = group_of_node_;
  if (group_of_node) {  // a stored answer (CompiledProgram::load)
    TESSERA_CHECK(group_of_node->size() == g.nodes.size(), "compiler plugin '", plugin_name_, "': the stored ",
                  "partitioning has ", group_of_node->size(), " entries for ", g.nodes.size(), " nodes");
    group = *group_of_node;
  } else {
    group.assign(g.nodes.size(), -1);
    GraphHandle h(program_, false);
    check_status(plugin_->get_capability(plugin_->self, h.get(), device_.str().c_str(), group.data()),
                 plugin_name_, "get_capability");
  }
  // Only call nodes can be claimed: a placeholder or the output in a group is the plugin's bug, not
  // something to skip quietly (Note [Compiler plugin ABI]).
  for (int32_t i = 0; i < n; ++i)
    TESSERA_CHECK(group[size_t(i)] < 0 || g.nodes[size_t(i)].kind == NodeKind::Call, "compiler plugin '",
                  plugin_name_, "': get_capability put node ", i, " (",
                  g.nodes[size_t(i)].kind == NodeKind::Placeholder ? "a placeholder" : "the output",
                  ") in group ", group[size_t(i)], "; only call nodes can be claimed, others must be -1");
  // Runs of consecutive call nodes with one group id are the partitions.
  partition_at_node_.assign(g.nodes.size(), -1);
  for (int32_t i = 0; i < n;) {
    const Node& node = g.nodes[size_t(i)];
    if (group[size_t(i)] < 0 || node.kind != NodeKind::Call) {
      ++i;
      continue;
    }
    Partition p;
    p.first_node = size_t(i);
    while (i < n && g.nodes[size_t(i)].kind == NodeKind::Call && group[size_t(i)] == group[p.first_node]) ++i;
    p.end_node = size_t(i);
    std::set<ValueId> produced;
    for (size_t k = p.first_node; k < p.end_node; ++k) {
      for (const Argument& a : g.nodes[k].args)
        for (ValueId v : a.values)
          if (!produced.count(v) && std::find(p.inputs.begin(), p.inputs.end(), v) == p.inputs.end())
            p.inputs.push_back(v);
      produced.insert(g.nodes[k].outputs.begin(), g.nodes[k].outputs.end());
    }
    std::set<ValueId> used_later;
    for (size_t k = p.end_node; k < g.nodes.size(); ++k)
      for (const Argument& a : g.nodes[k].args) used_later.insert(a.values.begin(), a.values.end());
    for (size_t k = p.first_node; k < p.end_node; ++k)
      for (ValueId v : g.nodes[k].outputs)
        if (used_later.count(v)) p.outputs.push_back(v);
    partition_at_node_[p.first_node] = int32_t(partitions_.size());
    partitions_.push_back(std::move(p));
  }
  // Each partition as a program of its own: the graph's value table, its inputs as placeholders.
  for (Partition& p : partitions_) {
    ExportedProgram sub;
    sub.graph.values = g.values;
    sub.ranges = program_.ranges;
    sub.op_contract_version = program_.op_contract_version;
    for (ValueId v : p.inputs) {
      sub.graph.nodes.push_back({NodeKind::Placeholder, g.value_name(v).substr(1), {}, {v}});
      sub.signature.inputs.push_back({InputKind::UserInput, g.value_name(v).substr(1), v});
    }
    for (size_t k = p.first_node; k < p.end_node; ++k) sub.graph.nodes.push_back(g.nodes[k]);
    Node out{NodeKind::Output, "", {}, {}};
    for (ValueId v : p.outputs) {
      out.args.push_back(Argument::tensor(v));
      sub.signature.outputs.push_back({g.value_name(v).substr(1), v});
    }
    sub.graph.nodes.push_back(std::move(out));
    GraphHandle h(sub, false);
    tessera_status_t status = plugin_->compile(plugin_->self, h.get(), device_.str().c_str(), &p.executable);
    if (status || !p.executable) {
      p.executable = nullptr;
      for (Partition& done : partitions_)
        if (done.executable) plugin_->release(plugin_->self, std::exchange(done.executable, nullptr));
      check_status(status, plugin_name_, "compile");
      TESSERA_CHECK(false, "compiler plugin '", plugin_name_, "': compile returned an OK status but no executable for a ",
                    "partition of ", p.end_node - p.first_node, " nodes; a plugin that cannot compile a partition ",
                    "returns an error status (its get_capability should not have claimed it)");
    }
  }
  if (log_enabled("compile"))
    log_message(LogLevel::Info, "compile",
                "compiler plugin '" + plugin_name_ + "' took " + std::to_string(partitions_.size()) +
                    " partitions on " + device_.str());
}

PartitionedProgram::~PartitionedProgram() {
  for (Partition& p : partitions_)
    if (p.executable) plugin_->release(plugin_->self, p.executable);
}

std::vector<Tensor> PartitionedProgram::run(const std::vector<Tensor>& inputs) const {
  const Graph& g = program_.graph;
  const Bindings bindings = bind_user_inputs(program_, inputs);
  std::vector<Tensor> env(g.values.size());
  size_t k = 0;
  for (const InputSpec& in : program_.signature.inputs)
    if (in.kind == InputKind::UserInput) env[size_t(in.value)] = inputs.at(k++);
  for (const auto& [v, t] : weights_) env[size_t(v)] = t;
  auto value = [&](ValueId v) -> const Tensor& {
    const Tensor& t = env.at(size_t(v));
    TESSERA_INTERNAL_ASSERT(t.defined(), "value ", g.value_name(v), " is used before it is computed");
    return t;
  };
  std::vector<Tensor> outputs;
  for (size_t i = 0; i < g.nodes.size();) {
    const Node& n = g.nodes[i];
    if (const int32_t at = partition_at_node_[i]; at >= 0) {
      const Partition& p = partitions_[size_t(at)];
      std::vector<Tensor> ins, outs;
      for (ValueId v : p.inputs) {
        Tensor t = value(v);
        if (t.device() != device_) t = t.to(device_);  // only where devices differ
        ins.push_back(t.contiguous());
      }
      for (ValueId v : p.outputs) {
        const TensorType& type = g.type(v);
        std::vector<int64_t> sizes;
        for (const SymSize& s : type.sizes) sizes.push_back(s.evaluate(bindings));
        outs.push_back(empty(sizes, TensorOptions().dtype(type.dtype).device(device_)));
      }
      std::vector<tessera_tensor_t> c_ins(ins.size()), c_outs(outs.size());
      for (size_t k = 0; k < ins.size(); ++k) detail::fill_c_tensor(c_ins[k], ins[k].impl());
      for (size_t k = 0; k < outs.size(); ++k) detail::fill_c_tensor(c_outs[k], outs[k].impl());
      std::vector<const tessera_tensor_t*> in_ptrs, out_ptrs;
      for (const auto& c : c_ins) in_ptrs.push_back(&c);
      for (const auto& c : c_outs) out_ptrs.push_back(&c);
      // The host side of the run in the profile; the plugin's spans correlate with it (Note [Plugin
      // spans] in tessera/plugin_abi.h).
      ProfilerRange range;
      if (profiler_enabled()) range.begin("partition", plugin_name_ + " partition " + std::to_string(at), device_);
      check_status(plugin_->run(plugin_->self, p.executable, in_ptrs.data(), int32_t(in_ptrs.size()),
                                out_ptrs.data(), int32_t(out_ptrs.size()), current_stream(device_).handle()),
                   plugin_name_, "run");
      for (size_t o = 0; o < p.outputs.size(); ++o) env[size_t(p.outputs[o])] = outs[o];
      i = p.end_node;
      continue;
    }
    ++i;
    if (n.kind == NodeKind::Placeholder) continue;
    if (n.kind == NodeKind::Output) {
      for (const Argument& a : n.args) outputs.push_back(value(a.values.at(0)));
      continue;
    }
    std::vector<Tensor> results = execute_node(g, n, env, bindings);
    TESSERA_CHECK(results.size() == n.outputs.size(), "'", n.target, "' returned ", results.size(),
                  " outputs, the graph expects ", n.outputs.size());
    for (size_t o = 0; o < results.size(); ++o) env[size_t(n.outputs[o])] = std::move(results[o]);
  }
  return outputs;
}

}  // namespace tessera::compiler
