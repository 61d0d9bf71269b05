// Fuzz target: the program-file reader (the zip archive, program.json, weights.safetensors) and
// the .npy reader. The first byte picks the reader, the rest is its input. Property: any bytes give
// either a program whose graph prints and whose program.json reads back to the same graph, or a
// one-line printable tessera::Error; never a crash or another exception.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "tessera/compiler/npy.h"
#include "tessera/compiler/program_file.h"
#include "tessera/compiler/safetensors.h"
#include "tessera/error.h"
#include "tessera/text_escape.h"

using namespace tessera::compiler;

namespace {

void check_program(const ExportedProgram& ep) {
  std::string text = ep.graph_string();
  if (parse_program_json(program_json(ep)).graph_string() != text) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::span<const uint8_t> in(data + 1, size - 1);
  try {
    switch (data[0] % 4) {
      case 0:
        check_program(load_program_from_memory(in, "fuzz.tsr"));
        break;
      case 1:
        check_program(
            parse_program_json(std::string_view(reinterpret_cast<const char*>(in.data()), in.size())));
        break;
      case 2: {
        auto owner = Bytes::copy_of(in);
        SafetensorsFile f = safetensors_parse({owner->data(), owner->size()}, owner, "fuzz.safetensors");
        for (const auto& [name, t] : f.tensors)
          if (t.nbytes() > owner->size()) std::abort();
        break;
      }
      case 3:
        (void)npy_parse(in, "fuzz.npy");
        break;
    }
  } catch (const tessera::Error& e) {
    std::string m = e.what();
    if (m.empty() || m.find('\n') != std::string::npos || tessera::printable_text(m) != m) std::abort();
  }
  return 0;
}
