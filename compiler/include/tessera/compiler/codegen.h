// The C++ code generator for the CPU: an Export IR graph in, one generated C++ function out,
// compiled at run time by the system C++ compiler, cached on disk and loaded with dlopen.
//
// Note [Generated loops]
// The graph is cut into steps in node order. A step is either a fused group (a run of pointwise
// ops and reductions over the last dim on f32/bf16 values that share one domain [rows, n]: rows =
// the product of all sizes but the last, n = the last) or one extern node (anything else: matmul,
// linear, conv, SDPA, reductions over other dims, integer ops), which the generated code runs
// through the host's call_node. Inside a group every value is Full ([..., n]), Row ([..., 1]: a
// keepdim reduction or a per-row value), Col ([n], broadcast over rows) or Scalar (one element);
// values are computed in float and only group outputs are stored (in their IR dtype). Per row,
// each reduction is one pass over the columns that recomputes the pointwise values it needs (the
// softmax pattern reads its input three times from cache instead of storing two temporaries); Row
// values are computed once per row as soon as their reductions are done; a last pass stores the
// Full outputs. A group without reductions and without Row/Col operands is one flat loop. Loops
// step over the lanes of one vector (`vf`, 16 floats at AVX-512, 8 at AVX2, 1 at the scalar level)
// and end with a tail of fewer; every op is a function of the shared vector math
// (tessera/vecmath/vecmath.h, Note [One vector math]), the one the CPU plugin's kernels call, so
// compiled and eager results are the same. Work is shared by `omp parallel for` over pieces of
// rows (or of the flat loop) handed to whichever thread is free, when it is large enough. Sizes
// are runtime values computed from the bound symbols, so one artifact serves every batch size.
// Values that cross steps live in scratch slots planned by liveness: a slot whose last reader has
// run is reused by a later value of the same byte size. An extern node's outputs stay in the
// tensors its op returned (no copy); the host keeps them alive until the call returns.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/compiler/export_macros.h"
#include "tessera/compiler/ir.h"
#include "tessera/tensor.h"

namespace tessera::compiler::codegen {

// The vector ISA the generated code is compiled for (the CPU plugin's capability levels).
enum class CpuIsa : uint8_t { Default = 0, AVX2 = 1, AVX512 = 2 };
TESSERA_COMPILER_API const char* cpu_isa_name(CpuIsa isa);  // "default", "avx2", "avx512"
// The best level this CPU supports, or TESSERA_CPU_CAPABILITY (default, avx2, avx512) when set.
// Throws tessera::Error when the variable names an unknown level or one the CPU lacks.
TESSERA_COMPILER_API CpuIsa select_cpu_isa();

// The text generate_cpp produces, and what the host needs to call it.
struct GeneratedSource {
  std::string source;                // one C++ translation unit; includes only standard headers
  CpuIsa isa = CpuIsa::Default;
  std::vector<std::string> symbols;  // call->symbols order
  std::vector<ValueId> outputs;         // values stored into call->outputs, in order
  std::vector<ValueId> extern_outputs;  // graph outputs an extern node produces (the host keeps them)
  // Extern results that only extern nodes read: the host may hand them on with their own strides
  // (a permute's view reaches scaled_dot_product_attention without a copy).
  std::vector<ValueId> strided_values;
  std::vector<SymSize> slot_bytes;      // size of each scratch slot host->alloc is asked for
  int fused_groups = 0;              // steps that are generated loops
  int extern_nodes = 0;              // steps that go through call_node
};

// Generates the partition's function. Throws tessera::Error for a graph it cannot handle (a
// symbol that no user input's size binds, a value on a device other than the CPU).
TESSERA_COMPILER_API GeneratedSource generate_cpp(const ExportedProgram& program, CpuIsa isa);

// softmax and log_softmax over the last dim, and layer_norm and rms_norm over exactly the last
// dim, on f32/bf16 CPU values, rewritten into the pointwise ops and last-dim reductions that
// generate_cpp fuses (eps=None of rms_norm is float32's machine epsilon, as in eager mode). Each
// rewritten node's output keeps its value id; other nodes are left as they are. A pass (Note
// [Passes]): edits `program` in place and returns whether it changed anything.
TESSERA_COMPILER_API bool decompose_for_codegen(ExportedProgram& program);

// Rewrites each f32/bf16 CPU `linear` (or 2-D-weight `matmul`, through a permute of its weight)
// followed by any of, in this order and each the only reader of what precedes it: add.Tensor of a
// bias [N] (when the product has none), relu or gelu, add.Tensor of a residual of the result's type
// (alpha 1), into one `_linear_epilogue(input, weight, bias, residual, activation)` node placed
// where the last rewritten node was; the final value keeps its id. Likewise `conv2d` whose only
// reader is relu or gelu becomes `_conv2d_epilogue(conv2d's arguments, activation)` (both ops are
// the CPU backend's, declared in the contract; Note [Linear epilogues] in
// plugins/cpu/nn/onednn_ops.cpp). Nothing is rewritten when the CPU backend does not implement the
// op for the dtype, or when TESSERA_COMPILE_EPILOGUES (a boolean, default on) is off. A pass, like
// decompose_for_codegen; CompiledGraph::compile runs both, in that order, through a PassManager.
TESSERA_COMPILER_API bool fuse_linear_epilogues(ExportedProgram& program);

// The system C++ compiler: $CXX when set, else `c++` on PATH.
struct Toolchain {
  std::string cxx;      // the command
  std::string version;  // first line of `cxx --version`
};
// The compiler, or nullopt with `*why` saying what was looked for and how to fix it.
TESSERA_COMPILER_API std::optional<Toolchain> find_toolchain(std::string* why = nullptr);

struct CodegenOptions {
  std::optional<CpuIsa> isa;  // (optional) defaults to select_cpu_isa()
  std::string cache_dir;      // (optional) defaults to TESSERA_CACHE_DIR, $XDG_CACHE_HOME/tessera/compile
                              // or ~/.cache/tessera/compile
};

// Where the disk cache lives for `options`.
TESSERA_COMPILER_API std::string cache_directory(const CodegenOptions& options = {});

struct CompileInfo {
  bool cache_hit = false;      // loaded from the disk cache without running the compiler
  double seconds = 0;          // generating + compiling (or finding in the cache) + loading
  std::string key;             // 32 hex digits: hash of source, compiler version, flags, ISA, ABI
  std::string library_path;    // the cached shared library
  std::string command;         // the compiler command line (empty on a cache hit)
};

// A graph compiled to native code. Thread-safe to run from several threads at once.
class TESSERA_COMPILER_API CompiledGraph {
 public:
  // Generates, compiles (or finds in the cache) and loads `program`. Throws tessera::Error with
  // code Unavailable when there is no C++ compiler (callers fall back to the interpreter; see
  // find_toolchain), and InvalidArgument for a graph generate_cpp refuses. A corrupt or truncated
  // cache entry is compiled again, never loaded. TESSERA_COMPILE_DEBUG=dir keeps the graph text,
  // the source and the command line there.
  static CompiledGraph compile(const ExportedProgram& program, const CodegenOptions& options = {});

  // Runs on the user inputs (signature order; parameters and constants come from the program's
  // weights). Checks dtypes, devices, ranks and sizes against the graph and binds the symbols.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const;

  const CompileInfo& info() const;
  const GeneratedSource& generated() const;

  CompiledGraph(CompiledGraph&&) noexcept;
  CompiledGraph& operator=(CompiledGraph&&) noexcept;
  ~CompiledGraph();

 private:
  struct Impl;
  explicit CompiledGraph(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::compiler::codegen
