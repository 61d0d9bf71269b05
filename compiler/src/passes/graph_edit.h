// Helpers the passes share (private to compiler/src/passes).
#pragma once
#include <set>
#include <string>
#include <vector>

#include "tessera/compiler/ir.h"

namespace tessera::compiler {

// How many node arguments use each value (the Output node's included).
std::vector<int> use_counts(const Graph& g);
// Points every use of `from` (node arguments, the signature's outputs) at `to`.
void replace_uses(ExportedProgram& ep, ValueId from, ValueId to);
// Index of the first node that is not a placeholder.
size_t first_non_placeholder(const Graph& g);
// True for ops that write in place or draw random numbers (tagged "inplace" or "random" in the
// contract; for an op a plugin defined, a return that aliases an input), and for unknown ops.
bool writes_in_place(const std::string& target);
// Note [Constants written in place]
// A tensor fn allocates and then writes in place (zeros(n).add_(x), empty(n).uniform_()) is lifted
// as a constant of the program (Note [Program state]: it does not outlive fn). A run must not write
// that constant itself: every call would return the same memory, a later call overwriting what an
// earlier one returned, and the constant would change under the program. export_program ends with
// copy_written_constants: each in-place write whose target is a constant placeholder (a weight the
// program does not read where it lives) writes a clone instead, made afresh by every run. The
// passes keep every node whose output is written in place (written_in_place): folding such a
// clone, or a chain like zeros(n) * 2 before an add_, would make a constant the run writes again,
// and merging two clones would give two writers one tensor.
std::set<ValueId> written_in_place(const Graph& g);
// Whether the node computes one of `values` (a pass leaves such a node where it is).
bool computes_any(const Node& n, const std::set<ValueId>& values);
// Returns whether it inserted any clone.
bool copy_written_constants(ExportedProgram& ep);
// The printed form of a node's arguments, a key for comparing nodes.
std::string arguments_key(const Node& n);

// Note [Verifier problems]
// verify() and the program file's loader run the same checks (check_program). The first problem is
// thrown as a VerifyProblem that says where it lies: the index of the node in graph.nodes (-1: the
// signature or the graph as a whole) and the part of the node ("args", "outputs", "target", or ""
// for the node itself). verify() turns it into "verify: <message>"; the loader into the JSON path of
// the file it read ("model.tsr: program.json: nodes[4].target: <message>").
struct VerifyProblem {
  int64_t node = -1;
  std::string field;
  std::string message;
};
// Throws VerifyProblem on the first problem. `weights`: also check that every parameter and
// constant has its weight, of the placeholder's type (the loader checks weights as it reads them).
void check_program(const ExportedProgram& ep, bool weights);

}  // namespace tessera::compiler
