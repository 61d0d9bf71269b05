// Compiled training steps (Note [Program state] in ir.h, Note [Capturable optimizers] in nn.h):
// tessera::compile of a function that runs forward, backward and the optimizer step captures one
// program (the forward, the backward the engine ran, the update) that writes the parameters, the
// optimizer's state and the .grad of the parameters as the eager step does. Each test trains two
// copies of a model from the same seed, one eagerly and one through the compiled step, and compares
// every loss, parameter, gradient and state after every step.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <any>
#include <filesystem>
#include <functional>
#include <string>

#include "tessera/autograd/function.h"
#include "tessera/compiler/compile.h"
#include "tessera/compiler/export.h"
#include "tessera/compiler/ir.h"
#include "tessera/compiler/program_file.h"
#include "tessera/nn.h"

namespace tessera {
namespace {

namespace ag = autograd;
namespace optim = nn::optim;

struct Mlp : nn::Module {
  explicit Mlp(nn::Options o = {})
      : l1(register_module("l1", std::make_shared<nn::Linear>(8, 32, true, o))),
        l2(register_module("l2", std::make_shared<nn::Linear>(32, 4, true, o))) {}
  Tensor forward(const Tensor& x) const { return l2->forward(relu(l1->forward(x))); }
  std::shared_ptr<nn::Linear> l1, l2;
};

// The largest |a - b| over the elements relative to the largest |b| (the tensor's scale), read back
// in double (host loops). Float32 rounding differs between the compiled and the eager step (fused
// loops, FMA), and Adam divides by sqrt(v): an element whose gradient is near zero moves by about
// lr either way, so a per-element relative measure would judge noise.
double max_rel_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  const Tensor x = a.cpu().to(kFloat64).contiguous(), y = b.cpu().to(kFloat64).contiguous();
  const double* px = x.data_ptr<double>();
  const double* py = y.data_ptr<double>();
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    worst = std::max(worst, std::abs(px[i] - py[i]));
    scale = std::max(scale, std::abs(py[i]));
  }
  return worst / (scale + 1e-12);
}

// Every parameter and its .grad of `model` against `reference`'s.
void expect_same_parameters(const nn::Module& model, const nn::Module& reference, double tol, int step) {
  const auto ours = model.named_parameters(), theirs = reference.named_parameters();
  ASSERT_EQ(ours.size(), theirs.size());
  for (size_t i = 0; i < ours.size(); ++i) {
    EXPECT_LT(max_rel_diff(ours[i].second, theirs[i].second), tol) << ours[i].first << " after step " << step;
    const Tensor g = ag::grad(ours[i].second), want = ag::grad(theirs[i].second);
    ASSERT_EQ(g.defined(), want.defined()) << ours[i].first;
    if (want.defined()) {
      EXPECT_LT(max_rel_diff(g, want), tol) << "grad of " << ours[i].first << " after step " << step;
    }
  }
}

using LossFn = std::function<Tensor(const std::vector<Tensor>&)>;

// A training step with `opt` on the loss `loss_of` computes from the inputs: zero_grad (unless told
// not to), the loss, backward, step, then `after`; returns the loss (from before the update). The
// tests call it eagerly on one copy of a model and compile it on the other.
ExportFn train_step(optim::Optimizer& opt, LossFn loss_of, bool zero_grad = true, std::function<void()> after = {}) {
  return [&opt, loss_of = std::move(loss_of), zero_grad, after = std::move(after)](const std::vector<Tensor>& in) {
    if (zero_grad) opt.zero_grad();
    Tensor loss = loss_of(in);
    ag::backward(loss);
    opt.step();
    if (after) after();
    return std::vector<Tensor>{loss};
  };
}

// train_step of `model`'s cross entropy on (x, y).
ExportFn mlp_step(Mlp& model, optim::Optimizer& opt, bool zero_grad = true, std::function<void()> after = {}) {
  return train_step(
      opt, [&model](const std::vector<Tensor>& in) { return nn::cross_entropy(model.forward(in[0]), in[1]); },
      zero_grad, std::move(after));
}

