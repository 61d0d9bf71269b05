// Mixed precision: autocast by op policy (Note [Autocast policy]) on the CPU and on the reference
// accelerator, gradients through the casts, the gradient scaler (Note [Gradient scaler]), and an
// MLP trained under autocast.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <thread>

#include "gradcheck.h"
#include "tessera/amp.h"
#include "mlp.h"
#include "tessera/nn.h"

namespace tessera {
namespace {

namespace ag = autograd;
using amp::AutocastGuard;
using amp::CastPolicy;

using testing::error_of;

// Rounds a float to bfloat16 (round to nearest, ties to even), by its bits: the test's own rounding.
double round_bf16(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  b = (b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u;
  float r;
  std::memcpy(&r, &b, 4);
  return r;
}

std::vector<float> floats_of(const Tensor& t) {
  Tensor c = t.cpu().to(kFloat32).contiguous();
  const float* p = c.const_data_ptr<float>();
  return std::vector<float>(p, p + c.numel());
}

TEST(Autocast, OpsRunInTheirPolicysDtypeOnlyInsideTheGuard) {
  Tensor a = randn({4, 8}), b = randn({8, 3});
  EXPECT_EQ(matmul(a, b).dtype(), kFloat32);
  {
    AutocastGuard g(DeviceType::CPU);  // bfloat16
    EXPECT_TRUE(amp::is_autocast_enabled(DeviceType::CPU));
    Tensor m = matmul(a, b);
    EXPECT_EQ(m.dtype(), kBFloat16);                               // lower precision
    EXPECT_EQ(softmax(m, 1).dtype(), kFloat32);                    // float32 policy
    EXPECT_EQ(add(a, a).dtype(), kFloat32);                        // no policy: follows its inputs
    EXPECT_EQ(add(m, m).dtype(), kBFloat16);
    EXPECT_EQ(cat({m, randn({4, 3})}, 0).dtype(), kFloat32);       // promote: the widest input
    EXPECT_EQ(matmul(a.to(kFloat64), b.to(kFloat64)).dtype(), kFloat64);  // float64 is left alone
    {
      AutocastGuard off(DeviceType::CPU, kBFloat16, false);
      EXPECT_EQ(matmul(a, b).dtype(), kFloat32);
    }
    {
      AutocastGuard half(DeviceType::CPU, kFloat16);
      EXPECT_EQ(amp::autocast_dtype(DeviceType::CPU), kFloat16);
      EXPECT_EQ(linear(a, b.transpose(0, 1), std::nullopt).dtype(), kFloat16);
    }
    EXPECT_EQ(matmul(a, b).dtype(), kBFloat16);
    int other_thread = -1;
    std::thread t([&] { other_thread = int(matmul(a, b).dtype()); });  // per thread
    t.join();
    EXPECT_EQ(other_thread, int(kFloat32));
  }
  EXPECT_FALSE(amp::is_autocast_enabled(DeviceType::CPU));
  EXPECT_EQ(matmul(a, b).dtype(), kFloat32);
}

TEST(Autocast, MatmulComputesOnTheRoundedInputs) {
  const int64_t m = 5, k = 33, n = 4;
  Tensor a = randn({m, k}), b = randn({k, n});
  std::vector<float> av = floats_of(a), bv = floats_of(b);
  Tensor got;
  {
    AutocastGuard g(DeviceType::CPU);
    got = matmul(a, b);
  }
  std::vector<float> gv = floats_of(got);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double want = 0, mag = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double x = round_bf16(av[size_t(i * k + p)]) * round_bf16(bv[size_t(p * n + j)]);
        want += x;
        mag += std::fabs(x);
      }
      // The result is rounded to bfloat16 once (2^-8 relative), plus float accumulation.
      EXPECT_NEAR(gv[size_t(i * n + j)], want, mag * 8e-3 + 1e-6) << i << "," << j;
    }
}

TEST(Autocast, GradientsFlowBackThroughTheCastsInFloat32) {
  Tensor x = randn({6, 5});
  Tensor w = ag::set_requires_grad(randn({5, 3}));
  {
    AutocastGuard g(DeviceType::CPU);
    Tensor y = matmul(x, w);
    ASSERT_EQ(y.dtype(), kBFloat16);
    ag::backward(y.to(kFloat32).sum());
  }
  Tensor gw = ag::grad(w);
  ASSERT_TRUE(gw.defined());
  EXPECT_EQ(gw.dtype(), kFloat32);
  // d sum(x w) / d w[p][j] = sum_i x[i][p], with x rounded to bfloat16 on the way in.
  std::vector<float> xv = floats_of(x), gv = floats_of(gw);
  for (int p = 0; p < 5; ++p) {
    double want = 0;
    for (int i = 0; i < 6; ++i) want += round_bf16(xv[size_t(i * 5 + p)]);
    for (int j = 0; j < 3; ++j) EXPECT_NEAR(gv[size_t(p * 3 + j)], want, 0.02 * std::fabs(want) + 0.02) << p;
  }
}

// Note [Autocast cast cache]: a weight used by two ops in one region is cast once; its gradient
// gets both uses; the cache empties with the outermost guard, and a weight written in between is
// cast again.
TEST(Autocast, AWeightIsCastOncePerRegion) {
  Tensor x = randn({4, 5});
  Tensor w = ag::set_requires_grad(randn({5, 5}));
  Tensor y;
  {
    AutocastGuard outer(DeviceType::CPU);
    EXPECT_EQ(amp::autocast_cached_casts(), 0u);
    Tensor h = matmul(x, w);
    {
      AutocastGuard inner(DeviceType::CPU);  // nested: the same region
      y = matmul(h, w);
    }
    EXPECT_EQ(amp::autocast_cached_casts(), 1u);  // w's bfloat16 cast, once; x is not a leaf weight
    ASSERT_EQ(y.dtype(), kBFloat16);
    ag::backward(y.to(kFloat32).sum());
  }
  EXPECT_EQ(amp::autocast_cached_casts(), 0u);
  // Both uses reach w: compare with the same computation without autocast on bf16-rounded values.
  Tensor gw = ag::grad(w);
  ASSERT_TRUE(gw.defined());
  Tensor w2 = ag::set_requires_grad(ag::detach(w).to(kBFloat16).to(kFloat32));
  Tensor xr = x.to(kBFloat16).to(kFloat32);
  ag::backward(matmul(matmul(xr, w2).to(kBFloat16).to(kFloat32), w2).sum());
  std::vector<float> got = floats_of(gw), want = floats_of(ag::grad(w2));
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 0.05 * std::fabs(want[i]) + 0.05) << i;
  {
    AutocastGuard g(DeviceType::CPU);
    Tensor a = matmul(x, w);
    {
      ag::NoGradGuard no_grad;
      w.mul_(scalar_tensor(2.0, kFloat32));  // written: the next use casts again
    }
    Tensor b = matmul(x, w);
    EXPECT_NEAR(floats_of(b.to(kFloat32))[0], 2 * floats_of(a.to(kFloat32))[0],
                0.02 * std::fabs(floats_of(a.to(kFloat32))[0]) + 0.02);
  }
}

