// Binding a program's symbols to the sizes of the tensors it is given (Note [Binding symbols]).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "tessera/compiler/ir.h"

namespace tessera::compiler {

// Note [Binding symbols]
// A program's dynamic dims are symbols ("s0") in the types of its inputs. Running it binds each
// symbol from the first input dim whose size is that plain symbol; a dim whose size is a constant
// or an expression ("2*s0") binds nothing and is checked afterwards by evaluating it. Two plain
// dims of one symbol must agree. The interpreter (run.cpp), generated code (compiled_graph.cpp)
// and plugin partitions (partition.cpp) all bind through these functions, so a program accepts
// the same inputs whichever way it runs.
using Bindings = std::map<std::string, int64_t>;

// Binds the plain-symbol dims of `type` to `sizes` (as many as `type` has dims). `what` names the
// input in the error ("run: input 'x'"); throws InvalidArgument when a symbol bound by an earlier
// input has another value.
void bind_symbols(const TensorType& type, IntArrayRef sizes, const std::string& what, Bindings& bindings);

// Binds the symbols of every user input of `program` from `inputs` (one tensor per user input, in
// signature order, each with as many dims as its type).
Bindings bind_user_inputs(const ExportedProgram& program, const std::vector<Tensor>& inputs);

}  // namespace tessera::compiler