// Capturing `fn` on `data` fails with a message that contains `says`.
void expect_capture_refused(const ExportFn& fn, const nn::Dataset& data, const std::string& says) {
  try {
    (void)export_program(fn, {data.x, data.y});
    ADD_FAILURE() << "captured; expected an error that says " << says;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

std::string last_backend;  // of the last train_both's artifact

CompileOptions options(const std::string& backend) {
  CompileOptions o;
  o.backend = backend;
  o.name = "train_step";
  return o;
}

// Trains `eager_model` with `eager_opt` and `model` with the compiled step over `opt` for `steps`
// steps on one batch; `between` runs after each step on both sides (a schedule). Returns the stats.
CompileStats train_both(Mlp& eager_model, optim::Optimizer& eager_opt, Mlp& model, optim::Optimizer& opt,
                        const nn::Dataset& data, int steps, const std::string& backend,
                        const std::function<void()>& between = {}) {
  CompiledFunction compiled = compile(mlp_step(model, opt), options(backend));
  const ExportFn eager = mlp_step(eager_model, eager_opt);
  for (int s = 0; s < steps; ++s) {
    std::vector<Tensor> out = compiled({data.x, data.y});
    const double loss = eager({data.x, data.y})[0].item<double>();
    EXPECT_EQ(out.size(), 1u);  // the state updates are not outputs of the compiled function
    EXPECT_NEAR(out[0].item<double>(), loss, 1e-5 * std::abs(loss)) << "step " << s;
    expect_same_parameters(model, eager_model, 2e-4, s);
    if (between) between();
  }
  last_backend = compiled.artifacts().at(0).backend;
  return compiled.stats();
}

class CompiledStep : public ::testing::TestWithParam<std::string> {};

TEST_P(CompiledStep, AdamMatchesTheEagerStepEveryStep) {
  const nn::Dataset data = nn::make_classification(256, 8, 4);
  manual_seed(7);
  Mlp eager_model;
  manual_seed(7);
  Mlp model;
  optim::Adam eager_opt(eager_model.parameters(), {.lr = 0.02});
  optim::Adam opt(model.parameters(), {.lr = 0.02, .capturable = true});
  const CompileStats st = train_both(eager_model, eager_opt, model, opt, data, 20, GetParam());
  EXPECT_EQ(st.compiles, 1);  // captured once, replayed 19 times
  EXPECT_EQ(last_backend, GetParam());
  EXPECT_EQ(st.cache_hits, 19);
  EXPECT_EQ(st.eager_calls, 0);
}

TEST_P(CompiledStep, AdamWWithAScheduleBetweenTheCalls) {
  const nn::Dataset data = nn::make_classification(256, 8, 4, 9);
  manual_seed(3);
  Mlp eager_model;
  manual_seed(3);
  Mlp model;
  optim::AdamW eager_opt(eager_model.parameters(), {.lr = 0.03, .weight_decay = 0.05});
  optim::AdamW opt(model.parameters(), {.lr = 0.03, .weight_decay = 0.05, .capturable = true});
  optim::StepLR eager_sched(eager_opt, 3, 0.5), sched(opt, 3, 0.5);
  const CompileStats st = train_both(eager_model, eager_opt, model, opt, data, 12, GetParam(), [&] {
    eager_sched.step();
    sched.step();
  });
  EXPECT_EQ(st.compiles, 1);  // the lr is a tensor the program reads, not a constant of it
  EXPECT_EQ(last_backend, GetParam());
  EXPECT_DOUBLE_EQ(opt.lr(), 0.03 * 0.0625);  // 12 epochs of StepLR(3, 0.5)
}

TEST_P(CompiledStep, SgdWithMomentumDampeningAndNesterov) {
  const nn::Dataset data = nn::make_classification(256, 8, 4, 11);
  for (const optim::SGDOptions& o :
       {optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.25, .weight_decay = 1e-3},
        optim::SGDOptions{.lr = 0.05, .momentum = 0.8, .nesterov = true}, optim::SGDOptions{.lr = 0.2}}) {
    SCOPED_TRACE(testing::Message() << "momentum " << o.momentum << " dampening " << o.dampening << " nesterov "
                                    << o.nesterov);
    manual_seed(5);
    Mlp eager_model;
    manual_seed(5);
    Mlp model;
    optim::SGD eager_opt(eager_model.parameters(), o);
    optim::SGDOptions c = o;
    c.capturable = true;
    optim::SGD opt(model.parameters(), c);
    const CompileStats st = train_both(eager_model, eager_opt, model, opt, data, 8, GetParam());
    EXPECT_EQ(st.compiles, 1);
    EXPECT_EQ(last_backend, GetParam());
  }
}

// Plain tensors through matmul: its backward reads w^T, a permute of a parameter that constant
// folding must not freeze (Note [Program state]: the parameters are live weights).
TEST_P(CompiledStep, MatmulOfParametersMatchesTheEagerStep) {
  const nn::Dataset data = nn::make_classification(64, 6, 3, 13);
  auto make = [] {
    manual_seed(8);
    std::vector<Tensor> w{ag::set_requires_grad(randn({6, 16}) * 0.4), ag::set_requires_grad(randn({16, 3}) * 0.4)};
    return w;
  };
  std::vector<Tensor> ew = make(), w = make();
  optim::AdamW eager_opt(ew, {.lr = 0.03, .weight_decay = 0.01});
  optim::AdamW opt(w, {.lr = 0.03, .weight_decay = 0.01, .capturable = true});
  auto loss_of = [](const std::vector<Tensor>& p) {
    return [&p](const std::vector<Tensor>& in) { return nn::cross_entropy(matmul(relu(matmul(in[0], p[0])), p[1]), in[1]); };
  };
  CompiledFunction compiled = compile(train_step(opt, loss_of(w)), options(GetParam()));
  const ExportFn eager = train_step(eager_opt, loss_of(ew));
  for (int s = 0; s < 10; ++s) {
    const double ours = compiled({data.x, data.y})[0].item<double>();
    const double loss = eager({data.x, data.y})[0].item<double>();
    EXPECT_NEAR(ours, loss, 1e-5 * loss) << "step " << s;
    for (size_t i = 0; i < w.size(); ++i) {
      EXPECT_LT(max_rel_diff(w[i], ew[i]), 2e-4) << "w" << i << " after step " << s;
      EXPECT_LT(max_rel_diff(ag::grad(w[i]), ag::grad(ew[i])), 2e-4) << "grad of w" << i << " after step " << s;
    }
  }
  EXPECT_EQ(compiled.artifacts().at(0).backend, GetParam());
}

// A custom function (PyTorch 2.1's autograd.Function under torch.compile): its forward and its
// backward are made of contract ops, so both are traced into the program, not graph-broken.
struct ScaledTanh : ag::Function<ScaledTanh> {
  static int forward_calls, backward_calls;
  static Tensor forward(ag::AutogradContext* ctx, const Tensor& x, double scale) {
    ++forward_calls;
    ctx->saved_data["scale"] = scale;
    Tensor y = tanh(x) * scale;
    ctx->save_for_backward({y});
    return y;
  }
  static std::vector<Tensor> backward(ag::AutogradContext* ctx, std::vector<Tensor> grads) {
    ++backward_calls;
    const double scale = std::any_cast<double>(ctx->saved_data["scale"]);
    const Tensor y = ctx->get_saved_variables()[0];
    // d/dx scale * tanh(x) = scale * (1 - tanh^2) = scale - y^2 / scale
    return {grads[0] * (scale - y * y / scale), Tensor()};
  }
};
int ScaledTanh::forward_calls = 0;
int ScaledTanh::backward_calls = 0;

TEST_P(CompiledStep, ACustomFunctionIsTracedForwardAndBackward) {
  const nn::Dataset data = nn::make_classification(64, 8, 4, 17);
  manual_seed(9);
  Mlp eager_model;
  manual_seed(9);
  Mlp model;
  optim::Adam eager_opt(eager_model.parameters(), {.lr = 0.02});
  optim::Adam opt(model.parameters(), {.lr = 0.02, .capturable = true});
  auto loss_of = [](const Mlp& m) {
    return [&m](const std::vector<Tensor>& in) {
      return nn::cross_entropy(m.l2->forward(ScaledTanh::apply(m.l1->forward(in[0]), 1.5)), in[1]);
    };
  };
  CompiledFunction compiled = compile(train_step(opt, loss_of(model)), options(GetParam()));
  const ExportFn eager = train_step(eager_opt, loss_of(eager_model));
  ScaledTanh::forward_calls = ScaledTanh::backward_calls = 0;
  for (int s = 0; s < 6; ++s) {
    const double ours = compiled({data.x, data.y})[0].item<double>();
    const double loss = eager({data.x, data.y})[0].item<double>();
    EXPECT_NEAR(ours, loss, 1e-5 * loss) << "step " << s;
    expect_same_parameters(model, eager_model, 2e-4, s);
  }
  // Six eager steps and one capture: the compiled replays run neither the forward nor the backward.
  EXPECT_EQ(ScaledTanh::forward_calls, 7);
  EXPECT_EQ(ScaledTanh::backward_calls, 7);
  EXPECT_EQ(compiled.stats().compiles, 1);
  EXPECT_EQ(compiled.artifacts().at(0).backend, GetParam());
}

// A pre-norm transformer block (layer_norm, causal SDPA, GELU MLP: the step bench_train_step times)
// with a mean-square loss, whose backward starts by expanding the filled root gradient (a view of a
// tensor the capture wrote, read as a view of its new value) and goes through the backward of
// select (a write through a view, captured as a scatter).
struct Block : nn::Module {
  explicit Block(int64_t d)
      : d(d),
        ln1(register_module("ln1", std::make_shared<nn::LayerNorm>(std::vector<int64_t>{d}))),
        qkv(register_module("qkv", std::make_shared<nn::Linear>(d, 3 * d))),
        proj(register_module("proj", std::make_shared<nn::Linear>(d, d))),
        ln2(register_module("ln2", std::make_shared<nn::LayerNorm>(std::vector<int64_t>{d}))),
        fc1(register_module("fc1", std::make_shared<nn::Linear>(d, 4 * d))),
        fc2(register_module("fc2", std::make_shared<nn::Linear>(4 * d, d))) {}
  Tensor forward(const Tensor& x) const {
    const int64_t b = x.size(0), t = x.size(1), h = 2;
    const Tensor all = qkv->forward(ln1->forward(x)).reshape({b, t, 3, h, d / h}).permute({2, 0, 3, 1, 4});
    const Tensor a = scaled_dot_product_attention(all.select(0, 0), all.select(0, 1), all.select(0, 2), std::nullopt, true);
    const Tensor r = x + proj->forward(a.transpose(1, 2).reshape({b, t, d}));
    return r + fc2->forward(gelu(fc1->forward(ln2->forward(r))));
  }
  int64_t d;
  std::shared_ptr<nn::LayerNorm> ln1;
  std::shared_ptr<nn::Linear> qkv, proj;
  std::shared_ptr<nn::LayerNorm> ln2;
  std::shared_ptr<nn::Linear> fc1, fc2;
};

// Trains two copies of Block(16) from one seed on the mean square of its output, one eagerly and one
// through the compiled step (backend `backend`), one step per input, comparing the losses and every
// parameter after each step. SGD: Adam would turn the rounding noise of gradients that are zero in
// exact arithmetic (the key bias's: softmax ignores a constant per query) into steps of lr in either
// direction. Returns the compiled function (its stats and artifacts) and the first and last loss.
struct BlockRun {
  CompileStats stats;
  std::vector<ArtifactInfo> artifacts;
  double first = 0, last = 0;
};
BlockRun train_blocks(const std::string& backend, const std::vector<Tensor>& inputs) {
  manual_seed(4);
  Block eager_block(16);
  manual_seed(4);
  Block block(16);
  optim::SGD eager_opt(eager_block.parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::SGD opt(block.parameters(), {.lr = 0.05, .momentum = 0.9, .capturable = true});
  auto mean_square = [](const Block& b) {
    return [&b](const std::vector<Tensor>& in) {
      const Tensor y = b.forward(in[0]);
      return (y * y).mean();
    };
  };
  CompiledFunction compiled = compile(train_step(opt, mean_square(block)), options(backend));
  const ExportFn eager = train_step(eager_opt, mean_square(eager_block));
  BlockRun run;
  for (size_t s = 0; s < inputs.size(); ++s) {
    const double ours = compiled({inputs[s]})[0].item<double>();
    const double loss = eager({inputs[s]})[0].item<double>();
    EXPECT_NEAR(ours, loss, 1e-5 * loss) << "step " << s << ", input " << inputs[s].sizes();
    expect_same_parameters(block, eager_block, 5e-4, int(s));
    (s == 0 ? run.first : run.last) = loss;
  }
  run.stats = compiled.stats();
  run.artifacts = compiled.artifacts();
  return run;
}

TEST_P(CompiledStep, ATransformerBlockWithAMeanSquareLoss) {
  manual_seed(12);
  const BlockRun run = train_blocks(GetParam(), std::vector<Tensor>(8, randn({2, 8, 16})));
  EXPECT_LT(run.last, run.first);  // it trains
  EXPECT_EQ(run.stats.compiles, 1);
  EXPECT_EQ(run.artifacts.at(0).backend, GetParam());  // captured, not run eagerly
}

// var over the batch (a batch statistic) under a declared dynamic batch: its backward's count
// (n - 1) comes from the input at run time, not from the example's 32.
TEST(CompiledStep, TheVarianceOverADynamicBatchCountsTheRunsBatch) {
  manual_seed(6);
  Mlp eager_model;
  manual_seed(6);
  Mlp model;
  optim::SGD eager_opt(eager_model.parameters(), {.lr = 0.05});
  optim::SGD opt(model.parameters(), {.lr = 0.05, .capturable = true});
  auto spread = [](Mlp& m) {
    return [&m](const std::vector<Tensor>& in) {
      const Tensor y = m.forward(in[0]);
      return var(y, {0}).sum() + mean(y);  // (the mean gives the biases a gradient; var's is zero)
    };
  };
  ExportOptions eo;
  eo.dynamic_shapes = {{{0, Dim{"batch", 2, 512}}}};
  manual_seed(40);
  compiler::ExportedProgram ep = export_program(train_step(opt, spread(model)), {randn({32, 8})}, eo);
  const ExportFn eager = train_step(eager_opt, spread(eager_model));
  for (int64_t b : {5, 77, 32}) {
    const Tensor x = randn({b, 8});
    const double ours = ep.run({x})[0].item<double>();
    const double loss = eager({x})[0].item<double>();
    EXPECT_NEAR(ours, loss, 1e-5 * loss) << "batch " << b;
    expect_same_parameters(model, eager_model, 2e-4, int(b));
  }
}

// A small CNN (conv2d, relu, max_pool2d, avg_pool2d, linear) under a declared dynamic batch: the
// pools' backward keeps the batch symbolic.
TEST(CompiledStep, ACnnWithPoolsTrainsAtAnyBatchSize) {
  struct Cnn : nn::Module {
    Cnn()
        : conv(register_module("conv", std::make_shared<nn::Conv2d>(2, 4, 3, 1, 1))),
          fc(register_module("fc", std::make_shared<nn::Linear>(4 * 2 * 2, 3))) {}
    Tensor forward(const Tensor& x) const {
      const Tensor h = avg_pool2d(max_pool2d(relu(conv->forward(x)), {2, 2}), {2, 2});  // 8x8 -> 4x4 -> 2x2
      return fc->forward(h.reshape({x.size(0), 4 * 2 * 2}));
    }
    std::shared_ptr<nn::Conv2d> conv;
    std::shared_ptr<nn::Linear> fc;
  };
  manual_seed(3);
  Cnn eager_model;
  manual_seed(3);
  Cnn model;
  optim::SGD eager_opt(eager_model.parameters(), {.lr = 0.05, .momentum = 0.5});
  optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.5, .capturable = true});
  auto loss_of = [](Cnn& m) {
    return [&m](const std::vector<Tensor>& in) { return nn::cross_entropy(m.forward(in[0]), in[1]); };
  };
  ExportOptions eo;
  eo.dynamic_shapes = {{{0, Dim{"batch", 2, 256}}}, {{0, Dim{"batch", 2, 256}}}};
  manual_seed(50);
  compiler::ExportedProgram ep =
      export_program(train_step(opt, loss_of(model)), {randn({6, 2, 8, 8}), argmax(randn({6, 3}), 1)}, eo);
  EXPECT_NE(ep.graph_string().find("f32[batch, 2, 8, 8]"), std::string::npos);
  const ExportFn eager = train_step(eager_opt, loss_of(eager_model));
  for (int64_t b : {3, 10, 6}) {
    const Tensor x = randn({b, 2, 8, 8}), y = argmax(randn({b, 3}), 1);
    const double ours = ep.run({x, y})[0].item<double>();
    const double loss = eager({x, y})[0].item<double>();
    EXPECT_NEAR(ours, loss, 1e-5 * loss) << "batch " << b;
    const auto a = model.named_parameters(), e = eager_model.named_parameters();
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_LT(max_rel_diff(a[i].second, e[i].second), 2e-4) << a[i].first << " at batch " << b;
  }
}

