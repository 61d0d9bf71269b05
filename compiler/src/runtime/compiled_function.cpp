// tessera::compile (Note [Compiled functions] in tessera/compiler/compile.h).
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>

#include "backends/cpp/toolchain.h"
#include "backends/plugin/partition.h"
#include "runtime/compiler_choice.h"
#include "runtime/guards.h"
#include "tessera/autograd.h"
#include "tessera/compiler/codegen.h"
#include "tessera/compiler/compile.h"
#include "tessera/compiler/compiled_program.h"
#include "tessera/compiler/passes.h"
#include "tessera/dispatcher.h"
#include "tessera/env.h"
#include "tessera/error.h"
#include "tessera/log.h"
#include "tessera/op_info.h"
#include "tessera/plugin_loader.h"
#include "tessera/stream.h"

namespace tessera {

using compiler::ArtifactGuards;
using compiler::ExportedProgram;

namespace {

enum class Mode : uint8_t { Static, Dynamic, Automatic };

// (input index, dim)
using DimRef = std::pair<size_t, int64_t>;
using DimSet = std::set<DimRef>;

// Note [Compiled artifacts as device graphs]
// With mode "reduce-overhead" an artifact whose device's backend offers TESSERA_EXT_DEVICE_GRAPHS
// (Note [Device graphs] in plugin_abi.h) runs once as usual (the warm-up: kernels compiled and
// loaded, library plans made, the allocator's cache filled), then is captured once on a stream of
// its own, from static input buffers (copies of that call's inputs). Every later call with inputs
// of the same sizes, strides, dtypes and device copies its inputs into those buffers on that
// stream, replays the graph, and returns copies of the static outputs made on the caller's stream
// (events order the two streams), so outputs stay valid after the next call, unlike PyTorch's
// cudagraphs which hand out the static buffers. Not captured (calls run as in "default"): programs
// with random ops (a replay would repeat the numbers), program state (training steps), inputs that
// require grad while grad mode is on, inputs on the CPU or on several devices, and any artifact
// whose capture fails (an op that synchronises or falls back to the CPU): a warning, once. The
// graph and its reserved memory live as long as the compiled function.
struct DeviceGraph {
  const tessera_device_graphs_t* api = nullptr;
  std::optional<Stream> stream;
  void* graph = nullptr;
  std::vector<Tensor> static_inputs, static_outputs;
  DeviceGraph() = default;
  DeviceGraph(const DeviceGraph&) = delete;
  DeviceGraph& operator=(const DeviceGraph&) = delete;
  ~DeviceGraph() {
    if (graph) api->destroy(graph);  // before the static tensors are freed
  }
};

const tessera_device_graphs_t* device_graphs_of(Device device) {
  if (device.is_cpu()) return nullptr;
  const BackendDevice* b = backend_device_if_loaded(device.type());
  if (!b) return nullptr;
  auto fn = plugin_extension<tessera_ext_device_graphs_fn_t>(b->plugin, TESSERA_EXT_DEVICE_GRAPHS);
  const tessera_device_graphs_t* api = fn ? fn() : nullptr;
  return TESSERA_ABI_HAS_FIELD(api, tessera_device_graphs_t, destroy) && api->begin_capture &&
                 api->end_capture && api->replay && api->destroy
             ? api
             : nullptr;
}

// Work queued on `later` from now on waits for what is queued on `earlier` so far.
void order_after(const Stream& later, const Stream& earlier) {
  Event e;
  e.record(earlier);
  later.wait(e);
}

bool same_layout(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.device() == b.device() && a.sizes() == b.sizes() &&
         a.strides() == b.strides();
}

struct Artifact {
  ArtifactGuards guards;
  std::string backend;    // "cpp", "interpreter", "eager" or a compiler plugin's name
  std::string selection;  // backend "auto": the choice (Note [Compiler plugin priority])
  std::optional<compiler::codegen::CompiledGraph> generated;
  std::optional<ExportedProgram> program;                     // the interpreter's
  std::unique_ptr<compiler::PartitionedProgram> partitioned;  // a compiler plugin's
  std::string compatibility;  // the plugin's compatibility string (Note [Compiled artifact compatibility])

