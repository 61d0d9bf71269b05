// The fused optimizer step (Note [Fused optimizer step] in tessera/nn.h): _fused_adam_'s CPU kernel
// and composite against the unfused step and against PyTorch's update written out in double; the
// reference accelerator's own kernel for it; the op's errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "../accelerator/accel_test_util.h"
#include "gradcheck.h"
#include "tessera/dispatcher.h"
#include "tessera/plugin_loader.h"
#include "tessera/nn.h"

namespace tessera {
namespace {

namespace ag = autograd;
namespace optim = nn::optim;
using testing::values;

// Parameters of several shapes with fresh random values (and fixed gradients per step, below).
std::vector<Tensor> make_params(std::mt19937& rng, DType dtype, const Device& device, bool with_transposed) {
  std::vector<std::vector<int64_t>> shapes = {{257}, {33, 65}, {4, 5, 6}, {1}};
  std::vector<Tensor> ps;
  for (const auto& s : shapes) ps.push_back(nn::parameter(testing::uniform64(rng, s).to(dtype).to(device)));
  if (with_transposed) {  // a non-contiguous parameter: the CPU kernel leaves it to the composite
    Tensor t = testing::uniform64(rng, {17, 9}).to(dtype).to(device).t();
    ps.push_back(nn::parameter(t));
  }
  return ps;
}

std::vector<Tensor> clones(const std::vector<Tensor>& ps) {
  std::vector<Tensor> out;
  for (const Tensor& p : ps) {
    Tensor c = p.is_contiguous() ? p.clone() : p.t().contiguous().t();  // keep the layout
    out.push_back(nn::parameter(c));
  }
  return out;
}

// Steps `opt` with gradient g_k (the same for every optimizer given the same seed) on each param.
void run_steps(optim::Optimizer& opt, const std::vector<Tensor>& ps, int steps, uint32_t seed) {
  std::mt19937 rng(seed);
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    Tensor loss;
    for (const Tensor& p : ps) {
      Tensor r = testing::uniform64(rng, p.sizes().vec(), -2, 2).to(p.dtype()).to(p.device());
      Tensor term = (p * r).sum() + (p * p).sum() * 0.5;  // gradient r + p
      loss = loss.defined() ? loss + term : term;
    }
    ag::backward(loss);
    opt.step();
  }
}

double max_rel_diff(const Tensor& a, const Tensor& b) {
  const auto va = values(a), vb = values(b);
  EXPECT_EQ(va.size(), vb.size());
  double worst = 0;
  for (size_t i = 0; i < va.size(); ++i) worst = std::max(worst, std::fabs(va[i] - vb[i]) / (1 + std::fabs(vb[i])));
  return worst;
}

std::unique_ptr<optim::Optimizer> adam(const std::vector<Tensor>& ps, bool adamw, bool fused) {
  optim::AdamOptions o{.lr = 0.05, .weight_decay = 0.02};
  o.fused = fused;
  if (adamw) return std::make_unique<optim::AdamW>(ps, o);
  return std::make_unique<optim::Adam>(ps, o);
}

TEST(FusedAdam, TheCpuKernelAndTheCompositeAgreeWithTheUnfusedStep) {
  std::mt19937 rng(std::random_device{}());
  Dispatcher& d = Dispatcher::instance();
  const OperatorEntry& op = d.op("_fused_adam_");
  ASSERT_TRUE(ensure_backend_loaded(DeviceType::CPU));
  EXPECT_EQ(d.resolution(op, DeviceType::CPU, kFloat32), Resolution::Kernel);
  EXPECT_EQ(d.resolution(op, DeviceType::CPU, kFloat64), Resolution::Kernel);
  EXPECT_EQ(d.resolution(op, DeviceType::CPU, kBFloat16), Resolution::Composite);  // the kernel takes f32, f64
  for (DType dtype : {kFloat32, kFloat64, kBFloat16}) {
    for (bool adamw : {false, true}) {
      const uint32_t seed = rng();
      std::vector<Tensor> fused = make_params(rng, dtype, Device("cpu"), /*with_transposed=*/true);
      std::vector<Tensor> plain = clones(fused), before = clones(fused);
      auto a = adam(fused, adamw, true), b = adam(plain, adamw, false);
      run_steps(*a, fused, 6, seed);
      run_steps(*b, plain, 6, seed);
      const double tol = dtype == kFloat64 ? 1e-13 : dtype == kFloat32 ? 2e-6 : 1e-2;
      for (size_t i = 0; i < fused.size(); ++i) {
        EXPECT_LT(max_rel_diff(fused[i], plain[i]), tol) << dtype << " adamw " << adamw << " param " << i;
        if (fused[i].numel() > 1) {  // (one element may end near where it began)
          EXPECT_GT(max_rel_diff(fused[i], before[i]), 0.05) << "the step moved nothing";
        }
        EXPECT_EQ(fused[i].is_contiguous(), plain[i].is_contiguous());
      }
    }
  }
}

// PyTorch's Adam and AdamW (torch/optim/adam.py, single tensor) written out in double for one
// element; the fused kernel in float64 must agree to rounding.
TEST(FusedAdam, Float64StepsMatchPyTorchsUpdateInDouble) {
  std::mt19937 rng(std::random_device{}());
  for (bool adamw : {false, true}) {
    Tensor p = nn::parameter(testing::uniform64(rng, {1000}));
    std::vector<double> pv = values(p), m(pv.size(), 0), v(pv.size(), 0);
    auto opt = adam({p}, adamw, true);
    std::uniform_real_distribution<double> u(-3, 3);
    for (int t = 1; t <= 5; ++t) {
      std::vector<double> r(pv.size());
      for (double& x : r) x = u(rng);
      opt->zero_grad();
      ag::backward((p * tensor(r)).sum());  // gradient r
      opt->step();
      const double lr = 0.05, wd = 0.02, bc1 = 1 - std::pow(0.9, t), bc2 = 1 - std::pow(0.999, t);
      const std::vector<double> got = values(p);
      for (size_t i = 0; i < pv.size(); ++i) {
        double g = r[i];
        if (adamw) pv[i] *= 1 - lr * wd;
        else g += wd * pv[i];
        m[i] = 0.9 * m[i] + 0.1 * g;
        v[i] = 0.999 * v[i] + 0.001 * g * g;
        pv[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + 1e-8);
        ASSERT_NEAR(got[i], pv[i], 1e-12 * (1 + std::fabs(pv[i]))) << "step " << t << " element " << i;
      }
    }
  }
}

std::unique_ptr<optim::Optimizer> sgd(const std::vector<Tensor>& ps, double dampening, bool nesterov, double wd,
                                      bool fused) {
  optim::SGDOptions o{.lr = 0.05, .momentum = 0.9, .dampening = dampening, .weight_decay = wd, .nesterov = nesterov};
  o.fused = fused;
  return std::make_unique<optim::SGD>(ps, o);
}

TEST(FusedSgd, TheCpuKernelAndTheCompositeAgreeWithTheUnfusedStep) {
  std::mt19937 rng(std::random_device{}());
  Dispatcher& d = Dispatcher::instance();
  ASSERT_TRUE(ensure_backend_loaded(DeviceType::CPU));
  EXPECT_EQ(d.resolution(d.op("_fused_sgd_"), DeviceType::CPU, kFloat32), Resolution::Kernel);
  EXPECT_EQ(d.resolution(d.op("_fused_sgd_"), DeviceType::CPU, kBFloat16), Resolution::Composite);
  struct Config {
    double dampening;
    bool nesterov;
    double wd;
  };
  for (DType dtype : {kFloat32, kFloat64, kBFloat16}) {
    for (Config c : {Config{0, false, 0}, Config{0.1, false, 0.01}, Config{0, true, 0}, Config{0, true, 0.01}}) {
      const uint32_t seed = rng();
      std::vector<Tensor> fused = make_params(rng, dtype, Device("cpu"), /*with_transposed=*/true);
      std::vector<Tensor> plain = clones(fused);
      auto a = sgd(fused, c.dampening, c.nesterov, c.wd, true), b = sgd(plain, c.dampening, c.nesterov, c.wd, false);
      run_steps(*a, fused, 5, seed);
      run_steps(*b, plain, 5, seed);
      const double tol = dtype == kFloat64 ? 1e-13 : dtype == kFloat32 ? 2e-6 : 1e-2;
      for (size_t i = 0; i < fused.size(); ++i)
        EXPECT_LT(max_rel_diff(fused[i], plain[i]), tol)
            << dtype << " dampening " << c.dampening << " nesterov " << c.nesterov << " wd " << c.wd << " param " << i;
    }
  }
}

// torch/optim/sgd.py's update written out in double (the first step's buffer is the gradient).
TEST(FusedSgd, Float64StepsMatchPyTorchsUpdateInDouble) {
  std::mt19937 rng(std::random_device{}());
  for (bool nesterov : {false, true}) {
    const double lr = 0.05, mom = 0.9, damp = nesterov ? 0.0 : 0.2, wd = 0.01;
    Tensor p = nn::parameter(testing::uniform64(rng, {300}));
    std::vector<double> pv = values(p), buf(pv.size(), 0);
    optim::SGD opt({p}, {.lr = lr, .momentum = mom, .dampening = damp, .weight_decay = wd, .nesterov = nesterov});
    std::uniform_real_distribution<double> u(-3, 3);
    for (int t = 1; t <= 4; ++t) {
      std::vector<double> r(pv.size());
      for (double& x : r) x = u(rng);
      opt.zero_grad();
      ag::backward((p * tensor(r)).sum());
      opt.step();
      const std::vector<double> got = values(p);
      for (size_t i = 0; i < pv.size(); ++i) {
        const double g = r[i] + wd * pv[i];
        buf[i] = t == 1 ? g : mom * buf[i] + (1 - damp) * g;
        pv[i] -= lr * (nesterov ? g + mom * buf[i] : buf[i]);
        ASSERT_NEAR(got[i], pv[i], 1e-12 * (1 + std::fabs(pv[i]))) << "step " << t << " element " << i;
      }
    }
  }
}

// A third-party device trains with Adam without optimizer code: the reference accelerator registers
// its own _fused_adam_ kernel, which the step uses (one launch per parameter), with the CPU's results.
TEST(FusedAdam, TheAcceleratorsOwnKernelRunsTheStep) {
  if (device_count(accel_test::kAccel) == 0) GTEST_SKIP() << "the reference accelerator is not built";
  std::mt19937 rng(std::random_device{}());
  const Device dev(accel_test::kAccel);
  const OperatorEntry& op = Dispatcher::instance().op("_fused_adam_");
  EXPECT_EQ(Dispatcher::instance().resolution(op, dev.type(), kFloat32), Resolution::Kernel);
  const uint32_t seed = rng();
  std::vector<Tensor> on_cpu = make_params(rng, kFloat32, Device("cpu"), false), on_dev;
  for (const Tensor& p : on_cpu) on_dev.push_back(nn::parameter(ag::detach(p).to(dev)));
  auto a = adam(on_cpu, true, true), b = adam(on_dev, true, true);
  const int64_t launches = accel_test::kernel_count("_fused_adam_");
  ASSERT_GE(launches, 0) << "the accelerator reports no counter for _fused_adam_";
  run_steps(*a, on_cpu, 4, seed);
  run_steps(*b, on_dev, 4, seed);
  synchronize(dev);
  EXPECT_EQ(accel_test::kernel_count("_fused_adam_") - launches, int64_t(4 * on_dev.size()));
  for (size_t i = 0; i < on_cpu.size(); ++i) EXPECT_LT(max_rel_diff(on_dev[i], on_cpu[i]), 2e-6) << "param " << i;
}

TEST(FusedAdam, BadArgumentsAreRefusedAndChangeNothing) {
  Tensor p = tensor(std::vector<float>{1, 2, 3}), m = zeros({3}), v = zeros({3}), g = ones({3});
  auto refused = [&](const Tensor& pp, const Tensor& mm, const Tensor& vv, const Tensor& gg, FusedAdamArgs a,
                     const std::string& needle) {
    try {
      _fused_adam_(pp, mm, vv, gg, a);
      ADD_FAILURE() << "accepted; expected an error containing " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused(p, zeros({4}), v, g, {}, "exp_avg has shape [4] but self has [3]");
  refused(p, m, m, g, {}, "exp_avg and exp_avg_sq share memory");
  refused(p, m, v, p, {}, "self and grad share memory");
  refused(p, m, v, ones({3}, kFloat64), {}, "expected self and grad to have the same dtype");
  refused(tensor(std::vector<int64_t>{1, 2, 3}), m.to(kInt64), v.to(kInt64), g.to(kInt64), {},
          "the parameter must be a floating tensor");
  FusedAdamArgs zero_bc;
  zero_bc.bias_correction2 = 0;
  refused(p, m, v, g, zero_bc, "bias corrections are 1 - beta^t, in (0, 1]; got 0");
  EXPECT_EQ(values(p), (std::vector<double>{1, 2, 3}));  // nothing was written
  FusedAdamArgs ok;  // the first step: the bias-corrected moments are g and g^2, so p -= lr * sign(g)
  ok.lr = 0.5;
  ok.bias_correction1 = 1 - ok.beta1;
  ok.bias_correction2 = 1 - ok.beta2;
  _fused_adam_(p, m, v, g, ok);  // the process goes on: a good call works
  const auto got = values(p);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(got[i], double(i + 1) - 0.5, 1e-6);
}

}  // namespace
}  // namespace tessera
