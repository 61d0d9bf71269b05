// `tessera graph FILE.tsr` and `tessera run FILE.tsr --device NAME --input X.npy ... --output OUT.npz`:
// a saved program (Note [Program file]) printed, or run with NumPy files in and out.
#include <cstdio>
#include <string>
#include <vector>

#include "commands.h"
#include "tessera/compiler/npy.h"
#include "tessera/compiler/program_file.h"
#include "tessera/tensor.h"

namespace {

const char* kGraphUsage =
    "usage: tessera graph FILE.tsr\n"
    "Loads a program file (checking it) and prints its graph: one node per line, shapes included.\n";

const char* kRunUsage =
    "usage: tessera run FILE.tsr --device NAME --input X.npy [--input ...] --output OUT.npz\n"
    "Runs a program file on a device. Inputs are NumPy files in the order of the program's user\n"
    "inputs (an .npz gives its arrays in archive order); the outputs are written to OUT.npz under\n"
    "their signature names (or to OUT.npy when there is one output and the name ends in .npy).\n"
    "  --device NAME   cpu, my_hardware_device, opencl, ... (default: cpu)\n";

bool ends_with(const std::string& s, const char* suffix) {
  size_t n = std::char_traits<char>::length(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

}  // namespace

int tessera_cli_graph(int argc, char** argv) {
  if (argc == 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::fputs(kGraphUsage, stdout);
    return kCliOk;
  }
  if (argc != 2 || argv[1][0] == '-') {
    std::fputs(kGraphUsage, stderr);
    return kCliUsage;
  }
  tessera::compiler::ExportedProgram ep = tessera::load_program(argv[1]);
  std::fputs(ep.graph_string().c_str(), stdout);
  return kCliOk;
}

int tessera_cli_run(int argc, char** argv) {
  std::string file, device = "cpu", output;
  std::vector<std::string> inputs;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* flag) -> const char* {
      return i + 1 < argc ? argv[++i]
                          : (std::fprintf(stderr, "tessera run: %s needs a value\n", flag), nullptr);
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kRunUsage, stdout);
      return kCliOk;
    } else if (a == "--device" || a == "--input" || a == "--output") {
      const char* v = value(a.c_str());
      if (!v) return kCliUsage;
      if (a == "--device")
        device = v;
      else if (a == "--input")
        inputs.push_back(v);
      else
        output = v;
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "tessera run: unknown option '%s'\n\n%s", a.c_str(), kRunUsage);
      return kCliUsage;
    } else if (file.empty()) {
      file = a;
    } else {
      std::fprintf(stderr, "tessera run: more than one program file ('%s', '%s')\n\n%s", file.c_str(),
                   a.c_str(), kRunUsage);
      return kCliUsage;
    }
  }
  if (file.empty() || output.empty()) {
    std::fprintf(stderr, "tessera run: %s\n\n%s",
                 file.empty() ? "no program file given" : "no --output given", kRunUsage);
    return kCliUsage;
  }
  tessera::compiler::ExportedProgram ep = tessera::load_program(file);
  tessera::Device target(device);
  std::vector<tessera::Tensor> args;
  for (const std::string& in : inputs) {
    if (ends_with(in, ".npz")) {
      for (auto& [name, t] : tessera::compiler::read_npz(in)) args.push_back(t.to(target));
    } else {
      args.push_back(tessera::compiler::read_npy(in).to(target));
    }
  }
  std::vector<tessera::Tensor> outs = ep.run(args);
  if (ends_with(output, ".npy")) {
    if (outs.size() != 1) {
      std::fprintf(stderr, "tessera run: the program returns %zu outputs; write them to an .npz file\n",
                   outs.size());
      return kCliUsage;
    }
    tessera::compiler::write_npy(output, outs[0].cpu());
    return kCliOk;
  }
  std::vector<std::pair<std::string, tessera::Tensor>> named;
  for (size_t i = 0; i < outs.size(); ++i) {
    std::string name =
        ep.signature.outputs[i].name.empty() ? "output" + std::to_string(i) : ep.signature.outputs[i].name;
    named.emplace_back(name, outs[i].cpu());
  }
  tessera::compiler::write_npz(output, named);
  return kCliOk;
}
