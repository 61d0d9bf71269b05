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
#include "tessera/env.h"
#include "tessera/error.h"
#include "tessera/log.h"

namespace tessera {

using compiler::ArtifactGuards;
using compiler::ExportedProgram;

namespace {

enum class Mode : uint8_t { Static, Dynamic, Automatic };

// (input index, dim)
using DimRef = std::pair<size_t, int64_t>;
using DimSet = std::set<DimRef>;

struct Artifact {
  ArtifactGuards guards;
  std::string backend;    // "cpp", "interpreter", "eager" or a compiler plugin's name
  std::string selection;  // backend "auto": the choice (Note [Compiler plugin priority])
  std::optional<compiler::codegen::CompiledGraph> generated;
  std::optional<ExportedProgram> program;                     // the interpreter's
  std::unique_ptr<compiler::PartitionedProgram> partitioned;  // a compiler plugin's
  std::string compatibility;  // the plugin's compatibility string (Note [Compiled artifact compatibility])

  std::vector<compiler::StateUpdate> state;  // of the captured program (Note [Program state])

  std::vector<Tensor> run(const ExportFn& fn, const std::vector<Tensor>& inputs) const {
    if (program) return program->run(inputs);  // applies the state itself
    if (!generated && !partitioned) return fn(inputs);
    std::optional<autograd::NoGradGuard> no_grad;  // a training step records no graph of its own
    if (!state.empty()) no_grad.emplace();
    std::vector<Tensor> outs = generated ? generated->run(inputs) : partitioned->run(inputs);
    ExportedProgram::apply_state(state, outs);
    return outs;
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

  std::atomic<int64_t> calls{0}, hits{0}, eager_calls{0};

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
    return a->run(s.fn, inputs);
  }
  for (size_t i = 0; i < inputs.size(); ++i)
    TESSERA_CHECK(inputs[i].defined(), "compiled function '", s.options.name, "': input ", i,
                  " is an undefined tensor");
  if (auto a = s.artifact_for(inputs)) return a->run(s.fn, inputs);
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