// BatchNorm2d in a compiled step: its batch statistics are ops of the program and its running
// statistics and batch count are state the program writes back, at any batch size (declared dynamic).
TEST_P(CompiledStep, BatchNormRunningStatisticsAreProgramState) {
  struct Net : nn::Module {
    Net()
        : conv(register_module("conv", std::make_shared<nn::Conv2d>(2, 4, 3, 1, 1, false))),  // a bias before a BN
          bn(register_module("bn", std::make_shared<nn::BatchNorm2d>(4))),  // has a zero gradient: rounding noise
          fc(register_module("fc", std::make_shared<nn::Linear>(4, 3))) {}
    Tensor forward(const Tensor& x) const { return fc->forward(mean(relu(bn->forward(conv->forward(x))), {2, 3})); }
    std::shared_ptr<nn::Conv2d> conv;
    std::shared_ptr<nn::BatchNorm2d> bn;
    std::shared_ptr<nn::Linear> fc;
  };
  manual_seed(9);
  Net eager_model;
  manual_seed(9);
  Net model;
  optim::SGD eager_opt(eager_model.parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9, .capturable = true});
  auto loss_of = [](Net& m) {
    return [&m](const std::vector<Tensor>& in) { return nn::cross_entropy(m.forward(in[0]), in[1]); };
  };
  CompiledFunction compiled = compile(train_step(opt, loss_of(model)), options(GetParam()));
  const ExportFn eager = train_step(eager_opt, loss_of(eager_model));
  manual_seed(51);
  for (int64_t b : {8, 8, 5, 12}) {
    const Tensor x = randn({b, 2, 6, 6}) + 0.5, y = argmax(randn({b, 3}), 1);
    const double ours = compiled({x, y})[0].item<double>();
    const double loss = eager({x, y})[0].item<double>();
    EXPECT_NEAR(ours, loss, 1e-5 * loss) << "batch " << b;
    expect_same_parameters(model, eager_model, 2e-4, int(b));
    EXPECT_LT(max_rel_diff(model.bn->running_mean, eager_model.bn->running_mean), 1e-5) << "batch " << b;
    EXPECT_LT(max_rel_diff(model.bn->running_var, eager_model.bn->running_var), 1e-5) << "batch " << b;
  }
  EXPECT_EQ(model.bn->num_batches_tracked.item<int64_t>(), 4);
  EXPECT_EQ(compiled.stats().compiles, 2);  // 8, then the batch symbolic for 5 and 12
  EXPECT_EQ(compiled.stats().eager_calls, 0);
}

