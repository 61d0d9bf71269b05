// Modules, the state dict, optimizers (against hand-computed PyTorch update rules) and clipping.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "gradcheck.h"
#include "tessera/nn.h"

namespace tessera {
namespace {

namespace ag = autograd;

std::vector<double> vals(const Tensor& t) { return testing::values(t); }

TEST(Modules, LinearParametersAndForward) {
  manual_seed(0);
  nn::Linear lin(4, 3);
  auto named = lin.named_parameters();
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[0].first, "weight");
  EXPECT_EQ(named[1].first, "bias");
  EXPECT_EQ(lin.weight.sizes(), IntArrayRef({3, 4}));
  EXPECT_TRUE(ag::requires_grad(lin.weight));
  for (double v : vals(lin.weight)) EXPECT_LE(std::abs(v), 0.5);  // U(-1/sqrt(4), 1/sqrt(4))
  Tensor x = ones({2, 4});
  Tensor y = lin.forward(x);
  EXPECT_TRUE(allclose(y, matmul(x, lin.weight.t()) + lin.bias, 1e-5, 1e-6));
  ag::backward(y.sum());
  EXPECT_TRUE(allclose(ag::grad(lin.bias), full({3}, 2.0)));
  lin.zero_grad();
  EXPECT_FALSE(ag::grad(lin.bias).defined());
  EXPECT_ANY_THROW(nn::Linear(0, 3));
}

TEST(Modules, StateDictRoundTripsThroughSafetensors) {
  manual_seed(1);
  nn::Linear a(3, 2);
  nn::LayerNorm ln({2});
  const std::string path = ::testing::TempDir() + "autograd_state.safetensors";
  a.save(path);
  manual_seed(2);
  nn::Linear b(3, 2);
  EXPECT_FALSE(allclose(a.weight, b.weight));
  b.load(path);
  EXPECT_TRUE(equal(a.weight, b.weight));
  EXPECT_TRUE(equal(a.bias, b.bias));
  EXPECT_TRUE(ag::requires_grad(b.weight));
  EXPECT_ANY_THROW(ln.load(path));  // other names
  std::remove(path.c_str());
}

// Tied weights (one tensor in two modules, as a language model's embedding and output layer):
// parameters() lists it once, as PyTorch's, so an optimizer steps it once; the state dict keeps both
// names and loads back.
TEST(Modules, ATiedWeightIsOneParameterAndTwoStateDictEntries) {
  struct Tied : nn::Module {
    std::shared_ptr<nn::Linear> in = register_module("in", std::make_shared<nn::Linear>(4, 4, false));
    std::shared_ptr<nn::Linear> out = register_module("out", std::make_shared<nn::Linear>(4, 4));
  };
  manual_seed(3);
  Tied m;
  m.out->weight = m.in->weight;
  const auto named = m.named_parameters();
  ASSERT_EQ(named.size(), 2u);  // in.weight (also out.weight), out.bias
  EXPECT_EQ(named[0].first, "in.weight");
  EXPECT_EQ(named[1].first, "out.bias");
  nn::optim::SGD opt(m.parameters(), {.lr = 0.5, .momentum = 0.9});
  Tensor x = ones({1, 4});
  ag::backward(m.out->forward(m.in->forward(x)).sum());
  const std::vector<double> before = vals(m.in->weight), g = vals(ag::grad(m.in->weight));
  opt.step();  // the first step's buffer is the gradient: w -= 0.5 g, once
  const std::vector<double> after = vals(m.in->weight);
  for (size_t i = 0; i < before.size(); ++i) EXPECT_NEAR(after[i], before[i] - 0.5 * g[i], 1e-6) << i;
  const auto state = m.state_dict();
  EXPECT_EQ(state.size(), 3u);
  EXPECT_TRUE(state.count("out.weight") && equal(state.at("out.weight"), m.in->weight));
  m.load_state_dict(state);
}

TEST(Modules, EmbeddingAndLayerNormTrain) {
  manual_seed(3);
  nn::Embedding emb(5, 4);
  nn::LayerNorm ln({4});
  Tensor idx = tensor(std::vector<int64_t>{1, 1, 3});
  Tensor y = ln.forward(emb.forward(idx));
  ag::backward((y * y).sum() + y.sum());
  Tensor g = ag::grad(emb.weight);
  ASSERT_TRUE(g.defined());
  std::vector<double> gv = vals(g);
  for (int c = 0; c < 4; ++c) EXPECT_EQ(gv[size_t(c)], 0.0);  // row 0 never looked up
  EXPECT_TRUE(ag::grad(ln.weight).defined());
  EXPECT_TRUE(ag::grad(ln.bias).defined());
}

// BatchNorm2d against host loops in double: the training forward with the batch's statistics (the
// biased variance), the running statistics after two batches (the unbiased variance, momentum 0.1),
// the evaluation forward with them, the buffers in the state dict, and the gradient against central
// differences.
TEST(Modules, BatchNorm2dTrainsWithBatchStatisticsAndEvaluatesWithRunningOnes) {
  const int64_t n = 3, c = 2, h = 2, w = 3, per = n * h * w;
  manual_seed(11);
  nn::BatchNorm2d bn(c);
  {
    ag::NoGradGuard no_grad;
    bn.weight.copy_(tensor(std::vector<double>{1.5, -0.5}).to(kFloat32));
    bn.bias.copy_(tensor(std::vector<double>{0.25, 1.0}).to(kFloat32));
  }
  std::vector<double> run_mean{0, 0}, run_var{1, 1};
  const std::vector<double> gamma{1.5, -0.5}, beta{0.25, 1.0};
  for (int step = 0; step < 2; ++step) {
    const Tensor x = randn({n, c, h, w}) * 2.0 + 1.0;
    const std::vector<double> xs = vals(x), got = vals(bn.forward(x));
    for (int64_t ch = 0; ch < c; ++ch) {
      double sum = 0, sq = 0;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < h * w; ++k) sum += xs[size_t((i * c + ch) * h * w + k)];
      const double mu = sum / double(per);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < h * w; ++k) sq += std::pow(xs[size_t((i * c + ch) * h * w + k)] - mu, 2);
      const double var_b = sq / double(per), var_u = sq / double(per - 1);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < h * w; ++k) {
          const size_t at = size_t((i * c + ch) * h * w + k);
          EXPECT_NEAR(got[at], (xs[at] - mu) / std::sqrt(var_b + 1e-5) * gamma[size_t(ch)] + beta[size_t(ch)], 2e-5)
              << "step " << step << ", channel " << ch;
        }
      run_mean[size_t(ch)] = 0.9 * run_mean[size_t(ch)] + 0.1 * mu;
      run_var[size_t(ch)] = 0.9 * run_var[size_t(ch)] + 0.1 * var_u;
    }
  }
  for (int64_t ch = 0; ch < c; ++ch) {
    EXPECT_NEAR(vals(bn.running_mean)[size_t(ch)], run_mean[size_t(ch)], 1e-5);
    EXPECT_NEAR(vals(bn.running_var)[size_t(ch)], run_var[size_t(ch)], 1e-5);
  }
  EXPECT_EQ(vals(bn.num_batches_tracked)[0], 2.0);
  // Evaluation: the running statistics, and nothing updated.
  bn.eval();
  EXPECT_FALSE(bn.is_training());
  const Tensor x = randn({1, c, h, w});
  const std::vector<double> xs = vals(x), got = vals(bn.forward(x));
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t k = 0; k < h * w; ++k) {
      const size_t at = size_t(ch * h * w + k);
      EXPECT_NEAR(got[at],
                  (xs[at] - run_mean[size_t(ch)]) / std::sqrt(run_var[size_t(ch)] + 1e-5) * gamma[size_t(ch)] +
                      beta[size_t(ch)],
                  2e-5);
    }
  EXPECT_EQ(vals(bn.num_batches_tracked)[0], 2.0);
  // The buffers are state, not parameters.
  EXPECT_EQ(bn.parameters().size(), 2u);
  const auto state = bn.state_dict();
  EXPECT_EQ(state.size(), 5u);
  EXPECT_EQ(state.count("running_var"), 1u);
  EXPECT_EQ(state.count("num_batches_tracked"), 1u);
  nn::BatchNorm2d other(c);
  other.load_state_dict(state);
  EXPECT_TRUE(equal(other.running_var, bn.running_var));
  // Errors: a training batch with one value per channel, the wrong channel count.
  bn.train();
  const std::string one = testing::error_of([&] { bn.forward(randn({1, c, 1, 1})); });
  EXPECT_NE(one.find("more than 1 value per channel"), std::string::npos) << one;
  const std::string channels = testing::error_of([&] { bn.forward(randn({2, 3, 2, 2})); });
  EXPECT_NE(channels.find("expected input [N, 2, H, W]"), std::string::npos) << channels;
  // The gradient of the training forward (float64), through the batch statistics.
  nn::BatchNorm2d bn64(c, 1e-5, 0.1, true, nn::Options{Device(DeviceType::CPU), kFloat64});
  testing::gradcheck([&](const std::vector<Tensor>& in) { return bn64.forward(in[0]); },
                     {randn({n, c, h, w}).to(kFloat64)}, {0});
}

