// Start-up cost of the plugin system.
//  - BM_TesseraDevices: wall time of `tessera devices` (a fresh process: discovery, loading every
//    backend plugin of the build, listing devices), against spawning /bin/true (the process-start
//    floor) measured in the same run. Goal: under 50 ms.
//  - BM_Discovery/N: discovery of N synthetic manifests in a temporary folder, per manifest, against
//    reading and parsing the same files with nlohmann::json directly (the floor of any discovery).
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/plugin_loader.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Runs `argv` with stdout/stderr sent to /dev/null and waits for it. Returns the exit status.
int spawn_and_wait(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

double mean_spawn_seconds(const std::vector<std::string>& args, int reps) {
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) spawn_and_wait(args);
  return seconds_since(t0) / reps;
}

void BM_TesseraDevices(benchmark::State& state) {
  // Every plugin of the build takes part: no TESSERA_PLUGIN_PATH / SELECT / DISABLE.
  unsetenv("TESSERA_PLUGIN_PATH");
  unsetenv("TESSERA_PLUGINS_SELECT");
  unsetenv("TESSERA_PLUGINS_DISABLE");
  const std::vector<std::string> cli = {TESSERA_CLI, "devices"};
  if (spawn_and_wait(cli) != 0) {
    state.SkipWithError("`tessera devices` failed");
    return;
  }
  const double floor_s = mean_spawn_seconds({"/bin/true"}, 20);
  double total = 0;
  int64_t n = 0;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    spawn_and_wait(cli);
    double s = seconds_since(t0);
    state.SetIterationTime(s);
    total += s;
    ++n;
  }
  const double mean = total / double(n);
  state.counters["ms"] = mean * 1e3;
  state.counters["goal_ms"] = 50;
  state.counters["spawn_true_ms"] = floor_s * 1e3;
  state.counters["ratio_vs_spawn_true"] = mean / floor_s;
}
BENCHMARK(BM_TesseraDevices)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);

class SyntheticPlugins {
 public:
  explicit SyntheticPlugins(int n) {
    std::string tmpl = (fs::temp_directory_path() / "tessera_bench_loader_XXXXXX").string();
    dir_ = mkdtemp(tmpl.data());
    std::ofstream(dir_ + "/libsynthetic.so") << "";
    for (int i = 0; i < n; ++i) {
      nlohmann::json m = {{"manifest_version", 1},
                          {"name", "synthetic_" + std::to_string(i)},
                          {"kind", "quantizer"},
                          {"library", "libsynthetic.so"},
                          {"abi", {{"major", 1}, {"minor", 0}}},
                          {"version", "1.0.0"},
                          {"priority", i % 7},
                          {"requires", {{"cpu_features", {"sse2"}}}},
                          {"description", "synthetic manifest for the discovery benchmark"}};
      std::string path = dir_ + "/synthetic_" + std::to_string(i) + ".json";
      std::ofstream(path) << m.dump(2);
      files_.push_back(path);
    }
  }
  ~SyntheticPlugins() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  const std::string& dir() const { return dir_; }
  const std::vector<std::string>& files() const { return files_; }

 private:
  std::string dir_;
  std::vector<std::string> files_;
};

// The floor: read and parse the files, nothing else.
double parse_only_seconds(const std::vector<std::string>& files, int reps) {
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) {
    for (const auto& f : files) {
      std::ifstream in(f);
      std::stringstream buf;
      buf << in.rdbuf();
      auto j = nlohmann::json::parse(buf.str());
      benchmark::DoNotOptimize(j);
    }
  }
  return seconds_since(t0) / reps;
}

void BM_Discovery(benchmark::State& state) {
  const int n = int(state.range(0));
  SyntheticPlugins plugins(n);
  setenv("TESSERA_PLUGIN_PATH", plugins.dir().c_str(), 1);
  setenv("TESSERA_PLUGINS_DISABLE", "cpu,my_hardware_device,opencl,cuda", 1);  // keep the build's own out
  unsetenv("TESSERA_PLUGINS_SELECT");
  tessera::rediscover_plugins_for_testing();
  if (tessera::plugins().size() < size_t(n)) {
    state.SkipWithError("not every synthetic manifest was found");
    return;
  }
  const double floor_s = parse_only_seconds(plugins.files(), 5);
  double total = 0;
  int64_t iters = 0;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    tessera::rediscover_plugins_for_testing();
    double s = seconds_since(t0);
    state.SetIterationTime(s);
    total += s;
    ++iters;
  }
  const double mean = total / double(iters);
  state.counters["us_per_manifest"] = mean * 1e6 / n;
  state.counters["parse_only_us_per_manifest"] = floor_s * 1e6 / n;
  state.counters["ratio_vs_parse_only"] = mean / floor_s;
  unsetenv("TESSERA_PLUGIN_PATH");
  unsetenv("TESSERA_PLUGINS_DISABLE");
  tessera::rediscover_plugins_for_testing();
}
BENCHMARK(BM_Discovery)->Arg(10)->Arg(100)->Arg(1000)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