TEST(Autocast, PoliciesCanBeChangedPerDeviceType) {
  EXPECT_EQ(amp::autocast_policy(DeviceType::CPU, "matmul"), CastPolicy::LowerPrecision);
  EXPECT_EQ(amp::autocast_policy(DeviceType::CPU, "softmax"), CastPolicy::Float32);
  EXPECT_EQ(amp::autocast_policy(DeviceType::CPU, "relu"), CastPolicy::None);
  const auto lower = amp::autocast_ops(DeviceType::CPU, CastPolicy::LowerPrecision);
  EXPECT_NE(std::find(lower.begin(), lower.end(), "conv2d"), lower.end());
  amp::set_autocast_policy(DeviceType::CPU, "relu", CastPolicy::LowerPrecision);
  {
    AutocastGuard g(DeviceType::CPU);
    EXPECT_EQ(relu(randn({3})).dtype(), kBFloat16);
    AutocastGuard other(DeviceType::PrivateUse2);  // another device type's policy is its own
    EXPECT_EQ(amp::autocast_policy(DeviceType::PrivateUse2, "relu"), CastPolicy::None);
  }
  amp::set_autocast_policy(DeviceType::CPU, "relu", CastPolicy::None);
  const std::string unknown = error_of([] { amp::set_autocast_policy(DeviceType::CPU, "no_such_op", CastPolicy::Float32); });
  EXPECT_NE(unknown.find("no op 'no_such_op'"), std::string::npos) << unknown;
  const std::string bad_dtype = error_of([] { AutocastGuard g(DeviceType::CPU, kFloat32); });
  EXPECT_NE(bad_dtype.find("bfloat16 or float16"), std::string::npos) << bad_dtype;
  EXPECT_FALSE(amp::is_autocast_enabled(DeviceType::CPU));  // the refused guard changed nothing
}

