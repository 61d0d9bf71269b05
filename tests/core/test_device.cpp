#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "tessera/device.h"
#include "tessera/error.h"

namespace tessera {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

class DeviceNames : public ::testing::Test {
 protected:
  void SetUp() override {
    reset_privateuse_names_for_testing();
    set_unknown_device_name_hook(nullptr);
  }
  void TearDown() override {
    reset_privateuse_names_for_testing();
    set_unknown_device_name_hook(nullptr);
  }
};

TEST_F(DeviceNames, ParsesBuiltInNamesAndIndices) {
  EXPECT_EQ(Device("cpu"), Device(kCPU));
  EXPECT_EQ(Device("cuda:1"), Device(kCUDA, 1));
  EXPECT_EQ(Device("opencl:0").type(), kOpenCL);
  EXPECT_EQ(Device("meta").index(), -1);
  EXPECT_FALSE(Device("cuda").has_index());
  EXPECT_EQ(Device("cuda:32767").index(), 32767);
  EXPECT_EQ(Device(std::string("privateuse2:3")), Device(DeviceType::PrivateUse2, 3));
}

TEST_F(DeviceNames, Prints) {
  EXPECT_EQ(Device(kCPU).str(), "cpu");
  EXPECT_EQ(Device(kCUDA, 1).str(), "cuda:1");
  EXPECT_EQ(Device(DeviceType::PrivateUse3).str(), "privateuse3");
  std::ostringstream os;
  os << Device(kOpenCL, 0);
  EXPECT_EQ(os.str(), "opencl:0");
}

TEST_F(DeviceNames, RejectsBadIndices) {
  for (const char* bad : {"cuda:-1", "cuda:x", "cuda:", "cuda:1x", "cuda: 1", "cuda:+1", "cuda:01"}) {
    EXPECT_THAT([&] { Device d(bad); }, ThrowsMessage<Error>(AllOf(HasSubstr(bad), HasSubstr("type:N"))))
        << bad;
  }
  EXPECT_THAT([] { Device d("cuda:32768"); }, ThrowsMessage<Error>(HasSubstr("too large")));
  EXPECT_THAT([] { Device d("cuda:99999999999999999999"); }, ThrowsMessage<Error>(HasSubstr("too large")));
  EXPECT_THAT([] { Device d(""); }, ThrowsMessage<Error>(HasSubstr("empty")));
  EXPECT_THAT([] { Device d(":0"); }, ThrowsMessage<Error>(HasSubstr("type is missing")));
}

TEST_F(DeviceNames, UnknownNameListsKnownNames) {
  EXPECT_THAT([] { Device d("npu:0"); },
              ThrowsMessage<Error>(AllOf(HasSubstr("'npu'"), HasSubstr("cpu, cuda, opencl, meta, privateuse1"),
                                         HasSubstr("rename_privateuse1_backend"))));
  EXPECT_THAT([] { device_type_from_name("CUDA"); }, ThrowsMessage<Error>(HasSubstr("'CUDA'")));
}

TEST_F(DeviceNames, RenamedSlotParsesAndPrints) {
  rename_privateuse1_backend("npu");
  EXPECT_EQ(privateuse1_backend_name(), "npu");
  EXPECT_EQ(Device("npu:1"), Device(kPrivateUse1, 1));
  EXPECT_EQ(Device(kPrivateUse1, 0).str(), "npu:0");
  EXPECT_EQ(device_type_from_name("npu"), kPrivateUse1);
  EXPECT_EQ(device_type_name(kPrivateUse1), "npu");
  // The slot spelling stays a valid alias.
  EXPECT_EQ(Device("privateuse1"), Device(kPrivateUse1));
  rename_privateuse_backend(3, "my_hardware_device");
  EXPECT_EQ(privateuse_backend_name(3), "my_hardware_device");
  EXPECT_EQ(privateuse_backend_name(2), "privateuse2");
  EXPECT_EQ(known_device_names(), (std::vector<std::string>{"cpu", "cuda", "opencl", "meta", "npu", "privateuse2",
                                                            "my_hardware_device"}));
  EXPECT_THAT([] { Device d("gpu"); }, ThrowsMessage<Error>(HasSubstr("npu, privateuse2, my_hardware_device")));
}

TEST_F(DeviceNames, RenameRules) {
  // Not identifiers / not lower case.
  for (const char* bad : {"", "NPU", "1npu", "np-u", "np u", "npu:0", "npü"}) {
    EXPECT_THAT([&] { rename_privateuse1_backend(bad); }, ThrowsMessage<Error>(HasSubstr("lower-case identifier")))
        << bad;
  }
  // Built-in names, including the slot names.
  for (const char* reserved : {"cpu", "cuda", "opencl", "meta", "privateuse1", "privateuse2", "privateuse3"}) {
    EXPECT_THAT([&] { rename_privateuse1_backend(reserved); }, ThrowsMessage<Error>(HasSubstr("built-in")))
        << reserved;
  }
  // Names that merely start with a built-in name are fine.
  rename_privateuse_backend(2, "cuda2");
  rename_privateuse_backend(3, "cpux");
  EXPECT_EQ(Device("cuda2:1"), Device(DeviceType::PrivateUse2, 1));
  EXPECT_EQ(Device("cpux"), Device(DeviceType::PrivateUse3));
  // Same name again: no-op. Different name: error naming the current one.
  rename_privateuse1_backend("npu");
  EXPECT_NO_THROW(rename_privateuse1_backend("npu"));
  EXPECT_THAT([] { rename_privateuse1_backend("xpu"); },
              ThrowsMessage<Error>(AllOf(HasSubstr("already named 'npu'"), HasSubstr("'xpu'"))));
  EXPECT_EQ(privateuse1_backend_name(), "npu");
  // A name held by another slot.
  reset_privateuse_names_for_testing();
  rename_privateuse_backend(2, "npu");
  EXPECT_THAT([] { rename_privateuse1_backend("npu"); }, ThrowsMessage<Error>(HasSubstr("held by privateuse2")));
  // Bad slots.
  EXPECT_THAT([] { rename_privateuse_backend(0, "abc"); }, ThrowsMessage<Error>(HasSubstr("slot 0")));
  EXPECT_THAT([] { rename_privateuse_backend(4, "abc"); }, ThrowsMessage<Error>(HasSubstr("slot 4")));
  EXPECT_THAT([] { privateuse_backend_name(4); }, ThrowsMessage<Error>(HasSubstr("slot 4")));
}

TEST_F(DeviceNames, ConcurrentRenamesHaveExactlyOneWinner) {
  for (int round = 0; round < 20; ++round) {
    reset_privateuse_names_for_testing();
    constexpr int kThreads = 8;
    std::atomic<int> go{0}, errors{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back([&, i] {
        while (go.load() == 0) {
        }
        // Two threads per name: the winner's twin sees a no-op, everyone else an error.
        const std::string name = "dev" + std::to_string(i / 2);
        try {
          rename_privateuse1_backend(name);
        } catch (const Error& e) {
          EXPECT_THAT(e.what(), HasSubstr("already named"));
          errors.fetch_add(1);
        }
        // Readers concurrently parse and print.
        (void)Device(kPrivateUse1, 0).str();
      });
    }
    go.store(1);
    for (auto& t : threads) t.join();
    const std::string winner = privateuse1_backend_name();
    ASSERT_EQ(winner.substr(0, 3), "dev");
    EXPECT_EQ(errors.load(), kThreads - 2) << winner;
  }
}

int g_hook_calls = 0;
void renaming_hook() {
  ++g_hook_calls;
  rename_privateuse_backend(2, "hooked");
}

TEST_F(DeviceNames, UnknownNameHookRunsOnceThenParseRetries) {
  g_hook_calls = 0;
  set_unknown_device_name_hook(&renaming_hook);
  EXPECT_EQ(Device("cuda"), Device(kCUDA));  // known names never call the hook
  EXPECT_EQ(g_hook_calls, 0);
  EXPECT_EQ(Device("hooked:2"), Device(DeviceType::PrivateUse2, 2));
  EXPECT_EQ(g_hook_calls, 1);
  EXPECT_EQ(Device("hooked"), Device(DeviceType::PrivateUse2));
  EXPECT_EQ(g_hook_calls, 1);
  EXPECT_THROW(device_type_from_name("still_unknown"), Error);
  EXPECT_EQ(g_hook_calls, 2);  // once per failed look-up, not in a loop
}

void recursive_hook() {
  ++g_hook_calls;
  Device d("also_unknown");  // must not recurse into the hook again
}

TEST_F(DeviceNames, HookDoesNotRecurse) {
  g_hook_calls = 0;
  set_unknown_device_name_hook(&recursive_hook);
  EXPECT_THAT([] { Device d("nothing"); }, ThrowsMessage<Error>(HasSubstr("also_unknown")));
  EXPECT_EQ(g_hook_calls, 1);
}

TEST(DeviceHash, DistinguishesTypeAndIndex) {
  std::hash<Device> h;
  EXPECT_NE(h(Device(kCUDA, 0)), h(Device(kCUDA, 1)));
  EXPECT_NE(h(Device(kCUDA, 0)), h(Device(kOpenCL, 0)));
}

}  // namespace
}  // namespace tessera
