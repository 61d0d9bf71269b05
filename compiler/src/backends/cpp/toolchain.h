// Internal: compiling generated sources through the disk cache (Note [Compile cache]).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "backends/cpp/generated_abi.h"
#include "tessera/compiler/codegen.h"

namespace tessera::compiler::codegen {

struct CacheResult {
  bool cache_hit = false;
  std::string key;
  std::string library_path;
  std::string command;  // empty on a hit
};

// Prints "[tessera:compile] warning: <message>" to stderr whether or not TESSERA_LOG names compile:
// what a user must know (no compiler: graphs run slower; a recompile limit reached).
void compile_warning(const std::string& message);

// 32 hex digits.
std::string hash_hex(std::string_view bytes);
std::vector<std::string> compile_flags(CpuIsa isa);
// Finds `source` in the cache or compiles it into the cache. Throws Unavailable without a compiler
// (after one warning under TESSERA_LOG=compile), Internal when the compiler rejects the source.
CacheResult compile_cached(const std::string& source, CpuIsa isa, const CodegenOptions& options,
                           const std::string& graph_text);

}  // namespace tessera::compiler::codegen
