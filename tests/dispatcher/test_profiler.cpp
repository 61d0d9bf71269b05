// The op profiler at the dispatcher level (Note [Profiler]): recording from many threads at once,
// nothing recorded while off, and the resolution of a kernel answering UNIMPLEMENTED.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "tessera/ops.h"
#include "tessera/profiler.h"
#include "test_kernels.h"

namespace tessera {
namespace {

using json = nlohmann::json;

class Profiler : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::setup_test_backends();
    profiler_enable("");
    profiler_clear();
    path_ = ::testing::TempDir() + "tessera_profiler_test_" + std::to_string(::getpid()) + ".json";
  }
  void TearDown() override {
    profiler_enable("");
    profiler_clear();
    std::remove(path_.c_str());
  }
  json flush_and_read() {
    profiler_flush();
    std::ifstream in(path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return json::parse(ss.str());
  }
  std::string path_;
};

TEST_F(Profiler, OffRecordsNothing) {
  EXPECT_FALSE(profiler_enabled());
  Tensor r = add(ones({3}), ones({3}));
  profiler_enable(path_);
  json trace = flush_and_read();
  for (const json& e : trace["traceEvents"]) EXPECT_NE(e.value("ph", ""), "X") << e.dump();
}

TEST_F(Profiler, ThreadsRecordIntoTheirOwnBuffersAndNothingIsLost) {
  profiler_enable(path_);
  constexpr int kThreads = 4, kCalls = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([] {
      Tensor a = ones({2, 2});
      for (int i = 0; i < kCalls; ++i) a = mul(a, a);
    });
  for (auto& t : threads) t.join();
  json trace = flush_and_read();
  int muls = 0;
  std::set<int> tids;
  for (const json& e : trace["traceEvents"]) {
    if (e.value("ph", "") != "X" || e["name"] != "mul.Tensor") continue;
    ++muls;
    tids.insert(e["tid"].get<int>());
    EXPECT_EQ(e["args"]["shapes"], json::parse("[[2,2],[2,2]]"));
  }
  EXPECT_EQ(muls, kThreads * kCalls);
  EXPECT_EQ(tids.size(), size_t(kThreads));
}

TEST_F(Profiler, KernelAnsweringUnimplementedShowsTheFallbackTaken) {
  // The fake device's relu says UNIMPLEMENTED: the call goes on to the CPU fallback.
  testing::ScopedKernel k("relu", DeviceType::PrivateUse1, testing::k_unimplemented);
  const Device fake(DeviceType::PrivateUse1, 0);
  Tensor x = ones({3}).to(fake);
  profiler_enable(path_);
  Tensor r = relu(x);
  json trace = flush_and_read();
  std::vector<std::string> relu_resolutions;
  for (const json& e : trace["traceEvents"])
    if (e.value("ph", "") == "X" && e["name"] == "relu")
      relu_resolutions.push_back(e["args"]["device"].get<std::string>() + " " +
                                 e["args"]["resolution"].get<std::string>());
  EXPECT_EQ(relu_resolutions, (std::vector<std::string>{fake.str() + " fallback", "cpu kernel"}));
}

}  // namespace
}  // namespace tessera
