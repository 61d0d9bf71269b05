// The accelerator's compiler plugin (my_hardware_device_compiler): tessera::compile with it as the
// backend on accelerator inputs equals a reference computed in double on the host, each chain of
// elementwise ops is one launch of the device ("fused_launches" in its properties), and the
// driver interface it uses (include/my_hardware_device/fused.h) refuses bad programs and buffers.
// Built out of tree against the installed runtime, and in the main tree by tests/compiler.
#include <dlfcn.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <my_hardware_device/fused.h>
#include <tessera/compiler/compile.h>
#include <tessera/compiler/compiled_program.h>
#include <tessera/compiler/export.h>
#include <tessera/plugin_loader.h>
#include <tessera/sdk_graph.hpp>
#include <tessera/stream.h>
#include <tessera/tessera.h>

namespace {

using tessera::CompiledFunction;
using tessera::CompiledProgram;
using tessera::CompileOptions;
using tessera::Device;
using tessera::Tensor;

constexpr const char* kCompiler = "my_hardware_device_compiler";

// The device's properties entry `key` (a number), through the runtime as `tessera devices` reads it.
int64_t device_counter(const std::string& key, const std::string& device = "my_hardware_device:0") {
  for (const tessera::DeviceInfo& d : tessera::devices()) {
    if (d.name != device) continue;
    const std::string quoted = "\"" + key + "\": ";
    const size_t pos = d.properties.find(quoted);
    return pos == std::string::npos ? -1 : std::stoll(d.properties.substr(pos + quoted.size()));
  }
  return -1;
}
int64_t fused_launches() { return device_counter("fused_launches"); }

CompileOptions with_compiler() {
  CompileOptions o;
  o.backend = kCompiler;
  return o;
}

std::vector<double> host_values(const Tensor& t) {
  Tensor c = t.to(Device("cpu")).to(tessera::DType::Float64).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

void expect_close(const Tensor& got, const std::vector<double>& want, const std::string& what) {
  const std::vector<double> g = host_values(got);
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << what << " at " << i;
}

double sigmoid(double v) { return 1 / (1 + std::exp(-v)); }

// Two chains around a matmul: h = sigmoid(x * y + 0.5); g = h @ w; out = tanh(g) * 2 - g.
struct TwoChains {
  Tensor w = tessera::randn({8, 6});
  tessera::ExportFn fn = [this](const std::vector<Tensor>& in) {
    Tensor h = tessera::sigmoid(in[0] * in[1] + 0.5);
    Tensor g = tessera::matmul(h, w.to(in[0].device()));
    return std::vector<Tensor>{tessera::tanh(g) * 2.0 - g, h};
  };
  // The same in double on the host, with naive loops.
  std::vector<std::vector<double>> reference(const Tensor& x, const Tensor& y) const {
    const std::vector<double> xv = host_values(x), yv = host_values(y), wv = host_values(w);
    const int64_t rows = x.size(0);
    std::vector<double> h(size_t(rows * 8)), out(size_t(rows * 6));
    for (size_t i = 0; i < h.size(); ++i) h[i] = sigmoid(xv[i] * yv[i] + 0.5);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < 6; ++c) {
        double g = 0;
        for (int64_t k = 0; k < 8; ++k) g += h[size_t(r * 8 + k)] * wv[size_t(k * 6 + c)];
        out[size_t(r * 6 + c)] = std::tanh(g) * 2 - g;
      }
    return {out, h};
  }
};

TEST(MyHardwareDeviceCompiler, LoadsAsACompilerPluginForTheDevice) {
  bool found = false;
  for (const tessera::PluginInfo& p : tessera::plugins()) {
    if (p.name != kCompiler || p.status == tessera::PluginStatus::Shadowed) continue;
    found = true;
    EXPECT_EQ(p.kind, tessera::PluginKind::Compiler);
    EXPECT_EQ(p.device_name, "my_hardware_device");
    EXPECT_NE(p.status, tessera::PluginStatus::Failed) << p.reason;
  }
  EXPECT_TRUE(found);
}

TEST(MyHardwareDeviceCompiler, EachChainIsOneLaunchAndResultsMatchTheReference) {
  TwoChains c;
  CompiledFunction f = tessera::compile(c.fn, with_compiler());
  const Device dev("my_hardware_device");
  for (int64_t b : {3, 5, 7, 9}) {
    const Tensor x = tessera::randn({b, 8}), y = tessera::randn({b, 8});
    const std::vector<Tensor> in{x.to(dev), y.to(dev)};
    const int64_t before = fused_launches(), adds = device_counter("add.Tensor"),
                  muls = device_counter("mul.Tensor");
    const std::vector<Tensor> got = f(in);
    ASSERT_EQ(got.size(), 2u);
    const std::vector<std::vector<double>> want = c.reference(x, y);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(got[i].device().str(), "my_hardware_device:0");
      expect_close(got[i], want[i], "batch " + std::to_string(b) + " output " + std::to_string(i));
    }
    EXPECT_EQ(fused_launches() - before, 2) << "batch " << b << ": one launch per chain";
    // The chains' ops ran inside the launches, not as kernels of their own.
    EXPECT_EQ(device_counter("add.Tensor"), adds);
    EXPECT_EQ(device_counter("mul.Tensor"), muls);
    // Eager mode on the device agrees as well.
    const std::vector<Tensor> eager = c.fn(in);
    for (size_t i = 0; i < 2; ++i)
      expect_close(got[i], host_values(eager[i]), "eager, batch " + std::to_string(b));
  }
  EXPECT_EQ(f.stats().compiles, 2) << "static, then the batch dimension dynamic";
  for (const auto& a : f.artifacts()) {
    EXPECT_EQ(a.backend, kCompiler);
    EXPECT_EQ(a.partitions, 2u) << "the matmul between the chains splits them";
    EXPECT_EQ(a.compatibility, "mhd-compiler 1.4 mhd-isa1") << "the artifact carries the compiler's string";
  }
}

