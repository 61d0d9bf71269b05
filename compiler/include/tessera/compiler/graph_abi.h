// The C view of a graph that compiler and quantizer plugins receive (Note [Graph ABI] in
// plugin_abi.h): a tessera_graph_t over an ExportedProgram, read through host->graph.
#pragma once
#include <memory>

#include "tessera/compiler/export_macros.h"
#include "tessera/compiler/ir.h"
#include "tessera/plugin_abi.h"

namespace tessera::compiler {

// The accessor and builder table (the same one every plugin's host table points at).
TESSERA_COMPILER_API const tessera_graph_api_t* graph_api();

// A graph handle over `program`, which must outlive it. Read-only unless `writable`: then the
// builders change `program.graph` (and its signature's outputs, through replace_uses). Not
// thread-safe: one plugin call at a time.
class TESSERA_COMPILER_API GraphHandle {
 public:
  GraphHandle(ExportedProgram& program, bool writable);
  ~GraphHandle();
  GraphHandle(const GraphHandle&) = delete;
  GraphHandle& operator=(const GraphHandle&) = delete;
  const tessera_graph_t* get() const;
  tessera_graph_t* get_mutable();

 private:
  std::unique_ptr<tessera_graph_t> graph_;
};

}  // namespace tessera::compiler
