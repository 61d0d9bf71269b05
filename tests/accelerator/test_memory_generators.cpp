// Memory info, pinned host memory with asynchronous copies, and per-device generators, on the
// reference accelerator (its plugin implements the ABI 1.3 slots) and the CPU. References: the
// emulator's capacity and memory statistics, the kernel's own Philox values from tessera/random.h
// (whose known answers tests/core/test_random.cpp checks), and sample statistics.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <future>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <tessera/capabilities.h>
#include <tessera/generator.h>
#include <tessera/plugin_loader.h>
#include <tessera/random.h>
#include <tessera/stream.h>

#include "accel_test_util.h"

namespace {

using namespace tessera;
using accel_test::kAccel;
using accel_test::kernel_count;
using accel_test::values;

Device dev0() { return Device(std::string(kAccel) + ":0"); }
Device dev1() { return Device(std::string(kAccel) + ":1"); }
constexpr uint64_t kCapacity = uint64_t(1) << 30;  // MHD_DEVICE_MEMORY_BYTES

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}
#define EXPECT_ERROR(stmt, text) \
  EXPECT_NE(error_of([&] { stmt; }).find(text), std::string::npos) << error_of([&] { stmt; })

// The emulator's test hooks (mhd_queue_hold / mhd_queue_release in its plugin.cpp).
struct QueueHooks {
  QueueHooks() {
    (void)device_count(kAccel);  // loads the plugin
    for (const PluginInfo& p : plugins())
      if (p.name == kAccel) lib = dlopen(p.library.c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (lib) {
      hold = reinterpret_cast<int32_t (*)(int32_t, void*)>(dlsym(lib, "mhd_queue_hold"));
      release = reinterpret_cast<void (*)()>(dlsym(lib, "mhd_queue_release"));
    }
  }
  ~QueueHooks() {
    if (lib) dlclose(lib);
  }
  void* lib = nullptr;
  int32_t (*hold)(int32_t, void*) = nullptr;
  void (*release)() = nullptr;
};

std::vector<float> philox_uniform(uint64_t seed, uint64_t offset, size_t n, double from = 0, double to = 1) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(from + (to - from) * double(philox::uniform(seed, offset + i)));
  return v;
}
std::vector<float> floats(const Tensor& t) {
  Tensor c = t.to("cpu").contiguous();
  return std::vector<float>(c.const_data_ptr<float>(), c.const_data_ptr<float>() + c.numel());
}

// ---- memory info

TEST(MemoryInfo, AcceleratorReportsCapacityLessItsAllocations) {
  const MemoryInfo before = memory_info(dev0());
  EXPECT_EQ(before.total_bytes, kCapacity);
  EXPECT_EQ(before.free_bytes, kCapacity - memory_stats(dev0()).allocated_bytes);
  Tensor t = empty({4096}, TensorOptions(kFloat32).device(dev0()));  // 16 KiB
  const MemoryInfo after = memory_info(dev0());
  EXPECT_EQ(before.free_bytes - after.free_bytes, 16384u);
  EXPECT_EQ(after.free_bytes, kCapacity - memory_stats(dev0()).allocated_bytes);
  // Per device: device 1 did not see the allocation.
  EXPECT_EQ(memory_info(dev1()).free_bytes, kCapacity - memory_stats(dev1()).allocated_bytes);
  EXPECT_EQ(memory_info(Device(kAccel)).total_bytes, kCapacity);  // index -1 is device 0
}

TEST(MemoryInfo, CpuIsTheHostRam) {
  const MemoryInfo m = memory_info(Device("cpu"));
  // /proc/meminfo's MemTotal (kB) is the same RAM, read another way.
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  while (meminfo >> key && key != "MemTotal:") meminfo.ignore(256, '\n');
  ASSERT_EQ(key, "MemTotal:");
  meminfo >> kb;
  EXPECT_NEAR(double(m.total_bytes), double(kb) * 1024.0, double(kb) * 1024.0 * 0.01);
  EXPECT_GT(m.free_bytes, 0u);
  EXPECT_LE(m.free_bytes, m.total_bytes);
}