TEST(MyHardwareDeviceCompiler, OneChainOnANonDefaultStreamAndAnotherDevice) {
  // relu(x * y - x / (y * y + 1)) - neg(exp(y * 0.25)): one chain, one launch.
  auto fn = [](const std::vector<Tensor>& in) {
    const Tensor& x = in[0];
    const Tensor& y = in[1];
    return std::vector<Tensor>{tessera::relu(x * y - x / (y * y + 1.0)) -
                               tessera::neg(tessera::exp(y * 0.25))};
  };
  CompiledFunction f = tessera::compile(fn, with_compiler());
  const Device dev("my_hardware_device:1");
  const Tensor x = tessera::randn({4, 5, 3}), y = tessera::randn({4, 5, 3});
  const int64_t before = device_counter("fused_launches", "my_hardware_device:1");
  tessera::Stream stream = tessera::Stream::create(dev);
  std::vector<Tensor> got;
  {
    tessera::StreamGuard guard(stream);
    got = f({x.to(dev), y.to(dev)});
    stream.synchronize();
  }
  EXPECT_EQ(device_counter("fused_launches", "my_hardware_device:1") - before, 1);
  EXPECT_EQ(f.artifacts().at(0).partitions, 1u);
  const std::vector<double> xv = host_values(x), yv = host_values(y);
  std::vector<double> want(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) {
    const double v = xv[i] * yv[i] - xv[i] / (yv[i] * yv[i] + 1);
    want[i] = (v > 0 ? v : 0) + std::exp(yv[i] * 0.25);
  }
  EXPECT_EQ(got.at(0).device().str(), "my_hardware_device:1");
  expect_close(got.at(0), want, "one chain");
}

