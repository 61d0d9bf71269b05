// Graph capture: export_program runs a program once on tracing tensors and returns its graph.
//
// Note [Capture]
// export_program(fn, example_inputs, options) calls fn once with tracing tensors in place of the
// inputs: tensors with the Export dispatch key whose sizes and dtype are the examples' and that hold
// no data. Every op fn dispatches reaches the export hook (Note [Export hook] in dispatcher.h), which
// appends a Call node, computes the outputs' symbolic sizes with the op's shape rule on symbolic
// sizes (Note [Symbolic shape rules] in compiler/src/capture/capture_shapes.cpp) and returns new tracing tensors. Views
// (metadata-only, in core) are recovered from a tracing tensor's geometry as `view` and `permute`
// nodes, other views of static tensors as index_select with a constant index (Note [Captured
// views]). A tensor fn closes over becomes a weight: a placeholder named from options.parameters
// (by identity), else "weight_<n>" in the order of first use. Reading a tracing tensor's value
// (item(), data_ptr()) fails naming the call and the op that produced the tensor. Comparisons of
// dynamic sizes decided by the examples are recorded as the program's guards.
//
// Thread-safety: one capture per thread at a time; captures on different threads are independent.
// On failure export_program throws tessera::Error and leaves nothing behind.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tessera/compiler/export_macros.h"
#include "tessera/compiler/ir.h"
#include "tessera/tensor.h"

namespace tessera {

// A dynamic dimension: its symbol's name and the closed range of sizes the program accepts. Two
// inputs' dims declared with the same name are the same size.
struct Dim {
  std::string name;
  int64_t min = 0;
  int64_t max = INT64_MAX;
};

struct ExportOptions {
  // Names of the tensors fn closes over, like a state dict; matched by identity.
  std::map<std::string, Tensor> parameters;
  // Per user input (by position): dimension index -> Dim. (optional) defaults to every dim static.
  std::vector<std::map<int64_t, Dim>> dynamic_shapes;
  // Names of the user inputs. (optional) defaults to "x0", "x1", ...
  std::vector<std::string> input_names;
};

using ExportFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Captures fn as a graph. Throws tessera::Error when fn reads tensor data, when the program forces a
// dynamic dim to a constant or relates two dynamic dims (the message names the expression, the op
// and the fix), when an example violates its Dim's range, or when an op has no symbolic shape rule
// for a dynamic input.
TESSERA_COMPILER_API compiler::ExportedProgram export_program(const ExportFn& fn,
                                                              const std::vector<Tensor>& example_inputs,
                                                              const ExportOptions& options = {});

// The symbolic sizes of `t` inside fn of the capture running on this thread: what the program's graph
// says (a dim of an input declared with a Dim reads as its symbol). A tensor that is not tracing
// gives its concrete sizes. Front ends that build programs through capture (the ONNX importer)
// read sizes with it where the example sizes would specialise a dynamic dim.
TESSERA_COMPILER_API std::vector<compiler::SymSize> traced_sizes(const Tensor& t);

}  // namespace tessera
