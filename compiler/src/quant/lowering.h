// Internal to the quantization passes (compiler/src/quant): the parts of lower_to_int8.
#pragma once
#include "tessera/compiler/ir.h"

namespace tessera::quantization {

// Replaces each _quantized_linear_prepack of constant int8 weights and scales (what quantize_dynamic
// writes) by a constant input holding the packed bytes, computed once here; the int8 weights and
// scales nothing else reads leave the program. Returns the number folded. Note [Dynamic
// quantization] in tessera/compiler/quantize.h.
int fold_packed_weights(compiler::ExportedProgram& ep);

// Replaces each dequantize -> conv2d (-> add) (-> relu) -> quantize over quint8 activations and
// qint8 per-channel symmetric constant weights by one _quantized_conv2d (Note [Int8 conv2d
// lowering] in lower_conv.cpp). Returns the number lowered.
int lower_conv_patterns(compiler::ExportedProgram& ep);

}  // namespace tessera::quantization