// Graphs of elementwise chains broken by broadcasts and reductions: the compiled function on the
// device against the same function run eagerly on the CPU in float64, and one launch per chain.
TEST(MyHardwareDeviceCompiler, EveryGraphMatchesFloat64OnTheCpuWithOneLaunchPerChain) {
  const Tensor bias = tessera::randn({8});
  struct Case {
    const char* name;
    int64_t chains;
    tessera::ExportFn fn;
  };
  const std::vector<Case> cases = {
      {"alpha, scalars and division: one chain", 1,
       [](const std::vector<Tensor>& in) {
         const Tensor t = tessera::sub(tessera::add(in[0], in[1], 0.5), in[0] * in[1], 2.0);
         return std::vector<Tensor>{tessera::neg(t) / (in[1] * in[1] + 2.0)};
       }},
      {"a broadcast add between two chains", 2,
       [&bias](const std::vector<Tensor>& in) {
         const Tensor g = tessera::relu(in[0] * in[1]) + bias.to(in[0].device()).to(in[0].dtype());
         return std::vector<Tensor>{tessera::tanh(g) * 2.0, g};
       }},
      {"a row sum and a broadcast division between two chains", 2,
       [](const std::vector<Tensor>& in) {
         const Tensor e = tessera::exp(in[0]) + in[1] * in[1];  // positive: the sum is far from 0
         const Tensor s = tessera::sum(e, {-1}, true);
         return std::vector<Tensor>{tessera::sigmoid(e / s), s};
       }},
  };
  const Device dev("my_hardware_device");
  for (const Case& c : cases) {
    CompiledFunction f = tessera::compile(c.fn, with_compiler());
    for (int64_t b : {3, 6}) {
      const Tensor x = tessera::randn({b, 8}), y = tessera::randn({b, 8});
      const int64_t before = fused_launches();
      const std::vector<Tensor> got = f({x.to(dev), y.to(dev)});
      EXPECT_EQ(fused_launches() - before, c.chains) << c.name << ", batch " << b;
      const std::vector<Tensor> want = c.fn({x.to(tessera::DType::Float64), y.to(tessera::DType::Float64)});
      ASSERT_EQ(got.size(), want.size()) << c.name;
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].device().str(), "my_hardware_device:0") << c.name;
        expect_close(got[i], host_values(want[i]), std::string(c.name) + ", batch " + std::to_string(b));
      }
    }
    for (const auto& a : f.artifacts()) EXPECT_EQ(a.partitions, size_t(c.chains)) << c.name;
  }
}

// Note [Compiled artifact compatibility] with the accelerator's compiler (Note [Accelerator
// compatibility string]): MHD_COMPILER_COMPATIBILITY, the plugin's documented test hook, makes it
// report another compiler version or ISA, as an updated plugin or another machine would.
class CompiledCompatibility : public ::testing::Test {
 protected:
  using Compatibility = tessera::compiler::Compatibility;
  void SetUp() override {
    unsetenv("MHD_COMPILER_COMPATIBILITY");
    fn_ = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{tessera::sigmoid(in[0] * in[1] + 0.5) - in[0]}; };
    x_ = tessera::randn({4, 8});
    y_ = tessera::randn({4, 8});
    const std::vector<Tensor> in{x_.to(dev_), y_.to(dev_)};
    CompiledProgram::compile(tessera::export_program(fn_, in), kCompiler, dev_).save(path_);
  }
  void TearDown() override {
    unsetenv("MHD_COMPILER_COMPATIBILITY");
    std::remove(path_.c_str());
  }
  // Runs `cp` and checks it against float64 on the host, with one fused launch.
  void expect_runs(const CompiledProgram& cp) {
    const int64_t before = fused_launches();
    const std::vector<Tensor> got = cp({x_.to(dev_), y_.to(dev_)});
    EXPECT_EQ(fused_launches() - before, 1);
    const std::vector<double> xv = host_values(x_), yv = host_values(y_);
    std::vector<double> want(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) want[i] = sigmoid(xv[i] * yv[i] + 0.5) - xv[i];
    ASSERT_EQ(got.size(), 1u);
    expect_close(got[0], want, "compiled program");
  }
  tessera::ExportFn fn_;
  Tensor x_, y_;
  const Device dev_{"my_hardware_device:0"};
  const std::string path_ = ::testing::TempDir() + "mhd_compiled_" + std::to_string(getpid()) + ".tsr";
};

