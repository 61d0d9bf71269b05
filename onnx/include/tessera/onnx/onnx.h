// ONNX models in and out: import a .onnx model as an ExportedProgram, export a program as .onnx.
//
// Note [ONNX import]
// import_model parses the model with protobuf (the generated classes of proto/onnx.proto), checks
// it as untrusted input (sizes bounds-checked, external data confined to the model's folder), and
// builds the program through capture (export_program): every ONNX node is converted by one
// function of the converter table (onnx/src/ops_*.cpp) into calls of the op contract on tracing
// tensors, so each value's dtype and symbolic sizes come from the same shape rules that capture and
// the verifier use, and the result is checked with compiler::verify like a loaded .tsr.
//   - graph inputs that are not initializers become the program's user inputs; a `dim_param` (or an
//     unnamed dim) becomes a symbol with a range (ImportOptions); initializers become parameters,
//     Constant nodes constants (by their ONNX names);
//   - integer tensors of rank <= 1 whose values are known at import (constants, Shape of a tensor and
//     what Gather/Concat/Slice/Unsqueeze/Squeeze/Cast/arithmetic make of it) are folded as
//     symbolic size lists, so Reshape/Expand/ConstantOfShape/Range/Slice read them at import and
//     the program has no shape ops at run time;
//   - nodes calling the model's local functions are inlined; other domains are refused;
//   - a node no converter takes is refused in one line naming the node, its op type, the opset and
//     the nearest supported op types.
// Thread-safety: import_model and export_model may run on several threads at once.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tessera/compiler/ir.h"

#define TESSERA_ONNX_API __attribute__((visibility("default")))

namespace tessera::onnx {

// The opsets of the default (ai.onnx) domain the importer reads: every one. Nodes of opsets 1 to 6
// (and Upsample) are rewritten into later forms first (Note [Legacy opsets] in src/legacy.cpp);
// converters read the attribute forms of Slice, TopK, Pad, Clip and Reshape before their inputs
// forms; Resize-10 is refused (convert the model to opset 11).
inline constexpr int64_t kMinOpset = 1;
inline constexpr int64_t kMaxOpset = 28;
// The opset export_model writes.
inline constexpr int64_t kExportOpset = 23;

struct ImportOptions {
  // The range every symbolic dim gets unless `ranges` names it. (optional) defaults to [1, 65536].
  compiler::SymbolRange default_range{1, 65536};
  // Per symbol (the dim_param's name, or "<input>_dim<i>" for an unnamed dynamic dim): its range.
  std::map<std::string, compiler::SymbolRange> ranges;
  // Per symbol: a fixed size (the dim becomes static).
  std::map<std::string, int64_t> fixed_dims;
  // Graph inputs whose values are fixed at import (by name): they become constants of the program
  // instead of user inputs, so values a converter needs at import (a Reshape's shape, TopK's k, a
  // Resize's sizes given as inputs) are known. Each must match the input's declared dtype and rank.
  std::map<std::string, Tensor> constant_inputs;
  // The device the program's inputs are declared on. (optional) defaults to cpu.
  Device device{DeviceType::CPU};
  // The folder relative to which external data files are found when importing from bytes; from a
  // path it is the model's own folder. Empty: external data is refused.
  std::string external_data_dir;
  // Computes the weight-only parts of the graph once, at import (compiler::fold_constants: weights
  // made by ConstantOfShape, transposed or cast initializers), folds a BatchNormalization that
  // follows a Conv into the conv's weight and bias, then merges common subexpressions, so that
  // running the program does not redo them. (optional) defaults to true; false keeps the
  // graph as the model writes it.
  bool fold_constants = true;
};

// Reads a model from a file / from the bytes of one. Throws tessera::Error with one line naming the
// problem (the node, the op type and the opset for a node it cannot convert).
TESSERA_ONNX_API compiler::ExportedProgram import_model(const std::string& path, const ImportOptions& options = {});
TESSERA_ONNX_API compiler::ExportedProgram import_model_bytes(const std::string& bytes,
                                                            const ImportOptions& options = {});

// The ONNX op types the importer converts, sorted.
TESSERA_ONNX_API std::vector<std::string> supported_op_types();

// Writes `program` as an ONNX model (opset kExportOpset, weights as initializers inside the file,
// symbolic dims as dim_param). Throws naming the first node whose op has no ONNX equivalent.
TESSERA_ONNX_API void export_model(const compiler::ExportedProgram& program, const std::string& path);
TESSERA_ONNX_API std::string export_model_bytes(const compiler::ExportedProgram& program);

}  // namespace tessera::onnx