  std::vector<compiler::StateUpdate> state;  // of the captured program (Note [Program state])
  bool random = false;                       // the program has ops tagged random

  // Note [Compiled artifacts as device graphs]
  mutable std::mutex graph_mutex;  // one capture or replay at a time: the static buffers are shared
  mutable int graph_calls = 0;
  mutable bool graph_refused = false;
  mutable std::unique_ptr<DeviceGraph> device_graph;

  std::vector<Tensor> run(const ExportFn& fn, const std::vector<Tensor>& inputs) const {
    if (program) return program->run(inputs);  // applies the state itself
    if (!generated && !partitioned) return fn(inputs);
    std::optional<autograd::NoGradGuard> no_grad;  // a training step records no graph of its own
    if (!state.empty()) no_grad.emplace();
    std::vector<Tensor> outs = generated ? generated->run(inputs) : partitioned->run(inputs);
    ExportedProgram::apply_state(state, outs);
    return outs;
  }

  // Why the artifact is never captured for these inputs (empty: it may be).
  std::string graph_obstacle(const std::vector<Tensor>& inputs) const {
    if (backend == "eager") return "it runs eagerly";
    if (random) return "it draws random numbers (a replay would repeat them)";
    if (!state.empty()) return "it updates program state";
    if (inputs.empty()) return "it has no inputs";
    for (const Tensor& x : inputs) {
      if (x.device() != inputs[0].device()) return "its inputs are on several devices";
      if (x.requires_grad() && autograd::is_grad_enabled()) return "an input requires grad";
    }
    if (!device_graphs_of(inputs[0].device()))
      return "the backend of " + inputs[0].device().str() + " records no graphs";
    return {};
  }

  // Runs the artifact through its device graph when it has or can capture one; nullopt: run as usual.
  // `captured` is set when this call captured the graph.
  std::optional<std::vector<Tensor>> run_graphed(const ExportFn& fn, const std::vector<Tensor>& inputs,
                                                 const std::string& name, bool* captured,
                                                 bool* replayed) const {
    std::lock_guard lock(graph_mutex);
    if (graph_refused) return std::nullopt;
    if (!device_graph) {
      if (std::string why = graph_obstacle(inputs); !why.empty()) {
        graph_refused = true;
        if (log_enabled("compile"))
          log_message(LogLevel::Info, "compile", "'" + name + "': not captured into a device graph: " + why);
        return std::nullopt;
      }
      if (++graph_calls < 2) return run(fn, inputs);  // the warm-up
      try {
        capture(fn, inputs);
      } catch (const std::exception& e) {
        graph_refused = true;
        device_graph.reset();
        compiler::codegen::compile_warning(
            "'" + name + "': mode \"reduce-overhead\": the artifact could not be " +
            "captured into a device graph (" + e.what() + "); it runs as usual");
        return std::nullopt;
      }
      *captured = true;
    }
    DeviceGraph& g = *device_graph;
    if (inputs.size() != g.static_inputs.size()) return std::nullopt;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!same_layout(inputs[i], g.static_inputs[i]))
        return std::nullopt;  // other sizes (a dynamic artifact)
      if (inputs[i].requires_grad() && autograd::is_grad_enabled())
        return std::nullopt;  // a replay records no graph
    }
    const Device device = inputs[0].device();
    const Stream caller = current_stream(device);
    order_after(*g.stream, caller);
    {
      StreamGuard on_graph_stream(*g.stream);
      for (size_t i = 0; i < inputs.size(); ++i) g.static_inputs[i].copy_(inputs[i]);
      throw_status(g.api->replay(g.graph, g.stream->handle()),
                   "replay of the device graph of a compiled artifact");
    }
    order_after(caller, *g.stream);
    std::vector<Tensor> outs;
    outs.reserve(g.static_outputs.size());
    for (const Tensor& o : g.static_outputs) outs.push_back(o.clone());  // on the caller's stream
    *replayed = true;
    return outs;
  }