// A compiled forward and backward without an optimizer, whose parameter appears only through a view
// (w.t()): autograd reports the leaf its traced gradient went to, so the program sets w's .grad as
// the eager backward does.
TEST_P(CompiledStep, AParameterSeenOnlyThroughAViewGetsItsGrad) {
  manual_seed(21);
  const Tensor w0 = randn({3, 4});
  Tensor w = ag::set_requires_grad(w0.clone()), eager_w = ag::set_requires_grad(w0.clone());
  auto loss_and_grad = [](Tensor& p) -> ExportFn {
    return [&p](const std::vector<Tensor>& in) {
      ag::set_grad(p, Tensor());
      Tensor loss = tanh(matmul(in[0], p.t())).sum();
      ag::backward(loss);
      return std::vector<Tensor>{loss};
    };
  };
  CompiledFunction compiled = compile(loss_and_grad(w), options(GetParam()));
  const ExportFn eager = loss_and_grad(eager_w);
  for (int s = 0; s < 3; ++s) {
    const Tensor x = randn({5, 4});
    const double ours = compiled({x})[0].item<double>();
    const double loss = eager({x})[0].item<double>();
    EXPECT_NEAR(ours, loss, 1e-5 * std::abs(loss)) << "call " << s;
    ASSERT_TRUE(ag::grad(w).defined());
    EXPECT_LT(max_rel_diff(ag::grad(w), ag::grad(eager_w)), 1e-5) << "call " << s;
  }
  EXPECT_EQ(compiled.stats().compiles, 1);
  EXPECT_EQ(compiled.artifacts().at(0).backend, GetParam());
}