TEST(Optimizers, SGDMomentumNesterovWeightDecay) {
  // One parameter, gradient 2p each step: PyTorch's rule computed by hand.
  for (bool nesterov : {false, true}) {
    Tensor p = nn::parameter(tensor(std::vector<double>{1.0}));
    nn::optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = nesterov});
    double pv = 1.0, buf = 0;
    for (int step = 0; step < 3; ++step) {
      opt.zero_grad();
      ag::backward((p * p).sum());
      opt.step();
      const double d = 2 * pv + 0.01 * pv;
      buf = step == 0 ? d : 0.9 * buf + d;
      pv -= 0.1 * (nesterov ? d + 0.9 * buf : buf);
      EXPECT_NEAR(vals(p)[0], pv, 1e-12) << "step " << step << " nesterov " << nesterov;
    }
  }
}

TEST(Optimizers, AdamAndAdamW) {
  for (bool decoupled : {false, true}) {
    Tensor p = nn::parameter(tensor(std::vector<double>{0.5, -1.5}));
    nn::optim::AdamOptions o{.lr = 0.1, .weight_decay = 0.1};
    std::unique_ptr<nn::optim::Optimizer> opt;
    if (decoupled) opt = std::make_unique<nn::optim::AdamW>(std::vector<Tensor>{p}, o);
    else opt = std::make_unique<nn::optim::Adam>(std::vector<Tensor>{p}, o);
    std::vector<double> pv{0.5, -1.5}, m{0, 0}, v{0, 0};
    for (int t = 1; t <= 3; ++t) {
      opt->zero_grad();
      ag::backward((p * p * p).sum());  // gradient 3p^2
      opt->step();
      for (size_t i = 0; i < 2; ++i) {
        double g = 3 * pv[i] * pv[i];
        if (decoupled) pv[i] *= 1 - 0.1 * 0.1;
        else g += 0.1 * pv[i];
        m[i] = 0.9 * m[i] + 0.1 * g;
        v[i] = 0.999 * v[i] + 0.001 * g * g;
        const double mh = m[i] / (1 - std::pow(0.9, t)), vh = v[i] / (1 - std::pow(0.999, t));
        pv[i] -= 0.1 * mh / (std::sqrt(vh) + 1e-8);
        EXPECT_NEAR(vals(p)[i], pv[i], 1e-9) << "t " << t << " decoupled " << decoupled;
      }
    }
  }
}

