// Internal: a program whose call nodes are partly run by a compiler plugin's executables (Note
// [Compiler plugin ABI] in plugin_abi.h).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tessera/compiler/ir.h"
#include "tessera/plugin_abi.h"

namespace tessera::compiler {

// The compiler table of the loaded plugin `name` (kind "compiler"). Throws tessera::Error naming
// the plugin when it is not listed, is not a compiler, does not load or offers no TESSERA_EXT_COMPILER.
const tessera_compiler_interface_t& compiler_plugin(const std::string& name);

class PartitionedProgram {
 public:
  // Asks the plugin which nodes it takes on `device` (or takes `group_of_node`, an earlier answer,
  // when given) and compiles each partition; copies the weights to `device` once. Throws
  // tessera::Error with the plugin's message when a call fails.
  PartitionedProgram(ExportedProgram program, const std::string& plugin, const Device& device,
                     const std::vector<int32_t>* group_of_node = nullptr);
  ~PartitionedProgram();  // releases every executable
  PartitionedProgram(const PartitionedProgram&) = delete;
  PartitionedProgram& operator=(const PartitionedProgram&) = delete;

  // The user inputs in signature order, already accepted by the artifact's guards. Thread-safe.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const;
  size_t partitions() const { return partitions_.size(); }
  // The plugin's get_capability answer, one entry per node of the program.
  const std::vector<int32_t>& group_of_node() const { return group_of_node_; }
  const ExportedProgram& program() const { return program_; }

 private:
  struct Partition {
    size_t first_node = 0, end_node = 0;  // [first, end) of program_.graph.nodes
    std::vector<ValueId> inputs, outputs;
    void* executable = nullptr;
  };
  ExportedProgram program_;
  const tessera_compiler_interface_t* plugin_ = nullptr;
  std::string plugin_name_;
  Device device_;
  std::vector<Partition> partitions_;
  std::vector<int32_t> group_of_node_;
  std::vector<int32_t> partition_at_node_;           // index into partitions_ where one starts, else -1
  std::vector<std::pair<ValueId, Tensor>> weights_;  // on device_
};

}  // namespace tessera::compiler
