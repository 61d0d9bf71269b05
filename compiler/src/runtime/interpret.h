// One step of the interpreter (private to compiler/src): Note [Running a program] in run.cpp.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "tessera/compiler/ir.h"
#include "tessera/dispatcher.h"

namespace tessera::compiler {

// A node's constant argument as a boxed operator argument (None stays None).
Value constant_value(const Constant& c);

// Runs Call node `n` on the tensors of `env` (indexed by value id) with the symbols bound to
// `bindings`; returns its outputs (unchecked against the graph's types).
std::vector<Tensor> execute_node(const Graph& graph, const Node& n, const std::vector<Tensor>& env,
                                 const std::map<std::string, int64_t>& bindings);

// Checks `inputs` against `program`'s user inputs (count, device, rank, dtype, sizes, ranges,
// guards) with ExportedProgram::run's one-line errors and returns the bound symbols; `out_device`
// (optional) receives the inputs' device.
std::map<std::string, int64_t> check_run_inputs(const ExportedProgram& program, const std::vector<Tensor>& inputs,
                                                Device* out_device = nullptr);

}  // namespace tessera::compiler
