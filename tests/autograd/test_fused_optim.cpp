// The fused optimizer step (Note [Fused optimizer step] in tessera/nn.h): _fused_adam_'s CPU kernel
// and composite against the unfused step and against PyTorch's update written out in double; the
// reference accelerator's own kernel for it; the op's errors; and the same for the multi-tensor
// ops (_multi_tensor_adam_ / _multi_tensor_sgd_), which the optimizers call.
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

// ---- the multi-tensor ops: the whole parameter list in one call

// The parameters of one multi-tensor call: a large one (the parallel loop's chunks cross from one
// tensor into the next), many small ones, a 0-dim one and an empty one.
std::vector<std::vector<int64_t>> list_shapes() {
  std::vector<std::vector<int64_t>> shapes = {{300001}, {}, {0}, {129, 33}, {1}};
  for (int i = 0; i < 40; ++i) shapes.push_back({17 + i});
  return shapes;
}

std::vector<Tensor> random_list(std::mt19937& rng, const std::vector<std::vector<int64_t>>& shapes, DType dtype,
                                double lo, double hi) {
  std::vector<Tensor> out;
  for (const auto& s : shapes) out.push_back(testing::uniform64(rng, s, lo, hi).to(dtype));
  return out;
}

// Compares each tensor with its reference values (computed in double by the test), relative.
void expect_list_near(const std::vector<Tensor>& got, const std::vector<std::vector<double>>& want, double tol,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const auto g = values(got[i]);
    ASSERT_EQ(g.size(), want[i].size()) << what << " " << i;
    for (size_t j = 0; j < g.size(); ++j)
      ASSERT_NEAR(g[j], want[i][j], tol * (1 + std::fabs(want[i][j]))) << what << " " << i << " element " << j;
  }
}

std::vector<std::vector<double>> values_of(const std::vector<Tensor>& ts) {
  std::vector<std::vector<double>> out;
  for (const Tensor& t : ts) out.push_back(values(t));
  return out;
}

// One call of _multi_tensor_adam_ against PyTorch's Adam / AdamW update written out in double,
// element by element, in float32 and float64, on the CPU's kernel; and on a list holding a
// transposed parameter, which the kernel refuses and the composite (one _fused_adam_ each) runs.
TEST(MultiTensor, AdamUpdatesEveryParameterOfTheListLikePyTorch) {
  std::mt19937 rng(std::random_device{}());
  Dispatcher& d = Dispatcher::instance();
  ASSERT_TRUE(ensure_backend_loaded(DeviceType::CPU));
  EXPECT_EQ(d.resolution(d.op("_multi_tensor_adam_"), DeviceType::CPU, kFloat32), Resolution::Kernel);
  EXPECT_EQ(d.resolution(d.op("_multi_tensor_adam_"), DeviceType::CPU, kFloat64), Resolution::Kernel);
  for (DType dtype : {kFloat32, kFloat64}) {
    for (bool transposed : {false, true}) {
      for (bool decoupled : {false, true}) {
        auto shapes = list_shapes();
        if (transposed) shapes = {{9, 17}, {5}};
        std::vector<Tensor> p = random_list(rng, shapes, dtype, -1, 1), m = random_list(rng, shapes, dtype, -1, 1);
        std::vector<Tensor> v = random_list(rng, shapes, dtype, 0, 2), g = random_list(rng, shapes, dtype, -3, 3);
        if (transposed) p[0] = p[0].t().contiguous().t();  // same values, column-major
        auto pv = values_of(p), mv = values_of(m), vv = values_of(v);
        const auto gv = values_of(g);
        const FusedAdamArgs a{.lr = 0.01, .beta1 = 0.8, .beta2 = 0.99, .weight_decay = 0.05, .eps = 1e-6,
                              .bias_correction1 = 0.36, .bias_correction2 = 0.0199, .decoupled_weight_decay = decoupled};
        _multi_tensor_adam_(p, m, v, g, a);
        for (size_t i = 0; i < pv.size(); ++i)
          for (size_t j = 0; j < pv[i].size(); ++j) {
            double gg = gv[i][j];
            if (decoupled) pv[i][j] *= 1 - a.lr * a.weight_decay;
            else gg += a.weight_decay * pv[i][j];
            mv[i][j] = a.beta1 * mv[i][j] + (1 - a.beta1) * gg;
            vv[i][j] = a.beta2 * vv[i][j] + (1 - a.beta2) * gg * gg;
            pv[i][j] -= a.lr / a.bias_correction1 * mv[i][j] / (std::sqrt(vv[i][j] / a.bias_correction2) + a.eps);
          }
        const double tol = dtype == kFloat64 ? 1e-12 : 2e-5;
        const std::string what = std::string(dtype_name(dtype)) + (transposed ? " transposed" : "") +
                                 (decoupled ? " adamw" : " adam");
        expect_list_near(p, pv, tol, what + " param");
        expect_list_near(m, mv, tol, what + " exp_avg");
        expect_list_near(v, vv, tol, what + " exp_avg_sq");
        EXPECT_EQ(p[0].is_contiguous(), !transposed);
      }
    }
  }
}