// A transformer block at other batch and sequence lengths: the second shape captures both dims
// symbolic (the attention's select of q, k and v from one projection, their gradients padded back
// into it, the causal mask of the backward and the linears' gradients over [batch, seq] keep them
// symbolic), and the third shape runs on that program. Each step equals the eager step.
TEST_P(CompiledStep, ATransformerBlockAtOtherBatchAndSequenceLengths) {
  manual_seed(13);
  const BlockRun run =
      train_blocks(GetParam(), {randn({2, 8, 16}), randn({3, 5, 16}), randn({4, 11, 16}), randn({2, 8, 16})});
  EXPECT_EQ(run.stats.compiles, 2);  // [2, 8], then batch and seq symbolic (from 2: size 1 specialises)
  EXPECT_EQ(run.stats.eager_calls, 0);
  for (const ArtifactInfo& a : run.artifacts) EXPECT_EQ(a.backend, GetParam()) << a.inputs;
  EXPECT_NE(run.artifacts.back().inputs.find("f32[s0, s1, 16]"), std::string::npos) << run.artifacts.back().inputs;
}

// Another batch size (Note [Dynamic sizes in backward formulas]): the first call captures the batch
// static, the second captures it again with the batch dim symbolic, and that program serves every
// later batch size: the loss's mean, its gradient broadcast back over the batch and the linears'
// gradients take the batch from the inputs at run time. Each step equals the eager step.
TEST_P(CompiledStep, ADynamicBatchServesEveryBatchSize) {
  const std::vector<nn::Dataset> data = {nn::make_classification(64, 8, 4, 21), nn::make_classification(48, 8, 4, 22),
                                         nn::make_classification(17, 8, 4, 23), nn::make_classification(5, 8, 4, 24)};
  manual_seed(10);
  Mlp eager_model;
  manual_seed(10);
  Mlp model;
  optim::Adam eager_opt(eager_model.parameters(), {.lr = 0.02});
  optim::Adam opt(model.parameters(), {.lr = 0.02, .capturable = true});
  CompiledFunction compiled = compile(mlp_step(model, opt), options(GetParam()));
  const ExportFn eager = mlp_step(eager_model, eager_opt);
  for (int s = 0; s < 7; ++s) {
    const nn::Dataset& d = data[size_t(s % 4)];
    const double ours = compiled({d.x, d.y})[0].item<double>();
    const double loss = eager({d.x, d.y})[0].item<double>();
    EXPECT_NEAR(ours, loss, 1e-5 * loss) << "step " << s << ", batch " << d.x.size(0);
    expect_same_parameters(model, eager_model, 2e-4, s);
  }
  const CompileStats st = compiled.stats();
  EXPECT_EQ(st.compiles, 2);  // 64, then the batch dim symbolic, which serves 48, 17, 5 and 64 again
  EXPECT_EQ(st.eager_calls, 0);
  ASSERT_EQ(compiled.artifacts().size(), 2u);
  EXPECT_EQ(compiled.artifacts()[1].backend, GetParam());
  EXPECT_EQ(compiled.artifacts()[1].inputs.find("[64"), std::string::npos) << compiled.artifacts()[1].inputs;
}