// The SDK's scheme the sample's compiler uses (Note [Versioned compatibility strings]), verdicts
// worked out by hand from its rule.
TEST(VersionedCompatibility, JudgesByNameIsaMajorAndMinor) {
  using tessera::sdk::VersionedCompatibility;
  const VersionedCompatibility now{"mhd-compiler", 1, 4, "mhd-isa1"};
  EXPECT_EQ(now.str(), "mhd-compiler 1.4 mhd-isa1");
  const auto parsed = VersionedCompatibility::parse("x-comp 2.10 sm90");
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->name, "x-comp");
  EXPECT_EQ(parsed->major, 2);
  EXPECT_EQ(parsed->minor, 10);
  EXPECT_EQ(parsed->isa, "sm90");
  for (const char* bad : {"", "mhd-compiler", "mhd-compiler 1 mhd-isa1", "mhd-compiler 1.4", "mhd-compiler 1.4 mhd-isa1 extra"})
    EXPECT_FALSE(VersionedCompatibility::parse(bad).has_value()) << bad;
  EXPECT_EQ(now.judge("mhd-compiler 1.4 mhd-isa1"), TESSERA_COMPATIBILITY_OPTIMAL);
  EXPECT_EQ(now.judge("mhd-compiler 1.3 mhd-isa1"), TESSERA_COMPATIBILITY_PREFER_RECOMPILE);
  EXPECT_EQ(now.judge("mhd-compiler 1.5 mhd-isa1"), TESSERA_COMPATIBILITY_UNSUPPORTED);  // newer minor
  EXPECT_EQ(now.judge("mhd-compiler 0.4 mhd-isa1"), TESSERA_COMPATIBILITY_UNSUPPORTED);  // another major
  EXPECT_EQ(now.judge("mhd-compiler 1.4 mhd-isa2"), TESSERA_COMPATIBILITY_UNSUPPORTED);  // another ISA
  EXPECT_EQ(now.judge("other-compiler 1.4 mhd-isa1"), TESSERA_COMPATIBILITY_UNSUPPORTED);
  EXPECT_EQ(now.judge("garbage"), TESSERA_COMPATIBILITY_UNSUPPORTED);
}

TEST_F(CompiledCompatibility, TheArtifactCarriesTheCompilersStringAndLoadsAsItIs) {
  EXPECT_EQ(tessera::compiler::compatibility_info(kCompiler, dev_), "mhd-compiler 1.4 mhd-isa1");
  EXPECT_EQ(tessera::compiler::compatibility_info(kCompiler, Device("cpu")), "") << "serves the accelerator only";
  CompiledProgram cp = CompiledProgram::load(path_);
  EXPECT_EQ(cp.program().compiled->backend, kCompiler);
  EXPECT_EQ(cp.program().compiled->device, "my_hardware_device:0");
  EXPECT_EQ(cp.program().compiled->compatibility, "mhd-compiler 1.4 mhd-isa1");
  EXPECT_EQ(cp.verdict(), Compatibility::Optimal);
  EXPECT_EQ(cp.recompile_reason(), "");
  EXPECT_EQ(cp.partitions(), 1u);
  expect_runs(cp);
}

TEST_F(CompiledCompatibility, ANewerCompilerPrefersARecompileAndRecompilesWithAWarning) {
  setenv("MHD_COMPILER_COMPATIBILITY", "mhd-compiler 1.5 mhd-isa1", 1);
  ::testing::internal::CaptureStderr();
  CompiledProgram cp = CompiledProgram::load(path_);
  const std::string warning = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(cp.verdict(), Compatibility::PreferRecompile);
  for (const std::string& part : {std::string("prefer_recompile"), std::string("\"mhd-compiler 1.4 mhd-isa1\""),
                                  std::string("\"mhd-compiler 1.5 mhd-isa1\""), std::string("recompiling")})
    EXPECT_NE(warning.find(part), std::string::npos) << warning;
  EXPECT_NE(cp.recompile_reason().find("prefer_recompile"), std::string::npos);
  EXPECT_EQ(cp.program().compiled->compatibility, "mhd-compiler 1.5 mhd-isa1") << "stamped by the new compiler";
  expect_runs(cp);
  // Not allowed to recompile: a prefer-recompile artifact still runs, as it is, with a warning.
  tessera::compiler::LoadCompiledOptions no_recompile;
  no_recompile.allow_recompile = false;
  ::testing::internal::CaptureStderr();
  CompiledProgram as_is = CompiledProgram::load(path_, no_recompile);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("running it as it is"), std::string::npos);
  EXPECT_EQ(as_is.verdict(), Compatibility::PreferRecompile);
  EXPECT_EQ(as_is.recompile_reason(), "");
  EXPECT_EQ(as_is.program().compiled->compatibility, "mhd-compiler 1.4 mhd-isa1");
  expect_runs(as_is);
}