TEST(MemoryInfo, BadDevicesGetClearErrors) {
  EXPECT_ERROR(
      memory_info(Device(std::string(kAccel) + ":5")),
      "memory_info: device index 5 of 'my_hardware_device' is out of range: plugin 'my_hardware_device' "
      "reports 2 device(s), 0..1");
  EXPECT_ERROR(memory_stats(Device(std::string(kAccel) + ":2")),
               "memory_stats: device index 2 of 'my_hardware_device'");
  EXPECT_ERROR(memory_info(Device("cpu:1")), "device index 1 of 'cpu' is out of range");
  EXPECT_ERROR(memory_info(Device("meta")), "the meta device holds no memory");
  EXPECT_ERROR(memory_info(Device(DeviceType::PrivateUse3, 0)), "privateuse3");  // no plugin provides it
}

TEST(Capabilities, ReportMemoryInfoAndPinnedMemoryFromTheSlots) {
  const DeviceCapabilities a = device_capabilities(dev0());
  EXPECT_TRUE(a.memory_info);
  EXPECT_TRUE(a.pinned_host_memory);
  EXPECT_TRUE(a.async_pinned_copy);
  EXPECT_NE(a.str().find("pinned host memory"), std::string::npos);
  const DeviceCapabilities cpu = device_capabilities(Device("cpu"));
  EXPECT_TRUE(cpu.memory_info);          // the host answers
  EXPECT_FALSE(cpu.pinned_host_memory);  // the cpu plugin has no pinned allocator
  EXPECT_FALSE(cpu.async_pinned_copy);
}

// ---- pinned host memory

uint64_t pinned_host_bytes() {
  return accel_test::properties(kAccel)["memory"]["pinned_host"].get<uint64_t>();
}

TEST(PinnedMemory, FactoriesAllocateThroughThePluginsHostAllocator) {
  const uint64_t before = pinned_host_bytes();
  {
    Tensor p = zeros({3, 5}, TensorOptions(kFloat32).pinned_memory(dev0()));
    EXPECT_TRUE(p.is_pinned());
    EXPECT_TRUE(p.device().is_cpu());
    EXPECT_EQ(pinned_host_bytes() - before, 60u);  // the plugin holds the block
    EXPECT_EQ(values(p), std::vector<double>(15, 0.0));
    Tensor view = p.slice(0, 1, 3);
    EXPECT_TRUE(view.is_pinned());  // a view of pinned memory is pinned
    Tensor e = empty({0}, TensorOptions(kInt64).pinned_memory(dev0()));
    EXPECT_TRUE(e.is_pinned());  // a block for 0 bytes too
    Tensor ordinary = ones({4});
    EXPECT_FALSE(ordinary.is_pinned());
    Tensor pinned_copy = ordinary.pin_memory(dev0());
    EXPECT_TRUE(pinned_copy.is_pinned());
    EXPECT_EQ(values(pinned_copy), std::vector<double>(4, 1.0));
    EXPECT_TRUE(pinned_copy.pin_memory(dev0()).is_same(pinned_copy));  // already pinned for that device
    // Host default: a device whose plugin has no pinned allocator gives ordinary memory.
    EXPECT_FALSE(empty({4}, TensorOptions(kFloat32).pinned_memory(Device("cpu"))).is_pinned());
  }
  EXPECT_EQ(pinned_host_bytes(), before) << "pinned_free did not reach the plugin";
}

TEST(PinnedMemory, BadRequestsGetClearErrors) {
  EXPECT_ERROR(empty({4}, TensorOptions(kFloat32).device(dev0()).pinned_memory(dev0())),
               "pinned memory is host memory, but the options ask for device my_hardware_device:0");
  Tensor on_device = zeros({2}, TensorOptions(kFloat32).device(dev0()));
  EXPECT_ERROR(on_device.pin_memory(dev0()), "only CPU tensors can be pinned");
}

