// `tessera graph FILE` and `tessera run FILE --device NAME --input X.npy ... --output OUT.npz`: a saved
// program (Note [Program file]) or an ONNX model (imported, Note [ONNX import]) printed, or run with
// NumPy files in and out, optionally timed over repeated runs.
#include <algorithm>
#include <chrono>
#include <optional>
#include <cstdio>
#include <string>
#include <vector>

#include "commands.h"
#include "tessera/compiler/codegen.h"
#include "tessera/compiler/npy.h"
#include "tessera/compiler/program_file.h"
#include "tessera/ops.h"
#include "tessera/tensor.h"
#ifdef TESSERA_CLI_HAS_ONNX
#include "tessera/onnx/onnx.h"
#endif

namespace {

const char* kGraphUsage =
    "usage: tessera graph FILE.tsr|FILE.onnx\n"
    "Loads a program file (checking it) or imports an ONNX model, and prints its graph: one node per\n"
    "line, shapes included.\n";

const char* kRunUsage =
    "usage: tessera run FILE.tsr|FILE.onnx --device NAME --input [NAME=]X.npy [--input ...] --output OUT.npz\n"
    "Runs a program file or an ONNX model on a device. Inputs are NumPy files, by name (NAME=X.npy, the\n"
    "program's user input NAME) or in the order of the program's user inputs (an .npz gives its arrays in\n"
    "archive order); the outputs are written to OUT.npz under their signature names (or to OUT.npy when\n"
    "there is one output and the name ends in .npy).\n"
    "  --device NAME   cpu, my_hardware_device, opencl, ... (default: cpu)\n"
    "  --repeat N      run N more times after the first and print the time per run (median, spread)\n"
    "  --json          print the timings as one JSON object\n"
    "  --compile       run the program as generated C++ (tessera::compile's cpp backend; CPU only)\n"
    "  --bind NAME=X.npy  (ONNX) fix input NAME to the array's value at import: it becomes a constant\n"
    "  --save OUT.tsr  also save the (imported) program as a program file (OUT.onnx: as an ONNX model)\n";

bool ends_with(const std::string& s, const char* suffix) {
  size_t n = std::char_traits<char>::length(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

tessera::compiler::ExportedProgram load_any(const std::string& file, const std::vector<std::string>& binds = {}) {
  if (ends_with(file, ".onnx")) {
#ifdef TESSERA_CLI_HAS_ONNX
    tessera::onnx::ImportOptions opts;
    for (const std::string& b : binds) {
      const size_t eq = b.find('=');
      TESSERA_CHECK(eq != std::string::npos && eq > 0, "tessera run: --bind takes NAME=X.npy, got '", b, "'");
      opts.constant_inputs[b.substr(0, eq)] = tessera::compiler::read_npy(b.substr(eq + 1));
    }
    return tessera::onnx::import_model(file, opts);
#else
    TESSERA_CHECK(false, "tessera: '", file, "' is an ONNX model but this build has no ONNX importer (protobuf was not found)");
#endif
  }
  return tessera::load_program(file);
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const double pos = p * double(v.size() - 1);
  const size_t i = size_t(pos);
  const double f = pos - double(i);
  return i + 1 < v.size() ? v[i] * (1 - f) + v[i + 1] * f : v[i];
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
  tessera::compiler::ExportedProgram ep = load_any(argv[1]);
  std::fputs(ep.graph_string().c_str(), stdout);
  return kCliOk;
}

int tessera_cli_run(int argc, char** argv) {
  std::string file, device = "cpu", output, save;
  std::vector<std::string> inputs, binds;
  long repeat = 0;
  bool json = false, compile = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* flag) -> const char* {
      return i + 1 < argc ? argv[++i]
                          : (std::fprintf(stderr, "tessera run: %s needs a value\n", flag), nullptr);
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kRunUsage, stdout);
      return kCliOk;
    } else if (a == "--device" || a == "--input" || a == "--output" || a == "--repeat" || a == "--save" || a == "--bind") {
      const char* v = value(a.c_str());
      if (!v) return kCliUsage;
      if (a == "--device") {
        device = v;
      } else if (a == "--input") {
        inputs.push_back(v);
      } else if (a == "--save") {
        save = v;
      } else if (a == "--bind") {
        binds.push_back(v);
      } else if (a == "--repeat") {
        char* end = nullptr;
        repeat = std::strtol(v, &end, 10);
        if (*v == '\0' || *end != '\0' || repeat < 1 || repeat > 1000000) {
          std::fprintf(stderr, "tessera run: --repeat takes a count from 1 to 1000000, got '%s'\n", v);
          return kCliUsage;
        }
      } else {
        output = v;
      }
    } else if (a == "--json") {
      json = true;
    } else if (a == "--compile") {
      compile = true;
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
  if (file.empty() || (output.empty() && repeat == 0 && save.empty())) {
    std::fprintf(stderr, "tessera run: %s\n\n%s",
                 file.empty() ? "no program file given" : "no --output given", kRunUsage);
    return kCliUsage;
  }
  TESSERA_CHECK(binds.empty() || ends_with(file, ".onnx"), "tessera run: --bind applies to ONNX models only");
  tessera::compiler::ExportedProgram ep = load_any(file, binds);
  if (ends_with(save, ".onnx")) {
#ifdef TESSERA_CLI_HAS_ONNX
    tessera::onnx::export_model(ep, save);
#else
    TESSERA_CHECK(false, "tessera: this build has no ONNX exporter (protobuf was not found)");
#endif
  } else if (!save.empty()) {
    tessera::save(ep, save);
  }
  if (output.empty() && repeat == 0) return kCliOk;
  tessera::Device target(device);
  std::vector<std::string> user_names;
  for (const auto& in : ep.signature.inputs)
    if (in.kind == tessera::compiler::InputKind::UserInput) user_names.push_back(in.name);
  std::vector<tessera::Tensor> args(user_names.size());
  size_t next = 0;
  auto place = [&](const std::string& name, const tessera::Tensor& t) {
    size_t slot = next;
    if (!name.empty()) {
      auto it = std::find(user_names.begin(), user_names.end(), name);
      TESSERA_CHECK(it != user_names.end(), "tessera run: the program has no input named '", name, "'");
      slot = size_t(it - user_names.begin());
    } else {
      while (slot < args.size() && args[slot].defined()) ++slot;
      next = slot + 1;
    }
    TESSERA_CHECK(slot < args.size(), "tessera run: more inputs given than the program's ", args.size());
    TESSERA_CHECK(!args[slot].defined(), "tessera run: input '", user_names[slot], "' is given twice");
    args[slot] = t.to(target);
  };
  for (const std::string& in : inputs) {
    std::string name, path = in;
    if (size_t eq = in.find('='); eq != std::string::npos &&
        std::find(user_names.begin(), user_names.end(), in.substr(0, eq)) != user_names.end()) {
      name = in.substr(0, eq);
      path = in.substr(eq + 1);
    }
    if (ends_with(path, ".npz")) {
      for (auto& [arr, t] : tessera::compiler::read_npz(path)) place(name, t);
    } else {
      place(name, tessera::compiler::read_npy(path));
    }
  }
  for (size_t i = 0; i < args.size(); ++i)
    TESSERA_CHECK(args[i].defined(), "tessera run: no value for input '", user_names[i], "'; give --input ", user_names[i], "=X.npy");
  std::optional<tessera::compiler::codegen::CompiledGraph> compiled;
  if (compile) {
    TESSERA_CHECK(target.is_cpu(), "tessera run: --compile generates C++ for the CPU; drop it for device '", device, "'");
    compiled.emplace(tessera::compiler::codegen::CompiledGraph::compile(ep));
  }
  auto run_once = [&] { return compiled ? compiled->run(args) : ep.run(args); };
  std::vector<tessera::Tensor> outs = run_once();
  if (repeat > 0) {
    std::vector<double> ms;
    for (long r = 0; r < repeat; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      outs = run_once();
      tessera::synchronize(target);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    const double med = percentile(ms, 0.5), lo = percentile(ms, 0.1), hi = percentile(ms, 0.9);
    const double mn = *std::min_element(ms.begin(), ms.end()), mx = *std::max_element(ms.begin(), ms.end());
    if (json)
      std::printf("{\"model\": \"%s\", \"device\": \"%s\", \"runs\": %ld, \"median_ms\": %.4f, \"p10_ms\": %.4f, "
                  "\"p90_ms\": %.4f, \"min_ms\": %.4f, \"max_ms\": %.4f}\n",
                  file.c_str(), device.c_str(), repeat, med, lo, hi, mn, mx);
    else
      std::printf("%s on %s: %ld runs, median %.3f ms (p10 %.3f, p90 %.3f, min %.3f, max %.3f)\n", file.c_str(),
                  device.c_str(), repeat, med, lo, hi, mn, mx);
  }
  if (output.empty()) return kCliOk;
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
