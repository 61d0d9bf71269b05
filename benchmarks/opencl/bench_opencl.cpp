// The OpenCL backend (PoCL on this machine) against the CPU backend, measured in the same run:
//   BM_add/<n>        elementwise add of n floats; counter cpu_over_opencl = CPU time / OpenCL time
//   BM_matmul/<n>     n x n x n float matmul; same counter, plus GFLOP/s of each
//   BM_startup/cold   a child process runs a small op set with empty program caches (ours and PoCL's)
//   BM_startup/cached the same child again with the caches it filled; cold_over_cached in the counters
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "tessera/tessera.h"

namespace ts = tessera;
using Clock = std::chrono::steady_clock;

namespace {

const ts::Device kDev("opencl:0");

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Median-free simple mean over `reps` calls of `fn` (after one warm-up call).
template <typename Fn>
double time_per_call(Fn&& fn, int reps) {
  fn();
  const auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) fn();
  return seconds_since(t0) / reps;
}

bool have_opencl(benchmark::State& state) {
  if (ts::device_count(ts::kOpenCL) > 0) return true;
  state.SkipWithError("no OpenCL device");
  return false;
}

void BM_add(benchmark::State& state) {
  if (!have_opencl(state)) return;
  const int64_t n = state.range(0);
  ts::Tensor a = ts::randn({n}), b = ts::randn({n});
  ts::Tensor da = a.to(kDev), db = b.to(kDev);
  const double cpu = time_per_call([&] { benchmark::DoNotOptimize(ts::add(a, b)); }, 20);
  ts::synchronize(kDev);
  for (auto _ : state) {
    const auto t0 = Clock::now();
    ts::Tensor c = ts::add(da, db);
    ts::synchronize(kDev);
    state.SetIterationTime(seconds_since(t0));
  }
  const double ocl = time_per_call([&] { ts::add(da, db); ts::synchronize(kDev); }, 20);
  state.counters["cpu_us"] = cpu * 1e6;
  state.counters["opencl_us"] = ocl * 1e6;
  state.counters["cpu_over_opencl"] = cpu / ocl;
  state.SetBytesProcessed(state.iterations() * n * 12);
}
BENCHMARK(BM_add)->Arg(1 << 16)->Arg(1 << 20)->Arg(1 << 24)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_matmul(benchmark::State& state) {
  if (!have_opencl(state)) return;
  const int64_t n = state.range(0);
  ts::Tensor a = ts::randn({n, n}), b = ts::randn({n, n});
  ts::Tensor da = a.to(kDev), db = b.to(kDev);
  const int reps = n >= 1024 ? 2 : 5;
  const double cpu = time_per_call([&] { benchmark::DoNotOptimize(ts::matmul(a, b)); }, reps);
  for (auto _ : state) {
    const auto t0 = Clock::now();
    ts::Tensor c = ts::matmul(da, db);
    ts::synchronize(kDev);
    state.SetIterationTime(seconds_since(t0));
  }
  const double ocl = time_per_call([&] { ts::matmul(da, db); ts::synchronize(kDev); }, reps);
  const double flop = 2.0 * double(n) * double(n) * double(n);
  state.counters["cpu_ms"] = cpu * 1e3;
  state.counters["opencl_ms"] = ocl * 1e3;
  state.counters["cpu_gflops"] = flop / cpu * 1e-9;
  state.counters["opencl_gflops"] = flop / ocl * 1e-9;
  state.counters["cpu_over_opencl"] = cpu / ocl;
}
BENCHMARK(BM_matmul)->Arg(512)->Arg(1024)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);

// ---------------------------------------------------------------- start-up (child processes)

std::string g_self;

// In the child: a first use of a few kernels, timed from the first OpenCL call to the results.
int child_startup() {
  const auto t0 = Clock::now();
  ts::Tensor x = ts::randn({256, 256}).to(kDev);
  ts::Tensor y = ts::softmax(ts::matmul(ts::add(x, x), x), 1);
  ts::Tensor s = ts::sum(ts::exp(y));
  (void)s.cpu();
  std::printf("STARTUP_SECONDS %.6f\n", seconds_since(t0));
  return 0;
}

double run_child(const std::string& cache_dir) {
  const std::string cmd = "TESSERA_CACHE_DIR='" + cache_dir + "' POCL_CACHE_DIR='" + cache_dir +
                          "/pocl' '" + g_self + "' --child-startup";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  char line[256];
  double secs = -1;
  while (std::fgets(line, sizeof line, p))
    if (std::strncmp(line, "STARTUP_SECONDS ", 16) == 0) secs = std::atof(line + 16);
  pclose(p);
  return secs;
}

std::string make_temp_dir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "tessera_bench_opencl_XXXXXX").string();
  return mkdtemp(tmpl.data()) ? tmpl : std::string();
}

void BM_startup(benchmark::State& state) {
  if (!have_opencl(state)) return;
  const bool cold = state.range(0) == 0;
  std::string warm_dir;
  if (!cold) {
    warm_dir = make_temp_dir();
    run_child(warm_dir);  // fill the caches once
  }
  double total = 0;
  for (auto _ : state) {
    double secs;
    if (cold) {
      const std::string dir = make_temp_dir();
      secs = run_child(dir);
      std::filesystem::remove_all(dir);
    } else {
      secs = run_child(warm_dir);
    }
    if (secs < 0) {
      state.SkipWithError("the child process failed");
      break;
    }
    state.SetIterationTime(secs);
    total += secs;
  }
  state.counters["first_use_s"] = total / double(state.iterations());
  if (!warm_dir.empty()) std::filesystem::remove_all(warm_dir);
  state.SetLabel(cold ? "cold: empty program caches" : "cached: programs from the disk cache");
}
BENCHMARK(BM_startup)->Arg(0)->Arg(1)->ArgNames({"cached"})->UseManualTime()->Iterations(2)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  g_self = std::filesystem::read_symlink("/proc/self/exe").string();
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--child-startup") == 0) return child_startup();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