TEST(PinnedMemory, NonBlockingCopyReturnsBeforeTheDeviceReadsThePinnedSource) {
  QueueHooks hooks;
  ASSERT_TRUE(hooks.hold && hooks.release) << "the accelerator's test hooks are missing";
  Stream s = Stream::create(dev0());
  Tensor src = empty({256}, TensorOptions(kFloat32).pinned_memory(dev0()));
  float* p = src.data_ptr<float>();
  for (int i = 0; i < 256; ++i) p[i] = float(i);
  ASSERT_EQ(hooks.hold(0, s.handle()), 0);
  // While the stream is held, the copy returns (it only queues), on another thread so that a
  // copy that blocked would fail this test instead of hanging it.
  auto copy = std::async(std::launch::async, [&] {
    StreamGuard guard(s);
    return src.to(dev0(), /*non_blocking=*/true);
  });
  const bool returned = copy.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  // The device reads the pinned bytes when the stream reaches the copy: these writes land.
  for (int i = 0; i < 256; ++i) p[i] = float(1000 + i);
  hooks.release();
  ASSERT_TRUE(returned) << "the non-blocking copy from pinned memory waited for the device";
  Tensor dst = copy.get();
  s.synchronize();
  std::vector<float> want(256);
  for (int i = 0; i < 256; ++i) want[size_t(i)] = float(1000 + i);
  EXPECT_EQ(floats(dst), want);

  // Pageable memory (and blocking copies) is read before the call returns: later writes do not land.
  Tensor pageable = full({8}, 1.0f);
  ASSERT_EQ(hooks.hold(0, s.handle()), 0);
  Tensor staged;
  {
    StreamGuard guard(s);
    staged = pageable.to(dev0(), /*non_blocking=*/true);
  }
  pageable.fill_(2.0f);
  hooks.release();
  s.synchronize();
  EXPECT_EQ(floats(staged), std::vector<float>(8, 1.0f));
}

TEST(PinnedMemory, AsyncCopyIsOrderedWithKernelsAndEventsOnOtherStreams) {
  QueueHooks hooks;
  ASSERT_TRUE(hooks.hold && hooks.release);
  Stream copy_stream = Stream::create(dev0()), compute_stream = Stream::create(dev0());
  Tensor src = full({64}, 3.0f, TensorOptions(kFloat32).pinned_memory(dev0()));
  ASSERT_EQ(hooks.hold(0, copy_stream.handle()), 0);
  Tensor x;
  Event copied;
  {
    StreamGuard guard(copy_stream);
    x = src.to(dev0(), true);
    copied.record(copy_stream);
  }
  Tensor y;
  {
    StreamGuard guard(compute_stream);
    compute_stream.wait(copied);  // the kernel below must see the copied bytes
    y = mul(x, x);
  }
  hooks.release();
  compute_stream.synchronize();
  EXPECT_EQ(floats(y), std::vector<float>(64, 9.0f));
  // Freeing the pinned source while a copy from it is queued is safe: the plugin keeps the block.
  const uint64_t before = pinned_host_bytes();
  ASSERT_EQ(hooks.hold(0, copy_stream.handle()), 0);
  Tensor z;
  {
    StreamGuard guard(copy_stream);
    Tensor tmp = full({16}, 5.0f, TensorOptions(kFloat32).pinned_memory(dev0()));
    z = tmp.to(dev0(), true);
  }  // tmp's last reference is gone: pinned_free with the copy pending
  EXPECT_EQ(pinned_host_bytes(), before);
  hooks.release();
  copy_stream.synchronize();
  EXPECT_EQ(floats(z), std::vector<float>(16, 5.0f));
}

// ---- generators

TEST(Generators, SameSeedGivesThePhiloxValuesOnEveryDevice) {
  const int64_t uniforms = kernel_count("uniform_");
  Generator on_cpu(Device("cpu"), 42), on_dev(dev0(), 42);
  Tensor a = rand({1000}, on_cpu);
  Tensor b = rand({1000}, on_dev, TensorOptions(kFloat32).device(dev0()));
  EXPECT_EQ(kernel_count("uniform_") - uniforms, 1) << "rand did not run on the accelerator";
  EXPECT_EQ(floats(a), philox_uniform(42, 0, 1000));
  EXPECT_EQ(floats(b), philox_uniform(42, 0, 1000));
  EXPECT_EQ(on_cpu.offset(), 1000u);
  EXPECT_EQ(on_dev.offset(), 1000u);
  // The offset advances per call: the next draw continues the stream.
  Tensor c = rand({10}, on_dev, TensorOptions(kFloat32).device(dev1()));
  EXPECT_EQ(floats(c), philox_uniform(42, 1000, 10));
  // normal_ with mean and std, on the device, against the CPU's draw of the same stream.
  Generator g1(dev0(), 7), g2(Device("cpu"), 7);
  Tensor n_dev = empty({4000}, TensorOptions(kFloat64).device(dev0()));
  Tensor n_cpu = empty({4000}, TensorOptions(kFloat64));
  normal_(n_dev, 2.0, 0.5, g1);
  normal_(n_cpu, 2.0, 0.5, g2);
  accel_test::expect_near_all(values(n_dev), values(n_cpu), 0, "normal_ on the device vs the cpu");
  Tensor u = empty({4000}, TensorOptions(kFloat32).device(dev0()));
  uniform_(u, -2.0, 3.0, Generator(dev0(), 9));
  EXPECT_EQ(floats(u), philox_uniform(9, 0, 4000, -2.0, 3.0));
  // A strided destination draws in row-major order of the view.
  Tensor base = zeros({6, 4}, TensorOptions(kFloat32).device(dev0()));
  Tensor view = base.t();
  uniform_(view, 0.0, 1.0, Generator(dev0(), 3));
  EXPECT_EQ(floats(view.contiguous()), philox_uniform(3, 0, 24));
}

