// Device spans from plugins in the profile (Note [Plugin spans] in tessera/plugin_abi.h), with the real
// plugins loaded by the real loader: the reference accelerator's kernel and copy spans and its
// compiler plugin's partition spans in a Chrome trace written to a file, linked to their host ops by
// correlation id; nothing recorded while profiling is off; a plugin built from the 1.0 header (which
// knows no span slot) under the profiler; a plain-C plugin's spans, bad spans refused, and the SDK's
// ScopedSpan against the runtime's table and against one cut to the 1.2 size.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loader_test_util.h"
#include "tessera/compiler/compile.h"
#include "tessera/dispatcher.h"
#include "tessera/plugin_loader.h"
#include "tessera/profiler.h"
#include "tessera/sdk.hpp"
#include "tessera/tessera.h"

namespace {

using json = nlohmann::json;
using tessera::Device;
using tessera::Tensor;

// The complete ("X") events of category `cat` named `name`.
std::vector<json> complete_events(const json& trace, const std::string& cat, const std::string& name) {
  std::vector<json> out;
  for (const json& e : trace["traceEvents"])
    if (e.value("ph", "") == "X" && e.value("cat", "") == cat && e.value("name", "") == name)
      out.push_back(e);
  return out;
}

// The name of track `tid` (its thread_name record), "" when it has none.
std::string track_name(const json& trace, int tid) {
  for (const json& e : trace["traceEvents"])
    if (e.value("ph", "") == "M" && e.value("name", "") == "thread_name" && e.value("tid", -1) == tid)
      return e["args"].value("name", "");
  return {};
}

// The host event (an op or a range) whose args.correlation is `id`; null when none.
json host_event_of(const json& trace, uint64_t id) {
  for (const json& e : trace["traceEvents"])
    if (e.value("ph", "") == "X" && e.contains("args") && e["args"].value("correlation", uint64_t(0)) == id &&
        !e["args"].contains("plugin"))
      return e;
  return nullptr;
}

// True when a flow arrow starts at `host` and ends at `span` (an "s" and an "f" of one id).
bool linked_by_flow(const json& trace, const json& host, const json& span) {
  std::map<uint64_t, json> starts;
  for (const json& e : trace["traceEvents"])
    if (e.value("ph", "") == "s" && e["tid"] == host["tid"] && e["ts"] == host["ts"]) starts[e["id"]] = e;
  for (const json& e : trace["traceEvents"])
    if (e.value("ph", "") == "f" && e["tid"] == span["tid"] && e["ts"] == span["ts"] && starts.count(e["id"]))
      return true;
  return false;
}

std::vector<float> to_host(const Tensor& t) {
  Tensor c = t.to(Device("cpu")).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

class ProfilerSpans : public ::testing::Test {
 protected:
  void SetUp() override {
    tessera::profiler_enable("");
    tessera::profiler_clear();
  }
  void TearDown() override {
    tessera::profiler_enable("");
    tessera::profiler_clear();
  }
  lt::TempDir dir_;
};

TEST_F(ProfilerSpans, AcceleratorKernelAndCopySpansCarryTheirHostOpsCorrelation) {
  const std::string path = dir_.path() + "/trace.json";
  const Device mhd("my_hardware_device:0");
  const std::vector<float> values{1, -2, 3, -4, 5, -6};
  tessera::profiler_enable(path);
  Tensor x = tessera::tensor(values, {2, 3}).to(mhd);  // a copy host to device
  Tensor y = tessera::relu(tessera::add(x, x));        // two kernels
  const std::vector<float> got = to_host(y);           // a copy device to host (waits for the queue)
  tessera::profiler_flush();
  EXPECT_EQ(got, (std::vector<float>{2, 0, 6, 0, 10, 0}));  // max(2v, 0), by hand

  const json trace = lt::read_json_file(path);
  ASSERT_TRUE(trace.contains("traceEvents")) << "not a trace: " << path;
  // Each kernel: a span of category "kernel" on the device's default-stream track of the plugin,
  // correlated with the host op that launched it, starting after it started.
  for (const std::string op : {"add.Tensor", "relu"}) {
    const std::vector<json> spans = complete_events(trace, "kernel", op);
    ASSERT_EQ(spans.size(), 1u) << op << "\n" << trace.dump(1);
    const json& span = spans[0];
    EXPECT_EQ(span["args"]["plugin"], "my_hardware_device");
    EXPECT_EQ(span["args"]["device"], "my_hardware_device:0");
    EXPECT_EQ(span["args"]["stream"], 0);
    EXPECT_EQ(track_name(trace, span["tid"]), "my_hardware_device:0 stream 0 [my_hardware_device]");
    const uint64_t id = span["args"].value("correlation", uint64_t(0));
    ASSERT_NE(id, 0u) << span.dump();
    const json host = host_event_of(trace, id);
    ASSERT_TRUE(host.is_object()) << "no host event with correlation " << id;
    EXPECT_EQ(host["cat"], "op");
    EXPECT_EQ(host["name"], op);
    EXPECT_EQ(host["args"]["device"], "my_hardware_device:0");
    EXPECT_GE(span["ts"].get<double>(), host["ts"].get<double>()) << "the kernel ran before its launch";
    EXPECT_GE(span["dur"].get<double>(), 0.0);
    EXPECT_TRUE(linked_by_flow(trace, host, span)) << "no flow arrow from " << op << " to its span";
  }
  EXPECT_NE(complete_events(trace, "kernel", "add.Tensor")[0]["args"]["correlation"],
            complete_events(trace, "kernel", "relu")[0]["args"]["correlation"]);
  // Each copy: a span with its byte count, correlated with the runtime's transfer range.
  for (const std::string name : {"copy host to device", "copy device to host"}) {
    const std::vector<json> spans = complete_events(trace, "copy", name);
    ASSERT_EQ(spans.size(), 1u) << name << "\n" << trace.dump(1);
    EXPECT_EQ(spans[0]["args"]["bytes"], 24);
    const json host = host_event_of(trace, spans[0]["args"].value("correlation", uint64_t(0)));
    ASSERT_TRUE(host.is_object()) << spans[0].dump();
    EXPECT_EQ(host["cat"], "transfer");
    EXPECT_EQ(host["name"], name);
    EXPECT_GE(spans[0]["ts"].get<double>(), host["ts"].get<double>());
  }
  // The device to host copy waits for its queue: its span lies within the host range.
  const json d2h = complete_events(trace, "copy", "copy device to host")[0];
  const json d2h_host = host_event_of(trace, d2h["args"]["correlation"]);
  EXPECT_LE(d2h["ts"].get<double>() + d2h["dur"].get<double>(),
            d2h_host["ts"].get<double>() + d2h_host["dur"].get<double>() + 1e-3);

  // The same spans through the C++ API, and in the summary.
  const std::vector<tessera::ProfilerSpan> listed = tessera::profiler_plugin_spans();
  int kernels = 0;
  for (const tessera::ProfilerSpan& s : listed)
    if (s.category == "kernel") {
      ++kernels;
      EXPECT_EQ(s.plugin, "my_hardware_device");
      EXPECT_NE(s.correlation_id, 0u);
      EXPECT_GE(s.end_ns, s.start_ns);
    }
  EXPECT_EQ(kernels, 2);
  const std::string summary = tessera::profiler_summary();
  EXPECT_NE(summary.find("plugin spans"), std::string::npos) << summary;
  EXPECT_NE(summary.find("copy host to device"), std::string::npos) << summary;
}

TEST_F(ProfilerSpans, NothingIsRecordedWhileProfilingIsOff) {
  const Device mhd("my_hardware_device:0");
  Tensor x = tessera::tensor(std::vector<float>{1, 2, 3}, {3}).to(mhd);
  EXPECT_EQ(to_host(tessera::add(x, x)), (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(tessera::profiler_correlation_id(), 0u);
  EXPECT_TRUE(tessera::profiler_plugin_spans().empty());
  EXPECT_EQ(tessera::profiler_summary().find("plugin spans"), std::string::npos);
  // The same work with profiling on does record (so the check above can fail).
  tessera::profiler_enable("summary");
  EXPECT_EQ(to_host(tessera::add(x, x)), (std::vector<float>{2, 4, 6}));
  EXPECT_FALSE(tessera::profiler_plugin_spans().empty());
}

TEST_F(ProfilerSpans, CompiledPartitionRunsHaveTheCompilersAndTheDevicesSpans) {
  const Device mhd("my_hardware_device:0");
  tessera::CompileOptions options;
  options.backend = "my_hardware_device_compiler";
  tessera::CompiledFunction f = tessera::compile(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{tessera::relu(in[0] * 2.0 + 1.0)}; },
      options);
  const std::vector<Tensor> in{tessera::tensor(std::vector<float>{-1, 0, 2, -3}, {4}).to(mhd)};
  ASSERT_EQ(to_host(f(in)[0]), (std::vector<float>{0, 1, 5, 0}));  // compiled, outside the profile
  const std::string path = dir_.path() + "/partition.json";
  tessera::profiler_enable(path);
  EXPECT_EQ(to_host(f(in)[0]), (std::vector<float>{0, 1, 5, 0}));  // relu(2v + 1), by hand
  tessera::profiler_flush();

  const json trace = lt::read_json_file(path);
  ASSERT_TRUE(trace.contains("traceEvents")) << "not a trace: " << path;
  const std::vector<json> ranges =
      complete_events(trace, "partition", "my_hardware_device_compiler partition 0");
  ASSERT_EQ(ranges.size(), 1u) << trace.dump(1);
  const uint64_t id = ranges[0]["args"].value("correlation", uint64_t(0));
  ASSERT_NE(id, 0u);
  EXPECT_EQ(ranges[0]["args"]["device"], "my_hardware_device:0");
  // The compiler plugin's span of its run, and the device's span of the one fused launch.
  const std::vector<json> runs = complete_events(trace, "partition", "fused partition");
  ASSERT_EQ(runs.size(), 1u) << trace.dump(1);
  EXPECT_EQ(runs[0]["args"]["plugin"], "my_hardware_device_compiler");
  EXPECT_EQ(runs[0]["args"]["correlation"], id);
  EXPECT_GE(runs[0]["ts"].get<double>(), ranges[0]["ts"].get<double>());
  EXPECT_LE(runs[0]["ts"].get<double>() + runs[0]["dur"].get<double>(),
            ranges[0]["ts"].get<double>() + ranges[0]["dur"].get<double>() + 1e-3);
  const std::vector<json> launches = complete_events(trace, "kernel", "fused program");
  ASSERT_EQ(launches.size(), 1u) << trace.dump(1);
  EXPECT_EQ(launches[0]["args"]["plugin"], "my_hardware_device");
  EXPECT_EQ(launches[0]["args"]["correlation"], id);
  EXPECT_GE(launches[0]["ts"].get<double>(), runs[0]["ts"].get<double>());
  EXPECT_TRUE(linked_by_flow(trace, ranges[0], launches[0]));
  EXPECT_NE(runs[0]["tid"], launches[0]["tid"]) << "one track per plugin";
}

// ---- plugins found through TESSERA_PLUGIN_PATH only (the build's own plugins are left out)

class ProfilerSpansTestPlugins : public ProfilerSpans {
 protected:
  void SetUp() override {
    ProfilerSpans::SetUp();
    tessera::shutdown_plugins();
    tessera::reset_privateuse_names_for_testing();
    setenv("TESSERA_PLUGIN_PATH", dir_.path().c_str(), 1);
    setenv("TESSERA_PLUGINS_SELECT", "lt_*,abi_*", 1);
  }
  void TearDown() override {
    tessera::shutdown_plugins();
    unsetenv("TESSERA_PLUGIN_PATH");
    unsetenv("TESSERA_PLUGINS_SELECT");
    tessera::reset_privateuse_names_for_testing();
    tessera::rediscover_plugins_for_testing();
    ProfilerSpans::TearDown();
  }
  void install(const std::string& name, const std::string& lib, int minor, const std::string& device) {
    lt::json m = lt::backend_manifest(name, lib, 1, device);
    m["abi"] = {{"major", 1}, {"minor", minor}};
    dir_.write_manifest(name, m);
    tessera::rediscover_plugins_for_testing();
  }
};

TEST_F(ProfilerSpansTestPlugins, APlainCPluginsSpanIsEscapedAndCorrelated) {
  install("lt_spans", LT_LIB_SPANS, TESSERA_ABI_MINOR, "lt_spandev");
  const std::string path = dir_.path() + "/c.json";
  Tensor t =
      tessera::empty({2, 3}, tessera::TensorOptions().device("lt_spandev:0").dtype(tessera::DType::Float32));
  tessera::profiler_enable(path);
  auto& dispatcher = tessera::Dispatcher::instance();
  dispatcher.call_boxed(dispatcher.op("lt_spans_mark_"), {t});
  tessera::profiler_flush();
  EXPECT_EQ(to_host(t), std::vector<float>(6, 1.0f));

  const json trace =
      lt::read_json_file(path);  // valid JSON despite the name's quote, control and non-UTF-8 bytes
  ASSERT_TRUE(trace.contains("traceEvents")) << "not a trace: " << path;
  const std::vector<json> spans = complete_events(trace, "kernel", "lt \"mark\"\\ \x01\xEF\xBF\xBD");
  ASSERT_EQ(spans.size(), 1u) << trace.dump(1);
  EXPECT_EQ(spans[0]["args"]["elements"], 6);
  EXPECT_EQ(spans[0]["args"]["device"], "lt_spandev:0");
  const json host = host_event_of(trace, spans[0]["args"].value("correlation", uint64_t(0)));
  ASSERT_TRUE(host.is_object()) << spans[0].dump();
  EXPECT_EQ(host["name"], "lt_spans_mark_");
  // The kernel ran inside its op here: the span lies within the host event.
  EXPECT_GE(spans[0]["ts"].get<double>(), host["ts"].get<double>());
  EXPECT_LE(spans[0]["ts"].get<double>() + spans[0]["dur"].get<double>(),
            host["ts"].get<double>() + host["dur"].get<double>() + 1e-3);
  // The summary escapes it for the terminal.
  const std::string summary = tessera::profiler_summary();
  EXPECT_NE(summary.find("lt \"mark\"\\ \\x01\\xff"), std::string::npos) << summary;
}

TEST_F(ProfilerSpansTestPlugins, BadSpansAreRefusedWithAReason) {
  install("lt_spans", LT_LIB_SPANS, TESSERA_ABI_MINOR, "lt_spandev");
  std::string why;
  ASSERT_TRUE(tessera::load_plugin("lt_spans", &why)) << why;
  tessera::profiler_enable("summary");
  EXPECT_EQ(lt::call_plugin_counter(LT_LIB_SPANS, "lt_spans_bad_arguments"), 0);
  // Only the one good span of the check was recorded.
  const auto spans = tessera::profiler_plugin_spans();
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].name, "good");
  EXPECT_EQ(spans[0].category, "device");
  EXPECT_EQ(spans[0].device, "lt_spandev:0");
  EXPECT_EQ(spans[0].end_ns - spans[0].start_ns, 10);
}

TEST_F(ProfilerSpansTestPlugins, SdkScopedSpanRecordsOnThisRuntimeAndNothingOnA_1_2_Table) {
  install("lt_spans", LT_LIB_SPANS, TESSERA_ABI_MINOR, "lt_spandev");
  std::string why;
  ASSERT_TRUE(tessera::load_plugin("lt_spans", &why)) << why;
  void* lib = dlopen(LT_LIB_SPANS, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr);
  auto host_of = reinterpret_cast<const tessera_host_api_t* (*)()>(dlsym(lib, "lt_spans_host_api"));
  ASSERT_NE(host_of, nullptr);
  const tessera_host_api_t* real = host_of();
  dlclose(lib);
  ASSERT_TRUE(TESSERA_ABI_HAS_FIELD(real, tessera_host_api_t, profiler_record_span));
  tessera_host_api_t cut = *real;  // what a 1.2 runtime hands out
  cut.struct_size = uint32_t(offsetof(tessera_host_api_t, profiler_enabled));
  cut.profiler_enabled = nullptr;
  cut.profiler_clock_ns = nullptr;
  cut.profiler_correlation_id = nullptr;
  cut.profiler_record_span = nullptr;

  tessera::profiler_enable("summary");
  tessera::sdk::host_api() = &cut;
  EXPECT_FALSE(tessera::sdk::profiler_enabled());
  EXPECT_EQ(tessera::sdk::profiler_clock_ns(), 0);
  { tessera::sdk::ScopedSpan span("on a 1.2 table", "kernel", 0); }
  EXPECT_TRUE(tessera::profiler_plugin_spans().empty());

  tessera::sdk::host_api() = real;
  EXPECT_TRUE(tessera::sdk::profiler_enabled());
  { tessera::sdk::ScopedSpan span("on this runtime", "kernel", 0, 7, 42); }
  uint64_t range_id = 0;
  {
    tessera::ProfilerRange range("test", "a range", Device("cpu"));
    range_id = range.correlation_id();
    EXPECT_EQ(tessera::profiler_correlation_id(), range_id);
    tessera::sdk::ScopedSpan span("in a range", "kernel", 0);  // takes the thread's current id
  }
  EXPECT_EQ(tessera::profiler_correlation_id(), 0u);
  tessera::profiler_enable("");
  { tessera::sdk::ScopedSpan span("while off", "kernel", 0); }
  tessera::sdk::host_api() = nullptr;
  const auto spans = tessera::profiler_plugin_spans();
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0].name, "on this runtime");
  EXPECT_EQ(spans[0].plugin, "lt_spans");
  EXPECT_EQ(spans[0].stream, 7u);
  EXPECT_EQ(spans[0].correlation_id, 42u);
  EXPECT_EQ(spans[1].name, "in a range");
  EXPECT_NE(range_id, 0u);
  EXPECT_EQ(spans[1].correlation_id, range_id);
}

