// The program file (.tsr): an exported program saved to disk and loaded back in any process.
//
// Note [Program file]
// A zip archive of stored entries (Note [Stored entries]):
//   weights.safetensors  the weights (parameters and constants) in the safetensors layout, first in
//                        the archive and 64-byte aligned so that they are mapped, not copied
//   program.json         the graph, signature, ranges, format_version {major, minor},
//                        op_contract_version and producer (docs/export.md, field by field), and
//                        (1.1) "compiled": what a compiler plugin compiled it into (ir.h CompiledArtifact)
// Versioning: a reader refuses a major it does not know (naming both versions), and reads a newer
// minor of its major, ignoring fields it does not know. Loading checks everything before use:
// fields present and typed, value ids in range and defined before use, every op in this runtime's
// op contract, every symbol with a range, every weight present with its declared dtype and sizes.
#pragma once
#include <cstdint>
#include <span>
#include <string>

#include "tessera/compiler/export_macros.h"
#include "tessera/compiler/ir.h"

namespace tessera::compiler {

constexpr int kProgramFormatMajor = 1;
constexpr int kProgramFormatMinor = 1;  // 1.1: the optional "compiled" record

// Writes `ep` to `path` (through `path`.tmp, renamed when complete). Weights are written from host
// memory; throws when a weight named by the signature is missing.
TESSERA_COMPILER_API void save(const ExportedProgram& ep, const std::string& path);

// Reads a program file. The weights view the mapped file (kept mapped while any of them lives).
// Throws a one-line tessera::Error naming the file, the entry and the field that is wrong.
TESSERA_COMPILER_API ExportedProgram load_program(const std::string& path);
// The same from bytes in memory (copied); `what` names them in messages.
TESSERA_COMPILER_API ExportedProgram load_program_from_memory(std::span<const uint8_t> data,
                                                              const std::string& what = "<memory>");

// program.json's text for `ep`, and `ep`'s graph, signature and ranges back from it (no weights;
// load_program checks the weights against the signature). Exposed for tests and tools.
TESSERA_COMPILER_API std::string program_json(const ExportedProgram& ep);
TESSERA_COMPILER_API ExportedProgram parse_program_json(std::string_view text,
                                                        const std::string& what = "program.json");

}  // namespace tessera::compiler

namespace tessera {
using compiler::load_program;
using compiler::save;
}  // namespace tessera