TEST(Generators, SamplesHaveTheRequestedMoments) {
  Generator g(dev0(), 2024);
  Tensor n = empty({200000}, TensorOptions(kFloat64).device(dev0()));
  normal_(n, 2.0, 0.5, g);
  const std::vector<double> v = values(n);
  double sum = 0, sq = 0;
  for (double x : v) sum += x;
  const double mean = sum / double(v.size());
  for (double x : v) sq += (x - mean) * (x - mean);
  const double sd = std::sqrt(sq / double(v.size() - 1));
  EXPECT_NEAR(mean, 2.0, 0.01);  // standard error 0.5 / sqrt(2e5) ~ 0.0011
  EXPECT_NEAR(sd, 0.5, 0.01);
  Tensor u = rand({200000}, g, TensorOptions(kFloat32).device(dev0()));
  const std::vector<double> w = values(u);
  double s = 0;
  for (double x : w) {
    ASSERT_TRUE(x >= 0.0 && x < 1.0) << x;
    s += x;
  }
  EXPECT_NEAR(s / double(w.size()), 0.5, 0.005);  // standard error ~ 0.00065
}

TEST(Generators, DefaultGeneratorsArePerDeviceAndFollowManualSeed) {
  manual_seed(99);
  Tensor a = rand({6}, TensorOptions(kFloat32).device(dev0()));
  Tensor b = rand({6});
  Tensor c = rand({6}, TensorOptions(kFloat32).device(dev1()));
  EXPECT_EQ(floats(a), philox_uniform(99, 0, 6));
  EXPECT_EQ(floats(b), philox_uniform(99, 0, 6));  // the CPU's own stream, not continued from a
  EXPECT_EQ(floats(c), philox_uniform(99, 0, 6));
  Generator d0 = Generator::default_generator(dev0());
  EXPECT_EQ(d0, Generator::default_generator(Device(kAccel)));  // index -1 is device 0
  EXPECT_NE(d0, Generator::default_generator(dev1()));
  EXPECT_EQ(d0.state(), (GeneratorState{99, 6}));
  Tensor again = rand({4}, TensorOptions(kFloat32).device(dev0()));
  EXPECT_EQ(floats(again), philox_uniform(99, 6, 4));
  manual_seed(99);  // reseeds the existing default generators
  EXPECT_EQ(d0.state(), (GeneratorState{99, 0}));
  EXPECT_ERROR(Generator::default_generator(Device(std::string(kAccel) + ":9")),
               "default_generator: device index 9 of 'my_hardware_device' is out of range");
  EXPECT_ERROR(Generator::default_generator(Device(DeviceType::PrivateUse3, 0)), "privateuse3");
  // seed(): a fresh non-deterministic seed, the stream restarted.
  Generator g(dev1(), 1);
  (void)g.reserve(5);
  const uint64_t s = g.seed();
  EXPECT_EQ(g.state(), (GeneratorState{s, 0}));
  EXPECT_EQ(g.initial_seed(), s);
  EXPECT_EQ(g.device(), dev1());
}

