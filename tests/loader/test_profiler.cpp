// The op profiler (Note [Profiler]) against the real cpu plugin and the reference accelerator: the
// Chrome trace it writes, its per-op summary, and TESSERA_PROFILE in a separate process.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "loader_test_util.h"
#include "tessera/plugin_loader.h"
#include "tessera/profiler.h"
#include "tessera/tessera.h"

namespace {

using json = nlohmann::json;
using tessera::Device;
using tessera::Tensor;

json read_trace(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << "not JSON: " << path;
  return j;
}

// The complete ("X") host events of `op` on `device` (not the device-time events, "cat": "device",
// of Note [Profiler device times]).
std::vector<json> events_of(const json& trace, const std::string& op, const std::string& device) {
  std::vector<json> out;
  for (const json& e : trace["traceEvents"])
    if (e.value("ph", "") == "X" && e.value("cat", "") == "op" && e.value("name", "") == op &&
        e["args"].value("device", "") == device)
      out.push_back(e);
  return out;
}

class ProfilerTest : public ::testing::Test {
 protected:
  void SetUp() override { tessera::profiler_clear(); }
  void TearDown() override {
    tessera::profiler_enable("");
    tessera::profiler_clear();
  }
  lt::TempDir dir_;
};

TEST_F(ProfilerTest, TraceHasEveryDispatchedOpWithItsDeviceDtypesShapesAndResolution) {
  const std::string path = dir_.path() + "/trace.json";
  Tensor a = tessera::tensor(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = tessera::tensor(std::vector<float>{6, 5, 4, 3, 2, 1}, {2, 3});
  const Device mhd("my_hardware_device:0");
  Tensor ma = a.to(mhd), mb = b.to(mhd);
  Tensor w = tessera::tensor(std::vector<float>{1, 0, 0, 1, 1, 1}, {2, 3});

  tessera::profiler_enable(path);
  ASSERT_TRUE(tessera::profiler_enabled());
  Tensor c = tessera::add(a, b);
  Tensor mc = tessera::add(ma, mb);            // a kernel of the accelerator
  Tensor me = tessera::exp(ma);                // no kernel there: the CPU fallback
  Tensor ml = tessera::linear(ma, w.to(mhd));  // no kernel there, a composite
  EXPECT_THROW(tessera::add(a, tessera::ones({4})), tessera::Error);
  tessera::profiler_flush();

  // The results are right (the profiler changes nothing): 1+6 = 7 everywhere.
  Tensor mc_host = mc.to(Device("cpu")).contiguous();
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(c.contiguous().data_ptr<float>()[i], 7.0f);
    EXPECT_EQ(mc_host.data_ptr<float>()[i], 7.0f);
  }

  json trace = read_trace(path);
  ASSERT_TRUE(trace.contains("traceEvents") && trace["traceEvents"].is_array()) << trace.dump();

  auto cpu_add = events_of(trace, "add.Tensor", "cpu");
  ASSERT_EQ(cpu_add.size(), 2u) << trace.dump(1);  // the good call and the failing one
  const json& e = cpu_add[0];
  EXPECT_EQ(e["args"]["op"], "add.Tensor");
  EXPECT_EQ(e["args"]["resolution"], "kernel");
  EXPECT_EQ(e["args"]["dtypes"], json({"float32", "float32"}));
  EXPECT_EQ(e["args"]["shapes"], json::parse("[[2,3],[2,3]]"));
  EXPECT_EQ(e["args"]["output_dtypes"], json({"float32"}));
  EXPECT_EQ(e["args"]["output_shapes"], json::parse("[[2,3]]"));
  EXPECT_EQ(e["pid"].get<int>(), int(::getpid()));
  EXPECT_TRUE(e["tid"].is_number_integer());
  EXPECT_TRUE(e["ts"].is_number());
  EXPECT_GE(e["dur"].get<double>(), 0.0);
  EXPECT_EQ(cpu_add[1]["args"]["resolution"], "error");
  EXPECT_NE(cpu_add[1]["args"].value("error", "").find("add"), std::string::npos) << cpu_add[1].dump();
  EXPECT_EQ(cpu_add[1]["args"]["shapes"], json::parse("[[2,3],[4]]"));

  auto mhd_add = events_of(trace, "add.Tensor", "my_hardware_device:0");
  ASSERT_GE(mhd_add.size(), 1u) << trace.dump(1);
  EXPECT_EQ(mhd_add[0]["args"]["resolution"], "kernel");
  EXPECT_EQ(mhd_add[0]["args"]["shapes"], json::parse("[[2,3],[2,3]]"));

  auto mhd_exp = events_of(trace, "exp", "my_hardware_device:0");
  ASSERT_EQ(mhd_exp.size(), 1u) << trace.dump(1);
  EXPECT_EQ(mhd_exp[0]["args"]["resolution"], "fallback");
  // The fallback's CPU run is an event of its own, inside the outer one's span.
  auto cpu_exp = events_of(trace, "exp", "cpu");
  ASSERT_EQ(cpu_exp.size(), 1u) << trace.dump(1);
  EXPECT_EQ(cpu_exp[0]["args"]["resolution"], "kernel");
  EXPECT_GE(cpu_exp[0]["ts"].get<double>(), mhd_exp[0]["ts"].get<double>());
  EXPECT_LE(cpu_exp[0]["ts"].get<double>() + cpu_exp[0]["dur"].get<double>(),
            mhd_exp[0]["ts"].get<double>() + mhd_exp[0]["dur"].get<double>() + 1e-3);

  auto mhd_linear = events_of(trace, "linear", "my_hardware_device:0");
  ASSERT_EQ(mhd_linear.size(), 1u) << trace.dump(1);
  EXPECT_EQ(mhd_linear[0]["args"]["resolution"], "composite");
  EXPECT_EQ(mhd_linear[0]["args"]["output_shapes"], json::parse("[[2,2]]"));
}

TEST_F(ProfilerTest, SummaryCountsCallsPerOpAndDevice) {
  tessera::profiler_enable("summary");
  Tensor a = tessera::tensor(std::vector<float>{1, 2, 3}, {3});
  for (int i = 0; i < 3; ++i) a = tessera::mul(a, a);
  Tensor r = tessera::relu(a);
  const std::string s = tessera::profiler_summary();
  auto row_of = [&](const std::string& op) {
    std::istringstream in(s);
    for (std::string line; std::getline(in, line);)
      if (line.rfind(op + " ", 0) == 0) return line;
    return std::string();
  };
  std::istringstream mul_row(row_of("mul.Tensor"));
  std::string op, device, resolution;
  long calls = 0;
  mul_row >> op >> device >> resolution >> calls;
  EXPECT_EQ(device, "cpu") << s;
  EXPECT_EQ(resolution, "kernel") << s;
  EXPECT_EQ(calls, 3) << s;
  std::istringstream relu_row(row_of("relu"));
  relu_row >> op >> device >> resolution >> calls;
  EXPECT_EQ(calls, 1) << s;
}

TEST_F(ProfilerTest, AnUnwritableTracePathIsAClearError) {
  tessera::profiler_enable(dir_.path() + "/no/such/folder/trace.json");
  tessera::add(tessera::ones({2}), tessera::ones({2}));
  try {
    tessera::profiler_flush();
    ADD_FAILURE() << "expected an error";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no/such/folder/trace.json"), std::string::npos) << e.what();
  }
  EXPECT_THROW(tessera::profiler_enable("a.json,b.json"), tessera::Error);
}

TEST_F(ProfilerTest, ShutdownPluginsWritesTheTrace) {
  const std::string path = dir_.path() + "/shutdown.json";
  tessera::profiler_enable(path);
  Tensor r = tessera::relu(tessera::tensor(std::vector<float>{-1, 2}, {2}).to(Device("my_hardware_device:0")));
  r = Tensor();
  tessera::shutdown_plugins();
  json trace = read_trace(path);
  auto relu = events_of(trace, "relu", "my_hardware_device:0");
  ASSERT_EQ(relu.size(), 1u) << trace.dump(1);
  EXPECT_EQ(relu[0]["args"]["resolution"], "kernel");
}

// TESSERA_PROFILE in a fresh process: the trace is written at exit and the summary goes to stderr.
TEST_F(ProfilerTest, EnvironmentVariableWritesTraceAndSummaryAtExit) {
  const std::string path = dir_.path() + "/cli.json";
  const std::string cmd = "TESSERA_PROFILE='" + path + ",summary' '" TESSERA_CLI
                          "' check --device cpu --ops 'relu' --dtypes float32 --no-strided --seed 1 2>&1 >/dev/null";
  FILE* f = popen(cmd.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string err;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), f)) > 0;) err.append(buf, n);
  const int st = pclose(f);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << err;
  EXPECT_NE(err.find("tessera profile"), std::string::npos) << err;
  EXPECT_NE(err.find("relu"), std::string::npos) << err;
  json trace = read_trace(path);
  ASSERT_FALSE(events_of(trace, "relu", "cpu").empty()) << trace.dump(1);
  EXPECT_EQ(events_of(trace, "relu", "cpu")[0]["args"]["dtypes"], json({"float32"}));
}

}  // namespace