TEST_F(CompiledCompatibility, AnotherIsaIsUnsupported_RecompiledOrRefusedWithTheReason) {
  setenv("MHD_COMPILER_COMPATIBILITY", "mhd-compiler 1.4 mhd-isa2", 1);
  EXPECT_EQ(tessera::compiler::validate_compatibility(kCompiler, dev_, "mhd-compiler 1.4 mhd-isa1"),
            Compatibility::Unsupported);
  EXPECT_EQ(tessera::compiler::validate_compatibility(kCompiler, dev_, "mhd-compiler 1.4 mhd-isa2"),
            Compatibility::Optimal);
  EXPECT_EQ(tessera::compiler::validate_compatibility(kCompiler, dev_, "not a compatibility string"),
            Compatibility::Unsupported);
  ::testing::internal::CaptureStderr();
  CompiledProgram cp = CompiledProgram::load(path_);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("unsupported"), std::string::npos);
  EXPECT_EQ(cp.verdict(), Compatibility::Unsupported);
  EXPECT_EQ(cp.program().compiled->compatibility, "mhd-compiler 1.4 mhd-isa2");
  expect_runs(cp);

  tessera::compiler::LoadCompiledOptions no_recompile;
  no_recompile.allow_recompile = false;
  try {
    CompiledProgram::load(path_, no_recompile);
    ADD_FAILURE() << "an unsupported artifact was loaded without recompiling";
  } catch (const tessera::Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.code(), tessera::ErrorCode::Unavailable);
    for (const char* part : {"refused", "unsupported", kCompiler, "\"mhd-compiler 1.4 mhd-isa1\"",
                             "\"mhd-compiler 1.4 mhd-isa2\"", "allow_recompile"})
      EXPECT_NE(m.find(part), std::string::npos) << part << " in: " << m;
  }
  // Saved again by the new compiler, the artifact is optimal for it.
  cp.save(path_);
  EXPECT_EQ(CompiledProgram::load(path_, no_recompile).verdict(), Compatibility::Optimal);
}

TEST(MyHardwareDeviceCompiler, TakesNothingOnTheCpuOrInFloat64) {
  TwoChains c;
  CompiledFunction f = tessera::compile(c.fn, with_compiler());
  const Tensor x = tessera::randn({4, 8}), y = tessera::randn({4, 8});
  const int64_t before = fused_launches();
  const std::vector<Tensor> got = f({x, y});
  const std::vector<std::vector<double>> want = c.reference(x, y);
  for (size_t i = 0; i < 2; ++i) expect_close(got[i], want[i], "cpu");
  EXPECT_TRUE(got[0].device().is_cpu());
  EXPECT_EQ(f.artifacts().at(0).partitions, 0u);

  auto twice = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * in[0] + in[0]}; };
  CompiledFunction g = tessera::compile(twice, with_compiler());
  const Tensor d = tessera::randn({6}, tessera::TensorOptions().dtype(tessera::DType::Float64));
  const std::vector<Tensor> out = g({d.to(Device("my_hardware_device"))});
  EXPECT_EQ(g.artifacts().at(0).partitions, 0u) << "float64 runs through the device's kernels";
  std::vector<double> want_d = host_values(d);
  for (double& v : want_d) v = v * v + v;
  expect_close(out.at(0), want_d, "float64");
  EXPECT_EQ(fused_launches(), before);
}

TEST(MyHardwareDeviceCompiler, ABadCallGetsTheOpsErrorAndTheFunctionKeepsWorking) {
  auto fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{tessera::sigmoid(in[0] + in[1])};
  };
  CompiledFunction f = tessera::compile(fn, with_compiler());
  const Device dev("my_hardware_device");
  try {
    f({tessera::randn({4, 8}).to(dev), tessera::randn({4, 7}).to(dev)});
    ADD_FAILURE() << "shapes that do not broadcast were accepted";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find("add"), std::string::npos) << e.what();
  }
  const Tensor x = tessera::randn({4, 8}), y = tessera::randn({4, 8});
  const std::vector<Tensor> got = f({x.to(dev), y.to(dev)});
  const std::vector<double> xv = host_values(x), yv = host_values(y);
  std::vector<double> want(xv.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = sigmoid(xv[i] + yv[i]);
  expect_close(got.at(0), want, "after the bad call");
}

