// Resolution order, errors, TLS key guards, boxed calls and concurrent registration.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <thread>

#include "tessera/ops.h"
#include "test_kernels.h"

namespace tessera {
namespace {

using testing::ScopedKernel;

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// A kernel that counts its calls (user_data: std::atomic<int>*) and writes `value` everywhere.
struct Counter {
  std::atomic<int> calls{0};
  double value = 0;
};
tessera_status_t k_count(void* ud, const tessera_kernel_call_t* c) {
  auto* counter = static_cast<Counter*>(ud);
  counter->calls++;
  for (int o = 0; o < c->num_outputs; ++o) {
    const tessera_tensor_t* out = c->outputs[o];
    for (int64_t i = 0; i < out->numel; ++i)
      testing::store(out, testing::bcast_offset(out, out->sizes, out->ndim, i), counter->value);
  }
  return nullptr;
}

struct EnvGuard {
  std::string name;
  std::optional<std::string> old;
  EnvGuard(const char* n, const char* v) : name(n) {
    if (const char* o = std::getenv(n)) old = o;
    ::setenv(n, v, 1);
  }
  ~EnvGuard() {
    if (old)
      ::setenv(name.c_str(), old->c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
};

class Dispatch : public ::testing::Test {
 protected:
  void SetUp() override { testing::setup_test_backends(); }
  Device fake{DeviceType::PrivateUse1, 0};
};

TEST_F(Dispatch, ResolutionOrderKernelCompositeFallbackError) {
  Dispatcher& d = Dispatcher::instance();
  OperatorEntry& op = d.define_op("test_resolve(Tensor self) -> Tensor", "relu", "test");
  Tensor x = full({3}, 2.0f, fake);
  auto call = [&] { return std::get<Tensor>(d.call_boxed(op, {x})[0]); };

  {
    EnvGuard off("TESSERA_CPU_FALLBACK", "0");
    EXPECT_EQ(d.resolution(op, kPrivateUse1, kFloat32), Resolution::None);
    EXPECT_EQ(error_of(call),
              "no kernel for 'test_resolve' on device 'fake_device' (dtype float32); implemented on: no "
              "device; the CPU fallback is off for this run (TESSERA_CPU_FALLBACK=0); register a kernel for it, or allow the fallback (TESSERA_FALLBACK=allow) to run it on the CPU");
    EXPECT_EQ(error_of([&] { d.call_boxed(op, {full({3}, 1.0f)}); }),
              "no kernel for 'test_resolve' on device 'cpu' (dtype float32); implemented on: no device; the "
              "CPU has "
              "no fallback; check that the cpu plugin loaded (TESSERA_LOG=plugins)");
  }
  EXPECT_EQ(error_of(call),
            "no kernel for 'test_resolve' on device 'fake_device' (dtype float32); implemented on: no "
            "device; the CPU "
            "fallback cannot run it either (no CPU kernel); check that the cpu plugin loaded "
            "(TESSERA_LOG=plugins)");
  // CPU kernel only: the fake device runs it through the CPU fallback.
  Counter cpu{{0}, 1.0};
  RegistrationHandle hc = d.register_kernel(op, kCPU, Functionality::Dense,
                                            KernelEntry{k_count, &cpu, TESSERA_DTYPE_MASK_ALL, 0, "test"});
  EXPECT_EQ(d.resolution(op, kPrivateUse1, kFloat32), Resolution::Fallback);
  Tensor r = call();
  EXPECT_EQ(r.device().type(), kPrivateUse1);
  EXPECT_EQ(cpu.calls.load(), 1);
  EXPECT_TRUE(equal(r, full({3}, 1.0f)));
  {
    EnvGuard off("TESSERA_CPU_FALLBACK", "0");
    EXPECT_EQ(
        error_of(call),
        "no kernel for 'test_resolve' on device 'fake_device' (dtype float32); implemented on: cpu; "
        "the CPU fallback is off for this run (TESSERA_CPU_FALLBACK=0); register a kernel for it, or allow the fallback (TESSERA_FALLBACK=allow) to run it on the CPU");
  }
  // The backend's own fallback beats the CPU fallback.
  Counter fb{{0}, 3.0};
  RegistrationHandle hf = d.register_fallback(kPrivateUse1, Functionality::Dense,
                                              KernelEntry{k_count, &fb, TESSERA_DTYPE_MASK_ALL, 0, "test"});
  EXPECT_TRUE(equal(call(), full({3}, 3.0f)));
  EXPECT_EQ(fb.calls.load(), 1);
  // A composite beats the fallback.
  std::atomic<int> composite_calls{0};
  RegistrationHandle hcomp = d.register_composite(op, [&](const Stack& args) -> Stack {
    composite_calls++;
    return {neg(std::get<Tensor>(args[0]))};
  });
  EXPECT_EQ(d.resolution(op, kPrivateUse1, kFloat32), Resolution::Composite);
  EXPECT_TRUE(equal(call(), full({3}, -2.0f)));
  EXPECT_EQ(composite_calls.load(), 1);
  // A kernel beats everything.
  Counter dev{{0}, 5.0};
  RegistrationHandle hk = d.register_kernel(op, kPrivateUse1, Functionality::Dense,
                                            KernelEntry{k_count, &dev, TESSERA_DTYPE_MASK_ALL, 0, "test"});
  EXPECT_EQ(d.resolution(op, kPrivateUse1, kFloat32), Resolution::Kernel);
  EXPECT_TRUE(equal(call(), full({3}, 5.0f)));
  EXPECT_EQ(d.backends_with_kernel(op), (std::vector<DeviceType>{kCPU, kPrivateUse1}));
  // Undo in reverse: each step falls back to the previous resolution.
  d.deregister(hk);
  EXPECT_TRUE(equal(call(), full({3}, -2.0f)));
  d.deregister(hcomp);
  EXPECT_TRUE(equal(call(), full({3}, 3.0f)));
  d.deregister(hf);
  EXPECT_TRUE(equal(call(), full({3}, 1.0f)));
  d.deregister(hc);
  EXPECT_EQ(d.resolution(op, kPrivateUse1, kFloat32), Resolution::None);
  EXPECT_NE(error_of([&] { d.deregister(hc); }).find("unknown or already undone"), std::string::npos);
}

TEST_F(Dispatch, ForbiddenFallback) {
  Dispatcher& d = Dispatcher::instance();
  OperatorEntry& op = d.define_op("test_forbid(Tensor self) -> Tensor", "relu", "test");
  Counter cpu{{0}, 1.0};
  ScopedKernel k("test_forbid", kCPU, k_count, &cpu);
  d.forbid_fallback(op, kPrivateUse1);
  EXPECT_EQ(
      error_of([&] { d.call_boxed(op, {full({2}, 1.0f, fake)}); }),
      "no kernel for 'test_forbid' on device 'fake_device' (dtype float32); implemented on: cpu; the CPU "
      "fallback is forbidden for 'test_forbid' on 'fake_device' by its plugin; move the inputs to a device "
      "that implements it");
  // The same through a kernel flag: a float-only kernel that forbids the fallback for other dtypes.
  OperatorEntry& op2 = d.define_op("test_forbid2(Tensor self) -> Tensor", "relu", "test");
  ScopedKernel k2("test_forbid2", kCPU, k_count, &cpu);
  ScopedKernel k3("test_forbid2", kPrivateUse1, k_count, &cpu, dtype_bit(kFloat32),
                  TESSERA_KERNEL_FLAG_NO_FALLBACK);
  EXPECT_NO_THROW(d.call_boxed(op2, {full({2}, 1.0f, fake)}));
  EXPECT_NE(error_of([&] {
              d.call_boxed(op2, {full({2}, 1.0, kFloat64).to(fake)});
            }).find("no kernel for 'test_forbid2' on device 'fake_device' (dtype float64)"),
            std::string::npos);
}

TEST_F(Dispatch, DtypeMaskAndUnimplementedFallThrough) {
  Dispatcher& d = Dispatcher::instance();
  OperatorEntry& op = d.define_op("test_mask(Tensor self) -> Tensor", "relu", "test");
  Counter cpu{{0}, 1.0}, dev{{0}, 2.0};
  ScopedKernel kc("test_mask", kCPU, k_count, &cpu);
  ScopedKernel kd("test_mask", kPrivateUse1, k_count, &dev, dtype_bit(kFloat32));
  EXPECT_TRUE(equal(std::get<Tensor>(d.call_boxed(op, {full({2}, 0.0f, fake)})[0]), full({2}, 2.0f)));
  EXPECT_EQ(d.resolution(op, kPrivateUse1, kInt64), Resolution::Fallback);
  Tensor r = std::get<Tensor>(d.call_boxed(op, {full({2}, 0, fake)})[0]);  // int64: not in the mask
  EXPECT_EQ(r.device().type(), kPrivateUse1);
  EXPECT_TRUE(equal(r, full({2}, 1)));
  EXPECT_EQ(cpu.calls.load(), 1);

  OperatorEntry& op2 = d.define_op("test_unimpl(Tensor self) -> Tensor", "relu", "test");
  ScopedKernel ku("test_unimpl", kPrivateUse1, testing::k_unimplemented);
  ScopedKernel kc2("test_unimpl", kCPU, k_count, &cpu);
  Tensor r2 = std::get<Tensor>(d.call_boxed(op2, {full({2}, 0.0f, fake)})[0]);
  EXPECT_EQ(cpu.calls.load(), 2);
  EXPECT_TRUE(equal(r2, full({2}, 1.0f)));
  // With no way out, the error says what the kernel answered.
  OperatorEntry& op3 = d.define_op("test_unimpl3(Tensor self) -> Tensor", "relu", "test");
  ScopedKernel ku3("test_unimpl3", kCPU, testing::k_unimplemented);
  EXPECT_EQ(
      error_of([&] { d.call_boxed(op3, {full({2}, 0.0f)}); }),
      "no kernel for 'test_unimpl3' on device 'cpu' (dtype float32); implemented on: cpu; the CPU has no "
      "fallback; check that the cpu plugin loaded (TESSERA_LOG=plugins) (the cpu kernel from test answered "
      "UNIMPLEMENTED: test_unimpl3: not in this test kernel)");
}

tessera_status_t k_invalid(void*, const tessera_kernel_call_t*) {
  return kernel_status_make(TESSERA_STATUS_INVALID_ARGUMENT, "the kernel rejects this input");
}

TEST_F(Dispatch, KernelStatusBecomesError) {
  Dispatcher& d = Dispatcher::instance();
  OperatorEntry& op = d.define_op("test_status(Tensor self) -> Tensor", "relu", "test");
  ScopedKernel k("test_status", kCPU, k_invalid);
  try {
    d.call_boxed(op, {full({2}, 1.0f)});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_EQ(std::string(e.what()), "test_status on cpu (test): the kernel rejects this input");
  }
}

TEST_F(Dispatch, ThreadLocalKeyGuardsChooseTheSlot) {
  Dispatcher& d = Dispatcher::instance();
  OperatorEntry& op = d.define_op("test_tls(Tensor self) -> Tensor", "relu", "test");
  Counter dense{{0}, 1.0}, autograd{{0}, 2.0};
  ScopedKernel kd("test_tls", kCPU, k_count, &dense);
  ScopedKernel ka("test_tls", kCPU, k_count, &autograd, TESSERA_DTYPE_MASK_ALL, 0, Functionality::Autograd);
  Tensor x = full({1}, 0.0f);
  auto value = [&] { return std::get<Tensor>(d.call_boxed(op, {x})[0]).item<float>(); };
  EXPECT_EQ(value(), 1.0f);
  {
    IncludeDispatchKeyGuard inc(DispatchKeySet::functionality(Functionality::Autograd));
    EXPECT_EQ(value(), 2.0f);
    {
      ExcludeDispatchKeyGuard exc(DispatchKeySet::functionality(Functionality::Autograd));
      EXPECT_EQ(value(), 1.0f);
    }
    EXPECT_EQ(value(), 2.0f);
  }
  {
    // A functionality with no kernel and no fallback falls through to the next one.
    IncludeDispatchKeyGuard inc(DispatchKeySet::functionality(Functionality::Export));
    EXPECT_EQ(value(), 1.0f);
  }
  // Guards are per thread.
  IncludeDispatchKeyGuard inc(DispatchKeySet::functionality(Functionality::Autograd));
  float other = 0;
  std::thread([&] { other = value(); }).join();
  EXPECT_EQ(other, 1.0f);
  EXPECT_EQ(value(), 2.0f);
}

TEST_F(Dispatch, BoxedAndUnboxedAgree) {
  Dispatcher& d = Dispatcher::instance();
  manual_seed(11);
  Tensor a = rand({3, 4}), b = rand({4});
  Stack r = d.call_boxed(d.op("add.Tensor"), {a, b});  // alpha defaulted
  ASSERT_EQ(r.size(), 1u);
  EXPECT_TRUE(equal(std::get<Tensor>(r[0]), add(a, b)));
  Stack r2 = d.call_boxed(d.op("add.Tensor"), {a, b, 2.5});
  EXPECT_TRUE(equal(std::get<Tensor>(r2[0]), add(a, b, 2.5)));
  Stack s = d.call_boxed(d.op("sum"), {a, std::vector<int64_t>{1}, true});
  EXPECT_TRUE(equal(std::get<Tensor>(s[0]), sum(a, {1}, true)));
  Stack m = d.call_boxed(d.op("matmul"), {a, rand({4, 2})});
  EXPECT_EQ(std::get<Tensor>(m[0]).sizes().vec(), (std::vector<int64_t>{3, 2}));
  // In-place ops return their argument.
  Tensor f = zeros({2});
  Stack fr = d.call_boxed(d.op("fill_"), {f, 7.0});
  EXPECT_TRUE(std::get<Tensor>(fr[0]).is_same(f));
  EXPECT_EQ(f[1].item<float>(), 7.0f);
  EXPECT_NE(error_of([&] {
              d.call_boxed(d.op("add.Tensor"), {a, int64_t(1)});
            }).find("argument 1 ('other') must be a Tensor"),
            std::string::npos);
  EXPECT_NE(error_of([&] { d.call_boxed(d.op("add.Tensor"), {a}); }).find("argument 1 ('other')"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              d.call_boxed(d.op("softmax"), {a});
            }).find("argument 1 ('dim') must be given (it has no default); a int"),
            std::string::npos);
  // Optional arguments may be omitted or None; None for an argument with a default means the default.
  Tensor w = rand({5, 4});
  Stack l = d.call_boxed(d.op("linear"), {a, w});
  EXPECT_EQ(std::get<Tensor>(l[0]).sizes().vec(), (std::vector<int64_t>{3, 5}));
  Stack l2 = d.call_boxed(d.op("linear"), {a, w, std::monostate{}});
  EXPECT_TRUE(equal(std::get<Tensor>(l2[0]), std::get<Tensor>(l[0])));
  Stack s2 = d.call_boxed(d.op("sum"), {a, std::monostate{}, std::monostate{}});
  EXPECT_EQ(std::get<Tensor>(s2[0]).dim(), 0);
}

TEST_F(Dispatch, OpLookup) {
  Dispatcher& d = Dispatcher::instance();
  EXPECT_EQ(d.find_op("add"), &d.op("add.Tensor"));  // the only overload
  EXPECT_EQ(d.find_op("pow"), nullptr);              // two overloads, none unnamed
  EXPECT_EQ(d.find_op("no_such_op"), nullptr);
  EXPECT_NE(error_of([&] { d.op("ad.Tensor"); }).find("did you mean one of: "), std::string::npos);
  d.define_op("test_define(Tensor self) -> Tensor", "relu", "test");
  EXPECT_NO_THROW(d.define_op("test_define(Tensor self) -> Tensor", "relu", "test"));  // same again: no-op
  EXPECT_NE(error_of([&] {
              d.define_op("test_define(Tensor self, int x) -> Tensor", "relu", "test");
            }).find("is already defined as"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              d.define_op("test_nometa(Tensor self) -> Tensor", "", "test");
            }).find("needs `meta_like`"),
            std::string::npos);
  // A failed definition leaves nothing behind.
  EXPECT_NE(error_of([&] {
              d.define_op("test_badalias(Tensor(a!) self) -> Tensor(b!)", "", "test");
            }).find("return 0 aliases no Tensor argument"),
            std::string::npos);
  EXPECT_EQ(d.find_op("test_badalias"), nullptr);
  EXPECT_NE(error_of([&] {
              d.define_op("test_bigdefault(Tensor self, int x=99999999999999999999999) -> Tensor", "relu",
                          "test");
            }).find("is out of range"),
            std::string::npos);
  EXPECT_EQ(d.find_op("test_bigdefault"), nullptr);
  // An in-place op without meta_like: the output is the aliased input.
  OperatorEntry& inplace = d.define_op("test_inplace_(Tensor(a!) self, int v) -> Tensor(a!)", "", "test");
  Counter c{{0}, 4.0};
  ScopedKernel k("test_inplace_", kCPU, k_count, &c);
  Tensor x = zeros({2});
  Stack r = d.call_boxed(inplace, {x, int64_t(1)});
  EXPECT_TRUE(std::get<Tensor>(r[0]).is_same(x));
  EXPECT_EQ(x[0].item<float>(), 4.0f);
}

TEST_F(Dispatch, MixedDevicesAreAnError) {
  Tensor c = full({2}, 1.0f), f = full({2}, 1.0f, fake);
  EXPECT_EQ(
      error_of([&] { add(c, f); }),
      "add.Tensor: expected all tensors on the same device, got cpu and fake_device:0 (tensor argument 1); "
      "move them to one device with .to(...)");
  // A 0-dim CPU tensor may join a device tensor (PyTorch's rule); it is moved for the kernel.
  Tensor r = add(f, full({}, 2.0f));
  EXPECT_EQ(r.device().type(), kPrivateUse1);
  EXPECT_TRUE(equal(r, full({2}, 3.0f)));
}

TEST_F(Dispatch, ConcurrentRegistrationWhileDispatching) {
  Dispatcher& d = Dispatcher::instance();
  std::atomic<bool> stop{false};
  std::atomic<int> dispatched{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 2; ++t) {
    callers.emplace_back([&] {
      Tensor a = full({4}, 1.0f), b = full({4}, 2.0f);
      while (!stop.load()) {
        Tensor r = add(a, b);
        if (r.data_ptr<float>()[3] != 3.0f) std::abort();
        dispatched++;
      }
    });
  }
  constexpr int kThreads = 4, kOpsPerThread = 40;
  static Counter counters[kThreads][kOpsPerThread];
  std::vector<std::thread> registrars;
  for (int t = 0; t < kThreads; ++t) {
    registrars.emplace_back([&, t] {
      // Start once the callers are dispatching: on a loaded machine the registrations could
      // otherwise all finish before a caller has made its first call, and nothing would overlap.
      while (dispatched.load() == 0) std::this_thread::yield();
      for (int i = 0; i < kOpsPerThread; ++i) {
        std::string name = "test_conc_" + std::to_string(t) + "_" + std::to_string(i);
        OperatorEntry& op = d.define_op(name + "(Tensor self) -> Tensor", "relu", "test");
        counters[t][i].value = t * 1000 + i;
        d.register_kernel(op, kCPU, Functionality::Dense,
                          KernelEntry{k_count, &counters[t][i], TESSERA_DTYPE_MASK_ALL, 0, "test"});
        // Registrations for the same op on other slots from this thread too.
        d.register_kernel(op, kPrivateUse1, Functionality::Dense,
                          KernelEntry{k_count, &counters[t][i], TESSERA_DTYPE_MASK_ALL, 0, "test"});
      }
    });
  }
  for (auto& th : registrars) th.join();
  stop = true;
  for (auto& th : callers) th.join();
  EXPECT_GT(dispatched.load(), 0);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kOpsPerThread; ++i) {
      std::string name = "test_conc_" + std::to_string(t) + "_" + std::to_string(i);
      OperatorEntry& op = d.op(name);
      ASSERT_EQ(d.resolution(op, kCPU, kFloat32), Resolution::Kernel) << name;
      ASSERT_EQ(d.backends_with_kernel(op), (std::vector<DeviceType>{kCPU, kPrivateUse1})) << name;
      Tensor r = std::get<Tensor>(d.call_boxed(op, {full({1}, 0.0f)})[0]);
      ASSERT_EQ(r.item<float>(), float(t * 1000 + i)) << name;
    }
  }
}

}  // namespace
}  // namespace tessera
