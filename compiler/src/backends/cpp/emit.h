// Internal, stage 3 of generate_cpp (Note [Generated loops] in cpp_gen.cpp): emission.
// Takes the program, its fusion plan and its memory plan; gives the C++ source of
// tessera_generated_main: the prelude, the vector math (tessera/vecmath/vecmath.h, pasted), the
// generated ABI, then one block per step: a loop nest over lanes (vf) for a fused group, a
// call_node for an extern step. Decides nothing about grouping or buffers.
#pragma once
#include <string>
#include <vector>

#include "backends/cpp/fusion_plan.h"
#include "backends/cpp/memory_plan.h"
#include "tessera/compiler/codegen.h"

namespace tessera::compiler::codegen::cppgen {

// Sets out.source, out.fused_groups and out.extern_nodes; reads out.isa and out.symbols.
void emit_source(const ExportedProgram& p, const FusionPlan& fusion, const MemoryPlan& memory, GeneratedSource& out);

}  // namespace tessera::compiler::codegen::cppgen
