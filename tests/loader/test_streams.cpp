// Streams and events (Note [Streams] in tessera/stream.h) on the reference accelerator, whose
// streams are queues with their own worker threads: kernels run on the thread's current stream, two
// streams really run at the same time (shown with device event times, no sleeps), an event orders
// one stream after another, and the profile trace shows each stream on its own track.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "loader_test_util.h"
#include "tessera/tessera.h"

namespace {

using json = nlohmann::json;
using tessera::Device;
using tessera::Event;
using tessera::Stream;
using tessera::StreamGuard;
using tessera::Tensor;

const Device kMhd("my_hardware_device:0");
constexpr int64_t kN = 192;  // a matmul of kN^3 multiply-adds takes tens of milliseconds on the emulator

// A kN x kN matrix with entries (i + 2j) mod 7 - 3, and the matmul of it with itself in double.
std::vector<float> input_values() {
  std::vector<float> v(size_t(kN * kN));
  for (int64_t i = 0; i < kN; ++i)
    for (int64_t j = 0; j < kN; ++j) v[size_t(i * kN + j)] = float((i + 2 * j) % 7 - 3);
  return v;
}
std::vector<double> reference_square(const std::vector<float>& a) {
  std::vector<double> out(size_t(kN * kN), 0.0);
  for (int64_t i = 0; i < kN; ++i)
    for (int64_t k = 0; k < kN; ++k)
      for (int64_t j = 0; j < kN; ++j) out[size_t(i * kN + j)] += double(a[size_t(i * kN + k)]) * a[size_t(k * kN + j)];
  return out;
}

// One stream's work: a start event, a long kernel, an end event.
struct Interval {
  Event start, end;
  Tensor result;
};
Interval launch_matmul(const Stream& s, const Tensor& x) {
  StreamGuard guard(s);
  Interval iv;
  iv.start.record(s);
  iv.result = tessera::matmul(x, x);
  iv.end.record(s);
  return iv;
}

TEST(Streams, CurrentStreamDefaultsToTheDefaultStreamAndTheGuardRestoresIt) {
  EXPECT_TRUE(tessera::current_stream(kMhd).is_default());
  EXPECT_EQ(tessera::current_stream(kMhd).handle(), nullptr);
  Stream a = Stream::create(kMhd);
  Stream b = Stream::create(kMhd);
  ASSERT_FALSE(a.is_default());
  EXPECT_NE(a.handle(), nullptr);
  EXPECT_NE(a, b);
  {
    StreamGuard ga(a);
    EXPECT_EQ(tessera::current_stream(kMhd), a);
    {
      StreamGuard gb(b);
      EXPECT_EQ(tessera::current_stream(kMhd), b);
      EXPECT_EQ(gb.original_stream(), a);
    }
    EXPECT_EQ(tessera::current_stream(kMhd), a);
    // Other devices keep their own current stream.
    EXPECT_TRUE(tessera::current_stream(Device("my_hardware_device:1")).is_default());
  }
  EXPECT_TRUE(tessera::current_stream(kMhd).is_default());
  EXPECT_NE(a.str().find("my_hardware_device:0 stream "), std::string::npos) << a.str();
}

TEST(Streams, CurrentStreamIsPerThread) {
  Stream a = Stream::create(kMhd);
  StreamGuard guard(a);
  bool other_thread_default = false;
  std::thread([&] { other_thread_default = tessera::current_stream(kMhd).is_default(); }).join();
  EXPECT_TRUE(other_thread_default);
}

TEST(Streams, DeviceWithoutStreamsGetsItsDefaultStreamAndHostEvents) {
  const Device cpu("cpu");
  Stream s = Stream::create(cpu);
  EXPECT_TRUE(s.is_default());
  Event a, b;
  a.record(s);
  Tensor x = tessera::ones({64, 64});
  Tensor y = tessera::matmul(x, x);
  b.record(s);
  EXPECT_EQ(a.handle(), nullptr);  // Note [Host events]
  EXPECT_GE(a.elapsed_time(b), 0.0);
  s.wait(a);  // complete at once
  EXPECT_EQ(y.contiguous().data_ptr<float>()[0], 64.0f);
}

TEST(Streams, TwoStreamsOverlapOnTheReferenceAccelerator) {
  const std::vector<float> values = input_values();
  Tensor x = tessera::tensor(values, {kN, kN}).to(kMhd);
  tessera::synchronize(kMhd);
  Stream sa = Stream::create(kMhd), sb = Stream::create(kMhd);
  Interval a = launch_matmul(sa, x);
  Interval b = launch_matmul(sb, x);
  // Both intervals intersect: each stream started before the other one ended.
  const double b_start_after_a_start = a.start.elapsed_time(b.start);
  const double a_end_after_b_start = b.start.elapsed_time(a.end);
  const double b_end_after_a_start = a.start.elapsed_time(b.end);
  EXPECT_GT(a_end_after_b_start, 0.0) << "stream B started " << b_start_after_a_start << " ms after A";
  EXPECT_GT(b_end_after_a_start, 0.0);
  // Each kernel took real time, so the intersection is not two instants touching.
  EXPECT_GT(a.start.elapsed_time(a.end), 0.0);
  EXPECT_GT(b.start.elapsed_time(b.end), 0.0);

  // The results are right.
  const std::vector<double> want = reference_square(values);
  for (const Tensor& r : {a.result, b.result}) {
    Tensor h = r.to(Device("cpu")).contiguous();
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(double(h.data_ptr<float>()[i]), want[i]) << i;
  }
}

TEST(Streams, WorkOnOneStreamRunsInOrder) {
  // The control for the test above: on one stream the second kernel starts after the first ends.
  Tensor x = tessera::tensor(input_values(), {kN, kN}).to(kMhd);
  tessera::synchronize(kMhd);  // the copy ran on the default stream; s does not wait for it
  Stream s = Stream::create(kMhd);
  Interval a = launch_matmul(s, x);
  Interval b = launch_matmul(s, x);
  EXPECT_GE(a.end.elapsed_time(b.start), 0.0);
  EXPECT_GT(a.start.elapsed_time(a.end), 0.0);
}

TEST(Streams, AnEventOrdersOneStreamAfterAnother) {
  const std::vector<float> values = input_values();
  Tensor x = tessera::tensor(values, {kN, kN}).to(kMhd);
  tessera::synchronize(kMhd);
  Stream producer = Stream::create(kMhd), consumer = Stream::create(kMhd);
  Interval p = launch_matmul(producer, x);
  Event ready;
  ready.record(producer);
  consumer.wait(ready);
  Tensor doubled;
  Event consumer_start;
  {
    StreamGuard guard(consumer);
    consumer_start.record(consumer);
    doubled = tessera::add(p.result, p.result);
  }
  // The consumer's work began only once the producer's kernel had ended.
  EXPECT_GE(p.end.elapsed_time(consumer_start), 0.0);
  Tensor h;
  {
    StreamGuard guard(consumer);
    h = doubled.to(Device("cpu")).contiguous();  // the copy runs on the consumer stream, after the add
  }
  const std::vector<double> want = reference_square(values);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(double(h.data_ptr<float>()[i]), 2 * want[i]) << i;
}

TEST(Streams, MisuseIsAClearError) {
  Stream s = Stream::create(kMhd);
  Stream other = Stream::create(Device("my_hardware_device:1"));
  Event e;
  EXPECT_THROW(e.device(), tessera::Error);
  Event never;
  e.record(s);
  try {
    e.elapsed_time(never);
    ADD_FAILURE() << "elapsed_time with an unrecorded event did not throw";
  } catch (const tessera::Error& err) {
    EXPECT_NE(std::string(err.what()).find("must be recorded"), std::string::npos) << err.what();
  }
  try {
    e.record(other);
    ADD_FAILURE() << "recording an event of device 0 on device 1 did not throw";
  } catch (const tessera::Error& err) {
    EXPECT_NE(std::string(err.what()).find("my_hardware_device:0"), std::string::npos) << err.what();
  }
  EXPECT_THROW(other.wait(e), tessera::Error);
  Tensor t = tessera::ones({4}).to(kMhd);
  EXPECT_THROW(tessera::record_stream(t, other), tessera::Error);
  tessera::record_stream(t, s);  // the accelerator keeps buffers alive itself: nothing to record
  EXPECT_THROW(tessera::record_stream(Tensor(), s), tessera::Error);
}

TEST(Streams, AStreamOutlivingItsPluginIsAClearError) {
  Stream s = Stream::create(kMhd);
  Event e;
  e.record(s);
  {
    StreamGuard guard(s);
    tessera::shutdown_plugins();  // the plugin's shutdown frees its streams and events
    // The stream is dead: using it, also as the current stream of a call, throws naming it.
    try {
      s.synchronize();
      ADD_FAILURE() << "synchronize on a dead stream did not throw";
    } catch (const tessera::Error& err) {
      EXPECT_NE(std::string(err.what()).find("is dead"), std::string::npos) << err.what();
      EXPECT_NE(std::string(err.what()).find("Stream::create"), std::string::npos) << err.what();
    }
    EXPECT_THROW(tessera::ones({4}).to(kMhd), tessera::Error);  // the plugin reloads; the stream stays dead
    EXPECT_THROW(e.synchronize(), tessera::Error);
  }
  // The guard restored the default stream; a new stream works with the reloaded plugin.
  EXPECT_TRUE(tessera::current_stream(kMhd).is_default());
  Stream fresh = Stream::create(kMhd);
  StreamGuard guard(fresh);
  Tensor h = tessera::add(tessera::ones({4}).to(kMhd), tessera::ones({4}).to(kMhd)).to(Device("cpu")).contiguous();
  EXPECT_EQ(h.data_ptr<float>()[3], 2.0f);
}

json read_trace(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str(), nullptr, false);
}

