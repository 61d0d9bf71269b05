// Internal, stage 2 of generate_cpp (Note [Generated loops] in cpp_gen.cpp): the memory plan.
// Takes the program and its fusion plan; gives where every value that crosses steps lives: a
// placeholder's input pointer, a graph output's output pointer, an extern result's host tensor,
// or a scratch slot (host->alloc), slots reused once their last reader has run. Emits no text.
#pragma once
#include <map>
#include <set>
#include <vector>

#include "backends/cpp/fusion_plan.h"
#include "tessera/compiler/codegen.h"
#include "tessera/compiler/ir.h"

namespace tessera::compiler::codegen::cppgen {

struct MemoryPlan {
  std::map<ValueId, int> placeholder_index;  // value -> call->inputs index
  std::map<ValueId, int> output_index;       // value -> call->outputs index
  std::map<ValueId, int> slot_of;            // value -> scratch slot
  std::map<ValueId, int> last_use;           // value -> the last step that reads it (outputs: past the end)
  std::set<ValueId> extern_values;           // results of extern steps (the host's tensors)
  std::vector<SymSize> slot_bytes;
  std::vector<ValueId> outputs;         // in call->outputs order
  std::vector<ValueId> extern_outputs;  // graph outputs an extern step produces
  std::vector<ValueId> strided_values;  // extern results only extern steps read, of host tensors
  // A value is written to memory when a later step or the output reads it.
  bool materialised(ValueId v) const { return last_use.count(v) > 0; }
  // What the host needs of the plan: out.outputs, extern_outputs, strided_values, slot_bytes.
  void describe(GeneratedSource& out) const;
};

MemoryPlan plan_memory(const ExportedProgram& p, const FusionPlan& plan);

}  // namespace tessera::compiler::codegen::cppgen