TEST(Autocast, WorksOnAThirdPartyDeviceWithoutItsCode) {
  if (device_count("my_hardware_device") == 0) GTEST_SKIP() << "the reference accelerator is not built";
  Tensor a = randn({4, 8}).to("my_hardware_device"), b = randn({8, 3}).to("my_hardware_device");
  const DeviceType t = Device("my_hardware_device").type();
  {
    AutocastGuard cpu_only(DeviceType::CPU);  // autocast for the CPU does not touch the device
    EXPECT_EQ(matmul(a, b).dtype(), kFloat32);
  }
  AutocastGuard g(t);
  Tensor m = matmul(a, b);
  EXPECT_EQ(m.dtype(), kBFloat16);
  EXPECT_EQ(m.device().type(), t);
  EXPECT_EQ(softmax(m, 1).dtype(), kFloat32);
}

// The reference accelerator's manifest lists gelu under "float32" (Note [Autocast policies from the
// manifest]): gelu runs on float32 inputs on that device under autocast, and stays None on the CPU.
TEST(Autocast, ThePluginsManifestSetsItsDevicesPolicies) {
  if (device_count("my_hardware_device") == 0) GTEST_SKIP() << "the reference accelerator is not built";
  const DeviceType t = Device("my_hardware_device").type();
  EXPECT_EQ(amp::autocast_policy(t, "gelu"), CastPolicy::Float32);
  EXPECT_EQ(amp::autocast_policy(DeviceType::CPU, "gelu"), CastPolicy::None);
  {
    AutocastGuard g(t, kFloat16);
    Tensor h = matmul(randn({4, 8}).to("my_hardware_device"), randn({8, 3}).to("my_hardware_device"));
    ASSERT_EQ(h.dtype(), kFloat16);
    EXPECT_EQ(gelu(h).dtype(), kFloat32);  // cast up by the manifest's policy
    EXPECT_EQ(relu(h).dtype(), kFloat16);  // the default table otherwise
  }
  // An application's choice wins over the manifest's.
  amp::set_autocast_policy(t, "gelu", CastPolicy::None);
  EXPECT_EQ(amp::autocast_policy(t, "gelu"), CastPolicy::None);
  amp::set_autocast_policy(t, "gelu", CastPolicy::Float32);
}

// The reference accelerator's code sets sigmoid to float32 through TESSERA_EXT_AUTOCAST_POLICY
// (Note [Autocast policies in code]), over the defaults and next to its manifest's gelu.
TEST(Autocast, ThePluginsCodeSetsItsDevicesPolicies) {
  if (device_count("my_hardware_device") == 0) GTEST_SKIP() << "the reference accelerator is not built";
  const DeviceType t = Device("my_hardware_device").type();
  EXPECT_EQ(amp::autocast_policy(t, "sigmoid"), CastPolicy::Float32);
  EXPECT_EQ(amp::autocast_policy(t, "gelu"), CastPolicy::Float32);  // the manifest's still applies
  EXPECT_EQ(amp::autocast_policy(DeviceType::CPU, "sigmoid"), CastPolicy::None);
  {
    AutocastGuard g(t, kFloat16);
    Tensor h = matmul(randn({4, 8}).to("my_hardware_device"), randn({8, 3}).to("my_hardware_device"));
    ASSERT_EQ(h.dtype(), kFloat16);
    EXPECT_EQ(sigmoid(h).dtype(), kFloat32);  // cast up by the plugin's code
    EXPECT_EQ(tanh(h).dtype(), kFloat16);
  }
  amp::set_autocast_policy(t, "sigmoid", CastPolicy::None);  // the application's choice wins
  EXPECT_EQ(amp::autocast_policy(t, "sigmoid"), CastPolicy::None);
  amp::set_autocast_policy(t, "sigmoid", CastPolicy::Float32);
}