TEST(Optimizers, LearningRateSchedules) {
  Tensor p = nn::parameter(tensor(std::vector<double>{1.0}));
  nn::optim::SGD opt({p}, {.lr = 0.8});
  nn::optim::StepLR step(opt, 2, 0.5);
  std::vector<double> lrs;
  for (int e = 0; e < 5; ++e) {
    step.step();
    lrs.push_back(opt.lr());
  }
  EXPECT_EQ(lrs, (std::vector<double>{0.8, 0.4, 0.4, 0.2, 0.2}));
  nn::optim::Adam adam({p}, {.lr = 1.0});
  nn::optim::CosineAnnealingLR cos(adam, 4, 0.1);
  cos.step();
  EXPECT_NEAR(adam.lr(), 0.1 + 0.9 * (1 + std::cos(M_PI / 4)) / 2, 1e-15);
  for (int e = 0; e < 3; ++e) cos.step();
  EXPECT_NEAR(adam.lr(), 0.1, 1e-15);
  EXPECT_ANY_THROW(nn::optim::StepLR(opt, 0));
}

// Worked by hand from PyTorch's closed forms (lr_scheduler.py's _get_closed_form_lr).
TEST(Optimizers, ExponentialMultiStepAndLinearSchedules) {
  Tensor p = nn::parameter(tensor(std::vector<double>{1.0}));
  auto run = [](nn::optim::Optimizer& o, nn::optim::LRScheduler& s, int n) {
    std::vector<double> lrs;
    for (int e = 0; e < n; ++e) {
      s.step();
      lrs.push_back(o.lr());
    }
    return lrs;
  };
  nn::optim::SGD a({p}, {.lr = 1.0});
  nn::optim::ExponentialLR exp_lr(a, 0.5);
  EXPECT_EQ(run(a, exp_lr, 3), (std::vector<double>{0.5, 0.25, 0.125}));
  nn::optim::SGD b({p}, {.lr = 2.0});
  nn::optim::MultiStepLR multi(b, {2, 4}, 0.5);
  EXPECT_EQ(run(b, multi, 5), (std::vector<double>{2.0, 1.0, 1.0, 0.5, 0.5}));  // epochs 1..5
  nn::optim::SGD c({p}, {.lr = 0.8});
  nn::optim::LinearLR warm(c, 0.25, 1.0, 3);
  EXPECT_DOUBLE_EQ(c.lr(), 0.2);  // base * start_factor from construction, as PyTorch
  const std::vector<double> w = run(c, warm, 4);  // 0.8 * (0.25 + 0.75 * min(e, 3) / 3)
  ASSERT_EQ(w.size(), 4u);
  EXPECT_DOUBLE_EQ(w[0], 0.4);
  EXPECT_DOUBLE_EQ(w[1], 0.6);
  EXPECT_DOUBLE_EQ(w[2], 0.8);
  EXPECT_DOUBLE_EQ(w[3], 0.8);
  EXPECT_ANY_THROW(nn::optim::MultiStepLR(b, {3, 3}));
  EXPECT_ANY_THROW(nn::optim::LinearLR(c, 0.0));
  EXPECT_ANY_THROW(nn::optim::ExponentialLR(a, 0.0));
}