// The driver interface as the compiler plugin sees it, reached in the library the runtime loaded.
class FusedDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    device_tensor_ = tessera::randn({4}).to(Device("my_hardware_device"));  // loads the backend
    for (const tessera::PluginInfo& p : tessera::plugins())
      if (p.name == "my_hardware_device" && p.status == tessera::PluginStatus::Loaded) library_ = p.library;
    ASSERT_FALSE(library_.empty());
    handle_ = dlopen(library_.c_str(), RTLD_NOW | RTLD_NOLOAD);
    ASSERT_NE(handle_, nullptr) << "the runtime has not loaded " << library_;
    launch_ = reinterpret_cast<decltype(&mhd_fused_launch)>(dlsym(handle_, "mhd_fused_launch"));
    count_ = reinterpret_cast<decltype(&mhd_fused_launch_count)>(dlsym(handle_, "mhd_fused_launch_count"));
    ASSERT_NE(launch_, nullptr);
    ASSERT_NE(count_, nullptr);
  }
  void TearDown() override {
    if (handle_) dlclose(handle_);
  }
  // Launches `program` over `device_tensor_` as its one input and one output; "" when accepted.
  std::string launch(const mhd_fused_program_t& program, int64_t numel, uint64_t offset = 0, int device = 0) {
    mhd_fused_buffer_t buf{device_tensor_.storage()->data(), offset};
    char error[256] = "";
    return launch_(device, nullptr, &program, &buf, &buf, numel, error, sizeof error) == 0 ? "" : error;
  }
  Tensor device_tensor_;
  std::string library_;
  void* handle_ = nullptr;
  decltype(&mhd_fused_launch) launch_ = nullptr;
  decltype(&mhd_fused_launch_count) count_ = nullptr;
};

TEST_F(FusedDriver, OneLaunchComputesTheProgramInPlace) {
  const std::vector<double> before = host_values(device_tensor_);
  const mhd_fused_step_t steps[] = {{MHD_FUSED_MUL, 0, 0, 0, 0, 1}, {MHD_FUSED_SUB, 1, -1, 0, 3.0f, 2.0f}};
  const int32_t out = 2;
  const mhd_fused_program_t p{sizeof(mhd_fused_program_t), 1, 2, 1, steps, &out};
  const int64_t launches = count_(0);
  EXPECT_EQ(launch(p, 4), "");
  EXPECT_EQ(count_(0), launches + 1);
  std::vector<double> want(before);
  for (double& v : want) v = double(float(float(v * v) - 6.0f));
  expect_close(device_tensor_, want, "x * x - 2 * 3");
}

TEST_F(FusedDriver, RefusesBadProgramsAndBuffers) {
  const int32_t out = 1;
  mhd_fused_step_t step{MHD_FUSED_ADD, 0, 1, 0, 0, 1};  // reads register 1 before it is written
  mhd_fused_program_t p{sizeof(mhd_fused_program_t), 1, 1, 1, &step, &out};
  const int64_t launches = count_(0);
  EXPECT_NE(launch(p, 4).find("step 0 reads register 1"), std::string::npos) << launch(p, 4);
  step = {MHD_FUSED_NUM_OPS, 0, 0, 0, 0, 1};
  EXPECT_NE(launch(p, 4).find("unknown op"), std::string::npos) << launch(p, 4);
  step = {MHD_FUSED_RELU, 0, -1, 0, 0, 1};
  EXPECT_NE(launch(p, 5).find("overrun its buffer of 16 bytes"), std::string::npos) << launch(p, 5);
  EXPECT_NE(launch(p, 1, UINT64_MAX - 2).find("overflow"), std::string::npos) << launch(p, 1, UINT64_MAX - 2);
  EXPECT_NE(launch(p, -1).find("numel is -1"), std::string::npos) << launch(p, -1);
  EXPECT_NE(launch(p, 4, 0, 1).find("does not live on device 1"), std::string::npos) << launch(p, 4, 0, 1);
  EXPECT_NE(launch(p, 4, 0, 7).find("out of range"), std::string::npos) << launch(p, 4, 0, 7);
  p.struct_size = 8;
  EXPECT_NE(launch(p, 4).find("struct_size"), std::string::npos) << launch(p, 4);
  EXPECT_EQ(count_(0), launches) << "nothing refused was launched";
  EXPECT_EQ(count_(7), -1);
}

}  // namespace