// SGD with momentum likewise, every mode of the kernel (weight decay, first step, Nesterov,
// dampening), against PyTorch's update in double.
TEST(MultiTensor, SgdUpdatesEveryParameterOfTheListLikePyTorch) {
  std::mt19937 rng(std::random_device{}());
  ASSERT_TRUE(ensure_backend_loaded(DeviceType::CPU));
  EXPECT_EQ(Dispatcher::instance().resolution(Dispatcher::instance().op("_multi_tensor_sgd_"), DeviceType::CPU,
                                              kFloat32),
            Resolution::Kernel);
  for (DType dtype : {kFloat32, kFloat64}) {
    for (int mode = 0; mode < 8; ++mode) {
      const bool decay = mode & 4, first = mode & 2, nesterov = mode & 1;
      const auto shapes = list_shapes();
      std::vector<Tensor> p = random_list(rng, shapes, dtype, -1, 1), buf = random_list(rng, shapes, dtype, -1, 1);
      const std::vector<Tensor> g = random_list(rng, shapes, dtype, -3, 3);
      auto pv = values_of(p), bv = values_of(buf);
      const auto gv = values_of(g);
      const FusedSgdArgs a{.lr = 0.05, .momentum = 0.9, .dampening = nesterov ? 0.0 : 0.25,
                           .weight_decay = decay ? 0.01 : 0.0, .nesterov = nesterov, .first_step = first};
      _multi_tensor_sgd_(p, buf, g, a);
      for (size_t i = 0; i < pv.size(); ++i)
        for (size_t j = 0; j < pv[i].size(); ++j) {
          const double dd = gv[i][j] + a.weight_decay * pv[i][j];
          bv[i][j] = first ? dd : a.momentum * bv[i][j] + (1 - a.dampening) * dd;
          pv[i][j] -= a.lr * (nesterov ? dd + a.momentum * bv[i][j] : bv[i][j]);
        }
      const double tol = dtype == kFloat64 ? 1e-13 : 2e-6;
      const std::string what = std::string(dtype_name(dtype)) + " mode " + std::to_string(mode);
      expect_list_near(p, pv, tol, what + " param");
      expect_list_near(buf, bv, tol, what + " momentum_buffer");
    }
  }
}

// A device whose launches are costly registers the list op: the reference accelerator's
// _multi_tensor_sgd_ updates the whole model in one launch per step (no per-parameter launches),
// with the CPU's results. Its Adam goes through the list op's composite to its _fused_adam_ kernel
// (FusedAdam.TheAcceleratorsOwnKernelRunsTheStep).
TEST(MultiTensor, TheAcceleratorsListKernelIsOneLaunchPerStep) {
  if (device_count(accel_test::kAccel) == 0) GTEST_SKIP() << "the reference accelerator is not built";
  std::mt19937 rng(std::random_device{}());
  const Device dev(accel_test::kAccel);
  Dispatcher& d = Dispatcher::instance();
  EXPECT_EQ(d.resolution(d.op("_multi_tensor_sgd_"), dev.type(), kFloat32), Resolution::Kernel);
  const uint32_t seed = rng();
  std::vector<Tensor> on_cpu = make_params(rng, kFloat32, Device("cpu"), false), on_dev;
  for (const Tensor& p : on_cpu) on_dev.push_back(nn::parameter(ag::detach(p).to(dev)));
  auto a = sgd(on_cpu, 0.1, false, 0.01, true), b = sgd(on_dev, 0.1, false, 0.01, true);
  const int64_t launches = accel_test::kernel_count("_multi_tensor_sgd_");
  ASSERT_GE(launches, 0) << "the accelerator reports no counter for _multi_tensor_sgd_";
  run_steps(*a, on_cpu, 5, seed);
  run_steps(*b, on_dev, 5, seed);
  synchronize(dev);
  EXPECT_EQ(accel_test::kernel_count("_multi_tensor_sgd_") - launches, 5);
  for (size_t i = 0; i < on_cpu.size(); ++i) EXPECT_LT(max_rel_diff(on_dev[i], on_cpu[i]), 2e-6) << "param " << i;
}

