// Helpers the passes share (private to compiler/src/passes).
#pragma once
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
