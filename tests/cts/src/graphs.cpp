// The graph suites: Note [Graph conformance] in tessera/cts_graphs.h.
#include "tessera/cts_graphs.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <optional>
#include <random>
#include <sstream>

#include <tessera/compiler/compile.h>
#include <tessera/compiler/export.h>
#include <tessera/compiler/quantize.h>
#include <tessera/plugin_loader.h>
#include <tessera/tessera.h>

#include "compare.h"
#include "tessera/cts_config.h"

namespace tessera::cts {

namespace {

using compiler::ExportedProgram;
using Inputs = std::vector<Tensor>;

Tensor normal(std::mt19937_64& g, std::vector<int64_t> sizes, double stddev = 1.0) {
  std::normal_distribution<float> d(0.0f, float(stddev));
  std::vector<float> v(static_cast<size_t>(compute_numel(sizes)));
  for (float& x : v) x = d(g);
  return tensor(v, sizes);
}

uint64_t program_seed(uint64_t seed, const std::string& name, int64_t salt) {
  uint64_t h = seed ^ 0x9E3779B97F4A7C15ull;
  for (char ch : name) h = (h ^ uint8_t(ch)) * 0x100000001B3ull;
  return (h ^ uint64_t(salt)) * 0xff51afd7ed558ccdull;
}

uint64_t fresh_seed(uint64_t seed) {
  return seed ? seed : (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
}

bool selected(const GraphOptions& o, const std::string& device, const std::string& name) {
  std::istringstream in(o.programs);
  std::string g;
  bool any = false;
  while (std::getline(in, g, ',')) any = any || (!g.empty() && glob_match(g, name));
  return any && (!o.config || o.config->allows(device, name, ""));
}

// Records a program skipped by the configuration; true when it is.
bool skipped(const GraphOptions& o, const std::string& device, const std::string& name, Report& report) {
  const Config::Skip* s = o.config ? o.config->skip(device, name, "", kFloat32) : nullptr;
  if (!s) return false;
  CaseResult r;
  r.op = name;
  r.dtype = kFloat32;
  r.outcome = Outcome::Skip;
  r.resolution = "none";
  r.message = s->reason;
  report.cases.push_back(std::move(r));
  return true;
}

// ---------------------------------------------------------------- compiler programs

struct CompilerProgram {
  std::string name;
  // CPU inputs for a batch size.
  std::function<Inputs(std::mt19937_64&, int64_t batch)> make;
  ExportFn fn;
  std::vector<int64_t> batches = {4};  // one call per batch
  std::optional<bool> dynamic = false;  // CompileOptions::dynamic
  double tol_scale = 1.0;
};

const std::vector<CompilerProgram>& compiler_programs() {
  static const std::vector<CompilerProgram> programs = [] {
    std::vector<CompilerProgram> v;
    // Elementwise ops of one shape: what a fusing compiler takes whole.
    v.push_back({"pointwise_chain",
                 [](std::mt19937_64& g, int64_t b) { return Inputs{normal(g, {b, 16}), normal(g, {b, 16})}; },
                 [](const Inputs& in) {
                   Tensor h = sigmoid(in[0] * in[1] + 0.5);
                   return Inputs{tanh(h) * 2.0 - h, exp(-relu(in[0] - in[1])) / (h + 1.0)};
                 }});
    // A broadcast add in the middle: a chain compiler takes the parts of one shape only.
    v.push_back({"pointwise_broadcast",
                 [](std::mt19937_64& g, int64_t b) { return Inputs{normal(g, {b, 3, 8}), normal(g, {8})}; },
                 [](const Inputs& in) { return Inputs{relu(in[0] + in[1]) * in[0] - in[0]}; }});
    v.push_back({"matmul_bias_relu",
                 [](std::mt19937_64& g, int64_t b) {
                   return Inputs{normal(g, {b, 16}), normal(g, {16, 12}, 0.25), normal(g, {12})};
                 },
                 [](const Inputs& in) {
                   Tensor y = relu(matmul(in[0], in[1]) + in[2]);
                   return Inputs{y, sigmoid(y) * y};
                 },
                 {4}, false, 10.0});
    v.push_back({"reductions",
                 [](std::mt19937_64& g, int64_t b) { return Inputs{normal(g, {b, 16})}; },
                 [](const Inputs& in) {
                   const Tensor& x = in[0];
                   return Inputs{sum(x * x, {1}), mean(tanh(x), {0}), amax(x, {1}, true) - x, softmax(x * 2.0, 1)};
                 },
                 {4}, false, 10.0});
    v.push_back({"conv_block",
                 [](std::mt19937_64& g, int64_t b) {
                   return Inputs{normal(g, {b, 3, 10, 10}), normal(g, {6, 3, 3, 3}, 0.3), normal(g, {6})};
                 },
                 [](const Inputs& in) {
                   Tensor y = relu(conv2d(in[0], in[1], in[2], {1, 1}, {1, 1}));
                   return Inputs{max_pool2d(y * 0.5 + 1.0, {2, 2})};
                 },
                 {2}, false, 10.0});
    // Every dim symbolic, called at three batch sizes: one artifact must serve them all.
    v.push_back({"dynamic_shapes",
                 [](std::mt19937_64& g, int64_t b) {
                   return Inputs{normal(g, {b, 8}), normal(g, {b, 8}), normal(g, {8, 6}, 0.3)};
                 },
                 [](const Inputs& in) {
                   Tensor h = sigmoid(in[0] * in[1] + 0.5);
                   Tensor m = matmul(h, in[2]);
                   return Inputs{tanh(m) * 2.0 - m, h};
                 },
                 {3, 5, 8}, true, 10.0});
    // Automatic dynamic: static first, then the batch dim symbolic at the first recompile.
    v.push_back({"automatic_dynamic",
                 [](std::mt19937_64& g, int64_t b) { return Inputs{normal(g, {b, 12}), normal(g, {12})}; },
                 [](const Inputs& in) { return Inputs{tanh(in[0] * 0.5 + in[1]) - sigmoid(in[0])}; },
                 {4, 7, 9}, std::nullopt});
    return v;
  }();
  return programs;
}

std::string compiler_device(const GraphOptions& o) {
  if (!o.device.empty()) return o.device;
  for (const PluginInfo& p : plugins())
    if (p.name == o.plugin && p.kind == PluginKind::Compiler && p.has_device) return p.device_name;
  return "cpu";
}

// One program through the plugin and through the interpreter; fills r.
void run_compiler_program(const CompilerProgram& p, const GraphOptions& o, const Device& device,
                          const std::string& type_name, uint64_t seed, CaseResult& r) {
  CompileOptions under_test;
  under_test.backend = o.plugin;
  under_test.dynamic = p.dynamic;
  under_test.name = p.name;
  CompileOptions reference;
  reference.backend = "interpreter";
  reference.dynamic = p.dynamic;
  reference.name = p.name + "_reference";
  Tolerance tol = default_tolerance(kFloat32, p.tol_scale);
  if (o.config) o.config->tolerance(type_name, p.name, "", kFloat32, &tol.rtol, &tol.atol);
  const CompiledFunction compiled = compile(p.fn, under_test);
  const CompiledFunction expected = compile(p.fn, reference);
  std::mt19937_64 gen(program_seed(seed, p.name, 0));
  for (int64_t batch : p.batches) {
    const Inputs inputs = p.make(gen, batch);
    Inputs on_device;
    for (const Tensor& x : inputs) on_device.push_back(x.to(device));
    const Inputs want = expected(inputs);
    const Inputs got = compiled(on_device);
    const std::string at = p.batches.size() > 1 ? " (batch " + std::to_string(batch) + ")" : "";
    if (got.size() != want.size()) {
      r.outcome = Outcome::Fail;
      r.message = "program '" + p.name + "'" + at + ": " + std::to_string(got.size()) + " outputs, the interpreter gives " +
                  std::to_string(want.size());
      return;
    }
    for (size_t k = 0; k < got.size(); ++k) {
      if (!got[k].is(type_name)) {
        r.outcome = Outcome::Fail;
        r.message = "program '" + p.name + "' output " + std::to_string(k) + at + " is on " + got[k].device().str() +
                    ", expected " + type_name;
        return;
      }
      const Comparison c = compare(got[k], want[k], tol, "interpreter");
      r.max_abs_error = std::max(r.max_abs_error, c.max_abs);
      r.max_rel_error = std::max(r.max_rel_error, c.max_rel);
      if (!c.ok) {
        r.outcome = Outcome::Fail;
        r.message = "program '" + p.name + "' output " + std::to_string(k) + at + ": " + c.message;
        return;
      }
    }
  }
  size_t partitions = 0;
  const std::vector<ArtifactInfo> artifacts = compiled.artifacts();
  for (const ArtifactInfo& a : artifacts) partitions += a.partitions;
  r.details = "partitions taken: " + std::to_string(partitions) + " in " + std::to_string(artifacts.size()) +
              " artifact" + (artifacts.size() == 1 ? "" : "s");
  r.outcome = Outcome::Pass;
}

// ---------------------------------------------------------------- quantizer programs

struct QuantizerProgram {
  std::string name;
  std::vector<int64_t> input_sizes;
  // Captures the model with weights drawn from `g`.
  std::function<ExportedProgram(std::mt19937_64& g, const Tensor& example)> model;
};

ExportedProgram export_mlp(std::mt19937_64& g, const Tensor& example, std::vector<int64_t> widths, bool relus) {
  auto w = std::make_shared<std::vector<Tensor>>();
  auto b = std::make_shared<std::vector<Tensor>>();
  ExportOptions opts;
  opts.input_names = {"x"};
  for (size_t l = 0; l + 1 < widths.size(); ++l) {
    w->push_back(normal(g, {widths[l + 1], widths[l]}, 1.0 / std::sqrt(double(widths[l]))));
    b->push_back(normal(g, {widths[l + 1]}, 0.1));
    opts.parameters["fc" + std::to_string(l) + ".weight"] = w->back();
    opts.parameters["fc" + std::to_string(l) + ".bias"] = b->back();
  }
  return export_program(
      [w, b, relus](const Inputs& in) {
        Tensor h = in[0];
        for (size_t l = 0; l < w->size(); ++l) {
          h = linear(h, (*w)[l], (*b)[l]);
          if (relus && l + 1 < w->size()) h = relu(h);
        }
        return Inputs{h};
      },
      {example}, opts);
}

const std::vector<QuantizerProgram>& quantizer_programs() {
  static const std::vector<QuantizerProgram> programs = [] {
    std::vector<QuantizerProgram> v;
    v.push_back({"mlp_relu", {16, 16}, [](std::mt19937_64& g, const Tensor& x) {
                   return export_mlp(g, x, {16, 32, 32, 32, 8}, true);
                 }});
    v.push_back({"mlp_linear", {16, 24}, [](std::mt19937_64& g, const Tensor& x) {
                   return export_mlp(g, x, {24, 24, 24, 24, 24, 12}, false);
                 }});
    v.push_back({"conv_net", {4, 3, 8, 8}, [](std::mt19937_64& g, const Tensor& example) {
                   auto p = std::make_shared<std::vector<Tensor>>(Inputs{
                       normal(g, {8, 3, 3, 3}, 0.3), normal(g, {8}, 0.1), normal(g, {8, 8, 3, 3}, 0.15),
                       normal(g, {8}, 0.1), normal(g, {32, 128}, 0.09), normal(g, {32}, 0.1),
                       normal(g, {32, 32}, 0.18), normal(g, {32}, 0.1), normal(g, {10, 32}, 0.18), normal(g, {10}, 0.1)});
                   ExportOptions opts;
                   opts.input_names = {"x"};
                   const char* names[] = {"conv0.weight", "conv0.bias", "conv1.weight", "conv1.bias", "fc0.weight",
                                          "fc0.bias",     "fc1.weight", "fc1.bias",     "fc2.weight", "fc2.bias"};
                   for (size_t i = 0; i < p->size(); ++i) opts.parameters[names[i]] = (*p)[i];
                   return export_program(
                       [p](const Inputs& in) {
                         const Inputs& w = *p;
                         Tensor h = relu(conv2d(in[0], w[0], w[1], {1, 1}, {1, 1}));
                         h = relu(conv2d(h, w[2], w[3], {1, 1}, {1, 1}));
                         h = max_pool2d(h, {2, 2}).flatten(1);
                         h = relu(linear(h, w[4], w[5]));
                         h = relu(linear(h, w[6], w[7]));
                         return Inputs{linear(h, w[8], w[9])};
                       },
                       {example}, opts);
                 }});
    return v;
  }();
  return programs;
}

bool is_weighted(const compiler::Node& n) {
  if (n.kind != compiler::NodeKind::Call || n.args.size() < 2 || n.args[1].values.empty()) return false;
  const std::string base = n.target.substr(0, n.target.find('.'));
  return base == "linear" || base == "conv2d";
}

// The linear and conv2d nodes whose weight a dequantize produces (quantized but not lowered).
std::vector<std::string> quantized_float_nodes(const ExportedProgram& ep) {
  std::vector<int32_t> producer(ep.graph.values.size(), -1);
  for (size_t i = 0; i < ep.graph.nodes.size(); ++i)
    for (compiler::ValueId v : ep.graph.nodes[i].outputs) producer[size_t(v)] = int32_t(i);
  std::vector<std::string> r;
  for (const compiler::Node& n : ep.graph.nodes) {
    if (!is_weighted(n)) continue;
    const int32_t p = producer[size_t(n.args[1].values[0])];
    if (p >= 0 && ep.graph.nodes[size_t(p)].target.rfind("dequantize", 0) == 0)
      r.push_back(n.target + " -> " + ep.graph.value_name(n.outputs.at(0)));
  }
  return r;
}

void run_quantizer_program(const QuantizerProgram& p, const quantization::Quantizer& quantizer, const GraphOptions& o,
                           uint64_t seed, CaseResult& r) {
  std::mt19937_64 gen(program_seed(seed, p.name, 0));
  const ExportedProgram ep = p.model(gen, normal(gen, p.input_sizes));
  quantization::PreparedProgram prepared;
  try {
    prepared = quantization::prepare(ep, quantizer);
  } catch (const Error& e) {
    r.outcome = Outcome::Fail;
    r.message = "program '" + p.name + "': prepare: " + e.what();
    return;
  }
  int with_specs = 0;
  for (const auto& [node, a] : prepared.annotations.all())
    with_specs += !a.first.inputs.empty() || a.first.output.has_value();
  for (int i = 0; i < 3; ++i) quantization::calibrate(prepared, {normal(gen, p.input_sizes)});
  const ExportedProgram converted = quantization::convert(prepared);
  ExportedProgram lowered = converted;
  const int quantized = int(quantized_float_nodes(converted).size());
  const int lowered_count = quantization::lower_to_int8(lowered);
  r.details = "nodes annotated with specs: " + std::to_string(with_specs) + ", quantized linear/conv2d: " +
              std::to_string(quantized) + ", lowered to int8 kernels: " + std::to_string(lowered_count);
  const std::vector<std::string> left = quantized_float_nodes(lowered);
  if (!left.empty()) {
    std::string list;
    for (const std::string& s : left) list += (list.empty() ? "" : ", ") + s;
    r.outcome = Outcome::Fail;
    r.message = "program '" + p.name + "': " + std::to_string(left.size()) + " of " + std::to_string(quantized) +
                " quantized linear/conv2d nodes were not lowered to int8 kernels (" + list +
                "): their annotations do not form a lowerable pattern (docs/quantization.md)";
    return;
  }
  const Tensor x = normal(gen, p.input_sizes);
  const Tensor want = converted.run({x}).at(0);
  const Tensor got = lowered.run({x}).at(0);
  Tensor w = want.to(kFloat64).contiguous();
  double largest = 0;
  for (int64_t i = 0; i < w.numel(); ++i) largest = std::max(largest, std::fabs(w.data_ptr<double>()[i]));
  Tolerance tol{0.02, 0.02 * largest};
  if (o.config) o.config->tolerance("cpu", p.name, "", kFloat32, &tol.rtol, &tol.atol);
  const Comparison c = compare(got, want, tol, "converted");
  r.max_abs_error = c.max_abs;
  r.max_rel_error = c.max_rel;
  if (!c.ok) {
    r.outcome = Outcome::Fail;
    r.message = "program '" + p.name + "': lowered vs converted: " + c.message;
    return;
  }
  r.outcome = Outcome::Pass;
}

// Runs `body` for one program with timing and error classification.
template <typename Body>
void run_one(const std::string& name, Report& report, Body body) {
  CaseResult r;
  r.op = name;
  r.dtype = kFloat32;
  r.resolution = report.suite;
  const auto start = std::chrono::steady_clock::now();
  try {
    body(r);
  } catch (const Error& e) {
    r.outcome = is_unsupported_error(e) ? Outcome::Unsupported : Outcome::Fail;
    r.message = "program '" + name + "': " + e.what();
  } catch (const std::exception& e) {
    r.outcome = Outcome::Fail;
    r.message = "program '" + name + "': unexpected exception: " + e.what();
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.cases.push_back(std::move(r));
}

}  // namespace

namespace {
template <typename Program>
std::vector<std::string> names_of(const std::vector<Program>& programs) {
  std::vector<std::string> v;
  for (const Program& p : programs) v.push_back(p.name);
  return v;
}
}  // namespace

std::vector<std::string> compiler_program_names() { return names_of(compiler_programs()); }
std::vector<std::string> quantizer_program_names() { return names_of(quantizer_programs()); }

Report run_compiler_suite(const GraphOptions& o) {
  Report report;
  report.suite = "compiler";
  report.plugin = o.plugin;
  const Device device(compiler_device(o));
  const std::string type_name = device_type_name(device.type());
  report.device = device.str();
  TESSERA_CHECK(device_count(device.type()) > 0, "tessera check: no '", type_name,
                "' device is available (device_count = 0); see `tessera devices` for the reason");
  std::string why;
  TESSERA_CHECK(ensure_backend_loaded(DeviceType::CPU, &why), "tessera check: the CPU backend (the reference) did not load: ",
                why, "; run `tessera plugins` to see why");
  // Checks the name (a compiler plugin that loads) before any program runs.
  CompileOptions check_name;
  check_name.backend = o.plugin;
  (void)compile([](const Inputs& in) { return in; }, check_name);
  report.seed = fresh_seed(o.seed);
  if (o.config) report.config_file = o.config->source();
  for (const CompilerProgram& p : compiler_programs()) {
    if (!selected(o, type_name, p.name) || skipped(o, type_name, p.name, report)) continue;
    run_one(p.name, report, [&](CaseResult& r) { run_compiler_program(p, o, device, type_name, report.seed, r); });
  }
  return report;
}

Report run_quantizer_suite(const GraphOptions& o) {
  Report report;
  report.suite = "quantizer";
  report.plugin = o.plugin;
  report.device = "cpu";
  std::string why;
  TESSERA_CHECK(ensure_backend_loaded(DeviceType::CPU, &why), "tessera check: the CPU backend did not load: ", why,
                "; run `tessera plugins` to see why");
  const std::unique_ptr<quantization::Quantizer> quantizer = quantization::plugin_quantizer(o.plugin);
  report.seed = fresh_seed(o.seed);
  if (o.config) report.config_file = o.config->source();
  for (const QuantizerProgram& p : quantizer_programs()) {
    if (!selected(o, "cpu", p.name) || skipped(o, "cpu", p.name, report)) continue;
    run_one(p.name, report, [&](CaseResult& r) { run_quantizer_program(p, *quantizer, o, report.seed, r); });
  }
  return report;
}

}  // namespace tessera::cts
