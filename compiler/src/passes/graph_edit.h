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

}  // namespace tessera::compiler