// The same with the batch declared dynamic at export: one program whose inputs have a symbolic batch,
// a mean square loss (mean over every dim), SGD; run at batch sizes other than the example's.
TEST(CompiledStep, AnExportedStepWithADeclaredBatchRunsAtOtherBatchSizes) {
  manual_seed(2);
  Mlp eager_model;
  manual_seed(2);
  Mlp model;
  optim::SGD eager_opt(eager_model.parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9, .capturable = true});
  auto mse = [](Mlp& m) {
    return [&m](const std::vector<Tensor>& in) { return nn::mse_loss(m.forward(in[0]), in[1]); };
  };
  ExportOptions eo;
  eo.dynamic_shapes = {{{0, Dim{"batch", 1, 1024}}}, {{0, Dim{"batch", 1, 1024}}}};
  manual_seed(30);
  compiler::ExportedProgram ep = export_program(train_step(opt, mse(model)), {randn({32, 8}), randn({32, 4})}, eo);
  EXPECT_NE(ep.graph_string().find("f32[batch, 8]"), std::string::npos);
  const ExportFn eager = train_step(eager_opt, mse(eager_model));
  for (int64_t b : {7, 100, 1, 32}) {
    const Tensor x = randn({b, 8}), y = randn({b, 4});
    const double ours = ep.run({x, y})[0].item<double>();
    const double loss = eager({x, y})[0].item<double>();
    EXPECT_NEAR(ours, loss, 1e-5 * loss) << "batch " << b;
    expect_same_parameters(model, eager_model, 2e-4, int(b));
  }
}