TEST(Generators, StateRoundTripsAndBadStatesAreRefused) {
  Generator g(dev0(), 5);
  (void)rand({17}, g, TensorOptions(kFloat32).device(dev0()));
  Tensor state = g.get_state();
  EXPECT_EQ(state.dtype(), kUInt8);
  EXPECT_EQ(state.numel(), kGeneratorStateBytes);
  Tensor first = rand({8}, g, TensorOptions(kFloat32).device(dev0()));
  g.set_state(state);
  EXPECT_EQ(g.state(), (GeneratorState{5, 17}));
  EXPECT_EQ(floats(rand({8}, g, TensorOptions(kFloat32).device(dev0()))), floats(first));
  // The documented layout: "TSGN", version 1, seed, offset (little-endian).
  const uint8_t* p = state.const_data_ptr<uint8_t>();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(p), 4), "TSGN");
  EXPECT_EQ(p[4], 1);
  EXPECT_EQ(p[8], 5);
  EXPECT_EQ(p[16], 17);

  const GeneratorState kept = g.state();
  EXPECT_ERROR(g.set_state(zeros({kGeneratorStateBytes})), "must be a uint8 tensor");
  EXPECT_ERROR(g.set_state(state.slice(0, 0, 23)), "must hold 24 bytes");
  EXPECT_ERROR(g.set_state(state.to(dev0())), "must be on the CPU");
  Tensor corrupt = state.clone();
  corrupt.data_ptr<uint8_t>()[0] = 'X';
  EXPECT_ERROR(g.set_state(corrupt), "does not start with the magic \"TSGN\"");
  Tensor future = state.clone();
  future.data_ptr<uint8_t>()[4] = 2;
  EXPECT_ERROR(g.set_state(future), "unknown state format version 2");
  EXPECT_ERROR(g.set_state(Tensor()), "the state tensor is undefined");
  EXPECT_EQ(g.state(), kept) << "a refused state changed the generator";
  // Bad arguments of the fills.
  Tensor t = empty({4}, TensorOptions(kFloat32).device(dev0()));
  EXPECT_ERROR(uniform_(t, 1.0, 0.0), "expected from <= to");
  EXPECT_ERROR(normal_(t, 0.0, -1.0), "expected std >= 0");
  Generator wrap(dev0(), 1);
  wrap.set_offset(UINT64_MAX - 2);
  EXPECT_ERROR(rand({4}, wrap), "would wrap the Philox counter");
}

TEST(Generators, ThreadsSharingOneGeneratorGetDisjointBlocks) {
  constexpr int kThreads = 8, kN = 1000;
  Generator g(dev0(), 31);
  std::vector<Tensor> out(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] { out[size_t(t)] = rand({kN}, g, TensorOptions(kFloat32).device(dev0())); });
  for (auto& th : threads) th.join();
  EXPECT_EQ(g.offset(), uint64_t(kThreads * kN));
  // Each thread got one whole block of the stream, and no block twice.
  std::set<uint64_t> blocks;
  for (const Tensor& t : out) {
    const std::vector<float> v = floats(t);
    uint64_t found = UINT64_MAX;
    for (uint64_t b = 0; b < kThreads; ++b)
      if (v == philox_uniform(31, b * kN, kN)) found = b;
    ASSERT_NE(found, UINT64_MAX) << "a thread's values are not a block of the stream";
    blocks.insert(found);
  }
  EXPECT_EQ(blocks.size(), size_t(kThreads));
}

TEST(Generators, ForkedGeneratorsAreReproducibleAcrossThreads) {
  constexpr int kThreads = 4;
  auto run = [](uint64_t seed) {
    Generator parent(Device("cpu"), seed);
    std::vector<Generator> forks;
    for (int t = 0; t < kThreads; ++t) forks.push_back(parent.fork());  // in a fixed order
    std::vector<std::vector<float>> out(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        Device dev = t % 2 ? dev1() : Device("cpu");  // a fork drives any device
        for (int k = 0; k < 3; ++k) {
          std::vector<float> v = floats(randn({50}, forks[size_t(t)], TensorOptions(kFloat32).device(dev)));
          out[size_t(t)].insert(out[size_t(t)].end(), v.begin(), v.end());
        }
      });
    for (auto& th : threads) th.join();
    EXPECT_EQ(parent.offset(), uint64_t(kThreads));
    return out;
  };
  const auto first = run(77), second = run(77);
  EXPECT_EQ(first, second);
  for (int t = 1; t < kThreads; ++t)
    EXPECT_NE(first[0], first[size_t(t)]) << "forks " << t << " and 0 share a stream";
  EXPECT_NE(run(78)[0], first[0]);
  // clone copies the state; copies of a Generator share it.
  Generator g(dev0(), 3);
  Generator same = g;
  Generator copy = g.clone();
  (void)g.reserve(10);
  EXPECT_EQ(same.offset(), 10u);
  EXPECT_EQ(copy.offset(), 0u);
}

}  // namespace
