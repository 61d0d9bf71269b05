// A program compiled ahead of time by a compiler plugin, saved with its program file and loaded
// back after asking the plugin whether the artifact still runs (Note [Compiled artifact
// compatibility] in plugin_abi.h; docs/compile.md, "Compiled programs and compatibility").
//
//   auto cp = CompiledProgram::compile(load_program("model.tsr"), "my_hardware_device_compiler",
//                                      Device("my_hardware_device:0"));
//   cp.save("model.mhd.tsr");                      // carries "mhd-compiler 1.4 mhd-isa1"
//   ...                                            // later, maybe after a driver or plugin update
//   auto again = CompiledProgram::load("model.mhd.tsr");   // validated; recompiled if stale
//   std::vector<Tensor> out = again({x});
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tessera/compiler/export_macros.h"
#include "tessera/compiler/ir.h"
#include "tessera/plugin_abi.h"

namespace tessera::compiler {

// A compiler plugin's verdict on a compiled artifact (tessera_compatibility_t).
enum class Compatibility : int32_t {
  Optimal = TESSERA_COMPATIBILITY_OPTIMAL,
  PreferRecompile = TESSERA_COMPATIBILITY_PREFER_RECOMPILE,
  Unsupported = TESSERA_COMPATIBILITY_UNSUPPORTED,
  // Nothing to check: the artifact carries no compatibility string, or the plugin has no
  // validate_compatibility slot (a plugin built against ABI 1.2): it runs as it is, as before.
  NotChecked = -1,
};
// "optimal", "prefer_recompile", "unsupported", "not_checked".
TESSERA_COMPILER_API const char* compatibility_name(Compatibility c);

// The compatibility string compiler plugin `plugin` gives artifacts it compiles for `device`; empty
// when it reports none (no ABI 1.3 slot). Loads the plugin; throws naming it when it is no compiler.
TESSERA_COMPILER_API std::string compatibility_info(const std::string& plugin, const Device& device);
// The plugin's verdict on an artifact made with `info` for `device`. NotChecked when `info` is empty
// or the plugin has no validate_compatibility slot. A plugin that fails the call (or answers a value
// outside the enum) counts as Unsupported, its message (or the value) in `reason` (optional).
TESSERA_COMPILER_API Compatibility validate_compatibility(const std::string& plugin, const Device& device,
                                                          const std::string& info, std::string* reason = nullptr);

struct LoadCompiledOptions {
  // Recompile an artifact the plugin judges PreferRecompile or Unsupported (with a warning naming
  // the verdict and both strings). false, for deployments that must not compile: a PreferRecompile
  // artifact runs as it is (with a warning) and an Unsupported one is refused (tessera::Error with
  // code Unavailable naming the plugin, the verdict and both strings). (optional) defaults to true.
  bool allow_recompile = true;
};

// Thread-safe to call; copies share the compiled partitions.
class TESSERA_COMPILER_API CompiledProgram {
 public:
  // Compiles `program` with compiler plugin `plugin` for `device` (get_capability, then compile of
  // each partition) and records the plugin's answer and compatibility string in program().compiled.
  static CompiledProgram compile(ExportedProgram program, const std::string& plugin, const Device& device);
  // A program with a `compiled` record (one that save() wrote, read back with load_program): asks the
  // plugin named there to validate its compatibility string for the recorded device, then compiles
  // the stored partitioning (Optimal, NotChecked), or recompiles or refuses as `options` says.
  // Throws when the program has no record, or when the plugin it names is not installed (naming it).
  static CompiledProgram load(ExportedProgram program, LoadCompiledOptions options = {});
  static CompiledProgram load(const std::string& path, LoadCompiledOptions options = {});

  // The program with its compiled record, as a program file (format 1.1).
  void save(const std::string& path) const;
  // Runs on `inputs` (user inputs in signature order), checked as ExportedProgram::run checks them.
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs) const;

  const ExportedProgram& program() const;
  size_t partitions() const;
  // What the plugin said at load (Optimal for compile()), and why the artifact was recompiled at
  // load ("" when it was not): "mhd-compiler 1.3 mhd-isa1" is prefer_recompile for
  // my_hardware_device_compiler on my_hardware_device:0 (now "mhd-compiler 1.4 mhd-isa1")".
  Compatibility verdict() const;
  const std::string& recompile_reason() const;

  struct State;
  explicit CompiledProgram(std::shared_ptr<const State> state);

 private:
  std::shared_ptr<const State> state_;
};

}  // namespace tessera::compiler

namespace tessera {
using compiler::CompiledProgram;
}  // namespace tessera