  // Captures the artifact from static copies of `inputs` on a stream of its own (nothing runs).
  void capture(const ExportFn& fn, const std::vector<Tensor>& inputs) const {
    const Device device = inputs[0].device();
    const int32_t index = device.index() < 0 ? 0 : int32_t(device.index());
    auto g = std::make_unique<DeviceGraph>();
    g->api = device_graphs_of(device);
    g->stream = Stream::create(device);
    TESSERA_CHECK(g->stream->handle(), "the backend of ", device.str(), " has no streams to capture on");
    order_after(*g->stream, current_stream(device));
    StreamGuard on_graph_stream(*g->stream);
    for (const Tensor& x : inputs) {
      Tensor s = empty_strided(x.sizes(), x.strides(), TensorOptions().dtype(x.dtype()).device(device));
      s.copy_(x);
      g->static_inputs.push_back(std::move(s));
    }
    throw_status(g->api->begin_capture(index, g->stream->handle()), "beginning the capture");
    std::vector<Tensor> outs;
    try {
      outs = run(fn, g->static_inputs);
    } catch (...) {
      void* discarded = nullptr;
      try {  // ends the recording; its own status is not the error to report
        throw_status(g->api->end_capture(index, g->stream->handle(), &discarded), "ending the capture");
      } catch (const std::exception&) {
      }
      if (discarded) g->api->destroy(discarded);
      throw;
    }
    throw_status(g->api->end_capture(index, g->stream->handle(), &g->graph), "ending the capture");
    g->static_outputs = std::move(outs);
    device_graph = std::move(g);
  }
};

std::string dims_text(const DimSet& dims) {
  std::string out;
  for (const auto& [i, d] : dims) out += detail::str_cat(out.empty() ? "" : ", ", "x", i, " dim ", d);
  return out;
}

}  // namespace

struct CompiledFunction::State {
  ExportFn fn;
  CompileOptions options;
  Mode mode = Mode::Automatic;
  bool interpreter_backend = false;
  bool plugin_backend = false;  // options.backend names a compiler plugin
  bool auto_backend = false;    // options.backend is "auto"

  mutable std::shared_mutex artifacts_mutex;
  std::vector<std::shared_ptr<const Artifact>> artifacts;  // guarded by artifacts_mutex

  std::atomic<int64_t> calls{0}, hits{0}, eager_calls{0}, graph_replays{0};

  // Runs an artifact, through its device graph in mode "reduce-overhead" (Note [Compiled artifacts
  // as device graphs]).
  std::vector<Tensor> run(const Artifact& a, const std::vector<Tensor>& inputs) {
    if (options.mode == "reduce-overhead") {
      bool captured = false, replayed = false;
      if (auto outs = a.run_graphed(fn, inputs, options.name, &captured, &replayed)) {
        if (captured) {
          std::lock_guard lock(compile_mutex);
          ++stats.graphs;
        }
        if (replayed) graph_replays.fetch_add(1, std::memory_order_relaxed);
        return std::move(*outs);
      }
    }
    return a.run(fn, inputs);
  }

  // Everything below is guarded by compile_mutex, which serialises misses.
  mutable std::mutex compile_mutex;
  CompileStats stats;
  // backend "auto": compiler plugins whose get_capability or compile failed for this function, with
  // the error; passed over from then on.
  std::map<std::string, std::string> failed_plugins;
  // Note [Automatic dynamic]
  // Per input, the sizes of the first call that had its rank. A later miss where a dim's size
  // differs marks that dim dynamic for every later capture (the "frame state" of automatic dynamic
  // shapes); other dims stay static. A dim the program forces to a constant is never marked again.
  std::vector<std::optional<std::vector<int64_t>>> first_sizes;
  DimSet marked;
  DimSet must_be_static;
  std::shared_ptr<const Artifact> general;  // past the recompile limit
  bool warned_limit = false;
  bool warned_uncapturable = false;

