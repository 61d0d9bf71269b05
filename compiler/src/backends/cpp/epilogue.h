// Internal: linear epilogues for the generated code (Note [Linear epilogues] in
// plugins/cpu/nn/onednn_ops.cpp).
#pragma once
#include "tessera/compiler/ir.h"

namespace tessera::compiler::codegen {

// Rewrites each f32/bf16 CPU `linear` (or 2-D-weight `matmul`, through a permute of its weight)
// followed by any of, in this order and each the only reader of what precedes it: add.Tensor of a
// bias [N] (when the product has none), relu or gelu, add.Tensor of a residual of the result's type
// (alpha 1), into one `_linear_epilogue(input, weight, bias, residual, activation)` node placed
// where the last rewritten node was; the final value keeps its id. Likewise `conv2d` whose only
// reader is relu or gelu becomes `_conv2d_epilogue(conv2d's arguments, activation)`. Nothing is
// rewritten when the CPU backend does not implement the op for the dtype, or when
// TESSERA_COMPILE_EPILOGUES (a boolean, default on) is off. CompiledGraph::compile runs it after
// decompose_for_codegen.
ExportedProgram fuse_linear_epilogues(const ExportedProgram& program);

}  // namespace tessera::compiler::codegen