// Bad lists are refused with what was wrong, before anything is written; the versions of the
// written tensors move on a good call.
TEST(MultiTensor, BadListsAreRefusedAndChangeNothing) {
  Tensor p = tensor(std::vector<float>{1, 2, 3}), q = tensor(std::vector<float>{4, 5});
  Tensor mp = zeros({3}), vp = zeros({3}), mq = zeros({2}), vq = zeros({2}), gp = ones({3}), gq = ones({2});
  const FusedAdamArgs ok{.lr = 0.5, .bias_correction1 = 0.1, .bias_correction2 = 0.001};
  using L = std::vector<Tensor>;
  auto refused = [&](const L& ps, const L& ms, const L& vs, const L& gs, const FusedAdamArgs& a,
                     const std::string& needle) {
    const std::string e = testing::error_of([&] { _multi_tensor_adam_(ps, ms, vs, gs, a); });
    EXPECT_NE(e.find(needle), std::string::npos) << e;
  };
  refused({p, q}, {mp, mq}, {vp, vq}, {gp}, ok, "2 parameters but 1 grads");
  refused({p, q}, {mq, mp}, {vp, vq}, {gp, gq}, ok, "exp_avg 0 has shape [2] but parameter 0 has [3]");
  refused({p, q}, {mp, mq}, {vp, vq}, {gp, gq.to(kFloat64)}, ok, "grad 1 is float64");
  refused({p, q}, {mp, mq}, {vp, vq}, {gp, q}, ok, "tensors 1 and 7 share memory");
  refused({p, p}, {mp, mp}, {vp, vp}, {gp, gp}, ok, "share memory");
  refused({p.to(kInt64)}, {mp.to(kInt64)}, {vp.to(kInt64)}, {gp.to(kInt64)}, ok, "parameters must be floating");
  refused({zeros({1}).expand({3})}, {mp}, {vp}, {gp}, ok, "refer to a single memory location");
  FusedAdamArgs zero_bc = ok;
  zero_bc.bias_correction1 = 0;
  refused({p, q}, {mp, mq}, {vp, vq}, {gp, gq}, zero_bc, "bias corrections are 1 - beta^t, in (0, 1]; got 0");
  EXPECT_EQ(values(p), (std::vector<double>{1, 2, 3}));  // nothing was written
  EXPECT_EQ(values(q), (std::vector<double>{4, 5}));
  EXPECT_EQ(values(mp), (std::vector<double>{0, 0, 0}));
  const std::string sgd_error =
      testing::error_of([&] { _multi_tensor_sgd_({p}, {mp, mq}, {gp}, {}); });
  EXPECT_NE(sgd_error.find("1 parameters but 2 momentum_buffers"), std::string::npos) << sgd_error;
  // The process goes on: a good call writes every parameter and bumps each written version. The
  // first step's bias-corrected moments are g and g^2, so each parameter moves by lr * sign(g).
  const uint64_t before = ag::version(q);
  FusedAdamArgs first = ok;
  first.bias_correction1 = 1 - first.beta1;
  first.bias_correction2 = 1 - first.beta2;
  _multi_tensor_adam_({p, q}, {mp, mq}, {vp, vq}, {gp, gq}, first);
  const auto got_p = values(p), got_q = values(q);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(got_p[i], double(i + 1) - 0.5, 1e-6);
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(got_q[i], double(i + 4) - 0.5, 1e-6);
  EXPECT_GT(ag::version(q), before);
  _multi_tensor_adam_({}, {}, {}, {}, ok);  // an empty list is a no-op
  // Parameters carved from one buffer are fine as long as their elements do not meet.
  Tensor flat = zeros({10}, kFloat64);
  const FusedSgdArgs plain{.lr = 0.5, .momentum = 0.9, .first_step = true};
  _multi_tensor_sgd_({flat.narrow(0, 0, 4), flat.narrow(0, 4, 6)}, {zeros({4}, kFloat64), zeros({6}, kFloat64)},
                     {ones({4}, kFloat64), ones({6}, kFloat64)}, plain);
  EXPECT_EQ(values(flat), std::vector<double>(10, -0.5));  // buf = g = 1, p -= 0.5 * 1
  const std::string overlap = testing::error_of([&] {
    _multi_tensor_sgd_({flat.narrow(0, 0, 5), flat.narrow(0, 4, 6)}, {zeros({5}, kFloat64), zeros({6}, kFloat64)},
                       {ones({5}, kFloat64), ones({6}, kFloat64)}, plain);
  });
  EXPECT_NE(overlap.find("tensors 0 and 1 share memory"), std::string::npos) << overlap;
  EXPECT_EQ(values(flat), std::vector<double>(10, -0.5));
  // An optimizer given one parameter twice would step it twice: refused when it is made.
  Tensor w = nn::parameter(zeros({3}));
  const std::string twice = testing::error_of([&] { optim::SGD opt({w, q, w}, {.lr = 0.1}); });
  EXPECT_NE(twice.find("parameters 0 and 2 are the same tensor"), std::string::npos) << twice;
}

}  // namespace
}  // namespace tessera
