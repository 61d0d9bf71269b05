// Fuzz target: the ONNX importer (onnx/, Note [ONNX import]) on untrusted model bytes. Property:
// any bytes give either a program that passed the verifier and whose graph prints, or a one-line
// printable tessera::Error; never a crash, a hang on hostile sizes, or another exception. Built only
// where the importer is (protobuf found); elsewhere the target accepts every input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "tessera/error.h"
#include "tessera/text_escape.h"
#if __has_include("tessera/onnx/onnx.h")
#include "tessera/onnx/onnx.h"
#define TESSERA_FUZZ_HAS_ONNX 1
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
#ifdef TESSERA_FUZZ_HAS_ONNX
  try {
    const std::string bytes(reinterpret_cast<const char*>(data), size);
    tessera::compiler::ExportedProgram ep = tessera::onnx::import_model_bytes(bytes);
    if (ep.graph_string().empty()) std::abort();
  } catch (const tessera::Error& e) {
    std::string m = e.what();
    if (m.empty() || m.find('\n') != std::string::npos || tessera::printable_text(m) != m) std::abort();
  }
#else
  (void)data;
  (void)size;
#endif
  return 0;
}
