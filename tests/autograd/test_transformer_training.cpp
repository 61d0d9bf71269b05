// End to end: a 2-layer pre-norm transformer trained on a synthetic sequence task (each position
// predicts the token before it: attention must look one step back) on the CPU, the reference
// accelerator and OpenCL, and under bfloat16 autocast on the CPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "tessera/amp.h"
#include "tessera/nn.h"

namespace tessera {
namespace {

namespace ag = autograd;

constexpr int64_t kVocab = 8, kSeq = 8, kBatch = 64, kModel = 32, kHeads = 2, kHidden = 64;

struct Block : nn::Module {
  explicit Block(nn::Options o)
      : ln1(register_module("ln1", std::make_shared<nn::LayerNorm>(std::vector<int64_t>{kModel}, 1e-5, true, o))),
        q(register_module("q", std::make_shared<nn::Linear>(kModel, kModel, true, o))),
        k(register_module("k", std::make_shared<nn::Linear>(kModel, kModel, true, o))),
        v(register_module("v", std::make_shared<nn::Linear>(kModel, kModel, true, o))),
        proj(register_module("proj", std::make_shared<nn::Linear>(kModel, kModel, true, o))),
        ln2(register_module("ln2", std::make_shared<nn::LayerNorm>(std::vector<int64_t>{kModel}, 1e-5, true, o))),
        fc1(register_module("fc1", std::make_shared<nn::Linear>(kModel, kHidden, true, o))),
        fc2(register_module("fc2", std::make_shared<nn::Linear>(kHidden, kModel, true, o))) {}
  Tensor forward(const Tensor& x) const {
    const int64_t b = x.size(0), t = x.size(1), dh = kModel / kHeads;
    Tensor h = ln1->forward(x);
    auto heads = [&](const nn::Linear& l) { return l.forward(h).reshape({b, t, kHeads, dh}).transpose(1, 2); };
    Tensor a = scaled_dot_product_attention(heads(*q), heads(*k), heads(*v), std::nullopt, true)
                   .transpose(1, 2)
                   .reshape({b, t, kModel});
    Tensor r = x + proj->forward(a);
    return r + fc2->forward(gelu(fc1->forward(ln2->forward(r))));
  }
  std::shared_ptr<nn::LayerNorm> ln1;
  std::shared_ptr<nn::Linear> q, k, v, proj;
  std::shared_ptr<nn::LayerNorm> ln2;
  std::shared_ptr<nn::Linear> fc1, fc2;
};

struct Transformer : nn::Module {
  explicit Transformer(nn::Options o)
      : tok(register_module("tok", std::make_shared<nn::Embedding>(kVocab, kModel, o))),
        pos(register_module("pos", std::make_shared<nn::Embedding>(kSeq, kModel, o))),
        b1(register_module("b1", std::make_shared<Block>(o))),
        b2(register_module("b2", std::make_shared<Block>(o))),
        ln(register_module("ln", std::make_shared<nn::LayerNorm>(std::vector<int64_t>{kModel}, 1e-5, true, o))),
        head(register_module("head", std::make_shared<nn::Linear>(kModel, kVocab, true, o))) {}
  Tensor forward(const Tensor& ids, const Tensor& positions) const {
    Tensor x = tok->forward(ids) + pos->forward(positions);
    return head->forward(ln->forward(b2->forward(b1->forward(x))));  // [b, t, vocab]
  }
  std::shared_ptr<nn::Embedding> tok, pos;
  std::shared_ptr<Block> b1, b2;
  std::shared_ptr<nn::LayerNorm> ln;
  std::shared_ptr<nn::Linear> head;
};

// Token sequences from std::mt19937 (the same on every machine); the target of position i is the
// token at i - 1 (position 0: its own token).
std::pair<Tensor, Tensor> make_task(uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int64_t> ids(size_t(kBatch * kSeq)), target(ids.size());
  for (auto& v : ids) v = int64_t(gen() % uint32_t(kVocab));
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t i = 0; i < kSeq; ++i) target[size_t(b * kSeq + i)] = ids[size_t(b * kSeq + (i ? i - 1 : 0))];
  return {tensor(ids, {kBatch, kSeq}), tensor(target, {kBatch * kSeq})};
}

constexpr int kSteps = 50;
constexpr double kTargetLoss = 0.01;  // from about ln(8) = 2.08

std::vector<double> train(const std::string& device, bool autocast_bf16) {
  manual_seed(11);
  Transformer model(nn::Options{Device(DeviceType::CPU)});
  model.to(Device(device));
  auto [ids, target] = make_task(5);
  ids = ids.to(device);
  target = target.to(device);
  Tensor positions = arange(kSeq, TensorOptions(Device(device)).dtype(kInt64)).unsqueeze(0).expand({kBatch, kSeq});
  nn::optim::AdamW opt(model.parameters(), {.lr = 0.01, .weight_decay = 0.01});
  std::vector<double> losses;
  for (int s = 0; s < kSteps; ++s) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard g(Device(device).type(), kBFloat16, autocast_bf16);
      loss = nn::cross_entropy(model.forward(ids, positions).reshape({kBatch * kSeq, kVocab}), target);
    }
    ag::backward(loss);
    opt.step();
    losses.push_back(loss.cpu().item<double>());
  }
  return losses;
}

void expect_trains(const std::string& device, bool autocast_bf16 = false) {
  std::vector<double> l = train(device, autocast_bf16);
  std::printf("%s%s: loss %.4f -> %.4f in %d steps\n", device.c_str(), autocast_bf16 ? " (bf16 autocast)" : "",
              l.front(), l.back(), kSteps);
  EXPECT_GT(l.front(), 1.5);
  EXPECT_LT(l.back(), kTargetLoss);
  if (device == "cpu") {
    EXPECT_EQ(l, train(device, autocast_bf16));  // the same seed, the same losses
    return;
  }
  std::vector<double> cpu = train("cpu", false);
  for (size_t i = 0; i < l.size(); ++i) EXPECT_NEAR(l[i], cpu[i], 2e-3 + 2e-3 * cpu[i]) << "step " << i;
}

TEST(TransformerTraining, OnCpu) { expect_trains("cpu"); }
TEST(TransformerTraining, OnCpuUnderBfloat16Autocast) { expect_trains("cpu", true); }
TEST(TransformerTraining, OnTheReferenceAccelerator) {
  if (device_count("my_hardware_device") == 0) GTEST_SKIP() << "the reference accelerator is not built";
  expect_trains("my_hardware_device");
}
TEST(TransformerTraining, OnOpencl) {
  if (device_count("opencl") == 0) GTEST_SKIP() << "no OpenCL device";
  expect_trains("opencl");
}

}  // namespace
}  // namespace tessera
