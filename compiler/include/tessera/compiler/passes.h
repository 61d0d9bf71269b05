// Passes over the Export IR: the toolkit compilers and quantizers build on.
//
// Note [Passes]
// A pass edits an ExportedProgram in place and returns whether it changed anything. Passes keep the
// Export IR's rules (Note [Export IR]): values are never renumbered, a pass that removes a node
// leaves its values unused, placeholders stay first and in signature order, and the Output node
// stays last. PassManager runs the verifier after every pass, so a pass that breaks the program is
// named at once. Every pass and the verifier throw tessera::Error on a malformed program.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "tessera/compiler/export.h"
#include "tessera/compiler/export_macros.h"
#include "tessera/compiler/ir.h"

namespace tessera::compiler {

// Checks that the program is well formed: one Output node, last; placeholders first and matching
// the signature; every value produced once and defined before use; Call targets known to this
// runtime with arguments that fit their schema; weights present with the placeholders' dtype and
// sizes; every symbol given a range; and every output type equal to what the shape rules give from
// the inputs' types. Throws one line naming the node (or signature entry) and the problem.
TESSERA_COMPILER_API void verify(const ExportedProgram& ep);

// Removes Call nodes none of whose outputs is used (placeholders stay: they are the signature).
TESSERA_COMPILER_API bool eliminate_dead_code(ExportedProgram& ep);
// Merges Call nodes with the same target and the same arguments (ops that write in place or draw
// random numbers are left alone).
TESSERA_COMPILER_API bool eliminate_common_subexpressions(ExportedProgram& ep);
// Computes every Call whose inputs are all weights and constants (a weight-only subgraph) once on
// the CPU, and replaces it by a constant placeholder "folded_<n>" holding the result.
TESSERA_COMPILER_API bool fold_constants(ExportedProgram& ep);
// Replaces Calls of ops with a composite (a decomposition registered in the dispatcher) by the
// composite's ops, captured on the node's input types. A composite that creates tensors of its own
// (allocations, not ops) is left as it is.
TESSERA_COMPILER_API bool decompose(ExportedProgram& ep);
// Recomputes the symbolic sizes of every Call's outputs from its inputs' types with the shape rules
// (after a rewrite changed an input's type).
TESSERA_COMPILER_API bool propagate_shapes(ExportedProgram& ep);

// Note [Pattern rewrite]
// A pattern and its replacement are programs captured with export_program on the same inputs (one
// output each, no weights). rewrite() finds every subgraph of `ep` whose Calls match the pattern's
// (same targets, same constants, placeholders binding consistently to any value, intermediate
// values used only inside the match) and replaces it by the replacement's Calls.
struct Pattern {
  ExportedProgram pattern;
  ExportedProgram replacement;
};
// Captures a pattern from two functions on example inputs (their sizes only pick the op overloads).
TESSERA_COMPILER_API Pattern make_pattern(const ExportFn& pattern, const ExportFn& replacement,
                                          const std::vector<Tensor>& example_inputs);
// Returns the number of matches replaced.
TESSERA_COMPILER_API int rewrite(ExportedProgram& ep, const Pattern& p);

// Runs passes in order, each followed by verify(); an error names the pass.
class TESSERA_COMPILER_API PassManager {
 public:
  using Pass = std::function<bool(ExportedProgram&)>;
  PassManager& add(std::string name, Pass pass);
  // The default pipeline: decompose, eliminate_common_subexpressions, fold_constants,
  // eliminate_common_subexpressions, eliminate_dead_code.
  static PassManager default_pipeline();
  // Returns whether any pass changed the program.
  bool run(ExportedProgram& ep) const;

 private:
  std::vector<std::pair<std::string, Pass>> passes_;
};

}  // namespace tessera::compiler