// The second accelerator (the same source) also gives an entry naming no op and one with a value
// out of range: both are logged naming the plugin and skipped; its good entry applies.
TEST(Autocast, BadCodeEntriesAreLoggedAndSkipped) {
  // (ctest points TESSERA_PLUGIN_PATH at the tests' plugin folder, which holds it.)
  if (!getenv("TESSERA_PLUGIN_PATH")) GTEST_SKIP() << "TESSERA_PLUGIN_PATH does not name the tests' plugin folder";
  ASSERT_EQ(device_count("second_accelerator"), 1);
  const DeviceType t = Device("second_accelerator").type();
  ::testing::internal::CaptureStderr();
  const CastPolicy sig = amp::autocast_policy(t, "sigmoid");
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(sig, CastPolicy::Float32);
  EXPECT_EQ(amp::autocast_policy(t, "relu"), CastPolicy::None);
  EXPECT_NE(log.find("plugin 'second_accelerator': autocast policy entry 1 names no op of the contract "
                     "('no_such_op')"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("autocast policy entry 2 ('relu') has policy 7, not a tessera_autocast_policy_t"),
            std::string::npos)
      << log;
}

// ---- the gradient scaler

struct OneParam {
  Tensor p = ag::set_requires_grad(full({3}, 1.0));
  nn::optim::SGD opt{{p}, {.lr = 0.5}};
};

TEST(GradScaler, ScalesUnscalesAndSteps) {
  OneParam m;
  nn::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 2});
  Tensor loss = (m.p * tensor(std::vector<double>{1, 2, 3}).to(kFloat32)).sum();
  Tensor scaled = scaler.scale(loss);
  EXPECT_DOUBLE_EQ(scaled.item<double>(), 1024.0 * loss.item<double>());
  ag::backward(scaled);
  EXPECT_FLOAT_EQ(floats_of(ag::grad(m.p))[2], 3 * 1024.0f);
  EXPECT_TRUE(scaler.step(m.opt));  // unscales, then steps: p -= 0.5 * (1, 2, 3)
  EXPECT_EQ(floats_of(m.p), (std::vector<float>{0.5f, 0.0f, -0.5f}));
  const std::string twice = error_of([&] { scaler.unscale_(m.opt); });
  EXPECT_NE(twice.find("already called"), std::string::npos) << twice;
  scaler.update();
  EXPECT_EQ(scaler.growth_tracker(), 1);
  EXPECT_EQ(scaler.get_scale(), 1024.0);
  m.opt.zero_grad();
  ag::backward(scaler.scale(m.p.sum()));
  EXPECT_TRUE(scaler.step(m.opt));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 2048.0);  // two good steps: grown
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

TEST(GradScaler, SkipsAStepWithANonFiniteGradientAndBacksOff) {
  OneParam m;
  nn::GradScaler scaler({.init_scale = 256.0});
  Tensor w = tensor(std::vector<double>{1, INFINITY, 1}).to(kFloat32);
  ag::backward(scaler.scale((m.p * w).sum()));
  EXPECT_FALSE(scaler.step(m.opt));
  EXPECT_TRUE(scaler.found_inf());
  EXPECT_EQ(floats_of(m.p), (std::vector<float>{1, 1, 1}));  // untouched
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 128.0);
  EXPECT_FALSE(scaler.found_inf());
  nn::GradScaler off({.enabled = false});
  Tensor l = m.p.sum();
  EXPECT_TRUE(off.scale(l).is_same(l));
  const std::string bad = error_of([] { nn::GradScaler s({.init_scale = -1}); });
  EXPECT_NE(bad.find("init_scale"), std::string::npos) << bad;
}