  std::shared_ptr<const Artifact> find(const std::vector<Tensor>& inputs) const {
    std::shared_lock lock(artifacts_mutex);
    for (auto it = artifacts.rbegin(); it != artifacts.rend(); ++it)
      if ((*it)->guards.accepts(inputs)) return *it;
    return nullptr;
  }

  ExportedProgram capture(const std::vector<Tensor>& inputs, const DimSet& dynamic, bool declared) const {
    ExportOptions eo;
    eo.parameters = options.parameters;
    eo.dynamic_shapes.resize(inputs.size());
    // Dynamic dims of equal size share a symbol (duck sizing): a program that adds them needs them
    // equal, and a later call where they differ fails the binding guard and captures again.
    std::map<int64_t, std::string> symbol_of_size;
    for (const auto& [i, d] : dynamic) {
      const int64_t size = inputs[i].size(d);
      const std::string name = detail::str_cat("s", symbol_of_size.size());
      const std::string& symbol = symbol_of_size.emplace(size, name).first->second;
      eo.dynamic_shapes[i][d] = Dim{symbol, declared ? 0 : 2, INT64_MAX};
    }
    return export_program(fn, inputs, eo);
  }

  // Captures with `candidates` symbolic, or with the largest set of them the program allows: dims
  // of one size are tried together, then one by one. Dims left out are remembered as static.
  ExportedProgram capture_dynamic(const std::vector<Tensor>& inputs, const DimSet& candidates,
                                  bool declared) {
    try {
      return capture(inputs, candidates, declared);
    } catch (const Error& e) {
      if (candidates.empty()) throw;
      if (log_enabled("dynamic"))
        log_message(LogLevel::Info, "dynamic",
                    "'" + options.name + "': cannot capture with " + dims_text(candidates) + " dynamic (" +
                        e.what() + "); trying them one size at a time");
    }
    std::map<int64_t, DimSet> by_size;
    for (const DimRef& r : candidates) by_size[inputs[r.first].size(r.second)].insert(r);
    DimSet accepted;
    std::optional<ExportedProgram> best;
    auto attempt = [&](const DimSet& extra) {
      DimSet trial = accepted;
      trial.insert(extra.begin(), extra.end());
      try {
        best = capture(inputs, trial, declared);
        accepted = std::move(trial);
        return true;
      } catch (const Error&) {
        return false;
      }
    };
    for (const auto& [size, group] : by_size) {
      if (attempt(group) || group.size() == 1) continue;
      for (const DimRef& r : group) attempt(DimSet{r});
    }
    DimSet rejected;
    for (const DimRef& r : candidates)
      if (!accepted.count(r)) rejected.insert(r);
    for (const DimRef& r : rejected) {
      must_be_static.insert(r);
      marked.erase(r);
    }
    if (!rejected.empty() && log_enabled("dynamic"))
      log_message(LogLevel::Info, "dynamic",
                  "'" + options.name + "': " + dims_text(rejected) + " cannot be dynamic; they stay static");
    if (!best) best = capture(inputs, accepted, declared);
    return std::move(*best);
  }

