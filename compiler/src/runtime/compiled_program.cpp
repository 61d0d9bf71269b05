// Programs compiled ahead of time by a compiler plugin, and the compatibility check at load (Note
// [Compiled artifact compatibility] in plugin_abi.h).
#include "tessera/compiler/compiled_program.h"

#include <algorithm>
#include <string>
#include <utility>

#include "backends/cpp/toolchain.h"
#include "backends/plugin/partition.h"
#include "runtime/interpret.h"
#include "tessera/compiler/program_file.h"
#include "tessera/error.h"
#include "tessera/log.h"
#include "tessera/plugin_loader.h"

namespace tessera::compiler {

struct CompiledProgram::State {
  std::unique_ptr<PartitionedProgram> partitioned;
  ExportedProgram program;  // with its compiled record
  Compatibility verdict = Compatibility::Optimal;
  std::string recompile_reason;
};

namespace {

// Compiles `program` (the stored partitioning `groups` when given, else the plugin's answer now)
// and records what was compiled; an artifact run as it is keeps its old compatibility string.
std::shared_ptr<CompiledProgram::State> compile_state(ExportedProgram program, const std::string& plugin,
                                                      const Device& device, const std::vector<int32_t>* groups) {
  auto state = std::make_shared<CompiledProgram::State>();
  ExportedProgram graph_only = program;
  graph_only.compiled.reset();
  state->partitioned = std::make_unique<PartitionedProgram>(std::move(graph_only), plugin, device, groups);
  std::string compatibility = groups && program.compiled ? program.compiled->compatibility
                                                          : compatibility_info(plugin, device);
  program.compiled = CompiledArtifact{plugin, device.str(), std::move(compatibility),
                                      state->partitioned->group_of_node()};
  state->program = std::move(program);
  return state;
}

}  // namespace

const char* compatibility_name(Compatibility c) {
  switch (c) {
    case Compatibility::Optimal: return "optimal";
    case Compatibility::PreferRecompile: return "prefer_recompile";
    case Compatibility::Unsupported: return "unsupported";
    case Compatibility::NotChecked: return "not_checked";
  }
  return "unknown";
}

std::string compatibility_info(const std::string& plugin, const Device& device) {
  const tessera_compiler_interface_t& table = compiler_plugin(plugin);
  if (!TESSERA_ABI_HAS_FIELD(&table, tessera_compiler_interface_t, compatibility_info) || !table.compatibility_info)
    return {};
  const std::string dev = device.str();
  std::string buffer(256, '\0');
  size_t need = table.compatibility_info(table.self, dev.c_str(), buffer.data(), buffer.size());
  if (need >= buffer.size()) {
    TESSERA_CHECK(need < (size_t(1) << 20), "compiler plugin '", plugin, "': compatibility_info reports ", need,
                  " bytes; a compatibility string is one short line");
    buffer.assign(need + 1, '\0');
    need = table.compatibility_info(table.self, dev.c_str(), buffer.data(), buffer.size());
  }
  buffer.resize(std::min(need, buffer.size() - 1));
  return buffer;
}

Compatibility validate_compatibility(const std::string& plugin, const Device& device, const std::string& info,
                                     std::string* reason) {
  const tessera_compiler_interface_t& table = compiler_plugin(plugin);
  if (info.empty() || !TESSERA_ABI_HAS_FIELD(&table, tessera_compiler_interface_t, validate_compatibility) ||
      !table.validate_compatibility)
    return Compatibility::NotChecked;
  int32_t verdict = TESSERA_COMPATIBILITY_UNSUPPORTED;
  if (tessera_status_t status = table.validate_compatibility(table.self, device.str().c_str(), info.c_str(), &verdict)) {
    try {
      throw_status(status, "validate_compatibility failed");  // frees the status (Note [Plugin status to error])
    } catch (const Error& e) {
      if (reason) *reason = e.what();
    }
    return Compatibility::Unsupported;
  }
  if (verdict < TESSERA_COMPATIBILITY_OPTIMAL || verdict > TESSERA_COMPATIBILITY_UNSUPPORTED) {
    if (reason) *reason = "validate_compatibility answered " + std::to_string(verdict) + ", not a verdict";
    return Compatibility::Unsupported;
  }
  return Compatibility(verdict);
}

CompiledProgram CompiledProgram::compile(ExportedProgram program, const std::string& plugin, const Device& device) {
  return CompiledProgram(compile_state(std::move(program), plugin, device, nullptr));
}

CompiledProgram CompiledProgram::load(ExportedProgram program, LoadCompiledOptions options) {
  TESSERA_CHECK(program.compiled, "CompiledProgram::load: the program carries no compiled record; compile it with ",
                "CompiledProgram::compile(program, plugin, device) and save that");
  const CompiledArtifact artifact = *program.compiled;
  const Device device(artifact.device);
  std::string why;
  const Compatibility verdict = validate_compatibility(artifact.backend, device, artifact.compatibility, &why);
  std::shared_ptr<State> state;
  if (verdict == Compatibility::Optimal || verdict == Compatibility::NotChecked) {
    state = compile_state(std::move(program), artifact.backend, device, &artifact.group_of_node);
  } else {
    const std::string now = compatibility_info(artifact.backend, device);
    const std::string reason = "the artifact made by \"" + artifact.compatibility + "\" is " +
                               compatibility_name(verdict) + " for compiler plugin '" + artifact.backend + "' on " +
                               artifact.device + " (now \"" + now + "\")" + (why.empty() ? "" : ": " + why);
    if (!options.allow_recompile && verdict == Compatibility::Unsupported)
      detail::throw_error(ErrorCode::Unavailable,
                          "CompiledProgram::load: refused: " + reason +
                              "; recompilation is not allowed (LoadCompiledOptions::allow_recompile): compile the "
                              "program again with this plugin, or install the plugin version that made it");
    if (!options.allow_recompile) {
      codegen::compile_warning(reason + "; running it as it is (recompilation is not allowed)");
      state = compile_state(std::move(program), artifact.backend, device, &artifact.group_of_node);
    } else {
      codegen::compile_warning(reason + "; recompiling");
      state = compile_state(std::move(program), artifact.backend, device, nullptr);
      state->recompile_reason = reason;
    }
  }
  state->verdict = verdict;
  if (log_enabled("compile"))
    log_message(LogLevel::Info, "compile",
                "loaded a program compiled by '" + artifact.backend + "' for " + artifact.device + ": " +
                    compatibility_name(verdict) + (state->recompile_reason.empty() ? "" : ", recompiled"));
  return CompiledProgram(std::move(state));
}

CompiledProgram CompiledProgram::load(const std::string& path, LoadCompiledOptions options) {
  return load(load_program(path), options);
}

void CompiledProgram::save(const std::string& path) const { compiler::save(state_->program, path); }

std::vector<Tensor> CompiledProgram::operator()(const std::vector<Tensor>& inputs) const {
  check_run_inputs(state_->program, inputs);
  return state_->partitioned->run(inputs);
}

const ExportedProgram& CompiledProgram::program() const { return state_->program; }
size_t CompiledProgram::partitions() const { return state_->partitioned->partitions(); }
Compatibility CompiledProgram::verdict() const { return state_->verdict; }
const std::string& CompiledProgram::recompile_reason() const { return state_->recompile_reason; }

CompiledProgram::CompiledProgram(std::shared_ptr<const State> state) : state_(std::move(state)) {}

}  // namespace tessera::compiler