// OneCycleLR worked by hand from lr_scheduler.py's OneCycleLR.get_lr (two phases): max_lr 1, 10
// steps, pct_start 0.3: initial 1/25, min 1/25/1e4, the rise ends at step 0.3 * 10 - 1 = 2.
TEST(Optimizers, OneCycleSchedule) {
  Tensor p = nn::parameter(tensor(std::vector<double>{1.0}));
  for (const bool cos : {true, false}) {
    nn::optim::SGD o({p}, {.lr = 123.0});
    nn::optim::OneCycleLR one(o, 1.0, 10, 0.3, cos);
    const double lo = 0.04, hi = 1.0, end = 0.04 / 1e4;
    auto anneal = [&](double a, double b, double pct) {
      return cos ? b + (a - b) / 2 * (1 + std::cos(M_PI * pct)) : a + (b - a) * pct;
    };
    std::vector<double> want{lo};  // step 0, set at construction
    for (int s = 1; s <= 9; ++s) want.push_back(s <= 2 ? anneal(lo, hi, s / 2.0) : anneal(hi, end, (s - 2) / 7.0));
    std::vector<double> got{o.lr()};
    for (int s = 1; s <= 9; ++s) {
      one.step();
      got.push_back(o.lr());
    }
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-15) << "step " << i << " cos " << cos;
    EXPECT_NEAR(got[1], 0.52, 1e-15);  // the middle of the rise, either shape
    EXPECT_NEAR(got[9], 4e-6, 1e-16);  // PyTorch linear: 4.000000000004e-06
    one.step();                      // step 10 = total_steps: allowed, as in PyTorch
    EXPECT_THROW(one.step(), Error);  // step 11: past total_steps
  }
  nn::optim::SGD o({p}, {.lr = 1.0});
  EXPECT_THROW(nn::optim::OneCycleLR(o, 1.0, 0), Error);
  EXPECT_THROW(nn::optim::OneCycleLR(o, 1.0, 10, 1.5), Error);
}