  // The dims the next capture makes symbolic, after updating the automatic-dynamic state.
  DimSet dynamic_dims(const std::vector<Tensor>& inputs) {
    DimSet dims;
    if (mode == Mode::Static) return dims;
    if (mode == Mode::Dynamic) {
      for (size_t i = 0; i < inputs.size(); ++i)
        for (int64_t d = 0; d < inputs[i].dim(); ++d)
          if (!must_be_static.count({i, d})) dims.insert({i, d});
      return dims;
    }
    if (first_sizes.size() < inputs.size()) first_sizes.resize(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::vector<int64_t> sizes = inputs[i].sizes().vec();
      auto& first = first_sizes[i];
      if (!first) {
        first = sizes;
        continue;
      }
      if (first->size() != sizes.size()) continue;
      for (size_t d = 0; d < sizes.size(); ++d) {
        const DimRef r{i, int64_t(d)};
        if (sizes[d] == (*first)[d] || marked.count(r) || must_be_static.count(r)) continue;
        marked.insert(r);
        if (log_enabled("dynamic"))
          log_message(LogLevel::Info, "dynamic",
                      "'" + options.name + "': x" + std::to_string(i) + " dim " + std::to_string(d) +
                          " changed from " + std::to_string((*first)[d]) + " to " + std::to_string(sizes[d]) +
                          "; it is dynamic from now on");
      }
    }
    for (const DimRef& r : marked) {
      if (r.first >= inputs.size() || r.second >= inputs[r.first].dim()) continue;
      const int64_t size = inputs[r.first].size(r.second);
      if (size == 0 || size == 1) {
        if (log_enabled("dynamic"))
          log_message(LogLevel::Info, "dynamic",
                      "'" + options.name + "': " + dims_text({r}) + " is " + std::to_string(size) +
                          ", specialised (a dynamic dim is assumed to be neither 0 nor 1)");
        continue;
      }
      dims.insert(r);
    }
    return dims;
  }

  // backend "auto": the best compiler plugin for `device` that compiles the program (Note [Compiler
  // plugin priority]); sets a.partitioned, a.backend and a.selection. A plugin that fails is
  // remembered in failed_plugins and passed over with a warning. Empty when none took it: cpp.
  std::string partition_auto(const ExportedProgram& program, const Device& device, Artifact& a) {
    for (;;) {
      compiler::CompilerChoice choice = compiler::choose_compiler_plugin(device, failed_plugins);
      a.selection = std::move(choice.report);
      if (log_enabled("compile")) log_message(LogLevel::Info, "compile", "'" + options.name + "': " + a.selection);
      if (choice.plugin.empty()) return {};
      try {
        a.partitioned = std::make_unique<compiler::PartitionedProgram>(program, choice.plugin, device);
        a.backend = choice.plugin;
        return choice.plugin;
      } catch (const Error& e) {
        compiler::codegen::compile_warning("'" + options.name + "': compiler plugin '" + choice.plugin +
                                           "' failed (" + e.what() + "); the next candidate compiles it instead");
        failed_plugins[choice.plugin] = e.what();
      }
    }
  }