// Note [Gradient scaler]: the capturable scaler (tensors, no read-back, a masked step) gives the
// host scaler's steps, skips and scales on a run whose first scales overflow the gradients (a
// huge init_scale: steps skipped and the scale halved until the gradients are finite) and then
// grows every two good steps.
TEST(GradScaler, TheCapturableScalerStepsSkipsAndScalesAsTheHostOne) {
  std::vector<std::vector<double>> scales(2);
  std::vector<std::vector<float>> params(2);
  for (int capturable = 0; capturable < 2; ++capturable) {
    Tensor p = ag::set_requires_grad(full({3}, 1.0));
    nn::optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .capturable = capturable == 1});
    nn::GradScaler scaler({.init_scale = 3e38, .growth_interval = 2, .capturable = capturable == 1});
    const Tensor w = tensor(std::vector<double>{1, -2, 3}).to(kFloat32);
    for (int s = 0; s < 12; ++s) {
      opt.zero_grad();
      ag::backward(scaler.scale((p * p * w).sum()));
      scaler.step(opt);
      scales[size_t(capturable)].push_back(scaler.get_scale());
      scaler.update();
    }
    params[size_t(capturable)] = floats_of(p);
  }
  // By hand: 3e38 * 6 overflows float32, as does 1.5e38 * 6 (> 3.4e38); 7.5e37 * 6 = 4.5e38 does
  // too, as the gradient of p * p * w is 2 p w (|6| at p = 1, w = 3): 3.75e37 * 6 = 2.25e38 is the
  // first finite one. So three skipped steps, then growth every two good steps.
  EXPECT_EQ(scales[0], scales[1]);
  EXPECT_EQ(params[0], params[1]);
  EXPECT_DOUBLE_EQ(scales[0][0], 3e38);
  EXPECT_DOUBLE_EQ(scales[0][3], 3.75e37);
  EXPECT_NE(params[0], (std::vector<float>{1, 1, 1}));  // it stepped after the skips
  // A capturable scaler needs a capturable optimizer: its step always runs.
  Tensor q = ag::set_requires_grad(full({2}, 1.0));
  nn::optim::SGD plain({q}, {.lr = 0.1});
  nn::GradScaler scaler({.capturable = true});
  ag::backward(scaler.scale(q.sum()));
  const std::string msg = error_of([&] { scaler.step(plain); });
  EXPECT_NE(msg.find("construct the optimizer with capturable = true"), std::string::npos) << msg;
}

// An MLP trained with bfloat16 autocast on the CPU (and float16 with the scaler on the reference
// accelerator) reaches the float32 training's target (autograd.Training.*: below 0.05 in 150 steps).
using test::Mlp;

std::vector<double> train_mixed(const std::string& device, DType low, bool scaler_on, int steps) {
  manual_seed(7);
  Mlp model(nn::Options{Device(DeviceType::CPU)});
  model.to(Device(device));
  nn::Dataset t = nn::make_classification(256, 8, 4);
  Tensor x = t.x.to(device), y = t.y.to(device);
  nn::optim::Adam opt(model.parameters(), {.lr = 0.02});
  nn::GradScaler scaler({.enabled = scaler_on});
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    Tensor loss;
    {
      AutocastGuard g(Device(device).type(), low);
      Tensor logits = model.forward(x);
      EXPECT_EQ(logits.dtype(), low);  // the linears ran in the lower precision
      loss = nn::cross_entropy(logits, y);
    }
    EXPECT_EQ(loss.dtype(), kFloat32);  // cross_entropy's log_softmax runs in float32
    ag::backward(scaler.scale(loss));
    scaler.step(opt);
    scaler.update();
    losses.push_back(loss.cpu().item<double>());
  }
  for (const Tensor& p : model.parameters()) EXPECT_EQ(p.dtype(), kFloat32);  // master weights stay float32
  return losses;
}

TEST(Autocast, MlpTrainsInBfloat16OnTheCpu) {
  std::vector<double> l = train_mixed("cpu", kBFloat16, false, 150);
  std::printf("cpu bf16 autocast: loss %.6f -> %.6f in 150 steps\n", l.front(), l.back());
  EXPECT_GT(l.front(), 1.0);
  EXPECT_LT(l.back(), 0.05);
  EXPECT_EQ(l, train_mixed("cpu", kBFloat16, false, 150));  // deterministic
}

TEST(Autocast, MlpTrainsInFloat16WithTheScalerOnTheReferenceAccelerator) {
  if (device_count("my_hardware_device") == 0) GTEST_SKIP() << "the reference accelerator is not built";
  std::vector<double> l = train_mixed("my_hardware_device", kFloat16, true, 150);
  std::printf("my_hardware_device f16 autocast + scaler: loss %.6f -> %.6f in 150 steps\n", l.front(), l.back());
  EXPECT_GT(l.front(), 1.0);
  EXPECT_LT(l.back(), 0.05);
}

}  // namespace
}  // namespace tessera