TEST_F(ProfilerSpansTestPlugins, APluginThatKnowsNoSpanSlotRunsUnderTheProfiler) {
  install("abi_v1_0", ABI_LIB_V1_0, 0, "abi10");  // built from the frozen 1.0 header
  const std::string path = dir_.path() + "/old.json";
  const Device dev("abi10:0");
  tessera::profiler_enable(path);
  Tensor a = tessera::tensor(std::vector<float>{1.5f, -2.0f, 3.25f}, {3}).to(dev);
  Tensor b = tessera::tensor(std::vector<float>{0.5f, 4.0f, -1.25f}, {3}).to(dev);
  EXPECT_EQ(to_host(tessera::add(a, b)), (std::vector<float>{2.0f, 2.0f, 2.0f}));  // by hand
  tessera::profiler_flush();
  EXPECT_EQ(lt::call_plugin_counter(ABI_LIB_V1_0, "abi_device_kernel_calls"), 1)
      << "the plugin's kernel did not run";
  EXPECT_TRUE(tessera::profiler_plugin_spans().empty());
  const json trace = lt::read_json_file(path);
  ASSERT_TRUE(trace.contains("traceEvents")) << "not a trace: " << path;
  std::vector<json> adds;
  for (const json& e : complete_events(trace, "op", "add.Tensor"))
    if (e["args"]["device"] == "abi10:0") adds.push_back(e);
  ASSERT_EQ(adds.size(), 1u) << trace.dump(1);
  EXPECT_NE(adds[0]["args"].value("correlation", uint64_t(0)), 0u);
}

}  // namespace
