// tessera::compile: a function captured on its first call, guarded, and run as a compiled artifact.
//
// Note [Compiled functions]
// compile(fn, options) returns a CompiledFunction without running anything. A call looks for an
// artifact whose guards accept the inputs: per input its dtype, device and rank, each static size,
// and for each symbolic dim the symbol's binding (dims that share a symbol must be equal) inside the
// symbol's range, then the guards capture recorded (Note [Symbolic shape rules]). The check reads
// flat arrays, no map and no allocation, so a call on small inputs costs less than running the ops
// eagerly. When no artifact accepts the inputs, fn is captured again from these inputs
// (export_program), compiled by the backend and appended to the function's artifact list; the
// failed guard is the recompile's reason in stats() and under TESSERA_LOG=compile.
//
// Dynamic dims (Note [Automatic dynamic]): options.dynamic = false specialises every size;
// true captures every dim symbolic from the first call (range [0, INT64_MAX]: 0 and 1 are not
// special); nullopt (automatic) captures static first and, when a size guard fails because a dim
// changed, recompiles once with that dim symbolic (range [2, INT64_MAX]; a call where the dim is 0
// or 1 gets an artifact specialised to that size, as the symbolic one assumes it is not 1 when
// broadcasting) while every other dim stays static. TESSERA_AUTOMATIC_DYNAMIC=0 turns automatic
// into always specialising. Dynamic dims with equal sizes in the capturing call share one symbol;
// a dim the program forces to a constant stays static (the capture is retried without it, and the
// decision is logged under TESSERA_LOG=dynamic).
//
// After options.recompile_limit artifacts (default 8) a miss does not capture again: the function
// warns once and from then on runs its most general artifact, one captured with every dim symbolic
// (built once, past the limit). Inputs that even that artifact refuses (another dtype, rank or
// device) run fn eagerly, with the same warning.
//
// Backends: "cpp" (default) generates C++ for the graph with codegen::CompiledGraph (one fused
// function, compiled by $CXX or c++, cached on disk). Without a C++ compiler it warns once and runs
// the graph through the interpreter; values on a device other than the CPU run through the
// interpreter too, whose ops go through the dispatcher on that device (docs/compile.md).
// "interpreter" (or "eager") runs the captured graph with ExportedProgram::run. Any other name is a
// compiler plugin: it runs the partitions it takes, the dispatcher the rest (Note [Compiler plugin
// ABI] in plugin_abi.h). "auto" takes, per artifact, the highest-priority compiler plugin that
// serves the inputs' device, else "cpp" (Note [Compiler plugin priority] in
// compiler/src/runtime/compiler_choice.cpp). When fn cannot be captured (it reads tensor data), calls with those input
// types run fn eagerly, with one warning.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/compiler/export.h"
#include "tessera/compiler/export_macros.h"
#include "tessera/tensor.h"

namespace tessera {

struct CompileOptions {
  // "cpp", "interpreter" or "eager" (the interpreter), the name of a compiler plugin (Note
  // [Compiler plugin ABI] in plugin_abi.h), or "auto": the highest-priority compiler plugin serving
  // the inputs' device, else "cpp". (optional) defaults to "cpp".
  std::string backend = "cpp";
  // false: always specialise; true: every dim symbolic from the start. (optional) defaults to
  // nullopt: automatic dynamic.
  std::optional<bool> dynamic = std::nullopt;
  // Artifacts compiled before the function stops capturing. (optional) defaults to 8.
  int recompile_limit = 8;
  // The function's name in logs, warnings and stats. (optional) defaults to "compiled_fn".
  std::string name;
  // Names for the tensors fn closes over (ExportOptions::parameters).
  std::map<std::string, Tensor> parameters;
  // The "cpp" backend's disk cache. (optional) defaults to codegen::cache_directory().
  std::string cache_dir;
  // "default", or "reduce-overhead" (PyTorch's name): on a device whose backend records graphs
  // (Note [Device graphs], CUDA Graphs on cuda), an artifact is captured once, after one warm-up
  // call, and then replayed with the inputs copied into its static buffers (Note [Compiled
  // artifacts as device graphs] in compiled_function.cpp). Elsewhere, and for what cannot be
  // captured, calls run as in "default". (optional) defaults to "default".
  std::string mode = "default";
};

struct CompileStats {
  int64_t calls = 0;
  int compiles = 0;  // artifacts built, the first included
  std::vector<std::string>
      recompile_reasons;       // per recompile: the guard that failed, "x0: dim 0 is 7, expected 4"
  int64_t cache_hits = 0;      // calls an existing artifact accepted
  int disk_cache_hits = 0;     // "cpp" compiles found in the disk cache
  double compile_seconds = 0;  // capture + generate + compile + load, all artifacts
  int interpreted = 0;         // artifacts that run through the interpreter
  int64_t eager_calls = 0;     // calls that ran fn eagerly (uncapturable, or past the limit)
  bool limit_reached = false;
  int graphs = 0;             // mode "reduce-overhead": artifacts captured into device graphs
  int64_t graph_replays = 0;  // calls served by replaying one
};

// What one artifact accepts and how it runs.
struct ArtifactInfo {
  std::string backend;    // "cpp", "interpreter", "eager" or the compiler plugin's name
  std::string inputs;     // the guarded input types: "f32[s0, 4] cpu, f32[4] cpu"
  std::string graph;      // the captured graph's text (empty for "eager" and plugins)
  size_t partitions = 0;  // a compiler plugin's: the partitions it took
  // Backend "auto": the device, the plugin chosen (or cpp) and every compiler plugin passed over
  // with its priority or failure. Empty for the other backends.
  std::string selection;
  // A compiler plugin's compatibility string for what it compiled (Note [Compiled artifact
  // compatibility] in plugin_abi.h); empty for the other backends and plugins that report none.
  std::string compatibility;
};

// A handle on a compiled function: copies share the artifacts and the stats. Calls are
// thread-safe; two threads missing at once capture and compile once.
class TESSERA_COMPILER_API CompiledFunction {
 public:
  // Returns what fn returns for `inputs`. Throws what fn, capture or the backend throw (a bad
  // input gets the eager op's error, from the capture).
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs) const;
  CompileStats stats() const;
  // In the order they were built.
  std::vector<ArtifactInfo> artifacts() const;

  struct State;
  explicit CompiledFunction(std::shared_ptr<State> state);

 private:
  std::shared_ptr<State> state_;
};

// Checks the options (a backend that is neither built in nor a compiler plugin throws
// tessera::Error naming the choices; a compiler plugin is loaded here; TESSERA_AUTOMATIC_DYNAMIC is
// read here) and returns the handle. Nothing is captured until the
// first call.
TESSERA_COMPILER_API CompiledFunction compile(ExportFn fn, CompileOptions options = {});

}  // namespace tessera