// A step with a GradScaler (Note [Gradient scaler], capturable): the scale, the skip of a step
// whose gradients overflowed and the next scale are ops of the one program, so the compiled step
// skips, backs off and grows exactly where the eager step with the host scaler does.
TEST_P(CompiledStep, AGradScalerStepSkipsAndScalesInsideTheProgram) {
  const nn::Dataset data = nn::make_classification(64, 8, 4, 31);
  manual_seed(8);
  Mlp eager_model;
  manual_seed(8);
  Mlp model;
  optim::Adam eager_opt(eager_model.parameters(), {.lr = 0.02});
  optim::Adam opt(model.parameters(), {.lr = 0.02, .capturable = true});
  nn::GradScaler eager_scaler({.init_scale = 1e38, .growth_interval = 3});
  nn::GradScaler scaler({.init_scale = 1e38, .growth_interval = 3, .capturable = true});
  auto scaled_step = [](Mlp& m, optim::Optimizer& o, nn::GradScaler& sc) -> ExportFn {
    return [&m, &o, &sc](const std::vector<Tensor>& in) {
      o.zero_grad();
      Tensor loss = nn::cross_entropy(m.forward(in[0]), in[1]);
      ag::backward(sc.scale(loss));
      sc.step(o);
      sc.update();
      return std::vector<Tensor>{loss};
    };
  };
  CompiledFunction compiled = compile(scaled_step(model, opt, scaler), options(GetParam()));
  const ExportFn eager = scaled_step(eager_model, eager_opt, eager_scaler);
  int skipped = 0;
  for (int s = 0; s < 12; ++s) {
    const double before = eager_scaler.get_scale();
    const double ours = compiled({data.x, data.y})[0].item<double>();
    const double loss = eager({data.x, data.y})[0].item<double>();
    EXPECT_NEAR(ours, loss, 1e-5 * loss) << "step " << s;
    EXPECT_EQ(scaler.get_scale(), eager_scaler.get_scale()) << "step " << s;
    EXPECT_EQ(scaler.growth_tracker(), eager_scaler.growth_tracker()) << "step " << s;
    expect_same_parameters(model, eager_model, 2e-4, s);
    if (eager_scaler.get_scale() < before) ++skipped;
  }
  EXPECT_GT(skipped, 0);                              // 1e38 overflows the gradients at first
  EXPECT_GT(eager_scaler.get_scale(), 0);
  EXPECT_EQ(compiled.stats().compiles, 1);           // the skips are not host decisions
  EXPECT_EQ(compiled.artifacts().at(0).backend, GetParam());
}