TEST(Streams, ProfileTraceShowsTwoStreamsOverlappingOnTheirOwnTracks) {
  lt::TempDir dir;
  const std::string path = dir.path() + "/trace.json";
  Tensor x = tessera::tensor(input_values(), {kN, kN}).to(kMhd);
  tessera::synchronize(kMhd);
  Stream sa = Stream::create(kMhd), sb = Stream::create(kMhd);
  tessera::profiler_clear();
  tessera::profiler_enable(path);
  Interval a = launch_matmul(sa, x);
  Interval b = launch_matmul(sb, x);
  tessera::synchronize(kMhd);
  tessera::profiler_flush();
  tessera::profiler_enable("");
  tessera::profiler_clear();

  json trace = read_trace(path);
  ASSERT_TRUE(trace.is_object() && trace.contains("traceEvents")) << trace.dump();
  // Device events: one per kernel, on the track of its stream, named like the stream.
  std::map<int, std::string> track_names;
  for (const json& e : trace["traceEvents"])
    if (e.value("ph", "") == "M" && e.value("name", "") == "thread_name")
      track_names[e["tid"].get<int>()] = e["args"].value("name", "");
  std::vector<json> device_matmuls;
  for (const json& e : trace["traceEvents"])
    if (e.value("ph", "") == "X" && e.value("name", "") == "matmul" && e.value("cat", "") == "device")
      device_matmuls.push_back(e);
  ASSERT_EQ(device_matmuls.size(), 2u) << trace.dump(1);
  const json& da = device_matmuls[0];
  const json& db = device_matmuls[1];
  EXPECT_NE(da["tid"], db["tid"]);
  std::vector<std::string> names = {track_names[da["tid"].get<int>()], track_names[db["tid"].get<int>()]};
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names[0], sa.str());
  EXPECT_EQ(names[1], sb.str());
  const double a0 = da["ts"].get<double>(), a1 = a0 + da["dur"].get<double>();
  const double b0 = db["ts"].get<double>(), b1 = b0 + db["dur"].get<double>();
  EXPECT_GT(da["dur"].get<double>(), 0.0);
  EXPECT_GT(db["dur"].get<double>(), 0.0);
  EXPECT_LT(std::max(a0, b0), std::min(a1, b1)) << "device intervals [" << a0 << ", " << a1 << "] and [" << b0
                                                 << ", " << b1 << "] do not intersect";
}

}  // namespace
