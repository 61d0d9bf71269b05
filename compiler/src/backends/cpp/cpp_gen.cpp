// generate_cpp: the C++ code generator as three stages (Note [Generated loops] in codegen.h).
//   1. fusion_plan.cpp  graph -> steps: fused groups and extern nodes
//   2. memory_plan.cpp  steps -> where each crossing value lives (inputs, outputs, scratch slots)
//   3. emit.cpp         both plans -> the C++ source (loops over lanes of tessera/vecmath)
// This file checks what the generated code can bind, runs the stages and collects their results.
#include <set>

#include "backends/cpp/emit.h"
#include "backends/cpp/fusion_plan.h"
#include "backends/cpp/memory_plan.h"
#include "tessera/compiler/codegen.h"
#include "tessera/error.h"

namespace tessera::compiler::codegen {
namespace {

// The symbols of the graph's sizes, each the plain size of some input dimension.
std::vector<std::string> collect_symbols(const ExportedProgram& p) {
  std::set<std::string> all, bound;
  for (const ValueInfo& v : p.graph.values) {
    TESSERA_CHECK(v.type.device.is_cpu(), "generated C++ runs on the CPU; value of type ", v.type.str(),
                  " is on another device; partition the graph so the CPU compiler gets CPU nodes only");
    for (const SymSize& s : v.type.sizes)
      for (auto& name : s.symbols()) all.insert(name);
  }
  for (const InputSpec& in : p.signature.inputs)
    for (const SymSize& s : p.graph.type(in.value).sizes)
      if (!s.is_constant() && s.symbols().size() == 1 && s.str() == s.symbols()[0]) bound.insert(s.str());
  for (const std::string& s : all)
    TESSERA_CHECK(bound.count(s), "symbol '", s, "' is not the size of any input dimension; the generated "
                  "code binds symbols from input sizes only");
  return {all.begin(), all.end()};
}

}  // namespace

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::AVX512: return "avx512";
    case CpuIsa::AVX2: return "avx2";
    default: return "default";
  }
}

GeneratedSource generate_cpp(const ExportedProgram& program, CpuIsa isa) {
  GeneratedSource out;
  out.isa = isa;
  out.symbols = collect_symbols(program);
  const cppgen::FusionPlan fusion = cppgen::plan_fusion(program.graph);
  const cppgen::MemoryPlan memory = cppgen::plan_memory(program, fusion);
  memory.describe(out);
  cppgen::emit_source(program, fusion, memory, out);
  return out;
}

}  // namespace tessera::compiler::codegen