// ReduceLROnPlateau: the epochs worked by hand from lr_scheduler.py's ReduceLROnPlateau.step.
TEST(Optimizers, ReduceLROnPlateau) {
  Tensor p = nn::parameter(tensor(std::vector<double>{1.0}));
  nn::optim::SGD o({p}, {.lr = 1.0});
  nn::optim::ReduceLROnPlateau plateau(o, {.factor = 0.5, .patience = 2, .cooldown = 1, .min_lr = 0.2});
  // metric:        improves  flat  flat  flat: 3 bad > 2 -> 0.5, cooldown 1
  const std::vector<double> metrics{1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5};
  //  epoch 1: best 1.0, bad 0          lr 1.0
  //  epoch 2,3: bad 1, 2               lr 1.0
  //  epoch 4: bad 3 > 2 -> lr 0.5, cooldown 1, bad 0
  //  epoch 5: bad 1, then cooldown -> bad 0
  //  epoch 6,7: bad 1, 2; epoch 8: bad 3 -> lr 0.25, cooldown 1
  //  epoch 9: cooldown, bad 0; epoch 10, 11: bad 1, 2
  //  epoch 12: 0.5 < 1.0 * (1 - 1e-4): better, bad 0
  const std::vector<double> want{1, 1, 1, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25, 0.25};
  for (size_t e = 0; e < metrics.size(); ++e) {
    plateau.step(metrics[e]);
    EXPECT_DOUBLE_EQ(o.lr(), want[e]) << "epoch " << e + 1;
  }
  EXPECT_EQ(plateau.best(), 0.5);
  for (int e = 0; e < 8; ++e) plateau.step(0.5);  // two more reductions: 0.125 is below min_lr 0.2
  EXPECT_DOUBLE_EQ(o.lr(), 0.2);
  // mode "max" with an absolute threshold: 0.5 -> 0.55 is not better by 0.1, 0.7 is.
  nn::optim::SGD m({p}, {.lr = 1.0});
  nn::optim::ReduceLROnPlateau up(m, {.mode = "max", .factor = 0.1, .patience = 0, .threshold = 0.1,
                                      .threshold_mode = "abs"});
  up.step(0.5);
  EXPECT_DOUBLE_EQ(m.lr(), 1.0);
  up.step(0.55);
  EXPECT_DOUBLE_EQ(m.lr(), 0.1);
  up.step(0.7);
  EXPECT_DOUBLE_EQ(m.lr(), 0.1);
  EXPECT_THROW(nn::optim::ReduceLROnPlateau(m, {.mode = "lowest"}), Error);
  EXPECT_THROW(nn::optim::ReduceLROnPlateau(m, {.factor = 1.0}), Error);
}

TEST(Optimizers, ClipGradNorm) {
  Tensor a = nn::parameter(tensor(std::vector<double>{1, 1}));
  Tensor b = nn::parameter(tensor(std::vector<double>{1}));
  ag::backward((a * 3.0).sum() + (b * 4.0).sum());  // grads (3, 3) and (4): norm sqrt(34)
  const double norm = nn::clip_grad_norm_({a, b}, 1.0);
  EXPECT_NEAR(norm, std::sqrt(34.0), 1e-12);
  const double after = std::sqrt(std::pow(vals(ag::grad(a))[0], 2) * 2 + std::pow(vals(ag::grad(b))[0], 2));
  EXPECT_NEAR(after, 1.0, 1e-5);
}

}  // namespace
}  // namespace tessera
