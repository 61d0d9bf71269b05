// The transformer block of bench_cpu_block (benchmarks/cpu/transformer_block.h) passed to
// tessera::compile against the same function run eagerly, and against torch.compile (Inductor,
// CPU) in a child python3 (torch_compile_block.py) when `python3 -c "import torch"` works. The
// three are timed in interleaved rounds (one trial of each per round) and the medians compared:
// ratio_vs_eager = eager / compiled, ratio_vs_torch_compile = torch.compile / compiled;
// no_epilogues_ms is the block compiled with TESSERA_COMPILE_EPILOGUES=0 (Note [Linear epilogues]).
// Compiles and warm-ups are excluded from every timing; compile_s and torch_compile_s report them.
#include <benchmark/benchmark.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "../cpu/bench_timing.h"
#include "../cpu/transformer_block.h"
#include "tessera/compiler/compile.h"
#include "tessera/tessera.h"

namespace {

using namespace tessera;
namespace fs = std::filesystem;

constexpr int kRounds = 7;
constexpr double kTrialSeconds = 0.4;

std::string bench_cache() {
  static std::string dir =
      (fs::temp_directory_path() / ("tessera_bench_compiled_block_" + std::to_string(getpid()))).string();
  return dir;
}

int threads() {
  if (const char* s = std::getenv("OMP_NUM_THREADS"); s && std::atoi(s) > 0) return std::atoi(s);
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// torch_compile_block.py in a child process, spoken to over two pipes; absent (`ok() == false`)
// when python3 cannot import torch or the script fails to compile the block.
class TorchCompiled {
 public:
  explicit TorchCompiled(const char* dtype) {
    if (std::system("python3 -c 'import torch' >/dev/null 2>&1") != 0) {
      why_ = "python3 cannot import torch";
      return;
    }
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) return;
    const std::string nthreads = std::to_string(threads());
    pid_ = fork();
    if (pid_ == 0) {
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      close(to_child[1]);
      close(from_child[0]);
      execlp("python3", "python3", TESSERA_TORCH_COMPILE_SCRIPT, dtype, nthreads.c_str(), (char*)nullptr);
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    to_ = fdopen(to_child[1], "w");
    from_ = fdopen(from_child[0], "r");
    char word[16] = {};
    if (pid_ < 0 || !to_ || !from_ || std::fscanf(from_, "%15s %lf", word, &compile_s_) != 2 ||
        std::string(word) != "ready") {
      why_ = "torch.compile of the block failed (run python3 " TESSERA_TORCH_COMPILE_SCRIPT " f32 2 to see why)";
      stop();
    }
  }
  ~TorchCompiled() { stop(); }
  bool ok() const { return from_ != nullptr; }
  const std::string& why() const { return why_; }
  double compile_seconds() const { return compile_s_; }

  // Seconds per call over one trial of at least `seconds`, or a negative value on failure.
  double trial(double seconds) {
    double ms = -1;
    if (!ok() || std::fprintf(to_, "trial %g\n", seconds) < 0 || std::fflush(to_) != 0 ||
        std::fscanf(from_, "%lf", &ms) != 1)
      return -1;
    return ms * 1e-3;
  }

 private:
  void stop() {
    if (to_) std::fclose(to_);
    if (from_) std::fclose(from_);
    to_ = from_ = nullptr;
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  pid_t pid_ = -1;
  FILE* to_ = nullptr;
  FILE* from_ = nullptr;
  double compile_s_ = 0;
  std::string why_;
};

void BM_CompiledBlock(benchmark::State& state, DType dt, const char* name) {
  manual_seed(4);
  const bench::BlockWeights w = bench::make_block_weights(dt);
  const std::vector<Tensor> in{bench::cast_to(randn({1, bench::kBlockSeq, bench::kBlockModel}), dt)};
  auto fn = [&w](const std::vector<Tensor>& x) { return std::vector<Tensor>{bench::transformer_block(w, x[0])}; };
  CompileOptions options;
  options.cache_dir = bench_cache();
  options.name = std::string("transformer_block_") + name;
  CompiledFunction compiled = compile(fn, options);
  const auto c0 = bench::Clock::now();
  compiled(in);
  const double compile_s = std::chrono::duration<double>(bench::Clock::now() - c0).count();
  // The same block compiled without linear epilogues (Note [Linear epilogues]): what they buy.
  CompiledFunction plain = compile(fn, options);
  const char* flag = std::getenv("TESSERA_COMPILE_EPILOGUES");
  const std::string saved = flag ? flag : "";
  setenv("TESSERA_COMPILE_EPILOGUES", "0", 1);
  plain(in);
  if (flag) setenv("TESSERA_COMPILE_EPILOGUES", saved.c_str(), 1);
  else unsetenv("TESSERA_COMPILE_EPILOGUES");

  TorchCompiled torch(name);
  auto run_eager = [&] { benchmark::DoNotOptimize(fn(in)[0].raw_data_ptr()); };
  auto run_compiled = [&] { benchmark::DoNotOptimize(compiled(in)[0].raw_data_ptr()); };
  auto run_plain = [&] { benchmark::DoNotOptimize(plain(in)[0].raw_data_ptr()); };
  run_eager();
  run_compiled();
  run_plain();
  std::vector<double> eager_s, compiled_s, plain_s, torch_s;
  for (auto _ : state) {
    for (int r = 0; r < kRounds; ++r) {
      eager_s.push_back(bench::trial(run_eager, kTrialSeconds));
      compiled_s.push_back(bench::trial(run_compiled, kTrialSeconds));
      plain_s.push_back(bench::trial(run_plain, kTrialSeconds));
      if (torch.ok()) {
        const double t = torch.trial(kTrialSeconds);
        if (t > 0) torch_s.push_back(t);
      }
    }
    state.SetIterationTime(median(compiled_s));
  }
  const CompileStats stats = compiled.stats();
  if (stats.compiles != 1 || stats.interpreted != 0 || stats.eager_calls != 0) {
    state.SkipWithError("the block did not run as one generated artifact (see TESSERA_LOG=compile)");
    return;
  }
  const double eager = median(eager_s), comp = median(compiled_s);
  state.counters["eager_ms"] = eager * 1e3;
  state.counters["compiled_ms"] = comp * 1e3;
  state.counters["ratio_vs_eager"] = eager / comp;
  state.counters["no_epilogues_ms"] = median(plain_s) * 1e3;
  state.counters["compile_s"] = compile_s;
  if (!torch_s.empty()) {
    const double t = median(torch_s);
    state.counters["torch_compile_ms"] = t * 1e3;
    state.counters["ratio_vs_torch_compile"] = t / comp;
    state.counters["torch_compile_s"] = torch.compile_seconds();
    state.SetLabel("torch.compile compared, " + std::to_string(threads()) + " threads");
  } else {
    state.SetLabel("torch.compile: not compared (" + (torch.why().empty() ? std::string("no result") : torch.why()) +
                   ")");
  }
}

}  // namespace

BENCHMARK_CAPTURE(BM_CompiledBlock, f32, kFloat32, "f32")
    ->Unit(benchmark::kMillisecond)->UseManualTime()->Iterations(1);
BENCHMARK_CAPTURE(BM_CompiledBlock, bf16, kBFloat16, "bf16")
    ->Unit(benchmark::kMillisecond)->UseManualTime()->Iterations(1);

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::error_code ec;
  fs::remove_all(bench_cache(), ec);
  return 0;
}