  std::shared_ptr<const Artifact> build(const std::vector<Tensor>& inputs, const DimSet& dynamic,
                                        bool declared) {
    const auto t0 = std::chrono::steady_clock::now();
    auto a = std::make_shared<Artifact>();
    std::optional<ExportedProgram> program;
    try {
      program = capture_dynamic(inputs, dynamic, declared);
    } catch (const Error& e) {
      if (!warned_uncapturable) {
        warned_uncapturable = true;
        compiler::codegen::compile_warning("'" + options.name + "' cannot be captured (" + e.what() +
                                           "); calls with these input types run it eagerly");
      }
      a->guards = ArtifactGuards::exact(inputs);
      a->backend = "eager";
    }
    if (program) {
      a->state = program->state;
      for (const compiler::Node& n : program->graph.nodes)
        if (const op::OpInfo* info = op::find_op_info(n.target); info && info->has(op::kTagRandom))
          a->random = true;
      std::vector<Device> devices;
      bool all_cpu = true;
      for (const Tensor& x : inputs) {
        devices.push_back(x.device());
        all_cpu = all_cpu && x.device().is_cpu();
      }
      a->guards = ArtifactGuards(*program, devices);
      const Device device = devices.empty() ? Device(DeviceType::CPU) : devices[0];
      std::string plugin = plugin_backend ? options.backend : std::string();
      // Note [Linear epilogues on CUDA]: off the CPU, linear -> bias -> activation -> residual
      // chains become the backend's _linear_epilogue where it registers one; the interpreter runs
      // those nodes, a compiler plugin the rest.
      if (!device.is_cpu() && options.backend != "eager")
        compiler::PassManager()
            .add("fuse_linear_epilogues", compiler::codegen::fuse_linear_epilogues)
            .run(*program);
      if (auto_backend) plugin = partition_auto(*program, device, *a);
      if (!plugin.empty() && !a->partitioned) {
        a->partitioned = std::make_unique<compiler::PartitionedProgram>(std::move(*program), plugin, device);
        a->backend = plugin;
      }
      if (a->partitioned) {
        program.reset();
        a->compatibility = compiler::compatibility_info(a->backend, device);
      } else if (!interpreter_backend && !all_cpu && log_enabled("compile"))
        log_message(LogLevel::Info, "compile",
                    "'" + options.name + "': the cpp backend generates code for CPU values only; inputs " +
                        a->guards.str() + " run through the interpreter");
      if (!interpreter_backend && plugin.empty() && all_cpu) {
        try {
          compiler::codegen::CodegenOptions co;
          co.cache_dir = options.cache_dir;
          a->generated.emplace(compiler::codegen::CompiledGraph::compile(*program, co));
          a->backend = "cpp";
          stats.disk_cache_hits += a->generated->info().cache_hit;
        } catch (const Error& e) {
          // No compiler: compile_cached has warned once. A graph the generator refuses is logged.
          const std::string why = "'" + options.name + "': the cpp backend cannot compile the graph (" +
                                  e.what() + "); it runs through the interpreter";
          if (e.code() == ErrorCode::InvalidArgument) {
            if (log_enabled("compile")) log_message(LogLevel::Info, "compile", why);
          } else if (e.code() != ErrorCode::Unavailable) {
            compiler::codegen::compile_warning(why);
          }
        }
      }
      if (program && !a->generated) {
        a->program = std::move(program);
        a->backend = "interpreter";
        ++stats.interpreted;
      }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++stats.compiles;
    stats.compile_seconds += seconds;
    if (log_enabled("compile"))
      log_message(LogLevel::Info, "compile",
                  "'" + options.name + "': artifact " + std::to_string(stats.compiles) + " (" + a->backend +
                      ") for " + a->guards.str() + " in " + std::to_string(seconds * 1e3) + " ms");
    {
      std::unique_lock lock(artifacts_mutex);
      artifacts.push_back(a);
    }
    return a;
  }

  // Why no artifact took the inputs: the failure of the newest artifact closest to them.
  std::string miss_reason(const std::vector<Tensor>& inputs) const {
    std::shared_lock lock(artifacts_mutex);
    const Artifact* closest = artifacts.back().get();
    int best = -1;
    for (auto it = artifacts.rbegin(); it != artifacts.rend(); ++it)
      if (const int score = (*it)->guards.similarity(inputs); score > best) {
        best = score;
        closest = it->get();
      }
    return closest->guards.first_failure(inputs);
  }

  // Under a miss: the artifact to run, built if need be; null to run fn eagerly.
  std::shared_ptr<const Artifact> artifact_for(const std::vector<Tensor>& inputs) {
    std::lock_guard lock(compile_mutex);
    if (auto a = find(inputs)) return a;  // another thread built it meanwhile
    std::string reason;
    if (!artifacts.empty()) reason = miss_reason(inputs);
    if (stats.compiles >= options.recompile_limit) {
      if (!warned_limit) {
        warned_limit = true;
        stats.limit_reached = true;
        compiler::codegen::compile_warning(
            "'" + options.name + "' reached its recompile limit of " +
            std::to_string(options.recompile_limit) + " (last guard failure: " + reason +
            "); it runs its most general artifact from now on, and fn eagerly for inputs that one "
            "refuses; raise CompileOptions::recompile_limit or make the changing dims dynamic");
      }
      if (!general) {
        DimSet all;
        for (size_t i = 0; i < inputs.size(); ++i)
          for (int64_t d = 0; d < inputs[i].dim(); ++d)
            if (!must_be_static.count({i, d})) all.insert({i, d});
        general = build(inputs, all, /*declared=*/true);
      }
      return general->guards.accepts(inputs) ? general : nullptr;
    }
    if (!artifacts.empty()) {
      stats.recompile_reasons.push_back(reason);
      if (log_enabled("compile"))
        log_message(LogLevel::Info, "compile", "'" + options.name + "': recompiling: " + reason);
    }
    const DimSet dims = dynamic_dims(inputs);
    auto a = build(inputs, dims, mode == Mode::Dynamic);
    TESSERA_INTERNAL_ASSERT(
        a->guards.accepts(inputs),
        "an artifact refuses the inputs it was captured from: ", a->guards.first_failure(inputs));
    return a;
  }
};

CompiledFunction::CompiledFunction(std::shared_ptr<State> state) : state_(std::move(state)) {}

std::vector<Tensor> CompiledFunction::operator()(const std::vector<Tensor>& inputs) const {
  State& s = *state_;
  s.calls.fetch_add(1, std::memory_order_relaxed);
  if (auto a = s.find(inputs)) {
    s.hits.fetch_add(1, std::memory_order_relaxed);
    return s.run(*a, inputs);
  }
  for (size_t i = 0; i < inputs.size(); ++i)
    TESSERA_CHECK(inputs[i].defined(), "compiled function '", s.options.name, "': input ", i,
                  " is an undefined tensor");
  if (auto a = s.artifact_for(inputs)) return s.run(*a, inputs);
  s.eager_calls.fetch_add(1, std::memory_order_relaxed);
  return s.fn(inputs);
}

CompileStats CompiledFunction::stats() const {
  const State& s = *state_;
  std::lock_guard lock(s.compile_mutex);
  CompileStats out = s.stats;
  out.calls = s.calls.load();
  out.cache_hits = s.hits.load();
  out.eager_calls = s.eager_calls.load();
  out.graph_replays = s.graph_replays.load();
  return out;
}

std::vector<ArtifactInfo> CompiledFunction::artifacts() const {
  std::shared_lock lock(state_->artifacts_mutex);
  std::vector<ArtifactInfo> out;
  for (const auto& a : state_->artifacts)
    out.push_back({a->backend, a->guards.str(), a->program ? a->program->graph_string() : std::string(),
                   a->partitioned ? a->partitioned->partitions() : 0, a->selection, a->compatibility});
  return out;
}

CompiledFunction compile(ExportFn fn, CompileOptions options) {
  TESSERA_CHECK(fn, "compile: fn is empty; pass the function to compile");
  const std::string& b = options.backend;
  const bool builtin = b == "cpp" || b == "interpreter" || b == "eager" || b == "auto";
  if (!builtin) compiler::compiler_plugin(b);  // names the choices when it is none
  TESSERA_CHECK(options.recompile_limit >= 1, "compile: recompile_limit is ", options.recompile_limit,
                "; it must be at least 1");
  TESSERA_CHECK(options.mode == "default" || options.mode == "reduce-overhead", "compile: mode \"",
                options.mode, "\" is not one of \"default\", \"reduce-overhead\"");
  if (options.name.empty()) options.name = "compiled_fn";
  auto state = std::make_shared<CompiledFunction::State>();
  state->interpreter_backend = b == "interpreter" || b == "eager";
  state->plugin_backend = !builtin;
  state->auto_backend = b == "auto";
  if (options.dynamic) {
    state->mode = *options.dynamic ? Mode::Dynamic : Mode::Static;
  } else {
    const char* automatic = env_value("TESSERA_AUTOMATIC_DYNAMIC");
    state->mode =
        !automatic || parse_env_bool("TESSERA_AUTOMATIC_DYNAMIC", automatic) ? Mode::Automatic : Mode::Static;
  }
  state->fn = std::move(fn);
  state->options = std::move(options);
  return CompiledFunction(std::move(state));
}

}  // namespace tessera
