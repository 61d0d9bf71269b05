// Internal to the quantization passes (compiler/src/quant).
#pragma once
#include "tessera/compiler/ir.h"

namespace tessera::quantization {

// Replaces each _quantized_linear_prepack of constant int8 weights and scales (what quantize_dynamic
// writes) by a constant input holding the packed bytes, computed once here; the int8 weights and
// scales nothing else reads leave the program. Returns the number folded. Note [Dynamic
// quantization] in tessera/compiler/quantize.h.
int fold_packed_weights(compiler::ExportedProgram& ep);

}  // namespace tessera::quantization