// The joint program: the forward, the backward the engine ran (the relu's mask, the matmuls of the
// linears' gradients) and the update, with one state update per parameter, per Adam moment and per
// running product of the betas, and one .grad per parameter.
TEST(CompiledStep, TheProgramHoldsForwardBackwardAndUpdate) {
  const nn::Dataset data = nn::make_classification(64, 8, 4);
  manual_seed(1);
  Mlp model;
  optim::Adam opt(model.parameters(), {.lr = 0.01, .capturable = true});
  const ExportFn step = mlp_step(model, opt);
  const std::vector<Tensor> before = [&] {
    std::vector<Tensor> v;
    for (const Tensor& p : model.parameters()) v.push_back(p.clone());
    return v;
  }();
  compiler::ExportedProgram ep = export_program(step, {data.x, data.y});
  int writes = 0, grads = 0;
  for (const compiler::StateUpdate& u : ep.state) (u.kind == compiler::StateUpdate::Kind::Grad ? grads : writes)++;
  EXPECT_EQ(grads, 4);            // l1.weight, l1.bias, l2.weight, l2.bias
  EXPECT_EQ(writes, 4 + 8 + 2);   // the parameters, m and v of each, beta1^t and beta2^t
  const std::string text = ep.graph_string();
  EXPECT_NE(text.find("relu("), std::string::npos);
  EXPECT_NE(text.find("gt.Tensor("), std::string::npos);  // relu's backward
  EXPECT_NE(text.find("sqrt("), std::string::npos);       // Adam's update
  ASSERT_EQ(ep.signature.outputs.size(), 1 + ep.state.size());
  EXPECT_EQ(ep.signature.outputs[0].name, "output_0");
  EXPECT_EQ(ep.signature.outputs[1].name.rfind("updated_", 0), 0u) << ep.signature.outputs[1].name;
  EXPECT_EQ(ep.signature.outputs.back().name.rfind("grad_", 0), 0u) << ep.signature.outputs.back().name;
  // The capture computed nothing: the parameters are unchanged and have no .grad.
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(max_rel_diff(model.parameters()[i], before[i]), 0.0);
    EXPECT_FALSE(ag::grad(model.parameters()[i]).defined());
  }
  // Running the program steps the model once; ep.run returns fn's outputs only.
  std::vector<Tensor> out = ep.run({data.x, data.y});
  ASSERT_EQ(out.size(), 1u);
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_GT(max_rel_diff(model.parameters()[i], before[i]), 0.0);
    EXPECT_TRUE(ag::grad(model.parameters()[i]).defined());
  }
  // Its targets are live tensors: it is not saved.
  const std::string path = (std::filesystem::temp_directory_path() / "tessera_train_step.tsr").string();
  try {
    compiler::save(ep, path);
    ADD_FAILURE() << "a program with state was saved";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("state_dict"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

// A plain optimizer's step count and lr would be frozen by the capture: capturing it is an error
// that names the fix, and compile runs such a step eagerly (correct, with its warning).
TEST(CompiledStep, APlainOptimizerIsRefusedAndTheStepRunsEagerly) {
  const nn::Dataset data = nn::make_classification(64, 8, 4);
  manual_seed(2);
  Mlp model;
  optim::Adam opt(model.parameters(), {.lr = 0.01});
  expect_capture_refused(mlp_step(model, opt), data, "capturable = true");
  for (const Tensor& p : model.parameters()) EXPECT_FALSE(ag::grad(p).defined());  // restored after the failure
  manual_seed(2);
  Mlp eager_model;
  optim::Adam eager_opt(eager_model.parameters(), {.lr = 0.01});
  const CompileStats st = train_both(eager_model, eager_opt, model, opt, data, 3, "cpp");
  EXPECT_EQ(st.compiles, 1);
  EXPECT_EQ(last_backend, "eager");  // fn runs as it is
}

// The multi-tensor optimizer ops write a Tensor[] in place and have no outputs: a capture cannot
// trace them, and says which op to use instead; nothing is written.
TEST(CompiledStep, AMultiTensorStepIsRefusedByTheCapture) {
  const nn::Dataset data = nn::make_classification(16, 8, 4);
  Tensor p = tensor(std::vector<float>{1, 2, 3}), buf = zeros({3});
  const ExportFn fn = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    Tensor g = in[0].narrow(0, 0, 1).reshape({8}).narrow(0, 0, 3) * 1.0;
    _multi_tensor_sgd_({p}, {buf}, {g}, {.lr = 0.1, .momentum = 0.9});
    return {g};
  };
  expect_capture_refused(fn, data, "_multi_tensor_sgd_: writes its Tensor[] argument in place");
  EXPECT_EQ(max_rel_diff(p, tensor(std::vector<float>{1, 2, 3})), 0.0);
  EXPECT_EQ(max_rel_diff(buf, zeros({3})), 0.0);
}

// Gradients accumulated into the .grad from before the step would read it as a constant.
TEST(CompiledStep, AStepWithoutZeroGradIsRefusedAndTheGradsAreKept) {
  const nn::Dataset data = nn::make_classification(64, 8, 4);
  manual_seed(4);
  Mlp model;
  optim::SGD opt(model.parameters(), {.lr = 0.1, .capturable = true});
  ag::backward(nn::cross_entropy(model.forward(data.x), data.y));
  std::vector<Tensor> grads_before;
  for (const Tensor& p : model.parameters()) grads_before.push_back(ag::grad(p).clone());
  expect_capture_refused(mlp_step(model, opt, /*zero_grad=*/false), data, "zero_grad()");
  for (size_t i = 0; i < grads_before.size(); ++i)
    EXPECT_EQ(max_rel_diff(ag::grad(model.parameters()[i]), grads_before[i]), 0.0);
}

// A schedule stepped inside the compiled function would be frozen: set_lr refuses.
TEST(CompiledStep, SetLrInsideTheCaptureIsRefused) {
  const nn::Dataset data = nn::make_classification(64, 8, 4);
  Mlp model;
  optim::SGD opt(model.parameters(), {.lr = 0.1, .capturable = true});
  optim::ExponentialLR sched(opt, 0.9);
  expect_capture_refused(mlp_step(model, opt, true, [&] { sched.step(); }), data, "outside the compiled step");
}

// On a plugin device (the reference accelerator, through the interpreter): the same program.
TEST(CompiledStep, TrainsOnTheReferenceAccelerator) {
  if (device_count("my_hardware_device") == 0) GTEST_SKIP() << "the reference accelerator is not built";
  const Device dev("my_hardware_device");
  nn::Dataset data = nn::make_classification(128, 8, 4);
  data.x = data.x.to(dev);
  data.y = data.y.to(dev);
  manual_seed(6);
  Mlp eager_model;
  eager_model.to(dev);
  manual_seed(6);
  Mlp model;
  model.to(dev);
  optim::Adam eager_opt(eager_model.parameters(), {.lr = 0.02});
  optim::Adam opt(model.parameters(), {.lr = 0.02, .capturable = true});
  const CompileStats st = train_both(eager_model, eager_opt, model, opt, data, 10, "cpp");
  EXPECT_EQ(st.compiles, 1);
  EXPECT_EQ(last_backend, "interpreter");  // the cpp backend generates code for CPU values only
  for (const Tensor& p : model.parameters()) EXPECT_EQ(p.device().type(), dev.type());
}

INSTANTIATE_TEST_SUITE_P(Backends, CompiledStep, ::testing::Values("cpp", "interpreter"));



}  // namespace
}  // namespace tessera
